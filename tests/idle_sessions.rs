//! A light idle session (issue 17 item 4): a session idle for a second has
//! no actor (its mode, rules and topic are kept as data by the hub) and its
//! last batch's log is compacted; everything a client sees stays the same.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;
use toolsched::api::pb::{self, ConfirmationOutcome as O};

/// Waits (bounded) until no session of `srv` has an actor: each went idle
/// and handed its state to the hub.
async fn until_no_actor(srv: &TestServer) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while srv.metrics.session_actors() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} session actors still run",
            srv.metrics.session_actors()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get_session(srv: &TestServer, session: &str) -> pb::GetSessionResponse {
    srv.client
        .clone()
        .get_session(pb::GetSessionRequest {
            session_id: session.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn an_idle_session_without_its_actor_keeps_its_mode_and_rules_and_runs_its_next_batch() {
    let srv = TestServer::start().await;
    // "Always" on an edit: the session switches to auto_edit.
    let (stream, _, prompt) = srv
        .prompt(
            "s",
            call(
                "w",
                "write_file",
                json!({"file_path": "a.txt", "content": "a"}),
            ),
        )
        .await;
    srv.confirm("s", "w", &prompt.correlation_id, O::ProceedAlways, None)
        .await
        .unwrap();
    collect(stream).await;
    // "Always" on a shell command: a rule for its root commands.
    let (stream, _, prompt) = srv
        .prompt(
            "s",
            call(
                "sh",
                "run_shell_command",
                json!({"command": "mkdir -p d1 && touch d1/f"}),
            ),
        )
        .await;
    srv.confirm("s", "sh", &prompt.correlation_id, O::ProceedAlways, None)
        .await
        .unwrap();
    collect(stream).await;
    until_no_actor(&srv).await;

    let shown = get_session(&srv, "s").await;
    assert_eq!(shown.session_id, "s");
    assert_eq!(shown.approval_mode, pb::ApprovalMode::AutoEdit as i32);
    assert_eq!(shown.running_batch_id, "");
    assert!(shown.queued_batch_ids.is_empty());

    // The next batch starts a new actor with what the last one kept: the
    // edit and the approved root commands run without asking.
    let events = collect(
        srv.schedule_with(pb::ScheduleCallsRequest {
            interactive: Some(false),
            ..request(
                "s",
                vec![
                    call(
                        "w2",
                        "write_file",
                        json!({"file_path": "b.txt", "content": "b"}),
                    ),
                    call(
                        "sh2",
                        "run_shell_command",
                        json!({"command": "mkdir -p d2 && touch d2/g"}),
                    ),
                    call("sh3", "run_shell_command", json!({"command": "rm b.txt"})),
                ],
            )
        })
        .await,
    )
    .await;
    assert_eq!(
        states(&events, "w2"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(
        states(&events, "sh2"),
        ["validating", "scheduled", "executing", "success"]
    );
    // `rm` was never approved: still asks (an error, non-interactive).
    assert_eq!(states(&events, "sh3"), ["validating", "error"]);
    assert_eq!(std::fs::read_to_string(srv.path("b.txt")).unwrap(), "b");
    assert!(srv.path("d2/g").exists());
}

type Refusal = (tonic::Code, String);

async fn confirm(srv: &TestServer) -> Result<(), Refusal> {
    srv.confirm("s", "r", "c-1", O::ProceedOnce, None)
        .await
        .map_err(|s| (s.code(), s.message().to_string()))
}

async fn cancel(srv: &TestServer, batch: Option<String>) -> Result<pb::CancelResponse, Refusal> {
    srv.client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: "s".into(),
            batch_id: batch,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
        .map_err(|s| (s.code(), s.message().to_string()))
}

#[tokio::test]
async fn confirm_cancel_and_get_session_answer_the_same_with_and_without_the_actor() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a"), "a\n").unwrap();
    let events = srv
        .run("s", vec![call("r", "read_file", json!({"file_path": "a"}))])
        .await;
    let batch_id = completed(&events).batch_id;
    // With its actor (just after the batch)…
    let with_actor = (
        confirm(&srv).await,
        cancel(&srv, None).await,
        cancel(&srv, Some(batch_id.clone())).await,
        cancel(&srv, Some("b-none".into())).await,
        get_session(&srv, "s").await,
    );
    until_no_actor(&srv).await;
    // …and without: the same answers.
    let without = (
        confirm(&srv).await,
        cancel(&srv, None).await,
        cancel(&srv, Some(batch_id.clone())).await,
        cancel(&srv, Some("b-none".into())).await,
        get_session(&srv, "s").await,
    );
    assert_eq!(with_actor, without);
    let (confirmed, idle_cancel, _, unknown, shown) = without;
    let (code, message) = confirmed.unwrap_err();
    assert_eq!(code, tonic::Code::FailedPrecondition, "{message}");
    assert_eq!(idle_cancel.unwrap(), pb::CancelResponse::default());
    assert_eq!(unknown.unwrap_err().0, tonic::Code::NotFound);
    assert_eq!(shown.approval_mode, pb::ApprovalMode::Default as i32);
}

#[tokio::test]
async fn a_retained_batch_reads_the_same_after_its_log_is_compacted() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a"), "a\n").unwrap();
    let req = pb::ScheduleCallsRequest {
        request_id: "req-1".into(),
        ..request(
            "s",
            vec![
                call("r", "read_file", json!({"file_path": "a"})),
                call("m", "read_file", json!({"file_path": "missing"})),
            ],
        )
    };
    let mut live = Vec::new();
    let mut stream = srv.schedule_with(req.clone()).await;
    while let Some(msg) = stream.message().await.unwrap() {
        live.push(msg);
    }
    drop(stream);
    let Some(pb::schedule_calls_response::Event::BatchCompleted(done)) =
        &live.last().unwrap().event
    else {
        panic!("the stream ends with BatchCompleted: {live:?}");
    };
    let batch_id = done.batch_id.clone();
    // Its only reader went away with the stream: the log is compacted (the
    // session's actor, idle for a second, is gone by then too).
    until_no_actor(&srv).await;
    let watched: Vec<pb::ScheduleCallsResponse> = {
        let mut stream = srv
            .client
            .clone()
            .watch_batch(pb::WatchBatchRequest {
                session_id: "s".into(),
                batch_id: batch_id.clone(),
                after_sequence: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        while let Some(msg) = stream.message().await.unwrap() {
            out.push(msg);
        }
        out
    };
    use prost::Message;
    let bytes = |v: &[pb::ScheduleCallsResponse]| -> Vec<Vec<u8>> {
        v.iter().map(Message::encode_to_vec).collect()
    };
    assert_eq!(bytes(&watched), bytes(&live), "WatchBatch: the same bytes");
    // A replayed request id: the same, its BatchAccepted marked replayed.
    let mut replayed = Vec::new();
    let mut stream = srv.schedule_with(req).await;
    while let Some(msg) = stream.message().await.unwrap() {
        replayed.push(msg);
    }
    let mut expected = live.clone();
    match &mut expected[0].event {
        Some(pb::schedule_calls_response::Event::BatchAccepted(a)) => a.replayed = true,
        other => panic!("the first event is BatchAccepted: {other:?}"),
    }
    assert_eq!(bytes(&replayed), bytes(&expected));
    // From the middle, too.
    let after = live[2].sequence;
    let mut stream = srv
        .client
        .clone()
        .watch_batch(pb::WatchBatchRequest {
            session_id: "s".into(),
            batch_id,
            after_sequence: after,
        })
        .await
        .unwrap()
        .into_inner();
    let mut tail = Vec::new();
    while let Some(msg) = stream.message().await.unwrap() {
        tail.push(msg);
    }
    assert_eq!(bytes(&tail), bytes(&live[3..]));
}
