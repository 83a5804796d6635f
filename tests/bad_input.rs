//! Bad input: malformed requests get the right gRPC status before anything
//! starts; one bad call in a batch is that call's Error, never a broken
//! stream, and its siblings run.

mod support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;

#[tokio::test]
async fn unknown_tool_and_invalid_args_ride_along_without_blocking_siblings() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a.txt"), "a\n").unwrap();
    let events = srv
        .run(
            "s",
            vec![
                call("u", "read_fil", json!({"file_path": "a.txt"})),
                call("i", "read_file", json!({"file_path": 5})),
                call("ok", "read_file", json!({"file_path": "a.txt"})),
                call("x", "read_file", json!({"path": "a.txt"})),
            ],
        )
        .await;
    assert_eq!(states(&events, "u"), ["error"]);
    let (kind, msg) = error_of(&events, "u");
    assert_eq!(kind, pb::ErrorType::ToolNotRegistered);
    assert!(msg.contains("Did you mean: read_file"), "{msg}");
    assert_eq!(states(&events, "i"), ["error"]);
    let (kind, msg) = error_of(&events, "i");
    assert_eq!(kind, pb::ErrorType::InvalidToolParams);
    assert!(msg.contains("'file_path'"), "{msg}");
    let (kind, msg) = error_of(&events, "x");
    assert_eq!(kind, pb::ErrorType::InvalidToolParams);
    assert!(msg.contains("file_path"), "{msg}");
    assert_eq!(
        states(&events, "ok"),
        ["validating", "scheduled", "executing", "success"]
    );
    let done = completed(&events);
    let ids: Vec<&str> = done.responses.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["u", "i", "ok", "x"]);
    assert!(
        response_json(&done.responses[0])["error"]
            .as_str()
            .unwrap()
            .starts_with("Tool \"read_fil\" not found")
    );
}

#[tokio::test]
async fn malformed_batches_are_refused_before_anything_starts() {
    let srv = TestServer::with_config(SchedulerConfig {
        max_calls_per_batch: 3,
        ..SchedulerConfig::default()
    })
    .await;
    let read = |id: &str| call(id, "read_file", json!({"file_path": "a"}));
    let cases = [
        (
            request("", vec![read("a")]),
            tonic::Code::InvalidArgument,
            "session_id",
        ),
        (
            request("s", vec![]),
            tonic::Code::InvalidArgument,
            "calls is empty",
        ),
        (
            request("s", vec![read("a"), read("a")]),
            tonic::Code::InvalidArgument,
            "duplicate",
        ),
        (
            request("s", vec![read("")]),
            tonic::Code::InvalidArgument,
            "calls[0].id is empty",
        ),
        (
            request("s", vec![call("a", &"x".repeat(300), json!({}))]),
            tonic::Code::InvalidArgument,
            "tool names are at most 256",
        ),
        (
            request("s", vec![read("a"), read("b"), read("c"), read("d")]),
            tonic::Code::ResourceExhausted,
            "max_calls_per_batch",
        ),
        (
            pb::ScheduleCallsRequest {
                approval_mode: 42,
                ..request("s", vec![read("a")])
            },
            tonic::Code::InvalidArgument,
            "approval_mode",
        ),
    ];
    for (req, code, needle) in cases {
        let err = srv.client.clone().schedule_calls(req).await.unwrap_err();
        assert_eq!(err.code(), code, "{err:?}");
        assert!(
            err.message().contains(needle),
            "{needle}: {}",
            err.message()
        );
    }
    let err = srv
        .client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: "never-seen".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused() {
    let srv = TestServer::start().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path(), srv.path("link")).unwrap();
    let root = srv.workspace.path().canonicalize().unwrap();
    let evil = format!("{}-evil/x", root.display());
    let events = srv
        .run(
            "s",
            vec![
                call("dots", "read_file", json!({"file_path": "../secret"})),
                call("link", "read_file", json!({"file_path": "link/secret"})),
                call("abs", "read_file", json!({"file_path": "/etc/passwd"})),
                call("prefix", "read_file", json!({"file_path": evil})),
                call("ls", "list_directory", json!({"dir_path": "link"})),
            ],
        )
        .await;
    for id in ["dots", "link", "abs", "prefix", "ls"] {
        assert_eq!(
            error_of(&events, id).0,
            pb::ErrorType::PathNotInWorkspace,
            "{id}"
        );
    }
}
