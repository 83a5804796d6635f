//! Approval prompts and "always allow" over gRPC: the prompt names the rule
//! and segment and lists root commands, write targets and offered outcomes;
//! `proceed_always` is narrowed (a later call outside it still asks); an
//! edit's `proceed_always` switches the session to auto_edit; plan mode
//! denies with a message.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::api::pb::ConfirmationOutcome as O;

fn shell(id: &str, cmd: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({"command": cmd}))
}

fn batch(
    session: &str,
    calls: Vec<pb::FunctionCall>,
    interactive: bool,
) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        session_id: session.into(),
        calls,
        approval_mode: 0,
        interactive: Some(interactive),
        sandbox_level: 0,
        ..Default::default()
    }
}

fn exec_details(a: &pb::AwaitingApproval) -> pb::ExecConfirmation {
    match &a.details {
        Some(pb::awaiting_approval::Details::Exec(e)) => e.clone(),
        other => panic!("not an exec prompt: {other:?}"),
    }
}

#[tokio::test]
async fn the_prompt_names_rule_segment_roots_write_targets_and_outcomes() {
    let srv = TestServer::start().await;
    let mut stream = srv
        .schedule(
            "s",
            vec![shell("c1", "ls && git add a.txt && echo done > log.txt")],
        )
        .await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, "c1").await;
    assert_eq!(
        prompt.reason,
        "Approval required for 'run_shell_command': the rule asks for approval [rule 'ask-by-default' (<built-in>), segment `git add a.txt`]."
    );
    assert_eq!(
        prompt.policy_rule,
        Some(pb::PolicyRuleRef {
            file: "<built-in>".into(),
            line: 0,
            rule: "ask-by-default".into(),
            segment: "git add a.txt".into(),
        })
    );
    let exec = exec_details(&prompt);
    assert_eq!(exec.root_commands, ["ls", "git", "echo"]);
    assert_eq!(exec.write_targets, ["log.txt"]);
    assert_eq!(exec.dir_path, ".");
    assert_eq!(
        prompt.outcomes,
        [
            O::ProceedOnce as i32,
            O::ProceedAlways as i32,
            O::Cancel as i32
        ]
    );
    srv.confirm("s", "c1", &prompt.correlation_id, O::Cancel, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "c1"),
        ["validating", "awaiting_approval", "cancelled"]
    );
    assert!(!srv.path("log.txt").exists());
}

#[tokio::test]
async fn interpreters_are_never_offered_always_allow() {
    let srv = TestServer::start().await;
    let mut stream = srv
        .schedule("s", vec![shell("c1", "python3 -c 'print(1)'")])
        .await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, "c1").await;
    assert_eq!(exec_details(&prompt).root_commands, ["python3"]);
    assert_eq!(prompt.outcomes, [O::ProceedOnce as i32, O::Cancel as i32]);
    srv.confirm("s", "c1", &prompt.correlation_id, O::Cancel, None)
        .await
        .unwrap();
    collect(stream).await;
}

#[tokio::test]
async fn proceed_always_on_a_shell_call_allows_that_root_command_only() {
    let srv = TestServer::start().await;
    for f in ["a.txt", "b.txt", "c.txt", "f.txt"] {
        std::fs::write(srv.path(f), f).unwrap();
    }
    let mut stream = srv.schedule("s", vec![shell("c1", "rm a.txt")]).await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, "c1").await;
    srv.confirm("s", "c1", &prompt.correlation_id, O::ProceedAlways, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "c1"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert!(!srv.path("a.txt").exists());

    let events = collect(
        srv.schedule_with(batch(
            "s",
            vec![
                shell("rm_b", "rm b.txt"),
                shell("mv_c", "mv c.txt d.txt"),
                shell("rm_rf", "rm -rf f.txt"),
                shell("rm_redirect", "rm f.txt > out.txt"),
                shell("ls_rm", "ls && rm f.txt"),
            ],
            false,
        ))
        .await,
    )
    .await;
    assert_eq!(
        states(&events, "rm_b"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert!(!srv.path("b.txt").exists());
    for (id, rule) in [
        ("mv_c", "ask-by-default"),
        ("rm_rf", "dangerous-shell"),
        ("rm_redirect", "ask-by-default"),
    ] {
        let (kind, message) = error_of(&events, id);
        assert_eq!(kind, pb::ErrorType::PolicyViolation, "{id}");
        assert!(
            message.starts_with("Approval required but the batch is non-interactive")
                && message.contains(&format!("[rule '{rule}'")),
            "{id}: {message}"
        );
    }
    assert_eq!(
        states(&events, "ls_rm"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert!(srv.path("c.txt").exists());
    assert!(!srv.path("out.txt").exists());
    assert!(!srv.path("f.txt").exists());
}

#[tokio::test]
async fn proceed_always_on_an_edit_switches_the_session_to_auto_edit() {
    let srv = TestServer::start().await;
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "w1",
                "write_file",
                json!({"file_path": "a.txt", "content": "a"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, "w1").await;
    srv.confirm("s", "w1", &prompt.correlation_id, O::ProceedAlways, None)
        .await
        .unwrap();
    collect(stream).await;
    let events = collect(
        srv.schedule_with(batch(
            "s",
            vec![
                call(
                    "w2",
                    "write_file",
                    json!({"file_path": "b.txt", "content": "b"}),
                ),
                shell("sh", "touch c.txt"),
            ],
            false,
        ))
        .await,
    )
    .await;
    assert_eq!(
        states(&events, "w2"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(std::fs::read_to_string(srv.path("b.txt")).unwrap(), "b");
    let (kind, message) = error_of(&events, "sh");
    assert_eq!(kind, pb::ErrorType::PolicyViolation);
    assert!(
        message.contains("[rule 'ask-by-default' (<built-in>), segment `touch c.txt`]"),
        "{message}"
    );
}

#[tokio::test]
async fn plan_mode_denies_with_a_message_and_reads_still_run() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a.txt"), "alpha\n").unwrap();
    let events = collect(
        srv.schedule_with(pb::ScheduleCallsRequest {
            session_id: "p".into(),
            calls: vec![
                call("r", "read_file", json!({"file_path": "a.txt"})),
                call(
                    "w",
                    "write_file",
                    json!({"file_path": "b.txt", "content": "b"}),
                ),
                shell("ls", "ls"),
            ],
            approval_mode: pb::ApprovalMode::Plan as i32,
            interactive: Some(true),
            sandbox_level: 0,
            ..Default::default()
        })
        .await,
    )
    .await;
    assert_eq!(success_output(&events, "r"), "alpha\n");
    assert_eq!(
        error_of(&events, "w"),
        (
            pb::ErrorType::PolicyViolation,
            "Tool 'write_file' denied: only read-only tools run in plan mode. Switch the session to another approval mode (default, auto_edit or yolo) to make changes. [rule 'plan-mode' (<built-in>)].".to_string()
        )
    );
    let (_, message) = error_of(&events, "ls");
    assert_eq!(
        message,
        "Tool 'run_shell_command' denied: only read-only tools run in plan mode. Switch the session to another approval mode (default, auto_edit or yolo) to make changes. [rule 'plan-mode' (<built-in>), segment `ls`]."
    );
    assert!(!srv.path("b.txt").exists());
}
