//! Scheduler metrics in the Prometheus text format: calls by tool and
//! outcome, execution latency, open prompts, queued batches, live sessions.
//! The values are atomics inside the `prometheus` types; nothing is locked on
//! the scheduling path.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

use super::events::StateUpdate;

/// Label used for calls to names that are not registered, so that clients
/// cannot grow the label set without bound.
pub const UNREGISTERED_TOOL: &str = "(unregistered)";

/// The scheduler's metrics.
pub struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    duration: HistogramVec,
    batches: IntCounter,
    pub(crate) queued_batches: IntGauge,
    pub(crate) sessions: IntGauge,
    pub(crate) prompts_open: IntGauge,
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("toolsched".into()), None)?;
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
        let batches = IntCounter::new("batches_total", "Batches accepted")?;
        let queued_batches = IntGauge::new(
            "batches_queued",
            "Batches waiting behind another batch of their session",
        )?;
        let sessions = IntGauge::new("sessions", "Live sessions")?;
        let prompts_open = IntGauge::new("prompts_open", "Calls awaiting approval")?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(batches.clone()))?;
        registry.register(Box::new(queued_batches.clone()))?;
        registry.register(Box::new(sessions.clone()))?;
        registry.register(Box::new(prompts_open.clone()))?;
        Ok(Self {
            registry,
            calls,
            duration,
            batches,
            queued_batches,
            sessions,
            prompts_open,
        })
    }

    /// Everything in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// A prompt closed after `wait`: answered with `outcome`, or
    /// `unanswered`.
    pub(crate) fn approval_answered(&self, outcome: &str, wait: std::time::Duration) {
        let _ = (outcome, wait);
    }

    pub(crate) fn batch_accepted(&self) {
        self.batches.inc();
    }

    /// Counts a terminal state of a call to `tool` (`None`: not registered).
    pub(crate) fn call_finished(&self, tool: Option<&str>, update: &StateUpdate) {
        let tool = tool.unwrap_or(UNREGISTERED_TOOL);
        let (outcome, error_type) = match update {
            StateUpdate::Success { duration, .. } => {
                self.duration
                    .with_label_values(&[tool])
                    .observe(duration.as_secs_f64());
                ("success", "")
            }
            StateUpdate::Error { kind, .. } => ("error", kind.as_str()),
            StateUpdate::Cancelled { .. } => ("cancelled", ""),
            _ => return,
        };
        self.calls
            .with_label_values(&[tool, outcome, error_type])
            .inc();
    }
}
