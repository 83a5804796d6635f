//! The escape suite: one test per attempt to leave the sandbox, each through
//! the real gRPC server (yolo mode, so approval does not stand in the way)
//! and the real worker. Every attempt must end in an Error of type
//! `sandbox_denied` or `path_not_in_workspace`, with nothing written outside.
//!
//! The tests probe the kernel first; where a feature is truly missing they
//! say so loudly and stop (they never pass silently).

mod support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::policy::ApprovalMode;
use toolsched::sandbox::{ResourceLimits, SandboxConfig, SandboxLevel};
use toolsched::scheduler::SchedulerConfig;

fn config_with(sandbox: SandboxConfig) -> SchedulerConfig {
    SchedulerConfig {
        default_mode: ApprovalMode::Yolo,
        sandbox,
        ..SchedulerConfig::default()
    }
}

fn yolo() -> SchedulerConfig {
    config_with(SandboxConfig::default())
}

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

/// Runs one shell command and asserts it was refused by the sandbox.
async fn assert_denied(srv: &TestServer, command: &str) -> String {
    let events = srv.run("s", vec![shell("c", command)]).await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "error"],
        "{command}: {events:?}"
    );
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{command}: {message}");
    message
}

fn unique(name: &str) -> String {
    format!("toolsched-escape-{name}-{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test]
async fn shell_write_to_tmp_is_denied() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let target = std::path::Path::new("/tmp").join(unique("tmp"));
    // `tee FILE` rather than `> FILE`: the policy already denies a
    // redirection outside the workspace; this is what string checks miss.
    let msg = assert_denied(&srv, &format!("echo pwned | tee {}", target.display())).await;
    assert!(msg.contains("Permission denied"), "{msg}");
    assert!(!target.exists());
}

#[tokio::test]
async fn shell_write_to_home_is_denied() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let home = std::env::var_os("HOME").expect("HOME is set for the test run");
    let srv = TestServer::with_config(yolo()).await;
    let name = unique("home");
    // Commands get HOME = their private tmp, so `~/x` is harmless; the real
    // home of the server's user must be out of reach too.
    let real = std::path::Path::new(&home).join(&name);
    assert_denied(&srv, &format!("echo pwned | tee {}", real.display())).await;
    assert!(!std::path::Path::new(&home).join(&name).exists());
}

#[tokio::test]
async fn shell_write_to_parent_of_workspace_is_denied() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let name = unique("parent");
    assert_denied(&srv, &format!("echo pwned | tee ../{name}")).await;
    let parent = srv
        .workspace
        .path()
        .parent()
        .expect("workspace has a parent");
    assert!(!parent.join(&name).exists());
}

#[tokio::test]
async fn reading_etc_shadow_is_denied() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    assert!(
        std::path::Path::new("/etc/shadow").exists(),
        "this test needs /etc/shadow to exist on the host"
    );
    let srv = TestServer::with_config(yolo()).await;
    let msg = assert_denied(&srv, "cat /etc/shadow").await;
    assert!(msg.contains("/etc/shadow: Permission denied"), "{msg}");
}

#[tokio::test]
async fn reading_the_servers_environment_is_denied() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    // The server runs in this test process.
    let pid = std::process::id();
    let events = srv
        .run("s", vec![shell("c", &format!("cat /proc/{pid}/environ"))])
        .await;
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{message}");
    // The command's private /proc (hidepid=noaccess) refuses the whole
    // /proc/<pid> of a process outside its Landlock domain (EPERM) before
    // the environ file's own ptrace check (EACCES) is reached; with
    // `sandbox_landlock_only` it is that check's "Permission denied".
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    let refusal = if probe.proc_hidden {
        "Operation not permitted"
    } else {
        "Permission denied"
    };
    assert!(message.contains(refusal), "{message}");
    let State::Error(e) = terminal(&events, "c") else {
        unreachable!()
    };
    let response = response_json(e.response.as_ref().expect("response"));
    let text = serde_json::to_string(&response).unwrap();
    assert!(!text.contains("PATH="), "environment leaked: {text}");
}

