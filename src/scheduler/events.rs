//! What the scheduler tells a batch's client, and what clients ask of it:
//! domain types only, converted to and from proto in `api::convert`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::policy::ApprovalMode;
use crate::tools::{Args, ConfirmationDetails, ErrorKind, Progress};

/// One function call as the model returned it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRequest {
    pub id: String,
    pub name: String,
    /// Shared with the Validating event that echoes them, not copied.
    pub args: Arc<Args>,
    /// Never join a parallel wave: wait for every earlier call.
    pub wait_for_previous: bool,
    /// The user asked for it directly: no prompt, but denies still apply
    /// (see [`crate::policy::PolicyInput::client_initiated`]).
    pub client_initiated: bool,
}

/// A batch of function calls for one session.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    pub session_id: String,
    pub calls: Vec<CallRequest>,
    /// Switch the session to this mode first.
    pub approval_mode: Option<ApprovalMode>,
    /// Whether a person can answer prompts; when false, ask_user is an Error.
    pub interactive: bool,
    /// Switch the session to this sandbox level first (at most as
    /// permissive as the server's).
    pub sandbox_level: Option<crate::sandbox::SandboxLevel>,
    /// The caller's span (W3C `traceparent`), parent of the batch's span.
    pub trace_parent: crate::telemetry::TraceParent,
    /// The client's idempotency key: a repeat with the same calls attaches
    /// to the original batch instead of scheduling anything.
    pub request_id: Option<String>,
    /// How long the batch keeps running once its last reader went away;
    /// `None` takes the server's default.
    pub disconnect_grace: Option<Duration>,
    /// Calls that end `outcome_unknown` without running: set only when a
    /// replica takes over a batch whose owner stopped while they executed.
    pub outcome_unknown: Vec<String>,
    /// The workspace the session works in (a server with a workspaces
    /// root); `None` on a later batch keeps the session's.
    pub workspace: Option<crate::workspaces::WorkspaceName>,
    /// Who asked for the batch (the authenticated principal's name), for
    /// the audit lines.
    pub principal: Arc<str>,
    /// Calls that start in the end their stopped owner recorded (a batch
    /// taken over): (call id, the end as the store keeps it); they keep
    /// their real result and never run again.
    pub ended: Vec<(String, Vec<u8>)>,
    /// Answers the stopped owner recorded for prompts of a batch taken
    /// over: (call id, answer). A call that never began takes its final
    /// answer instead of being prompted again.
    pub answered: Box<[(String, crate::store::Answer)]>,
    /// The session's settings as a durable store recorded them, when this
    /// replica's hold on the session is new (another replica may have
    /// changed them): the session takes them when the batch reaches it.
    /// (Both boxed slices: a request travels inside the hub's commands.)
    pub settings: Option<Box<[u8]>>,
}

pub use crate::policy::ConfirmationOutcome;

/// A Confirm request.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfirmRequest {
    pub session_id: String,
    pub call_id: String,
    pub correlation_id: String,
    pub outcome: ConfirmationOutcome,
    pub new_content: Option<String>,
    /// Who answered (the authenticated principal's name): the call's audit
    /// line names it.
    pub principal: Arc<str>,
}

/// A Cancel request.
#[derive(Debug, Clone, PartialEq)]
pub struct CancelRequest {
    pub session_id: String,
    pub batch_id: Option<String>,
    pub reason: String,
}

/// What a Cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CancelSummary {
    pub cancelled_calls: u32,
    pub cancelled_batches: u32,
}

/// A function response in Gemini's shape: `{id, name, response}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionResponse {
    pub id: String,
    pub name: String,
    /// `{"output": …}`, `{"error": "…"}` or
    /// `{"error": "[Operation Cancelled] …", "output": …}`. Shared: the
    /// call's terminal event, its slot and `BatchCompleted` hold the same
    /// output (up to megabytes) without copying it.
    pub response: Arc<Args>,
}

impl FunctionResponse {
    pub fn success(id: &str, name: &str, output: Value) -> Self {
        let mut response = Args::new();
        response.insert("output".into(), output);
        Self {
            id: id.into(),
            name: name.into(),
            response: Arc::new(response),
        }
    }

    pub fn error(id: &str, name: &str, message: &str, partial_output: Option<&str>) -> Self {
        let mut response = Args::new();
        response.insert("error".into(), Value::String(message.into()));
        if let Some(out) = partial_output.filter(|o| !o.is_empty()) {
            response.insert("output".into(), Value::String(out.into()));
        }
        Self {
            id: id.into(),
            name: name.into(),
            response: Arc::new(response),
        }
    }

    pub fn cancelled(id: &str, name: &str, reason: &str, partial_output: Option<&str>) -> Self {
        Self::error(
            id,
            name,
            &format!("[Operation Cancelled] {reason}"),
            partial_output,
        )
    }
}

/// Largest function-response payload in one message, in bytes (estimated
/// from the JSON): a default gRPC client accepts 4 MiB messages, and the
/// event around the responses needs some room.
pub const MAX_RESPONSES_BYTES: usize = 3 * 1024 * 1024;

