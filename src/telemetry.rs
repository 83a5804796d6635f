//! Traces (DESIGN §8): one OpenTelemetry span per batch, the parent of one
//! span per call of the batch; a call's span carries one event per state
//! transition and ends with the call's terminal state. Spans go over
//! OTLP/gRPC to a collector when one is configured, and nowhere otherwise.
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
//! plain names. With no exporter configured both are empty and every method
//! returns at once: no span, no allocation.
//!
//! Not here: logs (`tracing` to stderr, set up in `main`) and metrics
//! (Prometheus, `scheduler::metrics`).

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

/// `service.name` when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "toolsched";

/// Longest the exit waits for the last spans to be exported: a collector that
/// is down must not hold the shutdown for the exporter's full retry budget.
pub const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Span attribute keys. Call id and tool name follow OpenTelemetry's GenAI
/// semantic conventions, the error kind its general `error.type`.
pub mod keys {
    pub const SESSION_ID: &str = "toolsched.session.id";
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
    /// The export speaks plain HTTP/2 only (no TLS built in).
    #[error(
        "OTLP endpoint '{endpoint}' (from {from}) must be an http:// URL with a host and port, e.g. http://127.0.0.1:4317 (OTLP over gRPC; TLS export is not built in)"
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
}

impl Telemetry {
    /// Where spans are exported, if anywhere (for the start-up log).
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
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
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, then `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn endpoint_from_env() -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
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
    let endpoint = given.or_else(endpoint_from_env);
    if disabled && let Some(endpoint) = &endpoint {
        tracing::info!(%endpoint, "tracing off: OTEL_SDK_DISABLED=true overrides the OTLP endpoint");
    }
    let Some(endpoint) = endpoint.filter(|_| !disabled) else {
        return Ok(Telemetry {
            provider: None,
            endpoint: None,
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
    let exporter = SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|source| TelemetryError::Exporter {
            endpoint: endpoint.clone(),
            source,
        })?;
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
    })
}

/// The SDK's resource (environment, `OTEL_RESOURCE_ATTRIBUTES`), named
/// [`DEFAULT_SERVICE_NAME`] unless the environment names the service.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        Resource::builder()
            .with_service_name(DEFAULT_SERVICE_NAME)
            .build()
    }
}

// === impl BatchTrace ===

/// The span of one batch (one ScheduleCalls stream), from its start to its
/// last call's end; ended when dropped. Empty when tracing is off.
#[derive(Default)]
pub struct BatchTrace(Option<BatchSpan>);

struct BatchSpan {
    /// Holds the span; the parent of the calls' spans.
    cx: Context,
    session_id: String,
    batch_id: String,
}

impl BatchTrace {
    /// Starts the span `batch` of `batch_id` in `session_id`, a batch of
    /// `calls` calls.
    pub fn start(session_id: &str, batch_id: &str, calls: usize, interactive: bool) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self(None);
        };
        // The scheduler keys sessions `<tenant>/<id>`; the span names the
        // client's id.
        let session_id = crate::tenant::TenantId::client_session_id(session_id);
        let span = tracer
            .span_builder("batch")
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new(keys::SESSION_ID, session_id.to_string()),
                KeyValue::new(keys::BATCH_ID, batch_id.to_string()),
                KeyValue::new(keys::BATCH_CALLS, calls as i64),
                KeyValue::new(keys::BATCH_INTERACTIVE, interactive),
            ])
            .start(tracer);
        Self(Some(BatchSpan {
            cx: Context::new().with_span(span),
            session_id: session_id.to_string(),
            batch_id: batch_id.to_string(),
        }))
    }

    /// Starts the span `tool_call {tool}` of call `call_id` as a child of
    /// this batch's span.
    pub fn call(&self, call_id: &str, tool: &str) -> CallTrace {
        let (Some(batch), Some(tracer)) = (&self.0, TRACER.get()) else {
            return CallTrace::default();
        };
        let span = tracer
            .span_builder(format!("tool_call {tool}"))
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new(keys::CALL_ID, call_id.to_string()),
                KeyValue::new(keys::TOOL_NAME, tool.to_string()),
                KeyValue::new(keys::SESSION_ID, batch.session_id.clone()),
                KeyValue::new(keys::BATCH_ID, batch.batch_id.clone()),
            ])
            .start_with_context(tracer, &batch.cx);
        CallTrace(Cell::new(Some(Box::new(CallSpan {
            span,
            state: "",
            decision: None,
            rule: None,
            approval: None,
        }))))
    }
}

impl Drop for BatchTrace {
    fn drop(&mut self) {
        if let Some(batch) = &self.0 {
            batch.cx.span().end();
        }
    }
}

// === impl CallTrace ===

/// The span of one call. Methods take `&self` so that the scheduler can
/// note a decision while it holds the call shared; the span moves out of
/// its cell for the duration of each method (nothing re-enters). Empty when
/// tracing is off.
#[derive(Default)]
pub struct CallTrace(Cell<Option<Box<CallSpan>>>);

struct CallSpan {
    span: opentelemetry_sdk::trace::Span,
    /// The last state recorded, so that an internal re-entry of the same
    /// state (Validating while a prompt is prepared) is not a transition.
    state: &'static str,
    /// The first policy decision; attributes are written at the end so that
    /// a later answer replaces an earlier one instead of repeating the key.
    decision: Option<&'static str>,
    /// The rule behind the decision, also for the AwaitingApproval event.
    rule: Option<String>,
    approval: Option<&'static str>,
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
    /// An `awaiting_approval` event carries the deciding rule.
    pub fn state(&self, state: &'static str) {
        self.with(|c| {
            if c.state == state {
                return;
            }
            c.state = state;
            let attributes = match (&c.rule, state) {
                (Some(rule), "awaiting_approval") => {
                    vec![KeyValue::new(keys::POLICY_RULE, rule.clone())]
                }
                _ => Vec::new(),
            };
            c.span.add_event(state, attributes);
        });
    }

    /// Notes a policy decision (`allow`, `deny`, `ask_user`) and its rule.
    /// The first one is the call's; a later `allow` of a call that was
    /// asked about means another prompt's "always" answer allowed it.
    /// `rule` is formatted only when tracing is on.
    pub fn decision(&self, decision: &'static str, rule: Option<&dyn std::fmt::Display>) {
        self.with(|c| match c.decision {
            None => {
                c.decision = Some(decision);
                c.rule = rule.map(ToString::to_string);
            }
            Some("ask_user") if decision == "allow" => c.approval = Some("session_rule"),
            Some(_) => {}
        });
    }

    /// Notes the answer to the call's prompt.
    pub fn approval(&self, outcome: &'static str) {
        self.with(|c| c.approval = Some(outcome));
    }

    /// Ends the span of a call cancelled before its batch started: one
    /// `cancelled` event, as the client saw.
    pub fn cancelled(&self, reason: &str) {
        self.end("cancelled", End::Cancelled { reason });
    }

    /// Records the terminal event `state`, the outcome's attributes, and ends
    /// the span. Later calls do nothing.
    pub fn end(&self, state: &'static str, end: End<'_>) {
        let Some(mut c) = self.0.take() else {
            return;
        };
        c.span.add_event(state, Vec::new());
        c.span.set_attribute(KeyValue::new(keys::CALL_STATE, state));
        if let Some(decision) = c.decision {
            c.span
                .set_attribute(KeyValue::new(keys::POLICY_DECISION, decision));
        }
        if let Some(rule) = c.rule.take() {
            c.span.set_attribute(KeyValue::new(keys::POLICY_RULE, rule));
        }
        if let Some(approval) = c.approval {
            c.span
                .set_attribute(KeyValue::new(keys::APPROVAL_OUTCOME, approval));
        }
        match end {
            End::Success => c.span.set_status(Status::Ok),
            End::Error { kind, message } => {
                c.span.set_attribute(KeyValue::new(keys::ERROR_TYPE, kind));
                c.span.set_status(Status::error(message.to_string()));
            }
            End::Cancelled { reason } => c
                .span
                .set_attribute(KeyValue::new(keys::CANCEL_REASON, reason.to_string())),
        }
        c.span.end();
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

    /// Without `init` (no exporter configured) nothing is recorded: the
    /// traces are empty and every method returns at once.
    #[test]
    fn without_an_exporter_traces_are_empty() {
        assert!(TRACER.get().is_none());
        let batch = BatchTrace::start("s", "b", 1, true);
        assert!(batch.0.is_none());
        let call = batch.call("c", "read_file");
        call.state("validating");
        call.decision("deny", Some(&"rule 'x'"));
        call.approval("cancel");
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
}
