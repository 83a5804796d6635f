//! The zygote every worker is forked from (`src/sandbox/zygote.rs`): a
//! worker killed from outside ends its call as a killed worker always did
//! (the zygote reports how it was reaped), and a zygote that died is
//! replaced for the next command, which then runs confined as any other.

use crate::replicas_support;
use crate::support;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde_json::json;
use support::*;
use toolsched::api::pb;

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

/// A `run_shell_command` call with these arguments (`dir_path`, `timeout`).
fn shell_args(id: &str, args: serde_json::Value) -> pb::FunctionCall {
    call(id, "run_shell_command", args)
}

/// The structured result of a successful call.
fn result_of(events: &[Event], id: &str) -> serde_json::Map<String, serde_json::Value> {
    match terminal(events, id) {
        State::Success(s) => toolsched::api::convert::struct_to_json(s.result.unwrap()),
        other => panic!("{other:?}"),
    }
}

/// Starts `command` (which prints `ready` first) in session `session`;
/// returns the stream, the events so far and the worker's pid.
async fn start_worker(
    srv: &TestServer,
    session: &str,
    command: &str,
) -> (tonic::Streaming<pb::ScheduleCallsResponse>, Vec<Event>, i32) {
    let mut stream = srv.schedule(session, vec![shell("c", command)]).await;
    let mut seen = Vec::new();
    let mut pid = None;
    loop {
        let ev = next_matching(
            &mut stream,
            &mut seen,
            |e| matches!(e, Event::CallUpdate(u) if matches!(u.state, Some(State::Executing(_)))),
        )
        .await;
        if let Event::CallUpdate(pb::ToolCallUpdate {
            state: Some(State::Executing(x)),
            ..
        }) = ev
        {
            pid = x.pid.map(|p| p as i32).or(pid);
            if x.output_chunk.contains("ready") {
                return (stream, seen, pid.expect("pid reported before output"));
            }
        }
    }
}

/// The parent pid of `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn cmdline(pid: i32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap()).into_owned()
}

/// Waits until `pid` has exited: its pidfd becomes readable then (an
/// event, not a poll of `/proc`).
fn wait_exited(pid: i32) {
    // SAFETY: pidfd_open with a pid and no flags; the fd is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        // Already gone and reaped.
        return;
    }
    // SAFETY: just returned by pidfd_open.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; 30 s at most.
    let r = unsafe { libc::poll(&mut p, 1, 30_000) };
    assert_eq!(r, 1, "pid {pid} did not exit within 30 s");
}

#[tokio::test]
async fn a_worker_killed_from_outside_ends_its_call_with_the_signal() {
    let srv = TestServer::with_config(yolo_confined()).await;
    let marker = format!("toolsched-killed-{}", uuid::Uuid::new_v4().simple());
    let (stream, mut seen, worker) = start_worker(
        &srv,
        "s",
        &format!("echo ready; exec -a {marker} sleep 1000"),
    )
    .await;
    // The worker is the zygote's child, not the server's.
    let zygote = parent_of(worker);
    assert_ne!(zygote, std::process::id() as i32);
    assert!(
        cmdline(zygote).contains("sandbox-zygote"),
        "{}",
        cmdline(zygote)
    );
    // SAFETY: signalling the worker this test's server started.
    assert_eq!(unsafe { libc::kill(worker, libc::SIGKILL) }, 0);
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "c"),
        ["validating", "scheduled", "executing", "success"]
    );
    let result = result_of(&seen, "c");
    assert_eq!(result["exit_code"], json!(null), "{result:?}");
    assert_eq!(result["signal"], json!(libc::SIGKILL), "{result:?}");
    // The command died with its worker (its parent-death signal).
    assert!(wait_group_gone(worker).await);
    let left = support::running_with_cmdline(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}

