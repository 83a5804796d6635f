//! The audit trail, read as an operator's log pipeline would: the real
//! binary with `--log-format json`, its stderr parsed line by line. One INFO
//! line per call decision and per terminal state, fields at the top level;
//! per-call state lines at DEBUG carry the session.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

/// Audit lines (target `toolsched::audit`) from `bin`'s stderr until `done`
/// holds for the lines so far (bounded wait).
fn audit_until(bin: &Binary, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut lines = Vec::new();
    while !done(&lines) {
        let line = bin
            .stderr_lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("audit lines within 60 s; got {lines:#?}"));
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["target"] == "toolsched::audit" {
            lines.push(v);
        }
    }
    lines
}

/// The line of `call_id` with `message`, with the fields that vary by run
/// (timestamp, duration, digest) checked and removed.
fn line(lines: &[Value], call_id: &str, message: &str) -> serde_json::Map<String, Value> {
    let found: Vec<_> = lines
        .iter()
        .filter(|v| v["call_id"] == call_id && v["message"] == message)
        .collect();
    assert_eq!(found.len(), 1, "{call_id} {message}: {lines:#?}");
    let mut fields = found[0].as_object().unwrap().clone();
    assert!(fields.remove("timestamp").is_some());
    assert!(
        !fields.contains_key("fields"),
        "fields are at the top level"
    );
    if message == "call ended" {
        let ms = fields.remove("duration_ms").unwrap();
        assert!(ms.as_f64().unwrap() >= 0.0, "{ms}");
    }
    fields
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_an_approved_write_and_a_denied_command_is_audited() {
    let ws = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[rule]]\nname = \"no-rm\"\ncommand_prefix = \"rm\"\ndecision = \"deny\"\ndeny_message = \"no deleting\"\n",
    )
    .unwrap();
    let bin = Binary::start_with_env(
        ws.path(),
        &["--policy-file", policy.to_str().unwrap()],
        &[("RUST_LOG", "info,toolsched::audit=debug")],
    );
    let mut client = ToolSchedulerClient::connect(format!("http://{}", bin.addr))
        .await
        .unwrap();
    let mut batch = request(
        "audited",
        vec![
            call(
                "w",
                "write_file",
                json!({"file_path": "notes.txt", "content": "private text\n"}),
            ),
            call(
                "c",
                "run_shell_command",
                json!({"command": "rm -rf build", "dir_path": "."}),
            ),
        ],
    );
    batch.approval_mode = pb::ApprovalMode::Default as i32;
    let mut stream = client.schedule_calls(batch).await.unwrap().into_inner();
    let mut events = Vec::new();
    let prompt = await_prompt(&mut stream, &mut events, "w").await;
    let asked_by = prompt
        .policy_rule
        .clone()
        .expect("the prompt names its rule");
    client
        .confirm(pb::ConfirmRequest {
            session_id: "audited".into(),
            call_id: "w".into(),
            correlation_id: prompt.correlation_id.clone(),
            outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
            new_content: None,
        })
        .await
        .unwrap();
    events.extend(collect(stream).await);
    assert_eq!(
        states(&events, "w"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(states(&events, "c"), ["validating", "error"]);
    let (kind, _) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::PolicyViolation);

    let ended = |lines: &[Value], id: &str| {
        lines
            .iter()
            .any(|v| v["call_id"] == id && v["message"] == "call ended")
    };
    let lines = audit_until(&bin, |l| ended(l, "w") && ended(l, "c"));
    let batch_id = match &events[0] {
        Event::BatchAccepted(a) => a.batch_id.clone(),
        other => panic!("{other:?}"),
    };
    let asking_rule = format!("rule '{}' ({})", asked_by.rule, asked_by.file);
    let denying_rule = format!(
        "rule 'no-rm' ({}:1), segment `rm -rf build`",
        policy.display()
    );

    // The write: asked, approved once, succeeded. Its content is not on the
    // line; its arguments' digest is.
    let mut decided = line(&lines, "w", "call decided");
    let digest = decided.remove("args_digest").unwrap();
    let digest = digest.as_str().unwrap();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    let expected = |pairs: Value| pairs.as_object().unwrap().clone();
    assert_eq!(
        decided,
        expected(json!({
            "level": "INFO",
            "target": "toolsched::audit",
            "message": "call decided",
            "tenant": "default",
            "principal": "anonymous",
            "workspace": "",
            "session": "audited",
            "batch": batch_id,
            "call_id": "w",
            "tool": "write_file",
            "path": "notes.txt",
            "decision": "ask_user",
            "rule": asking_rule,
        }))
    );
    let mut ended_w = line(&lines, "w", "call ended");
    assert_eq!(ended_w.remove("args_digest").unwrap(), digest);
    assert_eq!(
        ended_w,
        expected(json!({
            "level": "INFO",
            "target": "toolsched::audit",
            "message": "call ended",
            "tenant": "default",
            "principal": "anonymous",
            "workspace": "",
            "session": "audited",
            "batch": batch_id,
            "call_id": "w",
            "tool": "write_file",
            "path": "notes.txt",
            "decision": "ask_user",
            "rule": asking_rule,
            "approval": "proceed_once",
            "approved_by": "anonymous",
            "state": "success",
        }))
    );
    assert!(
        !lines.iter().any(|l| l.to_string().contains("private text")),
        "file content in the audit trail"
    );

    // The command: denied by the operator's rule, never run.
    assert_eq!(
        line(&lines, "c", "call decided"),
        expected(json!({
            "level": "INFO",
            "target": "toolsched::audit",
            "message": "call decided",
            "tenant": "default",
            "principal": "anonymous",
            "workspace": "",
            "session": "audited",
            "batch": batch_id,
            "call_id": "c",
            "tool": "run_shell_command",
            "command": "rm -rf build",
            "path": ".",
            "decision": "deny",
            "rule": denying_rule,
        }))
    );
    assert_eq!(
        line(&lines, "c", "call ended"),
        expected(json!({
            "level": "INFO",
            "target": "toolsched::audit",
            "message": "call ended",
            "tenant": "default",
            "principal": "anonymous",
            "workspace": "",
            "session": "audited",
            "batch": batch_id,
            "call_id": "c",
            "tool": "run_shell_command",
            "command": "rm -rf build",
            "path": ".",
            "decision": "deny",
            "rule": denying_rule,
            "state": "error",
            "error_type": "policy_violation",
        }))
    );

    // At DEBUG, every transition of each call, with its session, in order.
    let transitions = |id: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|v| v["call_id"] == id && v["message"] == "call state")
            .inspect(|v| {
                assert_eq!(v["level"], "DEBUG");
                assert_eq!(v["session"], "audited");
                assert_eq!(v["batch"], batch_id.as_str());
            })
            .map(|v| v["state"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        transitions("w"),
        ["validating", "awaiting_approval", "scheduled", "executing"]
    );
    assert_eq!(transitions("c"), ["validating"]);
    // No trace id without tracing.
    assert!(lines.iter().all(|l| l.get("trace_id").is_none()));
}
