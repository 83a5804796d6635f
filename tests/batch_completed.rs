//! `BatchCompleted.calls`: every call's final state, error type, message,
//! duration and the shell's typed exit code, in request order, equal to what
//! the call's own terminal event said (a client reading only the last event
//! knows what became of each call).

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::convert::struct_to_json;
use toolsched::api::pb::{self, ConfirmationOutcome as O, ErrorType, FinalState};

/// Checks `BatchCompleted.calls[i]` against the call's own events: the
/// terminal event gives every field; the duration of an Error or Cancelled
/// (which carry none) is the time it was executing, so zero exactly when
/// the call never started executing.
fn assert_matches_events(events: &[Event], actual: &pb::CompletedCall, tool: &str) {
    let call_id = actual.call_id.as_str();
    let executed = states(events, call_id).contains(&"executing");
    if !executed {
        assert_eq!(actual.duration_ms, 0, "{call_id} never executed");
    }
    let mut expected = expected_from_terminal(events, call_id, tool);
    if !matches!(terminal(events, call_id), State::Success(_)) {
        expected.duration_ms = actual.duration_ms;
    }
    assert_eq!(*actual, expected);
}

/// What `BatchCompleted.calls[i]` must be, derived from the call's terminal
/// event (duration zero where the event has none).
fn expected_from_terminal(events: &[Event], call_id: &str, tool: &str) -> pb::CompletedCall {
    let base = pb::CompletedCall {
        call_id: call_id.into(),
        tool_name: tool.into(),
        ..Default::default()
    };
    match terminal(events, call_id) {
        State::Success(s) => pb::CompletedCall {
            state: FinalState::Success as i32,
            duration_ms: s.duration_ms,
            exit_code: s.exit_code,
            ..base
        },
        State::Error(e) => pb::CompletedCall {
            state: FinalState::Error as i32,
            error_type: e.r#type,
            message: e.message,
            ..base
        },
        State::Cancelled(c) => pb::CompletedCall {
            state: FinalState::Cancelled as i32,
            message: c.reason,
            ..base
        },
        other => panic!("{call_id} is not terminal: {other:?}"),
    }
}

async fn cancel(srv: &TestServer, session: &str, batch_id: Option<&str>, reason: &str) {
    srv.client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: session.into(),
            batch_id: batch_id.map(Into::into),
            reason: reason.into(),
        })
        .await
        .expect("cancel accepted");
}

#[tokio::test]
async fn every_terminal_state_is_summarised_in_request_order() {
    let srv = TestServer::with_config(yolo()).await;
    std::fs::write(srv.path("a.txt"), "alpha\n").unwrap();
    let calls = vec![
        call("r", "read_file", json!({"file_path": "a.txt"})),
        call("m", "read_file", json!({"file_path": "missing.txt"})),
        call("u", "no_such_tool", json!({})),
        call(
            "x3",
            "run_shell_command",
            json!({"command": "echo out; exit 3"}),
        ),
        call("x0", "run_shell_command", json!({"command": "true"})),
        // The file size limit's signal (SIGXFSZ) ends `head` itself.
        call(
            "k",
            "run_shell_command",
            json!({"command": "ulimit -f 0; exec head -c 4096 /dev/zero > big.bin"}),
        ),
    ];
    let events = srv.run("s", calls).await;
    let done = completed(&events);
    let ids: Vec<&str> = done.calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["r", "m", "u", "x3", "x0", "k"]);
    let tools = [
        "read_file",
        "read_file",
        "no_such_tool",
        "run_shell_command",
        "run_shell_command",
        "run_shell_command",
    ];
    for (c, tool) in done.calls.iter().zip(tools) {
        assert_matches_events(&events, c, tool);
    }
    // The typed fields themselves, beyond matching the terminal events.
    let by_id = |id: &str| done.calls.iter().find(|c| c.call_id == id).unwrap().clone();
    assert_eq!(by_id("r").state, FinalState::Success as i32);
    assert_eq!(by_id("r").exit_code, None);
    assert_eq!(by_id("m").state, FinalState::Error as i32);
    assert_eq!(by_id("m").error_type, ErrorType::FileNotFound as i32);
    assert!(
        by_id("m").message.contains("missing.txt"),
        "{}",
        by_id("m").message
    );
    assert_eq!(by_id("u").error_type, ErrorType::ToolNotRegistered as i32);
    // Never executed: no execution time.
    assert_eq!(by_id("u").duration_ms, 0);
    assert_eq!(by_id("x3").state, FinalState::Success as i32);
    assert_eq!(by_id("x3").exit_code, Some(3));
    assert_eq!(by_id("x0").exit_code, Some(0));
    // Ended by a signal: no exit code (the result says which signal).
    assert_eq!(by_id("k").state, FinalState::Success as i32);
    assert_eq!(by_id("k").exit_code, None);
    // responses[i] belongs to calls[i].
    let response_ids: Vec<&str> = done.responses.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(response_ids, ids);
    // The Success event's typed exit code matches its structured result.
    match terminal(&events, "x3") {
        State::Success(s) => {
            let result = struct_to_json(s.result.unwrap());
            assert_eq!(result["exit_code"], json!(3));
            assert_eq!(s.exit_code, Some(3));
        }
        other => panic!("x3: {other:?}"),
    }
}

