//! read_file on a 6 MB single-line file and a 200 MB log, through a
//! default-configured tonic client (4 MiB message limit) and through
//! grpcurl (same default limit) against the real `toolsched` binary: both
//! succeed with bounded results that say clearly what was cut.
//!
//! The files are written into the temp workspace at test time and removed
//! with it.

use crate::file_support;
use crate::support;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use file_support::*;
use serde_json::{Value, json};
use support::*;

/// What a default gRPC client accepts in one message.
const DEFAULT_CLIENT_LIMIT: usize = 4 * 1024 * 1024;
const ONE_LINE_CHARS: usize = 6 * 1024 * 1024;
/// One line of the big log (64 bytes with its newline).
const LOG_LINE: &str = "2026-11-30T06:00:00Z INFO request handled in 12 ms id=000000042\n";
const LOG_BLOCKS: usize = 200;
const LOG_LINES_PER_BLOCK: usize = 1024 * 1024 / 64;

fn write_files(dir: &std::path::Path) {
    assert_eq!(LOG_LINE.len(), 64);
    let mut f = std::fs::File::create(dir.join("one_line.txt")).unwrap();
    f.write_all(&vec![b'a'; ONE_LINE_CHARS]).unwrap();
    f.write_all(b"\n").unwrap();
    let block = LOG_LINE.repeat(LOG_LINES_PER_BLOCK);
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("big.log")).unwrap());
    for _ in 0..LOG_BLOCKS {
        f.write_all(block.as_bytes()).unwrap();
    }
    f.flush().unwrap();
}

fn expected_one_line() -> String {
    format!(
        "IMPORTANT: The file content has been truncated.\n\
         Status: Showing lines 1-1 of 1 total lines of one_line.txt.\n\
         1 line(s) longer than 2000 characters were cut after 2000 characters and marked '... [line truncated]' (line 1 has {ONE_LINE_CHARS}). Use grep_search to find text in them.\n\n\
         --- FILE CONTENT (truncated) ---\n{}... [line truncated]\n",
        "a".repeat(2000)
    )
}

fn expected_big_log() -> String {
    let total = LOG_BLOCKS * LOG_LINES_PER_BLOCK;
    format!(
        "IMPORTANT: The file content has been truncated.\n\
         Status: Showing lines 1-2000 of {total} total lines of big.log.\n\
         Action: To read more of the file, call read_file again with start_line: 2001.\n\n\
         --- FILE CONTENT (truncated) ---\n{}",
        LOG_LINE.repeat(2000)
    )
}

/// The `toolsched` binary serving `workspace` on a free loopback port;
/// killed on drop.
struct ServedBinary {
    child: Child,
    addr: SocketAddr,
}

impl ServedBinary {
    fn start(workspace: &std::path::Path) -> Self {
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolsched"))
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--workspace")
            .arg(workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Ready when a connect succeeds; fail at once if it exited.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!(
                    "toolsched exited with {status} before listening: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(
                Instant::now() < deadline,
                "toolsched did not listen on {addr} within 60 s"
            );
            std::thread::yield_now();
        }
        Self { child, addr }
    }
}

impl Drop for ServedBinary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs one read_file call with grpcurl and returns every response message.
fn grpcurl_read(addr: SocketAddr, file: &str) -> Vec<Value> {
    let request = json!({
        "session_id": "grpcurl",
        "calls": [{"id": "r", "name": "read_file", "args": {"file_path": file}}]
    });
    let out = Command::new(venv_tool("grpcurl"))
        .args(["-plaintext", "-d"])
        .arg(request.to_string())
        .arg(addr.to_string())
        .arg("toolsched.v1.ToolScheduler/ScheduleCalls")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "grpcurl failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

/// The success output of call "r" in grpcurl's JSON messages.
fn grpcurl_success(messages: &[Value]) -> (String, Value) {
    for m in messages {
        if let Some(success) = m["callUpdate"]["success"].as_object() {
            return (
                success["response"]["response"]["output"]
                    .as_str()
                    .expect("output")
                    .to_string(),
                success["result"].clone(),
            );
        }
    }
    panic!("no success among {} messages: {messages:?}", messages.len());
}

#[tokio::test]
async fn huge_files_read_with_bounded_clearly_truncated_results_over_tonic_and_grpcurl() {
    let srv = TestServer::start().await;
    write_files(srv.workspace.path());

    // A default tonic client (the harness connects with the defaults).
    let events = run_one(&srv, "read_file", json!({"file_path": "one_line.txt"})).await;
    let output = ok_output(&events);
    assert_eq!(output, expected_one_line());
    assert!(output.len() < DEFAULT_CLIENT_LIMIT);
    assert_eq!(result_of(&events, "c")["cut_lines"], json!(1));

    let events = run_one(&srv, "read_file", json!({"file_path": "big.log"})).await;
    let output = ok_output(&events);
    assert_eq!(output, expected_big_log());
    assert!(output.len() < DEFAULT_CLIENT_LIMIT);
    assert_eq!(
        result_of(&events, "c")["total_lines"],
        json!(LOG_BLOCKS * LOG_LINES_PER_BLOCK)
    );

    // Reading on from the middle and at the very end.
    let last = (LOG_BLOCKS * LOG_LINES_PER_BLOCK) as u64;
    let events = run_one(
        &srv,
        "read_file",
        json!({"file_path": "big.log", "start_line": last - 1}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        format!(
            "IMPORTANT: The file content has been truncated.\n\
             Status: Showing lines {}-{last} of {last} total lines of big.log.\n\n\
             --- FILE CONTENT (truncated) ---\n{}",
            last - 1,
            LOG_LINE.repeat(2)
        )
    );

    // grpcurl against the real binary over the same workspace.
    let bin = ServedBinary::start(srv.workspace.path());
    for (file, expected) in [
        ("one_line.txt", expected_one_line()),
        ("big.log", expected_big_log()),
    ] {
        let messages = grpcurl_read(bin.addr, file);
        let states: Vec<&str> = messages
            .iter()
            .filter_map(|m| m["callUpdate"].as_object())
            .filter_map(|u| u.keys().find(|k| *k != "callId" && *k != "toolName"))
            .map(String::as_str)
            .collect();
        assert_eq!(
            states,
            ["validating", "scheduled", "executing", "success"],
            "{file}"
        );
        let (output, result) = grpcurl_success(&messages);
        assert_eq!(output, expected, "{file}");
        assert_eq!(result["truncated"], json!(true), "{file}");
        assert!(messages.last().unwrap()["batchCompleted"].is_object());
    }
}
