//! Cancellation: Cancel while awaiting approval, while executing (the process
//! group is really gone), while queued; a client that drops its stream; a
//! confirmation timeout; server shutdown.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;

async fn cancel(srv: &TestServer, session: &str, batch_id: Option<&str>) -> pb::CancelResponse {
    srv.client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: session.into(),
            batch_id: batch_id.map(Into::into),
            reason: "stop please".into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Waits for the shell call's first output chunk containing `marker`; returns
/// the command's pid (its process group id).
async fn await_output(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    seen: &mut Vec<Event>,
    call_id: &str,
    marker: &str,
) -> i32 {
    let mut pid = None;
    loop {
        let ev = next_matching(stream, seen, |e| {
            matches!(e, Event::CallUpdate(u) if u.call_id == call_id
                && matches!(u.state, Some(State::Executing(_))))
        })
        .await;
        if let Event::CallUpdate(pb::ToolCallUpdate {
            state: Some(State::Executing(x)),
            ..
        }) = ev
        {
            if let Some(p) = x.pid {
                pid = Some(p as i32);
            }
            if x.output_chunk.contains(marker) {
                return pid.expect("pid reported before output");
            }
        }
    }
}

fn group_alive(pgid: i32) -> bool {
    !live_group_members(pgid).is_empty()
}

#[tokio::test]
async fn cancel_while_executing_kills_the_whole_process_group() {
    let srv = TestServer::with_config(yolo()).await;
    let mut stream = srv
        .schedule(
            "s",
            vec![
                call(
                    "sh",
                    "run_shell_command",
                    json!({"command": "sleep 1000 & echo started; sleep 1000; touch after.txt"}),
                ),
                call("r", "read_file", json!({"file_path": "nothing"})),
            ],
        )
        .await;
    let mut seen = Vec::new();
    let pgid = await_output(&mut stream, &mut seen, "sh", "started").await;
    assert!(group_alive(pgid));
    let summary = cancel(&srv, "s", None).await;
    assert_eq!(summary.cancelled_calls, 2);
    assert_eq!(summary.cancelled_batches, 1);
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "sh"),
        ["validating", "scheduled", "executing", "cancelled"]
    );
    assert_eq!(states(&seen, "r"), ["validating", "cancelled"]);
    match terminal(&seen, "sh") {
        State::Cancelled(c) => {
            assert_eq!(c.reason, "stop please");
            let resp = response_json(c.response.as_ref().unwrap());
            assert_eq!(resp["error"], "[Operation Cancelled] stop please");
            assert!(resp["output"].as_str().unwrap().contains("started"));
        }
        other => panic!("{other:?}"),
    }
    assert!(wait_group_gone(pgid).await, "process group {pgid} survived");
    assert!(!srv.path("after.txt").exists());
    // The session is free for the next batch at once.
    std::fs::write(srv.path("x"), "x\n").unwrap();
    let next = srv
        .run(
            "s",
            vec![call("r2", "read_file", json!({"file_path": "x"}))],
        )
        .await;
    assert_eq!(success_output(&next, "r2"), "x\n");
}

#[tokio::test]
async fn cancel_while_awaiting_approval_and_while_queued() {
    let srv = TestServer::start().await;
    let mut first = srv
        .schedule(
            "s",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "a", "content": "a"}),
            )],
        )
        .await;
    let mut seen_a = Vec::new();
    await_prompt(&mut first, &mut seen_a, "w").await;
    let mut second = srv
        .schedule("s", vec![call("q", "read_file", json!({"file_path": "a"}))])
        .await;
    let queued_id = match second.message().await.unwrap().unwrap().event {
        Some(Event::BatchAccepted(a)) => a.batch_id,
        other => panic!("{other:?}"),
    };
    // Cancel only the queued batch: its call ends Cancelled, the first batch
    // still waits for its answer.
    let summary = cancel(&srv, "s", Some(&queued_id)).await;
    assert_eq!((summary.cancelled_calls, summary.cancelled_batches), (1, 1));
    let events_b = collect(second).await;
    assert_eq!(states(&events_b, "q"), ["cancelled"]);
    assert_eq!(completed(&events_b).responses.len(), 1);
    // An unknown batch id is NOT_FOUND.
    let err = srv
        .client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: "s".into(),
            batch_id: Some(queued_id.clone()),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    // Now the awaiting call.
    cancel(&srv, "s", None).await;
    seen_a.extend(collect(first).await);
    assert_eq!(
        states(&seen_a, "w"),
        ["validating", "awaiting_approval", "cancelled"]
    );
    assert!(!srv.path("a").exists());
}