#[tokio::test]
async fn a_rejected_call_and_the_calls_queued_behind_it_end_cancelled_with_their_reasons() {
    let srv = TestServer::start().await;
    let mut stream = srv
        .schedule(
            "s",
            vec![
                call(
                    "w",
                    "write_file",
                    json!({"file_path": "n.txt", "content": "x"}),
                ),
                call(
                    "w2",
                    "write_file",
                    json!({"file_path": "n2.txt", "content": "y"}),
                ),
            ],
        )
        .await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, "w").await;
    srv.confirm("s", "w", &prompt.correlation_id, O::Cancel, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    let done = completed(&seen);
    assert_eq!(done.calls.len(), 2);
    for c in &done.calls {
        assert_matches_events(&seen, c, "write_file");
        assert_eq!(c.state, FinalState::Cancelled as i32);
        assert_eq!(c.duration_ms, 0);
    }
    assert_eq!(done.calls[0].message, "User denied execution.");
    assert!(
        done.calls[1].message.contains("rejected"),
        "{}",
        done.calls[1].message
    );
}

#[tokio::test]
async fn a_batch_cancelled_while_queued_and_a_running_command_report_the_cancel_reason() {
    let srv = TestServer::with_config(yolo()).await;
    // The first batch runs a command until it is cancelled.
    let mut first = srv
        .schedule(
            "s",
            vec![call(
                "long",
                "run_shell_command",
                json!({"command": "sleep 60"}),
            )],
        )
        .await;
    let mut seen_first = Vec::new();
    next_matching(&mut first, &mut seen_first, |e| {
        matches!(e, Event::CallUpdate(u) if matches!(&u.state, Some(State::Executing(x)) if x.pid.is_some()))
    })
    .await;
    // The second waits behind it; cancel it while queued.
    let mut second = srv
        .schedule(
            "s",
            vec![call("q", "read_file", json!({"file_path": "a.txt"}))],
        )
        .await;
    let mut seen_second = Vec::new();
    let accepted = next_matching(&mut second, &mut seen_second, |e| {
        matches!(e, Event::BatchAccepted(_))
    })
    .await;
    let Event::BatchAccepted(accepted) = accepted else {
        unreachable!()
    };
    assert!(accepted.queued);
    cancel(&srv, "s", Some(&accepted.batch_id), "not needed").await;
    seen_second.extend(collect(second).await);
    let done = completed(&seen_second);
    assert_eq!(
        done.calls,
        [pb::CompletedCall {
            call_id: "q".into(),
            tool_name: "read_file".into(),
            state: FinalState::Cancelled as i32,
            message: "not needed".into(),
            ..Default::default()
        }]
    );
    // Now stop the running command.
    cancel(&srv, "s", None, "user pressed Esc").await;
    seen_first.extend(collect(first).await);
    let done = completed(&seen_first);
    assert_eq!(done.calls.len(), 1);
    let c = &done.calls[0];
    assert_eq!(c.state, FinalState::Cancelled as i32);
    assert_eq!(c.message, "user pressed Esc");
    assert_eq!(c.error_type, ErrorType::Unspecified as i32);
    assert_eq!(c.exit_code, None);
    assert_matches_events(&seen_first, c, "run_shell_command");
}
