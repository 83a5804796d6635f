//! Waves: consecutive parallelizable calls run concurrently, side-effecting
//! calls one at a time, the topic tool first, in exact state sequences.

mod support;

use serde_json::json;
use support::*;
use toolsched::policy::ApprovalMode;
use toolsched::scheduler::SchedulerConfig;

fn yolo() -> SchedulerConfig {
    SchedulerConfig {
        default_mode: ApprovalMode::Yolo,
        ..SchedulerConfig::default()
    }
}

#[tokio::test]
async fn a_wave_of_reads_runs_concurrently_and_responses_keep_request_order() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a.txt"), "alpha\n").unwrap();
    std::fs::write(srv.path("b.txt"), "beta\n").unwrap();
    let events = srv
        .run(
            "s",
            vec![
                call("r1", "read_file", json!({"file_path": "a.txt"})),
                call("r2", "read_file", json!({"file_path": "b.txt"})),
                call("l1", "list_directory", json!({"dir_path": "."})),
            ],
        )
        .await;
    for id in ["r1", "r2", "l1"] {
        assert_eq!(
            states(&events, id),
            ["validating", "scheduled", "executing", "success"],
            "{id}"
        );
    }
    // One wave: all three are Executing before any finishes.
    let order: Vec<(String, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(u) => Some((u.call_id.clone(), state_name(u.state.as_ref()?))),
            _ => None,
        })
        .filter(|(_, s)| *s == "executing" || *s == "success")
        .collect();
    let first_success = order.iter().position(|(_, s)| *s == "success").unwrap();
    assert_eq!(
        order[..first_success].len(),
        3,
        "all executing before the first success: {order:?}"
    );
    assert_eq!(success_output(&events, "r1"), "alpha\n");
    assert_eq!(success_output(&events, "r2"), "beta\n");
    let done = completed(&events);
    let ids: Vec<&str> = done.responses.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["r1", "r2", "l1"]);
    assert!(matches!(events[0], Event::BatchAccepted(ref a) if !a.queued));
    assert!(matches!(events[1], Event::BatchStarted(_)));
}
