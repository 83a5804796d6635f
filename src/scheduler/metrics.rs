//! The service's metrics in the Prometheus text format: calls by tool and
//! outcome, execution latency, open prompts and how long they wait, queued
//! batches, live sessions, sandbox denials, events lagging clients lost, the
//! gRPC server's requests (fed by `api::metrics`), MCP servers' state (read
//! at scrape time), build info and the process (CPU, memory, fds, start
//! time). The values are atomics inside the `prometheus` types; nothing is
//! locked on the scheduling path. The README's Metrics table lists every
//! family; the HELP texts here are the same words.

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus::core::Collector as _;
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use super::call::Terminal;
use crate::tools::ErrorKind;
use crate::tools::mcp::McpServerStatus;

/// Label used for calls to names that are not registered, so that clients
/// cannot grow the label set without bound.
pub const UNREGISTERED_TOOL: &str = "(unregistered)";

/// Buckets of the approval wait, in seconds: a person answers in seconds to
/// minutes; the default confirmation timeout is 600 s.
const APPROVAL_WAIT_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// Buckets of gRPC handling time, in seconds: unary calls take
/// milliseconds, a ScheduleCalls stream lasts as long as its batch.
const GRPC_HANDLING_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 1800.0,
];

/// The scheduler's metrics.
pub struct Metrics {
    registry: Registry,
    /// `process_*`, without our prefix (the names every dashboard knows).
    process: Registry,
    calls: IntCounterVec,
    duration: HistogramVec,
    batches: IntCounter,
    pub(crate) queued_batches: IntGauge,
    pub(crate) sessions: IntGauge,
    /// Sessions whose actor runs (the others are idle: their settings are
    /// kept as data, without a task).
    pub(crate) session_actors: IntGauge,
    pub(crate) prompts_open: IntGauge,
    approval_wait: HistogramVec,
    sandbox_denials: IntCounterVec,
    events_lagged: IntCounterVec,
    grpc_requests: IntCounterVec,
    grpc_handling: HistogramVec,
    /// By tenant: a tenant is a configured (or JWT-named) customer, a
    /// bounded set; the principal is not a label (one per user).
    tenant_calls: IntCounterVec,
    tenant_executing: IntGaugeVec,
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("toolsched".into()), None)?;
        let process = Registry::new();
        #[cfg(target_os = "linux")]
        process.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        let build_info = IntGaugeVec::new(
            Opts::new(
                "build_info",
                "Always 1; the labels name the build: version, os, arch",
            ),
            &["version", "os", "arch"],
        )?;
        build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
            ])
            .set(1);
        let approval_wait = HistogramVec::new(
            HistogramOpts::new(
                "approval_wait_seconds",
                "Time from an approval prompt to its answer, by outcome (the answer, session_rule, or unanswered: timed out or cancelled)",
            )
            .buckets(APPROVAL_WAIT_BUCKETS.to_vec()),
            &["outcome"],
        )?;
        let sandbox_denials = IntCounterVec::new(
            Opts::new(
                "sandbox_denials_total",
                "Commands that ended sandbox_denied, by kind (filesystem, syscall, processes, network, setup)",
            ),
            &["kind"],
        )?;
        let events_lagged = IntCounterVec::new(
            Opts::new(
                "events_lagged_total",
                "Progress reports not delivered one by one because their reader lagged (the client reading the stream, or the session behind a tool reporting faster than it handles), by action (`merged` into a later report; `dropped` is reserved and stays 0: nothing else is ever dropped)",
            ),
            &["action"],
        )?;
        let grpc_requests = IntCounterVec::new(
            Opts::new(
                "grpc_server_handled_total",
                "gRPC requests completed, by method and status code (a stream counts when it ends)",
            ),
            &["method", "code"],
        )?;
        let grpc_handling = HistogramVec::new(
            HistogramOpts::new(
                "grpc_server_handling_seconds",
                "Time from a gRPC request's arrival to its status (a stream's end), by method",
            )
            .buckets(GRPC_HANDLING_BUCKETS.to_vec()),
            &["method"],
        )?;
        let calls = IntCounterVec::new(
            Opts::new(
                "calls_total",
                "Calls that reached a terminal state, by tool, outcome (success, error, cancelled) and error type",
            ),
            &["tool", "outcome", "error_type"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "call_execution_seconds",
                "Execution time of calls that ran, by tool",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0, 300.0,
            ]),
            &["tool"],
        )?;
        let tenant_calls = IntCounterVec::new(
            Opts::new(
                "tenant_calls_total",
                "Calls that reached a terminal state, by tenant and outcome (success, error, cancelled)",
            ),
            &["tenant", "outcome"],
        )?;
        let tenant_executing = IntGaugeVec::new(
            Opts::new("tenant_calls_executing", "Calls executing now, by tenant"),
            &["tenant"],
        )?;
        let batches = IntCounter::new("batches_total", "Batches accepted")?;
        let queued_batches = IntGauge::new(
            "batches_queued",
            "Batches waiting behind another batch of their session",
        )?;
        let sessions = IntGauge::new("sessions", "Live sessions")?;
        let session_actors = IntGauge::new(
            "session_actors",
            "Live sessions whose actor task runs (the rest are idle, kept as data)",
        )?;
        let prompts_open = IntGauge::new("prompts_open", "Calls awaiting approval")?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(batches.clone()))?;
        registry.register(Box::new(queued_batches.clone()))?;
        registry.register(Box::new(sessions.clone()))?;
        registry.register(Box::new(session_actors.clone()))?;
        registry.register(Box::new(prompts_open.clone()))?;
        registry.register(Box::new(build_info))?;
        registry.register(Box::new(approval_wait.clone()))?;
        registry.register(Box::new(sandbox_denials.clone()))?;
        registry.register(Box::new(events_lagged.clone()))?;
        registry.register(Box::new(grpc_requests.clone()))?;
        registry.register(Box::new(grpc_handling.clone()))?;
        registry.register(Box::new(tenant_calls.clone()))?;
        registry.register(Box::new(tenant_executing.clone()))?;
        // Known label values start at zero, so that a rate() over them
        // exists before the first event.
        for kind in DENIAL_KINDS {
            sandbox_denials.with_label_values(&[kind]);
        }
        for action in ["merged", "dropped"] {
            events_lagged.with_label_values(&[action]);
        }
        Ok(Self {
            registry,
            process,
            calls,
            duration,
            batches,
            queued_batches,
            sessions,
            session_actors,
            prompts_open,
            approval_wait,
            sandbox_denials,
            events_lagged,
            grpc_requests,
            grpc_handling,
            tenant_calls,
            tenant_executing,
        })
    }

    /// Everything in the Prometheus text exposition format, with the state
    /// of the configured MCP servers (`mcp`, by name) as of now.
    pub fn render(&self, mcp: &BTreeMap<String, McpServerStatus>) -> String {
        let mut families = self.registry.gather();
        families.extend(self.process.gather());
        families.extend(mcp_families(mcp));
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&families, &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// A gRPC request to `method` (a bounded label: see `api::metrics`)
    /// ended with `code` after `elapsed`.
    /// Live sessions whose actor task runs now (for tests and diagnostics;
    /// also `toolsched_session_actors`).
    pub fn session_actors(&self) -> i64 {
        self.session_actors.get()
    }

    pub fn grpc_handled(&self, method: &str, code: &str, elapsed: Duration) {
        self.grpc_requests.with_label_values(&[method, code]).inc();
        self.grpc_handling
            .with_label_values(&[method])
            .observe(elapsed.as_secs_f64());
    }

    /// `n` events a lagging reader did not get one by one: `merged` into a
    /// later event, or `dropped`. For the event log's fan-out to count.
    pub fn events_lagged(&self, action: LagAction, n: u64) {
        let action = match action {
            LagAction::Merged => "merged",
            LagAction::Dropped => "dropped",
        };
        self.events_lagged.with_label_values(&[action]).inc_by(n);
    }

    /// A prompt closed after `wait`: answered with `outcome`, or
    /// `unanswered`.
    pub(crate) fn approval_answered(&self, outcome: &str, wait: Duration) {
        self.approval_wait
            .with_label_values(&[outcome])
            .observe(wait.as_secs_f64());
    }

    /// A call of `tenant` reached the terminal `state`.
    pub(crate) fn tenant_call_ended(&self, tenant: &str, state: &str) {
        self.tenant_calls.with_label_values(&[tenant, state]).inc();
    }

    /// A call of `tenant` entered (`1`) or left (`-1`) Executing.
    pub(crate) fn tenant_executing(&self, tenant: &str, delta: i64) {
        self.tenant_executing
            .with_label_values(&[tenant])
            .add(delta);
    }

    pub(crate) fn batch_accepted(&self) {
        self.batches.inc();
    }

    /// Counts a terminal state of a call to `tool` (`None`: not registered).
    pub(crate) fn call_finished(&self, tool: Option<&str>, terminal: &Terminal) {
        let tool = tool.unwrap_or(UNREGISTERED_TOOL);
        let (outcome, error_type) = match terminal {
            Terminal::Success { duration, .. } => {
                self.duration
                    .with_label_values(&[tool])
                    .observe(duration.as_secs_f64());
                ("success", "")
            }
            Terminal::Error { kind, message, .. } => {
                if *kind == ErrorKind::SandboxDenied {
                    self.sandbox_denials
                        .with_label_values(&[denial_kind(message)])
                        .inc();
                }
                ("error", kind.as_str())
            }
            Terminal::Cancelled { .. } => ("cancelled", ""),
        };
        self.calls
            .with_label_values(&[tool, outcome, error_type])
            .inc();
    }
}