#[tokio::test]
async fn symlink_made_by_the_command_is_not_followed_by_read_file() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let events = srv
        .run(
            "s",
            vec![shell(
                "ln",
                "ln -s /etc/passwd link && ln -s / rootlink && echo linked",
            )],
        )
        .await;
    assert!(success_output(&events, "ln").contains("linked"));
    let events = srv
        .run(
            "s",
            vec![
                call("r1", "read_file", json!({ "file_path": "link" })),
                call(
                    "r2",
                    "read_file",
                    json!({ "file_path": "rootlink/etc/passwd" }),
                ),
            ],
        )
        .await;
    for id in ["r1", "r2"] {
        let (kind, message) = error_of(&events, id);
        assert_eq!(kind, pb::ErrorType::PathNotInWorkspace, "{id}: {message}");
    }
}

/// The same attempt within one batch: `read_file` is validated before the
/// command creates the link, so only a read that resolves the path at
/// execution time beneath the root (`Workspace::read_beneath`) refuses it.
#[tokio::test]
async fn symlink_made_by_the_command_in_the_same_batch_is_not_followed() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let events = srv
        .run(
            "s",
            vec![
                shell("ln", "ln -s /etc/passwd link && echo linked"),
                call("r1", "read_file", json!({ "file_path": "link" })),
            ],
        )
        .await;
    assert!(success_output(&events, "ln").contains("linked"));
    let (kind, message) = error_of(&events, "r1");
    assert_eq!(kind, pb::ErrorType::PathNotInWorkspace, "{message}");
}

/// A loopback listener that must never see a connection.
fn listener() -> std::net::TcpListener {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    l
}

fn assert_never_connected(l: &std::net::TcpListener) {
    match l.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the sandboxed command reached the listener: {other:?}"),
    }
}

#[tokio::test]
async fn python_tcp_socket_is_denied_under_workspace_write() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "this test needs /usr/bin/python3 (apt-get install python3)"
    );
    let l = listener();
    let port = l.local_addr().unwrap().port();
    let srv = TestServer::with_config(yolo()).await;
    let msg = assert_denied(
        &srv,
        &format!(
            "/usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\""
        ),
    )
    .await;
    assert!(msg.contains("Operation not permitted"), "{msg}");
    assert_never_connected(&l);
}

#[tokio::test]
async fn curl_tcp_connect_is_denied_under_workspace_write() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    assert!(
        std::path::Path::new("/usr/bin/curl").exists(),
        "this test needs /usr/bin/curl (apt-get install curl)"
    );
    let l = listener();
    let port = l.local_addr().unwrap().port();
    let srv = TestServer::with_config(yolo()).await;
    assert_denied(&srv, &format!("curl -sS http://127.0.0.1:{port}/")).await;
    assert_never_connected(&l);
}

/// Whether any live process has `marker` in its command line.
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = status
                .rfind(')')
                .is_some_and(|i| status[i + 1..].trim_start().starts_with('Z'));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            !zombie && String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .collect()
}

#[tokio::test]
async fn fork_bomb_is_bounded_and_other_sessions_keep_working() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    assert_ne!(
        probe.process_limit,
        toolsched::sandbox::ProcessLimitKind::None,
        "no process limit can be enforced here (uid 0 without a writable pids cgroup): a fork bomb would be unbounded"
    );
    let srv = TestServer::with_config(config_with(SandboxConfig {
        limits: ResourceLimits {
            processes: 64,
            ..ResourceLimits::default()
        },
        ..SandboxConfig::default()
    }))
    .await;
    let marker = unique("bomb");
    // The classic bomb, then (with builtins only, no fork) a 3 s pause and a
    // failure exit.
    let bomb = format!(": {marker}; b() {{ b | b & }}; b; read -t 3 < /dev/zero; exit 1");
    let mut stream = srv.schedule("bomb", vec![shell("bomb", &bomb)]).await;
    let mut seen = Vec::new();
    next_matching(&mut stream, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if matches!(&u.state,
            Some(State::Executing(x)) if x.output_chunk.contains("Resource temporarily unavailable")))
    })
    .await;
    // The limit is hit; another session still runs commands.
    let other = srv.run("other", vec![shell("ok", "echo alive")]).await;
    assert!(success_output(&other, "ok").contains("alive"));
    seen.extend(collect(stream).await);
    let (kind, message) = error_of(&seen, "bomb");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{message}");
    assert!(
        message.contains("Resource temporarily unavailable"),
        "{message}"
    );
    assert_eq!(
        processes_with(&marker),
        Vec::<u32>::new(),
        "bomb processes left"
    );
}