/// Estimated encoded size of a JSON value, in bytes: string and key bytes
/// plus a few bytes of framing per value (protobuf's Struct encoding is
/// within a small factor of this).
pub(crate) fn approx_size(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len() + 4,
        Value::Array(a) => 4 + a.iter().map(approx_size).sum::<usize>(),
        Value::Object(o) => {
            4 + o
                .iter()
                .map(|(k, v)| k.len() + 4 + approx_size(v))
                .sum::<usize>()
        }
        _ => 12,
    }
}

impl FunctionResponse {
    /// Estimated encoded size in bytes.
    pub fn approx_size(&self) -> usize {
        self.id.len()
            + self.name.len()
            + 8
            + self
                .response
                .iter()
                .map(|(k, v)| k.len() + 4 + approx_size(v))
                .sum::<usize>()
    }
}

/// Shrinks the largest string fields of `responses` until their estimated
/// total is at most `budget` bytes, marking each cut with what was omitted.
/// Every tool bounds its own output; this bounds what a batch adds up to,
/// so that `BatchCompleted` (which repeats every response) still fits a
/// default client's message limit. The full responses were sent in each
/// call's terminal event.
pub fn fit_responses(responses: &mut [FunctionResponse], budget: usize) {
    let mut total: usize = responses.iter().map(FunctionResponse::approx_size).sum();
    while total > budget {
        // The largest string value among all top-level response fields.
        let Some((ri, key, len)) = responses
            .iter()
            .enumerate()
            .flat_map(|(ri, r)| {
                r.response.iter().filter_map(move |(k, v)| match v {
                    Value::String(s) => Some((ri, k.clone(), s.len())),
                    _ => None,
                })
            })
            .max_by_key(|(_, _, len)| *len)
        else {
            return;
        };
        let excess = total - budget;
        // Keep at least a short head of the field; a note replaces the rest.
        let keep = len.saturating_sub(excess + 200).max(len.min(256)).min(len);
        if keep >= len {
            return;
        }
        let Some(Value::String(text)) = Arc::make_mut(&mut responses[ri].response).get_mut(&key)
        else {
            return;
        };
        let mut cut = keep;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let omitted = text.len() - cut;
        text.truncate(cut);
        text.push_str(&format!(
            "\n... [{omitted} bytes omitted here to keep the message under {budget} bytes; the call's own terminal event carried them]"
        ));
        let new_total: usize = responses.iter().map(FunctionResponse::approx_size).sum();
        if new_total >= total {
            return;
        }
        total = new_total;
    }
}

/// A call's state as reported to the client: each state's own data.
#[derive(Debug, Clone, PartialEq)]
pub enum StateUpdate {
    Validating {
        args: Arc<Args>,
    },
    /// `args` only when the person changed the call at its prompt: the
    /// arguments that will run.
    Scheduled {
        args: Option<Arc<Args>>,
    },
    AwaitingApproval {
        correlation_id: String,
        details: ConfirmationDetails,
        outcomes: Vec<ConfirmationOutcome>,
        deadline: Option<SystemTime>,
        reason: String,
        /// The rule (and shell segment) that asked.
        /// Boxed: keeps the update small for the other states.
        policy_rule: Option<Box<crate::policy::DecisionSource>>,
    },
    /// `None` when the call starts executing; then one per progress report.
    Executing(Option<Progress>),
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

impl StateUpdate {
    /// Terminal states end a call; exactly one is reported per call.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Success { .. } | Self::Error { .. } | Self::Cancelled { .. }
        )
    }
}

/// A call's final state as `BatchEvent::Completed` reports it, so that a
/// client reading only the last event knows what became of every call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSummary {
    pub call_id: String,
    pub tool_name: String,
    pub end: CallEnd,
    /// Execution wall time: the Success's own duration, the time run before
    /// an Error or Cancelled, zero for a call that never started executing.
    pub duration: Duration,
}

/// The terminal state of a [`CallSummary`], with what a client switches on
/// (the function response and the structured result are elsewhere).
#[derive(Debug, Clone, PartialEq)]
pub enum CallEnd {
    Success {
        /// The shell's exit code, see [`exit_code`].
        exit_code: Option<i32>,
    },
    Error {
        kind: ErrorKind,
        message: String,
    },
    Cancelled {
        reason: String,
    },
}

/// The exit code in a tool's structured result: `run_shell_command` puts the
/// command's exit status under `"exit_code"` (null when a signal ended it).
/// The one place that key is read, for the typed proto fields.
pub fn exit_code(result: &Args) -> Option<i32> {
    result.get("exit_code")?.as_i64()?.try_into().ok()
}

/// One event of a batch's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchEvent {
    Accepted {
        batch_id: String,
        queued: bool,
        batches_ahead: u32,
    },
    Started {
        batch_id: String,
    },
    CallUpdate {
        call_id: String,
        tool_name: String,
        update: StateUpdate,
    },
    Completed {
        batch_id: String,
        responses: Vec<FunctionResponse>,
        /// Every call's final state, in request order (`calls[i]` is the
        /// call of `responses[i]`).
        calls: Vec<CallSummary>,
    },
    /// An event read back from a durable store, in the wire form `api`
    /// wrote it in (a batch this process did not run).
    Recorded(bytes::Bytes),
}

/// An event with the time it happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub at: SystemTime,
    pub event: BatchEvent,
}
