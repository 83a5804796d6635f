//! The synchronous batch engine: one batch's calls, its waves and phases.
//!
//! Owns: the calls of one running batch (in execution order: topic first,
//! stable otherwise), the request order for the final responses, and the
//! [`Phase`] of the wave loop (DESIGN §4, as Gemini CLI's scheduler): take
//! the head call and, if it is parallelizable, every following
//! parallelizable call; (1) decide policy for every member, prompting where
//! asked; (2) once every member is Scheduled or terminal, execute the
//! Scheduled ones together; (3) when all are terminal, take the next wave.
//! Every method takes an input and returns the [`Effect`]s the caller must
//! perform; nothing here waits, spawns or touches a runtime, so the wave
//! rules are unit-tested as tables below.
//!
//! Not here: performing effects (spawning tools, timers, sending events:
//! `session.rs` and `exec.rs`), answering prompts (`approval.rs`), the
//! session's queue, mode and rules (`session.rs`), policy itself
//! (`policy`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Metrics;
use super::call::{CallSlot, CallState, Terminal};
use super::events::{
    BatchEvent, CallRequest, CallSummary, FunctionResponse, MAX_RESPONSES_BYTES, StateUpdate,
    fit_responses,
};
use crate::policy::{
    ApprovalMode, ConfirmationOutcome, Decision, DecisionSource, PolicyHandle, PolicyInput,
    SessionRules,
};
use crate::telemetry::BatchTrace;
use crate::tools::{ErrorKind, Invocation, Progress, Registry, TOPIC_TOOL_NAME, ToolOutcome};

/// Reason given to calls cancelled because an earlier call of their batch
/// was rejected, as Gemini CLI does.
pub(crate) const REJECTED_SIBLING_REASON: &str =
    "Cancelled because an earlier call of the batch was rejected by the user.";
/// Reason of a rejected prompt (Gemini CLI's wording).
pub(crate) const USER_DENIED_REASON: &str = "User denied execution.";

/// What decides a call: the policy in force, the session's approval mode and
/// "always allow" rules, and whether a person can answer a prompt.
pub(crate) struct Decider<'a> {
    pub policy: &'a PolicyHandle,
    pub mode: ApprovalMode,
    pub rules: &'a SessionRules,
    pub interactive: bool,
}

impl Decider<'_> {
    /// The policy decision for `slot`'s call as `invocation` would run it,
    /// noted on the call's span. `None` for a call without a tool (never
    /// built, so never decided).
    pub fn decide(&self, slot: &CallSlot, invocation: &dyn Invocation) -> Option<Decision> {
        let tool = slot.tool.as_ref()?;
        let subject = invocation.subject();
        let decision = self.policy.decide(PolicyInput {
            decl: tool.declaration(),
            subject: &subject,
            args: &slot.request.args,
            mode: self.mode,
            interactive: self.interactive,
            rules: self.rules,
            client_initiated: slot.request.client_initiated,
            writes_repository: invocation.writes_repository(),
        });
        slot.note_decision(&decision);
        Some(decision)
    }
}

/// What the caller of a [`Batch`] method must do, in order.
pub(crate) enum Effect {
    /// Send this event to the batch's stream.
    Emit(BatchEvent),
    /// Build call `index`'s prompt details off the runtime (an edit reads
    /// the file to diff it), then call [`Batch::on_prompt_ready`].
    /// `reason` is the policy's, naming the rule; `None` for a re-prompt.
    PreparePrompt {
        index: usize,
        invocation: Arc<dyn Invocation>,
        reason: Option<(String, DecisionSource)>,
    },
    /// Run call `index`; `token` stops it. Report to
    /// [`Batch::on_progress`] and [`Batch::on_executed`].
    Execute {
        index: usize,
        invocation: Arc<dyn Invocation>,
        token: CancellationToken,
    },
    /// After `after`, call [`Batch::on_confirm_timeout`] for this prompt.
    ArmConfirmTimeout {
        index: usize,
        correlation_id: String,
        after: Duration,
    },
    /// After the cancel guard, call [`Batch::on_cancel_guard`] (covers a
    /// tool that ignores its token).
    ArmCancelGuard { index: usize },
    /// `update_topic` succeeded: the session's topic is now this.
    Topic(String),
    /// A recorded "always" answer was applied to a call of a batch taken
    /// over: the session records its rule (and mode), as after a Confirm.
    Always(super::approval::AlwaysGrant),
    /// Every call is terminal: these are the function responses and final
    /// states in request order. The batch does nothing more.
    Completed {
        responses: Vec<FunctionResponse>,
        calls: Vec<CallSummary>,
    },
}

/// The members of a wave (indices in execution order, terminal calls
/// skipped) and the first call after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wave {
    pub members: Vec<usize>,
    pub next: usize,
}

/// Where the wave loop is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No wave; `next` is the first call not yet part of one.
    Between { next: usize },
    /// Policy and prompts for the wave's members.
    Deciding { wave: Wave },
    /// The wave's Scheduled members run.
    Executing { wave: Wave },
    /// Every call is terminal and the responses were handed out.
    Done,
}

impl Phase {
    /// The first call not yet part of a wave (what a rejection cancels).
    fn queued_from(&self, len: usize) -> usize {
        match self {
            Self::Between { next } => *next,
            Self::Deciding { wave } | Self::Executing { wave } => wave.next,
            Self::Done => len,
        }
    }

    /// The current wave's members.
    pub fn members(&self) -> &[usize] {
        match self {
            Self::Deciding { wave } | Self::Executing { wave } => &wave.members,
            _ => &[],
        }
    }
}

/// What a batch starts from.
pub(crate) struct BatchStart<'a> {
    pub id: String,
    pub session_id: &'a str,
    pub calls: Vec<CallRequest>,
    pub interactive: bool,
    /// The caller's trace context, parent of the batch's span.
    pub trace_parent: &'a crate::telemetry::TraceParent,
    /// Calls are built from this snapshot: a registry swapped in meanwhile
    /// (MCP tool lists changed) applies to later batches.
    pub registry: &'a Registry,
    /// The batch's token; each execution runs under a child of it.
    pub token: CancellationToken,
    pub metrics: Arc<Metrics>,
    /// An unanswered prompt is cancelled after this; `None` waits forever.
    pub confirmation_timeout: Option<Duration>,
    /// Calls found Executing with no result when this batch was taken over
    /// from a replica that stopped: they end `outcome_unknown`, never run.
    pub outcome_unknown: &'a [String],
    /// Who asked for the batch, and the session's workspace (`""` for the
    /// server's one), for the calls' audit lines.
    pub principal: Arc<str>,
    pub workspace: Arc<str>,
    /// Calls whose end the stopped replica recorded: they start in it.
    pub ended: &'a [(String, Terminal)],
    /// Final answers the stopped replica recorded for prompts of calls
    /// that never began: (call id, outcome, new content). Such a call takes
    /// its answer when policy would ask, instead of a new prompt.
    pub answered: &'a [(String, ConfirmationOutcome, Option<String>)],
}

