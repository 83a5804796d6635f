//! Traces over OTLP/gRPC: the real `toolsched` binary exports to a small
//! in-test collector (the OTLP `TraceService`, served with tonic). One span
//! per batch, the parent of one span per call; a call's span has one event
//! per state transition, in the order the client saw the states.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use support::*;
use tokio::sync::mpsc;
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

/// A span as received, with its resource's `service.name` and
/// `service.version`, and its scope.
struct Received {
    service: String,
    version: String,
    scope: String,
    span: Span,
}

/// The collector: every exported span goes into a channel.
struct Collector(mpsc::UnboundedSender<Received>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for resource_spans in request.into_inner().resource_spans {
            let resource = resource_spans.resource.unwrap_or_default().attributes;
            let service = attr(&resource, "service.name").unwrap_or_default();
            let version = attr(&resource, "service.version").unwrap_or_default();
            for scope_spans in resource_spans.scope_spans {
                let scope = scope_spans.scope.unwrap_or_default().name;
                for span in scope_spans.spans {
                    let _ = self.0.send(Received {
                        service: service.clone(),
                        version: version.clone(),
                        scope: scope.clone(),
                        span,
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// Starts the collector on `127.0.0.1:0`: (its endpoint, the spans).
async fn start_collector() -> (String, mpsc::UnboundedReceiver<Received>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Collector(tx)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .expect("collector ran");
    });
    (format!("http://{addr}"), rx)
}

/// A string (or other scalar, as text) attribute.
fn attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::BoolValue(b) => b.to_string(),
        any_value::Value::IntValue(i) => i.to_string(),
        other => format!("{other:?}"),
    })
}

/// Every attribute of a span as key → text, for exact comparison.
fn attrs(span: &Span) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            let value = attr(std::slice::from_ref(kv), &kv.key).unwrap_or_default();
            (kv.key.clone(), value)
        })
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn event_names(span: &Span) -> Vec<&str> {
    span.events.iter().map(|e| e.name.as_str()).collect()
}

/// An endpoint where no collector listens (the discard port).
const NOWHERE: &str = "http://127.0.0.1:9";

/// Exactly `n` spans from the collector: waits (bounded) for them, then
/// checks that no other span came with them.
async fn receive(spans: &mut mpsc::UnboundedReceiver<Received>, n: usize) -> Vec<Received> {
    let mut received = Vec::new();
    while received.len() < n {
        let span = tokio::time::timeout(Duration::from_secs(60), spans.recv())
            .await
            .unwrap_or_else(|_| {
                let names: Vec<_> = received.iter().map(|r: &Received| &r.span.name).collect();
                panic!("{n} spans not exported within 60 s; got {names:?}")
            })
            .expect("collector running");
        received.push(span);
    }
    // The exporter was shut down with the server: nothing is on its way.
    if let Ok(extra) = spans.try_recv() {
        panic!("more than {n} spans: also {}", extra.span.name);
    }
    received
}

