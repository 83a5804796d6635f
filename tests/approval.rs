//! Approval: prompts, outcomes, "always" rules, modification, rejection,
//! non-interactive batches, plan mode, and Confirm's errors.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb::{self, ConfirmationOutcome as O, awaiting_approval::Details};
use toolsched::policy::ApprovalMode;
use toolsched::scheduler::SchedulerConfig;

fn edit(prompt: &pb::AwaitingApproval) -> &pb::EditConfirmation {
    match prompt.details.as_ref() {
        Some(Details::Edit(e)) => e,
        other => panic!("not an edit prompt: {other:?}"),
    }
}

#[tokio::test]
async fn proceed_once_runs_the_write_with_a_diff_in_the_prompt() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("f.txt"), "old\n").unwrap();
    let (stream, mut seen, prompt) = srv
        .prompt(
            "s",
            call(
                "w",
                "write_file",
                json!({"file_path": "f.txt", "content": "new\n"}),
            ),
        )
        .await;
    let e = edit(&prompt);
    assert_eq!(e.file_path, "f.txt");
    assert!(!e.is_new_file);
    assert!(e.diff.contains("-old\n+new\n"), "{}", e.diff);
    assert_eq!(
        prompt.outcomes,
        [
            O::ProceedOnce,
            O::ProceedAlways,
            O::ModifyWithEditor,
            O::Cancel
        ]
        .map(|o| o as i32)
        .to_vec()
    );
    assert!(prompt.deadline.is_some());
    // Nothing is written before approval.
    assert_eq!(std::fs::read_to_string(srv.path("f.txt")).unwrap(), "old\n");
    srv.confirm("s", "w", &prompt.correlation_id, O::ProceedOnce, None)
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
    assert_eq!(std::fs::read_to_string(srv.path("f.txt")).unwrap(), "new\n");
    // The same prompt cannot be answered twice: since issue 13 the first
    // answer wins, a repeat of it is OK (changes nothing; tests/resume.rs
    // checks already_applied) and a different one is refused.
    srv.confirm("s", "w", &prompt.correlation_id, O::ProceedOnce, None)
        .await
        .expect("repeating the winning answer is OK");
    let again = srv
        .confirm("s", "w", &prompt.correlation_id, O::Cancel, None)
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again:?}");
    assert_eq!(std::fs::read_to_string(srv.path("f.txt")).unwrap(), "new\n");
}

#[tokio::test]
async fn the_write_reads_its_target_at_execution_not_from_the_preview() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("f.txt"), "v1").unwrap();
    let (stream, mut seen, prompt) = srv
        .prompt(
            "s",
            call(
                "w",
                "write_file",
                json!({"file_path": "f.txt", "content": "v3"}),
            ),
        )
        .await;
    // The file changes while the prompt is open; the write still lands whole.
    std::fs::write(srv.path("f.txt"), "v2").unwrap();
    srv.confirm("s", "w", &prompt.correlation_id, O::ProceedOnce, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(std::fs::read_to_string(srv.path("f.txt")).unwrap(), "v3");
    assert_eq!(
        success_output(&seen, "w"),
        "Successfully overwrote file: f.txt."
    );
}