/// Peak resident memory of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

#[tokio::test]
async fn endless_output_is_bounded_and_memory_stays_flat() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let before = peak_rss_kib();
    let events = srv.run("s", vec![shell("c", "yes | head -c 5G")]).await;
    let grown = peak_rss_kib().saturating_sub(before);
    let output = success_output(&events, "c");
    let cap = toolsched::sandbox::OutputLimits::default().max_bytes;
    assert!(output.len() < cap + 4096, "output {} bytes", output.len());
    let omitted = (5u64 << 30) - cap as u64;
    assert!(
        output.contains(&format!("[{omitted} bytes of output omitted]")),
        "{}",
        &output[cap / 2 - 100..cap / 2 + 200]
    );
    // 5 GiB went through; the server kept a few MiB of it.
    assert!(grown < 256 * 1024, "peak RSS grew by {grown} KiB");
}

#[tokio::test]
async fn background_and_setsid_children_are_killed_on_cancel() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let marker = unique("bg");
    let command = format!(
        "(exec -a {marker} sleep 1000) & setsid bash -c 'exec -a {marker} sleep 1000' & \
         while [ $(pgrep -fc '^{marker}') -lt 2 ]; do :; done; echo both-running; wait"
    );
    let mut stream = srv.schedule("s", vec![shell("c", &command)]).await;
    let mut seen = Vec::new();
    next_matching(&mut stream, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if matches!(&u.state,
            Some(State::Executing(x)) if x.output_chunk.contains("both-running")))
    })
    .await;
    let sleepers = processes_with(&marker)
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.starts_with(marker.as_bytes())
        })
        .count();
    assert_eq!(sleepers, 2);
    srv.client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: "s".into(),
            batch_id: None,
            reason: "test".into(),
        })
        .await
        .expect("cancel");
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "c"),
        ["validating", "scheduled", "executing", "cancelled"]
    );
    assert_eq!(processes_with(&marker), Vec::<u32>::new(), "processes left");
}

#[tokio::test]
async fn writing_git_hooks_in_a_nested_repository_is_denied() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    std::fs::create_dir_all(srv.path("vendor/lib/.git/hooks")).unwrap();
    std::fs::write(srv.path("vendor/lib/.git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(srv.path("vendor/lib/src")).unwrap();
    assert_denied(&srv, "echo evil > vendor/lib/.git/hooks/pre-commit").await;
    assert!(!srv.path("vendor/lib/.git/hooks/pre-commit").exists());
    assert_denied(
        &srv,
        "echo '[core] fsmonitor = evil' >> vendor/lib/.git/config",
    )
    .await;
    assert_denied(&srv, "mv vendor/lib/.git vendor/lib/git-moved").await;
    assert_eq!(
        std::fs::read_to_string(srv.path("vendor/lib/.git/config")).unwrap(),
        "[core]\n"
    );
    // Next to it, the workspace stays writable.
    let events = srv
        .run(
            "s",
            vec![shell(
                "ok",
                "echo fine > vendor/lib/src/x && cat vendor/lib/src/x",
            )],
        )
        .await;
    assert!(success_output(&events, "ok").contains("fine"));
}

#[tokio::test]
async fn workspace_write_still_writes_the_workspace_and_private_tmp() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let events = srv
        .run(
            "s",
            vec![shell(
                "c",
                "mkdir -p a/b && echo one > a/b/f && cat a/b/f && echo two | tee \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo quiet > /dev/null",
            )],
        )
        .await;
    let out = success_output(&events, "c");
    assert!(out.contains("one") && out.contains("two"), "{out}");
    assert_eq!(std::fs::read_to_string(srv.path("a/b/f")).unwrap(), "one\n");
}

