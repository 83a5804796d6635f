//! `FunctionCall.client_initiated`: a call the user asked for directly (a
//! frontend's `!ls`) skips the approval prompt, in every mode and in a
//! non-interactive batch, but never a deny: a deny rule, plan mode and a
//! write outside the workspace still end it in policy_violation (issue 11,
//! item 19, as Gemini CLI).

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::{ServerOptions, pb};
use toolsched::policy::{Policy, PolicyHandle, parse_rules};
use toolsched::scheduler::SchedulerConfig;

fn user(c: pb::FunctionCall) -> pb::FunctionCall {
    pb::FunctionCall {
        client_initiated: true,
        ..c
    }
}

/// A command run in `work/` (beside the repository in `repo/`: the
/// directories holding a `.git` are not the commands' to create files in).
fn shell(id: &str, cmd: &str) -> pb::FunctionCall {
    call(
        id,
        "run_shell_command",
        json!({"command": cmd, "dir_path": "work"}),
    )
}

fn batch(
    calls: Vec<pb::FunctionCall>,
    mode: pb::ApprovalMode,
    interactive: bool,
) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        session_id: format!("{mode:?}-{interactive}"),
        calls,
        approval_mode: mode as i32,
        interactive: Some(interactive),
        ..Default::default()
    }
}

const RAN: [&str; 4] = ["validating", "scheduled", "executing", "success"];

async fn server() -> TestServer {
    let rules = parse_rules(
        r#"
[[rule]]
name = "no-network"
command_prefix = ["curl", "wget"]
decision = "deny"
deny_message = "network tools are not allowed"
"#,
        "ops.toml",
    )
    .unwrap();
    let policy = PolicyHandle::fixed(Policy::with_rules(rules, None));
    let srv =
        TestServer::with_policy(SchedulerConfig::default(), ServerOptions::default(), policy).await;
    std::fs::create_dir_all(srv.path("repo/.git")).unwrap();
    std::fs::create_dir_all(srv.path("work/build/x")).unwrap();
    srv
}

#[tokio::test]
async fn a_client_initiated_call_runs_without_a_prompt() {
    let srv = server().await;
    // Interactive default mode: each of these would ask; none prompts.
    let calls = vec![
        user(shell("touch", "touch typed.txt")),
        user(shell("danger", "rm -rf build")),
        user(call(
            "write",
            "write_file",
            json!({"file_path": "notes.md", "content": "typed\n"}),
        )),
        user(call(
            "protected",
            "write_file",
            json!({"file_path": "repo/.git/description", "content": "mine\n"}),
        )),
    ];
    let events = collect(
        srv.schedule_with(batch(calls, pb::ApprovalMode::Default, true))
            .await,
    )
    .await;
    for id in ["touch", "danger", "write", "protected"] {
        if let State::Error(e) = terminal(&events, id) {
            panic!("{id}: {e:?}");
        }
        assert_eq!(states(&events, id), RAN, "{id}");
    }
    assert!(srv.path("work/typed.txt").exists());
    assert!(!srv.path("work/build").exists());
    assert_eq!(
        std::fs::read_to_string(srv.path("notes.md")).unwrap(),
        "typed\n"
    );
    assert_eq!(
        std::fs::read_to_string(srv.path("repo/.git/description")).unwrap(),
        "mine\n"
    );

    // Non-interactive: the user's call runs, the model's identical one is
    // refused for want of someone to ask.
    let calls = vec![
        user(shell("mine", "touch mine.txt")),
        shell("model", "touch model.txt"),
    ];
    let events = collect(
        srv.schedule_with(batch(calls, pb::ApprovalMode::Default, false))
            .await,
    )
    .await;
    assert_eq!(states(&events, "mine"), RAN);
    assert_eq!(states(&events, "model"), ["validating", "error"]);
    let (kind, message) = error_of(&events, "model");
    assert_eq!(kind, pb::ErrorType::PolicyViolation);
    assert!(
        message.starts_with("Approval required but the batch is non-interactive"),
        "{message}"
    );
    assert!(srv.path("work/mine.txt").exists());
    assert!(!srv.path("work/model.txt").exists());
}

#[tokio::test]
async fn a_client_initiated_call_is_still_denied_by_a_deny() {
    let srv = server().await;
    let cases = [
        (
            pb::ApprovalMode::Yolo,
            user(shell("rule", "ls && curl http://x")),
            "Tool 'run_shell_command' denied: network tools are not allowed [rule 'no-network' (ops.toml:2), segment `curl http://x`].",
        ),
        (
            pb::ApprovalMode::Default,
            user(shell("outside", "echo x > ../../outside.txt")),
            "Tool 'run_shell_command' denied: it writes to ../../outside.txt, outside the workspace [rule 'write-outside-workspace' (<built-in>), segment `echo x`].",
        ),
        (
            pb::ApprovalMode::Plan,
            user(shell("plan", "touch planned.txt")),
            "Tool 'run_shell_command' denied: only read-only tools run in plan mode.",
        ),
        (
            pb::ApprovalMode::Plan,
            user(call(
                "plan-write",
                "write_file",
                json!({"file_path": "planned.md", "content": "x"}),
            )),
            "Tool 'write_file' denied: only read-only tools run in plan mode.",
        ),
    ];
    for (mode, c, want) in cases {
        let id = c.id.clone();
        let events = collect(srv.schedule_with(batch(vec![c], mode, true)).await).await;
        assert_eq!(states(&events, &id), ["validating", "error"], "{id}");
        let (kind, message) = error_of(&events, &id);
        assert_eq!(kind, pb::ErrorType::PolicyViolation, "{id}");
        assert!(message.starts_with(want), "{id}: {message}");
    }
    assert!(!srv.path("work/planned.txt").exists());
    assert!(!srv.path("planned.md").exists());
    assert!(
        !srv.workspace
            .path()
            .parent()
            .unwrap()
            .join("outside.txt")
            .exists()
    );
}

/// A command whose analysis cannot see what it runs (the command `find
/// -exec` runs, a git alias given on the command line, a computed command
/// name) could hide a denied one (`curl` here): a client-initiated call of
/// it still asks, so a non-interactive batch refuses it and nothing runs.
#[tokio::test]
async fn a_client_initiated_command_that_hides_what_it_runs_still_asks() {
    let srv = server().await;
    let hidden = [
        ("find-exec", "find . -maxdepth 0 -exec curl http://x ';'"),
        (
            "find-execdir",
            "find . -maxdepth 0 -execdir curl http://x ';'",
        ),
        ("git-alias", "git -c 'alias.x=!curl http://x' x"),
        ("computed", "C=curl; $C http://x"),
    ];
    for (id, cmd) in hidden {
        let events = collect(
            srv.schedule_with(batch(
                vec![user(shell(id, cmd))],
                pb::ApprovalMode::Default,
                false,
            ))
            .await,
        )
        .await;
        assert_eq!(states(&events, id), ["validating", "error"], "{id}");
        let (kind, message) = error_of(&events, id);
        assert_eq!(kind, pb::ErrorType::PolicyViolation, "{id}");
        assert!(
            message.starts_with("Approval required but the batch is non-interactive"),
            "{id}: {message}"
        );
    }
    // What the analysis sees whole still runs without a prompt.
    let events = collect(
        srv.schedule_with(batch(
            vec![user(shell("find", "find . -maxdepth 0 -name work"))],
            pb::ApprovalMode::Default,
            false,
        ))
        .await,
    )
    .await;
    assert_eq!(states(&events, "find"), RAN);
}
