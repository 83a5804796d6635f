//! A Python grpcio client (stubs generated from our proto at test time)
//! against the real server: a frontend in another language schedules a
//! batch, approves the write with Confirm and gets the function responses.

mod support;

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