#[tokio::test]
async fn read_only_level_refuses_workspace_writes() {
    assert!(
        kernel_enforces(SandboxLevel::ReadOnly),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(config_with(SandboxConfig {
        level: SandboxLevel::ReadOnly,
        ..SandboxConfig::default()
    }))
    .await;
    std::fs::write(srv.path("in.txt"), "readable\n").unwrap();
    let events = srv.run("s", vec![shell("r", "cat in.txt")]).await;
    assert!(success_output(&events, "r").contains("readable"));
    let srv_events = srv.run("s", vec![shell("w", "echo x > out.txt")]).await;
    assert_eq!(error_of(&srv_events, "w").0, pb::ErrorType::SandboxDenied);
    assert!(!srv.path("out.txt").exists());
}

#[tokio::test]
async fn network_level_allows_tcp() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWriteNetwork),
        "the kernel cannot enforce the level: see the line above"
    );
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let srv = TestServer::with_config(config_with(SandboxConfig {
        level: SandboxLevel::WorkspaceWriteNetwork,
        ..SandboxConfig::default()
    }))
    .await;
    let events = srv
        .run(
            "s",
            vec![shell(
                "c",
                &format!(
                    "/usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port})); print('connected')\""
                ),
            )],
        )
        .await;
    assert!(success_output(&events, "c").contains("connected"));
    l.accept().expect("the command connected");
}

#[tokio::test]
async fn server_info_reports_the_probed_sandbox() {
    let srv = TestServer::with_config(yolo()).await;
    let info = srv
        .client
        .clone()
        .get_server_info(pb::GetServerInfoRequest {})
        .await
        .expect("GetServerInfo")
        .into_inner();
    let sandbox = info.sandbox.expect("sandbox info");
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    assert_eq!(sandbox.level, pb::SandboxLevel::WorkspaceWrite as i32);
    assert_eq!(sandbox.landlock_abi as i32, probe.landlock_abi);
    assert_eq!(sandbox.seccomp, probe.seccomp);
    assert_eq!(sandbox.enforced, probe.missing.is_empty());
    assert_eq!(sandbox.process_limit, probe.process_limit.name());
    assert_eq!(sandbox.max_processes, ResourceLimits::default().processes);
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
}

#[tokio::test]
async fn a_session_may_choose_a_stricter_level_but_not_a_looser_one() {
    assert!(
        kernel_enforces(SandboxLevel::ReadOnly),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let with_level = |level: pb::SandboxLevel, command: &str| pb::ScheduleCallsRequest {
        sandbox_level: level as i32,
        ..request("s", vec![shell("c", command)])
    };
    // read_only for this session: writing the workspace is refused.
    let events = collect(
        srv.schedule_with(with_level(pb::SandboxLevel::ReadOnly, "touch a.txt"))
            .await,
    )
    .await;
    assert_eq!(error_of(&events, "c").0, pb::ErrorType::SandboxDenied);
    assert!(!srv.path("a.txt").exists());
    // The level stays with the session.
    let events = srv.run("s", vec![shell("c", "touch b.txt")]).await;
    assert_eq!(error_of(&events, "c").0, pb::ErrorType::SandboxDenied);
    // Other sessions keep the server's level.
    let events = srv.run("other", vec![shell("c", "touch c.txt")]).await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "success"]
    );
    // Back to the server's level.
    let events = collect(
        srv.schedule_with(with_level(pb::SandboxLevel::WorkspaceWrite, "touch d.txt"))
            .await,
    )
    .await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "success"]
    );
    // Looser than the server's: refused before anything starts.
    for looser in [
        pb::SandboxLevel::WorkspaceWriteNetwork,
        pb::SandboxLevel::None,
    ] {
        let err = srv
            .client
            .clone()
            .schedule_calls(with_level(looser, "touch e.txt"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
        assert!(err.message().contains("more permissive than the server's"));
    }
    assert!(!srv.path("e.txt").exists());
}

// === what a ruleset prepared once for many commands must not open up ===
//
// The zygote prepares one Landlock ruleset per (level, workspace,
// protected options) and every command's private tmp is bound beneath one
// fixed anchor (`src/sandbox/worker/prepared.rs`); these hold whatever ran
// before.

/// Runs `command` in its own session and asserts the sandbox refused it,
/// with `error` (the failing tool's message) in the output and exit `exit`.
async fn assert_refused(srv: &TestServer, session: &str, command: &str, error: &str, exit: i32) {
    let events = srv.run(session, vec![shell("c", command)]).await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "error"],
        "{command}: {events:?}"
    );
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{command}: {message}");
    assert!(message.contains(error), "{command}: {message}");
    assert!(
        message.contains(&format!("(exit code {exit})")),
        "{command}: {message}"
    );
}