/// The message of a call that ends `outcome_unknown`.
pub const OUTCOME_UNKNOWN: &str = "the server running this call stopped; it was not re-run";

/// One running batch.
pub(crate) struct Batch {
    pub(super) id: String,
    /// Calls in execution order (topic first).
    pub(super) calls: Vec<CallSlot>,
    /// `request_order[i]` is the index in `calls` of the i-th requested call.
    request_order: Vec<usize>,
    pub(super) phase: Phase,
    interactive: bool,
    pub(super) confirmation_timeout: Option<Duration>,
    token: CancellationToken,
    /// Recorded answers of calls of a batch taken over, by index
    /// ([`BatchStart::answered`]); each is used once.
    recorded: HashMap<usize, (ConfirmationOutcome, Option<String>)>,
    /// Calls whose tool finished and whose end is being recorded
    /// ([`Batch::ending`]): ended as far as a Cancel is concerned.
    ending: std::collections::HashSet<usize>,
    /// The batch's span, parent of the calls' spans; ends when dropped.
    _trace: BatchTrace,
}

impl Batch {
    /// Creates the batch's calls: each is Validating, or directly in Error
    /// when its tool is unknown or its arguments are invalid (it never
    /// executes). The effects announce every call, in execution order.
    pub fn start(start: BatchStart<'_>) -> (Self, Vec<Effect>) {
        let BatchStart {
            id,
            session_id,
            calls: requested,
            interactive,
            trace_parent,
            registry,
            token,
            metrics,
            confirmation_timeout,
            outcome_unknown,
            principal,
            workspace,
            ended,
            answered,
        } = start;
        let trace = BatchTrace::start(session_id, &id, requested.len(), interactive, trace_parent)
            .by(principal, workspace)
            .observed_by(metrics.clone());
        // Topic first, stable otherwise.
        let mut order: Vec<usize> = (0..requested.len()).collect();
        order.sort_by_key(|&i| requested[i].name != TOPIC_TOOL_NAME);
        let mut request_order = vec![0; order.len()];
        for (pos, &req_index) in order.iter().enumerate() {
            request_order[req_index] = pos;
        }
        let mut requested: Vec<Option<CallRequest>> = requested.into_iter().map(Some).collect();
        let mut calls = Vec::with_capacity(order.len());
        let mut effects = Vec::with_capacity(order.len());
        for &req_index in &order {
            let Some(call) = requested[req_index].take() else {
                continue; // `order` is a permutation: never taken twice
            };
            let tool = registry.get(&call.name).ok().cloned();
            let built = if outcome_unknown.contains(&call.id) {
                Err((ErrorKind::OutcomeUnknown, OUTCOME_UNKNOWN.to_string()))
            } else {
                registry
                    .build(&call.name, &call.args)
                    .map_err(|e| (e.kind, e.message))
            };
            let span = trace.call(&call, tool.as_ref().map(|t| t.declaration()));
            let recorded = ended.iter().find(|(id, _)| *id == call.id);
            let (slot, update) = match recorded {
                Some((_, end)) => CallSlot::ended(call, tool, end.clone(), span, metrics.clone()),
                None => CallSlot::new(call, tool, built, span, metrics.clone()),
            };
            effects.push(Effect::Emit(call_update(&slot, update)));
            calls.push(slot);
        }
        let recorded = answered
            .iter()
            .filter_map(|(id, outcome, content)| {
                let index = calls.iter().position(|c| c.request.id == *id)?;
                Some((index, (*outcome, content.clone())))
            })
            .collect();
        let batch = Self {
            id,
            calls,
            request_order,
            phase: Phase::Between { next: 0 },
            interactive,
            confirmation_timeout,
            token,
            recorded,
            ending: Default::default(),
            _trace: trace,
        };
        (batch, effects)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether a person can answer this batch's prompts.
    pub fn interactive(&self) -> bool {
        self.interactive
    }

    /// The index of call `call_id`.
    pub fn find(&self, call_id: &str) -> Option<usize> {
        self.calls.iter().position(|c| c.request.id == call_id)
    }

    /// Each call's id and state name, in execution order.
    pub fn states(&self) -> impl Iterator<Item = (&str, &'static str)> {
        self.calls
            .iter()
            .map(|c| (c.request.id.as_str(), c.state.name()))
    }

    /// Tells the client about call `index`'s transition, if it happened.
    pub(super) fn emit(
        &self,
        index: usize,
        update: Option<StateUpdate>,
        effects: &mut Vec<Effect>,
    ) {
        if let Some(update) = update {
            effects.push(Effect::Emit(call_update(&self.calls[index], update)));
        }
    }

    /// Advances the wave loop as far as it goes without an outside answer
    /// (a prompt, a tool's result).
    pub fn step(&mut self, decider: &Decider<'_>) -> Vec<Effect> {
        let mut effects = Vec::new();
        loop {
            match &self.phase {
                Phase::Done => break,
                Phase::Between { next } => {
                    let mut head = *next;
                    while head < self.calls.len() && self.calls[head].state.is_terminal() {
                        head += 1;
                    }
                    if head == self.calls.len() {
                        self.phase = Phase::Done;
                        effects.push(Effect::Completed {
                            responses: self.responses(),
                            calls: self
                                .request_order
                                .iter()
                                .filter_map(|&i| self.calls[i].summary())
                                .collect(),
                        });
                        break;
                    }
                    let wave = self.wave_from(head);
                    let members = wave.members.clone();
                    // In the wave first: a recorded "cancel" applied while
                    // deciding spares its siblings, as after a Confirm.
                    self.phase = Phase::Deciding { wave };
                    self.decide(&members, decider, &mut effects);
                }
                Phase::Deciding { wave } => {
                    if self.all(&wave.members, CallState::is_terminal) {
                        self.phase = Phase::Between { next: wave.next };
                    } else if self.all(&wave.members, |s| {
                        matches!(s, CallState::Scheduled { .. } | CallState::Done(_))
                    }) {
                        let wave = wave.clone();
                        self.execute(&wave.members, &mut effects);
                        self.phase = Phase::Executing { wave };
                    } else {
                        break;
                    }
                }
                Phase::Executing { wave } => {
                    if self.all(&wave.members, CallState::is_terminal) {
                        self.phase = Phase::Between { next: wave.next };
                    } else {
                        break;
                    }
                }
            }
        }
        effects
    }

    fn all(&self, members: &[usize], f: impl Fn(&CallState) -> bool) -> bool {
        members.iter().all(|&i| f(&self.calls[i].state))
    }

    /// The wave headed by `head`: the head and, if it is parallelizable,
    /// every following parallelizable call (terminal ones skipped).
    fn wave_from(&self, head: usize) -> Wave {
        let mut members = vec![head];
        let mut next = head + 1;
        if self.calls[head].parallelizable() {
            while next < self.calls.len() {
                let slot = &self.calls[next];
                if slot.state.is_terminal() {
                    next += 1;
                    continue;
                }
                if !slot.parallelizable() {
                    break;
                }
                members.push(next);
                next += 1;
            }
        }
        Wave { members, next }
    }

    /// Phase 1: the policy decision for every member of the wave. Several
    /// prompts of one wave may be open at once.
    fn decide(&mut self, members: &[usize], decider: &Decider<'_>, effects: &mut Vec<Effect>) {
        let mut prompts = Vec::new();
        for &index in members {
            let CallState::Validating { invocation } = &self.calls[index].state else {
                continue;
            };
            let invocation = invocation.clone();
            let decision = decider.decide(&self.calls[index], invocation.as_ref());
            // Answered already, on the replica that stopped (the client was
            // told OK): the answer applies, no new prompt.
            if matches!(decision, Some(Decision::AskUser { .. }))
                && decider.interactive
                && let Some((outcome, content)) = self.recorded.remove(&index)
            {
                self.apply_recorded(index, invocation, outcome, content, effects);
                continue;
            }
            let slot = &mut self.calls[index];
            let update = match decision {
                None => slot.fail(
                    ErrorKind::ToolNotRegistered,
                    &format!("Tool '{}' is not registered.", slot.request.name),
                    None,
                ),
                Some(Decision::Allow) => slot.schedule(invocation),
                Some(Decision::Deny { message, .. }) => {
                    slot.fail(ErrorKind::PolicyViolation, &message, None)
                }
                Some(Decision::AskUser { reason, .. }) if !decider.interactive => {
                    let message = format!(
                        "Approval required but the batch is non-interactive, so nobody can approve it: {reason}"
                    );
                    slot.fail(ErrorKind::PolicyViolation, &message, None)
                }
                Some(Decision::AskUser { reason, source }) => {
                    if slot.prepare_prompt(invocation.clone()) {
                        prompts.push(Effect::PreparePrompt {
                            index,
                            invocation,
                            reason: Some((reason, source)),
                        });
                    }
                    None
                }
            };
            self.emit(index, update, effects);
        }
        effects.extend(prompts);
    }

    /// Phase 2: every Scheduled member runs, each under its own child of the
    /// batch's token.
    fn execute(&mut self, members: &[usize], effects: &mut Vec<Effect>) {
        for &index in members {
            let token = self.token.child_token();
            if let Some((invocation, update)) = self.calls[index].execute(token.clone()) {
                self.emit(index, Some(update), effects);
                effects.push(Effect::Execute {
                    index,
                    invocation,
                    token,
                });
            }
        }
    }

    /// The function responses of every call, in request order, fitted to
    /// one message.
    fn responses(&self) -> Vec<FunctionResponse> {
        let mut responses: Vec<FunctionResponse> = self
            .request_order
            .iter()
            .filter_map(|&i| self.calls[i].response().cloned())
            .collect();
        fit_responses(&mut responses, MAX_RESPONSES_BYTES);
        responses
    }

    /// A progress report of executing call `index`.
    pub fn on_progress(&self, index: usize, progress: Progress) -> Vec<Effect> {
        let mut effects = Vec::new();
        if let Some(slot) = self.calls.get(index) {
            self.emit(index, slot.progress(progress), &mut effects);
        }
        effects
    }

    /// Call `index`'s tool finished. A call asked to stop ends Cancelled
    /// (keeping partial output); a tool that stopped by itself because its
    /// token went (the client went away) ends Cancelled with
    /// `drop_reason`. A late result of a call already ended is dropped.
    pub fn on_executed(
        &mut self,
        index: usize,
        outcome: ToolOutcome,
        drop_reason: &str,
    ) -> Vec<Effect> {
        match self.end_of(index, outcome, drop_reason) {
            Some(terminal) => self.finish_call(index, terminal),
            None => Vec::new(),
        }
    }

    /// The end call `index` takes from its tool's `outcome` (see
    /// [`Batch::on_executed`]), to be recorded before the call takes it
    /// ([`Batch::finish_call`]): meanwhile a Cancel leaves the call alone
    /// (its tool has stopped; its end is what the store will say). `None`
    /// for a late result of a call already ended.
    pub fn ending(
        &mut self,
        index: usize,
        outcome: ToolOutcome,
        drop_reason: &str,
    ) -> Option<Terminal> {
        let end = self.end_of(index, outcome, drop_reason)?;
        self.ending.insert(index);
        Some(end)
    }

    fn end_of(&self, index: usize, outcome: ToolOutcome, drop_reason: &str) -> Option<Terminal> {
        let slot = self.calls.get(index)?;
        let terminal = match (&slot.state, outcome) {
            (CallState::Cancelling { reason, .. }, outcome) => {
                let partial = match &outcome {
                    ToolOutcome::Cancelled { partial_output } => partial_output.as_deref(),
                    _ => None,
                };
                Terminal::cancelled(&slot.request, reason, partial)
            }
            (CallState::Executing { started, .. }, ToolOutcome::Success { output, result }) => {
                let mut response =
                    FunctionResponse::success(&slot.request.id, &slot.request.name, output);
                if let Some(note) = slot.modification_note() {
                    Arc::make_mut(&mut response.response)
                        .insert("user_modification".into(), note.into());
                }
                // Not cut here: the tool bounded its output by
                // `output_cap_bytes`, which start-up keeps inside one event
                // (`max_event_bytes`), and the stream fits each event to
                // that limit. Only BatchCompleted, which repeats every
                // response, is cut to MAX_RESPONSES_BYTES (its note points
                // here, to the terminal event that carried the whole).
                Terminal::Success {
                    response,
                    result,
                    duration: started.elapsed(),
                }
            }
            (CallState::Executing { .. }, ToolOutcome::Error(e)) => Terminal::error(
                &slot.request,
                e.kind,
                &e.message,
                e.partial_output.as_deref(),
            ),
            (CallState::Executing { .. }, ToolOutcome::Cancelled { partial_output }) => {
                Terminal::cancelled(&slot.request, drop_reason, partial_output.as_deref())
            }
            _ => return None, // a late result of a call already ended
        };
        Some(terminal)
    }

    /// Executing (or Cancelling) call `index` ends in `terminal` (from
    /// [`Batch::end_of`], or `outcome_unknown` when its end could not be
    /// recorded).
    pub fn finish_call(&mut self, index: usize, terminal: Terminal) -> Vec<Effect> {
        self.ending.remove(&index);
        let mut effects = Vec::new();
        let Some(slot) = self.calls.get_mut(index) else {
            return effects;
        };
        if let Terminal::Success { result, .. } = &terminal
            && slot.request.name == TOPIC_TOOL_NAME
            && let Some(topic) = result.get("topic").and_then(|t| t.as_str())
        {
            effects.push(Effect::Topic(topic.to_string()));
        }
        let update = slot.finish(terminal);
        self.emit(index, update, &mut effects);
        effects
    }

    /// The `outcome_unknown` end of call `index`: the same as a replica
    /// taking its batch over gives it.
    pub fn outcome_unknown(&self, index: usize) -> Option<Terminal> {
        let slot = self.calls.get(index)?;
        Some(Terminal::error(
            &slot.request,
            ErrorKind::OutcomeUnknown,
            OUTCOME_UNKNOWN,
            None,
        ))
    }

    /// Cancels every non-terminal call with `reason`. Executing calls are
    /// stopped; they end Cancelled once their tool has stopped, or when the
    /// cancel guard fires. Returns how many calls it cancelled.
    pub fn cancel(&mut self, reason: &str) -> (u32, Vec<Effect>) {
        let mut effects = Vec::new();
        let mut count = 0;
        for index in 0..self.calls.len() {
            if self.ending.contains(&index) {
                continue; // ended; its end is being recorded
            }
            let slot = &mut self.calls[index];
            match slot.state {
                CallState::Done(_) | CallState::Cancelling { .. } => {}
                CallState::Executing { .. } => {
                    if slot.cancelling(reason) {
                        count += 1;
                        effects.push(Effect::ArmCancelGuard { index });
                    }
                }
                _ => {
                    count += 1;
                    let update = slot.cancel(reason, None);
                    self.emit(index, update, &mut effects);
                }
            }
        }
        (count, effects)
    }

    /// Rejects call `index`'s prompt: it ends "User denied execution." and
    /// the calls still queued in the batch (not yet in a wave) are
    /// cancelled; active siblings of its wave go on (as Gemini CLI).
    pub fn reject(&mut self, index: usize) -> Vec<Effect> {
        let mut effects = Vec::new();
        let update = self.calls[index].cancel(USER_DENIED_REASON, None);
        self.emit(index, update, &mut effects);
        for i in self.phase.queued_from(self.calls.len())..self.calls.len() {
            if !self.calls[i].state.is_terminal() {
                let update = self.calls[i].cancel(REJECTED_SIBLING_REASON, None);
                self.emit(i, update, &mut effects);
            }
        }
        effects
    }

    /// The cancel guard of call `index` fired: a tool that has not stopped
    /// since it was asked to ends Cancelled regardless.
    pub fn on_cancel_guard(&mut self, index: usize) -> Vec<Effect> {
        let mut effects = Vec::new();
        if let Some(slot) = self.calls.get_mut(index)
            && let CallState::Cancelling { reason, .. } = &slot.state
        {
            tracing::warn!(call_id = %slot.request.id, "tool did not stop after cancellation; ending the call anyway");
            let reason = reason.clone();
            let update = slot.cancel(&reason, None);
            self.emit(index, update, &mut effects);
        }
        effects
    }

    /// The confirmation timeout of call `index`'s prompt `correlation_id`
    /// passed: if that prompt is still open, the call ends Cancelled.
    pub fn on_confirm_timeout(&mut self, index: usize, correlation_id: &str) -> Vec<Effect> {
        let mut effects = Vec::new();
        let secs = self.confirmation_timeout.map_or(0.0, |d| d.as_secs_f64());
        if let Some(slot) = self.calls.get_mut(index)
            && matches!(&slot.state,
                CallState::AwaitingApproval { correlation_id: c, .. } if c == correlation_id)
        {
            let reason = format!(
                "Confirmation timed out: no answer within {secs} s, so the call was cancelled."
            );
            let update = slot.cancel(&reason, None);
            self.emit(index, update, &mut effects);
        }
        effects
    }
}

/// The stream event of `slot`'s `update`.
fn call_update(slot: &CallSlot, update: StateUpdate) -> BatchEvent {
    BatchEvent::CallUpdate {
        call_id: slot.request.id.clone(),
        tool_name: slot.request.name.clone(),
        update,
    }
}

#[cfg(test)]
mod tests {
    //! The wave rules of DESIGN §4 as tables, without a runtime: a harness
    //! plays the session's part (performs no effect, records them, feeds
    //! answers and outcomes back).

    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::policy::ConfirmationOutcome as O;
    use crate::scheduler::ConfirmError;
    use crate::scheduler::events::ConfirmRequest;
    use crate::tools::{
        Args, BoxFuture, ConfirmationDetails, Declaration, ExecContext, Subject, Tool, ToolError,
        ToolKind, UpdateTopicTool,
    };

