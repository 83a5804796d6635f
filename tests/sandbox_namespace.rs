//! The worker's private mount namespace, through the real gRPC server (yolo
//! mode) and the real worker:
//! - a protected path locks only itself: with `a/b/repo/.git`, files are
//!   created, removed and renamed in `a/b`, `a`, the workspace root and the
//!   repository root, while the `.git` stays read-only and neither the
//!   repository nor a directory above it can be renamed away (issue 11,
//!   item 11);
//! - other processes' `/proc/<pid>/cmdline` (the server's, a sibling
//!   command's, pid 1's) is not readable, the command's own is (item 13);
//! - with `sandbox_landlock_only` the server falls back to the piecewise
//!   Landlock grants and says so in GetServerInfo.
//!
//! Where the kernel or the user cannot make the namespace these tests say
//! so loudly and stop; as root (CI) it must be available.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::{SandboxConfig, SandboxLevel};
use toolsched::scheduler::SchedulerConfig;

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

/// Whether commands get the private mount namespace (and, with `proc`, the
/// private /proc); prints why not, loudly. As root both must be there.
fn namespace_available(proc: bool) -> bool {
    if !kernel_enforces(SandboxLevel::WorkspaceWrite) {
        return false;
    }
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let ok = probe.mount_namespace && (!proc || probe.proc_hidden);
    assert!(
        ok || !root,
        "running as root, the worker must be able to make a mount namespace: {probe:?}"
    );
    if !ok {
        eprintln!(
            "\n*** no private mount namespace / proc for commands here (run as root): {probe:?} ***\n"
        );
    }
    ok
}

fn unique(name: &str) -> String {
    format!("toolsched-ns-{name}-{}", uuid::Uuid::new_v4().simple())
}

/// The output of a command that must succeed (what follows `Output: `).
async fn run_ok(srv: &TestServer, session: &str, command: &str) -> String {
    let events = srv.run(session, vec![shell("ok", command)]).await;
    assert_eq!(
        states(&events, "ok"),
        ["validating", "scheduled", "executing", "success"],
        "{command}: {events:?}"
    );
    let out = success_output(&events, "ok");
    out.split_once("Output: ")
        .map(|(_, o)| o.to_string())
        .unwrap_or_default()
}

/// A command that must end `sandbox_denied`; returns its error message.
async fn run_denied(srv: &TestServer, session: &str, command: &str) -> String {
    let events = srv.run(session, vec![shell("c", command)]).await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "error"],
        "{command}: {events:?}"
    );
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{command}: {message}");
    message
}

/// Every directory on the way to `git_dir` (relative, e.g. `a/b/repo/.git`)
/// takes new, renamed and removed entries; the `.git` itself and the
/// directories holding it cannot be changed or moved.
async fn assert_locks_only_itself(srv: &TestServer, git_dir: &str) {
    let mut dirs = vec![".".to_string()];
    let parts: Vec<&str> = git_dir.split('/').collect();
    for i in 1..parts.len() {
        dirs.push(parts[..i].join("/"));
    }
    let mut script = String::new();
    for d in &dirs {
        script.push_str(&format!(
            "touch {d}/new && mkdir {d}/newdir && mv {d}/new {d}/renamed && rm {d}/renamed && rmdir {d}/newdir && echo {d}: ok && "
        ));
    }
    script.push_str("true");
    let expected: String = dirs.iter().map(|d| format!("{d}: ok\n")).collect();
    assert_eq!(run_ok(srv, "s", &script).await, expected);
    for d in &dirs {
        assert!(!srv.path(&format!("{d}/renamed")).exists());
    }
    let hook = format!("{git_dir}/hooks/pre-commit");
    let msg = run_denied(srv, "s", &format!("echo evil > {hook}")).await;
    assert!(msg.contains("Read-only file system"), "{msg}");
    assert!(!srv.path(&hook).exists(), "{hook} was written");
    let msg = run_denied(
        srv,
        "s",
        &format!("echo '[core] fsmonitor = evil' >> {git_dir}/config"),
    )
    .await;
    assert!(msg.contains("Read-only file system"), "{msg}");
    // Neither the .git nor any directory holding it moves: a repository
    // renamed away could be replaced by one with a planted hook.
    // The directories are mount points (EBUSY); the `.git` itself is also
    // refused by name (no `.git` may be moved or made: EPERM).
    for d in dirs
        .iter()
        .skip(1)
        .chain(std::iter::once(&git_dir.to_string()))
    {
        let msg = run_denied(srv, "s", &format!("mv {d} {d}-moved")).await;
        let refusal = if d == git_dir {
            "Operation not permitted"
        } else {
            "Device or resource busy"
        };
        assert!(msg.contains(refusal), "{msg}");
        assert!(srv.path(d).exists(), "{d} was moved");
        assert!(!srv.path(&format!("{d}-moved")).exists());
    }
    assert_eq!(
        std::fs::read_to_string(srv.path(&format!("{git_dir}/config"))).unwrap(),
        "[core]\n"
    );
}

