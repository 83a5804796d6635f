//! Waves: consecutive parallelizable calls run concurrently, side-effecting
//! calls one at a time, the topic tool first, in exact state sequences.

use crate::support;

use serde_json::json;
use support::*;

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

/// (call id, state) of every update, in stream order, progress folded.
fn timeline(events: &[Event]) -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = Vec::new();
    for e in events {
        if let Event::CallUpdate(u) = e {
            let s = state_name(u.state.as_ref().unwrap());
            if out.last() == Some(&(u.call_id.clone(), s)) && s == "executing" {
                continue;
            }
            out.push((u.call_id.clone(), s));
        }
    }
    out
}

#[tokio::test]
async fn side_effecting_calls_run_one_at_a_time_in_order() {
    let srv = TestServer::with_config(yolo()).await;
    let events = srv
        .run(
            "s",
            vec![
                call(
                    "w1",
                    "write_file",
                    json!({"file_path": "f.txt", "content": "one"}),
                ),
                call(
                    "sh",
                    "run_shell_command",
                    json!({"command": "cat f.txt > g.txt"}),
                ),
                call(
                    "w2",
                    "write_file",
                    json!({"file_path": "f.txt", "content": "two"}),
                ),
            ],
        )
        .await;
    let t: Vec<(String, &str)> = timeline(&events)
        .into_iter()
        .filter(|(_, s)| *s != "validating")
        .collect();
    let expect = |id: &str| {
        [
            (id.to_string(), "scheduled"),
            (id.to_string(), "executing"),
            (id.to_string(), "success"),
        ]
    };
    let mut want = Vec::new();
    for id in ["w1", "sh", "w2"] {
        want.extend(expect(id));
    }
    assert_eq!(t, want);
    // The shell ran between the writes and saw the first one.
    assert_eq!(std::fs::read_to_string(srv.path("g.txt")).unwrap(), "one");
    assert_eq!(std::fs::read_to_string(srv.path("f.txt")).unwrap(), "two");
}

#[tokio::test]
async fn topic_runs_first_and_alone_but_responses_keep_request_order() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a.txt"), "a").unwrap();
    let events = srv
        .run(
            "s",
            vec![
                call("r1", "read_file", json!({"file_path": "a.txt"})),
                call("t", "update_topic", json!({"topic": "Fixing the build"})),
                call("r2", "read_file", json!({"file_path": "a.txt"})),
            ],
        )
        .await;
    let t = timeline(&events);
    // Created in execution order: topic first.
    let created: Vec<&str> = t
        .iter()
        .filter(|(_, s)| *s == "validating")
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(created, ["t", "r1", "r2"]);
    // The topic call is terminal before either read is scheduled.
    let topic_done = t
        .iter()
        .position(|e| *e == ("t".into(), "success"))
        .unwrap();
    let first_read = t
        .iter()
        .position(|(id, s)| id.starts_with('r') && *s == "scheduled")
        .unwrap();
    assert!(topic_done < first_read, "{t:?}");
    assert_eq!(
        success_output(&events, "t"),
        "Topic set to: Fixing the build"
    );
    let ids: Vec<String> = completed(&events)
        .responses
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, ["r1", "t", "r2"]);
}

#[tokio::test]
async fn wait_for_previous_splits_a_wave() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a.txt"), "a").unwrap();
    let mut second = call("r2", "read_file", json!({"file_path": "a.txt"}));
    second.wait_for_previous = true;
    let events = srv
        .run(
            "s",
            vec![
                call("r1", "read_file", json!({"file_path": "a.txt"})),
                second,
            ],
        )
        .await;
    let t: Vec<(String, &str)> = timeline(&events)
        .into_iter()
        .filter(|(_, s)| *s != "validating")
        .collect();
    assert_eq!(
        t,
        [
            ("r1".to_string(), "scheduled"),
            ("r1".to_string(), "executing"),
            ("r1".to_string(), "success"),
            ("r2".to_string(), "scheduled"),
            ("r2".to_string(), "executing"),
            ("r2".to_string(), "success"),
        ]
    );
}

#[tokio::test]
async fn batch_completed_fits_a_default_clients_message_limit() {
    // Five reads of ~900 KiB each: every response is within its tool's
    // bound, but BatchCompleted repeats them all (4.5 MiB > 4 MiB).
    let srv = TestServer::start().await;
    // 1900 lines of 500 bytes: within read_file's line, width and 1 MiB caps.
    let line = "x".repeat(499) + "\n";
    let content = line.repeat(1_900);
    let mut calls = Vec::new();
    for i in 0..5 {
        std::fs::write(srv.path(&format!("f{i}.txt")), &content).unwrap();
        calls.push(call(
            &format!("r{i}"),
            "read_file",
            json!({"file_path": format!("f{i}.txt")}),
        ));
    }
    // The default tonic client (4 MiB decode limit) reads the whole stream.
    let events = srv.run("s", calls).await;
    for i in 0..5 {
        // Each call's own Success event carries its full output.
        assert_eq!(success_output(&events, &format!("r{i}")), content);
    }
    let done = completed(&events);
    let outputs: Vec<String> = done
        .responses
        .iter()
        .map(|r| response_json(r)["output"].as_str().unwrap().to_string())
        .collect();
    let total: usize = outputs.iter().map(String::len).sum();
    assert!(total <= 3 * 1024 * 1024, "{total}");
    let cut = outputs
        .iter()
        .filter(|o| o.contains("bytes omitted here to keep the message under"))
        .count();
    assert!(cut >= 1, "no response was shortened");
    // What is kept of each is the start of the real output.
    for o in &outputs {
        assert!(content.starts_with(o.split("\n... [").next().unwrap()));
    }
}
