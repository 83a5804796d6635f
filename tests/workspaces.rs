//! Named workspaces (issue 18 item 1): with a workspaces root, each session
//! works in `root/<tenant>/<name>`, fixed for its life; the file tools and
//! the kernel (Landlock grants of a command name only its workspace) keep a
//! session of one workspace out of every other; ListWorkspaces and
//! GetSession show only the caller's tenant's. Two tenants with static
//! tokens, the real server and the real sandbox worker.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::json;
use support::*;
use toolsched::api::ServerOptions;
use toolsched::api::auth::{StaticToken, hash_hex};
use toolsched::api::pb;
use toolsched::sandbox::SandboxLevel;
use toolsched::scheduler::SchedulerConfig;
use toolsched::tenant::TenantConfig;
use toolsched::workspaces::WorkspacesConfig;

const A: &str = "token-of-tenant-a";
const B: &str = "token-of-tenant-b";

/// A server over a fresh workspaces root, tenants `acme` (token A) and
/// `beta` (token B); `acme` may use only `main` and `proj-*`.
struct Roots {
    server: TestServer,
    root: tempfile::TempDir,
}

impl Roots {
    async fn start(create: bool) -> Self {
        Self::with(create, yolo_confined()).await
    }

    async fn with(create: bool, base: SchedulerConfig) -> Self {
        let root = tempfile::tempdir().expect("root");
        let mut ws = WorkspacesConfig::new(root.path());
        ws.create = create;
        ws.tenants = vec![TenantConfig {
            name: "acme".into(),
            workspaces: vec!["main".into(), "proj-*".into()],
            ..Default::default()
        }];
        let tokens = [(A, "acme", "alice"), (B, "beta", "bob")]
            .into_iter()
            .map(|(token, tenant, principal)| StaticToken {
                sha256: hash_hex(token),
                tenant: tenant.into(),
                principal: principal.into(),
            })
            .collect();
        let server = TestServer::with_options(
            SchedulerConfig {
                workspaces: Some(ws),
                ..base
            },
            ServerOptions {
                auth_tokens: tokens,
                ..ServerOptions::default()
            },
        )
        .await;
        Self { server, root }
    }

    /// `root/<tenant>/<name>` (canonical, as the server sees it).
    fn dir(&self, tenant: &str, name: &str) -> PathBuf {
        std::fs::canonicalize(self.root.path())
            .expect("root")
            .join(tenant)
            .join(name)
    }

    async fn schedule(
        &self,
        token: &str,
        session: &str,
        workspace: &str,
        calls: Vec<pb::FunctionCall>,
    ) -> Result<tonic::Streaming<pb::ScheduleCallsResponse>, tonic::Status> {
        let req = pb::ScheduleCallsRequest {
            workspace: workspace.into(),
            ..request(session, calls)
        };
        self.server
            .client
            .clone()
            .schedule_calls(with_token(token, req))
            .await
            .map(tonic::Response::into_inner)
    }

    async fn run(
        &self,
        token: &str,
        session: &str,
        workspace: &str,
        calls: Vec<pb::FunctionCall>,
    ) -> Vec<Event> {
        collect(
            self.schedule(token, session, workspace, calls)
                .await
                .expect("scheduled"),
        )
        .await
    }
}

fn write(id: &str, path: &str, content: &str) -> pb::FunctionCall {
    call(
        id,
        "write_file",
        json!({"file_path": path, "content": content}),
    )
}

fn read(id: &str, path: &str) -> pb::FunctionCall {
    call(id, "read_file", json!({"file_path": path}))
}

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

