//! Traces (DESIGN §8): one OpenTelemetry span per batch, the parent of one
//! span per call of the batch; a call's span carries one event per state
//! transition and ends with the call's terminal state. Spans go over OTLP
//! (gRPC, or HTTP/protobuf with `OTEL_EXPORTER_OTLP_PROTOCOL`) to a
//! collector when one is configured, and nowhere otherwise. A batch whose
//! request carried a W3C `traceparent` is a child of the caller's span; call
//! spans follow the GenAI semantic conventions for tool execution.
//!
//! The same per-call record feeds the audit trail ([`audit`]): one INFO line
//! per call decision and per terminal state, whether tracing is on or not.
//!
//! Where things come from: the endpoint is `--otlp-endpoint`
//! (`TOOLSCHED_OTLP_ENDPOINT`, `otlp_endpoint` in the file) or, when that is
//! unset, OpenTelemetry's own `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_ENDPOINT`; `service.name` is `OTEL_SERVICE_NAME` (or
//! `service.name` in `OTEL_RESOURCE_ATTRIBUTES`), else "toolsched". The other
//! `OTEL_*` variables the SDK and exporter read (`OTEL_BSP_*`,
//! `OTEL_TRACES_SAMPLER`, `OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`) apply.
//!
//! This module is the only one that knows OpenTelemetry: the scheduler holds
//! a [`BatchTrace`] per batch and a [`CallTrace`] per call and feeds them
//! plain names. With no exporter configured there are no spans; a call keeps
//! only its small audit record.
//!
//! Not here: logs (`tracing` to stderr, set up in `main`, written by
//! [`log_writer`]) and metrics
//! (Prometheus, `scheduler::metrics`).

pub mod audit;
pub mod lines;
pub mod log_writer;

use std::cell::Cell;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::scheduler::Metrics;
use crate::scheduler::events::CallRequest;
use crate::tools::Declaration;

/// `service.name` when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "toolsched";

/// Longest the exit waits for the last spans to be exported: a collector that
/// is down must not hold the shutdown for the exporter's full retry budget.
pub const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Span attribute keys. The `gen_ai.*` ones follow OpenTelemetry's GenAI
/// semantic conventions for tool execution, the error kind its general
/// `error.type`; our own live under `toolsched.*`.
pub mod keys {
    /// Always `execute_tool` on a call's span.
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// `function`: the model declared the tool as a function and this
    /// service, the client side of the model, executes it.
    pub const TOOL_TYPE: &str = "gen_ai.tool.type";
    /// The tool's description, as declared to the model.
    pub const TOOL_DESCRIPTION: &str = "gen_ai.tool.description";
    pub const SESSION_ID: &str = "toolsched.session.id";
    /// The session's tenant (issue 18).
    pub const TENANT: &str = "toolsched.tenant";
    pub const BATCH_ID: &str = "toolsched.batch.id";
    pub const BATCH_CALLS: &str = "toolsched.batch.calls";
    pub const BATCH_INTERACTIVE: &str = "toolsched.batch.interactive";
    pub const CALL_ID: &str = "gen_ai.tool.call.id";
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    /// The terminal state: success, error or cancelled.
    pub const CALL_STATE: &str = "toolsched.call.state";
    /// The stable error kind (`ErrorKind::as_str`) of an Error call.
    pub const ERROR_TYPE: &str = "error.type";
    /// Why a call was cancelled.
    pub const CANCEL_REASON: &str = "toolsched.cancel.reason";
    /// allow, deny or ask_user: the policy's first decision for the call.
    pub const POLICY_DECISION: &str = "toolsched.policy.decision";
    /// The rule that decided (deny, ask_user), e.g. "rule 'x' (p.toml:3)".
    pub const POLICY_RULE: &str = "toolsched.policy.rule";
    /// The answer to the call's prompt (proceed_once, cancel, …), or
    /// `session_rule` when an "always" answer to another prompt allowed it.
    pub const APPROVAL_OUTCOME: &str = "toolsched.approval.outcome";
}

