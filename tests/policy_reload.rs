//! The operator's policy file: a bad file stops start-up naming file, line
//! and reason; a changed file is reloaded while sessions run; a bad new
//! file is rejected with the reason and the old policy stays.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;
use tokio_util::sync::CancellationToken;
use toolsched::api::{ServerOptions, pb};
use toolsched::policy::{ReloadStatus, watch_file};
use toolsched::scheduler::SchedulerConfig;

const DENY_TOUCH: &str =
    "[[rule]]\nname = \"no-touch\"\ncommand_prefix = \"touch\"\ndecision = \"deny\"\n";
const ALLOW_TOUCH: &str =
    "[[rule]]\nname = \"touch-ok\"\ncommand_prefix = \"touch\"\ndecision = \"allow\"\n";
const BAD: &str = "[[rule]]\nname = \"broken\"\ncommand_prefix = \"touch\"\ndecision = \"allow\"\nargs_pattern = \"(\"\n";

#[test]
fn a_bad_policy_file_stops_start_up_naming_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, BAD).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--workspace")
        .arg(dir.path())
        .arg("--policy-file")
        .arg(&file)
        .env_remove("TOOLSCHED_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "policy file {}, line 5: rule 'broken': args_pattern is not a valid regex",
        file.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    // The same through the environment variable and the config file key.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .args(["--listen", "127.0.0.1:0"])
        .arg("--workspace")
        .arg(dir.path())
        .env("TOOLSCHED_POLICY_FILE", &file)
        .env_remove("TOOLSCHED_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&expected));
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!("policy_file = {:?}\n", file.display().to_string()),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .args(["--listen", "127.0.0.1:0"])
        .arg("--workspace")
        .arg(dir.path())
        .arg("--config")
        .arg(&config)
        .env_remove("TOOLSCHED_POLICY_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&expected));
}

/// Waits for the next status change satisfying `pred`.
async fn wait_status(
    rx: &mut tokio::sync::watch::Receiver<ReloadStatus>,
    pred: impl Fn(&ReloadStatus) -> bool,
) -> ReloadStatus {
    tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|s| pred(s)))
        .await
        .expect("reload within 30 s")
        .expect("reloader running")
        .clone()
}

async fn touch(srv: &TestServer, id: &str) -> Vec<Event> {
    collect(
        srv.schedule_with(pb::ScheduleCallsRequest {
            session_id: "s".into(),
            calls: vec![call(
                id,
                "run_shell_command",
                json!({"command": format!("touch {id}")}),
            )],
            approval_mode: 0,
            interactive: Some(false),
            sandbox_level: 0,
            ..Default::default()
        })
        .await,
    )
    .await
}

#[tokio::test]
async fn a_changed_file_is_reloaded_and_a_bad_one_keeps_the_old_policy() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, DENY_TOUCH).unwrap();
    let shutdown = CancellationToken::new();
    let (policy, mut status) =
        watch_file(&file, Duration::from_millis(20), shutdown.clone()).unwrap();
    let srv =
        TestServer::with_policy(SchedulerConfig::default(), ServerOptions::default(), policy).await;

    let events = touch(&srv, "one").await;
    let (kind, message) = error_of(&events, "one");
    assert_eq!(kind, pb::ErrorType::PolicyViolation);
    assert!(message.contains("[rule 'no-touch'"), "{message}");

    // A ConfigMap-style update: a new file renamed over the old one.
    let tmp = dir.path().join("policy.toml.new");
    std::fs::write(&tmp, ALLOW_TOUCH).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    let s = wait_status(&mut status, |s| s.applied == 1).await;
    assert_eq!(
        s,
        ReloadStatus {
            applied: 1,
            rejected: 0,
            last_error: None
        }
    );
    let events = touch(&srv, "two").await;
    assert_eq!(
        states(&events, "two"),
        ["validating", "scheduled", "executing", "success"]
    );

    std::fs::write(&tmp, BAD).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    let s = wait_status(&mut status, |s| s.rejected == 1).await;
    assert_eq!(s.applied, 1);
    assert_eq!(
        s.last_error.as_deref(),
        Some(
            format!(
                "policy file {}, line 5: rule 'broken': args_pattern is not a valid regex: regex parse error:\n    (\n    ^\nerror: unclosed group",
                file.display()
            )
            .as_str()
        )
    );
    // The old (allowing) policy stays in force.
    let events = touch(&srv, "three").await;
    assert_eq!(
        states(&events, "three"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert!(srv.path("three").exists());
    shutdown.cancel();
}
