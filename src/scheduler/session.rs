//! The session actor: one task per session owns its queue of batches, the
//! active batch's calls, its approval mode and "always allow" rules. gRPC
//! handlers only send it commands; tool tasks report back on an internal
//! channel. Nothing here is shared or locked.
//!
//! The processing loop follows Gemini CLI's scheduler: take the next wave
//! (the head call, and every following parallelizable call if the head is
//! parallelizable); (1) decide policy for every member, prompting where asked;
//! (2) once every member is Scheduled or terminal, execute the Scheduled ones
//! concurrently; (3) when all are terminal, take the next wave. A batch ends
//! with every call's function response in request order, then the next queued
//! batch starts.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::call::{CallSlot, CallState, error_update};
use super::events::{
    BatchEvent, BatchRequest, CallEnd, CallRequest, CallSummary, CancelRequest, CancelSummary,
    ConfirmRequest, ConfirmationOutcome, Event, FunctionResponse, MAX_RESPONSES_BYTES, StateUpdate,
    fit_responses,
};
use super::{CancelError, ConfirmError, HubCommand, Metrics, Shared};
use crate::policy::{
    AlwaysScope, ApprovalMode, Decision, DecisionSource, PolicyInput, SessionRules,
};
use crate::tools::{
    ConfirmationDetails, ErrorKind, ExecContext, Invocation, Progress, TOPIC_TOOL_NAME, ToolError,
    ToolKind, ToolOutcome,
};

/// Calls of completed batches a session remembers (id and terminal state),
/// so that a late Confirm (e.g. racing the confirmation timeout) is told the
/// call ended (FAILED_PRECONDITION) rather than that it never existed
/// (NOT_FOUND). About 100 bytes each.
const RECENT_ENDED_CALLS: usize = 1024;
/// Reason given to calls cancelled because an earlier call of their batch
/// was rejected, as Gemini CLI does.
const REJECTED_SIBLING_REASON: &str =
    "Cancelled because an earlier call of the batch was rejected by the user.";
/// Reason of a rejected prompt (Gemini CLI's wording).
const USER_DENIED_REASON: &str = "User denied execution.";
/// Time a tool gets to stop after its token was cancelled before the call is
/// ended Cancelled regardless (covers a tool that ignores its token).
const CANCEL_GUARD: Duration = Duration::from_secs(5);
/// Slack over the execution timeout before the scheduler stops waiting for a
/// tool that does not enforce its own timeout.
const TIMEOUT_SLACK: Duration = Duration::from_secs(5);

/// Sends a batch's events to its stream. The events of one step of the
/// session (e.g. Accepted, Started, Validating, Scheduled, Executing for an
/// allowed call) are held and sent together when the step ends
/// ([`EventSink::flush`], and on drop): the stream wakes once and encodes
/// them into one HTTP/2 write instead of racing the session event by event.
/// Each event keeps the time it was emitted. A gone client is not an error
/// here (its stream's drop tells the session).
pub(crate) struct EventSink {
    tx: mpsc::UnboundedSender<Vec<Event>>,
    held: RefCell<Vec<Event>>,
}

impl EventSink {
    pub fn new(tx: mpsc::UnboundedSender<Vec<Event>>) -> Self {
        Self {
            tx,
            held: RefCell::new(Vec::new()),
        }
    }

    fn emit(&self, event: BatchEvent) {
        self.held.borrow_mut().push(Event {
            at: SystemTime::now(),
            event,
        });
    }

    /// Sends the held events, if any, in one message.
    fn flush(&self) {
        let held = std::mem::take(&mut *self.held.borrow_mut());
        if !held.is_empty() {
            let _ = self.tx.send(held);
        }
    }
}

impl Drop for EventSink {
    fn drop(&mut self) {
        self.flush();
    }
}

/// What a [`super::BatchStream`] holds of its session: a weak sender (a
/// stream outliving its session keeps nothing alive) to report that it was
/// dropped before its batch completed. A stream that ran to `Completed` says
/// nothing, so the normal path costs no message and no task.
#[derive(Clone)]
pub(crate) struct SessionLink(mpsc::WeakUnboundedSender<Internal>);

impl SessionLink {
    /// Tells the session that the client went away from `batch_id`.
    pub fn batch_dropped(&self, batch_id: String) {
        if let Some(tx) = self.0.upgrade() {
            let _ = tx.send(Internal::BatchDropped { batch_id });
        }
    }
}

/// The channel a session's tasks and streams report on, made by the hub so
/// that it can hand out [`SessionLink`]s before the session runs.
pub(crate) fn internal_channel() -> (SessionLink, InternalChannel) {
    let (tx, rx) = mpsc::unbounded_channel();
    (SessionLink(tx.downgrade()), InternalChannel { tx, rx })
}

/// The session's end of [`internal_channel`].
pub(crate) struct InternalChannel {
    tx: mpsc::UnboundedSender<Internal>,
    rx: mpsc::UnboundedReceiver<Internal>,
}

/// Commands from the hub.
pub(crate) enum SessionCommand {
    Schedule {
        batch_id: String,
        request: BatchRequest,
        events: EventSink,
        token: CancellationToken,
    },
    Confirm {
        request: ConfirmRequest,
        reply: oneshot::Sender<Result<(), ConfirmError>>,
    },
    Cancel {
        request: CancelRequest,
        reply: oneshot::Sender<Result<CancelSummary, CancelError>>,
    },
}