/// The private tmp (its real path, outside any command's view) holding a
/// file `name` that contains `marker`.
fn real_tmp_with(name: &str, marker: &str) -> std::path::PathBuf {
    let found: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("toolsched-tmp-"))
                && std::fs::read_to_string(p.join(name)).is_ok_and(|t| t.contains(marker))
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.into_iter().next().unwrap()
}

#[tokio::test]
async fn a_command_cannot_reach_another_commands_private_tmp() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    let marker = unique("tmp");
    // An earlier command leaves a file in its tmp (which goes with it).
    let early = srv
        .run(
            "early",
            vec![shell("c", &format!("echo {marker} | tee \"$TMPDIR/left\""))],
        )
        .await;
    assert!(success_output(&early, "c").contains(&marker), "{early:?}");
    // A concurrent one holds a secret in its tmp while the others run.
    let mut holder = srv
        .schedule(
            "holder",
            vec![shell(
                "h",
                &format!("echo {marker} | tee \"$TMPDIR/secret\" && echo ready && sleep 600"),
            )],
        )
        .await;
    let mut seen = Vec::new();
    next_matching(&mut holder, &mut seen, |e| {
        matches!(e, Event::CallUpdate(pb::ToolCallUpdate { state: Some(State::Executing(x)), .. }) if x.output_chunk.contains("ready"))
    })
    .await;
    let other = real_tmp_with("secret", &marker);
    let o = other.display();

    // Every command sees its own, empty tmp at the same path.
    let own = srv
        .run(
            "own",
            vec![shell(
                "c",
                "echo \"$TMPDIR\" && ls -A \"$TMPDIR\" | wc -l && test ! -e \"$TMPDIR/secret\" && test ! -e \"$TMPDIR/left\" && echo mine | tee \"$TMPDIR/x\"",
            )],
        )
        .await;
    let out = success_output(&own, "c");
    let lines: Vec<&str> = out
        .split_once("Output: ")
        .map(|(_, o)| o.lines().collect())
        .unwrap_or_default();
    assert_eq!(lines.len(), 3, "{out}");
    let seen_tmp = std::path::Path::new(lines[0]);
    let anchor = seen_tmp.parent().unwrap();
    assert!(
        seen_tmp.ends_with("tmp")
            && anchor
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("toolsched-anchor-")),
        "{out}"
    );
    assert_eq!(&lines[1..], ["0", "mine"], "{out}");

    // The other command's tmp at its real path: nothing.
    let attempts = [
        (format!("cat {o}/secret"), "Permission denied", 1),
        (format!("ls {o}"), "Permission denied", 2),
        (
            format!("echo pwned | tee {o}/planted"),
            "Permission denied",
            1,
        ),
        (
            format!("echo pwned | tee -a {o}/secret"),
            "Permission denied",
            1,
        ),
        (format!("rm {o}/secret"), "Permission denied", 1),
    ];
    for (command, error, exit) in &attempts {
        assert_refused(&srv, "probe", command, error, *exit).await;
    }
    // The anchor every tmp is bound beneath takes nothing that a later (or
    // concurrent) command could find: it is read-only in each command's view.
    let a = anchor.display();
    for (command, error, exit) in [
        (format!("mkfifo {a}/fifo"), "Read-only file system", 1),
        (
            format!("echo pwned | tee {a}/planted"),
            "Read-only file system",
            1,
        ),
        (format!("rmdir {a}/tmp"), "Read-only file system", 1),
        (format!("mv {a}/tmp {a}/moved"), "Read-only file system", 1),
    ] {
        assert_refused(&srv, "probe", &command, error, exit).await;
    }
    assert_eq!(
        std::fs::read_to_string(other.join("secret")).unwrap(),
        format!("{marker}\n")
    );
    assert_eq!(
        std::fs::read_dir(&other).unwrap().count(),
        1,
        "only the holder's own file"
    );
    let in_anchor: Vec<_> = std::fs::read_dir(anchor)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(in_anchor, ["tmp"]);
    assert_eq!(std::fs::read_dir(anchor.join("tmp")).unwrap().count(), 0);
    drop(holder);
}