/// The tracer, set once by [`init`] when an exporter is configured; absent,
/// tracing is off.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTLP trace exporter ({endpoint}): {source}")]
    Exporter {
        endpoint: String,
        source: opentelemetry_otlp::ExporterBuildError,
    },
    #[error("tracing was already set up in this process")]
    AlreadySet,
    /// A protocol this build does not speak (http/json), or none at all.
    #[error(
        "{var}='{value}' is not an OTLP protocol this build exports: use grpc (the default) or http/protobuf"
    )]
    Protocol { var: &'static str, value: String },
    /// The export speaks plain HTTP/2 only (no TLS built in).
    #[error(
        "OTLP endpoint '{endpoint}' (from {from}) must be an http:// URL with a host and port, e.g. http://127.0.0.1:4317 (gRPC) or http://127.0.0.1:4318 (http/protobuf); TLS export is not built in"
    )]
    NotHttp {
        endpoint: String,
        from: &'static str,
    },
}

/// Owns the tracer provider; [`Telemetry::shutdown`] exports what is left.
#[must_use = "call shutdown() at exit, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    endpoint: Option<String>,
    protocol: &'static str,
}

impl Telemetry {
    /// Where spans are exported, if anywhere (for the start-up log).
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// The OTLP protocol spans are exported with: `grpc` or `http/protobuf`.
    pub fn protocol(&self) -> &'static str {
        self.protocol
    }

    /// Exports the spans still queued (bounded by
    /// [`SHUTDOWN_FLUSH_TIMEOUT`]) and stops the exporter. Call it after the
    /// server drained, while the runtime still runs: the exporter's
    /// connection lives on it.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // The provider blocks until its export thread is done.
        let result = tokio::task::spawn_blocking(move || {
            provider.shutdown_with_timeout(SHUTDOWN_FLUSH_TIMEOUT)
        })
        .await;
        match result {
            Ok(Ok(())) => tracing::debug!("traces flushed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "traces not fully flushed at exit"),
            Err(e) => tracing::warn!(error = %e, "trace flush task failed"),
        }
    }
}

/// The endpoint OpenTelemetry's environment names, if any:
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (whether it was this one: it is the
/// full URL, the generic one a base), then `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn endpoint_from_env() -> Option<(String, bool)> {
    [
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", true),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", false),
    ]
    .into_iter()
    .find_map(|(var, signal)| {
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (v, signal))
    })
}

/// The OTLP protocol from `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, then
/// `OTEL_EXPORTER_OTLP_PROTOCOL`; gRPC when neither is set (what this
/// service always spoke). `http/json` and anything else is an error: the
/// exporter would otherwise fall back silently.
fn protocol_from_env() -> Result<Protocol, TelemetryError> {
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        let Ok(value) = std::env::var(var) else {
            continue;
        };
        return match value.trim() {
            "" => continue,
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpBinary),
            _ => Err(TelemetryError::Protocol {
                var,
                value: value.chars().take(32).collect(),
            }),
        };
    }
    Ok(Protocol::Grpc)
}

