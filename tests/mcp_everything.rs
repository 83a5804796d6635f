//! The real `@modelcontextprotocol/server-everything` as a tool provider:
//! its tools are listed as `mcp_everything_<tool>`, read-only ones share a
//! wave, `trigger-long-running-operation`'s progress notifications arrive as
//! Executing updates with percentages, images come back as inline data, and
//! the same server works over streamable HTTP.

use crate::mcp_common;
use crate::support;

use std::process::Stdio;

use mcp_common::*;
use serde_json::json;
use support::*;
use tokio::io::AsyncBufReadExt;
use toolsched::scheduler::SchedulerConfig;
use toolsched::tools::mcp::McpServerConfig;

async fn start(trust: bool) -> TestServer {
    TestServer::with_mcp(
        SchedulerConfig::default(),
        servers(vec![("everything", everything(trust))]),
    )
    .await
}

#[tokio::test]
async fn tools_are_listed_with_schema_and_annotations() {
    let srv = start(true).await;
    let tools = list_tools(&srv).await;
    let echo = tools
        .iter()
        .find(|t| t.name == "mcp_everything_echo")
        .unwrap_or_else(|| {
            panic!(
                "echo listed: {:?}",
                tools.iter().map(|t| &t.name).collect::<Vec<_>>()
            )
        });
    assert_eq!(echo.description, "Echoes back the input string");
    let schema = toolsched::api::convert::struct_to_json(echo.parameters.clone().unwrap());
    assert_eq!(schema["properties"]["message"]["type"], "string");
    assert_eq!(schema["required"], json!(["message"]));
    assert!(echo.parallelizable && echo.read_only, "{echo:?}");
    for name in [
        "mcp_everything_get-sum",
        "mcp_everything_trigger-long-running-operation",
        "read_file",
    ] {
        assert!(tools.iter().any(|t| t.name == name), "{name} listed");
    }
}

#[tokio::test]
async fn a_wave_of_read_only_mcp_calls_runs_concurrently() {
    let srv = start(true).await;
    let events = srv
        .run(
            "s",
            vec![
                call("e1", "mcp_everything_echo", json!({"message": "hi"})),
                call("s1", "mcp_everything_get-sum", json!({"a": 2, "b": 3})),
                call("e2", "mcp_everything_echo", json!({"message": "there"})),
            ],
        )
        .await;
    for id in ["e1", "s1", "e2"] {
        assert_eq!(
            states(&events, id),
            ["validating", "scheduled", "executing", "success"],
            "{id}"
        );
    }
    let order: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(u) => Some(state_name(u.state.as_ref()?)),
            _ => None,
        })
        .filter(|s| *s == "executing" || *s == "success")
        .collect();
    assert_eq!(
        &order[..3],
        ["executing"; 3],
        "one wave: all executing before the first success: {order:?}"
    );
    assert_eq!(success_output(&events, "e1"), "Echo: hi");
    assert_eq!(success_output(&events, "s1"), "The sum of 2 and 3 is 5.");
    assert_eq!(success_output(&events, "e2"), "Echo: there");
    let ids: Vec<String> = completed(&events)
        .responses
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, ["e1", "s1", "e2"]);
}

#[tokio::test]
async fn invalid_arguments_fail_the_tools_schema_before_validating() {
    let srv = start(true).await;
    let events = srv
        .run(
            "s",
            vec![call("x", "mcp_everything_get-sum", json!({"a": "two"}))],
        )
        .await;
    assert_eq!(states(&events, "x"), ["error"]);
    let (kind, message) = error_of(&events, "x");
    assert_eq!(kind, toolsched::api::pb::ErrorType::InvalidToolParams);
    assert!(
        message.contains("'a'") || message.contains("argument"),
        "{message}"
    );
}

#[tokio::test]
async fn long_running_operation_progress_arrives_as_percentages() {
    let srv = start(true).await;
    let events = srv
        .run(
            "s",
            vec![call(
                "lr",
                "mcp_everything_trigger-long-running-operation",
                json!({"duration": 0.4, "steps": 4}),
            )],
        )
        .await;
    assert_eq!(
        states(&events, "lr"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(
        progress_of(&events, "lr"),
        [
            (Some(1.0), Some(4.0), Some(25.0), String::new()),
            (Some(2.0), Some(4.0), Some(50.0), String::new()),
            (Some(3.0), Some(4.0), Some(75.0), String::new()),
            (Some(4.0), Some(4.0), Some(100.0), String::new()),
        ]
    );
    assert_eq!(
        success_output(&events, "lr"),
        "Long running operation completed. Duration: 0.4 seconds, Steps: 4."
    );
}

#[tokio::test]
async fn images_come_back_as_inline_data() {
    let srv = start(true).await;
    let events = srv
        .run(
            "s",
            vec![call("img", "mcp_everything_get-tiny-image", json!({}))],
        )
        .await;
    let State::Success(s) = terminal(&events, "img") else {
        panic!("image call failed: {:?}", terminal(&events, "img"));
    };
    let output = response_json(s.response.as_ref().unwrap())["output"].clone();
    let parts = output.as_array().expect("parts");
    let inline: Vec<&serde_json::Value> =
        parts.iter().filter_map(|p| p.get("inlineData")).collect();
    assert_eq!(inline.len(), 1, "{parts:?}");
    assert_eq!(inline[0]["mimeType"], "image/png");
    assert!(
        inline[0]["data"]
            .as_str()
            .unwrap()
            .starts_with("iVBORw0KGgo")
    );
    assert!(parts.iter().any(|p| p.get("text").is_some()), "{parts:?}");
}

#[tokio::test]
async fn streamable_http_server_works_like_stdio() {
    // A free port for the server: bind, read it, release it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(node())
        .args([everything_js(), "streamableHttp".into()])
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start server-everything over HTTP");
    // Wait for its "listening" line: an event, not a sleep.
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening on port") {
                return true;
            }
        }
        false
    })
    .await
    .expect("server-everything listened within 60 s");
    assert!(ready, "server-everything exited before listening");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let config = McpServerConfig {
        url: Some(format!("http://127.0.0.1:{port}/mcp")),
        headers: [("X-Test".to_string(), "1".to_string())].into(),
        trust: true,
        ..McpServerConfig::default()
    };
    let srv =
        TestServer::with_mcp(SchedulerConfig::default(), servers(vec![("web", config)])).await;
    let events = srv
        .run(
            "s",
            vec![
                call("e", "mcp_web_echo", json!({"message": "over http"})),
                call(
                    "lr",
                    "mcp_web_trigger-long-running-operation",
                    json!({"duration": 0.2, "steps": 2}),
                ),
            ],
        )
        .await;
    assert_eq!(success_output(&events, "e"), "Echo: over http");
    assert_eq!(
        progress_of(&events, "lr"),
        [
            (Some(1.0), Some(2.0), Some(50.0), String::new()),
            (Some(2.0), Some(2.0), Some(100.0), String::new()),
        ]
    );
    drop(srv);
    let _ = child.kill().await;
}