#[tokio::test]
async fn a_client_that_drops_its_stream_cancels_its_batch() {
    let srv = TestServer::with_config(yolo()).await;
    let mut first = srv
        .schedule(
            "s",
            vec![call(
                "sh",
                "run_shell_command",
                json!({"command": "echo started; sleep 1000; touch after.txt"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let pgid = await_output(&mut first, &mut seen, "sh", "started").await;
    std::fs::write(srv.path("x"), "x\n").unwrap();
    let mut second = srv
        .schedule("s", vec![call("r", "read_file", json!({"file_path": "x"}))])
        .await;
    let accepted = second.message().await.unwrap().unwrap();
    assert!(matches!(accepted.event, Some(Event::BatchAccepted(ref a)) if a.queued));
    drop(first);
    // The queued batch runs once the dropped one is cancelled, which happens
    // only after its process group is gone.
    let events = collect(second).await;
    assert_eq!(success_output(&events, "r"), "x\n");
    assert!(wait_group_gone(pgid).await, "process group {pgid} survived");
    assert!(!srv.path("after.txt").exists());
}

#[tokio::test]
async fn an_unanswered_prompt_is_cancelled_by_the_confirmation_timeout() {
    let srv = TestServer::with_config(SchedulerConfig {
        confirmation_timeout: Some(Duration::from_millis(200)),
        ..SchedulerConfig::default()
    })
    .await;
    let events = srv
        .run(
            "s",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "a", "content": "a"}),
            )],
        )
        .await;
    assert_eq!(
        states(&events, "w"),
        ["validating", "awaiting_approval", "cancelled"]
    );
    match terminal(&events, "w") {
        State::Cancelled(c) => assert!(
            c.reason.starts_with("Confirmation timed out"),
            "{}",
            c.reason
        ),
        other => panic!("{other:?}"),
    }
    assert!(!srv.path("a").exists());
    // An answer that lost the race with the timeout is told the call ended.
    let correlation = events
        .iter()
        .find_map(|e| match e {
            Event::CallUpdate(u) => match &u.state {
                Some(State::AwaitingApproval(a)) => Some(a.correlation_id.clone()),
                _ => None,
            },
            _ => None,
        })
        .unwrap();
    let late = srv
        .confirm(
            "s",
            "w",
            &correlation,
            pb::ConfirmationOutcome::ProceedOnce,
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(late.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        late.message(),
        "call 'w' already ended (cancelled) and its batch has completed; there is no prompt to answer"
    );
    let unknown = srv
        .confirm(
            "s",
            "nope",
            &correlation,
            pb::ConfirmationOutcome::ProceedOnce,
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn shutdown_cancels_running_calls_after_the_grace_and_refuses_new_batches() {
    let srv = TestServer::with_options(
        yolo(),
        toolsched::api::ServerOptions {
            shutdown_grace: Duration::from_millis(100),
            ..Default::default()
        },
    )
    .await;
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "sh",
                "run_shell_command",
                json!({"command": "echo started; sleep 1000"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let pgid = await_output(&mut stream, &mut seen, "sh", "started").await;
    let client = srv.client.clone();
    let stopping = tokio::spawn(srv.shutdown());
    seen.extend(collect(stream).await);
    match terminal(&seen, "sh") {
        State::Cancelled(c) => assert_eq!(c.reason, "The server is shutting down."),
        other => panic!("{other:?}"),
    }
    assert!(wait_group_gone(pgid).await, "process group {pgid} survived");
    stopping.await.unwrap();
    let refused = client
        .clone()
        .schedule_calls(request(
            "s",
            vec![call("r", "read_file", json!({"file_path": "x"}))],
        ))
        .await;
    let status = refused.expect_err("a stopped server accepted a batch");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
}

/// An open health Watch never ends by itself: the server still exits, once
/// `shutdown_close` after the drain has passed.
#[tokio::test]
async fn an_open_health_watch_does_not_keep_the_server_alive() {
    let mut srv = TestServer::with_options(
        yolo(),
        toolsched::api::ServerOptions {
            shutdown_grace: Duration::from_millis(100),
            shutdown_close: Duration::from_millis(200),
            ..Default::default()
        },
    )
    .await;
    let mut watch = srv
        .health()
        .await
        .watch(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    let not_serving = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;
    assert_eq!(watch.message().await.unwrap().unwrap().status, serving);
    srv.begin_shutdown();
    assert_eq!(watch.message().await.unwrap().unwrap().status, not_serving);
    // The server task ends (a hang fails here rather than blocking CI).
    tokio::time::timeout(Duration::from_secs(60), srv.shutdown())
        .await
        .expect("the server exited with a health Watch still open");
}

#[tokio::test]
async fn during_the_grace_health_is_not_serving_and_new_batches_are_unavailable() {
    let mut srv = TestServer::with_options(
        yolo(),
        toolsched::api::ServerOptions {
            shutdown_grace: Duration::from_secs(300),
            ..Default::default()
        },
    )
    .await;
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "sh",
                "run_shell_command",
                json!({"command": "echo started; sleep 1000"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    await_output(&mut stream, &mut seen, "sh", "started").await;
    let health = srv.health().await;
    let check = |service: &'static str| {
        let mut health = health.clone();
        async move {
            health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .unwrap()
                .into_inner()
                .status
        }
    };
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    let not_serving = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;
    // Both the server as a whole ("") and the service serve until then.
    assert_eq!(check("").await, serving);
    assert_eq!(check("toolsched.v1.ToolScheduler").await, serving);
    // Watch the service's status: a stream of changes, no polling.
    let mut watch = health
        .clone()
        .watch(tonic_health::pb::HealthCheckRequest {
            service: "toolsched.v1.ToolScheduler".into(),
        })
        .await
        .unwrap()
        .into_inner();
    srv.begin_shutdown();
    loop {
        let status = tokio::time::timeout(Duration::from_secs(10), watch.message())
            .await
            .expect("health changed within 10 s")
            .unwrap()
            .expect("watch stream open")
            .status;
        if status == not_serving {
            break;
        }
        assert_eq!(status, serving);
    }
    // "" went NOT_SERVING before the service did.
    assert_eq!(check("").await, not_serving);
    let err = srv
        .client
        .clone()
        .schedule_calls(request(
            "t",
            vec![call("r", "read_file", json!({"file_path": "x"}))],
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("shutting down"), "{err:?}");
    // The running batch still finishes normally (here: cancelled by its
    // client), which ends the drain.
    cancel(&srv, "s", None).await;
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "sh"),
        ["validating", "scheduled", "executing", "cancelled"]
    );
}
