//! `toolsched call`, the small client for manual use, against the built
//! server binary: prompts answered from stdin or with --yes.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use support::Binary;

/// Runs `toolsched call`; returns stdout and whether it exited 0.
fn call_status(addr: &std::net::SocketAddr, extra: &[&str], stdin: &str) -> (String, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .args(["call", "--addr", &format!("http://{addr}")])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run toolsched call");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (String::from_utf8(out.stdout).unwrap(), out.status.success())
}

fn call(addr: &std::net::SocketAddr, extra: &[&str], stdin: &str) -> String {
    let (out, ok) = call_status(addr, extra, stdin);
    assert!(ok, "toolsched call failed: {out}");
    out
}

#[test]
fn call_approves_from_stdin_and_rejects_on_no() {
    let ws = tempfile::tempdir().unwrap();
    let bin = Binary::start(ws.path(), &[]);
    let out = call(
        &bin.addr,
        &["write_file", r#"{"file_path":"a.txt","content":"yes\n"}"#],
        "y\n",
    );
    assert!(
        out.contains("call-1 write_file: awaiting approval"),
        "{out}"
    );
    assert!(out.contains("+yes"), "the diff is shown: {out}");
    assert!(out.contains("call-1 write_file: success"), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "yes\n"
    );

    let (out, ok) = call_status(
        &bin.addr,
        &["write_file", r#"{"file_path":"b.txt","content":"no\n"}"#],
        "n\n",
    );
    assert!(!ok, "a rejected call must make the exit status non-zero");
    assert!(
        out.contains("call-1 write_file: cancelled: User denied execution."),
        "{out}"
    );
    assert!(!ws.path().join("b.txt").exists());

    let out = call(
        &bin.addr,
        &[
            "--yes",
            "run_shell_command",
            r#"{"command":"echo from-shell"}"#,
        ],
        "",
    );
    // Live output first, then the state, then the function response.
    assert!(
        out.contains("from-shell\ncall-1 run_shell_command: success"),
        "{out}"
    );
    assert!(
        out.contains(r#""output": "Command: echo from-shell\nDirectory: .\nOutput: from-shell\n""#),
        "{out}"
    );
}
