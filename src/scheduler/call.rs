//! One call's state machine.
//!
//! Owns: [`CallState`] and the transitions of DESIGN §3 (Validating →
//! Scheduled | AwaitingApproval | Error | Cancelled; AwaitingApproval →
//! Scheduled | AwaitingApproval | Cancelled; Scheduled → Executing |
//! Cancelled; Executing → Success | Error | Cancelled). Each transition of a
//! [`CallSlot`] returns the [`StateUpdate`] to send, so a state and what the
//! client is told cannot drift apart; a refused transition returns `None`.
//! Terminal states never change. The slot also keeps the call's trace span
//! and the per-call metrics (terminal counters, open-prompt gauge) in step
//! with its state.
//!
//! Not here: when a transition happens (the batch engine, `batch.rs`), what
//! a tool does (`tools`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::Metrics;
use super::events::{
    CallEnd, CallRequest, CallSummary, ConfirmationOutcome, FunctionResponse, StateUpdate,
    exit_code,
};
use crate::policy::{Decision, DecisionSource};
use crate::tools::{Args, ConfirmationDetails, ErrorKind, Invocation, Progress, Tool};

/// How a call ended: what the client was told, and nothing else.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Terminal {
    Success {
        response: FunctionResponse,
        result: Args,
        duration: Duration,
    },
    Error {
        kind: ErrorKind,
        message: String,
        response: FunctionResponse,
    },
    Cancelled {
        reason: String,
        response: FunctionResponse,
    },
}

impl Terminal {
    /// A cancellation of `request` with `reason`, keeping partial output.
    pub fn cancelled(request: &CallRequest, reason: &str, partial_output: Option<&str>) -> Self {
        Self::Cancelled {
            reason: reason.to_string(),
            response: FunctionResponse::cancelled(
                &request.id,
                &request.name,
                reason,
                partial_output,
            ),
        }
    }

    /// An error of `request`.
    pub fn error(
        request: &CallRequest,
        kind: ErrorKind,
        message: &str,
        partial_output: Option<&str>,
    ) -> Self {
        Self::Error {
            kind,
            message: message.to_string(),
            response: FunctionResponse::error(&request.id, &request.name, message, partial_output),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Success { .. } => "success",
            Self::Error { .. } => "error",
            Self::Cancelled { .. } => "cancelled",
        }
    }

    pub fn response(&self) -> &FunctionResponse {
        match self {
            Self::Success { response, .. }
            | Self::Error { response, .. }
            | Self::Cancelled { response, .. } => response,
        }
    }

    /// The end in the form a durable store keeps (JSON), for a replica
    /// taking the batch over ([`Terminal::decode`]).
    pub fn encode(&self) -> Vec<u8> {
        let (state, response) = (self.name(), self.response());
        let mut v = serde_json::json!({
            "state": state,
            "id": response.id,
            "name": response.name,
            "response": &*response.response,
        });
        match self {
            Self::Success {
                result, duration, ..
            } => {
                v["result"] = serde_json::Value::Object(result.clone());
                v["duration_ms"] = (duration.as_secs_f64() * 1000.0).into();
            }
            Self::Error { kind, message, .. } => {
                v["kind"] = kind.as_str().into();
                v["message"] = message.clone().into();
            }
            Self::Cancelled { reason, .. } => v["reason"] = reason.clone().into(),
        }
        serde_json::to_vec(&v).unwrap_or_default()
    }

    /// An end recorded by [`Terminal::encode`]; `None` when it cannot be
    /// read (the call then ends `outcome_unknown`).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Recorded {
            state: String,
            id: String,
            name: String,
            response: Args,
            #[serde(default)]
            result: Args,
            #[serde(default)]
            duration_ms: f64,
            kind: Option<String>,
            message: Option<String>,
            reason: Option<String>,
        }
        let r: Recorded = serde_json::from_slice(bytes).ok()?;
        let response = FunctionResponse {
            id: r.id,
            name: r.name,
            response: Arc::new(r.response),
        };
        Some(match r.state.as_str() {
            "success" => Self::Success {
                response,
                result: r.result,
                duration: Duration::try_from_secs_f64(r.duration_ms / 1000.0).unwrap_or_default(),
            },
            "error" => Self::Error {
                kind: ErrorKind::from_name(r.kind.as_deref()?)?,
                message: r.message?,
                response,
            },
            "cancelled" => Self::Cancelled {
                reason: r.reason?,
                response,
            },
            _ => return None,
        })
    }

    /// The end as a call summary tells it (no copy of the response).
    pub fn end(&self) -> CallEnd {
        match self {
            Self::Success { result, .. } => CallEnd::Success {
                exit_code: exit_code(result),
            },
            Self::Error { kind, message, .. } => CallEnd::Error {
                kind: *kind,
                message: message.clone(),
            },
            Self::Cancelled { reason, .. } => CallEnd::Cancelled {
                reason: reason.clone(),
            },
        }
    }

    /// The update that tells the client.
    pub fn update(&self) -> StateUpdate {
        match self.clone() {
            Self::Success {
                response,
                result,
                duration,
            } => StateUpdate::Success {
                response,
                result,
                duration,
            },
            Self::Error {
                kind,
                message,
                response,
            } => StateUpdate::Error {
                kind,
                message,
                response,
            },
            Self::Cancelled { reason, response } => StateUpdate::Cancelled { reason, response },
        }
    }
}