#[tokio::test]
async fn reject_cancels_the_call_and_the_rest_of_the_batch() {
    let srv = TestServer::start().await;
    let mut stream = srv
        .schedule(
            "s",
            vec![
                call(
                    "w1",
                    "write_file",
                    json!({"file_path": "a.txt", "content": "a"}),
                ),
                call(
                    "w2",
                    "write_file",
                    json!({"file_path": "b.txt", "content": "b"}),
                ),
            ],
        )
        .await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, "w1").await;
    srv.confirm("s", "w1", &prompt.correlation_id, O::Cancel, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "w1"),
        ["validating", "awaiting_approval", "cancelled"]
    );
    assert_eq!(states(&seen, "w2"), ["validating", "cancelled"]);
    match terminal(&seen, "w1") {
        State::Cancelled(c) => {
            assert_eq!(c.reason, "User denied execution.");
            assert_eq!(
                response_json(c.response.as_ref().unwrap())["error"],
                "[Operation Cancelled] User denied execution."
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!srv.path("a.txt").exists());
    assert!(!srv.path("b.txt").exists());
    assert_eq!(completed(&seen).responses.len(), 2);
}

#[tokio::test]
async fn inline_new_content_is_applied_and_run() {
    let srv = TestServer::start().await;
    let (stream, mut seen, prompt) = srv
        .prompt(
            "s",
            call(
                "w",
                "write_file",
                json!({"file_path": "n.txt", "content": "model's"}),
            ),
        )
        .await;
    assert!(edit(&prompt).is_new_file);
    srv.confirm(
        "s",
        "w",
        &prompt.correlation_id,
        O::ProceedOnce,
        Some("person's"),
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
    assert_eq!(
        std::fs::read_to_string(srv.path("n.txt")).unwrap(),
        "person's"
    );
    // The stream shows the arguments that ran, and the model is told.
    let modified = json!({"file_path": "n.txt", "content": "person's"});
    assert_eq!(
        scheduled_args(&seen, "w"),
        [Some(modified.as_object().unwrap().clone())]
    );
    let response = success_response(&seen, "w");
    assert_eq!(
        response["user_modification"],
        "The user modified the `content` to be:\nperson's"
    );
}

#[tokio::test]
async fn a_call_approved_as_proposed_says_nothing_of_a_modification() {
    let srv = TestServer::start().await;
    let (stream, mut seen, prompt) = srv
        .prompt(
            "s",
            call(
                "w",
                "write_file",
                json!({"file_path": "p.txt", "content": "x"}),
            ),
        )
        .await;
    srv.confirm("s", "w", &prompt.correlation_id, O::ProceedOnce, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(scheduled_args(&seen, "w"), [None]);
    assert!(!success_response(&seen, "w").contains_key("user_modification"));
    // Resending the model's own content is no modification either.
    let (stream, mut seen, prompt) = srv
        .prompt(
            "s",
            call(
                "v",
                "write_file",
                json!({"file_path": "q.txt", "content": "same"}),
            ),
        )
        .await;
    srv.confirm(
        "s",
        "v",
        &prompt.correlation_id,
        O::ProceedOnce,
        Some("same"),
    )
    .await
    .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(scheduled_args(&seen, "v"), [None]);
    assert!(!success_response(&seen, "v").contains_key("user_modification"));
}

#[tokio::test]
async fn modify_with_editor_prompts_again_with_a_new_correlation_id() {
    let srv = TestServer::start().await;
    let (mut stream, mut seen, first) = srv
        .prompt(
            "s",
            call(
                "w",
                "write_file",
                json!({"file_path": "m.txt", "content": "first\n"}),
            ),
        )
        .await;
    srv.confirm(
        "s",
        "w",
        &first.correlation_id,
        O::ModifyWithEditor,
        Some("second\n"),
    )
    .await
    .unwrap();
    let second = await_prompt(&mut stream, &mut seen, "w").await;
    assert_ne!(second.correlation_id, first.correlation_id);
    assert_eq!(edit(&second).new_content, "second\n");
    assert!(
        edit(&second).diff.contains("+second"),
        "{}",
        edit(&second).diff
    );
    // The first prompt is stale now and nothing changes.
    let stale = srv
        .confirm("s", "w", &first.correlation_id, O::ProceedOnce, None)
        .await
        .unwrap_err();
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition, "{stale:?}");
    // The error does not give away the current prompt's id.
    assert!(!stale.message().contains(&second.correlation_id));
    srv.confirm("s", "w", &second.correlation_id, O::ProceedOnce, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "w"),
        [
            "validating",
            "awaiting_approval",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(srv.path("m.txt")).unwrap(),
        "second\n"
    );
    // Modified in the editor, then approved as shown: still the person's.
    assert_eq!(
        success_response(&seen, "w")["user_modification"],
        "The user modified the `content` to be:\nsecond\n"
    );
    let args = scheduled_args(&seen, "w");
    assert_eq!(args.len(), 1);
    assert_eq!(args[0].as_ref().unwrap()["content"], "second\n");
}

#[tokio::test]
async fn proceed_always_on_an_edit_switches_the_session_to_auto_edit() {
    let srv = TestServer::start().await;
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
    // Another file, no prompt: the session is in auto_edit now.
    let events = srv
        .run(
            "s",
            vec![call(
                "w2",
                "write_file",
                json!({"file_path": "b.txt", "content": "b"}),
            )],
        )
        .await;
    assert_eq!(
        states(&events, "w2"),
        ["validating", "scheduled", "executing", "success"]
    );
    // A shell command that writes still asks.
    let events = collect(
        srv.schedule_with(pb::ScheduleCallsRequest {
            interactive: Some(false),
            ..request(
                "s",
                vec![call(
                    "sh",
                    "run_shell_command",
                    json!({"command": "touch hi"}),
                )],
            )
        })
        .await,
    )
    .await;
    assert_eq!(states(&events, "sh"), ["validating", "error"]);
}

#[tokio::test]
async fn proceed_always_on_shell_is_narrowed_to_its_root_commands() {
    let srv = TestServer::start().await;
    let (stream, mut seen, prompt) = srv
        .prompt(
            "s",
            call(
                "a",
                "run_shell_command",
                json!({"command": "mkdir -p d1 && touch d1/f && echo made"}),
            ),
        )
        .await;
    match prompt.details.as_ref() {
        Some(Details::Exec(x)) => {
            assert_eq!(x.root_commands, ["mkdir", "touch", "echo"]);
            assert_eq!(x.dir_path, ".");
        }
        other => panic!("{other:?}"),
    }
    srv.confirm("s", "a", &prompt.correlation_id, O::ProceedAlways, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        success_output(&seen, "a"),
        "Command: mkdir -p d1 && touch d1/f && echo made\nDirectory: .\nOutput: made\n"
    );
    // Same root commands: runs without asking. Another command: asks.
    let events = collect(
        srv.schedule_with(pb::ScheduleCallsRequest {
            interactive: Some(false),
            ..request(
                "s",
                vec![
                    call(
                        "b",
                        "run_shell_command",
                        json!({"command": "mkdir -p d2 && touch d2/g"}),
                    ),
                    call(
                        "c",
                        "run_shell_command",
                        json!({"command": "touch t && cp d1/f t"}),
                    ),
                ],
            )
        })
        .await,
    )
    .await;
    assert_eq!(
        states(&events, "b"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert!(srv.path("d2/g").exists());
    // `cp` was never approved: the whole command asks, no segment ran.
    assert_eq!(states(&events, "c"), ["validating", "error"]);
    assert!(!srv.path("t").exists());
}

#[tokio::test]
async fn non_interactive_batch_turns_ask_into_an_error() {
    let srv = TestServer::start().await;
    let events = collect(
        srv.schedule_with(pb::ScheduleCallsRequest {
            interactive: Some(false),
            ..request(
                "s",
                vec![call(
                    "w",
                    "write_file",
                    json!({"file_path": "a.txt", "content": "a"}),
                )],
            )
        })
        .await,
    )
    .await;
    let (kind, message) = error_of(&events, "w");
    assert_eq!(kind, pb::ErrorType::PolicyViolation);
    assert!(
        message.starts_with("Approval required but the batch is non-interactive"),
        "{message}"
    );
    assert!(!srv.path("a.txt").exists());
}

#[tokio::test]
async fn plan_mode_denies_side_effects_and_allows_reads() {
    let srv = TestServer::with_config(SchedulerConfig {
        default_mode: ApprovalMode::Plan,
        ..SchedulerConfig::default()
    })
    .await;
    std::fs::write(srv.path("a.txt"), "a\n").unwrap();
    let events = srv
        .run(
            "s",
            vec![
                call("r", "read_file", json!({"file_path": "a.txt"})),
                call(
                    "w",
                    "write_file",
                    json!({"file_path": "a.txt", "content": "b"}),
                ),
            ],
        )
        .await;
    assert_eq!(success_output(&events, "r"), "a\n");
    let (kind, message) = error_of(&events, "w");
    assert_eq!(kind, pb::ErrorType::PolicyViolation);
    assert!(
        message.contains("only read-only tools run in plan mode"),
        "{message}"
    );
}

#[tokio::test]
async fn confirm_errors_change_nothing() {
    let srv = TestServer::start().await;
    let (stream, mut seen, prompt) = srv
        .prompt(
            "s",
            call(
                "w",
                "write_file",
                json!({"file_path": "a.txt", "content": "a"}),
            ),
        )
        .await;
    let cases = [
        (
            "nosuch",
            "w",
            prompt.correlation_id.as_str(),
            O::ProceedOnce,
            tonic::Code::NotFound,
        ),
        (
            "s",
            "nosuch",
            prompt.correlation_id.as_str(),
            O::ProceedOnce,
            tonic::Code::NotFound,
        ),
        (
            "s",
            "w",
            "stale-id",
            O::ProceedOnce,
            tonic::Code::FailedPrecondition,
        ),
        (
            "s",
            "w",
            prompt.correlation_id.as_str(),
            O::ProceedAlwaysServer,
            tonic::Code::FailedPrecondition,
        ),
        (
            "s",
            "w",
            prompt.correlation_id.as_str(),
            O::Unspecified,
            tonic::Code::InvalidArgument,
        ),
    ];
    for (session, call_id, corr, outcome, code) in cases {
        let err = srv
            .confirm(session, call_id, corr, outcome, None)
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            code,
            "{session}/{call_id}/{corr}/{outcome:?}: {err:?}"
        );
        assert!(!err.message().is_empty());
    }
    let not_offered = srv
        .confirm(
            "s",
            "w",
            &prompt.correlation_id,
            O::ProceedAlwaysServer,
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(
        not_offered.message(),
        "outcome proceed_always_server is not offered by this prompt (offered: proceed_once, proceed_always, modify_with_editor, cancel)"
    );
    // The prompt still stands and works.
    srv.confirm("s", "w", &prompt.correlation_id, O::ProceedOnce, None)
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
}