fn make_repo(srv: &TestServer, git_dir: &str) {
    std::fs::create_dir_all(srv.path(&format!("{git_dir}/hooks"))).unwrap();
    std::fs::write(srv.path(&format!("{git_dir}/config")), "[core]\n").unwrap();
}

#[tokio::test]
async fn a_nested_git_locks_only_itself() {
    assert!(
        namespace_available(false),
        "commands need a private mount namespace here: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    // The issue's example.
    make_repo(&srv, "a/b/repo/.git");
    assert_locks_only_itself(&srv, "a/b/repo/.git").await;
}

#[tokio::test]
async fn a_top_level_git_and_a_deeper_one_lock_only_themselves() {
    assert!(
        namespace_available(false),
        "commands need a private mount namespace here: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    make_repo(&srv, ".git");
    make_repo(&srv, "vendor/x/y/z/lib/.git");
    assert_locks_only_itself(&srv, "vendor/x/y/z/lib/.git").await;
    // The workspace root holds a `.git` of its own and still takes new files.
    assert_eq!(
        run_ok(&srv, "s", "echo hi > top && cat top && rm top").await,
        "hi\n"
    );
    let msg = run_denied(&srv, "s", "echo evil > .git/hooks/post-checkout").await;
    assert!(msg.contains("Read-only file system"), "{msg}");
}

#[tokio::test]
async fn a_git_file_of_a_submodule_locks_only_itself() {
    assert!(
        namespace_available(false),
        "commands need a private mount namespace here: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::create_dir_all(srv.path("mods/sub")).unwrap();
    std::fs::write(
        srv.path("mods/sub/.git"),
        "gitdir: ../../.git/modules/sub\n",
    )
    .unwrap();
    assert_eq!(
        run_ok(
            &srv,
            "s",
            "touch mods/a mods/sub/b && mv mods/a mods/c && ls mods mods/sub"
        )
        .await,
        "mods:\nc\nsub\n\nmods/sub:\nb\n"
    );
    let msg = run_denied(&srv, "s", "echo 'gitdir: /tmp/evil' > mods/sub/.git").await;
    assert!(msg.contains("Read-only file system"), "{msg}");
    let msg = run_denied(&srv, "s", "mv mods mods2").await;
    assert!(msg.contains("Device or resource busy"), "{msg}");
    assert_eq!(
        std::fs::read_to_string(srv.path("mods/sub/.git")).unwrap(),
        "gitdir: ../../.git/modules/sub\n"
    );
}

#[tokio::test]
async fn landlock_only_falls_back_to_locking_the_way_and_says_so() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(SchedulerConfig {
        sandbox: SandboxConfig {
            landlock_only: true,
            ..SandboxConfig::default()
        },
        ..yolo()
    })
    .await;
    make_repo(&srv, "a/b/repo/.git");
    let msg = run_denied(&srv, "s", "touch a/new").await;
    assert!(msg.contains("a/new': Permission denied"), "{msg}");
    let msg = run_denied(&srv, "s", "echo evil > a/b/repo/.git/hooks/pre-commit").await;
    assert!(msg.contains("Permission denied"), "{msg}");
    let info = srv
        .client
        .clone()
        .get_server_info(pb::GetServerInfoRequest {})
        .await
        .expect("GetServerInfo")
        .into_inner();
    let gaps = info.sandbox.expect("sandbox").gaps;
    assert!(
        gaps.iter()
            .any(|g| g.starts_with("no private mount namespace")),
        "{gaps:?}"
    );
    assert!(
        gaps.iter().any(|g| g.starts_with("no private /proc")),
        "{gaps:?}"
    );
}

#[tokio::test]
async fn server_info_reports_no_namespace_gap_where_it_is_available() {
    assert!(
        namespace_available(true),
        "commands need a private mount namespace here: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    let info = srv
        .client
        .clone()
        .get_server_info(pb::GetServerInfoRequest {})
        .await
        .expect("GetServerInfo")
        .into_inner();
    let gaps = info.sandbox.expect("sandbox").gaps;
    assert!(
        !gaps
            .iter()
            .any(|g| g.starts_with("no private mount namespace")
                || g.starts_with("no private /proc")),
        "{gaps:?}"
    );
}

// === /proc ===

#[tokio::test]
async fn other_processes_cmdline_is_not_readable() {
    assert!(
        namespace_available(true),
        "commands need a private mount namespace here: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    let marker = unique("sibling");
    // A sibling command in another session, running while we look.
    let mut sibling = srv
        .schedule(
            "other",
            vec![shell(
                "sib",
                &format!("echo pid=$$; exec -a {marker} sleep 1000"),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let ev = next_matching(&mut sibling, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if matches!(&u.state,
            Some(State::Executing(x)) if x.output_chunk.contains("pid=")))
    })
    .await;
    let Event::CallUpdate(u) = ev else {
        unreachable!()
    };
    let Some(State::Executing(x)) = u.state else {
        unreachable!()
    };
    let sibling_pid: u32 = x
        .output_chunk
        .trim()
        .strip_prefix("pid=")
        .and_then(|p| p.lines().next())
        .and_then(|p| p.parse().ok())
        .expect("sibling pid");
    // Visible from outside the sandbox: the test reads it itself, once the
    // sibling has exec'd (its `pid=` line comes just before the exec).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let outside = std::fs::read(format!("/proc/{sibling_pid}/cmdline")).unwrap();
        if String::from_utf8_lossy(&outside).contains(&marker) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sibling did not exec within 30 s: {:?}",
            String::from_utf8_lossy(&outside)
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let server = std::process::id();
    for pid in [server, sibling_pid, 1] {
        let msg = run_denied(&srv, "s", &format!("cat /proc/{pid}/cmdline")).await;
        assert!(
            msg.contains(&format!("/proc/{pid}/cmdline: Operation not permitted")),
            "{pid}: {msg}"
        );
        assert!(!msg.contains(&marker), "{msg}");
        assert!(!msg.contains("sandbox-exec"), "{msg}");
    }
    // Its own processes stay visible: /proc/self, a child, ps.
    assert_eq!(
        run_ok(
            &srv,
            "s",
            // The child is read once it has exec'd `sleep` (before, its
            // cmdline is still the forking shell's); builtins only, so the
            // wait starts no process of its own.
            "tr '\\0' ' ' < /proc/self/cmdline; echo; sleep 1 & until read -r c < /proc/$!/comm && [ \"$c\" = sleep ]; do :; done; tr '\\0' ' ' < /proc/$!/cmdline; echo; wait; ps -e -o comm= | sort | tr '\\n' ' '"
        )
        .await,
        "tr \\0   \nsleep 1 \nbash ps sort tr "
    );
    srv.client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: "other".into(),
            batch_id: None,
            reason: "test".into(),
        })
        .await
        .expect("cancel");
    seen.extend(collect(sibling).await);
    assert_eq!(
        states(&seen, "sib"),
        ["validating", "scheduled", "executing", "cancelled"]
    );
}

// === a non-root worker (user namespace) ===

/// The worker run as `nobody` (through `setpriv`, by this root test):
/// the mount namespace is made inside a user namespace, so protected paths
/// lock only themselves there too; `/proc` is not narrowed (the probe says
/// so for such a server).
#[test]
fn a_non_root_worker_makes_its_namespace_in_a_user_namespace() {
    use std::os::unix::fs::{PermissionsExt, chown};
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 || !kernel_enforces(SandboxLevel::WorkspaceWrite) {
        eprintln!(
            "\n*** SKIPPED: needs root to start the worker as nobody (a non-root run covers this path in every other test) ***\n"
        );
        return;
    }
    let Ok(setpriv) = which_setpriv() else {
        panic!("setpriv (util-linux) is needed to run the worker as another user");
    };
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = base.join("ws");
    let tmp = base.join("tmp");
    std::fs::create_dir_all(ws.join("a/repo/.git/hooks")).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let list = base.join("list");
    std::fs::write(&list, format!("{}\0\0", ws.join("a/repo/.git").display())).unwrap();
    for p in [
        "ws",
        "ws/a",
        "ws/a/repo",
        "ws/a/repo/.git",
        "ws/a/repo/.git/hooks",
        "tmp",
    ] {
        chown(base.join(p), Some(65534), Some(65534)).unwrap();
    }
    let status = base.join("status");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg("exec \"$@\" 3>\"$STATUS\" 4<\"$LIST\"")
        .arg("bash")
        .arg(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_toolsched"))
        .arg("sandbox-exec")
        .args(["--level", "workspace_write", "--workspace"])
        .arg(&ws)
        .arg("--tmp")
        .arg(&tmp)
        .args([
            "--cpu-secs",
            "10",
            "--address-space-bytes",
            "4294967296",
            "--file-size-bytes",
            "1048576",
            "--processes",
            "64",
            "--open-files",
            "256",
            "--kill-grace-ms",
            "100",
            "--protected-fd",
            "4",
            "--",
            "bash",
            "-c",
        ])
        .arg(
            "touch a/new && echo created; echo evil > a/repo/.git/hooks/pre-commit; \
             mv a/repo a/old; mkdir -p y/.git; echo done",
        )
        .env("STATUS", &status)
        .env("LIST", &list)
        .current_dir(&ws)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout, "created\ndone\n", "{stderr}");
    assert_eq!(
        stderr,
        "bash: line 1: a/repo/.git/hooks/pre-commit: Read-only file system\n\
         mv: cannot move 'a/repo' to 'a/old': Device or resource busy\n\
         mkdir: cannot create directory ‘y/.git’: Operation not permitted\n"
    );
    assert_eq!(
        std::fs::read_to_string(&status).unwrap().trim(),
        r#"{"exit_code":0}"#
    );
    assert!(ws.join("a/new").is_file() && ws.join("a/repo/.git").is_dir());
    assert!(!ws.join("a/repo/.git/hooks/pre-commit").exists() && !ws.join("y/.git").exists());
}

fn which_setpriv() -> Result<std::path::PathBuf, ()> {
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.is_file())
        .ok_or(())
}