/// What a lagging reader lost (see [`Metrics::events_lagged`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagAction {
    Merged,
    Dropped,
}

/// The `kind` label values of `toolsched_sandbox_denials_total`.
const DENIAL_KINDS: [&str; 5] = ["filesystem", "syscall", "processes", "network", "setup"];

/// The kind of a sandbox denial, from the message the shell tool writes
/// (`sandbox::process` classifies a failed command by the refusal its output
/// shows; the message quotes that line): Landlock's EACCES/EROFS are
/// `filesystem`, seccomp's EPERM `syscall`, the process limit's EAGAIN
/// `processes`, a failed connection or lookup `network`, a sandbox that
/// could not be set up `setup`.
fn denial_kind(message: &str) -> &'static str {
    if message.starts_with("The sandbox could not be set up") {
        "setup"
    } else if message.contains("Resource temporarily unavailable") {
        "processes"
    } else if message.contains("Permission denied") || message.contains("Read-only file system") {
        "filesystem"
    } else if message.contains("Operation not permitted") {
        "syscall"
    } else {
        "network"
    }
}

/// `toolsched_mcp_server_state{server,state}` (1 for the current state, 0
/// for the others) and `toolsched_mcp_server_restarts_total{server}`, from
/// the servers' statuses at scrape time.
fn mcp_families(mcp: &BTreeMap<String, McpServerStatus>) -> Vec<MetricFamily> {
    let build = || -> Result<Vec<MetricFamily>, prometheus::Error> {
        let state = IntGaugeVec::new(
            Opts::new(
                "toolsched_mcp_server_state",
                "MCP server connection state (starting, ready, failed): 1 for the current one",
            ),
            &["server", "state"],
        )?;
        let restarts = IntCounterVec::new(
            Opts::new(
                "toolsched_mcp_server_restarts_total",
                "Connection failures of an MCP server since start-up (each followed by a restart)",
            ),
            &["server"],
        )?;
        for (name, status) in mcp {
            let (current, count) = match status {
                McpServerStatus::Starting => ("starting", 0),
                McpServerStatus::Ready { restarts, .. } => ("ready", *restarts),
                McpServerStatus::Failed { restarts, .. } => ("failed", *restarts),
            };
            for s in ["starting", "ready", "failed"] {
                state
                    .with_label_values(&[name.as_str(), s])
                    .set(i64::from(s == current));
            }
            restarts
                .with_label_values(&[name.as_str()])
                .inc_by(u64::from(count));
        }
        let mut families = state.collect();
        families.extend(restarts.collect());
        Ok(families)
    };
    match build() {
        Ok(families) if !mcp.is_empty() => families,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One-hot state and the restart count of each server, as of the
    /// scrape; nothing without servers.
    #[test]
    fn mcp_servers_are_read_at_scrape_time() {
        let metrics = Metrics::new().unwrap();
        assert!(!metrics.render(&BTreeMap::new()).contains("mcp_server"));
        let statuses = BTreeMap::from([
            (
                "db".to_string(),
                McpServerStatus::Ready {
                    tools: 3,
                    restarts: 2,
                },
            ),
            (
                "fs".to_string(),
                McpServerStatus::Failed {
                    reason: "exit 1".into(),
                    restarts: 5,
                },
            ),
            ("new".to_string(), McpServerStatus::Starting),
        ]);
        let text = metrics.render(&statuses);
        for line in [
            r#"toolsched_mcp_server_state{server="db",state="ready"} 1"#,
            r#"toolsched_mcp_server_state{server="db",state="failed"} 0"#,
            r#"toolsched_mcp_server_state{server="fs",state="failed"} 1"#,
            r#"toolsched_mcp_server_state{server="fs",state="ready"} 0"#,
            r#"toolsched_mcp_server_state{server="new",state="starting"} 1"#,
            r#"toolsched_mcp_server_restarts_total{server="db"} 2"#,
            r#"toolsched_mcp_server_restarts_total{server="fs"} 5"#,
            r#"toolsched_mcp_server_restarts_total{server="new"} 0"#,
            "# HELP toolsched_mcp_server_state MCP server connection state (starting, ready, failed): 1 for the current one",
            "# HELP toolsched_mcp_server_restarts_total Connection failures of an MCP server since start-up (each followed by a restart)",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
        let readme = include_str!("../../README.md");
        assert!(readme.contains("| `toolsched_mcp_server_state` | `server`, `state` | MCP server connection state (starting, ready, failed): 1 for the current one |"));
        assert!(readme.contains("| `toolsched_mcp_server_restarts_total` | `server` | Connection failures of an MCP server since start-up (each followed by a restart) |"));
    }

    #[test]
    fn lagged_events_are_counted_by_action() {
        let metrics = Metrics::new().unwrap();
        metrics.events_lagged(LagAction::Merged, 3);
        metrics.events_lagged(LagAction::Dropped, 1);
        let text = metrics.render(&BTreeMap::new());
        assert!(text.contains("toolsched_events_lagged_total{action=\"merged\"} 3"));
        assert!(text.contains("toolsched_events_lagged_total{action=\"dropped\"} 1"));
    }

    #[test]
    fn denial_kinds_follow_the_refusal_in_the_message() {
        let msg = |evidence: &str| {
            format!(
                "The sandbox (workspace_write) refused an operation of this command (exit code 1): {evidence}. At this level commands may …"
            )
        };
        assert_eq!(
            denial_kind(&msg("bash: /etc/x: Permission denied")),
            "filesystem"
        );
        assert_eq!(
            denial_kind(&msg("touch: cannot touch 'x': Read-only file system")),
            "filesystem"
        );
        assert_eq!(
            denial_kind(&msg("ping: socket: Operation not permitted")),
            "syscall"
        );
        assert_eq!(
            denial_kind(&msg("bash: fork: Resource temporarily unavailable")),
            "processes"
        );
        assert_eq!(
            denial_kind(&msg("curl: (6) Could not resolve host: x")),
            "network"
        );
        assert_eq!(
            denial_kind("The sandbox could not be set up, so the command did not run: x"),
            "setup"
        );
    }
}