fn content(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn each_tenants_main_is_its_own_directory_and_only_its_own_is_listed() {
    let t = Roots::start(true).await;
    let a = t
        .run(A, "s", "main", vec![write("w", "f.txt", "from A\n")])
        .await;
    assert_eq!(
        states(&a, "w"),
        ["validating", "scheduled", "executing", "success"]
    );
    let b = t
        .run(B, "s", "main", vec![write("w", "f.txt", "from B\n")])
        .await;
    assert_eq!(
        states(&b, "w"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(content(&t.dir("acme", "main").join("f.txt")), "from A\n");
    assert_eq!(content(&t.dir("beta", "main").join("f.txt")), "from B\n");
    // Created empty and private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(t.dir("acme", "main"))
        .expect("created")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    // A's read_file reads A's copy.
    let r = t.run(A, "s", "", vec![read("r", "f.txt")]).await;
    assert_eq!(success_output(&r, "r"), "from A\n");

    // B has a second workspace; A sees only its own.
    t.run(B, "other", "zeta", vec![write("w", "g.txt", "z\n")])
        .await;
    let mut client = t.server.client.clone();
    let list = |token| with_token(token, pb::ListWorkspacesRequest {});
    let a_list = client.list_workspaces(list(A)).await.expect("A lists");
    assert_eq!(a_list.get_ref().workspaces, ["main"]);
    assert!(!a_list.get_ref().truncated);
    let b_list = client.list_workspaces(list(B)).await.expect("B lists");
    assert_eq!(b_list.get_ref().workspaces, ["main", "zeta"]);

    // GetSession: the session's workspace; another tenant's is NOT_FOUND.
    let get = |token, id: &str| {
        with_token(
            token,
            pb::GetSessionRequest {
                session_id: id.into(),
            },
        )
    };
    let view = client
        .get_session(get(B, "other"))
        .await
        .expect("B's own")
        .into_inner();
    assert_eq!(
        view,
        pb::GetSessionResponse {
            session_id: "other".into(),
            workspace: "zeta".into(),
            approval_mode: pb::ApprovalMode::Yolo as i32,
            running_batch_id: String::new(),
            queued_batch_ids: vec![],
            owner_replica: String::new(),
        }
    );
    let err = client.get_session(get(A, "other")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert_eq!(err.message(), "no session 'other'");
    let never = client.get_session(get(A, "never")).await.unwrap_err();
    assert_eq!(never.code(), tonic::Code::NotFound);
    let info = client
        .get_server_info(with_token(A, pb::GetServerInfoRequest {}))
        .await
        .expect("info")
        .into_inner();
    assert_eq!(
        info.workspaces,
        Some(pb::WorkspacesInfo {
            named: true,
            create: true
        })
    );
}

#[tokio::test]
async fn get_session_shows_the_running_and_queued_batches() {
    // Default mode: the write waits for approval, the next batch queues.
    let t = Roots::with(true, SchedulerConfig::default()).await;
    let mut first = t
        .schedule(A, "s", "main", vec![write("w", "f.txt", "x\n")])
        .await
        .expect("first");
    let mut seen = Vec::new();
    await_prompt(&mut first, &mut seen, "w").await;
    let running = seen
        .iter()
        .find_map(|e| match e {
            Event::BatchAccepted(a) => Some(a.batch_id.clone()),
            _ => None,
        })
        .expect("accepted");
    let mut second = t
        .schedule(A, "s", "main", vec![read("r", "f.txt")])
        .await
        .expect("second");
    let queued = match second
        .message()
        .await
        .expect("stream")
        .expect("event")
        .event
    {
        Some(Event::BatchAccepted(a)) => a.batch_id,
        other => panic!("{other:?}"),
    };
    let view = t
        .server
        .client
        .clone()
        .get_session(with_token(
            A,
            pb::GetSessionRequest {
                session_id: "s".into(),
            },
        ))
        .await
        .expect("get")
        .into_inner();
    assert_eq!(view.workspace, "main");
    assert_eq!(view.approval_mode, pb::ApprovalMode::Default as i32);
    assert_eq!(view.running_batch_id, running);
    assert_eq!(view.queued_batch_ids, [queued]);
}

#[tokio::test]
async fn the_workspace_is_fixed_and_refusals_have_their_codes() {
    let t = Roots::start(false).await;
    std::fs::create_dir_all(t.dir("acme", "main")).expect("mkdir");
    let code = |r: Result<_, tonic::Status>| {
        let e = r.map(|_| ()).unwrap_err();
        (e.code(), e.message().to_string())
    };
    let calls = || vec![write("w", "f.txt", "x\n")];

    // Missing without --create-workspaces: NOT_FOUND, nothing created.
    let (c, m) = code(t.schedule(A, "s1", "proj-x", calls()).await);
    assert_eq!(c, tonic::Code::NotFound, "{m}");
    assert_eq!(
        m,
        "workspace 'proj-x' does not exist for tenant acme (the server creates none without --create-workspaces)"
    );
    assert!(!t.dir("acme", "proj-x").exists());
    // Not allowed by the tenant's globs: PERMISSION_DENIED naming it.
    let (c, m) = code(t.schedule(A, "s1", "secret", calls()).await);
    assert_eq!(c, tonic::Code::PermissionDenied, "{m}");
    assert!(m.contains("workspace 'secret'"), "{m}");
    // No workspace on a session's first batch: FAILED_PRECONDITION.
    let (c, m) = code(t.schedule(A, "s1", "", calls()).await);
    assert_eq!(c, tonic::Code::FailedPrecondition, "{m}");
    assert!(m.contains("ScheduleCallsRequest.workspace"), "{m}");
    // Bad names: INVALID_ARGUMENT, echoing a short prefix only.
    for (bad, why) in [
        ("..", "may not begin with '.'"),
        (".git", "may not begin with '.'"),
        ("../beta/main", "may hold only letters"),
        ("a b", "may hold only letters"),
    ] {
        let (c, m) = code(t.schedule(A, "s1", bad, calls()).await);
        assert_eq!(c, tonic::Code::InvalidArgument, "{bad}: {m}");
        assert!(m.starts_with(&format!("workspace '{bad}': ")), "{m}");
        assert!(m.contains(why), "{m}");
    }
    let long = "x".repeat(5000);
    let (c, m) = code(t.schedule(A, "s1", &long, calls()).await);
    assert_eq!(c, tonic::Code::InvalidArgument);
    assert!(m.len() < 300, "{m}");

    // A session in `main` stays there: another name later is refused
    // naming the session's, none keeps it.
    let first = t.run(A, "s1", "main", calls()).await;
    assert!(matches!(terminal(&first, "w"), State::Success(_)));
    std::fs::create_dir_all(t.dir("acme", "proj-1")).expect("mkdir");
    let (c, m) = code(t.schedule(A, "s1", "proj-1", calls()).await);
    assert_eq!(c, tonic::Code::FailedPrecondition, "{m}");
    assert_eq!(
        m,
        "session works in workspace 'main' for its whole life; this batch named 'proj-1'"
    );
    let again = t.run(A, "s1", "", vec![write("w2", "g.txt", "y\n")]).await;
    assert!(matches!(terminal(&again, "w2"), State::Success(_)));
    assert_eq!(content(&t.dir("acme", "main").join("g.txt")), "y\n");
    assert!(!t.dir("acme", "proj-1").join("g.txt").exists());
    // The same session id in the other tenant is another session.
    std::fs::create_dir_all(t.dir("beta", "proj-1")).expect("mkdir");
    let b = t.run(B, "s1", "proj-1", calls()).await;
    assert!(matches!(terminal(&b, "w"), State::Success(_)));
}

#[tokio::test]
async fn without_a_root_the_single_workspace_serves_and_names_are_refused() {
    let server = TestServer::with_config(yolo()).await;
    let mut client = server.client.clone();
    let e = client
        .schedule_calls(pb::ScheduleCallsRequest {
            workspace: "main".into(),
            ..request("s", vec![write("w", "f.txt", "x\n")])
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "workspace 'main' named, but this server has a single workspace (no --workspaces-root); leave workspace empty"
    );
    let e = client
        .list_workspaces(pb::ListWorkspacesRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    // The session of the single workspace: no workspace name.
    let events = server.run("s", vec![write("w", "f.txt", "x\n")]).await;
    assert!(matches!(terminal(&events, "w"), State::Success(_)));
    assert_eq!(content(&server.path("f.txt")), "x\n");
    let view = client
        .get_session(pb::GetSessionRequest {
            session_id: "s".into(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(view.workspace, "");
    let info = client
        .get_server_info(pb::GetServerInfoRequest {})
        .await
        .expect("info")
        .into_inner();
    assert_eq!(
        info.workspaces,
        Some(pb::WorkspacesInfo {
            named: false,
            create: false
        })
    );
    // The memory store: no other replica, no replica id.
    assert_eq!(info.replica_id, "");
}

#[tokio::test]
async fn file_tools_refuse_paths_into_another_workspace() {
    let t = Roots::start(true).await;
    // B's workspace with a file; A's with a symlink into B's.
    t.run(B, "s", "main", vec![write("w", "secret.txt", "B's\n")])
        .await;
    t.run(A, "s", "main", vec![write("w", "mine.txt", "A's\n")])
        .await;
    let b_dir = t.dir("beta", "main");
    std::os::unix::fs::symlink(&b_dir, t.dir("acme", "main").join("link")).expect("symlink");
    let b_secret = b_dir.join("secret.txt");
    let abs = b_secret.display().to_string();
    let calls = vec![
        read("r-abs", &abs),
        read("r-dots", "../../beta/main/secret.txt"),
        read("r-link", "link/secret.txt"),
        write("w-abs", &abs, "pwned\n"),
        write("w-dots", "../../beta/main/new.txt", "pwned\n"),
        write("w-link", "link/new.txt", "pwned\n"),
    ];
    let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
    let events = t.run(A, "s", "main", calls).await;
    for id in &ids {
        let (kind, message) = error_of(&events, id);
        assert_eq!(kind, pb::ErrorType::PathNotInWorkspace, "{id}: {message}");
    }
    assert_eq!(content(&b_secret), "B's\n");
    assert!(!b_dir.join("new.txt").exists());
}

#[tokio::test]
async fn a_command_cannot_read_or_write_another_workspace() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let t = Roots::start(true).await;
    t.run(B, "s", "main", vec![write("w", "secret.txt", "B's\n")])
        .await;
    let b_dir = t.dir("beta", "main");
    let b_secret = b_dir.join("secret.txt");
    let b = b_dir.display();
    // `tee`, not `>`: the policy already denies a redirection outside the
    // workspace; this is what only the kernel stops.
    let attempts = [
        ("read-abs", format!("cat {b}/secret.txt")),
        ("read-dots", "cat ../../beta/main/secret.txt".to_string()),
        ("list-abs", format!("ls {b}")),
        ("write-abs", format!("echo pwned | tee {b}/secret.txt")),
        ("write-new", format!("echo pwned | tee {b}/new.txt")),
        (
            "write-dots",
            "echo pwned | tee ../../beta/main/new.txt".to_string(),
        ),
        (
            "read-link",
            format!("ln -s {b} link-r && cat link-r/secret.txt"),
        ),
        (
            "write-link",
            format!("ln -sfn {b} link-w && echo pwned | tee link-w/secret.txt"),
        ),
    ];
    for (id, command) in &attempts {
        let events = t.run(A, id, "main", vec![shell("c", command)]).await;
        assert_eq!(
            states(&events, "c"),
            ["validating", "scheduled", "executing", "error"],
            "{id}: {events:?}"
        );
        let (kind, message) = error_of(&events, "c");
        assert_eq!(kind, pb::ErrorType::SandboxDenied, "{id}: {message}");
        assert!(message.contains("Permission denied"), "{id}: {message}");
        // `ls` exits 2 on an unreadable directory; cat and tee exit 1.
        let exit = if *id == "list-abs" { 2 } else { 1 };
        assert!(
            message.contains(&format!("(exit code {exit})")),
            "{id}: {message}"
        );
        assert!(!message.contains("B's"), "{id} read B's file: {message}");
    }
    assert_eq!(content(&b_secret), "B's\n");
    assert!(!b_dir.join("new.txt").exists());
    // The same commands work on A's own workspace (the boundary is B's, not
    // every path).
    let own = t
        .run(
            A,
            "own",
            "main",
            vec![shell("c", "echo mine > own.txt && cat own.txt")],
        )
        .await;
    assert_eq!(
        success_output(&own, "c"),
        "Command: echo mine > own.txt && cat own.txt\nDirectory: .\nOutput: mine\n"
    );
    assert_eq!(content(&t.dir("acme", "main").join("own.txt")), "mine\n");
    // The policy places redirections in the session's workspace too: one
    // into B's is outside it.
    let redirect = t
        .run(
            A,
            "redirect",
            "main",
            vec![shell("c", "echo pwned > ../../beta/main/secret.txt")],
        )
        .await;
    assert_eq!(states(&redirect, "c"), ["validating", "error"]);
    let (kind, message) = error_of(&redirect, "c");
    assert_eq!(kind, pb::ErrorType::PolicyViolation, "{message}");
    assert!(message.contains("outside the workspace"), "{message}");
    assert_eq!(content(&b_secret), "B's\n");
}

#[tokio::test]
async fn kept_output_of_a_workspace_session_is_read_back_by_that_session() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let cap = 1000;
    let base = SchedulerConfig {
        output: toolsched::sandbox::OutputLimits {
            max_bytes: cap,
            max_streamed_bytes: cap,
        },
        kept_output: toolsched::tools::kept::KeptOutputConfig {
            per_call: 1 << 20,
            per_session: 4 << 20,
            ..Default::default()
        },
        ..yolo_confined()
    };
    let t = Roots::with(true, base).await;
    let events = t.run(A, "s", "main", vec![shell("sh", "seq 1 2000")]).await;
    let result = match terminal(&events, "sh") {
        State::Success(s) => toolsched::api::convert::struct_to_json(s.result.expect("result")),
        other => panic!("{other:?}"),
    };
    let path = result["full_output_path"]
        .as_str()
        .expect("kept")
        .to_string();
    let back = t
        .run(
            A,
            "s",
            "",
            vec![call(
                "r",
                "read_file",
                json!({"file_path": path, "start_line": 1999, "end_line": 2000}),
            )],
        )
        .await;
    assert!(
        success_output(&back, "r").contains("1999\n2000"),
        "{back:?}"
    );
    // Another tenant's session (same client id) cannot read it, nor can
    // another session of the same tenant: the path opens nothing.
    for (token, session) in [(B, "s"), (A, "s2")] {
        let other = t.run(token, session, "main", vec![read("r", &path)]).await;
        let (kind, message) = error_of(&other, "r");
        assert_eq!(kind, pb::ErrorType::PathNotInWorkspace, "{message}");
        assert!(
            message.contains("is not a kept output of this session"),
            "{message}"
        );
    }
}

/// `grpcurl -plaintext -H <bearer> [-d DATA] ADDR METHOD`: (success, stdout,
/// stderr).
fn grpcurl(
    addr: &std::net::SocketAddr,
    token: &str,
    data: Option<&str>,
    method: &str,
) -> (bool, String, String) {
    let mut cmd = std::process::Command::new(venv_tool("grpcurl"));
    cmd.arg("-plaintext")
        .args(["-H", &format!("authorization: Bearer {token}")]);
    if let Some(data) = data {
        cmd.args(["-d", data]);
    }
    let out = cmd
        .arg(addr.to_string())
        .arg(format!("toolsched.v1.ToolScheduler/{method}"))
        .output()
        .expect("run grpcurl (bash tests/setup.sh installs it)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_binary_serves_workspaces_from_flags_and_config_as_the_readme_shows() {
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let config = dir.path().join("toolsched.toml");
    std::fs::write(
        &config,
        format!(
            "[[auth_tokens]]\nsha256 = \"{}\"\ntenant = \"acme\"\nprincipal = \"alice\"\n\n\
             [[auth_tokens]]\nsha256 = \"{}\"\ntenant = \"beta\"\nprincipal = \"bob\"\n\n\
             [[tenants]]\nname = \"acme\"\nworkspaces = [\"main\", \"proj-*\"]\n",
            hash_hex(A),
            hash_hex(B)
        ),
    )
    .expect("config");
    let single = dir.path().join("single");
    std::fs::create_dir(&single).expect("single");
    let bin = Binary::start(
        &single,
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--workspaces-root",
            root.to_str().expect("utf-8"),
            "--create-workspaces",
            "--approval-mode",
            "yolo",
        ],
    );
    let schedule = |workspace: &str| {
        format!(
            r#"{{"session_id":"s","workspace":"{workspace}","calls":[{{"id":"1","name":"write_file","args":{{"file_path":"hello.txt","content":"hi\n"}}}}]}}"#
        )
    };
    let (ok, out, err) = grpcurl(&bin.addr, A, Some(&schedule("main")), "ScheduleCalls");
    assert!(ok, "{err}");
    assert!(out.contains("\"batchCompleted\""), "{out}");
    assert_eq!(content(&root.join("acme/main/hello.txt")), "hi\n");
    assert!(!single.join("hello.txt").exists());

    let (ok, out, err) = grpcurl(&bin.addr, A, None, "ListWorkspaces");
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(listed, json!({"workspaces": ["main"]}));
    let (ok, out, err) = grpcurl(&bin.addr, B, None, "ListWorkspaces");
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).expect("json"),
        json!({})
    );

    let (ok, out, err) = grpcurl(&bin.addr, A, Some(r#"{"session_id":"s"}"#), "GetSession");
    assert!(ok, "{err}");
    let view: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(view["workspace"], "main");
    assert_eq!(view["approvalMode"], "APPROVAL_MODE_YOLO");
    let (ok, _, err) = grpcurl(&bin.addr, B, Some(r#"{"session_id":"s"}"#), "GetSession");
    assert!(!ok);
    assert!(err.contains("Code: NotFound"), "{err}");

    // The config's globs: acme may not use `secret`.
    let (ok, _, err) = grpcurl(
        &bin.addr,
        A,
        Some(&schedule("secret").replace("\"s\"", "\"s2\"")),
        "ScheduleCalls",
    );
    assert!(!ok);
    assert!(err.contains("Code: PermissionDenied"), "{err}");
    assert!(err.contains("workspace 'secret'"), "{err}");
    assert!(!root.join("acme/secret").exists());
}

/// The zygote prepares one Landlock ruleset per workspace and reuses it
/// (`src/sandbox/worker/prepared.rs`): a ruleset warmed by B's commands is
/// never the one A's commands get, before or after A's own was prepared.
#[tokio::test]
async fn a_command_cannot_reach_another_workspace_after_its_commands_ran() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let t = Roots::start(true).await;
    let b_dir = t.dir("beta", "main");
    let b = b_dir.display();
    // The secret's text, which no message to A may hold: a marker no
    // random temp directory name can contain by chance ("B1" did once).
    let secret = |i: usize| format!("beta-secret-{i}");
    let b_shell = |i: usize| {
        shell(
            "c",
            &format!("echo {} > secret.txt && cat secret.txt", secret(i)),
        )
    };
    for round in 0..2 {
        // B's commands run first: its ruleset is prepared (then reused).
        let events = t.run(B, "s", "main", vec![b_shell(round)]).await;
        assert!(
            success_output(&events, "c").ends_with(&format!("Output: {}\n", secret(round))),
            "{events:?}"
        );
        for (id, command, exit) in [
            ("read", format!("cat {b}/secret.txt"), 1),
            ("list", format!("ls {b}"), 2),
            ("write", format!("echo pwned | tee {b}/secret.txt"), 1),
            ("new", format!("echo pwned | tee {b}/new.txt"), 1),
        ] {
            let events = t.run(A, id, "main", vec![shell("c", &command)]).await;
            assert_eq!(
                states(&events, "c"),
                ["validating", "scheduled", "executing", "error"],
                "round {round} {id}: {events:?}"
            );
            let (kind, message) = error_of(&events, "c");
            assert_eq!(kind, pb::ErrorType::SandboxDenied, "{id}: {message}");
            assert!(message.contains("Permission denied"), "{id}: {message}");
            assert!(
                message.contains(&format!("(exit code {exit})")),
                "{id}: {message}"
            );
            assert!(!message.contains("beta-secret-"), "{id}: {message}");
        }
        // A's own workspace works with its own ruleset.
        let own = t
            .run(
                A,
                "own",
                "main",
                vec![shell("c", "echo mine > own.txt && cat own.txt")],
            )
            .await;
        assert!(
            success_output(&own, "c").ends_with("Output: mine\n"),
            "{own:?}"
        );
        assert_eq!(
            content(&b_dir.join("secret.txt")),
            format!("{}\n", secret(round))
        );
        assert!(!b_dir.join("new.txt").exists());
    }
}