/// Reports from tasks the session spawned and from its streams.
pub(crate) enum Internal {
    PromptReady {
        batch_id: String,
        index: usize,
        result: Result<ConfirmationDetails, ToolError>,
        reason: Option<(String, DecisionSource)>,
    },
    Progress {
        batch_id: String,
        index: usize,
        progress: Progress,
    },
    Executed {
        batch_id: String,
        index: usize,
        outcome: ToolOutcome,
    },
    /// The batch's stream was dropped before it completed: the client went
    /// away.
    BatchDropped {
        batch_id: String,
    },
    ConfirmTimeout {
        batch_id: String,
        index: usize,
        correlation_id: String,
    },
    CancelGuard {
        batch_id: String,
        index: usize,
    },
}

struct PendingBatch {
    id: String,
    request: BatchRequest,
    events: EventSink,
    token: CancellationToken,
}

struct ActiveBatch {
    id: String,
    /// Calls in execution order (topic first).
    calls: Vec<CallSlot>,
    /// `request_order[i]` is the index in `calls` of the i-th requested call.
    request_order: Vec<usize>,
    /// Next call not yet part of a wave.
    cursor: usize,
    /// Indices of the current wave's members.
    wave: Vec<usize>,
    wave_executing: bool,
    interactive: bool,
    events: EventSink,
    token: CancellationToken,
    metrics: Arc<Metrics>,
    /// The batch's span, parent of the calls' spans; ends when dropped.
    trace: crate::telemetry::BatchTrace,
}

impl ActiveBatch {
    /// Moves call `index` to `next` (see [`CallSlot::set`]), keeping the
    /// open-prompt gauge and the terminal-call counters.
    fn set(&mut self, index: usize, next: CallState) -> bool {
        let slot = &mut self.calls[index];
        let was_prompt = matches!(slot.state, CallState::AwaitingApproval { .. });
        let is_prompt = matches!(next, CallState::AwaitingApproval { .. });
        if !slot.set(next) {
            return false;
        }
        match (was_prompt, is_prompt) {
            (true, false) => self.metrics.prompts_open.dec(),
            (false, true) => self.metrics.prompts_open.inc(),
            _ => {}
        }
        if let CallState::Done(update) = &slot.state {
            let tool = slot.tool.as_ref().map(|t| t.declaration().name.as_str());
            self.metrics.call_finished(tool, update);
        }
        true
    }

    fn emit_update(&self, index: usize, update: StateUpdate) {
        let slot = &self.calls[index];
        self.events.emit(BatchEvent::CallUpdate {
            call_id: slot.request.id.clone(),
            tool_name: slot.request.name.clone(),
            update,
        });
    }

    /// Sets a terminal state and tells the client, once.
    fn finish(&mut self, index: usize, update: StateUpdate) -> bool {
        if self.set(index, CallState::Done(update.clone())) {
            self.emit_update(index, update);
            true
        } else {
            false
        }
    }

    fn find(&self, call_id: &str) -> Option<usize> {
        self.calls.iter().position(|c| c.request.id == call_id)
    }
}