    /// A tool that is only declared and built: the harness never runs it.
    struct Fake(Declaration);

    struct FakeInvocation {
        path: String,
    }

    impl Invocation for FakeInvocation {
        fn subject(&self) -> Subject {
            Subject::File {
                path: self.path.clone(),
            }
        }
        fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
            Ok(ConfirmationDetails::Info {
                prompt: self.path.clone(),
            })
        }
        fn execute(self: Arc<Self>, _ctx: ExecContext) -> BoxFuture<ToolOutcome> {
            Box::pin(async { unreachable!("the batch engine never runs a tool") })
        }
    }

    impl Tool for Fake {
        fn declaration(&self) -> &Declaration {
            &self.0
        }
        fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
            let path = args.get("path").and_then(|p| p.as_str()).unwrap_or("f");
            Ok(Arc::new(FakeInvocation { path: path.into() }))
        }
        fn with_new_content(&self, args: &Args, new_content: &str) -> Option<Args> {
            (self.0.kind == ToolKind::Edit).then(|| {
                let mut args = args.clone();
                args.insert("content".into(), json!(new_content));
                args
            })
        }
    }

    fn fake(name: &str, kind: ToolKind, parallelizable: bool, read_only: bool) -> Arc<dyn Tool> {
        Arc::new(Fake(Declaration {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
            kind,
            parallelizable,
            read_only,
        }))
    }

    /// `R` read (parallel, read-only), `W` an edit (alone; asks in default
    /// mode), `P` a parallel tool with side effects (asks in default mode).
    fn registry() -> Registry {
        Registry::new(vec![
            fake("R", ToolKind::Read, true, true),
            fake("W", ToolKind::Edit, false, false),
            fake("P", ToolKind::Other, true, false),
            Arc::new(UpdateTopicTool::new()),
        ])
        .expect("registry")
    }

    /// A call `id` to `tool`; a trailing `!` on the tool sets
    /// `wait_for_previous`.
    fn call(id: &str, tool: &str) -> CallRequest {
        let (name, wait) = match tool.strip_suffix('!') {
            Some(name) => (name, true),
            None => (tool, false),
        };
        let mut args = Args::new();
        if name == TOPIC_TOOL_NAME {
            args.insert("topic".into(), json!("the topic"));
        } else {
            args.insert("path".into(), json!(format!("{id}.txt")));
        }
        CallRequest {
            id: id.into(),
            name: name.into(),
            args: Arc::new(args),
            wait_for_previous: wait,
            client_initiated: false,
        }
    }

    struct Harness {
        batch: Batch,
        registry: Registry,
        policy: PolicyHandle,
        rules: SessionRules,
        mode: ApprovalMode,
        /// Every state update, as (call id, update).
        updates: Vec<(String, StateUpdate)>,
        /// Executions started, one wave per `step` that started any.
        waves: Vec<Vec<String>>,
        /// Prompts being prepared: (index, had a policy reason).
        preparing: Vec<(usize, bool)>,
        /// Open prompts' correlation ids by call id (latest).
        prompts: BTreeMap<String, String>,
        guards: Vec<usize>,
        topic: Option<String>,
        completed: Option<Vec<FunctionResponse>>,
        /// Tools of the "always" rules recorded answers asked for.
        always: Vec<String>,
    }

    impl Harness {
        fn new(calls: Vec<CallRequest>, mode: ApprovalMode) -> Self {
            Self::with_answers(calls, mode, &[])
        }

        /// A batch taken over with answers its stopped replica recorded.
        fn with_answers(
            calls: Vec<CallRequest>,
            mode: ApprovalMode,
            answered: &[(String, O, Option<String>)],
        ) -> Self {
            let registry = registry();
            let (batch, effects) = Batch::start(BatchStart {
                id: "b".into(),
                session_id: "s",
                calls,
                interactive: true,
                trace_parent: &Default::default(),
                registry: &registry,
                token: CancellationToken::new(),
                metrics: Arc::new(Metrics::new().expect("metrics")),
                confirmation_timeout: Some(Duration::from_secs(60)),
                outcome_unknown: &[],
                principal: "alice".into(),
                workspace: "".into(),
                ended: &[],
                answered,
            });
            let mut h = Self {
                batch,
                registry,
                policy: PolicyHandle::default(),
                rules: SessionRules::default(),
                mode,
                updates: Vec::new(),
                waves: Vec::new(),
                preparing: Vec::new(),
                prompts: BTreeMap::new(),
                guards: Vec::new(),
                topic: None,
                completed: None,
                always: Vec::new(),
            };
            h.record(effects);
            h
        }

        fn id(&self, index: usize) -> String {
            self.batch.calls[index].request.id.clone()
        }

        fn index(&self, id: &str) -> usize {
            self.batch.find(id).expect("known call")
        }

        fn record(&mut self, effects: Vec<Effect>) {
            let mut wave = Vec::new();
            for effect in effects {
                match effect {
                    Effect::Emit(BatchEvent::CallUpdate {
                        call_id, update, ..
                    }) => {
                        if let StateUpdate::AwaitingApproval { correlation_id, .. } = &update {
                            self.prompts.insert(call_id.clone(), correlation_id.clone());
                        }
                        self.updates.push((call_id, update));
                    }
                    Effect::Emit(other) => panic!("the batch emits call updates only: {other:?}"),
                    Effect::PreparePrompt { index, reason, .. } => {
                        self.preparing.push((index, reason.is_some()))
                    }
                    Effect::Execute { index, .. } => wave.push(self.id(index)),
                    Effect::ArmConfirmTimeout { .. } => {}
                    Effect::ArmCancelGuard { index } => self.guards.push(index),
                    Effect::Topic(t) => self.topic = Some(t),
                    Effect::Always(grant) => self.always.push(grant.tool_name),
                    Effect::Completed { responses, .. } => {
                        assert!(self.completed.is_none(), "completed twice");
                        self.completed = Some(responses);
                    }
                }
            }
            if !wave.is_empty() {
                self.waves.push(wave);
            }
        }

        fn step(&mut self) {
            let decider = Decider {
                policy: &self.policy,
                mode: self.mode,
                rules: &self.rules,
                interactive: self.batch.interactive(),
            };
            let effects = self.batch.step(&decider);
            self.record(effects);
        }

        /// Builds every prompt being prepared.
        fn prompts_ready(&mut self) {
            for (index, _) in std::mem::take(&mut self.preparing) {
                let result = self.batch.calls[index]
                    .tool
                    .as_ref()
                    .map(|_| ConfirmationDetails::Info { prompt: "p".into() })
                    .ok_or_else(|| ToolError::invalid_params("no tool"));
                let decider = Decider {
                    policy: &self.policy,
                    mode: self.mode,
                    rules: &self.rules,
                    interactive: true,
                };
                let effects = self.batch.on_prompt_ready(&decider, index, result, None);
                self.record(effects);
            }
        }

        fn confirm(
            &mut self,
            id: &str,
            outcome: O,
            new_content: Option<&str>,
        ) -> Result<(), ConfirmError> {
            let index = self.index(id);
            let req = ConfirmRequest {
                session_id: "s".into(),
                call_id: id.into(),
                correlation_id: self.prompts.get(id).cloned().unwrap_or_default(),
                outcome,
                new_content: new_content.map(str::to_string),
                principal: "alice".into(),
            };
            let confirmed = self.batch.on_confirm(index, req, &self.registry)?;
            self.record(confirmed.effects);
            if let Some(grant) = confirmed.always {
                self.rules
                    .allow_always(&grant.tool_name, &grant.subject, grant.scope);
                self.mode = crate::policy::outcomes::mode_after_always(self.mode, grant.kind);
                let decider = Decider {
                    policy: &self.policy,
                    mode: self.mode,
                    rules: &self.rules,
                    interactive: true,
                };
                let effects = self.batch.approve_open_prompts(&decider);
                self.record(effects);
            }
            Ok(())
        }

        fn cancel(&mut self, reason: &str) -> u32 {
            let (count, effects) = self.batch.cancel(reason);
            self.record(effects);
            count
        }

        fn succeed(&mut self, id: &str) {
            let index = self.index(id);
            let outcome = ToolOutcome::Success {
                output: json!(format!("{id} done")),
                result: self.batch.calls[index].request.args.as_ref().clone(),
            };
            let effects = self.batch.on_executed(index, outcome, "gone");
            self.record(effects);
        }

        /// Steps, finishing every execution with success, until the batch
        /// completes or waits on something else.
        fn run(&mut self) {
            loop {
                let before = self.waves.len();
                self.step();
                if self.completed.is_some() || self.waves.len() == before {
                    return;
                }
                for id in self.waves.last().cloned().unwrap_or_default() {
                    self.succeed(&id);
                }
            }
        }

        /// Each call's states, as reported, in order.
        fn states(&self, id: &str) -> Vec<&'static str> {
            self.updates
                .iter()
                .filter(|(c, _)| c == id)
                .map(|(_, u)| update_name(u))
                .collect()
        }

        fn cancel_reason(&self, id: &str) -> Option<&str> {
            self.updates.iter().rev().find_map(|(c, u)| match u {
                StateUpdate::Cancelled { reason, .. } if c == id => Some(reason.as_str()),
                _ => None,
            })
        }

        /// DESIGN §3: every call ends in exactly one terminal state, last,
        /// and the completed responses are one per call in request order.
        fn assert_each_call_ended_once(&self, request_ids: &[&str]) {
            for id in request_ids {
                let terminal: Vec<_> = self
                    .updates
                    .iter()
                    .filter(|(c, u)| c == id && u.is_terminal())
                    .collect();
                assert_eq!(terminal.len(), 1, "call {id}: {:?}", self.states(id));
                let last = self.updates.iter().rev().find(|(c, _)| c == id);
                assert!(last.is_some_and(|(_, u)| u.is_terminal()), "call {id}");
            }
            let responses = self.completed.as_ref().expect("the batch completed");
            let ids: Vec<&str> = responses.iter().map(|r| r.id.as_str()).collect();
            assert_eq!(ids, request_ids);
        }
    }

    fn update_name(u: &StateUpdate) -> &'static str {
        match u {
            StateUpdate::Validating { .. } => "validating",
            StateUpdate::Scheduled { .. } => "scheduled",
            StateUpdate::AwaitingApproval { .. } => "awaiting_approval",
            StateUpdate::Executing(_) => "executing",
            StateUpdate::Success { .. } => "success",
            StateUpdate::Error { .. } => "error",
            StateUpdate::Cancelled { .. } => "cancelled",
        }
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| i.to_string()).collect()
    }

    #[test]
    fn recorded_answers_apply_instead_of_prompts_in_a_batch_taken_over() {
        let answered = [
            ("w".to_string(), O::ProceedAlways, None),
            ("x".to_string(), O::Cancel, None),
        ];
        let mut h = Harness::with_answers(
            vec![call("w", "W"), call("x", "W"), call("y", "W")],
            ApprovalMode::Default,
            &answered,
        );
        h.run();
        // Nothing is prompted: w runs on its answer (asking for its rule),
        // x is denied and the call queued behind it cancelled, as after a
        // Confirm.
        assert!(h.preparing.is_empty(), "{:?}", h.preparing);
        assert_eq!(
            h.states("w"),
            ["validating", "scheduled", "executing", "success"]
        );
        assert_eq!(h.states("x"), ["validating", "cancelled"]);
        assert_eq!(h.cancel_reason("x"), Some(USER_DENIED_REASON));
        assert_eq!(h.states("y"), ["validating", "cancelled"]);
        assert_eq!(h.always, ["W"]);
        assert!(h.completed.is_some());
        h.assert_each_call_ended_once(&["w", "x", "y"]);
    }

    #[test]
    fn waves_take_the_head_and_every_following_parallelizable_call() {
        // (tools in request order, waves by call index)
        let table: &[(&[&str], &[&[usize]])] = &[
            (&["R", "R", "W", "R", "R"], &[&[0, 1], &[2], &[3, 4]]),
            // wait_for_previous splits a wave and runs alone.
            (&["R", "R", "R!", "R", "R"], &[&[0, 1], &[2], &[3, 4]]),
            (&["R", "R!", "R!"], &[&[0], &[1], &[2]]),
            (&["W", "W", "R"], &[&[0], &[1], &[2]]),
            (&["P", "R", "P"], &[&[0, 1, 2]]),
            // A call created in Error never executes, and does not split.
            (&["R", "nope", "R", "W"], &[&[0, 2], &[3]]),
            (&["nope"], &[]),
        ];
        for (tools, want) in table {
            let calls = tools
                .iter()
                .enumerate()
                .map(|(i, t)| call(&i.to_string(), t))
                .collect();
            let mut h = Harness::new(calls, ApprovalMode::Yolo);
            h.run();
            let want: Vec<Vec<String>> = want
                .iter()
                .map(|w| w.iter().map(|i| i.to_string()).collect())
                .collect();
            assert_eq!(h.waves, want, "{tools:?}");
            let ids = ids(tools.len());
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            h.assert_each_call_ended_once(&ids);
            assert_eq!(h.batch.phase, Phase::Done);
        }
    }

    #[test]
    fn a_run_call_goes_validating_scheduled_executing_success() {
        let mut h = Harness::new(
            vec![call("a", "R"), call("x", "nope")],
            ApprovalMode::Default,
        );
        h.run();
        assert_eq!(
            h.states("a"),
            ["validating", "scheduled", "executing", "success"]
        );
        assert_eq!(h.states("x"), ["error"]);
        h.assert_each_call_ended_once(&["a", "x"]);
    }

    #[test]
    fn the_topic_runs_first_and_alone_and_responses_keep_request_order() {
        let calls = vec![
            call("a", "R"),
            call("b", "W"),
            call("t", TOPIC_TOOL_NAME),
            call("c", "R"),
        ];
        let mut h = Harness::new(calls, ApprovalMode::Yolo);
        h.run();
        assert_eq!(h.waves, [vec!["t"], vec!["a"], vec!["b"], vec!["c"]]);
        assert_eq!(h.topic.as_deref(), Some("the topic"));
        h.assert_each_call_ended_once(&["a", "b", "t", "c"]);
    }

    #[test]
    fn a_rejected_call_cancels_the_queued_calls_and_spares_active_siblings() {
        // Wave {a, b, c}: a and c ask, b is allowed; d and e are queued.
        let calls = vec![
            call("a", "P"),
            call("b", "R"),
            call("c", "P"),
            call("d", "W"),
            call("e", "R"),
        ];
        let mut h = Harness::new(calls, ApprovalMode::Default);
        h.step();
        assert_eq!(h.preparing.iter().map(|p| p.0).collect::<Vec<_>>(), [0, 2]);
        assert!(h.preparing.iter().all(|p| p.1), "the policy's reason");
        h.prompts_ready();
        h.confirm("a", O::Cancel, None).expect("rejected");
        assert_eq!(h.cancel_reason("a"), Some(USER_DENIED_REASON));
        for id in ["d", "e"] {
            assert_eq!(h.states(id), ["validating", "cancelled"], "{id}");
            assert_eq!(h.cancel_reason(id), Some(REJECTED_SIBLING_REASON));
        }
        assert_eq!(h.states("b"), ["validating", "scheduled"]);
        assert_eq!(h.states("c"), ["validating", "awaiting_approval"]);
        // The sibling's prompt still counts; the wave runs once it is answered.
        h.step();
        assert!(h.waves.is_empty());
        h.confirm("c", O::ProceedOnce, None).expect("approved");
        h.run();
        assert_eq!(h.waves, [vec!["b", "c"]]);
        assert_eq!(h.states("c").last(), Some(&"success"));
        h.assert_each_call_ended_once(&["a", "b", "c", "d", "e"]);
    }

    #[test]
    fn cancel_in_each_phase_ends_every_open_call_once() {
        const REASON: &str = "Cancelled by the client.";
        // Deciding, a prompt being prepared: its late details are ignored.
        let mut h = Harness::new(vec![call("w", "W"), call("r", "R")], ApprovalMode::Default);
        h.step();
        assert_eq!(h.cancel(REASON), 2);
        h.prompts_ready();
        assert_eq!(h.states("w"), ["validating", "cancelled"]);
        h.step();
        h.assert_each_call_ended_once(&["w", "r"]);

        // Deciding, a prompt open: its confirmation timeout later does nothing.
        let mut h = Harness::new(vec![call("w", "W")], ApprovalMode::Default);
        h.step();
        h.prompts_ready();
        let cid = h.prompts["w"].clone();
        assert_eq!(h.cancel(REASON), 1);
        assert!(h.batch.on_confirm_timeout(0, &cid).is_empty());
        assert_eq!(
            h.confirm("w", O::ProceedOnce, None),
            Err(ConfirmError::NotAwaitingApproval {
                call_id: "w".into()
            })
        );
        h.step();
        h.assert_each_call_ended_once(&["w"]);
        assert_eq!(h.cancel_reason("w"), Some(REASON));

        // Executing: the running call ends when its tool stopped, keeping
        // partial output; queued calls end at once; a late result is dropped.
        let mut h = Harness::new(vec![call("a", "R"), call("w", "W")], ApprovalMode::Yolo);
        h.step();
        assert_eq!(h.waves, [vec!["a"]]);
        assert_eq!(h.cancel(REASON), 2);
        assert_eq!(h.guards, [0]);
        assert_eq!(h.cancel("again"), 0, "nothing left to cancel");
        assert_eq!(h.states("a"), ["validating", "scheduled", "executing"]);
        assert!(
            h.batch
                .on_progress(0, Progress::Output("x".into()))
                .is_empty()
        );
        let effects = h.batch.on_executed(
            0,
            ToolOutcome::Cancelled {
                partial_output: Some("part".into()),
            },
            "gone",
        );
        h.record(effects);
        assert_eq!(h.cancel_reason("a"), Some(REASON));
        let (_, last) = h.updates.last().expect("an update");
        assert!(
            matches!(last, StateUpdate::Cancelled { response, .. } if response.response.get("output") == Some(&json!("part")))
        );
        assert!(h.batch.on_cancel_guard(0).is_empty(), "already ended");
        h.step();
        h.assert_each_call_ended_once(&["a", "w"]);

        // Executing, a tool that ignores its token: the guard ends it.
        let mut h = Harness::new(vec![call("a", "R")], ApprovalMode::Yolo);
        h.step();
        h.cancel(REASON);
        let effects = h.batch.on_cancel_guard(0);
        h.record(effects);
        h.succeed("a"); // late: dropped
        h.step();
        h.assert_each_call_ended_once(&["a"]);
        assert_eq!(h.cancel_reason("a"), Some(REASON));

        // Done: nothing to cancel.
        let mut h = Harness::new(vec![call("a", "R")], ApprovalMode::Yolo);
        h.run();
        let (count, effects) = h.batch.cancel(REASON);
        assert_eq!((count, effects.len()), (0, 0));
        h.assert_each_call_ended_once(&["a"]);
    }

    /// An output over BatchCompleted's budget but within the output cap
    /// reaches its terminal event whole; only BatchCompleted is cut, with
    /// a note that points to the terminal event.
    #[test]
    fn a_large_output_is_whole_in_its_terminal_event_and_cut_only_in_batch_completed() {
        let mut h = Harness::new(vec![call("a", "R")], ApprovalMode::Yolo);
        h.step();
        let big = "x".repeat(MAX_RESPONSES_BYTES + 600_000);
        let effects = h.batch.on_executed(
            0,
            ToolOutcome::Success {
                output: json!(big),
                result: Default::default(),
            },
            "gone",
        );
        h.record(effects);
        h.step();
        h.assert_each_call_ended_once(&["a"]);
        let (_, last) = h.updates.last().expect("an update");
        let StateUpdate::Success { response, .. } = last else {
            panic!("{last:?}")
        };
        assert_eq!(response.response.get("output"), Some(&json!(big)));
        let completed = h.completed.as_ref().expect("completed");
        let cut = completed[0].response["output"].as_str().unwrap();
        assert!(cut.len() < MAX_RESPONSES_BYTES, "{}", cut.len());
        assert!(cut.starts_with("xxxx"));
        assert!(
            cut.contains("the call's own terminal event carried them"),
            "{}",
            &cut[cut.len() - 200..]
        );
    }

    #[test]
    fn modify_with_editor_re_prompts_with_a_new_correlation_id() {
        let mut h = Harness::new(vec![call("w", "W")], ApprovalMode::Default);
        h.step();
        h.prompts_ready();
        let first = h.prompts["w"].clone();
        let StateUpdate::AwaitingApproval { outcomes, .. } = &h.updates.last().expect("prompt").1
        else {
            panic!("a prompt");
        };
        assert!(outcomes.contains(&O::ModifyWithEditor));
        h.confirm("w", O::ModifyWithEditor, Some("new text"))
            .expect("modified");
        assert_eq!(h.preparing, [(0, false)], "a re-prompt, no policy reason");
        assert_eq!(
            h.batch.calls[0].request.args.get("content"),
            Some(&json!("new text"))
        );
        h.prompts_ready();
        let second = h.prompts["w"].clone();
        assert_ne!(first, second);
        let StateUpdate::AwaitingApproval { reason, .. } = &h.updates.last().expect("prompt").1
        else {
            panic!("a prompt");
        };
        assert!(reason.contains("default mode"), "{reason}");
        // The old prompt's id no longer answers.
        h.prompts.insert("w".into(), first.clone());
        assert_eq!(
            h.confirm("w", O::ProceedOnce, None),
            Err(ConfirmError::StaleCorrelation {
                call_id: "w".into(),
                given: first
            })
        );
        h.prompts.insert("w".into(), second);
        h.confirm("w", O::ProceedOnce, None).expect("approved");
        h.run();
        assert_eq!(
            h.states("w"),
            [
                "validating",
                "awaiting_approval",
                "awaiting_approval",
                "scheduled",
                "executing",
                "success"
            ]
        );
        h.assert_each_call_ended_once(&["w"]);
    }

    #[test]
    fn always_on_an_edit_switches_to_auto_edit_and_approves_open_siblings() {
        // Two parallel prompts; "always" on one approves the other when the
        // new rule covers it (same tool and path: Subject::File).
        let mut p2 = call("q", "P");
        p2.args = call("p", "P").args;
        let mut h = Harness::new(vec![call("p", "P"), p2], ApprovalMode::Default);
        h.step();
        h.prompts_ready();
        h.confirm("p", O::ProceedAlways, None).expect("approved");
        assert_eq!(
            h.states("q"),
            ["validating", "awaiting_approval", "scheduled"]
        );
        assert_eq!(h.mode, ApprovalMode::Default, "not an edit");
        h.run();
        h.assert_each_call_ended_once(&["p", "q"]);

        let mut h = Harness::new(vec![call("w", "W"), call("v", "W")], ApprovalMode::Default);
        h.step();
        h.prompts_ready();
        h.confirm("w", O::ProceedAlways, None).expect("approved");
        assert_eq!(h.mode, ApprovalMode::AutoEdit);
        h.run();
        // The next edit is allowed by the new mode without a prompt.
        assert_eq!(
            h.states("v"),
            ["validating", "scheduled", "executing", "success"]
        );
        h.assert_each_call_ended_once(&["w", "v"]);
    }

    #[test]
    fn a_non_interactive_batch_turns_ask_into_an_error_and_an_outcome_not_offered_is_refused() {
        let registry = registry();
        let (mut batch, _) = Batch::start(BatchStart {
            id: "b".into(),
            session_id: "s",
            calls: vec![call("w", "W")],
            interactive: false,
            trace_parent: &Default::default(),
            registry: &registry,
            token: CancellationToken::new(),
            metrics: Arc::new(Metrics::new().expect("metrics")),
            confirmation_timeout: None,
            outcome_unknown: &[],
            principal: "alice".into(),
            workspace: "".into(),
            ended: &[],
            answered: &[],
        });
        let policy = PolicyHandle::default();
        let rules = SessionRules::default();
        let decider = Decider {
            policy: &policy,
            mode: ApprovalMode::Default,
            rules: &rules,
            interactive: false,
        };
        let effects = batch.step(&decider);
        assert!(effects.iter().any(|e| matches!(e,
            Effect::Emit(BatchEvent::CallUpdate { update: StateUpdate::Error { kind: ErrorKind::PolicyViolation, message, .. }, .. })
                if message.starts_with("Approval required but the batch is non-interactive"))));
        assert!(matches!(effects.last(), Some(Effect::Completed { .. })));

        let mut h = Harness::new(vec![call("p", "P")], ApprovalMode::Default);
        h.step();
        h.prompts_ready();
        assert!(matches!(
            h.confirm("p", O::ModifyWithEditor, None),
            Err(ConfirmError::OutcomeNotOffered { .. })
        ));
        h.confirm("p", O::ProceedOnce, None).expect("approved");
        h.run();
        h.assert_each_call_ended_once(&["p"]);
    }

    #[test]
    fn a_confirmation_timeout_cancels_only_the_prompt_it_was_armed_for() {
        let mut h = Harness::new(vec![call("w", "W")], ApprovalMode::Default);
        h.step();
        h.prompts_ready();
        let cid = h.prompts["w"].clone();
        assert!(h.batch.on_confirm_timeout(0, "an older prompt").is_empty());
        let effects = h.batch.on_confirm_timeout(0, &cid);
        h.record(effects);
        assert_eq!(
            h.cancel_reason("w"),
            Some("Confirmation timed out: no answer within 60 s, so the call was cancelled.")
        );
        h.step();
        h.assert_each_call_ended_once(&["w"]);
    }
}
