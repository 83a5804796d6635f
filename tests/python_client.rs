//! A Python grpcio client (stubs generated from our proto at test time)
//! against the real server: a frontend in another language schedules a
//! batch, approves the write with Confirm and gets the function responses.

use crate::support;

use serde_json::{Value, json};
use support::{TestServer, venv_tool};

#[tokio::test]
async fn python_grpcio_client_runs_a_batch_and_approves_a_write() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("hello.txt"), "hello\n").unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let output = tokio::process::Command::new(venv_tool("python"))
        .arg(format!("{root}/tests/python/client.py"))
        .arg(srv.addr.to_string())
        .arg(format!("{root}/proto"))
        .arg(out_dir.path())
        .output()
        .await
        .expect("run python");
    assert!(
        output.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).expect("JSON from the client");
    assert_eq!(
        result["states"],
        json!([
            "r:validating",
            "w:validating",
            "r:scheduled",
            "r:executing",
            "r:success",
            "w:awaiting_approval",
            "w:scheduled",
            "w:executing",
            "w:success"
        ])
    );
    assert_eq!(
        result["responses"],
        json!([
            {"id": "r", "name": "read_file", "response": {"output": "hello\n"}},
            {"id": "w", "name": "write_file", "response": {"output": "Successfully created and wrote to new file: from_python.txt."}}
        ])
    );
    assert_eq!(
        std::fs::read_to_string(srv.path("from_python.txt")).unwrap(),
        "written by python\n"
    );
}

#[tokio::test]
async fn undecodable_and_oversized_requests_are_client_errors() {
    let srv = TestServer::start().await;
    let root = env!("CARGO_MANIFEST_DIR");
    let output = tokio::process::Command::new(venv_tool("python"))
        .arg(format!("{root}/tests/python/malformed.py"))
        .arg(srv.addr.to_string())
        .output()
        .await
        .expect("run python");
    assert!(
        output.status.success(),
        "malformed.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(result["bad_utf8"]["code"], "INVALID_ARGUMENT", "{result}");
    let msg = result["bad_utf8"]["message"].as_str().unwrap();
    assert!(msg.starts_with("malformed request:"), "{msg}");
    assert!(msg.contains("UTF-8"), "{msg}");
    assert_eq!(
        result["oversized"]["code"], "RESOURCE_EXHAUSTED",
        "{result}"
    );
    let msg = result["oversized"]["message"].as_str().unwrap();
    assert!(msg.contains("--max-request-bytes"), "{msg}");
    // The server is fine afterwards.
    std::fs::write(srv.path("a"), "a\n").unwrap();
    let events = srv
        .run(
            "s",
            vec![support::call("r", "read_file", json!({"file_path": "a"}))],
        )
        .await;
    assert_eq!(support::success_output(&events, "r"), "a\n");
}
