//! One call's state machine.
//!
//! Reported transitions (DESIGN §3): Validating → Scheduled | AwaitingApproval
//! | Error | Cancelled; AwaitingApproval → Scheduled | AwaitingApproval |
//! Cancelled; Scheduled → Executing | Cancelled; Executing → Success | Error |
//! Cancelled. Terminal states never change: [`CallSlot::set`] is the only
//! way to change a state and refuses any other transition. It also feeds the
//! call's trace span: one event per transition, ended at the terminal state
//! (see `crate::telemetry`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::events::{
    CallEnd, CallRequest, CallSummary, ConfirmationOutcome, FunctionResponse, StateUpdate,
};
use crate::policy::Decision;
use crate::telemetry::{BatchTrace, CallTrace, End};
use crate::tools::{ErrorKind, Invocation, Tool};

/// A call's state; each variant carries only what is valid in it.
pub(crate) enum CallState {
    /// Arguments passed the schema; the policy decides in the call's wave.
    /// `preparing_prompt` is true while the approval prompt's details (a
    /// diff, say) are being built off the runtime.
    Validating {
        invocation: Arc<dyn Invocation>,
        preparing_prompt: bool,
    },
    /// Approved; waits for the rest of its wave.
    Scheduled { invocation: Arc<dyn Invocation> },
    /// Waits for Confirm with this correlation id.
    AwaitingApproval {
        invocation: Arc<dyn Invocation>,
        correlation_id: String,
        outcomes: Vec<ConfirmationOutcome>,
    },
    /// Running. `cancel_reason` is set once cancellation was asked for; the
    /// call ends Cancelled with it when the tool has stopped.
    Executing {
        started: Instant,
        token: CancellationToken,
        cancel_reason: Option<String>,
    },
    /// Terminal; the update is what the client was told.
    Done(StateUpdate),
}

impl CallState {
    /// The state's name, for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Validating { .. } => "validating",
            Self::Scheduled { .. } => "scheduled",
            Self::AwaitingApproval { .. } => "awaiting_approval",
            Self::Executing { .. } => "executing",
            Self::Done(StateUpdate::Success { .. }) => "success",
            Self::Done(StateUpdate::Error { .. }) => "error",
            Self::Done(_) => "cancelled",
        }
    }

    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self, Self::Done(_))
    }
}

/// A call of the active batch.
pub(crate) struct CallSlot {
    pub request: CallRequest,
    pub tool: Option<Arc<dyn Tool>>,
    pub state: CallState,
    /// The call's span (empty when tracing is off).
    pub trace: CallTrace,
    /// How long it was Executing, set when it left that state (zero until
    /// then, and for a call that never executed).
    pub ran_for: Duration,
}

impl CallSlot {
    /// A call of the batch traced by `batch`, created in `state` (Validating,
    /// or already terminal when it could not be built).
    pub fn new(
        request: CallRequest,
        tool: Option<Arc<dyn Tool>>,
        state: CallState,
        batch: &BatchTrace,
    ) -> Self {
        let trace = batch.call(&request, tool.as_ref().map(|t| t.declaration()));
        let slot = Self {
            request,
            tool,
            state,
            trace,
            ran_for: Duration::ZERO,
        };
        slot.trace_state();
        slot
    }

    /// Moves to `next` if the transition is allowed; returns whether it was.
    /// AwaitingApproval → Validating (a modified call whose new prompt is
    /// being prepared) is internal: the client sees AwaitingApproval again.
    pub fn set(&mut self, next: CallState) -> bool {
        use CallState as S;
        use StateUpdate as U;
        // DESIGN §3's table, and the internal re-prompt edge
        // AwaitingApproval → Validating; nothing else, and never out of a
        // terminal state.
        let ok = matches!(
            (&self.state, &next),
            (
                S::Validating { .. },
                S::Validating { .. }
                    | S::Scheduled { .. }
                    | S::AwaitingApproval { .. }
                    | S::Done(U::Error { .. } | U::Cancelled { .. })
            ) | (
                S::AwaitingApproval { .. },
                S::Validating { .. } | S::Scheduled { .. } | S::Done(U::Cancelled { .. })
            ) | (
                S::Scheduled { .. },
                S::Executing { .. } | S::Done(U::Cancelled { .. })
            ) | (
                S::Executing { .. },
                S::Executing { .. }
                    | S::Done(U::Success { .. } | U::Error { .. } | U::Cancelled { .. })
            )
        );
        if ok {
            if let (S::Executing { started, .. }, S::Done(_)) = (&self.state, &next) {
                self.ran_for = started.elapsed();
            }
            self.state = next;
            self.trace_state();
        } else {
            tracing::error!(
                call_id = %self.request.id,
                from = self.state.name(),
                to = next.name(),
                "refused an invalid call state transition"
            );
        }
        ok
    }