/// OTLP/HTTP sends traces to `<base>/v1/traces`: a base URL (the flag, or
/// the generic environment variable) without a path gets it appended.
fn http_traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let has_path = endpoint
        .parse::<http::Uri>()
        .is_ok_and(|uri| !matches!(uri.path(), "" | "/"));
    if has_path {
        endpoint.to_string()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// Sets up span export to `endpoint` (e.g. `http://127.0.0.1:4317`), or to
/// the `OTEL_EXPORTER_OTLP_*` endpoint when `endpoint` is `None`; with
/// neither (or `OTEL_SDK_DISABLED=true`) tracing stays off. Must run inside
/// the Tokio runtime (the gRPC channel is created on it); connecting is
/// lazy, so a collector that is down is not a start-up error (spans are
/// dropped and the exporter logs why).
///
/// Errors: an endpoint the exporter cannot use (not a URI), or a second call.
pub fn init(endpoint: Option<&str>) -> Result<Telemetry, TelemetryError> {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    let given = endpoint
        .map(str::to_string)
        .filter(|e| !e.trim().is_empty());
    let from = if given.is_some() {
        "--otlp-endpoint (TOOLSCHED_OTLP_ENDPOINT, otlp_endpoint)"
    } else {
        "the OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT environment"
    };
    let (endpoint, full_url) = match given {
        Some(given) => (Some(given), false),
        None => match endpoint_from_env() {
            Some((endpoint, full)) => (Some(endpoint), full),
            None => (None, false),
        },
    };
    let protocol = protocol_from_env()?;
    let protocol_name = match protocol {
        Protocol::HttpBinary => "http/protobuf",
        _ => "grpc",
    };
    if disabled && let Some(endpoint) = &endpoint {
        tracing::info!(%endpoint, "tracing off: OTEL_SDK_DISABLED=true overrides the OTLP endpoint");
    }
    let Some(endpoint) = endpoint.filter(|_| !disabled) else {
        return Ok(Telemetry {
            provider: None,
            endpoint: None,
            protocol: protocol_name,
        });
    };
    let usable = endpoint.parse::<http::Uri>().is_ok_and(|uri| {
        uri.scheme_str() == Some("http")
            && uri.host().is_some_and(|h| !h.is_empty())
            && uri.port_u16().is_some()
    });
    if !usable {
        return Err(TelemetryError::NotHttp { endpoint, from });
    }
    if TRACER.get().is_some() {
        return Err(TelemetryError::AlreadySet);
    }
    let built = match protocol {
        Protocol::HttpBinary => {
            let url = if full_url {
                endpoint.clone()
            } else {
                http_traces_url(&endpoint)
            };
            let built = SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(url.clone())
                .build();
            (built, url)
        }
        _ => {
            let built = SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build();
            (built, endpoint)
        }
    };
    let (exporter, endpoint) = match built {
        (Ok(exporter), endpoint) => (exporter, endpoint),
        (Err(source), endpoint) => return Err(TelemetryError::Exporter { endpoint, source }),
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build();
    let scope = InstrumentationScope::builder("toolsched")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    TRACER
        .set(provider.tracer_with_scope(scope))
        .map_err(|_| TelemetryError::AlreadySet)?;
    Ok(Telemetry {
        provider: Some(provider),
        endpoint: Some(endpoint),
        protocol: protocol_name,
    })
}

/// The trace id of the span in `cx`, when tracing is on (for log lines).
fn trace_id(cx: &Context) -> Option<String> {
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// The SDK's resource (environment, `OTEL_RESOURCE_ATTRIBUTES`), named
/// [`DEFAULT_SERVICE_NAME`] unless the environment names the service, with
/// `service.version` this build's version unless the environment sets it.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let versioned = detected
        .get(&opentelemetry::Key::from_static_str("service.version"))
        .is_some();
    let mut builder = Resource::builder();
    if !named {
        builder = builder.with_service_name(DEFAULT_SERVICE_NAME);
    }
    if !versioned {
        builder =
            builder.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    }
    builder.build()
}

// === impl TraceParent ===

/// The caller's span, from the W3C `traceparent` / `tracestate` of the
/// request (gRPC metadata): the batch's span becomes its child. Empty when
/// the request carried none, or one that does not parse (W3C Trace Context:
/// the receiver then starts a new trace).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceParent(Option<SpanContext>);

impl TraceParent {
    /// Parses the two header values (either may be absent).
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Self {
        struct Headers<'a>(Option<&'a str>, Option<&'a str>);
        impl Extractor for Headers<'_> {
            fn get(&self, key: &str) -> Option<&str> {
                match key {
                    "traceparent" => self.0,
                    "tracestate" => self.1,
                    _ => None,
                }
            }
            fn keys(&self) -> Vec<&str> {
                vec!["traceparent", "tracestate"]
            }
        }
        if traceparent.is_none() {
            return Self(None);
        }
        let cx = TraceContextPropagator::new().extract(&Headers(traceparent, tracestate));
        let span = cx.span();
        let sc = span.span_context();
        Self(sc.is_valid().then(|| sc.clone()))
    }

    /// Whether the request carried a usable parent.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

// === impl BatchTrace ===

/// The span of one batch (one ScheduleCalls stream), from its start to its
/// last call's end; ended when dropped. Without tracing it only names the
/// batch for its calls' audit lines.
#[derive(Default)]
pub struct BatchTrace {
    /// Holds the span, the parent of the calls' spans (tracing on).
    cx: Option<Context>,
    session_id: Arc<str>,
    /// The session's tenant (the scheduler's key is `<tenant>/<id>`).
    tenant: Arc<str>,
    /// Who asked for the batch, and the session's workspace.
    principal: Arc<str>,
    workspace: Arc<str>,
    batch_id: Arc<str>,
    /// Where the calls' approval waits are observed, if anywhere.
    metrics: Option<Arc<Metrics>>,
}

impl BatchTrace {
    /// Starts the span `batch` of `batch_id` in `session_id`, a batch of
    /// `calls` calls, as a child of `parent` when the caller sent one.
    pub fn start(
        session_id: &str,
        batch_id: &str,
        calls: usize,
        interactive: bool,
        parent: &TraceParent,
    ) -> Self {
        // The scheduler keys sessions `<tenant>/<id>`; the span names the
        // client's id and the tenant apart.
        let tenant = session_id
            .split_once('/')
            .map_or(crate::tenant::DEFAULT_TENANT, |(t, _)| t);
        let session_id = crate::tenant::TenantId::client_session_id(session_id);
        let cx = TRACER.get().map(|tracer| {
            let parent_cx = match &parent.0 {
                Some(sc) => Context::new().with_remote_span_context(sc.clone()),
                None => Context::new(),
            };
            let span = tracer
                .span_builder("batch")
                .with_kind(SpanKind::Internal)
                .with_attributes([
                    KeyValue::new(keys::SESSION_ID, session_id.to_string()),
                    KeyValue::new(keys::TENANT, tenant.to_string()),
                    KeyValue::new(keys::BATCH_ID, batch_id.to_string()),
                    KeyValue::new(keys::BATCH_CALLS, calls as i64),
                    KeyValue::new(keys::BATCH_INTERACTIVE, interactive),
                ])
                .start_with_context(tracer, &parent_cx);
            parent_cx.with_span(span)
        });
        Self {
            cx,
            session_id: session_id.into(),
            tenant: tenant.into(),
            principal: crate::tenant::ANONYMOUS.into(),
            workspace: "".into(),
            batch_id: batch_id.into(),
            metrics: None,
        }
    }

    /// Names who asked for the batch and the session's workspace (`""`:
    /// the server's one) on its calls' audit lines. The principal is never
    /// a span attribute nor a metric label (unbounded); the tenant is both.
    pub fn by(mut self, principal: Arc<str>, workspace: Arc<str>) -> Self {
        self.principal = principal;
        self.workspace = workspace;
        self
    }

    /// Observes the calls' approval waits (prompt to answer) in `metrics`.
    pub fn observed_by(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Starts the span `execute_tool {tool}` of `call` (GenAI semantic
    /// conventions) as a child of this batch's span, and the call's audit
    /// record. `tool` is the registered tool's declaration, when there is
    /// one.
    pub fn call(&self, call: &CallRequest, tool: Option<&Declaration>) -> CallTrace {
        let span = match (&self.cx, TRACER.get()) {
            (Some(cx), Some(tracer)) => {
                let mut attributes = vec![
                    KeyValue::new(keys::OPERATION_NAME, "execute_tool"),
                    KeyValue::new(keys::CALL_ID, call.id.clone()),
                    KeyValue::new(keys::TOOL_NAME, call.name.clone()),
                    KeyValue::new(keys::TOOL_TYPE, "function"),
                    KeyValue::new(keys::SESSION_ID, self.session_id.to_string()),
                    KeyValue::new(keys::BATCH_ID, self.batch_id.to_string()),
                ];
                if let Some(tool) = tool {
                    attributes.push(KeyValue::new(
                        keys::TOOL_DESCRIPTION,
                        tool.description.clone(),
                    ));
                }
                Some(Box::new(
                    tracer
                        .span_builder(format!("execute_tool {}", call.name))
                        .with_kind(SpanKind::Internal)
                        .with_attributes(attributes)
                        .start_with_context(tracer, cx),
                ))
            }
            _ => None,
        };
        let trace_id = self.cx.as_ref().and_then(trace_id);
        CallTrace(Cell::new(Some(Box::new(CallSpan {
            span,
            audit: audit::CallAudit::new(
                self.tenant.clone(),
                self.principal.clone(),
                self.workspace.clone(),
                self.session_id.clone(),
                self.batch_id.clone(),
                call,
                trace_id,
            ),
            metrics: self.metrics.clone(),
            state: "",
            prompt_since: None,
            decision: None,
            rule: None,
            approval: None,
            approved_by: None,
        }))))
    }
}

impl Drop for BatchTrace {
    fn drop(&mut self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

// === impl CallTrace ===

/// The span and audit record of one call. Methods take `&self` so that the
/// scheduler can note a decision while it holds the call shared; the record
/// moves out of its cell for the duration of each method (nothing
/// re-enters). Ended (and empty) after the terminal state.
#[derive(Default)]
pub struct CallTrace(Cell<Option<Box<CallSpan>>>);

struct CallSpan {
    /// The OpenTelemetry span, when tracing is on (boxed: a span is ~400
    /// bytes a call would hold for its life with tracing off).
    span: Option<Box<opentelemetry_sdk::trace::Span>>,
    audit: audit::CallAudit,
    metrics: Option<Arc<Metrics>>,
    /// The last state recorded, so that an internal re-entry of the same
    /// state (Validating while a prompt is prepared) is not a transition.
    state: &'static str,
    /// When the call's current prompt opened.
    prompt_since: Option<Instant>,
    /// The first policy decision; attributes are written at the end so that
    /// a later answer replaces an earlier one instead of repeating the key.
    decision: Option<&'static str>,
    /// The rule behind the decision, also for the AwaitingApproval event.
    rule: Option<String>,
    approval: Option<&'static str>,
    /// The principal whose Confirm answered the prompt.
    approved_by: Option<Arc<str>>,
}

/// How a call ended, for its span.
pub enum End<'a> {
    Success,
    Error {
        kind: &'static str,
        message: &'a str,
    },
    Cancelled {
        reason: &'a str,
    },
}

impl CallTrace {
    fn with(&self, f: impl FnOnce(&mut CallSpan)) {
        if let Some(mut inner) = self.0.take() {
            f(&mut inner);
            self.0.set(Some(inner));
        }
    }

    /// Records the event `state` unless it is the state already recorded.
    /// An `awaiting_approval` event carries the deciding rule. Logs the
    /// transition at DEBUG.
    pub fn state(&self, state: &'static str) {
        self.with(|c| {
            if c.state == state {
                return;
            }
            c.leave_prompt(state);
            c.count_executing(state);
            c.state = state;
            c.audit.state(state);
            let Some(span) = &mut c.span else {
                return;
            };
            let attributes = match (&c.rule, state) {
                (Some(rule), "awaiting_approval") => {
                    vec![KeyValue::new(keys::POLICY_RULE, rule.clone())]
                }
                _ => Vec::new(),
            };
            span.add_event(state, attributes);
        });
    }

    /// Notes a policy decision (`allow`, `deny`, `ask_user`) and its rule.
    /// The first one is the call's (and its audit line); a later `allow` of
    /// a call that was asked about means another prompt's "always" answer
    /// allowed it.
    pub fn decision(&self, decision: &'static str, rule: Option<&dyn std::fmt::Display>) {
        self.with(|c| match c.decision {
            None => {
                c.decision = Some(decision);
                c.rule = rule.map(ToString::to_string);
                c.audit.decided(decision, c.rule.as_deref());
            }
            Some("ask_user") if decision == "allow" => c.approval = Some("session_rule"),
            Some(_) => {}
        });
    }

    /// Notes the answer to the call's prompt and the principal who gave
    /// it.
    pub fn approval(&self, outcome: &'static str, by: Arc<str>) {
        self.with(|c| {
            c.approval = Some(outcome);
            c.approved_by = Some(by);
        });
    }

    /// Ends the span of a call cancelled before its batch started: one
    /// `cancelled` event, as the client saw.
    pub fn cancelled(&self, reason: &str) {
        self.end("cancelled", End::Cancelled { reason });
    }

    /// Records the terminal event `state`, the outcome's attributes, ends
    /// the span and writes the call's terminal audit line. Later calls do
    /// nothing.
    pub fn end(&self, state: &'static str, end: End<'_>) {
        let Some(mut c) = self.0.take() else {
            return;
        };
        c.leave_prompt(state);
        c.count_executing(state);
        if let Some(metrics) = &c.metrics {
            metrics.tenant_call_ended(c.audit.tenant(), state);
        }
        let error_type = match &end {
            End::Error { kind, .. } => Some(*kind),
            _ => None,
        };
        c.audit.ended(
            state,
            c.decision,
            c.rule.as_deref(),
            c.approval,
            c.approved_by.as_deref(),
            error_type,
        );
        let Some(mut span) = c.span.take() else {
            return;
        };
        span.add_event(state, Vec::new());
        span.set_attribute(KeyValue::new(keys::CALL_STATE, state));
        if let Some(decision) = c.decision {
            span.set_attribute(KeyValue::new(keys::POLICY_DECISION, decision));
        }
        if let Some(rule) = c.rule.take() {
            span.set_attribute(KeyValue::new(keys::POLICY_RULE, rule));
        }
        if let Some(approval) = c.approval {
            span.set_attribute(KeyValue::new(keys::APPROVAL_OUTCOME, approval));
        }
        match end {
            End::Success => span.set_status(Status::Ok),
            End::Error { kind, message } => {
                span.set_attribute(KeyValue::new(keys::ERROR_TYPE, kind));
                span.set_status(Status::error(message.to_string()));
            }
            End::Cancelled { reason } => {
                span.set_attribute(KeyValue::new(keys::CANCEL_REASON, reason.to_string()))
            }
        }
        span.end();
    }
}

impl CallSpan {
    /// Keeps the tenant's executing gauge: up on entering `executing`, down
    /// on leaving it.
    fn count_executing(&self, next: &'static str) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        match (self.state == "executing", next == "executing") {
            (false, true) => metrics.tenant_executing(self.audit.tenant(), 1),
            (true, false) => metrics.tenant_executing(self.audit.tenant(), -1),
            _ => {}
        }
    }

    /// On entering `next`: a prompt opens (awaiting_approval), or the open
    /// one closes, observing how long it waited and how it was answered
    /// (`unanswered`: timed out, or cancelled without an answer).
    fn leave_prompt(&mut self, next: &'static str) {
        match (self.prompt_since, next) {
            (None, "awaiting_approval") => self.prompt_since = Some(Instant::now()),
            (Some(_), "awaiting_approval") => {}
            (Some(since), _) => {
                self.prompt_since = None;
                if let Some(metrics) = &self.metrics {
                    let outcome = self.approval.unwrap_or("unanswered");
                    metrics.approval_answered(outcome, since.elapsed());
                }
            }
            (None, _) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An endpoint the exporter cannot use is refused at start with a
    /// message naming what was given (before anything is set up).
    #[test]
    fn endpoints_must_be_http_with_a_host_and_port() {
        for bad in [
            "127.0.0.1:4317",
            "ftp://127.0.0.1:4317",
            "https://collector:4317",
            "http://127.0.0.1:99999",
            "http://:4317",
            "not a uri",
        ] {
            match init(Some(bad)) {
                Err(TelemetryError::NotHttp { endpoint, .. }) => assert_eq!(endpoint, bad),
                other => panic!("{bad}: {:?}", other.map(|t| t.endpoint().map(String::from))),
            }
        }
        assert!(TRACER.get().is_none());
    }

    /// Without `init` (no exporter configured) no span is made: only the
    /// audit record, gone once the call ended.
    #[test]
    fn without_an_exporter_traces_are_empty() {
        assert!(TRACER.get().is_none());
        let batch = BatchTrace::start("s", "b", 1, true, &TraceParent::default());
        assert!(batch.cx.is_none());
        let request = CallRequest {
            id: "c".into(),
            name: "read_file".into(),
            args: Default::default(),
            wait_for_previous: false,
            client_initiated: false,
        };
        let call = batch.call(&request, None);
        let inner = call.0.take().unwrap();
        assert!(inner.span.is_none());
        call.0.set(Some(inner));
        call.state("validating");
        call.decision("deny", Some(&"rule 'x'"));
        call.approval("cancel", "alice".into());
        call.end(
            "error",
            End::Error {
                kind: "policy_violation",
                message: "no",
            },
        );
        let inner = call.0.take();
        assert!(inner.is_none());
    }

    /// A valid W3C traceparent is the batch's parent; one that does not
    /// parse (or none) leaves the batch a root.
    #[test]
    fn traceparent_headers_parse_per_w3c() {
        let parent = TraceParent::from_headers(
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            Some("vendor=x"),
        );
        let sc = parent.0.as_ref().unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(sc.trace_state().get("vendor"), Some("x"));
        for bad in [
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "nonsense",
        ] {
            assert!(
                !TraceParent::from_headers(Some(bad), None).is_set(),
                "{bad}"
            );
        }
        assert!(!TraceParent::from_headers(None, Some("vendor=x")).is_set());
    }

    #[test]
    fn http_endpoints_get_the_traces_path_unless_they_have_one() {
        assert_eq!(http_traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(http_traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            http_traces_url("http://c:4318/custom/traces"),
            "http://c:4318/custom/traces"
        );
    }
}
