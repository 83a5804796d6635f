//! At `max_sessions`, a new session evicts the least recently used idle
//! session instead of being refused (issue 11 item 7: one client filling
//! every slot locked everyone out for the idle TTL); a session with an open
//! batch stream is never evicted, and when every session is busy a new one
//! is RESOURCE_EXHAUSTED naming the limit.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;

fn topic(id: &str) -> pb::FunctionCall {
    call(id, "update_topic", json!({"topic": "t"}))
}

/// Whether the server still knows `session`: a Confirm for an unknown call
/// names the call when the session exists, the session when it does not.
async fn known(srv: &TestServer, session: &str) -> bool {
    let err = srv
        .confirm(
            session,
            "nope",
            "nope",
            pb::ConfirmationOutcome::ProceedOnce,
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    if err.message() == format!("no session '{session}'") {
        return false;
    }
    assert_eq!(
        err.message(),
        format!("no call 'nope' in session '{session}'")
    );
    true
}

#[tokio::test]
async fn the_least_recently_used_idle_session_makes_room() {
    let srv = TestServer::with_config(SchedulerConfig {
        max_sessions: 3,
        ..SchedulerConfig::default()
    })
    .await;
    for s in ["a", "b", "c"] {
        let events = srv.run(s, vec![topic("t")]).await;
        assert_eq!(states(&events, "t").last(), Some(&"success"));
    }
    // Touching "a" (a Confirm reaches it) makes "b" the least recently used.
    assert!(known(&srv, "a").await);
    // The example: every slot is held by an idle session, yet new sessions
    // keep being accepted, each evicting the oldest idle one.
    for (new, evicted) in [("d", "b"), ("e", "c"), ("f", "a")] {
        let events = srv.run(new, vec![topic("t")]).await;
        assert_eq!(states(&events, "t").last(), Some(&"success"), "{new}");
        assert!(
            !known(&srv, evicted).await,
            "{evicted} should have been evicted for {new}"
        );
    }
    for s in ["d", "e", "f"] {
        assert!(known(&srv, s).await, "{s}");
    }
}

#[tokio::test]
async fn a_session_with_an_open_stream_is_never_evicted() {
    let srv = TestServer::with_config(SchedulerConfig {
        max_sessions: 2,
        ..SchedulerConfig::default()
    })
    .await;
    // Two sessions, each with a batch waiting for approval.
    let mut open = Vec::new();
    for s in ["p", "q"] {
        let mut stream = srv
            .schedule(
                s,
                vec![call(
                    "w",
                    "write_file",
                    json!({"file_path": format!("{s}.txt"), "content": "x"}),
                )],
            )
            .await;
        let mut seen = Vec::new();
        let prompt = await_prompt(&mut stream, &mut seen, "w").await;
        open.push((s, stream, seen, prompt));
    }
    let err = srv
        .client
        .clone()
        .schedule_calls(request("r", vec![topic("t")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        "2 sessions are live, each with an open batch stream; the limit is max_sessions = 2"
    );
    // "p" finishes; its stream ends: "p" is idle and gives way to "r",
    // while "q"'s prompt is still there to answer.
    let (s, stream, mut seen, prompt) = open.remove(0);
    srv.confirm(
        s,
        "w",
        &prompt.correlation_id,
        pb::ConfirmationOutcome::ProceedOnce,
        None,
    )
    .await
    .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(states(&seen, "w").last(), Some(&"success"));
    let events = srv.run("r", vec![topic("t")]).await;
    assert_eq!(states(&events, "t").last(), Some(&"success"));
    assert!(!known(&srv, "p").await);
    let (s, stream, mut seen, prompt) = open.remove(0);
    srv.confirm(
        s,
        "w",
        &prompt.correlation_id,
        pb::ConfirmationOutcome::ProceedOnce,
        None,
    )
    .await
    .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "w"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(std::fs::read_to_string(srv.path("q.txt")).unwrap(), "x");
}
