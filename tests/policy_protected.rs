//! `write_file` and `replace` never write into a `.git` (at any depth, the
//! sandbox's protected paths) without a person saying so: in every mode,
//! yolo and auto_edit included, such a call asks (so a non-interactive
//! batch ends it in policy_violation), an operator deny rule denies it,
//! plan mode denies it. The path is the resolved one: `./.git/../.git/…`, a
//! symlink into `.git` and `.GIT` are the same protected place; so is a
//! repository's directory not named `.git` (one a `.git` symlink or a
//! gitlink leads to, a bare one: a breaker wrote `p/.git/config` through
//! Android's `repo` layout without a prompt). Issue 11, item 3.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::{ServerOptions, pb};
use toolsched::policy::{Policy, PolicyHandle, parse_rules};
use toolsched::scheduler::SchedulerConfig;

const HOOK: &str = "#!/bin/sh\ntouch planted\n";

/// A workspace with a repository, a nested one, symlinks into `.git`, and
/// repositories whose directories are not named `.git`: one a `.git`
/// symlink leads to (Android's `repo`), one a gitlink names, a bare one.
fn populate(srv: &TestServer) {
    for dir in [
        ".git/hooks",
        "sub/repo/.git",
        "a/.GIT",
        "src",
        "p",
        "g",
        "q",
        "scripts",
    ] {
        std::fs::create_dir_all(srv.path(dir)).unwrap();
    }
    for repo in [".repo/projects/p.git", "sep.git", "bare.git"] {
        for dir in ["hooks", "objects", "refs"] {
            std::fs::create_dir_all(srv.path(&format!("{repo}/{dir}"))).unwrap();
        }
        std::fs::write(srv.path(&format!("{repo}/HEAD")), "ref: refs/heads/main\n").unwrap();
        std::fs::write(srv.path(&format!("{repo}/config")), "[core]\n").unwrap();
    }
    std::os::unix::fs::symlink("../.repo/projects/p.git", srv.path("p/.git")).unwrap();
    std::fs::write(srv.path("g/.git"), "gitdir: ../sep.git\n").unwrap();
    for file in [
        ".git/config",
        ".git/hooks/pre-commit",
        "sub/repo/.git/config",
        "a/.GIT/config",
        "src/lib.rs",
        "scripts/commit-msg",
    ] {
        std::fs::write(srv.path(file), "[core]\n").unwrap();
    }
    // A hook linked into the worktree: written through `.git`, it is the
    // hook (a breaker's finding for commands).
    std::os::unix::fs::symlink(
        "../../scripts/commit-msg",
        srv.path(".git/hooks/commit-msg"),
    )
    .unwrap();
    // A `.git` symlink whose repository does not exist: `write_file`
    // would make it, `config` first.
    std::os::unix::fs::symlink("../.repo/projects/q.git", srv.path("q/.git")).unwrap();
    std::os::unix::fs::symlink(".git/hooks", srv.path("hooks-link")).unwrap();
    std::os::unix::fs::symlink(".git/config", srv.path("cfg-link")).unwrap();
}

