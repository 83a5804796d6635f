//! Bad input: malformed requests get the right gRPC status before anything
//! starts; one bad call in a batch is that call's Error, never a broken
//! stream, and its siblings run.

use crate::support;

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

/// Every client string is bounded where it enters (issue 11 item 5): a
/// field over its named limit is INVALID_ARGUMENT naming the field, its
/// length and the limit, and the message never repeats the string. The
/// batch a refused Cancel named goes on untouched.
#[tokio::test]
async fn client_strings_over_their_limit_are_refused_without_echo() {
    use toolsched::scheduler::validate::*;
    let srv = TestServer::start().await;
    let mb = "x".repeat(1 << 20);
    let big = |n: usize| "y".repeat(n);
    let read = |id: &str| call(id, "read_file", json!({"file_path": "a"}));
    let mut client = srv.client.clone();
    // ScheduleCalls: session id, call id.
    for (req, needle) in [
        (
            request(&mb, vec![read("a")]),
            format!(
                "session_id is {} bytes; at most {MAX_SESSION_ID_BYTES}",
                mb.len()
            ),
        ),
        (
            request("s", vec![read(&big(MAX_CALL_ID_BYTES + 1))]),
            format!(
                "calls[0].id is {} bytes; at most {MAX_CALL_ID_BYTES}",
                MAX_CALL_ID_BYTES + 1
            ),
        ),
    ] {
        let err = client.schedule_calls(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().ends_with(&needle), "{}", err.message());
        assert!(err.message().len() < 200, "{}", err.message());
    }
    // Confirm: session id, call id, correlation id.
    let confirm = |session: &str, call: &str, corr: &str| pb::ConfirmRequest {
        session_id: session.into(),
        call_id: call.into(),
        correlation_id: corr.into(),
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    };
    for (req, needle) in [
        (
            confirm(&mb, "c", "k"),
            format!(
                "invalid Confirm: session_id is {} bytes; at most {MAX_SESSION_ID_BYTES}",
                mb.len()
            ),
        ),
        (
            confirm("s", &mb, "k"),
            format!(
                "invalid Confirm: call_id is {} bytes; at most {MAX_CALL_ID_BYTES}",
                mb.len()
            ),
        ),
        (
            confirm("s", "c", &big(MAX_CORRELATION_ID_BYTES + 1)),
            format!(
                "invalid Confirm: correlation_id is {} bytes; at most {MAX_CORRELATION_ID_BYTES}",
                MAX_CORRELATION_ID_BYTES + 1
            ),
        ),
        (
            confirm("s", "", "k"),
            "invalid Confirm: call_id is empty".to_string(),
        ),
    ] {
        let err = client.confirm(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(err.message(), needle);
    }
    // An id within its limit that names nothing: NOT_FOUND, shown as a
    // prefix with its length.
    let long_session = big(MAX_SESSION_ID_BYTES);
    let err = client
        .confirm(confirm(&long_session, "c", "k"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_eq!(
        err.message(),
        format!(
            "no session '{}… ({MAX_SESSION_ID_BYTES} bytes)'",
            big(ECHO_PREFIX_BYTES)
        )
    );

    // Cancel: the example (a 3 MB reason), a long session id, a long batch
    // id; a running batch is not touched by the refused Cancels.
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "w.txt", "content": "w"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, "w").await;
    let cancel = |session: &str, batch: Option<String>, reason: String| pb::CancelRequest {
        session_id: session.into(),
        batch_id: batch,
        reason,
    };
    let three_mb = 3 << 20;
    for (req, needle) in [
        (
            cancel("s", None, big(three_mb)),
            format!(
                "invalid Cancel: reason is {three_mb} bytes; at most {MAX_CANCEL_REASON_BYTES}"
            ),
        ),
        (
            cancel(&mb, None, "r".into()),
            format!(
                "invalid Cancel: session_id is {} bytes; at most {MAX_SESSION_ID_BYTES}",
                mb.len()
            ),
        ),
        (
            cancel("s", Some(mb.clone()), "r".into()),
            format!(
                "invalid Cancel: batch_id is {} bytes; at most {MAX_BATCH_ID_BYTES}",
                mb.len()
            ),
        ),
    ] {
        let err = client.cancel(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(err.message(), needle);
    }
    // The prompt is still open: answering it runs the write.
    srv.confirm(
        "s",
        "w",
        &prompt.correlation_id,
        pb::ConfirmationOutcome::ProceedOnce,
        None,
    )
    .await
    .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "w"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    // A reason at its limit is taken whole.
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "w2",
                "write_file",
                json!({"file_path": "w2.txt", "content": "w"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    await_prompt(&mut stream, &mut seen, "w2").await;
    let reason = big(MAX_CANCEL_REASON_BYTES);
    client
        .cancel(cancel("s", None, reason.clone()))
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    match terminal(&seen, "w2") {
        pb::tool_call_update::State::Cancelled(c) => assert_eq!(c.reason, reason),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn ids_with_a_nul_byte_are_refused_before_anything_starts() {
    let srv = TestServer::start().await;
    let read = |id: &str| call(id, "read_file", json!({"file_path": "a"}));
    let mut client = srv.client.clone();
    let mut with_request_id = request("s", vec![read("a")]);
    with_request_id.request_id = "r\0".into();
    for (req, field) in [
        (request("s\0", vec![read("a")]), "session_id"),
        (with_request_id, "request_id"),
        (request("s", vec![read("a"), read("b\0")]), "calls[1].id"),
    ] {
        let err = client.schedule_calls(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message().ends_with(&format!(
                "{field} contains a NUL byte; ids are text without NUL"
            )),
            "{}",
            err.message()
        );
    }
    let err = client
        .confirm(pb::ConfirmRequest {
            session_id: "s".into(),
            call_id: "c\0".into(),
            correlation_id: "k".into(),
            outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
            new_content: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "invalid Confirm: call_id contains a NUL byte; ids are text without NUL"
    );
    let err = client
        .cancel(pb::CancelRequest {
            session_id: "s".into(),
            batch_id: Some("b\0".into()),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message()
            .ends_with("batch_id contains a NUL byte; ids are text without NUL"),
        "{}",
        err.message()
    );
    let err = client
        .watch_batch(pb::WatchBatchRequest {
            session_id: "\0".into(),
            batch_id: "b".into(),
            after_sequence: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message()
            .ends_with("session_id contains a NUL byte; ids are text without NUL"),
        "{}",
        err.message()
    );
    let err = client
        .get_session(pb::GetSessionRequest {
            session_id: "s\0".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "session_id contains a NUL byte; ids are text without NUL"
    );
    // Nothing ran: the session is unknown.
    let err = client
        .get_session(pb::GetSessionRequest {
            session_id: "s".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}
