//! The zygote every worker is forked from (`src/sandbox/zygote.rs`): a
//! worker killed from outside ends its call as a killed worker always did
//! (the zygote reports how it was reaped), and a zygote that died is
//! replaced for the next command, which then runs confined as any other.

use crate::support;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde_json::json;
use support::*;
use toolsched::api::pb;

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
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
    if !kernel_enforces(toolsched::sandbox::SandboxLevel::WorkspaceWrite) {
        return;
    }
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
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
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