/// A call's state; each variant carries only what is valid in it.
pub(crate) enum CallState {
    /// Arguments passed the schema; the policy decides in the call's wave.
    Validating { invocation: Arc<dyn Invocation> },
    /// The policy asked; the prompt's details (a diff, say) are being built
    /// off the runtime. The client still sees Validating (or the previous
    /// AwaitingApproval, for a re-prompt).
    PreparingPrompt { invocation: Arc<dyn Invocation> },
    /// Waits for Confirm with this correlation id.
    AwaitingApproval {
        invocation: Arc<dyn Invocation>,
        correlation_id: String,
        outcomes: Vec<ConfirmationOutcome>,
    },
    /// Approved; waits for the rest of its wave.
    Scheduled { invocation: Arc<dyn Invocation> },
    /// Running; `token` stops the tool.
    Executing {
        started: Instant,
        token: CancellationToken,
    },
    /// Running, and asked to stop: the call ends Cancelled with `reason`
    /// when its tool has stopped (or the cancel guard fires).
    Cancelling { reason: String },
    /// Terminal.
    Done(Terminal),
}

impl CallState {
    /// The state's name, for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Validating { .. } => "validating",
            Self::PreparingPrompt { .. } => "preparing_prompt",
            Self::Scheduled { .. } => "scheduled",
            Self::AwaitingApproval { .. } => "awaiting_approval",
            Self::Executing { .. } => "executing",
            Self::Cancelling { .. } => "cancelling",
            Self::Done(t) => t.name(),
        }
    }

    /// The state as the client sees it (and the trace records it): the
    /// internal states show as the reported state they sit in.
    fn reported_name(&self) -> &'static str {
        match self {
            Self::PreparingPrompt { .. } => "validating",
            Self::Cancelling { .. } => "executing",
            other => other.name(),
        }
    }

    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self, Self::Done(_))
    }
}

/// A call of a batch.
pub(crate) struct CallSlot {
    pub request: CallRequest,
    pub tool: Option<Arc<dyn Tool>>,
    pub state: CallState,
    /// The call's span (empty when tracing is off).
    pub trace: crate::telemetry::CallTrace,
    metrics: Arc<Metrics>,
    /// How long it was Executing, set when it left that state (zero until
    /// then, and for a call that never executed).
    ran_for: Duration,
    /// When it started executing.
    started: Option<Instant>,
    /// The arguments the person changed at the prompt (their names and
    /// new values), empty when the call runs as the model proposed it.
    user_modified: Vec<(String, serde_json::Value)>,
}

impl CallSlot {
    /// A call created Validating (its invocation built) or, when it could
    /// not be built, directly in Error. Returns the slot and its first
    /// update.
    pub fn new(
        request: CallRequest,
        tool: Option<Arc<dyn Tool>>,
        built: Result<Arc<dyn Invocation>, (ErrorKind, String)>,
        trace: crate::telemetry::CallTrace,
        metrics: Arc<Metrics>,
    ) -> (Self, StateUpdate) {
        let (state, update) = match built {
            Ok(invocation) => (
                CallState::Validating { invocation },
                StateUpdate::Validating {
                    args: request.args.clone(),
                },
            ),
            Err((kind, message)) => {
                let t = Terminal::error(&request, kind, &message, None);
                let update = t.update();
                (CallState::Done(t), update)
            }
        };
        (
            Self::with_state(request, tool, state, trace, metrics),
            update,
        )
    }

    /// A call that starts in the end its stopped replica recorded (a batch
    /// taken over): it keeps that result and never runs.
    pub fn ended(
        request: CallRequest,
        tool: Option<Arc<dyn Tool>>,
        end: Terminal,
        trace: crate::telemetry::CallTrace,
        metrics: Arc<Metrics>,
    ) -> (Self, StateUpdate) {
        let update = end.update();
        (
            Self::with_state(request, tool, CallState::Done(end), trace, metrics),
            update,
        )
    }

