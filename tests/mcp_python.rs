//! tests/mcp/py_server.py (PyPI's `mcp` SDK) as a tool provider: progress
//! merging, cancellation that the server sees, a server dying mid-call,
//! inactivity and total time limits, error results, tool list changes, and
//! servers that fail to start.

use crate::mcp_common;
use crate::support;

use std::time::Duration;

use mcp_common::*;
use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;
use toolsched::tools::mcp::{McpServerConfig, McpServerStatus};

async fn start_py() -> TestServer {
    TestServer::with_mcp(SchedulerConfig::default(), servers(vec![("py", py(true))])).await
}

/// Runs `tool` of the `py` server alone in yolo mode (no approval needed).
async fn run_one(srv: &TestServer, id: &str, tool: &str, args: serde_json::Value) -> Vec<Event> {
    collect(
        srv.schedule_with(yolo_request("s", vec![call(id, tool, args)]))
            .await,
    )
    .await
}

fn yolo_request(session: &str, calls: Vec<pb::FunctionCall>) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        approval_mode: pb::ApprovalMode::Yolo as i32,
        ..request(session, calls)
    }
}

async fn pid(srv: &TestServer) -> String {
    let events = run_one(srv, "who", "mcp_py_whoami", json!({})).await;
    success_output(&events, "who")
}

#[tokio::test]
async fn progress_fields_missing_later_keep_their_earlier_values() {
    let srv = start_py().await;
    let events = run_one(&srv, "p", "mcp_py_progress_steps", json!({})).await;
    assert_eq!(
        states(&events, "p"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(
        progress_of(&events, "p"),
        [
            (Some(1.0), Some(4.0), Some(25.0), "starting".to_string()),
            (Some(2.0), Some(4.0), Some(50.0), "starting".to_string()),
            (Some(3.0), Some(4.0), Some(75.0), "almost there".to_string()),
            (
                Some(4.0),
                Some(4.0),
                Some(100.0),
                "almost there".to_string()
            ),
        ]
    );
    assert_eq!(success_output(&events, "p"), "steps done");
}

#[tokio::test]
async fn cancel_mid_call_reaches_the_server_and_the_connection_stays_usable() {
    let srv = start_py().await;
    let before = pid(&srv).await;
    let marker = srv.workspace.path().join("cancel-marker");
    let mut stream = srv
        .schedule_with(yolo_request(
            "s",
            vec![call(
                "b",
                "mcp_py_block_until_cancelled",
                json!({"marker": marker.display().to_string()}),
            )],
        ))
        .await;
    let mut seen = Vec::new();
    // The server is inside the tool once it reports "blocking".
    next_matching(&mut stream, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == "b"
            && matches!(&u.state, Some(State::Executing(x)) if x.message == "blocking"))
    })
    .await;
    let summary = cancel(&srv, "s").await;
    assert_eq!(summary.cancelled_calls, 1);
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "b"),
        ["validating", "scheduled", "executing", "cancelled"]
    );
    let State::Cancelled(c) = terminal(&seen, "b") else {
        unreachable!()
    };
    assert_eq!(c.reason, "stop it");
    assert!(response_error(&seen, "b").starts_with("[Operation Cancelled]"));
    // The cancellation alone, not the last progress message as output.
    let response = response_json(&c.response.unwrap());
    assert_eq!(response["error"], "[Operation Cancelled] stop it");
    assert_eq!(response.get("output"), None, "{response:?}");

    // The same connection (same server process) answers the next call.
    assert_eq!(pid(&srv).await, before);
    wait_for_marker(&marker).await;
}