#[tokio::test]
async fn a_dead_zygote_is_replaced_and_its_commands_die_with_it() {
    assert!(
        kernel_enforces(toolsched::sandbox::SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    let (stream, mut seen, worker) = start_worker(&srv, "s", "echo ready; sleep 1000").await;
    let zygote = parent_of(worker);
    assert!(
        cmdline(zygote).contains("sandbox-zygote"),
        "{}",
        cmdline(zygote)
    );
    // SAFETY: killing the zygote this test's server started.
    assert_eq!(unsafe { libc::kill(zygote, libc::SIGKILL) }, 0);
    wait_exited(zygote);
    // Its worker followed it (parent-death signal), and with it the
    // command: the call ends as for a killed worker.
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "c"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert!(wait_group_gone(worker).await);
    // The next command gets a new zygote and runs confined as before. It
    // waits on a FIFO until its worker's parent has been looked at.
    let fifo = srv.path("go.fifo");
    mkfifo(&fifo);
    let (stream, mut seen, worker) = start_worker(
        &srv,
        "s",
        "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; echo ready; read -r line < go.fifo",
    )
    .await;
    let second = parent_of(worker);
    assert_ne!(second, zygote);
    assert!(
        cmdline(second).contains("sandbox-zygote"),
        "{}",
        cmdline(second)
    );
    tokio::task::spawn_blocking(move || std::fs::write(fifo, "go\n"))
        .await
        .unwrap()
        .unwrap();
    seen.extend(collect(stream).await);
    let out = success_output(&seen, "c");
    assert!(
        out.contains("NoNewPrivs:\t1") && out.contains("Seccomp:\t2"),
        "{out}"
    );
}

// === the spare worker and the per-command pids cgroups ===

/// The pids cgroup commands' cgroups are made beneath, if the host has one
/// we may use; says loudly when not.
fn pids_base() -> Option<std::path::PathBuf> {
    use toolsched::sandbox::{ProcessLimitKind, SandboxLevel};
    match toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite).process_limit {
        ProcessLimitKind::Cgroup(base) => Some(base),
        other => {
            eprintln!(
                "\n*** SKIPPED: no pids cgroup to make commands' cgroups in ({other:?}) ***\n"
            );
            None
        }
    }
}

/// The command's own pids cgroup, from what it printed of
/// `/proc/self/cgroup`: a `toolsched-…` directory beneath `base`.
fn command_cgroup(output: &str, base: &std::path::Path) -> std::path::PathBuf {
    let line = output
        .lines()
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "pids"))
        })
        .or_else(|| output.lines().find(|l| l.starts_with("0::")))
        .unwrap_or_else(|| panic!("no pids cgroup in {output:?}"));
    let name = line.rsplit('/').next().unwrap();
    assert!(name.starts_with("toolsched-"), "{line}");
    base.join(name)
}

/// Every output chunk streamed so far.
fn streamed(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(pb::ToolCallUpdate {
                state: Some(State::Executing(x)),
                ..
            }) => Some(x.output_chunk.as_str()),
            _ => None,
        })
        .collect()
}

/// The children of `pid`, forked by any of its threads (none once it is
/// gone).
fn children_of(pid: i32) -> Vec<i32> {
    let mut children = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return children;
    };
    for task in tasks {
        let list =
            std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        children.extend(list.split_whitespace().map(|p| p.parse::<i32>().unwrap()));
    }
    children
}

/// The zygote's only child, its spare, once every worker before it was
/// reaped: a worker exits behind its call's end, which came with its
/// report. Never a spare found before: that one took a command, and may
/// be the only child for a moment, still exiting, before the zygote forks
/// the next spare (it does once the command started).
async fn the_spare(zygote: i32) -> i32 {
    static FOUND: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
    let found = |c: &[i32]| FOUND.lock().unwrap().contains(&c[0]);
    eventually(
        || format!("the zygote's children: {:?}", children_of(zygote)),
        || {
            let c = children_of(zygote);
            c.len() == 1 && !found(&c)
        },
    )
    .await;
    let spare = children_of(zygote)[0];
    FOUND.lock().unwrap().push(spare);
    spare
}

async fn release(fifo: std::path::PathBuf) {
    tokio::task::spawn_blocking(move || std::fs::write(fifo, "go\n"))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn the_next_command_runs_in_the_spare_worker_already_in_its_cgroup() {
    let Some(base) = pids_base() else {
        return;
    };
    let srv = TestServer::with_config(yolo_confined()).await;
    let limit = toolsched::sandbox::ResourceLimits::default().processes;
    // The first command's worker is forked for it; its zygote then forks a
    // spare for the next one, before it reaps this one.
    let fifo = srv.path("first.fifo");
    mkfifo(&fifo);
    let (stream, mut seen, first) =
        start_worker(&srv, "s", "echo ready; read -r line < first.fifo").await;
    let zygote = parent_of(first);
    release(fifo).await;
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "c"),
        ["validating", "scheduled", "executing", "success"]
    );
    // The first worker is reaped, and the spare was forked before.
    let spare = the_spare(zygote).await;
    assert_ne!(spare, first);
    // The next command is handed to it, in a cgroup of its own made ahead,
    // with this command's limit.
    let fifo = srv.path("second.fifo");
    mkfifo(&fifo);
    let (stream, mut seen, second) = start_worker(
        &srv,
        "s",
        "cat /proc/self/cgroup; echo ready; read -r line < second.fifo",
    )
    .await;
    assert_eq!(second, spare, "the spare ran the next command");
    let cgroup = command_cgroup(&streamed(&seen), &base);
    assert_eq!(
        std::fs::read_to_string(cgroup.join("pids.max"))
            .unwrap()
            .trim(),
        limit.to_string()
    );
    let members = std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap();
    assert!(
        members.lines().any(|p| p.trim() == second.to_string()),
        "the worker is in the command's cgroup: {members:?}"
    );
    release(fifo).await;
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "c"),
        ["validating", "scheduled", "executing", "success"]
    );
    // Swept once the worker is reaped (and kept, empty, for a later
    // command: see `a_kept_cgroup_is_empty_and_none_outlives_the_server`);
    // a new spare waits.
    eventually(
        || format!("{} not emptied", cgroup.display()),
        || !cgroup.exists() || cgroup_members(&cgroup).is_empty(),
    )
    .await;
    let next = the_spare(zygote).await;
    assert!(next != spare && next != first, "{next}");
}