    fn with_state(
        request: CallRequest,
        tool: Option<Arc<dyn Tool>>,
        state: CallState,
        trace: crate::telemetry::CallTrace,
        metrics: Arc<Metrics>,
    ) -> Self {
        let slot = Self {
            request,
            tool,
            state,
            trace,
            metrics,
            ran_for: Duration::ZERO,
            started: None,
            user_modified: Vec::new(),
        };
        slot.trace_state();
        if let CallState::Done(t) = &slot.state {
            slot.count_terminal(t);
        }
        slot
    }

    /// The tool's registered name, for metrics.
    fn tool_name(&self) -> Option<&str> {
        self.tool.as_ref().map(|t| t.declaration().name.as_str())
    }

    fn count_terminal(&self, t: &Terminal) {
        self.metrics.call_finished(self.tool_name(), t);
    }

    /// Moves to `next` if DESIGN §3 (with the internal states) allows it;
    /// returns whether it did.
    fn set(&mut self, next: CallState) -> bool {
        use CallState as S;
        use Terminal as T;
        let ok = matches!(
            (&self.state, &next),
            (
                S::Validating { .. },
                S::PreparingPrompt { .. }
                    | S::Scheduled { .. }
                    | S::Done(T::Error { .. } | T::Cancelled { .. })
            ) | (
                S::PreparingPrompt { .. },
                S::AwaitingApproval { .. } | S::Done(T::Error { .. } | T::Cancelled { .. })
            ) | (
                S::AwaitingApproval { .. },
                S::PreparingPrompt { .. } | S::Scheduled { .. } | S::Done(T::Cancelled { .. })
            ) | (
                S::Scheduled { .. },
                S::Executing { .. } | S::Done(T::Cancelled { .. })
            ) | (S::Executing { .. }, S::Cancelling { .. } | S::Done(_))
                | (S::Cancelling { .. }, S::Done(T::Cancelled { .. }))
        );
        if !ok {
            tracing::error!(
                call_id = %self.request.id,
                from = self.state.name(),
                to = next.name(),
                "refused an invalid call state transition"
            );
            return false;
        }
        if let S::Executing { started, .. } = &next {
            self.started = Some(*started);
        }
        if let (Some(started), S::Done(_)) = (self.started, &next) {
            self.ran_for = started.elapsed();
        }
        let was_prompt = matches!(self.state, S::AwaitingApproval { .. });
        let is_prompt = matches!(next, S::AwaitingApproval { .. });
        self.state = next;
        tracing::debug!(
            call_id = %self.request.id,
            tool = %self.request.name,
            state = self.state.name(),
            "call state"
        );
        match (was_prompt, is_prompt) {
            (true, false) => self.metrics.prompts_open.dec(),
            (false, true) => self.metrics.prompts_open.inc(),
            _ => {}
        }
        self.trace_state();
        if let S::Done(t) = &self.state {
            self.count_terminal(t);
        }
        true
    }

    /// Validating or AwaitingApproval → Scheduled with `invocation`.
    pub fn schedule(&mut self, invocation: Arc<dyn Invocation>) -> Option<StateUpdate> {
        let args = (!self.user_modified.is_empty()).then(|| self.request.args.clone());
        self.set(CallState::Scheduled { invocation })
            .then_some(StateUpdate::Scheduled { args })
    }

    /// The person replaced the call's arguments with `args` at its prompt:
    /// remembers which ones changed, for the Scheduled event and the
    /// function response.
    pub fn modify(&mut self, args: Args) {
        for (name, value) in &args {
            if self.request.args.get(name) != Some(value) {
                match self.user_modified.iter_mut().find(|(n, _)| n == name) {
                    Some(entry) => entry.1 = value.clone(),
                    None => self.user_modified.push((name.clone(), value.clone())),
                }
            }
        }
        self.request.args = Arc::new(args);
    }