/// The batch id the server assigned, from the BatchAccepted event.
fn batch_id(events: &[Event]) -> String {
    match events.first() {
        Some(Event::BatchAccepted(a)) => a.batch_id.clone(),
        other => panic!("first event is not BatchAccepted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_a_span_under_its_batch_with_one_event_per_state() {
    let (endpoint, mut spans) = start_collector().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a"), "a\n").unwrap();
    // The flag beats OpenTelemetry's variables (which point nowhere here).
    let bin = Binary::start_with_env(
        ws.path(),
        &["--otlp-endpoint", &endpoint],
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", NOWHERE)],
    );
    let mut client = ToolSchedulerClient::connect(format!("http://{}", bin.addr))
        .await
        .unwrap();
    let tools = client
        .list_tools(pb::ListToolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .tools;

    // Batch 1, plan mode: the read is allowed, the write denied.
    let mut plan = request(
        "t",
        vec![
            call("r", "read_file", json!({"file_path": "a"})),
            call(
                "w",
                "write_file",
                json!({"file_path": "b", "content": "b\n"}),
            ),
        ],
    );
    plan.approval_mode = pb::ApprovalMode::Plan as i32;
    let first = collect(client.schedule_calls(plan).await.unwrap().into_inner()).await;
    assert_eq!(
        states(&first, "r"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(states(&first, "w"), ["validating", "error"]);

    // Batch 2, default mode: both writes ask; the first is approved once,
    // the second rejected.
    let mut ask = request(
        "t",
        vec![
            call(
                "e",
                "write_file",
                json!({"file_path": "b", "content": "b\n"}),
            ),
            call(
                "x",
                "write_file",
                json!({"file_path": "c", "content": "c\n"}),
            ),
        ],
    );
    ask.approval_mode = pb::ApprovalMode::Default as i32;
    let mut stream = client.schedule_calls(ask).await.unwrap().into_inner();
    let mut second = Vec::new();
    let prompt = await_prompt(&mut stream, &mut second, "e").await;

    // Batch 3 queues behind it and is cancelled before it starts.
    let mut queued = client
        .schedule_calls(request(
            "t",
            vec![call("q", "read_file", json!({"file_path": "a"}))],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut third = Vec::new();
    next_matching(
        &mut queued,
        &mut third,
        |e| matches!(e, Event::BatchAccepted(a) if a.queued),
    )
    .await;
    client
        .cancel(pb::CancelRequest {
            session_id: "t".into(),
            batch_id: Some(batch_id(&third)),
            reason: "not needed".into(),
        })
        .await
        .unwrap();
    third.extend(collect(queued).await);
    assert_eq!(states(&third, "q"), ["cancelled"]);

    let answer = |call_id: &str, correlation_id: &str, outcome: pb::ConfirmationOutcome| {
        let mut client = client.clone();
        let request = pb::ConfirmRequest {
            session_id: "t".into(),
            call_id: call_id.into(),
            correlation_id: correlation_id.into(),
            outcome: outcome as i32,
            new_content: None,
        };
        async move { client.confirm(request).await.unwrap() }
    };
    answer(
        "e",
        &prompt.correlation_id,
        pb::ConfirmationOutcome::ProceedOnce,
    )
    .await;
    let rejected = await_prompt(&mut stream, &mut second, "x").await;
    answer(
        "x",
        &rejected.correlation_id,
        pb::ConfirmationOutcome::Cancel,
    )
    .await;
    second.extend(collect(stream).await);
    assert_eq!(
        states(&second, "e"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(
        states(&second, "x"),
        ["validating", "awaiting_approval", "cancelled"]
    );
    let asking_rule = prompt.policy_rule.expect("the prompt names its rule");

    // A graceful stop flushes what the batch processor still holds.
    let status = tokio::task::spawn_blocking(move || bin.terminate())
        .await
        .unwrap();
    assert!(status.success(), "toolsched exited with {status}");

    // 3 batches, 5 calls.
    let received = receive(&mut spans, 8).await;
    for r in &received {
        assert_eq!(r.service, "toolsched");
        assert_eq!(r.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(r.scope, "toolsched");
    }
    let description = |tool: &str| {
        tools
            .iter()
            .find(|t| t.name == tool)
            .map(|t| t.description.clone())
            .unwrap_or_else(|| panic!("{tool} is declared"))
    };
    let (read_description, write_description) =
        (description("read_file"), description("write_file"));
    let by_call = |id: &str| {
        received
            .iter()
            .map(|r| &r.span)
            .find(|s| attr(&s.attributes, "gen_ai.tool.call.id").as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no span for call {id}"))
    };
    let by_batch = |id: &str| {
        received
            .iter()
            .map(|r| &r.span)
            .find(|s| {
                s.name == "batch"
                    && attr(&s.attributes, "toolsched.batch.id").as_deref() == Some(id)
            })
            .unwrap_or_else(|| panic!("no span for batch {id}"))
    };
    let (first_id, second_id, third_id) = (batch_id(&first), batch_id(&second), batch_id(&third));
    let (batch1, batch2, batch3) = (
        by_batch(&first_id),
        by_batch(&second_id),
        by_batch(&third_id),
    );
    let (read, denied, asked) = (by_call("r"), by_call("w"), by_call("e"));
    let (rejected, never_started) = (by_call("x"), by_call("q"));

    // Batches are roots; calls are children of their batch, in its trace.
    for batch in [batch1, batch2, batch3] {
        assert!(batch.parent_span_id.is_empty(), "a batch span has a parent");
    }
    for (call, batch) in [
        (read, batch1),
        (denied, batch1),
        (asked, batch2),
        (rejected, batch2),
        (never_started, batch3),
    ] {
        assert_eq!(call.parent_span_id, batch.span_id, "{}", call.name);
        assert_eq!(call.trace_id, batch.trace_id, "{}", call.name);
    }

    assert_eq!(
        attrs(batch1),
        map(&[
            ("toolsched.session.id", "t"),
            ("toolsched.tenant", "default"),
            ("toolsched.batch.id", &first_id),
            ("toolsched.batch.calls", "2"),
            ("toolsched.batch.interactive", "true"),
        ])
    );
    assert_eq!(batch2.name, "batch");
    assert_eq!(
        attr(&batch2.attributes, "toolsched.batch.calls").as_deref(),
        Some("2")
    );

    // The allowed read.
    assert_eq!(read.name, "execute_tool read_file");
    assert_eq!(event_names(read), states(&first, "r"));
    assert_eq!(
        attrs(read),
        map(&[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.call.id", "r"),
            ("gen_ai.tool.name", "read_file"),
            ("gen_ai.tool.type", "function"),
            ("gen_ai.tool.description", &read_description),
            ("toolsched.session.id", "t"),
            ("toolsched.batch.id", &first_id),
            ("toolsched.call.state", "success"),
            ("toolsched.policy.decision", "allow"),
        ])
    );

    // The denied write: Error with its kind and the deciding rule.
    assert_eq!(denied.name, "execute_tool write_file");
    assert_eq!(event_names(denied), ["validating", "error"]);
    assert_eq!(
        attrs(denied),
        map(&[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.call.id", "w"),
            ("gen_ai.tool.name", "write_file"),
            ("gen_ai.tool.type", "function"),
            ("gen_ai.tool.description", &write_description),
            ("toolsched.session.id", "t"),
            ("toolsched.batch.id", &first_id),
            ("toolsched.call.state", "error"),
            ("error.type", "policy_violation"),
            ("toolsched.policy.decision", "deny"),
            ("toolsched.policy.rule", "rule 'plan-mode' (<built-in>)"),
        ])
    );
    let status = denied.status.as_ref().expect("an error span has a status");
    assert_eq!(
        status.code,
        opentelemetry_proto::tonic::trace::v1::status::StatusCode::Error as i32
    );
    let (_, message) = error_of(&first, "w");
    assert_eq!(status.message, message);

    // The approved write: the AwaitingApproval event names the rule that
    // asked, the span the answer.
    let rule = format!("rule '{}' ({})", asking_rule.rule, asking_rule.file);
    assert_eq!(event_names(asked), states(&second, "e"));
    let awaiting = &asked.events[1];
    assert_eq!(
        attr(&awaiting.attributes, "toolsched.policy.rule").as_deref(),
        Some(rule.as_str())
    );
    assert_eq!(
        attrs(asked),
        map(&[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.call.id", "e"),
            ("gen_ai.tool.name", "write_file"),
            ("gen_ai.tool.type", "function"),
            ("gen_ai.tool.description", &write_description),
            ("toolsched.session.id", "t"),
            ("toolsched.batch.id", &second_id),
            ("toolsched.call.state", "success"),
            ("toolsched.policy.decision", "ask_user"),
            ("toolsched.policy.rule", &rule),
            ("toolsched.approval.outcome", "proceed_once"),
        ])
    );
    // The rejected write: Cancelled with the reason, and the answer.
    assert_eq!(event_names(rejected), states(&second, "x"));
    assert_eq!(
        attrs(rejected),
        map(&[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.call.id", "x"),
            ("gen_ai.tool.name", "write_file"),
            ("gen_ai.tool.type", "function"),
            ("gen_ai.tool.description", &write_description),
            ("toolsched.session.id", "t"),
            ("toolsched.batch.id", &second_id),
            ("toolsched.call.state", "cancelled"),
            ("toolsched.cancel.reason", "User denied execution."),
            ("toolsched.policy.decision", "ask_user"),
            ("toolsched.policy.rule", &rule),
            ("toolsched.approval.outcome", "cancel"),
        ])
    );

    // The call of the batch cancelled while queued: one event, no decision.
    assert_eq!(never_started.name, "execute_tool read_file");
    assert_eq!(event_names(never_started), ["cancelled"]);
    assert_eq!(
        attrs(never_started),
        map(&[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.call.id", "q"),
            ("gen_ai.tool.name", "read_file"),
            ("gen_ai.tool.type", "function"),
            ("gen_ai.tool.description", &read_description),
            ("toolsched.session.id", "t"),
            ("toolsched.batch.id", &third_id),
            ("toolsched.call.state", "cancelled"),
            ("toolsched.cancel.reason", "not needed"),
        ])
    );

    // Events are in time order, within the span.
    for span in [read, denied, asked, rejected, never_started] {
        let times: Vec<u64> = span.events.iter().map(|e| e.time_unix_nano).collect();
        assert!(times.is_sorted(), "{}: {times:?}", span.name);
        assert!(span.start_time_unix_nano <= times[0]);
        assert!(times[times.len() - 1] <= span.end_time_unix_nano);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_environment_variables_configure_the_export() {
    let (endpoint, mut spans) = start_collector().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a"), "a\n").unwrap();
    // The traces endpoint beats the generic one; the service is named.
    let bin = Binary::start_with_env(
        ws.path(),
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", NOWHERE),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "agent-tools"),
        ],
    );
    let mut client = ToolSchedulerClient::connect(format!("http://{}", bin.addr))
        .await
        .unwrap();
    let events = collect(
        client
            .schedule_calls(request(
                "env",
                vec![call("r", "read_file", json!({"file_path": "a"}))],
            ))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert_eq!(success_output(&events, "r"), "a\n");
    let status = tokio::task::spawn_blocking(move || bin.terminate())
        .await
        .unwrap();
    assert!(status.success(), "toolsched exited with {status}");
    let received = receive(&mut spans, 2).await;
    let mut names: Vec<&str> = received.iter().map(|r| r.span.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["batch", "execute_tool read_file"]);
    for r in &received {
        assert_eq!(r.service, "agent-tools");
        assert_eq!(
            attr(&r.span.attributes, "toolsched.batch.id"),
            Some(batch_id(&events))
        );
    }
}

/// The W3C trace context of an agent frontend's own span.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_in_the_metadata_makes_the_batch_a_child_of_the_callers_span() {
    let (endpoint, mut spans) = start_collector().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a"), "a\n").unwrap();
    let bin = Binary::start(ws.path(), &["--otlp-endpoint", &endpoint]);
    let mut client = ToolSchedulerClient::connect(format!("http://{}", bin.addr))
        .await
        .unwrap();
    let mut request = tonic::Request::new(support::request(
        "joined",
        vec![call("r", "read_file", json!({"file_path": "a"}))],
    ));
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    request
        .metadata_mut()
        .insert("tracestate", "frontend=agent-1".parse().unwrap());
    let events = collect(client.schedule_calls(request).await.unwrap().into_inner()).await;
    assert_eq!(success_output(&events, "r"), "a\n");
    // A batch without one stays a root of its own trace.
    let root = collect(
        client
            .schedule_calls(support::request(
                "joined",
                vec![call("s", "read_file", json!({"file_path": "a"}))],
            ))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    // The audit lines of the joined batch carry the caller's trace id.
    let lines = audit_lines(&bin, "r", 2);
    for line in &lines {
        assert_eq!(line["trace_id"], CALLER_TRACE, "{line}");
    }
    let status = tokio::task::spawn_blocking(move || bin.terminate())
        .await
        .unwrap();
    assert!(status.success(), "toolsched exited with {status}");

    let received = receive(&mut spans, 4).await;
    let batch_of = |id: String| {
        received
            .iter()
            .map(|r| &r.span)
            .find(|s| {
                s.name == "batch" && attr(&s.attributes, "toolsched.batch.id") == Some(id.clone())
            })
            .expect("batch span")
    };
    let joined = batch_of(batch_id(&events));
    assert_eq!(hex(&joined.trace_id), CALLER_TRACE);
    assert_eq!(hex(&joined.parent_span_id), CALLER_SPAN);
    assert_eq!(joined.trace_state, "frontend=agent-1");
    let call_span = received
        .iter()
        .map(|r| &r.span)
        .find(|s| attr(&s.attributes, "gen_ai.tool.call.id").as_deref() == Some("r"))
        .expect("call span");
    assert_eq!(call_span.name, "execute_tool read_file");
    assert_eq!(call_span.parent_span_id, joined.span_id);
    assert_eq!(hex(&call_span.trace_id), CALLER_TRACE);
    assert_eq!(
        call_span.kind,
        opentelemetry_proto::tonic::trace::v1::span::SpanKind::Internal as i32
    );
    let a = attrs(call_span);
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["gen_ai.tool.name"], "read_file");
    assert_eq!(a["gen_ai.tool.type"], "function");
    assert!(!a["gen_ai.tool.description"].is_empty());
    let alone = batch_of(batch_id(&root));
    assert!(alone.parent_span_id.is_empty());
    assert_ne!(hex(&alone.trace_id), CALLER_TRACE);
}

/// The first `n` audit lines (JSON) of call `call_id` on `bin`'s stderr,
/// waiting (bounded) for them.
fn audit_lines(bin: &Binary, call_id: &str, n: usize) -> Vec<serde_json::Value> {
    let mut lines = Vec::new();
    while lines.len() < n {
        let line = bin
            .stderr_lines
            .recv_timeout(Duration::from_secs(60))
            .expect("audit lines within 60 s");
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["target"] == "toolsched::audit" && v["call_id"] == call_id && v["level"] == "INFO" {
            lines.push(v);
        }
    }
    lines
}

/// An OTLP/HTTP collector: `POST /v1/traces` with a protobuf body; each
/// request's content type and spans go into the channel.
async fn start_http_collector() -> (String, mpsc::UnboundedReceiver<(String, Received)>) {
    use axum::body::Bytes;
    use axum::http::HeaderMap;
    use prost::Message as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let tx = tx.clone();
            async move {
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let request = ExportTraceServiceRequest::decode(body).expect("protobuf body");
                for resource_spans in request.resource_spans {
                    let resource = resource_spans.resource.unwrap_or_default().attributes;
                    for scope_spans in resource_spans.scope_spans {
                        let scope = scope_spans.scope.unwrap_or_default().name;
                        for span in scope_spans.spans {
                            let _ = tx.send((
                                content_type.clone(),
                                Received {
                                    service: attr(&resource, "service.name").unwrap_or_default(),
                                    version: attr(&resource, "service.version").unwrap_or_default(),
                                    scope: scope.clone(),
                                    span,
                                },
                            ));
                        }
                    }
                }
                ExportTraceServiceResponse {
                    partial_success: None,
                }
                .encode_to_vec()
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.expect("collector ran") });
    (format!("http://{addr}"), rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_over_otlp_http_protobuf_when_the_environment_says_so() {
    let (endpoint, mut spans) = start_http_collector().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a"), "a\n").unwrap();
    // The generic endpoint is a base URL: /v1/traces is appended.
    let bin = Binary::start_with_env(
        ws.path(),
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ],
    );
    let mut client = ToolSchedulerClient::connect(format!("http://{}", bin.addr))
        .await
        .unwrap();
    let events = collect(
        client
            .schedule_calls(request(
                "http",
                vec![call("r", "read_file", json!({"file_path": "a"}))],
            ))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert_eq!(success_output(&events, "r"), "a\n");
    let status = tokio::task::spawn_blocking(move || bin.terminate())
        .await
        .unwrap();
    assert!(status.success(), "toolsched exited with {status}");
    let mut received = Vec::new();
    while received.len() < 2 {
        let span = tokio::time::timeout(Duration::from_secs(60), spans.recv())
            .await
            .expect("2 spans within 60 s")
            .expect("collector running");
        received.push(span);
    }
    let mut names: Vec<&str> = received.iter().map(|(_, r)| r.span.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["batch", "execute_tool read_file"]);
    for (content_type, r) in &received {
        assert_eq!(content_type, "application/x-protobuf");
        assert_eq!(r.service, "toolsched");
        assert_eq!(r.version, env!("CARGO_PKG_VERSION"));
    }
}

/// A protocol this build does not export stops start-up, naming the
/// variable and the protocols it does speak (it used to be ignored).
#[test]
fn an_otlp_protocol_not_spoken_stops_start_up() {
    let ws = tempfile::tempdir().unwrap();
    for (var, value) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolsched"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--otlp-endpoint",
                NOWHERE,
            ])
            .arg("--workspace")
            .arg(ws.path())
            .env(var, value)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "{var}='{value}' is not an OTLP protocol this build exports: use grpc (the default) or http/protobuf"
            )),
            "{stderr}"
        );
        assert!(!stderr.contains("toolsched serving"), "{stderr}");
    }
}