/// The processes in `cgroup` (none once removed).
fn cgroup_members(cgroup: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// At level `none` a command could change its cgroup (it runs as the
/// server's user, unconfined): every command gets a new one, removed after
/// it. A confined command cannot: its cgroup, emptied, is kept for a later
/// command (a `mkdir` and an `rmdir` of a cgroup per call were ~8% of the
/// server's CPU), with `pids.max` written again, holding nothing of the
/// earlier command (not a process, not a child cgroup) while the next one
/// runs, and no cgroup outlives the server.
#[tokio::test]
async fn a_kept_cgroup_is_empty_and_none_outlives_the_server() {
    use toolsched::sandbox::SandboxLevel;
    let Some(base) = pids_base() else {
        return;
    };
    const COMMANDS: usize = 8;
    let limit = toolsched::sandbox::ResourceLimits::default().processes;
    for level in [SandboxLevel::WorkspaceWrite, SandboxLevel::None] {
        let srv = server_at(level).await;
        let mut seen_cgroups = std::collections::BTreeSet::new();
        for i in 0..COMMANDS {
            let id = format!("c{i}");
            // A background child the worker's sweep must kill.
            let events = srv
                .run(
                    "s",
                    vec![shell(&id, "cat /proc/self/cgroup; (sleep 1000 &)")],
                )
                .await;
            let cgroup = command_cgroup(&success_output(&events, &id), &base);
            if level.is_confined() {
                eventually(
                    || format!("{level}: {} not emptied", cgroup.display()),
                    || !cgroup.exists() || cgroup_members(&cgroup).is_empty(),
                )
                .await;
                if cgroup.exists() {
                    assert_eq!(
                        std::fs::read_to_string(cgroup.join("pids.max"))
                            .unwrap()
                            .trim(),
                        limit.to_string()
                    );
                }
                seen_cgroups.insert(cgroup);
            } else {
                eventually(
                    || format!("{level}: {} left behind", cgroup.display()),
                    || !cgroup.exists(),
                )
                .await;
                assert!(seen_cgroups.insert(cgroup), "{level}: a cgroup used twice");
            }
        }
        if level.is_confined() {
            assert!(
                seen_cgroups.len() < COMMANDS,
                "kept cgroups were used again"
            );
        } else {
            assert_eq!(seen_cgroups.len(), COMMANDS);
        }
        drop(srv);
        for cgroup in &seen_cgroups {
            eventually(
                || format!("{level}: {} outlived the server", cgroup.display()),
                || !cgroup.exists(),
            )
            .await;
        }
    }
}

#[tokio::test]
async fn a_cancelled_commands_cgroup_is_swept() {
    let Some(base) = pids_base() else {
        return;
    };
    let srv = TestServer::with_config(yolo_confined()).await;
    let marker = format!("toolsched-cancelled-{}", uuid::Uuid::new_v4().simple());
    let command = format!(
        "cat /proc/self/cgroup; (exec -a {marker} sleep 1000) & setsid bash -c 'exec -a {marker} sleep 1000' & echo ready; wait"
    );
    let (stream, mut seen, worker) = start_worker(&srv, "s", &command).await;
    let cgroup = command_cgroup(&streamed(&seen), &base);
    let members = std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap();
    assert!(
        members.lines().count() >= 4,
        "worker, shell and both sleeps: {members:?}"
    );
    srv.client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: "s".into(),
            batch_id: None,
            reason: "stop".into(),
        })
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "c"),
        ["validating", "scheduled", "executing", "cancelled"]
    );
    // Swept at the call's end (removed, or kept empty for a later command).
    assert!(
        !cgroup.exists() || cgroup_members(&cgroup).is_empty(),
        "{} not emptied",
        cgroup.display()
    );
    assert!(wait_group_gone(worker).await);
    let left = support::running_with_cmdline(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}