    /// What the model is told about the person's changes, if any (as
    /// Gemini CLI tells it: which argument, and what it is now).
    pub fn modification_note(&self) -> Option<String> {
        if self.user_modified.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .user_modified
            .iter()
            .map(|(name, value)| {
                let value = match value {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                format!("The user modified the `{name}` to be:\n{value}")
            })
            .collect();
        Some(parts.join("\n\n"))
    }

    /// Validating or AwaitingApproval → PreparingPrompt: nothing to tell
    /// until the prompt is ready. Returns whether it moved.
    pub fn prepare_prompt(&mut self, invocation: Arc<dyn Invocation>) -> bool {
        self.set(CallState::PreparingPrompt { invocation })
    }

    /// PreparingPrompt → AwaitingApproval with a fresh `correlation_id`.
    pub fn await_approval(&mut self, prompt: Prompt) -> Option<StateUpdate> {
        let CallState::PreparingPrompt { invocation } = &self.state else {
            return None;
        };
        let invocation = invocation.clone();
        let Prompt {
            correlation_id,
            details,
            outcomes,
            deadline,
            reason,
            policy_rule,
        } = prompt;
        self.set(CallState::AwaitingApproval {
            invocation,
            correlation_id: correlation_id.clone(),
            outcomes: outcomes.clone(),
        })
        .then_some(StateUpdate::AwaitingApproval {
            correlation_id,
            details,
            outcomes,
            deadline,
            reason,
            policy_rule: policy_rule.map(Box::new),
        })
    }

    /// Scheduled → Executing under `token`; returns the invocation to run
    /// and the update.
    pub fn execute(
        &mut self,
        token: CancellationToken,
    ) -> Option<(Arc<dyn Invocation>, StateUpdate)> {
        let CallState::Scheduled { invocation } = &self.state else {
            return None;
        };
        let invocation = invocation.clone();
        self.set(CallState::Executing {
            started: Instant::now(),
            token,
        })
        .then_some((invocation, StateUpdate::Executing(None)))
    }

    /// Executing → Cancelling: stops the tool. Nothing is told until it has
    /// stopped. Returns whether it moved (false when already cancelling).
    pub fn cancelling(&mut self, reason: &str) -> bool {
        let CallState::Executing { token, .. } = &self.state else {
            return false;
        };
        let token = token.clone();
        let moved = self.set(CallState::Cancelling {
            reason: reason.to_string(),
        });
        token.cancel();
        moved
    }

    /// A progress report while Executing (not while Cancelling: a call
    /// being stopped reports nothing more).
    pub fn progress(&self, progress: Progress) -> Option<StateUpdate> {
        matches!(self.state, CallState::Executing { .. })
            .then_some(StateUpdate::Executing(Some(progress)))
    }

    /// Ends the call in `terminal`, once.
    pub fn finish(&mut self, terminal: Terminal) -> Option<StateUpdate> {
        let update = terminal.update();
        self.set(CallState::Done(terminal)).then_some(update)
    }

    /// Ends the call Cancelled with `reason`.
    pub fn cancel(&mut self, reason: &str, partial_output: Option<&str>) -> Option<StateUpdate> {
        let t = Terminal::cancelled(&self.request, reason, partial_output);
        self.finish(t)
    }

    /// Ends the call in Error.
    pub fn fail(
        &mut self,
        kind: ErrorKind,
        message: &str,
        partial_output: Option<&str>,
    ) -> Option<StateUpdate> {
        let t = Terminal::error(&self.request, kind, message, partial_output);
        self.finish(t)
    }

    /// Records the current state on the call's span; a terminal one ends it.
    fn trace_state(&self) {
        use crate::telemetry::End;
        match &self.state {
            CallState::Done(Terminal::Success { .. }) => self.trace.end("success", End::Success),
            CallState::Done(Terminal::Error { kind, message, .. }) => self.trace.end(
                "error",
                End::Error {
                    kind: kind.as_str(),
                    message,
                },
            ),
            CallState::Done(Terminal::Cancelled { reason, .. }) => {
                self.trace.end("cancelled", End::Cancelled { reason })
            }
            state => self.trace.state(state.reported_name()),
        }
    }

    /// Notes the policy's decision on the call's span.
    pub fn note_decision(&self, decision: &Decision) {
        let (name, rule): (_, Option<&dyn std::fmt::Display>) = match decision {
            Decision::Allow => ("allow", None),
            Decision::Deny { source, .. } => ("deny", Some(source)),
            Decision::AskUser { source, .. } => ("ask_user", Some(source)),
        };
        self.trace.decision(name, rule);
    }

    /// Notes the answer to the call's prompt, and who gave it, on its span
    /// and audit line.
    pub fn note_approval(&self, outcome: ConfirmationOutcome, by: &Arc<str>) {
        self.trace.approval(outcome.name(), by.clone());
    }

    /// The function response of a terminal call.
    pub fn response(&self) -> Option<&FunctionResponse> {
        match &self.state {
            CallState::Done(t) => Some(t.response()),
            _ => None,
        }
    }

    /// The final state of a terminal call, for `BatchEvent::Completed`.
    pub fn summary(&self) -> Option<CallSummary> {
        let CallState::Done(t) = &self.state else {
            return None;
        };
        let duration = match t {
            Terminal::Success { duration, .. } => *duration,
            _ => self.ran_for,
        };
        Some(CallSummary {
            call_id: self.request.id.clone(),
            tool_name: self.request.name.clone(),
            end: t.end(),
            duration,
        })
    }

    /// Whether this call may join a parallel wave.
    pub fn parallelizable(&self) -> bool {
        !self.request.wait_for_previous
            && self
                .tool
                .as_ref()
                .is_some_and(|t| t.declaration().parallelizable)
    }
}

/// What an AwaitingApproval state shows.
pub(crate) struct Prompt {
    pub correlation_id: String,
    pub details: ConfirmationDetails,
    pub outcomes: Vec<ConfirmationOutcome>,
    pub deadline: Option<SystemTime>,
    pub reason: String,
    /// The rule (and shell segment) that asked.
    pub policy_rule: Option<DecisionSource>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{BoxFuture, ExecContext, Subject, ToolError, ToolOutcome};

