//! The per-session request queue: batches of one session never interleave;
//! other sessions run independently.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb::{self, ConfirmationOutcome as O};

#[tokio::test]
async fn a_second_batch_waits_behind_the_first_and_starts_after_it_completes() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("r.txt"), "r\n").unwrap();
    let mut first = srv
        .schedule(
            "s",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "a.txt", "content": "a"}),
            )],
        )
        .await;
    let mut seen_a = Vec::new();
    let prompt = await_prompt(&mut first, &mut seen_a, "w").await;

    let mut second = srv
        .schedule(
            "s",
            vec![call("r", "read_file", json!({"file_path": "r.txt"}))],
        )
        .await;
    let accepted = second.message().await.unwrap().unwrap();
    match accepted.event {
        Some(Event::BatchAccepted(a)) => {
            assert!(a.queued);
            assert_eq!(a.batches_ahead, 1);
        }
        other => panic!("{other:?}"),
    }
    // Another session is not held up by session "s".
    let other = srv
        .run(
            "other",
            vec![call("r", "read_file", json!({"file_path": "r.txt"}))],
        )
        .await;
    assert_eq!(success_output(&other, "r"), "r\n");

    srv.confirm("s", "w", &prompt.correlation_id, O::ProceedOnce, None)
        .await
        .unwrap();
    let mut raw_a = Vec::new();
    while let Some(m) = first.message().await.unwrap() {
        raw_a.push(m);
    }
    let mut raw_b = Vec::new();
    while let Some(m) = second.message().await.unwrap() {
        raw_b.push(m);
    }
    let a_completed = raw_a.last().unwrap();
    assert!(matches!(a_completed.event, Some(Event::BatchCompleted(_))));
    let b_started = &raw_b[0];
    assert!(matches!(b_started.event, Some(Event::BatchStarted(_))));
    let t = |m: &pb::ScheduleCallsResponse| {
        let ts = m.time.unwrap();
        (ts.seconds, ts.nanos)
    };
    assert!(
        t(b_started) >= t(a_completed),
        "B started before A completed"
    );
    let events_b: Vec<Event> = raw_b.into_iter().map(|m| m.event.unwrap()).collect();
    assert_eq!(
        states(&events_b, "r"),
        ["validating", "scheduled", "executing", "success"]
    );
    // Sequence numbers of a stream are 1, 2, 3, … without gaps.
    let seqs: Vec<u64> = raw_a.iter().map(|m| m.sequence).collect();
    let start = seqs[0];
    assert_eq!(seqs, (start..start + seqs.len() as u64).collect::<Vec<_>>());
}