#[tokio::test]
async fn the_spare_and_its_cgroup_go_when_the_server_dies() {
    if pids_base().is_none() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut bin = Binary::start_with_env(
        ws.path(),
        &["--approval-mode", "yolo"],
        &[("RUST_LOG", "info,rmcp=warn,toolsched::sandbox=debug")],
    );
    let mut client =
        pb::tool_scheduler_client::ToolSchedulerClient::connect(format!("http://{}", bin.addr))
            .await
            .unwrap();
    let stream = client
        .schedule_calls(request("s", vec![shell("c", "true")]))
        .await
        .unwrap()
        .into_inner();
    let seen = collect(stream).await;
    assert_eq!(
        states(&seen, "c"),
        ["validating", "scheduled", "executing", "success"]
    );
    // The cgroup made for the next command, which the spare joins.
    let ahead = loop {
        let line = bin
            .stderr_lines
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the server logged the cgroup made ahead");
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["message"] == "a pids cgroup made ahead for the next command" {
            break std::path::PathBuf::from(v["cgroup"].as_str().unwrap());
        }
    };
    assert!(ahead.exists());
    let server = bin.child.id() as i32;
    let zygote = children_of(server)
        .into_iter()
        .find(|p| cmdline(*p).contains("sandbox-zygote"))
        .expect("the server's zygote");
    let spare = the_spare(zygote).await;
    // Killed outright: nothing of the server's runs; the zygote sees its
    // socket close, kills and reaps the spare, removes its cgroup, exits.
    bin.child.kill().unwrap();
    bin.child.wait().unwrap();
    wait_exited(zygote);
    assert!(
        !std::path::Path::new(&format!("/proc/{spare}")).exists(),
        "the spare {spare} outlived its zygote"
    );
    assert!(!ahead.exists(), "{} left behind", ahead.display());
}

/// Pids of live processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted)
                && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit_once(')')
                        .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
                })
        })
        .collect()
}

