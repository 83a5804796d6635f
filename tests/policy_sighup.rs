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

/// The real binary: SIGHUP after start-up reloads the file named by
/// `--policy-file`, and a bad new file is rejected with the reason while the
/// server keeps serving.
#[test]
fn the_server_reloads_on_sighup_and_rejects_a_bad_file() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, "").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
        .arg("--workspace")
        .arg(dir.path())
        .arg("--policy-file")
        .arg(&file)
        .env_remove("TOOLSCHED_CONFIG")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut wait_for = |needle: &str| -> String {
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
        panic!(
            "the server's log ended before {needle:?}:\n{}",
            seen.join("\n")
        );
    };
    wait_for("toolsched serving");

    // Replaced atomically, so that the content poll never sees half a file.
    let replace = |text: &str| {
        let tmp = dir.path().join("policy.toml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    };
    replace("[[rule]]\ntool_name = \"*\"\ndecision = \"deny\"\n");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let line = wait_for("policy reloaded");
    assert!(line.contains("\"rules\":1"), "{line}");

    replace("[[rule]]\ndecision = \"sometimes\"\n");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let line = wait_for("policy reload rejected");
    assert!(line.contains(", line 2: "), "{line}");

    // Still serving: the process is alive after both reloads. (Stopping it
    // is the shutdown tests' business; SIGKILL keeps this test independent
    // of when main installs its SIGTERM handler.)
    assert_eq!(child.try_wait().unwrap(), None);
    child.kill().unwrap();
    child.wait().unwrap();
}