/// The session actor's state.
pub(crate) struct Session {
    id: String,
    shared: Arc<Shared>,
    mode: ApprovalMode,
    /// Where this session's commands run (the server's level unless a batch
    /// chose a stricter one).
    sandbox: crate::sandbox::SharedSandbox,
    rules: SessionRules,
    topic: Option<String>,
    queue: VecDeque<PendingBatch>,
    active: Option<ActiveBatch>,
    /// The last [`RECENT_ENDED_CALLS`] calls of completed batches: call id
    /// and terminal state name, oldest first.
    ended: VecDeque<(String, &'static str)>,
    internal_tx: mpsc::UnboundedSender<Internal>,
    /// Commands processed, reported to the hub when idle so that it only
    /// retires a session that has no command in flight.
    processed: u64,
}

impl Session {
    /// Runs the session until the hub drops its sender. `token` (a child of
    /// the server's shutdown token) cancels every batch of the session.
    pub async fn run(
        id: String,
        shared: Arc<Shared>,
        mut commands: mpsc::UnboundedReceiver<SessionCommand>,
        internal: InternalChannel,
        token: CancellationToken,
    ) {
        let InternalChannel {
            tx: internal_tx,
            rx: mut internal_rx,
        } = internal;
        // One future for the session's life: re-created per message it would
        // register and deregister a waiter on the token each time.
        let shutdown = token.cancelled_owned();
        tokio::pin!(shutdown);
        let mut shut_down = false;
        let mut session = Session {
            id,
            mode: shared.config.default_mode,
            sandbox: shared.sandbox.clone(),
            shared,
            rules: SessionRules::default(),
            topic: None,
            queue: VecDeque::new(),
            active: None,
            ended: VecDeque::new(),
            internal_tx,
            processed: 0,
        };
        let ttl = session.shared.config.session_idle_ttl;
        // One timer, re-armed when the session becomes idle (or sees a
        // command while idle), not re-created for every message.
        let idle_timer = tokio::time::sleep(ttl);
        tokio::pin!(idle_timer);
        let mut armed = false;
        let mut idle_reported = false;
        loop {
            let idle = session.active.is_none() && session.queue.is_empty();
            if !idle {
                armed = false;
            } else if !armed {
                idle_timer.as_mut().reset(tokio::time::Instant::now() + ttl);
                armed = true;
                idle_reported = false;
            }
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    Some(cmd) => {
                        session.processed += 1;
                        armed = false;
                        session.handle(cmd);
                    }
                    None => break,
                },
                Some(msg) = internal_rx.recv() => session.handle_internal(msg),
                () = &mut shutdown, if !shut_down => {
                    shut_down = true;
                    session.drop_all();
                }
                () = &mut idle_timer, if idle && armed && !idle_reported => {
                    idle_reported = true;
                    let _ = session.shared.hub.try_send(HubCommand::SessionIdle {
                        session_id: session.id.clone(),
                        processed: session.processed,
                    });
                }
            }
            session.process();
            session.flush_events();
        }
        tracing::debug!(session = %session.id, "session retired");
    }

    /// Ends a step: what it emitted goes to the streams.
    fn flush_events(&self) {
        if let Some(batch) = &self.active {
            batch.events.flush();
        }
        for pending in &self.queue {
            pending.events.flush();
        }
    }

    // === commands ===

    fn handle(&mut self, cmd: SessionCommand) {
        match cmd {
            SessionCommand::Schedule {
                batch_id,
                request,
                events,
                token,
            } => {
                let ahead = self.queue.len() + usize::from(self.active.is_some());
                events.emit(BatchEvent::Accepted {
                    batch_id: batch_id.clone(),
                    queued: ahead > 0,
                    batches_ahead: ahead as u32,
                });
                self.shared.metrics.queued_batches.inc();
                self.queue.push_back(PendingBatch {
                    id: batch_id,
                    request,
                    events,
                    token,
                });
            }
            SessionCommand::Confirm { request, reply } => {
                let _ = reply.send(self.confirm(request));
            }
            SessionCommand::Cancel { request, reply } => {
                let _ = reply.send(self.cancel(request));
            }
        }
    }

    fn confirm(&mut self, req: ConfirmRequest) -> Result<(), ConfirmError> {
        let Some(batch) = self.active.as_mut() else {
            return Err(self.call_not_awaiting(&req.call_id));
        };
        let Some(index) = batch.find(&req.call_id) else {
            return Err(self.call_not_awaiting(&req.call_id));
        };
        let slot = &batch.calls[index];
        let CallState::AwaitingApproval {
            invocation,
            correlation_id,
            outcomes,
        } = &slot.state
        else {
            return Err(ConfirmError::NotAwaitingApproval {
                call_id: req.call_id,
            });
        };
        if *correlation_id != req.correlation_id {
            return Err(ConfirmError::StaleCorrelation {
                call_id: req.call_id,
                given: req.correlation_id,
            });
        }
        if !outcomes.contains(&req.outcome) {
            return Err(ConfirmError::OutcomeNotOffered {
                outcome: req.outcome,
                offered: outcomes.clone(),
            });
        }
        if req.outcome == ConfirmationOutcome::Cancel {
            slot.note_approval(req.outcome);
            self.reject(index);
            return Ok(());
        }
        // Apply inline new content first: on any error nothing changes.
        let mut invocation = invocation.clone();
        if let Some(content) = &req.new_content {
            let tool = slot.tool.clone().ok_or(ConfirmError::CannotModify {
                tool: slot.request.name.clone(),
            })?;
            let args = tool
                .with_new_content(&slot.request.args, content)
                .ok_or_else(|| ConfirmError::CannotModify {
                    tool: slot.request.name.clone(),
                })?;
            invocation = self
                .shared
                .registry
                .load()
                .build(&slot.request.name, &args)
                .map_err(|e| ConfirmError::InvalidNewContent { message: e.message })?;
            batch.calls[index].request.args = Arc::new(args);
        }
        batch.calls[index].note_approval(req.outcome);
        match req.outcome {
            ConfirmationOutcome::ModifyWithEditor => {
                batch.set(
                    index,
                    CallState::Validating {
                        invocation: invocation.clone(),
                        preparing_prompt: true,
                    },
                );
                let batch_id = batch.id.clone();
                self.prepare_prompt(batch_id, index, invocation, None);
            }
            outcome => {
                let always = match outcome {
                    ConfirmationOutcome::ProceedAlways | ConfirmationOutcome::ProceedAlwaysTool => {
                        Some(AlwaysScope::Narrow)
                    }
                    ConfirmationOutcome::ProceedAlwaysServer => Some(AlwaysScope::Server),
                    _ => None,
                };
                let slot = &batch.calls[index];
                if let Some(scope) = always {
                    self.rules
                        .allow_always(&slot.request.name, &invocation.subject(), scope);
                    let is_edit = slot
                        .tool
                        .as_ref()
                        .is_some_and(|t| t.declaration().kind == ToolKind::Edit);
                    if is_edit && self.mode == ApprovalMode::Default {
                        self.mode = ApprovalMode::AutoEdit;
                    }
                }
                if batch.set(index, CallState::Scheduled { invocation }) {
                    batch.emit_update(index, StateUpdate::Scheduled);
                }
                if always.is_some() {
                    self.approve_compatible_prompts();
                }
            }
        }
        Ok(())
    }

    /// After an "always" answer, other open prompts of the batch that the
    /// new rule (or mode) now allows proceed, as Gemini CLI does.
    fn approve_compatible_prompts(&mut self) {
        let Some(batch) = self.active.as_mut() else {
            return;
        };
        for index in batch.wave.clone() {
            let slot = &batch.calls[index];
            let (CallState::AwaitingApproval { invocation, .. }, Some(tool)) =
                (&slot.state, &slot.tool)
            else {
                continue;
            };
            let decision = decide(
                &self.shared,
                self.mode,
                &self.rules,
                batch.interactive,
                slot,
                tool,
                invocation.as_ref(),
            );
            if decision == Decision::Allow {
                let invocation = invocation.clone();
                if batch.set(index, CallState::Scheduled { invocation }) {
                    batch.emit_update(index, StateUpdate::Scheduled);
                }
            }
        }
    }

    /// Rejects the prompt of call `index`: it ends "User denied execution."
    /// and the calls still queued in its batch (not yet in a wave) are
    /// cancelled; active siblings of the wave go on.
    fn reject(&mut self, index: usize) {
        let Some(batch) = self.active.as_mut() else {
            return;
        };
        let update = batch.calls[index].cancelled(USER_DENIED_REASON, None);
        batch.finish(index, update);
        for i in batch.cursor..batch.calls.len() {
            if !batch.calls[i].state.is_terminal() {
                let update = batch.calls[i].cancelled(REJECTED_SIBLING_REASON, None);
                batch.finish(i, update);
            }
        }
    }

    fn call_not_awaiting(&self, call_id: &str) -> ConfirmError {
        let queued = self
            .queue
            .iter()
            .any(|b| b.request.calls.iter().any(|c| c.id == call_id));
        if queued {
            ConfirmError::NotAwaitingApproval {
                call_id: call_id.to_string(),
            }
        } else if let Some((_, state)) = self.ended.iter().rev().find(|(id, _)| id == call_id) {
            ConfirmError::AlreadyEnded {
                call_id: call_id.to_string(),
                state,
            }
        } else {
            ConfirmError::UnknownCall {
                session_id: self.id.clone(),
                call_id: call_id.to_string(),
            }
        }
    }

    fn cancel(&mut self, req: CancelRequest) -> Result<CancelSummary, CancelError> {
        let reason = if req.reason.trim().is_empty() {
            "Cancelled by the client.".to_string()
        } else {
            req.reason.clone()
        };
        let matches = |id: &str| req.batch_id.as_deref().is_none_or(|b| b == id);
        let known = self.active.as_ref().is_some_and(|b| matches(&b.id))
            || self.queue.iter().any(|b| matches(&b.id));
        if !known {
            return match req.batch_id {
                // Cancelling an idle session is not an error: nothing to do.
                None => Ok(CancelSummary::default()),
                Some(batch_id) => Err(CancelError::UnknownBatch {
                    session_id: self.id.clone(),
                    batch_id,
                }),
            };
        }
        let mut summary = CancelSummary::default();
        let mut kept = VecDeque::new();
        for pending in std::mem::take(&mut self.queue) {
            if matches(&pending.id) {
                summary.cancelled_batches += 1;
                summary.cancelled_calls += pending.request.calls.len() as u32;
                self.shared.metrics.queued_batches.dec();
                self.cancel_pending(pending, &reason);
            } else {
                kept.push_back(pending);
            }
        }
        self.queue = kept;
        if self.active.as_ref().is_some_and(|b| matches(&b.id)) {
            summary.cancelled_batches += 1;
            summary.cancelled_calls += self.cancel_active(&reason);
        }
        Ok(summary)
    }

    /// Cancels every non-terminal call of the active batch. Executing calls
    /// are stopped; they end Cancelled once their tool has stopped (the
    /// shell kills its process group), or after [`CANCEL_GUARD`].
    fn cancel_active(&mut self, reason: &str) -> u32 {
        let Some(batch) = self.active.as_mut() else {
            return 0;
        };
        let mut count = 0;
        for index in 0..batch.calls.len() {
            let slot = &mut batch.calls[index];
            match &mut slot.state {
                CallState::Done(_) => {}
                CallState::Executing {
                    token,
                    cancel_reason,
                    ..
                } => {
                    if cancel_reason.is_none() {
                        count += 1;
                        *cancel_reason = Some(reason.to_string());
                        token.cancel();
                        let tx = self.internal_tx.clone();
                        let batch_id = batch.id.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(CANCEL_GUARD).await;
                            let _ = tx.send(Internal::CancelGuard { batch_id, index });
                        });
                    }
                }
                _ => {
                    count += 1;
                    let update = slot.cancelled(reason, None);
                    batch.finish(index, update);
                }
            }
        }
        count
    }

    fn cancel_pending(&mut self, pending: PendingBatch, reason: &str) {
        for call in &pending.request.calls {
            remember_ended(&mut self.ended, &call.id, "cancelled");
        }
        cancel_pending(
            &self.shared.metrics,
            &self.shared.registry.load(),
            pending,
            reason,
        );
    }

    // === internal reports ===

    fn handle_internal(&mut self, msg: Internal) {
        match msg {
            Internal::BatchDropped { batch_id } => self.batch_dropped(&batch_id),
            Internal::PromptReady {
                batch_id,
                index,
                result,
                reason,
            } => self.prompt_ready(&batch_id, index, result, reason),
            Internal::Progress {
                batch_id,
                index,
                progress,
            } => {
                if let Some(batch) = self.active_batch(&batch_id)
                    && matches!(
                        batch.calls[index].state,
                        CallState::Executing {
                            cancel_reason: None,
                            ..
                        }
                    )
                {
                    batch.emit_update(index, StateUpdate::Executing(progress));
                }
            }
            Internal::Executed {
                batch_id,
                index,
                outcome,
            } => self.executed(&batch_id, index, outcome),
            Internal::ConfirmTimeout {
                batch_id,
                index,
                correlation_id,
            } => {
                let secs = self
                    .shared
                    .config
                    .confirmation_timeout
                    .map_or(0.0, |d| d.as_secs_f64());
                if let Some(batch) = self.active_batch(&batch_id)
                    && matches!(&batch.calls[index].state,
                        CallState::AwaitingApproval { correlation_id: c, .. } if *c == correlation_id)
                {
                    let reason = format!(
                        "Confirmation timed out: no answer within {secs} s, so the call was cancelled."
                    );
                    let update = batch.calls[index].cancelled(&reason, None);
                    batch.finish(index, update);
                }
            }
            Internal::CancelGuard { batch_id, index } => {
                if let Some(batch) = self.active_batch(&batch_id)
                    && let CallState::Executing {
                        cancel_reason: Some(reason),
                        ..
                    } = &batch.calls[index].state
                {
                    tracing::warn!(call_id = %batch.calls[index].request.id, "tool did not stop after cancellation; ending the call anyway");
                    let update = batch.calls[index].cancelled(&reason.clone(), None);
                    batch.finish(index, update);
                }
            }
        }
    }

    fn active_batch(&mut self, batch_id: &str) -> Option<&mut ActiveBatch> {
        self.active.as_mut().filter(|b| b.id == batch_id)
    }

    fn drop_reason(&self) -> &'static str {
        if self.shared.shutdown.is_cancelled() {
            "The server is shutting down."
        } else {
            "The client went away (stream closed)."
        }
    }

    /// The server is shutting down: every queued and running batch ends
    /// Cancelled, as if its client had gone.
    fn drop_all(&mut self) {
        let ids: Vec<String> = self
            .queue
            .iter()
            .map(|b| b.id.clone())
            .chain(self.active.as_ref().map(|b| b.id.clone()))
            .collect();
        for id in ids {
            self.batch_dropped(&id);
        }
    }

    fn batch_dropped(&mut self, batch_id: &str) {
        let reason = self.drop_reason();
        if let Some(pos) = self.queue.iter().position(|b| b.id == batch_id) {
            if let Some(pending) = self.queue.remove(pos) {
                self.shared.metrics.queued_batches.dec();
                self.cancel_pending(pending, reason);
            }
        } else if self.active.as_ref().is_some_and(|b| b.id == batch_id) {
            self.cancel_active(reason);
        }
    }

    fn prompt_ready(
        &mut self,
        batch_id: &str,
        index: usize,
        result: Result<ConfirmationDetails, ToolError>,
        reason: Option<(String, DecisionSource)>,
    ) {
        let timeout = self.shared.config.confirmation_timeout;
        let internal_tx = self.internal_tx.clone();
        let (reason, policy_rule) = match reason {
            Some((reason, source)) => (reason, Some(Box::new(source))),
            None => (
                format!(
                    "Approval required: '{}' has side effects and the session is in {} mode.",
                    self.active
                        .as_ref()
                        .and_then(|b| b.calls.get(index))
                        .map_or("", |c| c.request.name.as_str()),
                    crate::policy::mode_name(self.mode)
                ),
                None,
            ),
        };
        let Some(batch) = self.active_batch(batch_id) else {
            return;
        };
        let slot = &mut batch.calls[index];
        let CallState::Validating {
            invocation,
            preparing_prompt: true,
        } = &slot.state
        else {
            return; // cancelled meanwhile
        };
        let invocation = invocation.clone();
        let details = match result {
            Ok(d) => d,
            Err(e) => {
                let update = slot.error(e.kind, &e.message, None);
                batch.finish(index, update);
                return;
            }
        };
        let outcomes = offered_outcomes(&details, slot);
        let correlation_id = uuid::Uuid::new_v4().to_string();
        batch.set(
            index,
            CallState::AwaitingApproval {
                invocation,
                correlation_id: correlation_id.clone(),
                outcomes: outcomes.clone(),
            },
        );
        let deadline = timeout.map(|t| SystemTime::now() + t);
        batch.emit_update(
            index,
            StateUpdate::AwaitingApproval {
                correlation_id: correlation_id.clone(),
                details,
                outcomes,
                deadline,
                reason,
                policy_rule,
            },
        );
        if let Some(t) = timeout {
            let batch_id = batch_id.to_string();
            tokio::spawn(async move {
                tokio::time::sleep(t).await;
                let _ = internal_tx.send(Internal::ConfirmTimeout {
                    batch_id,
                    index,
                    correlation_id,
                });
            });
        }
    }

    fn executed(&mut self, batch_id: &str, index: usize, outcome: ToolOutcome) {
        let drop_reason = self.drop_reason();
        let Some(batch) = self.active_batch(batch_id) else {
            return; // a late result of a batch that is gone
        };
        let slot = &batch.calls[index];
        let CallState::Executing {
            started,
            cancel_reason,
            ..
        } = &slot.state
        else {
            return; // a late result of a call already ended: dropped
        };
        let duration = started.elapsed();
        let update = match (cancel_reason, outcome) {
            (Some(reason), outcome) => {
                let partial = match &outcome {
                    ToolOutcome::Cancelled { partial_output } => partial_output.clone(),
                    _ => None,
                };
                slot.cancelled(reason, partial.as_deref())
            }
            (None, ToolOutcome::Success { output, result }) => {
                let mut response =
                    FunctionResponse::success(&slot.request.id, &slot.request.name, output);
                fit_responses(std::slice::from_mut(&mut response), MAX_RESPONSES_BYTES);
                StateUpdate::Success {
                    response,
                    result,
                    duration,
                }
            }
            (None, ToolOutcome::Error(e)) => {
                slot.error(e.kind, &e.message, e.partial_output.as_deref())
            }
            (None, ToolOutcome::Cancelled { partial_output }) => {
                slot.cancelled(drop_reason, partial_output.as_deref())
            }
        };
        if let StateUpdate::Success { result, .. } = &update
            && slot.request.name == TOPIC_TOOL_NAME
            && let Some(topic) = result.get("topic").and_then(|t| t.as_str())
        {
            self.topic = Some(topic.to_string());
        }
        if let Some(batch) = self.active_batch(batch_id) {
            batch.finish(index, update);
        }
    }

    // === the processing loop ===

    /// Advances the session as far as it can without waiting.
    fn process(&mut self) {
        loop {
            if self.active.is_none() {
                let Some(pending) = self.queue.pop_front() else {
                    return;
                };
                self.shared.metrics.queued_batches.dec();
                self.start_batch(pending);
                continue;
            }
            if !self.advance() {
                return;
            }
        }
    }

    fn start_batch(&mut self, pending: PendingBatch) {
        let PendingBatch {
            id,
            request,
            events,
            token,
        } = pending;
        if token.is_cancelled() {
            self.cancel_pending(
                PendingBatch {
                    id,
                    request,
                    events,
                    token,
                },
                self.drop_reason(),
            );
            return;
        }
        if let Some(mode) = request.approval_mode {
            self.mode = mode;
        }
        // The hub accepted only levels the server allows.
        if let Some(sandbox) = request
            .sandbox_level
            .and_then(|level| self.shared.sandboxes.get(&level))
        {
            self.sandbox = sandbox.clone();
        }
        events.emit(BatchEvent::Started {
            batch_id: id.clone(),
        });
        events.flush();
        // Topic first, stable otherwise.
        let mut order: Vec<usize> = (0..request.calls.len()).collect();
        order.sort_by_key(|&i| request.calls[i].name != TOPIC_TOOL_NAME);
        let mut calls = Vec::with_capacity(order.len());
        let mut request_order = vec![0; order.len()];
        let trace = crate::telemetry::BatchTrace::start(
            &self.id,
            &id,
            request.calls.len(),
            request.interactive,
            &request.trace_parent,
        )
        .observed_by(self.shared.metrics.clone());
        let mut batch = ActiveBatch {
            id,
            calls: Vec::new(),
            request_order: Vec::new(),
            cursor: 0,
            wave: Vec::new(),
            wave_executing: false,
            interactive: request.interactive,
            events,
            token,
            metrics: self.shared.metrics.clone(),
            trace,
        };
        let mut initial = Vec::with_capacity(order.len());
        // One snapshot per batch: a registry swapped in meanwhile (MCP tool
        // lists changed) applies to later batches.
        let registry = self.shared.registry.load();
        let mut requested: Vec<Option<CallRequest>> = request.calls.into_iter().map(Some).collect();
        for (pos, &req_index) in order.iter().enumerate() {
            request_order[req_index] = pos;
            let Some(call) = requested[req_index].take() else {
                continue; // `order` is a permutation: never taken twice
            };
            let tool = registry.get(&call.name).ok().cloned();
            // An unknown tool or invalid arguments: created directly in Error.
            let (state, update) = match registry.build(&call.name, &call.args) {
                Ok(invocation) => (
                    CallState::Validating {
                        invocation,
                        preparing_prompt: false,
                    },
                    StateUpdate::Validating {
                        args: call.args.clone(),
                    },
                ),
                Err(e) => {
                    let update = error_update(&call, e.kind, &e.message, None);
                    let name = tool.as_ref().map(|t| t.declaration().name.as_str());
                    self.shared.metrics.call_finished(name, &update);
                    (CallState::Done(update.clone()), update)
                }
            };
            calls.push(CallSlot::new(call, tool, state, &batch.trace));
            initial.push(update);
        }
        batch.calls = calls;
        batch.request_order = request_order;
        for (index, update) in initial.into_iter().enumerate() {
            batch.emit_update(index, update);
        }
        self.active = Some(batch);
    }

    /// One step of the loop; returns whether anything changed.
    fn advance(&mut self) -> bool {
        let Some(batch) = self.active.as_mut() else {
            return false;
        };
        if !batch.wave.is_empty() {
            let all_terminal = batch
                .wave
                .iter()
                .all(|&i| batch.calls[i].state.is_terminal());
            if all_terminal {
                batch.wave.clear();
                batch.wave_executing = false;
                return true;
            }
            let ready = batch.wave.iter().all(|&i| {
                matches!(
                    batch.calls[i].state,
                    CallState::Scheduled { .. } | CallState::Done(_)
                )
            });
            if ready && !batch.wave_executing {
                batch.wave_executing = true;
                self.execute_wave();
                return true;
            }
            return false;
        }
        // Take the next wave: skip terminal calls, then the head and, if it
        // is parallelizable, every following parallelizable call.
        while batch.cursor < batch.calls.len() && batch.calls[batch.cursor].state.is_terminal() {
            batch.cursor += 1;
        }
        if batch.cursor == batch.calls.len() {
            self.complete_batch();
            return true;
        }
        let head = batch.cursor;
        let mut wave = vec![head];
        let mut next = head + 1;
        if batch.calls[head].parallelizable() {
            while next < batch.calls.len() {
                let slot = &batch.calls[next];
                if slot.state.is_terminal() {
                    next += 1;
                    continue;
                }
                if !slot.parallelizable() {
                    break;
                }
                wave.push(next);
                next += 1;
            }
        }
        batch.cursor = next;
        batch.wave = wave;
        self.decide_wave();
        true
    }

    /// Phase 1: the policy decision for every member of the wave.
    fn decide_wave(&mut self) {
        let Some(batch) = self.active.as_mut() else {
            return;
        };
        let mut prompts = Vec::new();
        for index in batch.wave.clone() {
            let slot = &batch.calls[index];
            let (
                CallState::Validating {
                    invocation,
                    preparing_prompt: false,
                },
                Some(tool),
            ) = (&slot.state, &slot.tool)
            else {
                continue;
            };
            let invocation = invocation.clone();
            let decision = decide(
                &self.shared,
                self.mode,
                &self.rules,
                batch.interactive,
                slot,
                tool,
                invocation.as_ref(),
            );
            match decision {
                Decision::Allow => {
                    if batch.set(index, CallState::Scheduled { invocation }) {
                        batch.emit_update(index, StateUpdate::Scheduled);
                    }
                }
                Decision::Deny { message, .. } => {
                    let update = slot.error(ErrorKind::PolicyViolation, &message, None);
                    batch.finish(index, update);
                }
                Decision::AskUser { reason, .. } if !batch.interactive => {
                    let message = format!(
                        "Approval required but the batch is non-interactive, so nobody can approve it: {reason}"
                    );
                    let update = slot.error(ErrorKind::PolicyViolation, &message, None);
                    batch.finish(index, update);
                }
                Decision::AskUser { reason, source } => {
                    batch.set(
                        index,
                        CallState::Validating {
                            invocation: invocation.clone(),
                            preparing_prompt: true,
                        },
                    );
                    prompts.push((index, invocation, (reason, source)));
                }
            }
        }
        let batch_id = batch.id.clone();
        for (index, invocation, reason) in prompts {
            self.prepare_prompt(batch_id.clone(), index, invocation, Some(reason));
        }
    }

    /// Builds the prompt's details off the runtime (an edit reads the file
    /// to diff it) and reports back.
    /// `reason` is the policy's (naming the deciding rule); `None` keeps a
    /// generic one (a re-prompt after a modification).
    fn prepare_prompt(
        &self,
        batch_id: String,
        index: usize,
        invocation: Arc<dyn Invocation>,
        reason: Option<(String, DecisionSource)>,
    ) {
        let tx = self.internal_tx.clone();
        tokio::task::spawn_blocking(move || {
            let result = invocation.confirmation();
            let _ = tx.send(Internal::PromptReady {
                batch_id,
                index,
                result,
                reason,
            });
        });
    }

    /// Phase 2: execute every Scheduled member of the wave concurrently.
    fn execute_wave(&mut self) {
        // Copied out: the tasks below outlive this borrow of the session.
        let execution_timeout = self.shared.config.execution_timeout;
        let output = self.shared.config.output;
        let sandbox = self.sandbox.clone();
        let Some(batch) = self.active.as_mut() else {
            return;
        };
        // Calls whose tool finished without waiting, ended after the loop.
        let mut finished = Vec::new();
        for index in batch.wave.clone() {
            let CallState::Scheduled { invocation } = &batch.calls[index].state else {
                continue;
            };
            let invocation = invocation.clone();
            let token = batch.token.child_token();
            if !batch.set(
                index,
                CallState::Executing {
                    started: Instant::now(),
                    token: token.clone(),
                    cancel_reason: None,
                },
            ) {
                continue;
            }
            batch.emit_update(index, StateUpdate::Executing(Progress::default()));
            let (progress_tx, mut progress_rx) = mpsc::unbounded_channel();
            let ctx = ExecContext {
                token,
                progress: progress_tx,
                timeout: execution_timeout,
                output,
                sandbox: sandbox.clone(),
            };
            let mut run = invocation.execute(ctx);
            // A tool that finishes at its first poll (a small read) ends
            // within this step: no task, timer or message. Anything it
            // reported as progress keeps its order through the channel.
            if let Some(outcome) = (&mut run).now_or_never() {
                if progress_rx.is_empty() {
                    finished.push((index, outcome));
                } else {
                    while let Ok(progress) = progress_rx.try_recv() {
                        let _ = self.internal_tx.send(Internal::Progress {
                            batch_id: batch.id.clone(),
                            index,
                            progress,
                        });
                    }
                    let _ = self.internal_tx.send(Internal::Executed {
                        batch_id: batch.id.clone(),
                        index,
                        outcome,
                    });
                }
                continue;
            }
            let tx = self.internal_tx.clone();
            let batch_id = batch.id.clone();
            tokio::spawn(async move {
                let limit = tokio::time::sleep(execution_timeout + TIMEOUT_SLACK);
                tokio::pin!(limit);
                let mut progress_open = true;
                let outcome = loop {
                    tokio::select! {
                        biased;
                        p = progress_rx.recv(), if progress_open => match p {
                            Some(progress) => {
                                // A tool reporting progress is alive: the
                                // guard restarts (MCP calls outlive it while
                                // progress flows; the tool enforces its own
                                // inactivity and total limits).
                                limit.as_mut().reset(tokio::time::Instant::now() + execution_timeout + TIMEOUT_SLACK);
                                let _ = tx.send(Internal::Progress { batch_id: batch_id.clone(), index, progress });
                            }
                            None => progress_open = false,
                        },
                        outcome = &mut run => break outcome,
                        () = &mut limit => break ToolError::new(
                            ErrorKind::ExecutionTimeout,
                            format!("The tool did not finish within the execution timeout of {} s.", execution_timeout.as_secs_f64()),
                        ).into(),
                    }
                };
                // Progress sent just before the end still goes first.
                while let Ok(progress) = progress_rx.try_recv() {
                    let _ = tx.send(Internal::Progress {
                        batch_id: batch_id.clone(),
                        index,
                        progress,
                    });
                }
                let _ = tx.send(Internal::Executed {
                    batch_id,
                    index,
                    outcome,
                });
            });
        }
        let batch_id = batch.id.clone();
        for (index, outcome) in finished {
            self.executed(&batch_id, index, outcome);
        }
    }

    /// Phase 3 for the whole batch: every call is terminal; send the function
    /// responses in request order and start the next batch.
    fn complete_batch(&mut self) {
        let Some(batch) = self.active.take() else {
            return;
        };
        let mut responses: Vec<FunctionResponse> = batch
            .request_order
            .iter()
            .filter_map(|&i| batch.calls[i].response().cloned())
            .collect();
        fit_responses(&mut responses, MAX_RESPONSES_BYTES);
        let calls = batch
            .request_order
            .iter()
            .filter_map(|&i| batch.calls[i].summary())
            .collect();
        for slot in &batch.calls {
            remember_ended(&mut self.ended, &slot.request.id, slot.state.name());
        }
        batch.events.emit(BatchEvent::Completed {
            batch_id: batch.id.clone(),
            responses,
            calls,
        });
    }
}