#[tokio::test]
async fn a_killed_servers_commands_leave_no_descendant_running() {
    // Each command's last process is not the shell (which a parent-death
    // signal reaches) but its child, a grandchild of the worker: in the
    // foreground, in a subshell, and in the background of a subshell that
    // left the command's process group.
    // Durations unique to this run: its processes are told apart from any
    // other (an earlier run's included) by their command line.
    let sleeps: Vec<String> = (1..=4)
        .map(|k| format!("1000.{}{k}", std::process::id()))
        .collect();
    let commands = [
        ("fg", format!("sleep {}; echo late > fg.txt", sleeps[0])),
        (
            "sub",
            format!("( sleep {}; echo late > sub.txt ); true", sleeps[1]),
        ),
        (
            "bg",
            format!(
                "set -m; ( sleep {}; echo late > bg.txt ) & sleep {}; true",
                sleeps[2], sleeps[3]
            ),
        ),
    ];
    for level in ["workspace_write", "none"] {
        let ws = tempfile::tempdir().unwrap();
        let mut bin = Binary::start(
            ws.path(),
            &["--approval-mode", "yolo", "--sandbox-level", level],
        );
        let mut client =
            pb::tool_scheduler_client::ToolSchedulerClient::connect(format!("http://{}", bin.addr))
                .await
                .unwrap();
        let mut streams = Vec::new();
        for (session, command) in &commands {
            let mut stream = client
                .schedule_calls(request(session, vec![shell("c", command)]))
                .await
                .unwrap()
                .into_inner();
            let mut seen = Vec::new();
            until_pid(&mut stream, &mut seen, "c").await;
            streams.push(stream);
        }
        for s in &sleeps {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while processes_running(&["sleep", s]).is_empty() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{level}: sleep {s} never started"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        bin.child.kill().unwrap();
        bin.child.wait().unwrap();
        // Every process of every command goes (a kill is delivered
        // asynchronously: bounded wait for the event).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for s in &sleeps {
            loop {
                let left = processes_running(&["sleep", s]);
                if left.is_empty() {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{level}: sleep {s} outlived the server: {left:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        for f in ["fg.txt", "sub.txt", "bg.txt"] {
            assert!(!ws.path().join(f).exists(), "{level}: {f} was written");
        }
        drop(streams);
    }
}

/// The entries of `dir`, by name, sorted.
fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_killed_servers_temporary_directories_are_swept_by_the_next_and_a_live_ones_kept() {
    // One temp dir for these servers alone ($TMPDIR), so that the listing
    // is exact whatever else runs on the machine.
    let tmp = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let env = [("TMPDIR", tmp.path().to_str().unwrap())];
    let args = ["--approval-mode", "yolo"];
    let live = Binary::start_with_env(ws.path(), &args, &env);
    let live_dirs = entries(tmp.path());
    assert_eq!(
        live_dirs
            .iter()
            .map(|n| n.rsplit_once('-').unwrap().0)
            .collect::<Vec<_>>(),
        ["toolsched-anchor", "toolsched-output"]
    );

    // A second server runs a command that writes into its private tmp and
    // waits; the server is then killed outright (no destructor runs).
    let mut killed = Binary::start_with_env(ws.path(), &args, &env);
    let mut stream =
        replicas_support::run_shell(killed.addr, "k", "w", "mktemp; echo ready; exec sleep 60")
            .await;
    let mut seen = Vec::new();
    next_matching(&mut stream, &mut seen, |e| {
        matches!(e, Event::CallUpdate(pb::ToolCallUpdate {
            state: Some(State::Executing(x)), ..
        }) if x.output_chunk.contains("ready"))
    })
    .await;
    let written: Vec<_> = entries(tmp.path())
        .into_iter()
        .filter(|n| n.starts_with("toolsched-tmp-"))
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let in_tmp = entries(&tmp.path().join(&written[0]));
    assert_eq!(in_tmp.len(), 1, "{in_tmp:?}");
    assert!(in_tmp[0].starts_with("tmp."), "{in_tmp:?}");
    let left_file = tmp.path().join(&written[0]).join(&in_tmp[0]);
    let server = killed.child.id() as i32;
    let zygote = children_of(server)
        .into_iter()
        .find(|p| cmdline(*p).contains("sandbox-zygote"))
        .expect("the killed server's zygote");
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    wait_exited(zygote);
    let after_kill = entries(tmp.path());
    assert!(after_kill.contains(&written[0]), "{after_kill:?}");
    assert!(
        after_kill
            .iter()
            .filter(|n| !live_dirs.contains(n))
            .any(|n| n.starts_with("toolsched-output-")),
        "{after_kill:?}"
    );

    // The next server removes what the killed one left, and only that.
    let next = Binary::start_with_env(ws.path(), &args, &env);
    let now = entries(tmp.path());
    let next_dirs: Vec<_> = now.iter().filter(|n| !live_dirs.contains(n)).collect();
    assert_eq!(
        next_dirs
            .iter()
            .map(|n| n.rsplit_once('-').unwrap().0)
            .collect::<Vec<_>>(),
        ["toolsched-anchor", "toolsched-output"],
        "{now:?}"
    );
    assert!(next_dirs.iter().all(|n| !after_kill.contains(n)), "{now:?}");
    assert!(live_dirs.iter().all(|n| now.contains(n)), "{now:?}");
    assert!(!left_file.exists());

    // The live server's directories still serve it: a confined command runs.
    let seen = collect(replicas_support::run_shell(live.addr, "l", "c", "echo still").await).await;
    assert_eq!(
        success_output(&seen, "c"),
        "Command: echo still\nDirectory: .\nOutput: still\n"
    );
    drop(next);
    drop(live);
}

#[tokio::test]
async fn a_non_root_server_removes_what_a_command_left_unreadable() {
    use std::os::unix::fs::PermissionsExt;
    // The pod runs as a non-root uid, for which `chmod 000` directories
    // are not removable as they are; root ignores modes. So as root the
    // server is run as `nobody` (setpriv, util-linux), from a copy of the
    // binary that `nobody` can reach.
    let root = rustix::process::geteuid().is_root();
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = scratch.path().join("toolsched");
    std::fs::copy(env!("CARGO_BIN_EXE_toolsched"), &program).unwrap();
    let (ws, tmp) = (scratch.path().join("ws"), scratch.path().join("t"));
    for dir in [&ws, &tmp] {
        std::fs::create_dir(dir).unwrap();
        if root {
            std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
        }
    }
    let launcher = as_nobody();
    let mut bin = Binary::start_via(
        launcher,
        &program,
        &ws,
        &["--approval-mode", "yolo"],
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    let command = "cd \"$TMPDIR\" && mkdir -p a/b/c && touch a/b/c/f a/g && chmod 000 a/b/c && chmod 500 a/b && chmod 000 a && echo left";
    let seen = collect(replicas_support::run_shell(bin.addr, "n", "c", command).await).await;
    assert_eq!(
        success_output(&seen, "c"),
        format!("Command: {command}\nDirectory: .\nOutput: left\n")
    );
    // Removed behind the call's end: only the anchor and the outputs stay.
    let kinds = || {
        entries(&tmp)
            .iter()
            .map(|n| n.rsplit_once('-').unwrap().0.to_string())
            .collect::<Vec<_>>()
    };
    eventually(
        || format!("the command's tmp is left: {:?}", entries(&tmp)),
        || kinds() == ["toolsched-anchor", "toolsched-output"],
    )
    .await;
    let pid = nix::unistd::Pid::from_raw(bin.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = bin.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // The log's reader stops at the end of stderr: every line is in.
    let log: Vec<String> = bin.stderr_lines.iter().collect();
    assert!(
        log.iter().all(|l| !l.contains("could not remove")),
        "{log:?}"
    );
    assert_eq!(entries(&tmp), Vec::<String>::new());
}

/// A field of `/proc/<pid>/status`.
fn status_field(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in {status}"))
        .trim()
        .to_string()
}

/// The spare's only child: the command process it cloned and confined
/// before its command came.
async fn the_process_confined_ahead(spare: i32) -> i32 {
    eventually(
        || format!("the spare's children: {:?}", children_of(spare)),
        || children_of(spare).len() == 1 && status_field(children_of(spare)[0], "Seccomp") == "2",
    )
    .await;
    children_of(spare)[0]
}

/// These tests need what CI has: root (the spare confines ahead only as
/// root) and a kernel that enforces `workspace_write`. Fails, never skips.
fn must_confine() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "sandbox tests run as root");
    assert!(kernel_enforces(
        toolsched::sandbox::SandboxLevel::WorkspaceWrite
    ));
}

/// The zygote's pid, after a first command ran to its end (its worker was
/// forked for it; the spare forked after it confines ahead for the next).
async fn zygote_after_a_first_command(srv: &TestServer) -> i32 {
    let fifo = srv.path("first.fifo");
    mkfifo(&fifo);
    let (stream, _, first) = start_worker(srv, "s", "echo ready; read -r line < first.fifo").await;
    let zygote = parent_of(first);
    release(fifo).await;
    collect(stream).await;
    zygote
}

/// A yolo server whose commands run at `level`.
async fn server_at(level: toolsched::sandbox::SandboxLevel) -> TestServer {
    TestServer::with_config(toolsched::scheduler::SchedulerConfig {
        sandbox: toolsched::sandbox::SandboxConfig {
            level,
            ..toolsched::sandbox::SandboxConfig::default()
        },
        ..yolo()
    })
    .await
}

/// A yolo server confining at the default level, after [`must_confine`].
async fn confining_server() -> TestServer {
    must_confine();
    TestServer::with_config(yolo_confined()).await
}

#[tokio::test]
async fn a_command_confined_before_it_came_is_confined_as_any_other() {
    let srv = confining_server().await;
    std::fs::create_dir_all(srv.path("repo/.git/hooks")).unwrap();
    std::fs::write(srv.path("repo/.git/config"), "[core]\n").unwrap();
    let secret = std::env::temp_dir().join(format!(
        "toolsched-ahead-secret-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(&secret, "secret-7f3a").unwrap();
    // The first command's worker is forked for it; the spare after it
    // confines a process for the next command, with this one's options.
    let zygote = zygote_after_a_first_command(&srv).await;
    let spare = the_spare(zygote).await;
    let ahead = the_process_confined_ahead(spare).await;
    // Confined before its command: no capability, no new privileges, the
    // seccomp filter; it runs nothing of a command's yet.
    assert_eq!(status_field(ahead, "NoNewPrivs"), "1");
    assert_eq!(status_field(ahead, "CapEff"), "0000000000000000");
    assert_eq!(status_field(ahead, "CapBnd"), "0000000000000000");
    assert_eq!(cmdline(ahead), cmdline(spare));
    // The next command is that process, confined as any other: it writes
    // the workspace and its tmp, and nothing protected or outside.
    let events = srv
        .run(
            "s",
            vec![shell(
                "c",
                "echo pid=$$; grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; \
                 touch ok.txt && echo x | tee \"$TMPDIR/t\"",
            )],
        )
        .await;
    assert_eq!(result_of(&events, "c")["exit_code"], json!(0), "{events:?}");
    let output = streamed(&events);
    assert!(output.contains(&format!("pid={ahead}\n")), "{output}");
    assert!(
        output.contains("NoNewPrivs:\t1\nSeccomp:\t2\nx\n"),
        "{output}"
    );
    assert!(srv.path("ok.txt").exists());
    // Each later command too (each runs in the process its spare confined).
    for command in [
        "echo x | tee -a repo/.git/config".to_string(),
        "echo x | tee repo/.git/hooks/pre-commit".to_string(),
        format!("cat {}", secret.display()),
        format!("echo x | tee {}.w", secret.display()),
        "mkdir -p sub/.git".to_string(),
    ] {
        let spare = the_spare(zygote).await;
        let ahead = the_process_confined_ahead(spare).await;
        let events = srv
            .run("s", vec![shell("c", &format!("echo pid=$$; {command}"))])
            .await;
        let (kind, message) = error_of(&events, "c");
        assert_eq!(kind, pb::ErrorType::SandboxDenied, "{command}: {message}");
        let output = streamed(&events);
        assert!(
            output.contains(&format!("pid={ahead}\n")),
            "{command}: {output}"
        );
        assert!(
            !output.contains("secret-7f3a") && !message.contains("secret-7f3a"),
            "{output}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(srv.path("repo/.git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!srv.path("repo/.git/hooks/pre-commit").exists());
    assert!(!srv.path("sub/.git").exists());
    assert!(!std::path::Path::new(&format!("{}.w", secret.display())).exists());
    let _ = std::fs::remove_file(&secret);
    // A command of other options (a stricter level for this session) does
    // not fit the process confined for these: it is killed, and the
    // command's own process is confined for its level.
    let spare = the_spare(zygote).await;
    let ahead = the_process_confined_ahead(spare).await;
    let events = srv
        .schedule_with(pb::ScheduleCallsRequest {
            sandbox_level: pb::SandboxLevel::ReadOnly as i32,
            ..request("s", vec![shell("c", "echo pid=$$; touch ro.txt")])
        })
        .await;
    let events = collect(events).await;
    assert_eq!(
        error_of(&events, "c").0,
        pb::ErrorType::SandboxDenied,
        "{events:?}"
    );
    assert!(!srv.path("ro.txt").exists());
    wait_exited(ahead);
    // And the next read_only command is confined ahead for read_only.
    let spare = the_spare(zygote).await;
    let ahead = the_process_confined_ahead(spare).await;
    let events = srv
        .run("s", vec![shell("c", "echo pid=$$; touch ro2.txt")])
        .await;
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{message}");
    assert!(
        streamed(&events).contains(&format!("pid={ahead}\n")),
        "{events:?}"
    );
    assert!(!srv.path("ro2.txt").exists());
}

/// A command at level `none` runs in the zygote's mount namespace whatever
/// ran before it: a spare that made a namespace for the next confined
/// command (and confined a process in it) takes it back to the zygote's.
#[tokio::test]
async fn an_unconfined_command_runs_in_the_zygotes_namespace_after_a_confined_one() {
    use toolsched::sandbox::SandboxLevel;
    must_confine();
    let srv = server_at(SandboxLevel::None).await;
    // The worker's parent is the zygote.
    // And in its own directory (a breaker's finding: `setns` had moved it
    // to `/`, where its relative writes went).
    let probe = "z=$(awk '{print $4}' /proc/$PPID/stat); \
                 echo zygote=$(readlink /proc/$z/ns/mnt) self=$(readlink /proc/self/ns/mnt) \
                 pwd=$(pwd); touch made-here";
    std::fs::create_dir(srv.path("sub")).unwrap();
    // What an earlier run that failed here left.
    let _ = std::fs::remove_file("/made-here");
    let same = |events: &[Event]| {
        let out = streamed(events);
        let field = |name: &str| {
            out.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {out:?}"))
                .to_string()
        };
        field("zygote=") == field("self=")
    };
    for round in 0..3 {
        // A confined command in another session, then an unconfined one.
        let events = srv
            .schedule_with(pb::ScheduleCallsRequest {
                sandbox_level: pb::SandboxLevel::WorkspaceWrite as i32,
                ..request("confined", vec![shell("c", probe)])
            })
            .await;
        let events = collect(events).await;
        assert_eq!(result_of(&events, "c")["exit_code"], json!(0), "{events:?}");
        let (dir, args) = if round % 2 == 0 {
            (srv.path(""), json!({ "command": probe }))
        } else {
            (
                srv.path("sub"),
                json!({ "command": probe, "dir_path": "sub" }),
            )
        };
        let events = srv.run("none", vec![shell_args("c", args)]).await;
        assert_eq!(result_of(&events, "c")["exit_code"], json!(0), "{events:?}");
        assert!(same(&events), "round {round}: {}", streamed(&events));
        let dir = dir.canonicalize().unwrap();
        assert!(
            streamed(&events).contains(&format!("pwd={}\n", dir.display())),
            "round {round}: {}",
            streamed(&events)
        );
        let made = dir.join("made-here");
        assert!(made.exists(), "round {round}: {}", streamed(&events));
        std::fs::remove_file(made).unwrap();
        assert!(!std::path::Path::new("/made-here").exists());
    }
}

/// The state letter of `/proc/<pid>/stat` (R, S, T, Z…).
fn state_of(pid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .unwrap_or('?')
}

/// A process confined ahead that a same-user process outside any sandbox
/// stopped or killed while it waited is not used: the command's own process
/// runs it (a breaker's finding: a stopped one held the command, deaf to
/// cancel, until its timeout).
#[tokio::test]
async fn a_process_confined_ahead_that_was_stopped_or_killed_is_not_used() {
    let srv = confining_server().await;
    let zygote = zygote_after_a_first_command(&srv).await;
    for (signal, state) in [(libc::SIGSTOP, 'T'), (libc::SIGKILL, 'Z')] {
        let spare = the_spare(zygote).await;
        let ahead = the_process_confined_ahead(spare).await;
        // SAFETY: signalling a process of this test's server.
        unsafe { libc::kill(ahead, signal) };
        eventually(
            || format!("{ahead} in state {}", state_of(ahead)),
            || state_of(ahead) == state,
        )
        .await;
        let events = srv.run("s", vec![shell("c", "echo ran-$$")]).await;
        assert_eq!(result_of(&events, "c")["exit_code"], json!(0), "{events:?}");
        let output = streamed(&events);
        assert!(output.starts_with("ran-"), "{output}");
        assert_ne!(output.trim(), format!("ran-{ahead}"));
        // Reaped, not left behind.
        assert!(
            !std::path::Path::new(&format!("/proc/{ahead}")).exists() || state_of(ahead) == '?',
            "{ahead} left in state {}",
            state_of(ahead)
        );
    }
}

/// A command's `dir_path` is entered as it was when the call was accepted:
/// a directory on its path swapped for a symlink since (here by the call
/// before it in the batch; by another session's command in the breaker's
/// finding) is refused, where entering by path followed the link to `/`
/// and a level-`none` command's relative writes went to the host's root.
#[tokio::test]
async fn a_dir_path_swapped_for_a_symlink_after_acceptance_is_not_followed() {
    use toolsched::sandbox::SandboxLevel;
    must_confine();
    let marker = format!("toolsched-swapped-{}", uuid::Uuid::new_v4().simple());
    for level in [SandboxLevel::None, SandboxLevel::WorkspaceWrite] {
        let srv = server_at(level).await;
        std::fs::create_dir_all(srv.path("rc/d/in")).unwrap();
        let events = srv
            .run(
                "s",
                vec![
                    shell("swap", "cd rc && mv d d2 && ln -s / d"),
                    shell_args(
                        "c",
                        json!({ "command": format!("pwd; touch {marker}"), "dir_path": "rc/d" }),
                    ),
                    shell_args(
                        "deeper",
                        json!({ "command": format!("pwd; touch {marker}"), "dir_path": "rc/d/in" }),
                    ),
                ],
            )
            .await;
        assert_eq!(
            result_of(&events, "swap")["exit_code"],
            json!(0),
            "{events:?}"
        );
        for id in ["c", "deeper"] {
            let (_, message) = error_of(&events, id);
            assert!(
                message.contains("no longer the directory the call was accepted with"),
                "{level}: {id}: {message}"
            );
        }
        assert!(!std::path::Path::new("/").join(&marker).exists(), "{level}");
        assert!(!srv.path("rc/d2").join(&marker).exists(), "{level}");
        // The directory itself, renamed, is still entered (twice: the
        // second time by the process a spare confined ahead, at a confined
        // level, which enters the worker's directory through an fd of it).
        for _ in 0..2 {
            let events = srv
                .run(
                    "s",
                    vec![shell_args(
                        "c",
                        json!({ "command": "pwd", "dir_path": "rc/d2/in" }),
                    )],
                )
                .await;
            assert_eq!(result_of(&events, "c")["exit_code"], json!(0), "{events:?}");
            let want = srv.path("rc/d2/in").canonicalize().unwrap();
            assert_eq!(
                streamed(&events),
                format!("{}\n", want.display()),
                "{level}"
            );
        }
    }
    let _ = std::fs::remove_file(std::path::Path::new("/").join(&marker));
}

/// A spare that something outside the sandbox stopped is not handed the
/// next command: the command runs in a worker forked for it (a breaker's
/// finding: the stopped spare held it until its timeout).
#[tokio::test]
async fn a_stopped_spare_is_not_handed_a_command() {
    let srv = confining_server().await;
    let zygote = zygote_after_a_first_command(&srv).await;
    let spare = the_spare(zygote).await;
    // SAFETY: signalling a process of this test's server.
    unsafe { libc::kill(spare, libc::SIGSTOP) };
    eventually(
        || format!("{spare} in state {}", state_of(spare)),
        || state_of(spare) == 'T',
    )
    .await;
    let events = srv
        .run(
            "s",
            vec![shell_args(
                "c",
                json!({ "command": "echo ran-in-$PPID", "timeout": 20 }),
            )],
        )
        .await;
    assert_eq!(result_of(&events, "c")["exit_code"], json!(0), "{events:?}");
    let output = streamed(&events);
    assert!(
        output.contains("ran-in-") && !output.contains(&format!("ran-in-{spare}\n")),
        "{output}"
    );
    wait_exited(spare);
}