/// Writes aimed at protected paths: (call id, tool, arguments, the file
/// that would change).
fn protected_calls() -> Vec<(String, &'static str, serde_json::Value, &'static str)> {
    let mut calls = Vec::new();
    let writes = [
        (".git/hooks/post-checkout", ".git/hooks/post-checkout"),
        (".git/config", ".git/config"),
        (
            "sub/repo/.git/hooks/pre-commit",
            "sub/repo/.git/hooks/pre-commit",
        ),
        ("./.git/../.git/hooks/pre-push", ".git/hooks/pre-push"),
        ("hooks-link/post-merge", ".git/hooks/post-merge"),
        ("cfg-link", ".git/config"),
        ("a/.GIT/config", "a/.GIT/config"),
        ("new/.git/config", "new/.git/config"),
        ("p/.git/config", ".repo/projects/p.git/config"),
        (
            ".repo/projects/p.git/hooks/post-checkout",
            ".repo/projects/p.git/hooks/post-checkout",
        ),
        ("sep.git/hooks/pre-commit", "sep.git/hooks/pre-commit"),
        ("bare.git/config", "bare.git/config"),
        (".git/hooks/commit-msg", "scripts/commit-msg"),
        ("scripts/commit-msg", "scripts/commit-msg"),
        (".repo/projects/q.git/config", ".repo/projects/q.git/config"),
    ];
    for (i, (given, file)) in writes.into_iter().enumerate() {
        calls.push((
            format!("w{i}"),
            "write_file",
            json!({"file_path": given, "content": HOOK}),
            file,
        ));
    }
    let replaces = [
        (".git/config", ".git/config"),
        (".git/hooks/pre-commit", ".git/hooks/pre-commit"),
        ("sub/repo/.git/config", "sub/repo/.git/config"),
        ("cfg-link", ".git/config"),
        ("./.git/../.git/config", ".git/config"),
        ("p/.git/config", ".repo/projects/p.git/config"),
        ("sep.git/config", "sep.git/config"),
        (".git/hooks/commit-msg", "scripts/commit-msg"),
        ("scripts/commit-msg", "scripts/commit-msg"),
    ];
    for (i, (given, file)) in replaces.into_iter().enumerate() {
        calls.push((
            format!("r{i}"),
            "replace",
            json!({"file_path": given, "old_string": "[core]", "new_string": "[core]\n\tfsmonitor = ./x"}),
            file,
        ));
    }
    calls
}

fn batch(calls: Vec<pb::FunctionCall>, mode: pb::ApprovalMode) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        session_id: format!("{mode:?}"),
        calls,
        approval_mode: mode as i32,
        interactive: Some(false),
        ..Default::default()
    }
}

/// Every protected write of a non-interactive batch in `mode` ends in
/// policy_violation naming `rule` and saying `want`, nothing changes on
/// disk, and an ordinary edit of the same batch runs (in yolo and auto_edit).
async fn assert_protected(srv: &TestServer, mode: pb::ApprovalMode, rule: &str, want: &str) {
    let cases = protected_calls();
    let mut calls: Vec<pb::FunctionCall> = cases
        .iter()
        .map(|(id, tool, args, _)| call(id, tool, args.clone()))
        .collect();
    calls.push(call(
        "ok",
        "write_file",
        json!({"file_path": "src/new.rs", "content": "fn main() {}\n"}),
    ));
    calls.push(call(
        "ok-gitignore",
        "write_file",
        json!({"file_path": ".gitignore", "content": "target\n"}),
    ));
    let events = collect(srv.schedule_with(batch(calls, mode)).await).await;
    for (id, tool, _, _) in &cases {
        assert_eq!(
            states(&events, id),
            ["validating", "error"],
            "{mode:?} {id}"
        );
        let (kind, message) = error_of(&events, id);
        assert_eq!(
            kind,
            pb::ErrorType::PolicyViolation,
            "{mode:?} {id}: {message}"
        );
        assert!(
            message.contains(&format!("[rule '{rule}'")) && message.contains(want),
            "{mode:?} {id} ({tool}): {message}"
        );
    }
    for (id, _, _, file) in &cases {
        let content = std::fs::read_to_string(srv.path(file)).ok();
        assert!(
            content.as_deref().is_none_or(|c| c == "[core]\n"),
            "{mode:?} {id} changed {file}: {content:?}"
        );
    }
    assert!(!srv.path("new").exists());
    assert!(!srv.path("planted").exists());
    // Ordinary edits run where the mode allows edits.
    if matches!(mode, pb::ApprovalMode::Yolo | pb::ApprovalMode::AutoEdit) {
        for ok in ["ok", "ok-gitignore"] {
            assert_eq!(terminal(&events, ok).name(), "success", "{mode:?} {ok}");
        }
    }
}

trait StateName {
    fn name(&self) -> &'static str;
}