    /// Records the current state on the call's span; a terminal one ends it.
    fn trace_state(&self) {
        match &self.state {
            CallState::Done(StateUpdate::Success { .. }) => self.trace.end("success", End::Success),
            CallState::Done(StateUpdate::Error { kind, message, .. }) => self.trace.end(
                "error",
                End::Error {
                    kind: kind.as_str(),
                    message,
                },
            ),
            CallState::Done(StateUpdate::Cancelled { reason, .. }) => {
                self.trace.end("cancelled", End::Cancelled { reason })
            }
            state => self.trace.state(state.name()),
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

    /// Notes the answer to the call's prompt on its span.
    pub fn note_approval(&self, outcome: ConfirmationOutcome) {
        self.trace.approval(outcome.name());
    }

    /// The terminal update for a cancellation with `reason`.
    pub fn cancelled(&self, reason: &str, partial_output: Option<&str>) -> StateUpdate {
        StateUpdate::Cancelled {
            reason: reason.to_string(),
            response: FunctionResponse::cancelled(
                &self.request.id,
                &self.request.name,
                reason,
                partial_output,
            ),
        }
    }

    /// The terminal update for an error.
    pub fn error(
        &self,
        kind: ErrorKind,
        message: &str,
        partial_output: Option<&str>,
    ) -> StateUpdate {
        error_update(&self.request, kind, message, partial_output)
    }

    /// The function response of a terminal call.
    pub fn response(&self) -> Option<&FunctionResponse> {
        match &self.state {
            CallState::Done(
                StateUpdate::Success { response, .. }
                | StateUpdate::Error { response, .. }
                | StateUpdate::Cancelled { response, .. },
            ) => Some(response),
            _ => None,
        }
    }

    /// The final state of a terminal call, for `BatchEvent::Completed`.
    pub fn summary(&self) -> Option<CallSummary> {
        let CallState::Done(update) = &self.state else {
            return None;
        };
        let duration = match update {
            StateUpdate::Success { duration, .. } => *duration,
            _ => self.ran_for,
        };
        Some(CallSummary {
            call_id: self.request.id.clone(),
            tool_name: self.request.name.clone(),
            end: CallEnd::of(update)?,
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

/// The terminal Error update of `request`.
pub(crate) fn error_update(
    request: &CallRequest,
    kind: ErrorKind,
    message: &str,
    partial_output: Option<&str>,
) -> StateUpdate {
    StateUpdate::Error {
        kind,
        message: message.to_string(),
        response: FunctionResponse::error(&request.id, &request.name, message, partial_output),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{
        BoxFuture, ConfirmationDetails, ExecContext, Subject, ToolError, ToolOutcome,
    };

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

    fn slot(state: CallState) -> CallSlot {
        CallSlot {
            request: CallRequest {
                id: "c".into(),
                name: "t".into(),
                args: Default::default(),
                wait_for_previous: false,
                client_initiated: false,
            },
            tool: None,
            state,
            trace: CallTrace::default(),
            ran_for: Duration::ZERO,
        }
    }

    fn validating() -> CallState {
        CallState::Validating {
            invocation: Arc::new(Noop),
            preparing_prompt: false,
        }
    }

    fn success() -> CallState {
        CallState::Done(StateUpdate::Success {
            response: FunctionResponse::success("c", "t", serde_json::Value::Null),
            result: Default::default(),
            duration: std::time::Duration::ZERO,
        })
    }

    #[test]
    fn only_the_designed_transitions_are_taken() {
        // Validating cannot jump to Executing or Success.
        let mut s = slot(validating());
        assert!(!s.set(CallState::Executing {
            started: Instant::now(),
            token: CancellationToken::new(),
            cancel_reason: None,
        }));
        let done = success();
        assert!(!s.set(done));
        assert_eq!(s.state.name(), "validating");
        // Validating → Scheduled → Executing → Success, then nothing.
        assert!(s.set(CallState::Scheduled {
            invocation: Arc::new(Noop)
        }));
        assert!(s.set(CallState::Executing {
            started: Instant::now(),
            token: CancellationToken::new(),
            cancel_reason: None,
        }));
        let done = success();
        assert!(s.set(done));
        let cancelled = CallState::Done(s.cancelled("late", None));
        assert!(!s.set(cancelled));
        assert_eq!(s.state.name(), "success");
    }
}