    #[test]
    fn an_end_reads_back_as_recorded_and_an_unreadable_one_is_refused() {
        let request = CallRequest {
            id: "c1".into(),
            name: "write_file".into(),
            args: Arc::new(Args::new()),
            wait_for_previous: false,
            client_initiated: false,
        };
        let mut result = Args::new();
        result.insert("exit_code".into(), 0.into());
        let ends = [
            Terminal::Success {
                response: FunctionResponse::success("c1", "write_file", "done".into()),
                result,
                duration: Duration::from_millis(1500),
            },
            Terminal::error(
                &request,
                ErrorKind::FileChangedConcurrently,
                "changed",
                Some("part"),
            ),
            Terminal::cancelled(&request, "Cancelled by the client.", None),
        ];
        for end in ends {
            assert_eq!(Terminal::decode(&end.encode()), Some(end));
        }
        assert_eq!(Terminal::decode(b"{}"), None);
        assert_eq!(
            Terminal::decode(br#"{"state":"error","id":"c","name":"n","response":{},"kind":"no_such_kind","message":"m"}"#),
            None
        );
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_name(kind.as_str()), Some(kind));
        }
    }

    struct Noop;

    impl Invocation for Noop {
        fn subject(&self) -> Subject {
            Subject::Tool
        }
        fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
            Ok(ConfirmationDetails::Info {
                prompt: String::new(),
            })
        }
        fn execute(self: Arc<Self>, _ctx: ExecContext) -> BoxFuture<ToolOutcome> {
            Box::pin(async {
                ToolOutcome::Cancelled {
                    partial_output: None,
                }
            })
        }
    }

    fn slot() -> CallSlot {
        let request = CallRequest {
            id: "c".into(),
            name: "t".into(),
            args: Default::default(),
            wait_for_previous: false,
            client_initiated: false,
        };
        let metrics = Arc::new(Metrics::new().expect("metrics"));
        CallSlot::new(
            request,
            None,
            Ok(Arc::new(Noop)),
            Default::default(),
            metrics,
        )
        .0
    }

    fn success() -> Terminal {
        Terminal::Success {
            response: FunctionResponse::success("c", "t", serde_json::Value::Null),
            result: Default::default(),
            duration: Duration::ZERO,
        }
    }

    #[test]
    fn only_the_designed_transitions_are_taken() {
        // Validating cannot jump to Executing or Success.
        let mut s = slot();
        assert!(s.execute(CancellationToken::new()).is_none());
        assert!(s.finish(success()).is_none());
        assert_eq!(s.state.name(), "validating");
        // Validating → Scheduled → Executing → Success, then nothing.
        assert_eq!(
            s.schedule(Arc::new(Noop)),
            Some(StateUpdate::Scheduled { args: None })
        );
        let (_, update) = s.execute(CancellationToken::new()).expect("executes");
        assert_eq!(update, StateUpdate::Executing(None));
        assert_eq!(s.finish(success()), Some(success().update()));
        assert!(s.cancel("late", None).is_none());
        assert_eq!(s.state.name(), "success");
    }

    #[test]
    fn a_cancelling_call_reports_no_progress_and_ends_cancelled_only() {
        let mut s = slot();
        s.schedule(Arc::new(Noop));
        let token = CancellationToken::new();
        s.execute(token.clone());
        assert!(s.progress(Progress::Output("x".into())).is_some());
        assert!(s.cancelling("stop"));
        assert!(token.is_cancelled());
        assert!(!s.cancelling("again"));
        assert!(s.progress(Progress::Output("y".into())).is_none());
        assert!(s.finish(success()).is_none());
        assert!(s.cancel("stop", None).is_some());
        assert_eq!(s.state.name(), "cancelled");
    }
}