impl StateName for State {
    fn name(&self) -> &'static str {
        state_name(self)
    }
}

#[tokio::test]
async fn protected_writes_ask_in_every_mode() {
    let srv = TestServer::start().await;
    populate(&srv);
    let not_interactive = "Approval required but the batch is non-interactive";
    for mode in [
        pb::ApprovalMode::Yolo,
        pb::ApprovalMode::AutoEdit,
        pb::ApprovalMode::Default,
    ] {
        assert_protected(&srv, mode, "protected-path", not_interactive).await;
    }
    assert_protected(
        &srv,
        pb::ApprovalMode::Plan,
        "plan-mode",
        "only read-only tools run in plan mode",
    )
    .await;
}

#[tokio::test]
async fn an_operator_deny_rule_denies_protected_writes() {
    let rules = parse_rules(
        r#"
[[rule]]
name = "no-git-writes"
tool_name = ["write_file", "replace"]
args_pattern = 'GIT|\.git'
decision = "deny"
deny_message = "never write git metadata"
"#,
        "ops.toml",
    )
    .unwrap();
    let policy = PolicyHandle::fixed(Policy::with_rules(rules, None));
    let srv =
        TestServer::with_policy(SchedulerConfig::default(), ServerOptions::default(), policy).await;
    populate(&srv);
    // The deny names the operator's rule even where yolo would allow the
    // tool (hooks-link and cfg-link do not match the pattern: they ask).
    let events = collect(
        srv.schedule_with(batch(
            vec![
                call(
                    "deny",
                    "write_file",
                    json!({"file_path": ".git/hooks/pre-commit", "content": HOOK}),
                ),
                call(
                    "ask",
                    "write_file",
                    json!({"file_path": "hooks-link/pre-commit", "content": HOOK}),
                ),
            ],
            pb::ApprovalMode::Yolo,
        ))
        .await,
    )
    .await;
    let (kind, message) = error_of(&events, "deny");
    assert_eq!(kind, pb::ErrorType::PolicyViolation);
    assert!(
        message.starts_with(
            "Tool 'write_file' denied: never write git metadata [rule 'no-git-writes' (ops.toml"
        ),
        "{message}"
    );
    let (_, message) = error_of(&events, "ask");
    assert!(message.contains("[rule 'protected-path'"), "{message}");
    assert!(
        message.contains("it writes .git/hooks/pre-commit"),
        "{message}"
    );
    assert_eq!(
        std::fs::read_to_string(srv.path(".git/hooks/pre-commit")).unwrap(),
        "[core]\n"
    );
}

#[tokio::test]
async fn a_person_may_approve_a_protected_write_once_and_always_does_not_stick() {
    let srv = TestServer::with_config(yolo()).await;
    populate(&srv);
    let write = |id: &str| {
        call(
            id,
            "write_file",
            json!({"file_path": ".git/hooks/pre-commit", "content": HOOK}),
        )
    };
    let (stream, _, prompt) = srv.prompt("p", write("c1")).await;
    assert_eq!(
        prompt.reason,
        "Approval required for 'write_file': it writes .git/hooks/pre-commit, inside a git repository's directory (the sandbox's protected paths): it asks in every mode [rule 'protected-path' (<built-in>)]."
    );
    srv.confirm(
        "p",
        "c1",
        &prompt.correlation_id,
        pb::ConfirmationOutcome::ProceedAlways,
        None,
    )
    .await
    .unwrap();
    let events = collect(stream).await;
    assert_eq!(terminal(&events, "c1").name(), "success");
    assert_eq!(
        std::fs::read_to_string(srv.path(".git/hooks/pre-commit")).unwrap(),
        HOOK
    );
    // "Always allow" recorded the path, yet the next write there asks again.
    let (_stream, _, again) = srv.prompt("p", write("c2")).await;
    assert!(
        again.reason.contains("[rule 'protected-path'"),
        "{}",
        again.reason
    );
}
