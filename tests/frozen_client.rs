//! A client that freezes (SIGSTOP; a dead NAT behaves the same) while its
//! batch runs is noticed by the server's HTTP/2 keepalive: the unanswered
//! PING closes the connection within interval + timeout, and the batch is
//! cancelled as disconnected (issue 11 item 8). The client is a real child
//! process (Python grpcio), really stopped.

use crate::support;

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use support::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use toolsched::api::{ServerOptions, pb};

#[tokio::test]
async fn a_frozen_client_is_dropped_and_its_batch_cancelled() {
    let srv = TestServer::with_options(
        yolo(),
        ServerOptions {
            http2_keepalive_interval: Duration::from_secs(1),
            http2_keepalive_timeout: Duration::from_secs(1),
            ..ServerOptions::default()
        },
    )
    .await;
    let out_dir = tempfile::tempdir().unwrap();
    let marker = srv.path("terminated");
    let root = env!("CARGO_MANIFEST_DIR");
    let mut child = tokio::process::Command::new(venv_tool("python"))
        .arg(format!("{root}/tests/python/frozen.py"))
        .arg(srv.addr.to_string())
        .arg(format!("{root}/proto"))
        .arg(out_dir.path())
        .arg(&marker)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run python");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines
        .next_line()
        .await
        .unwrap()
        .expect("a line from the client");
    let pgid: i32 = first
        .strip_prefix("executing ")
        .unwrap_or_else(|| panic!("{first}"))
        .parse()
        .unwrap();
    let client = Pid::from_raw(child.id().unwrap() as i32);
    kill(client, Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();

    // While the frozen client's batch runs, a second batch of its session
    // waits behind it; it starts once the server has dropped the client and
    // cancelled the batch (no Cancel is sent by anyone).
    let mut stream = srv
        .schedule_with(pb::ScheduleCallsRequest {
            approval_mode: pb::ApprovalMode::Yolo as i32,
            ..request(
                "frozen",
                vec![call("next", "update_topic", json!({"topic": "after"}))],
            )
        })
        .await;
    let mut seen = Vec::new();
    let accepted = next_matching(&mut stream, &mut seen, |e| {
        matches!(e, Event::BatchAccepted(_))
    })
    .await;
    let Event::BatchAccepted(accepted) = accepted else {
        unreachable!()
    };
    assert!(accepted.queued, "behind the frozen client's batch");
    seen.extend(collect(stream).await);
    let detected = stopped.elapsed();
    assert_eq!(states(&seen, "next").last(), Some(&"success"));
    // The command was stopped as a cancelled call's is: SIGTERM to its
    // group (its trap wrote the marker), nothing of it left.
    assert!(wait_group_gone(pgid).await, "the command's group is gone");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "terminated\n");

    // Resumed, the client finds its stream gone, never completed.
    kill(client, Signal::SIGCONT).unwrap();
    let last = lines
        .next_line()
        .await
        .unwrap()
        .expect("how the stream ended");
    assert!(last.starts_with("stream failed: "), "{last}");
    assert!(child.wait().await.unwrap().success());
    eprintln!(
        "frozen client detected {:.1} s after SIGSTOP (keepalive 1 s + 1 s)",
        detected.as_secs_f64()
    );
}
