//! The service's own files (its config file, which may hold the auth
//! token, and the policy file) are neither readable nor writable by
//! confined commands, directly or through a symlink, whether they live
//! inside the workspace or outside it. Through the real binary
//! (`toolsched serve --config … --policy-file …`), its real worker, as root.

use crate::support;

use std::path::Path;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;
use toolsched::sandbox::SandboxLevel;

const TOKEN: &str = "tok-5b1f0c9e-never-to-be-read";
const POLICY_MARK: &str = "policy-mark-77a1";

fn require_root_and_kernel() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "sandbox tests run as root");
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    assert!(
        probe.missing.is_empty(),
        "the kernel cannot enforce workspace_write: missing {}",
        probe.missing.join(", ")
    );
}

/// Writes the config (with the token) and the policy file into `dir`.
fn write_service_files(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let config = dir.join("toolsched.toml");
    std::fs::write(
        &config,
        format!("approval_mode = \"yolo\"\nauth_token = \"{TOKEN}\"\n"),
    )
    .unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        format!("# {POLICY_MARK}\n[[rule]]\nname = \"no-rm-rf\"\ncommand_prefix = \"rm -rf /\"\ndecision = \"deny\"\n"),
    )
    .unwrap();
    (config, policy)
}

async fn run(addr: std::net::SocketAddr, id: &str, command: &str) -> Vec<Event> {
    run_tool(addr, id, "run_shell_command", json!({ "command": command })).await
}

async fn run_tool(
    addr: std::net::SocketAddr,
    id: &str,
    tool: &str,
    args: serde_json::Value,
) -> Vec<Event> {
    let mut client = ToolSchedulerClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut req = tonic::Request::new(request("s", vec![call(id, tool, args)]));
    req.metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    collect(client.schedule_calls(req).await.unwrap().into_inner()).await
}

/// Every attempt fails as a sandbox denial, and neither secret shows up in
/// anything the server sent.
async fn assert_unreadable(addr: std::net::SocketAddr, commands: &[String]) {
    for command in commands {
        let events = run(addr, "c", command).await;
        let text = format!("{events:?}");
        assert!(!text.contains(TOKEN), "{command} read the token: {text}");
        assert!(
            !text.contains(POLICY_MARK),
            "{command} read the policy: {text}"
        );
        let (kind, message) = error_of(&events, "c");
        assert_eq!(kind, pb::ErrorType::SandboxDenied, "{command}: {message}");
    }
}

#[tokio::test]
async fn service_files_inside_the_workspace_are_neither_readable_nor_writable() {
    require_root_and_kernel();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let (config, policy) = write_service_files(&ws_path);
    std::fs::write(ws_path.join("README.txt"), "readable\n").unwrap();
    std::fs::create_dir(ws_path.join("sub")).unwrap();
    std::os::unix::fs::symlink(&config, ws_path.join("sub/link.toml")).unwrap();
    std::os::unix::fs::symlink("../policy.toml", ws_path.join("sub/rel-policy")).unwrap();
    let before = (
        std::fs::read(&config).unwrap(),
        std::fs::read(&policy).unwrap(),
    );
    let srv = Binary::start(
        &ws_path,
        &[
            "--config",
            config.to_str().unwrap(),
            "--policy-file",
            policy.to_str().unwrap(),
        ],
    );
    assert_unreadable(
        srv.addr,
        &[
            "cat toolsched.toml".into(),
            "cat sub/link.toml".into(),
            "cp toolsched.toml sub/copy && cat sub/copy".into(),
            "/usr/bin/python3 -c \"print(open('sub/link.toml').read())\"".into(),
            "cat policy.toml".into(),
            "cat sub/rel-policy".into(),
            "grep -r tok- .".into(),
            "echo 'auth_token = \"mine\"' >> toolsched.toml".into(),
            "unlink policy.toml".into(),
            "mv toolsched.toml sub/moved.toml".into(),
        ],
    )
    .await;
    assert_eq!(
        (
            std::fs::read(&config).unwrap(),
            std::fs::read(&policy).unwrap()
        ),
        before
    );
    // Everything else at the workspace root stays readable and listable.
    let events = run(srv.addr, "ok", "ls && cat README.txt").await;
    let out = success_output(&events, "ok");
    assert!(
        out.contains("policy.toml") && out.contains("readable\n"),
        "{out}"
    );
    // Nor do the file tools read or write them, by name, through a symlink
    // or a hard link (checked by inode on the opened file: a directory
    // swapped for a link to theirs in a race reaches them too), nor meet
    // them in a search (breakers' findings: read_file returned the token,
    // write_file emptied the policy file, in yolo).
    std::fs::hard_link(&config, ws_path.join("sub/hard.toml")).unwrap();
    for (tool, args) in [
        ("read_file", json!({"file_path": "sub/hard.toml"})),
        ("read_file", json!({"file_path": "toolsched.toml"})),
        ("read_file", json!({"file_path": "sub/link.toml"})),
        ("read_file", json!({"file_path": "sub/rel-policy"})),
        (
            "write_file",
            json!({"file_path": "policy.toml", "content": "# emptied\n"}),
        ),
        (
            "replace",
            json!({"file_path": "toolsched.toml", "old_string": "yolo", "new_string": "default"}),
        ),
    ] {
        let events = run_tool(srv.addr, "f", tool, args.clone()).await;
        let text = format!("{events:?}");
        assert!(
            !text.contains(TOKEN) && !text.contains(POLICY_MARK),
            "{tool} {args}: {text}"
        );
        let (kind, message) = error_of(&events, "f");
        assert_eq!(
            kind,
            pb::ErrorType::PermissionDenied,
            "{tool} {args}: {message}"
        );
        assert!(message.contains("toolsched's own files"), "{message}");
    }
    for (tool, args) in [
        ("grep_search", json!({"pattern": "tok-|policy-mark"})),
        ("glob", json!({"pattern": "**/*.toml"})),
    ] {
        let events = run_tool(srv.addr, "f", tool, args.clone()).await;
        let out = success_output(&events, "f");
        for secret in [TOKEN, POLICY_MARK, "toolsched.toml", "policy.toml"] {
            assert!(
                !out.contains(secret),
                "{tool} {args} showed {secret}: {out}"
            );
        }
    }
    assert_eq!(
        (
            std::fs::read(&config).unwrap(),
            std::fs::read(&policy).unwrap()
        ),
        before
    );
}

#[tokio::test]
async fn service_files_outside_the_workspace_are_not_readable_through_symlinks() {
    require_root_and_kernel();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    // /opt is readable by commands (a system directory): the config there
    // must still be left out.
    let etc = tempfile::Builder::new()
        .prefix("toolsched-config-")
        .tempdir_in("/opt")
        .unwrap();
    let (config, policy) = write_service_files(etc.path());
    std::os::unix::fs::symlink(&config, ws_path.join("c.toml")).unwrap();
    std::os::unix::fs::symlink(&policy, ws_path.join("p.toml")).unwrap();
    let srv = Binary::start(
        &ws_path,
        &[
            "--config",
            config.to_str().unwrap(),
            "--policy-file",
            policy.to_str().unwrap(),
        ],
    );
    let dir = etc.path().display();
    assert_unreadable(
        srv.addr,
        &[
            format!("cat {}", config.display()),
            "cat c.toml".into(),
            "cat p.toml".into(),
            format!("cat {dir}/policy.toml"),
            format!("grep -r 77a1 {dir}"),
        ],
    )
    .await;
}