#[tokio::test]
async fn a_repository_made_after_the_ruleset_was_prepared_is_still_protected() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    std::fs::create_dir_all(srv.path("early/.git/hooks")).unwrap();
    // Commands in this workspace: its ruleset is prepared and reused.
    for i in 0..2 {
        let events = srv
            .run(
                "s",
                vec![shell("w", &format!("echo {i} > warm.txt && cat warm.txt"))],
            )
            .await;
        assert!(
            success_output(&events, "w").ends_with(&format!("Output: {i}\n")),
            "{events:?}"
        );
    }
    assert_refused(
        &srv,
        "s",
        "echo evil | tee early/.git/hooks/pre-commit",
        "Read-only file system",
        1,
    )
    .await;
    // A repository made outside the sandbox after that.
    std::fs::create_dir_all(srv.path("late/repo/.git/hooks")).unwrap();
    std::fs::write(srv.path("late/repo/.git/config"), "[core]\n").unwrap();
    assert_refused(
        &srv,
        "s",
        "echo evil | tee late/repo/.git/hooks/pre-commit",
        "Read-only file system",
        1,
    )
    .await;
    assert_refused(
        &srv,
        "s",
        "echo '[core] fsmonitor = evil' | tee -a late/repo/.git/config",
        "Read-only file system",
        1,
    )
    .await;
    assert_refused(
        &srv,
        "s",
        "mv late/repo late/moved",
        "Device or resource busy",
        1,
    )
    .await;
    assert!(!srv.path("late/repo/.git/hooks/pre-commit").exists());
    assert!(!srv.path("early/.git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(srv.path("late/repo/.git/config")).unwrap(),
        "[core]\n"
    );
    // Beside it the workspace stays writable.
    let events = srv
        .run("s", vec![shell("ok", "echo fine > late/x && cat late/x")])
        .await;
    assert!(
        success_output(&events, "ok").ends_with("Output: fine\n"),
        "{events:?}"
    );
}

/// A command's private tmp is used again by a later command only when no
/// other command ran beside it: one running beside it could have been
/// handed a descriptor of the directory (a unix socket in the workspace)
/// and reach the later command's files through it (a breaker read and
/// wrote them, and planted a `.gitconfig`). The directory a command's
/// `$TMPDIR` is bound from is read from its mount table.
#[tokio::test]
async fn a_tmp_is_used_again_only_when_its_command_ran_alone() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    let source = "awk -v t=\"$TMPDIR\" '$5 == t {print $4}' /proc/self/mountinfo";
    let run_all = |n: usize| {
        let srv = &srv;
        async move {
            let mut dirs = Vec::new();
            for _ in 0..n {
                let events = srv.run("a", vec![shell("c", source)]).await;
                let out = success_output(&events, "c");
                let dir = out.rsplit("Output: ").next().unwrap().trim().to_string();
                assert!(dir.contains("toolsched-tmp-"), "{out}");
                dirs.push(dir);
            }
            dirs
        }
    };
    let distinct = |d: &[String]| d.iter().collect::<std::collections::BTreeSet<_>>().len();
    // Alone, one after the other: directories are used again.
    let alone = run_all(6).await;
    assert!(distinct(&alone) < alone.len(), "{alone:?}");
    // With a command of another session running beside them, each command
    // is given a directory that no command gets again.
    let mut holder = srv
        .schedule("holder", vec![shell("h", "echo ready && sleep 600")])
        .await;
    let mut seen = Vec::new();
    next_matching(&mut holder, &mut seen, |e| {
        matches!(e, Event::CallUpdate(pb::ToolCallUpdate { state: Some(State::Executing(x)), .. }) if x.output_chunk.contains("ready"))
    })
    .await;
    let beside = run_all(3).await;
    srv.cancel_session("holder").await;
    seen.extend(collect(holder).await);
    let after = run_all(6).await;
    assert!(distinct(&after) < after.len(), "{after:?}");
    for dir in &beside {
        assert_eq!(beside.iter().filter(|d| *d == dir).count(), 1, "{beside:?}");
        assert!(!after.contains(dir), "{dir} used again: {after:?}");
    }
}
