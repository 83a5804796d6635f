//! Policy and approval of MCP tools: an untrusted server's tools ask (with
//! `mcp` confirmation details), `proceed_always_tool` and
//! `proceed_always_server` add session rules for that tool or that server,
//! a server rule never covers another server whose name merely starts the
//! same way (spoofing), and `trust` decides whether `readOnlyHint` counts.

use crate::mcp_common;
use crate::support;

use mcp_common::*;
use serde_json::json;
use support::*;
use toolsched::api::convert::struct_to_json;
use toolsched::api::pb;
use toolsched::api::pb::ConfirmationOutcome as O;
use toolsched::scheduler::SchedulerConfig;

fn mcp_details(prompt: &pb::AwaitingApproval) -> &pb::McpConfirmation {
    match &prompt.details {
        Some(pb::awaiting_approval::Details::Mcp(m)) => m,
        other => panic!("not an mcp prompt: {other:?}"),
    }
}

/// Schedules `calls`, answers the prompt of `call_id` with `outcome`, and
/// returns every event of the batch.
async fn run_answering(
    srv: &TestServer,
    session: &str,
    calls: Vec<pb::FunctionCall>,
    call_id: &str,
    outcome: O,
) -> (pb::AwaitingApproval, Vec<Event>) {
    let mut stream = srv.schedule(session, calls).await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, call_id).await;
    srv.confirm(session, call_id, &prompt.correlation_id, outcome, None)
        .await
        .expect("confirm accepted");
    seen.extend(collect(stream).await);
    (prompt, seen)
}

#[tokio::test]
async fn proceed_always_tool_then_server_add_session_rules() {
    let srv =
        TestServer::with_mcp(SchedulerConfig::default(), servers(vec![("py", py(false))])).await;

    let (prompt, events) = run_answering(
        &srv,
        "s",
        vec![call("w1", "mcp_py_whoami", json!({}))],
        "w1",
        O::ProceedAlwaysTool,
    )
    .await;
    let m = mcp_details(&prompt);
    assert_eq!(m.server_name, "py");
    assert_eq!(m.tool_name, "whoami");
    assert_eq!(m.description, "The server's process id.");
    assert_eq!(
        struct_to_json(m.args.clone().unwrap_or_default()),
        json!({}).as_object().unwrap().clone()
    );
    assert_eq!(
        prompt.outcomes,
        [
            O::ProceedOnce,
            O::ProceedAlwaysTool,
            O::ProceedAlwaysServer,
            O::Cancel
        ]
        .map(|o| o as i32)
    );
    assert_eq!(
        states(&events, "w1"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );

    // The tool rule covers whoami only; progress_steps still asks.
    let (prompt, events) = run_answering(
        &srv,
        "s",
        vec![
            call("w2", "mcp_py_whoami", json!({})),
            call("p", "mcp_py_progress_steps", json!({})),
        ],
        "p",
        O::ProceedAlwaysServer,
    )
    .await;
    assert_eq!(mcp_details(&prompt).tool_name, "progress_steps");
    assert_eq!(
        states(&events, "w2"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(
        states(&events, "p"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );

    // The server rule covers every tool of `py`.
    let events = srv
        .run("s", vec![call("q", "mcp_py_silent", json!({"seconds": 0}))])
        .await;
    assert_eq!(
        states(&events, "q"),
        ["validating", "scheduled", "executing", "success"]
    );

    // Rules belong to the session.
    let mut stream = srv
        .schedule(
            "other",
            vec![call("o", "mcp_py_silent", json!({"seconds": 0}))],
        )
        .await;
    let mut seen = Vec::new();
    await_prompt(&mut stream, &mut seen, "o").await;
}

#[tokio::test]
async fn a_server_rule_does_not_cover_a_server_whose_name_extends_it() {
    // `py_fake`'s tools are registered as mcp_py_fake_*: a rule matched on
    // the name prefix `mcp_py_` would wrongly allow them.
    let srv = TestServer::with_mcp(
        SchedulerConfig::default(),
        servers(vec![("py", py(false)), ("py_fake", py(false))]),
    )
    .await;
    let (_, events) = run_answering(
        &srv,
        "s",
        vec![call("w", "mcp_py_whoami", json!({}))],
        "w",
        O::ProceedAlwaysServer,
    )
    .await;
    assert_eq!(states(&events, "w").last(), Some(&"success"));

    let (prompt, events) = run_answering(
        &srv,
        "s",
        vec![
            call("f", "mcp_py_fake_whoami", json!({})),
            call("after", "mcp_py_whoami", json!({})),
        ],
        "f",
        O::Cancel,
    )
    .await;
    assert_eq!(mcp_details(&prompt).server_name, "py_fake");
    assert_eq!(mcp_details(&prompt).tool_name, "whoami");
    assert_eq!(
        states(&events, "f"),
        ["validating", "awaiting_approval", "cancelled"]
    );
    let State::Cancelled(c) = terminal(&events, "f") else {
        unreachable!()
    };
    assert_eq!(c.reason, "User denied execution.");
}

#[tokio::test]
async fn non_interactive_batches_cannot_run_untrusted_mcp_tools() {
    let srv =
        TestServer::with_mcp(SchedulerConfig::default(), servers(vec![("py", py(false))])).await;
    let req = pb::ScheduleCallsRequest {
        interactive: Some(false),
        ..request("s", vec![call("w", "mcp_py_whoami", json!({}))])
    };
    let events = collect(srv.schedule_with(req).await).await;
    assert_eq!(states(&events, "w"), ["validating", "error"]);
    assert_eq!(error_of(&events, "w").0, pb::ErrorType::PolicyViolation);
}

#[tokio::test]
async fn read_only_hints_count_only_for_trusted_servers() {
    let srv = TestServer::with_mcp(
        SchedulerConfig::default(),
        servers(vec![("trusted", py(true)), ("untrusted", py(false))]),
    )
    .await;
    let tools = list_tools(&srv).await;
    let decl = |name: &str| tools.iter().find(|t| t.name == name).unwrap().clone();
    let (t, u) = (decl("mcp_trusted_whoami"), decl("mcp_untrusted_whoami"));
    assert!(t.parallelizable && t.read_only);
    assert!(u.parallelizable && !u.read_only);
    let write = decl("mcp_trusted_progress_steps");
    assert!(!write.parallelizable && !write.read_only);

    // Plan mode runs only read-only tools: the trusted hint counts.
    let req = pb::ScheduleCallsRequest {
        approval_mode: pb::ApprovalMode::Plan as i32,
        ..request(
            "s",
            vec![
                call("t", "mcp_trusted_whoami", json!({})),
                call("u", "mcp_untrusted_whoami", json!({})),
                call("w", "mcp_trusted_progress_steps", json!({})),
            ],
        )
    };
    let events = collect(srv.schedule_with(req).await).await;
    assert_eq!(
        states(&events, "t"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(states(&events, "u"), ["validating", "error"]);
    assert_eq!(error_of(&events, "u").0, pb::ErrorType::PolicyViolation);
    assert_eq!(states(&events, "w"), ["validating", "error"]);
}
