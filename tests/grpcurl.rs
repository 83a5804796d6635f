//! The built binary driven by real grpcurl (1.8.6, reflection v1alpha), as a
//! person debugging the service would: list, describe, health, and a
//! ScheduleCalls of read_file built from reflection alone.

use crate::support;

use std::process::Command;

use serde_json::Value;
use support::{Binary, venv_tool};

/// `grpcurl -plaintext FLAGS ADDR ARGS`.
fn grpcurl(addr: &std::net::SocketAddr, flags: &[&str], args: &[&str]) -> String {
    let out = Command::new(venv_tool("grpcurl"))
        .arg("-plaintext")
        .args(flags)
        .arg(addr.to_string())
        .args(args)
        .output()
        .expect("run grpcurl");
    assert!(
        out.status.success(),
        "grpcurl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// grpcurl prints a stream as consecutive pretty-printed JSON objects.
fn json_stream(text: &str) -> Vec<Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .map(|v| v.expect("valid JSON from grpcurl"))
        .collect()
}

#[test]
fn grpcurl_lists_describes_and_schedules_from_reflection_alone() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "hello from the workspace\n").unwrap();
    let bin = Binary::start(ws.path(), &[]);

    let services = grpcurl(&bin.addr, &[], &["list"]);
    for name in [
        "toolsched.v1.ToolScheduler",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(
            services.lines().any(|l| l == name),
            "{name} not in {services}"
        );
    }

    let described = grpcurl(&bin.addr, &[], &["describe", "toolsched.v1.ToolScheduler"]);
    assert!(
        described.contains("rpc ScheduleCalls ( .toolsched.v1.ScheduleCallsRequest ) returns ( stream .toolsched.v1.ScheduleCallsResponse );"),
        "{described}"
    );

    let health = grpcurl(
        &bin.addr,
        &["-d", r#"{"service":"toolsched.v1.ToolScheduler"}"#],
        &["grpc.health.v1.Health/Check"],
    );
    assert_eq!(json_stream(&health)[0]["status"], "SERVING");

    let request = r#"{"session_id":"grpcurl","calls":[{"id":"c1","name":"read_file","args":{"file_path":"hello.txt"}}]}"#;
    let out = grpcurl(
        &bin.addr,
        &["-d", request],
        &["toolsched.v1.ToolScheduler/ScheduleCalls"],
    );
    let events = json_stream(&out);
    let kinds: Vec<String> = events
        .iter()
        .map(|e| {
            let ev = e.as_object().unwrap();
            let kind = [
                "batchAccepted",
                "batchStarted",
                "callUpdate",
                "batchCompleted",
            ]
            .into_iter()
            .find(|k| ev.contains_key(*k))
            .expect("known event");
            match kind {
                "callUpdate" => {
                    let u = ev["callUpdate"].as_object().unwrap();
                    let state = u
                        .keys()
                        .find(|k| *k != "callId" && *k != "toolName")
                        .unwrap();
                    format!("callUpdate:{state}")
                }
                other => other.to_string(),
            }
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "batchAccepted",
            "batchStarted",
            "callUpdate:validating",
            "callUpdate:scheduled",
            "callUpdate:executing",
            "callUpdate:success",
            "batchCompleted"
        ]
    );
    let seqs: Vec<&str> = events
        .iter()
        .map(|e| e["sequence"].as_str().unwrap())
        .collect();
    assert_eq!(seqs, ["1", "2", "3", "4", "5", "6", "7"]);
    let response = &events.last().unwrap()["batchCompleted"]["responses"][0];
    assert_eq!(response["id"], "c1");
    assert_eq!(response["name"], "read_file");
    assert_eq!(response["response"]["output"], "hello from the workspace\n");

    let status = bin.terminate();
    assert!(
        status.success(),
        "toolsched exited with {status} on SIGTERM"
    );
}

#[test]
fn grpcurl_re_attaches_with_watch_batch_and_replays_a_request_id() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "hello\n").unwrap();
    let bin = Binary::start(ws.path(), &[]);
    let described = grpcurl(&bin.addr, &[], &["describe", "toolsched.v1.ToolScheduler"]);
    assert!(
        described.contains("rpc WatchBatch ( .toolsched.v1.WatchBatchRequest ) returns ( stream .toolsched.v1.ScheduleCallsResponse );"),
        "{described}"
    );
    let request = r#"{"session_id":"g","request_id":"read-1","calls":[{"id":"c1","name":"read_file","args":{"file_path":"hello.txt"}}]}"#;
    let schedule = || {
        json_stream(&grpcurl(
            &bin.addr,
            &["-d", request],
            &["toolsched.v1.ToolScheduler/ScheduleCalls"],
        ))
    };
    let first = schedule();
    let batch_id = first[0]["batchAccepted"]["batchId"]
        .as_str()
        .expect("batch id")
        .to_string();
    let watch = format!(r#"{{"session_id":"g","batch_id":"{batch_id}","after_sequence":4}}"#);
    let tail = json_stream(&grpcurl(
        &bin.addr,
        &["-d", &watch],
        &["toolsched.v1.ToolScheduler/WatchBatch"],
    ));
    assert_eq!(
        tail,
        first[4..],
        "the events after sequence 4, as first sent"
    );
    let again = schedule();
    assert_eq!(again[0]["batchAccepted"]["batchId"], batch_id.as_str());
    assert_eq!(again[0]["batchAccepted"]["replayed"], true);
    assert_eq!(again[1..], first[1..], "the same log");
}
