//! Shell output beyond the cap is kept, not lost (issue 11 item 20): the
//! function response keeps head and tail and names a path that `read_file`
//! reads the whole output from; the bounds per call and per session hold;
//! confined commands cannot read the kept files.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::OutputLimits;
use toolsched::scheduler::SchedulerConfig;
use toolsched::tools::kept::KeptOutputConfig;

const CAP: usize = 1000;

fn config(per_call: u64, per_session: u64) -> SchedulerConfig {
    SchedulerConfig {
        output: OutputLimits {
            max_bytes: CAP,
            max_streamed_bytes: CAP,
        },
        kept_output: KeptOutputConfig {
            per_call,
            per_session,
            ..KeptOutputConfig::default()
        },
        ..yolo_confined()
    }
}

fn result_of(events: &[Event], id: &str) -> serde_json::Map<String, serde_json::Value> {
    match terminal(events, id) {
        State::Success(s) => toolsched::api::convert::struct_to_json(s.result.unwrap()),
        other => panic!("{other:?}"),
    }
}

/// `seq 1 n` as it prints.
fn seq(n: u32) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// Runs `seq 1 n` and returns (response text, kept path, kept bytes).
async fn run_seq(srv: &TestServer, session: &str, n: u32) -> (String, Option<String>, u64) {
    let events = srv
        .run(
            session,
            vec![call(
                "sh",
                "run_shell_command",
                json!({"command": format!("seq 1 {n}")}),
            )],
        )
        .await;
    let result = result_of(&events, "sh");
    let path = result
        .get("full_output_path")
        .map(|p| p.as_str().unwrap().to_string());
    let bytes = result
        .get("full_output_bytes")
        .map_or(0, |b| b.as_u64().unwrap());
    (success_output(&events, "sh"), path, bytes)
}

async fn read(srv: &TestServer, session: &str, path: &str, start: u32, end: u32) -> Vec<Event> {
    srv.run(
        session,
        vec![call(
            "r",
            "read_file",
            json!({"file_path": path, "start_line": start, "end_line": end}),
        )],
    )
    .await
}

#[tokio::test]
async fn output_beyond_the_cap_is_kept_and_read_back_with_read_file() {
    if !kernel_enforces(toolsched::sandbox::SandboxLevel::WorkspaceWrite) {
        panic!("this test needs Landlock and seccomp (sandbox level workspace_write)");
    }
    let srv = TestServer::with_config(config(64 << 20, 256 << 20)).await;
    let whole = seq(20_000);
    let (text, path, bytes) = run_seq(&srv, "s", 20_000).await;
    let path = path.expect("the whole output is kept");
    assert_eq!(bytes, whole.len() as u64);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
    assert!(text.contains("bytes of output omitted"), "{text}");
    assert!(
        text.contains(&format!(
            "the whole output ({} bytes of text) is kept for 30 min: read it with read_file and file_path \"{path}\"",
            whole.len()
        )),
        "{text}"
    );
    // Outside the workspace, and only there by its exact path.
    assert!(!path.starts_with(srv.workspace.path().to_str().unwrap()));
    let events = read(&srv, "s", &path, 19_999, 20_000).await;
    assert_eq!(
        states(&events, "r"),
        ["validating", "scheduled", "executing", "success"]
    );
    let out = success_output(&events, "r");
    assert!(out.contains("19999\n20000"), "{out}");
    assert!(!out.contains("19998"), "{out}");
    // A sibling path in the same directory is not a kept output.
    let dir = std::path::Path::new(&path).parent().unwrap();
    let sibling = dir.join("0123456789abcdef0123456789abcdef.txt");
    std::fs::write(&sibling, "planted").unwrap();
    let events = read(&srv, "s", sibling.to_str().unwrap(), 1, 1).await;
    let (kind, _) = error_of(&events, "r");
    assert_eq!(kind, pb::ErrorType::PathNotInWorkspace);
    // A confined command cannot read it (nor list the directory).
    let events = srv
        .run(
            "s",
            vec![call(
                "c",
                "run_shell_command",
                json!({"command": format!("cat {path} | head -c 20; ls {}", dir.display())}),
            )],
        )
        .await;
    let text = match terminal(&events, "c") {
        State::Success(s) => response_json(s.response.as_ref().unwrap())["output"]
            .as_str()
            .unwrap()
            .to_string(),
        State::Error(e) => response_json(e.response.as_ref().unwrap())["output"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        other => panic!("{other:?}"),
    };
    assert!(!text.contains("1\n2\n3\n"), "{text}");
    assert!(text.contains("Permission denied"), "{text}");
}

#[tokio::test]
async fn output_within_the_cap_keeps_nothing() {
    let srv = TestServer::with_config(config(64 << 20, 256 << 20)).await;
    let (text, path, _) = run_seq(&srv, "s", 100).await;
    assert_eq!(path, None);
    assert!(!text.contains("kept for"), "{text}");
    // Exactly at the cap: still nothing omitted, nothing kept.
    let n = (1..).find(|n| seq(*n).len() >= CAP).unwrap();
    let (_, path, _) = run_seq(&srv, "s", n - 1).await;
    assert_eq!(path, None);
}

#[tokio::test]
async fn a_call_keeps_at_most_its_bound_and_a_session_drops_its_oldest() {
    // 5,000 bytes a call, 10,000 a session: the third kept output pushes
    // out the first.
    let srv = TestServer::with_config(config(5_000, 10_000)).await;
    let whole = seq(20_000);
    let mut paths = Vec::new();
    for _ in 0..3 {
        let (_, path, bytes) = run_seq(&srv, "s", 20_000).await;
        assert_eq!(bytes, 5_000, "the first 5,000 bytes");
        let path = path.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole[..5_000]);
        paths.push(path);
    }
    assert!(!std::path::Path::new(&paths[0]).exists(), "oldest removed");
    let events = read(&srv, "s", &paths[0], 1, 1).await;
    assert_eq!(error_of(&events, "r").0, pb::ErrorType::PathNotInWorkspace);
    for p in &paths[1..] {
        let events = read(&srv, "s", p, 1, 2).await;
        assert!(success_output(&events, "r").contains("1\n2"));
    }
    // Another session's bound is its own: its output does not push out s's.
    let (_, other, _) = run_seq(&srv, "t", 20_000).await;
    assert!(other.is_some());
    for p in &paths[1..] {
        assert!(std::path::Path::new(p).exists());
    }
}

#[tokio::test]
async fn a_bound_of_zero_keeps_no_output() {
    let srv = TestServer::with_config(config(0, 256 << 20)).await;
    let (text, path, _) = run_seq(&srv, "s", 20_000).await;
    assert_eq!(path, None);
    assert!(text.contains("bytes of output omitted"), "{text}");
    assert!(!text.contains("kept for"), "{text}");
}
