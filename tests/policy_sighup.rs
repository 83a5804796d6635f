//! SIGHUP reloads the policy file even when its content check would not
//! have run yet. Its own test binary: the signal goes to the whole process.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolsched::policy::{ReloadStatus, watch_file};

#[tokio::test]
async fn sighup_reloads_the_policy_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, "").unwrap();
    let shutdown = CancellationToken::new();
    // An interval so long that only the signal can cause the reload.
    let (policy, mut status) =
        watch_file(&file, Duration::from_secs(3600), shutdown.clone()).unwrap();
    assert_eq!(policy.current().operator_rules(), 0);
    std::fs::write(&file, "[[rule]]\ntool_name = \"*\"\ndecision = \"deny\"\n").unwrap();
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).unwrap();
    let s = tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| s.applied == 1))
        .await
        .expect("reload within 30 s")
        .expect("reloader running")
        .clone();
    assert_eq!(
        s,
        ReloadStatus {
            applied: 1,
            rejected: 0,
            last_error: None
        }
    );
    assert_eq!(policy.current().operator_rules(), 1);
    shutdown.cancel();
}
