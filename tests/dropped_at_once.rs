//! A stream dropped at once cancels its batch (README, "The API in brief":
//! "Dropping the stream cancels the batch"), even when the drop reaches the
//! session before the batch did: the session's actor took its commands
//! (the batch) and its internal reports (the stream's detach) in random
//! order, and a detach seen first found no such batch ("already completed")
//! and was forgotten; the batch then ran to its end with nobody reading.
//! Found by a review (session 11): a Python client cancelling right after
//! the call started had 2 of 40 batches run their command.

use crate::support;

use serde_json::json;
use support::*;

/// Whether the session's batch `dropped` wrote its marker, known without a
/// timer: the session's next batch runs only after it ended (cancelled, or
/// run to its end).
async fn marker_written(server: &TestServer, session: &str) -> bool {
    let events = server
        .run(
            session,
            vec![call(
                "check",
                "run_shell_command",
                json!({"command": "cat marker 2>/dev/null || true"}),
            )],
        )
        .await;
    success_output(&events, "check").contains("ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_at_once_cancels_its_batch() {
    let server = TestServer::with_config(yolo()).await;
    for i in 0..100u32 {
        let session = format!("dropped-{i}");
        // The command writes its marker only if it is not cancelled within
        // seconds of starting (a cancel takes milliseconds).
        let req = request(
            &session,
            vec![call(
                "slow",
                "run_shell_command",
                json!({"command": "sleep 3; echo ran > marker"}),
            )],
        );
        let mut client = server.client.clone();
        let sent = tokio::spawn(async move { client.schedule_calls(req).await });
        // Dropped at different points of the request's way in.
        for _ in 0..(i % 4) {
            tokio::task::yield_now().await;
        }
        sent.abort();
        let _ = sent.await;
        assert!(
            !marker_written(&server, &session).await,
            "batch {i}: its stream was dropped, yet it ran to its end"
        );
        let _ = std::fs::remove_file(server.path("marker"));
    }
    server.shutdown().await;
}
