//! The routing header `x-toolsched-session`: when sent, it must equal the
//! body's session_id on every session RPC (INVALID_ARGUMENT otherwise,
//! naming both, each cut to a short prefix); absent, nothing changes.

use crate::support;

use serde_json::json;
use support::{TestServer, call, collect, completed, request};
use toolsched::api::pb;

fn with_header<T>(body: T, header: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(body);
    r.metadata_mut()
        .insert("x-toolsched-session", header.parse().unwrap());
    r
}

fn list() -> pb::FunctionCall {
    call("l1", "list_directory", json!({"dir_path": "."}))
}

#[tokio::test]
async fn a_header_equal_to_the_session_id_is_served() {
    let mut srv = TestServer::start().await;
    let stream = srv
        .client
        .schedule_calls(with_header(request("s-route", vec![list()]), "s-route"))
        .await
        .unwrap()
        .into_inner();
    let events = collect(stream).await;
    assert_eq!(completed(&events).responses.len(), 1);
    let summary = srv
        .client
        .cancel(with_header(
            pb::CancelRequest {
                session_id: "s-route".into(),
                ..Default::default()
            },
            "s-route",
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(summary.cancelled_calls, 0);
}

#[tokio::test]
async fn a_header_naming_another_session_is_invalid_on_every_session_rpc() {
    let mut srv = TestServer::start().await;
    let expected = "x-toolsched-session metadata 'other' differs from the body's session_id 's-route'; send the same session id in both (a proxy routes by the header)";
    let check = |status: tonic::Status| {
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), expected);
    };
    check(
        srv.client
            .schedule_calls(with_header(request("s-route", vec![list()]), "other"))
            .await
            .unwrap_err(),
    );
    check(
        srv.client
            .confirm(with_header(
                pb::ConfirmRequest {
                    session_id: "s-route".into(),
                    call_id: "c".into(),
                    correlation_id: "x".into(),
                    outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
                    ..Default::default()
                },
                "other",
            ))
            .await
            .unwrap_err(),
    );
    check(
        srv.client
            .cancel(with_header(
                pb::CancelRequest {
                    session_id: "s-route".into(),
                    ..Default::default()
                },
                "other",
            ))
            .await
            .unwrap_err(),
    );
    check(
        srv.client
            .watch_batch(with_header(
                pb::WatchBatchRequest {
                    session_id: "s-route".into(),
                    batch_id: "b".into(),
                    after_sequence: 0,
                },
                "other",
            ))
            .await
            .unwrap_err(),
    );
    // Nothing ran: the session was never created.
    let err = srv
        .client
        .cancel(pb::CancelRequest {
            session_id: "s-route".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_eq!(err.message(), "no session 's-route'");
}

#[tokio::test]
async fn a_long_or_non_ascii_header_is_echoed_only_in_part() {
    let mut srv = TestServer::start().await;
    let long = "h".repeat(500);
    let err = srv
        .client
        .schedule_calls(with_header(request("s-route", vec![list()]), &long))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().starts_with(&format!(
            "x-toolsched-session metadata '{}…' differs",
            "h".repeat(32)
        )),
        "{}",
        err.message()
    );
    assert!(!err.message().contains(&"h".repeat(33)));

    let mut r = tonic::Request::new(request("s-route", vec![list()]));
    r.metadata_mut().insert(
        "x-toolsched-session",
        tonic::metadata::MetadataValue::try_from(&b"caf\xe9"[..]).unwrap(),
    );
    let err = srv.client.schedule_calls(r).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "x-toolsched-session metadata is not printable ASCII; send the session_id"
    );
}