/// Adds a call of a completed batch to `ended`, forgetting the oldest past
/// [`RECENT_ENDED_CALLS`].
fn remember_ended(
    ended: &mut VecDeque<(String, &'static str)>,
    call_id: &str,
    state: &'static str,
) {
    if ended.len() == RECENT_ENDED_CALLS {
        ended.pop_front();
    }
    ended.push_back((call_id.to_string(), state));
}

/// Ends a batch that never started: every call Cancelled, then Completed.
fn cancel_pending(
    metrics: &Metrics,
    registry: &crate::tools::Registry,
    pending: PendingBatch,
    reason: &str,
) {
    let mut responses = Vec::with_capacity(pending.request.calls.len());
    let mut calls = Vec::with_capacity(pending.request.calls.len());
    let trace = crate::telemetry::BatchTrace::start(
        &pending.request.session_id,
        &pending.id,
        pending.request.calls.len(),
        pending.request.interactive,
        &pending.request.trace_parent,
    );
    for call in &pending.request.calls {
        let declaration = registry.get(&call.name).ok().map(|t| t.declaration());
        trace.call(call, declaration).cancelled(reason);
        let response = FunctionResponse::cancelled(&call.id, &call.name, reason, None);
        let update = StateUpdate::Cancelled {
            reason: reason.to_string(),
            response: response.clone(),
        };
        let tool = registry
            .get(&call.name)
            .ok()
            .map(|t| t.declaration().name.clone());
        metrics.call_finished(tool.as_deref(), &update);
        pending.events.emit(BatchEvent::CallUpdate {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            update,
        });
        responses.push(response);
        calls.push(CallSummary {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            end: CallEnd::Cancelled {
                reason: reason.to_string(),
            },
            duration: Duration::ZERO,
        });
    }
    pending.events.emit(BatchEvent::Completed {
        batch_id: pending.id,
        responses,
        calls,
    });
}

/// The policy decision for `slot`'s call to `tool` in the session's mode,
/// with its "always allow" rules.
fn decide(
    shared: &Shared,
    mode: ApprovalMode,
    rules: &SessionRules,
    interactive: bool,
    slot: &CallSlot,
    tool: &Arc<dyn crate::tools::Tool>,
    invocation: &dyn Invocation,
) -> Decision {
    let subject = invocation.subject();
    let decision = shared.policy.decide(PolicyInput {
        decl: tool.declaration(),
        subject: &subject,
        args: &slot.request.args,
        mode,
        interactive,
        rules,
        client_initiated: slot.request.client_initiated,
    });
    slot.note_decision(&decision);
    decision
}

/// The outcomes a prompt offers, by what it asks about.
fn offered_outcomes(details: &ConfirmationDetails, slot: &CallSlot) -> Vec<ConfirmationOutcome> {
    use ConfirmationOutcome as O;
    let modifiable = slot
        .tool
        .as_ref()
        .is_some_and(|t| t.with_new_content(&slot.request.args, "").is_some());
    let mut outcomes = vec![O::ProceedOnce];
    match details {
        ConfirmationDetails::Mcp { .. } => {
            outcomes.extend([O::ProceedAlwaysTool, O::ProceedAlwaysServer]);
        }
        ConfirmationDetails::Exec { root_commands, .. } => {
            if root_commands
                .iter()
                .any(|r| crate::policy::can_always_allow(r))
            {
                outcomes.push(O::ProceedAlways);
            }
        }
        _ => outcomes.push(O::ProceedAlways),
    }
    if modifiable {
        outcomes.push(O::ModifyWithEditor);
    }
    outcomes.push(O::Cancel);
    outcomes
}