/// The server saw notifications/cancelled: its handler was cancelled and
/// wrote "cancelled" to `marker`, on its own schedule; wait for the file.
async fn wait_for_marker(marker: &std::path::Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if std::fs::read_to_string(marker).is_ok_and(|s| s == "cancelled") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never recorded the cancellation in {}",
            marker.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_server_dying_mid_call_fails_the_call_and_is_restarted() {
    let srv = start_py().await;
    let before = pid(&srv).await;
    let mut stream = srv
        .schedule_with(yolo_request(
            "s",
            vec![call("x", "mcp_py_exit_mid_call", json!({"code": 3}))],
        ))
        .await;
    // Read the raw stream to keep the server's timestamps: the gap between
    // the server's last progress and the error is reported (not asserted:
    // wall-clock figures are noisy on shared CI cores).
    let mut events = Vec::new();
    let mut times = Vec::new();
    while let Some(msg) = tokio::time::timeout(Duration::from_secs(60), stream.message())
        .await
        .expect("event within 60 s")
        .expect("stream ok")
    {
        let time = msg.time.expect("time");
        times.push(Duration::new(time.seconds as u64, time.nanos as u32));
        events.push(msg.event.expect("event"));
    }
    let last_progress = events
        .iter()
        .position(|e| matches!(e, Event::CallUpdate(u) if matches!(&u.state, Some(State::Executing(x)) if x.message == "about to exit")))
        .expect("progress before the exit");
    let error_at = events
        .iter()
        .position(|e| matches!(e, Event::CallUpdate(u) if matches!(u.state, Some(State::Error(_)))))
        .expect("error");
    eprintln!(
        "server exit -> call error: {:?} (from its last progress)",
        times[error_at] - times[last_progress]
    );
    assert_eq!(
        states(&events, "x"),
        ["validating", "scheduled", "executing", "error"]
    );
    let (kind, message) = error_of(&events, "x");
    assert_eq!(kind, pb::ErrorType::McpToolError);
    assert!(message.contains("exit status 3"), "{message}");
    assert!(
        message.contains("fatal: simulated crash in exit_mid_call"),
        "{message}"
    );
    // Restarted with backoff: the next call, made at once, waits for the
    // new process and runs there.
    let after = pid(&srv).await;
    assert_ne!(after, before, "a new server process");
    let status = wait_status(&srv, "py", |s| matches!(s, McpServerStatus::Ready { .. })).await;
    assert!(
        matches!(status, McpServerStatus::Ready { restarts: 1, .. }),
        "{status:?}"
    );
}

#[tokio::test]
async fn progress_keeps_a_slow_call_alive_past_the_inactivity_timeout() {
    let limited = McpServerConfig {
        timeout_ms: Some(1000),
        ..py(true)
    };
    let capped = McpServerConfig {
        timeout_ms: Some(1000),
        max_total_time_ms: Some(1500),
        ..py(true)
    };
    let srv = TestServer::with_mcp(
        SchedulerConfig::default(),
        servers(vec![("py", limited), ("capped", capped)]),
    )
    .await;
    // 2.5 s of work, progress every 0.2 s: outlives the 1 s inactivity
    // timeout.
    let events = run_one(
        &srv,
        "slow",
        "mcp_py_slow_with_progress",
        json!({"seconds": 2.5, "interval": 0.2}),
    )
    .await;
    assert_eq!(
        states(&events, "slow"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert!(success_output(&events, "slow").starts_with("slow done after "));
    assert!(progress_of(&events, "slow").len() >= 5);

    // Silence ends the call at the inactivity timeout, and the server is
    // told (notifications/cancelled).
    let marker = srv.workspace.path().join("timeout-marker");
    let events = run_one(
        &srv,
        "quiet",
        "mcp_py_silent",
        json!({"seconds": 30, "marker": marker.display().to_string()}),
    )
    .await;
    let (kind, message) = error_of(&events, "quiet");
    assert_eq!(kind, pb::ErrorType::ExecutionTimeout);
    assert!(
        message.contains("sent neither a result nor progress for 1 s"),
        "{message}"
    );
    wait_for_marker(&marker).await;

    // Progress does not lift the maximum total time.
    let events = run_one(
        &srv,
        "long",
        "mcp_capped_slow_with_progress",
        json!({"seconds": 30, "interval": 0.2}),
    )
    .await;
    let (kind, message) = error_of(&events, "long");
    assert_eq!(kind, pb::ErrorType::ExecutionTimeout);
    assert!(message.contains("maximum total time of 1.5 s"), "{message}");

    // The connection survives timeouts.
    let events = run_one(&srv, "who", "mcp_py_whoami", json!({})).await;
    assert_eq!(
        states(&events, "who"),
        ["validating", "scheduled", "executing", "success"]
    );
}

#[tokio::test]
async fn an_is_error_result_is_an_mcp_tool_error_with_the_servers_text() {
    let srv = start_py().await;
    let events = run_one(&srv, "f", "mcp_py_fail", json!({"text": "disk on fire"})).await;
    let (kind, message) = error_of(&events, "f");
    assert_eq!(kind, pb::ErrorType::McpToolError);
    assert_eq!(message, "Error executing tool fail: disk on fire");
    assert_eq!(
        response_error(&events, "f"),
        "Error executing tool fail: disk on fire"
    );
}

#[tokio::test]
async fn tools_list_changed_registers_new_tools() {
    let srv = start_py().await;
    assert!(
        !tool_names(&srv)
            .await
            .contains(&"mcp_py_late_tool".to_string())
    );
    let events = run_one(&srv, "a", "mcp_py_add_tool", json!({})).await;
    assert_eq!(success_output(&events, "a"), "added");
    // The registry is swapped when the relisting finishes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !tool_names(&srv)
        .await
        .contains(&"mcp_py_late_tool".to_string())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "late_tool never listed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let events = run_one(&srv, "l", "mcp_py_late_tool", json!({})).await;
    assert_eq!(success_output(&events, "l"), "late tool ran");
}

#[tokio::test]
async fn servers_that_fail_to_start_leave_their_tools_out_and_say_why() {
    let missing = McpServerConfig {
        command: Some("/nonexistent/mcp-server".into()),
        ..McpServerConfig::default()
    };
    let crashing = McpServerConfig {
        command: Some(venv_tool("python").display().to_string()),
        args: vec![
            "-c".into(),
            "import sys; sys.stderr.write('cannot open database\\n'); sys.exit(2)".into(),
        ],
        ..McpServerConfig::default()
    };
    let srv = TestServer::with_mcp(
        SchedulerConfig::default(),
        servers(vec![
            ("py", py(true)),
            ("missing", missing),
            ("crashing", crashing),
        ]),
    )
    .await;
    let names = tool_names(&srv).await;
    assert!(names.contains(&"mcp_py_whoami".to_string()), "{names:?}");
    assert!(names.contains(&"read_file".to_string()));
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("mcp_missing_") || n.starts_with("mcp_crashing_"))
    );

    let statuses = srv.mcp.as_ref().unwrap().statuses();
    let McpServerStatus::Failed { reason, .. } = &statuses["missing"] else {
        panic!("missing: {:?}", statuses["missing"]);
    };
    assert!(
        reason.contains("cannot start '/nonexistent/mcp-server'"),
        "{reason}"
    );
    let McpServerStatus::Failed { reason, .. } = &statuses["crashing"] else {
        panic!("crashing: {:?}", statuses["crashing"]);
    };
    assert!(reason.contains("exit status 2"), "{reason}");
    assert!(reason.contains("cannot open database"), "{reason}");
    assert!(matches!(statuses["py"], McpServerStatus::Ready { .. }));

    // A client sees the same through GetServerInfo.
    let info = srv
        .client
        .clone()
        .get_server_info(toolsched::api::pb::GetServerInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    let by_name: std::collections::BTreeMap<_, _> = info
        .mcp_servers
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    use toolsched::api::pb::McpServerState as St;
    assert_eq!(by_name["py"].state, St::Ready as i32);
    assert!(by_name["py"].tools > 0);
    assert_eq!(by_name["missing"].state, St::Failed as i32);
    assert!(
        by_name["missing"]
            .reason
            .contains("cannot start '/nonexistent/mcp-server'")
    );
    assert_eq!(by_name["crashing"].state, St::Failed as i32);
    assert!(by_name["crashing"].reason.contains("exit status 2"));

    // The service works: built-in and MCP tools run.
    let events = run_one(&srv, "who", "mcp_py_whoami", json!({})).await;
    assert_eq!(
        states(&events, "who"),
        ["validating", "scheduled", "executing", "success"]
    );
}

/// Issue 11 item 16: a cancelled MCP call's response is the cancellation,
/// never its last progress message as if it were output: cancelled by
/// Cancel for the session and by Cancel naming the batch, each after a
/// progress message was seen (the third instance, a call blocked after one
/// progress report, is `cancel_mid_call_reaches_the_server_…`).
#[tokio::test]
async fn a_cancelled_mcp_call_answers_with_the_cancellation_not_its_progress() {
    let srv = start_py().await;
    for (session, how) in [("s1", "session"), ("s2", "batch")] {
        let mut stream = srv
            .schedule_with(yolo_request(
                session,
                vec![call(
                    "t",
                    "mcp_py_slow_with_progress",
                    json!({"seconds": 60, "interval": 0.05}),
                )],
            ))
            .await;
        let mut seen = Vec::new();
        let accepted = next_matching(&mut stream, &mut seen, |e| {
            matches!(e, Event::BatchAccepted(_))
        })
        .await;
        let Event::BatchAccepted(accepted) = accepted else {
            unreachable!()
        };
        next_matching(&mut stream, &mut seen, |e| {
            matches!(e, Event::CallUpdate(u) if u.call_id == "t"
                && matches!(&u.state, Some(State::Executing(x)) if x.message.starts_with("tick")))
        })
        .await;
        srv.client
            .clone()
            .cancel(pb::CancelRequest {
                session_id: session.into(),
                batch_id: (how == "batch").then(|| accepted.batch_id.clone()),
                reason: format!("stop by {how}"),
            })
            .await
            .unwrap();
        seen.extend(collect(stream).await);
        let State::Cancelled(c) = terminal(&seen, "t") else {
            panic!("{how}: {:?}", terminal(&seen, "t"))
        };
        let expected = format!("[Operation Cancelled] stop by {how}");
        for response in [c.response.unwrap(), completed(&seen).responses[0].clone()] {
            let r = response_json(&response);
            assert_eq!(r["error"], expected.as_str(), "{how}");
            assert_eq!(r.get("output"), None, "{how}: {r:?}");
        }
    }
}

/// Issue 11 item 17: a later total of 0, absent or negative keeps the known
/// total; percent only from a positive total (the first report, total 0,
/// has none).
#[tokio::test]
async fn progress_with_a_zero_or_absent_total_keeps_the_known_total() {
    let srv = start_py().await;
    let events = run_one(&srv, "p", "mcp_py_progress_totals", json!({})).await;
    assert_eq!(
        progress_of(&events, "p"),
        [
            (Some(1.0), None, None, String::new()),
            (Some(2.0), Some(8.0), Some(25.0), String::new()),
            (Some(4.0), Some(8.0), Some(50.0), String::new()),
            (Some(6.0), Some(8.0), Some(75.0), String::new()),
            (Some(7.0), Some(8.0), Some(87.5), String::new()),
        ]
    );
    assert_eq!(success_output(&events, "p"), "totals done");
}
