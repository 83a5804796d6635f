//! `toolsched call`, the small client for manual use, against the built
//! server binary: prompts answered from stdin or with --yes.

use crate::support;

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
    // Executing once; the pid that follows is shown as progress.
    let lines: Vec<&str> = out.lines().collect();
    let at = |want: &str| {
        let found: Vec<usize> = (0..lines.len()).filter(|&i| lines[i] == want).collect();
        assert_eq!(found.len(), 1, "{want:?} once in {out}");
        found[0]
    };
    let executing = at("call-1 run_shell_command: executing");
    let running = (0..lines.len())
        .filter(|&i| lines[i].starts_with("call-1 run_shell_command: running (pid "))
        .collect::<Vec<_>>();
    assert_eq!(running.len(), 1, "{out}");
    assert!(executing < running[0], "{out}");
    assert!(
        out.contains(r#""output": "Command: echo from-shell\nDirectory: .\nOutput: from-shell\n""#),
        "{out}"
    );
}

/// A TCP forwarder to `upstream` whose open connections can be cut (as a
/// proxy recycling its connections does); new connections go through.
struct CutProxy {
    addr: std::net::SocketAddr,
    cut: tokio::sync::watch::Sender<u64>,
}

impl CutProxy {
    async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let cuts = cut.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {} // both sockets are dropped: cut
                    }
                });
            }
        });
        Self { addr, cut }
    }

    /// Drops every connection open now.
    fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

// Multi-threaded: the test blocks on the child's output while the proxy's
// tasks forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_re_attaches_when_the_connection_drops_and_the_batch_has_a_grace() {
    use std::io::BufRead;
    let ws = tempfile::tempdir().unwrap();
    let bin = Binary::start(ws.path(), &["--approval-mode", "yolo"]);
    let proxy = CutProxy::start(bin.addr).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .args(["call", "--addr", &format!("http://{}", proxy.addr)])
        .args(["--disconnect-grace-secs", "60", "run_shell_command"])
        .arg(r#"{"command":"echo begun; while [ ! -e go ]; do sleep 0.05; done; echo finished"}"#)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run toolsched call");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut out = Vec::new();
    let wait_line = |want: &str, out: &mut Vec<String>| loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no line with {want:?} within 60 s; so far: {out:?}"));
        out.push(line.clone());
        if line.contains(want) {
            return;
        }
    };
    wait_line("begun", &mut out);
    proxy.cut();
    wait_line("re-attached to batch", &mut out);
    std::fs::write(ws.path().join("go"), "").unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    out.extend(rx.try_iter());
    let text = out.join("\n");
    assert!(status.success(), "{text}");
    assert!(text.contains("connection lost"), "{text}");
    assert!(text.contains("call-1 run_shell_command: success"), "{text}");
    assert_eq!(
        out.iter().filter(|l| l.as_str() == "begun").count(),
        1,
        "nothing printed twice: {text}"
    );
    assert!(text.contains("finished"), "{text}");
}
