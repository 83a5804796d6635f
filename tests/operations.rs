//! Operating the service: bearer-token authentication, health during
//! shutdown, session expiry, ListTools.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;
use toolsched::api::ServerOptions;
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;

#[tokio::test]
async fn a_bearer_token_is_required_when_configured() {
    let srv = TestServer::with_options(
        SchedulerConfig::default(),
        ServerOptions {
            auth_token: Some("s3cret".into()),
            ..ServerOptions::default()
        },
    )
    .await;
    let err = srv
        .client
        .clone()
        .list_tools(pb::ListToolsRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert_eq!(
        err.message(),
        "missing 'authorization: Bearer <token>' metadata"
    );
    let mut wrong = tonic::Request::new(pb::ListToolsRequest {});
    wrong
        .metadata_mut()
        .insert("authorization", "Bearer nope".parse().unwrap());
    let err = srv.client.clone().list_tools(wrong).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert_eq!(err.message(), "invalid bearer token");
    let mut right = tonic::Request::new(pb::ListToolsRequest {});
    right
        .metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    let tools = srv
        .client
        .clone()
        .list_tools(right)
        .await
        .unwrap()
        .into_inner();
    assert!(tools.tools.iter().any(|t| t.name == "read_file"));
    // Health stays open for probes.
    let mut health = srv.health().await;
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "toolsched.v1.ToolScheduler".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[tokio::test]
async fn list_tools_declares_every_builtin_with_its_schema() {
    let srv = TestServer::start().await;
    let tools = srv
        .client
        .clone()
        .list_tools(pb::ListToolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .tools;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in [
        "list_directory",
        "read_file",
        "run_shell_command",
        "update_topic",
        "write_file",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let read = tools.iter().find(|t| t.name == "read_file").unwrap();
    assert!(read.read_only && read.parallelizable);
    assert_eq!(read.kind, pb::ToolKind::Read as i32);
    let schema = toolsched::api::convert::struct_to_json(read.parameters.clone().unwrap());
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["file_path"]));
    let shell = tools
        .iter()
        .find(|t| t.name == "run_shell_command")
        .unwrap();
    assert!(!shell.read_only && !shell.parallelizable);
}

#[tokio::test]
async fn an_idle_session_expires_and_forgets_its_rules() {
    let srv = TestServer::with_config(SchedulerConfig {
        session_idle_ttl: Duration::from_millis(50),
        ..SchedulerConfig::default()
    })
    .await;
    std::fs::write(srv.path("a"), "a\n").unwrap();
    srv.run("s", vec![call("r", "read_file", json!({"file_path": "a"}))])
        .await;
    // Wait (bounded) until the session is gone: Cancel on an unknown
    // session is NOT_FOUND, on a live idle one OK. Each probe is activity
    // that restarts the idle clock, so probe less often than the TTL.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let res = srv
            .client
            .clone()
            .cancel(pb::CancelRequest {
                session_id: "s".into(),
                ..Default::default()
            })
            .await;
        match res {
            Err(e) if e.code() == tonic::Code::NotFound => break,
            Ok(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            other => panic!("session did not expire: {other:?}"),
        }
    }
    // Using it again creates it afresh.
    let events = srv
        .run("s", vec![call("r", "read_file", json!({"file_path": "a"}))])
        .await;
    assert_eq!(success_output(&events, "r"), "a\n");
}

/// `GET /metrics` over a plain TCP connection.
fn scrape(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

#[tokio::test]
async fn metrics_count_calls_by_tool_and_outcome() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a"), "a\n").unwrap();
    let bin = Binary::start(ws.path(), &["--metrics-listen", "127.0.0.1:0"]);
    let metrics = bin.metrics_addr.expect("metrics address logged");
    let mut client = toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient::connect(
        format!("http://{}", bin.addr),
    )
    .await
    .unwrap();
    let stream = client
        .schedule_calls(request(
            "m",
            vec![
                call("ok", "read_file", json!({"file_path": "a"})),
                call("missing", "read_file", json!({"file_path": "nope"})),
                call("unknown", "no_such_tool", json!({})),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    collect(stream).await;
    let text = scrape(metrics);
    for line in [
        r#"toolsched_calls_total{error_type="",outcome="success",tool="read_file"} 1"#,
        r#"toolsched_calls_total{error_type="file_not_found",outcome="error",tool="read_file"} 1"#,
        r#"toolsched_calls_total{error_type="tool_not_registered",outcome="error",tool="(unregistered)"} 1"#,
        "toolsched_batches_total 1",
        "toolsched_prompts_open 0",
        "toolsched_sessions 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
    }
    assert!(text.contains("toolsched_call_execution_seconds_bucket{tool=\"read_file\""));
}
