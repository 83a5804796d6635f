//! The session actor: one task per session owns its queue of batches, its
//! running batch, its approval mode, "always allow" rules and topic. gRPC
//! handlers only send it commands (through the hub); tool tasks, timers and
//! streams report back on its internal channel. Nothing here is shared or
//! locked.
//!
//! A session's actor runs only while it has work: once idle for
//! [`ACTOR_IDLE`] it hands what it keeps between batches ([`Kept`]: mode,
//! rules, topic, sandbox) to the hub and ends; the hub starts a new actor
//! with it on the session's next batch. An idle session is then a map entry
//! and its retained batches, not a task with channels (issue 17 item 4).
//!
//! Owns: the actor loop, the FIFO queue (batches of one session never
//! interleave), mode and rules, routing of commands and internal reports to
//! the running [`Batch`], and performing the [`Effect`]s it returns
//! (spawning prompt builders, executions and timers; sending events). With
//! a durable store it also holds back what the store must have first: a
//! Confirm is applied and answered OK once its answer is recorded, a
//! side-effecting call takes its end once the end is recorded
//! (`outcome_unknown` when it cannot be), and it writes the session's
//! settings when they change. Not
//! here: the wave rules and call states (`batch.rs`, `call.rs`), prompts
//! (`approval.rs`), running a tool (`exec.rs`), the map of sessions
//! (`hub.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::batch::{Batch, BatchStart, Decider, Effect};
use super::call::Terminal;
use super::events::{BatchEvent, BatchRequest, CancelRequest, CancelSummary, ConfirmRequest};
use super::exec::{self, ExecJob};
use super::feed::EventSink;
use super::hub::IdleReport;
use super::{CancelError, ConfirmError, Confirmed, Metrics, Shared};
use crate::policy::{ApprovalMode, ConfirmationOutcome, DecisionSource, SessionRules, outcomes};
use crate::store::{Answer, BatchLog, Settings, StoreError};
use crate::tools::{ConfirmationDetails, Progress, ToolError, ToolOutcome};

/// How long an idle session keeps its actor before handing its state to
/// the hub: long enough that an agent's turn of several batches in a row
/// reuses one actor (no task and channels made per batch), short against
/// the idle TTL (30 min), so that idle sessions cost no task.
pub(crate) const ACTOR_IDLE: Duration = Duration::from_secs(1);

/// What a session keeps between its batches, held by the hub while the
/// session has no actor.
#[derive(Clone)]
pub(crate) struct Kept {
    pub mode: ApprovalMode,
    pub rules: SessionRules,
    pub topic: Option<String>,
    /// The level a batch chose stays for the session's later batches.
    pub sandbox: crate::sandbox::SharedSandbox,
    /// Changes of the settings so far (their writes carry it).
    pub settings_version: u64,
}

impl Kept {
    /// What `GetSession` shows of a session without an actor.
    pub fn view(&self, workspace: Option<crate::workspaces::WorkspaceName>) -> SessionView {
        SessionView {
            workspace,
            mode: self.mode,
            running_batch: None,
            queued_batches: Vec::new(),
        }
    }
}

/// A Confirm to a session without an actor (nothing is awaiting approval):
/// as [`Session`] answers one for a call it does not have.
pub(crate) fn confirm_idle(
    store: &crate::store::SharedStore<BatchEvent>,
    session_id: &str,
    req: &ConfirmRequest,
) -> Result<Confirmed, ConfirmError> {
    let e = not_awaiting(store, session_id, &req.call_id);
    let answer = Answer {
        outcome: req.outcome.name().to_string(),
        new_content: req.new_content.clone(),
    };
    refused(
        store,
        session_id,
        req.call_id.clone(),
        &req.correlation_id,
        &answer,
        e,
    )
}

/// A Cancel to a session without an actor: nothing to cancel.
pub(crate) fn cancel_idle(
    session_id: &str,
    req: CancelRequest,
) -> Result<CancelSummary, CancelError> {
    match req.batch_id {
        // Cancelling an idle session is not an error: nothing to do.
        None => Ok(CancelSummary::default()),
        Some(batch_id) => Err(CancelError::UnknownBatch {
            session_id: session_id.to_string(),
            batch_id,
        }),
    }
}

/// Why a Confirm of `call_id`, not queued and not running, was refused:
/// the call ended, or never existed.
fn not_awaiting(
    store: &crate::store::SharedStore<BatchEvent>,
    session_id: &str,
    call_id: &str,
) -> ConfirmError {
    if let Some(state) = store.ended(session_id, call_id) {
        ConfirmError::AlreadyEnded {
            call_id: call_id.to_string(),
            state,
        }
    } else {
        ConfirmError::UnknownCall {
            session_id: session_id.to_string(),
            call_id: call_id.to_string(),
        }
    }
}

/// A Confirm `e` refused: the same answer as the recorded winner is OK
/// (already applied), a different one is refused naming the winner.
fn refused(
    store: &crate::store::SharedStore<BatchEvent>,
    session_id: &str,
    call_id: String,
    correlation_id: &str,
    answer: &Answer,
    e: ConfirmError,
) -> Result<Confirmed, ConfirmError> {
    match store.answer(session_id, &call_id, correlation_id) {
        Some(winner) if winner == *answer => Ok(Confirmed {
            already_applied: true,
        }),
        Some(winner) => Err(ConfirmError::AnsweredDifferently {
            call_id,
            with_content: winner.new_content.is_some(),
            winner: winner.outcome,
        }),
        None => Err(e),
    }
}

/// Time a tool gets to stop after its token was cancelled before the call is
/// ended Cancelled regardless (covers a tool that ignores its token).
const CANCEL_GUARD: Duration = Duration::from_secs(5);

/// What a [`super::BatchStream`] holds of its session: a weak sender (a
/// stream outliving its session keeps nothing alive) to report that the
/// batch's last reader went away before it completed. A stream that ran to
/// `Completed` says nothing, so the normal path costs no message and no task.
#[derive(Clone)]
pub(crate) struct SessionLink(mpsc::WeakUnboundedSender<Box<Internal>>);

impl SessionLink {
    /// Tells the session that nobody reads `batch_id` any more, since the
    /// detach that returned `generation`.
    pub fn batch_detached(&self, batch_id: String, generation: u64) {
        if let Some(tx) = self.0.upgrade() {
            let _ = InternalTx(tx).send(Internal::BatchDetached {
                batch_id,
                generation,
            });
        }
    }
}

/// The sending end of a session's internal channel. Reports travel boxed:
/// tokio's mpsc allocates its slots 32 at a time, the first block when the
/// channel is made, so each live session pays 32 slots of the message type
/// even when idle; an [`Internal`] inline is ~170 bytes (5.4 KB a session),
/// a box 8 (one small allocation per report, and most calls send none).
#[derive(Clone)]
pub(crate) struct InternalTx(pub(crate) mpsc::UnboundedSender<Box<Internal>>);

impl InternalTx {
    pub fn send(&self, msg: Internal) -> Result<(), mpsc::error::SendError<Box<Internal>>> {
        self.0.send(Box::new(msg))
    }
}

/// The channel a session's tasks and streams report on, made by the hub so
/// that it can hand out [`SessionLink`]s before the session runs.
///
/// Unbounded, because its senders cannot wait (a stream's drop, a blocking
/// prompt builder) and what they send is bounded elsewhere: one prompt
/// report per prompt, one timer report per timer, one outcome per
/// execution, and progress that [`exec`] merges and the tools cap (output
/// by `max_streamed_bytes`); the session handles each without waiting.
pub(crate) fn internal_channel() -> (SessionLink, InternalChannel) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        SessionLink(tx.downgrade()),
        InternalChannel {
            tx: InternalTx(tx),
            rx,
        },
    )
}

/// The session's end of [`internal_channel`].
pub(crate) struct InternalChannel {
    tx: InternalTx,
    rx: mpsc::UnboundedReceiver<Box<Internal>>,
}

/// What a batch holds of its session and tenant until it completes: the
/// hub's count of the session's batches (a batch arriving meanwhile is
/// queued), and while it waits its tenant's queue slot.
pub(crate) struct BatchHold {
    pub _batch: Arc<()>,
    pub _queued: Option<super::tenants::QueuedSlot>,
}

/// Commands from the hub, sent boxed (as [`InternalTx`]'s reports, and for
/// the same reason: a command inline is ~340 bytes, 10 KB of slots a session).
/// Boxed whole, so the size of its largest variant costs nothing per slot.
#[allow(clippy::large_enum_variant)]
pub(crate) enum SessionCommand {
    Schedule {
        batch_id: String,
        request: BatchRequest,
        events: EventSink,
        token: CancellationToken,
        held: BatchHold,
    },
    Confirm {
        request: ConfirmRequest,
        reply: oneshot::Sender<Result<Confirmed, ConfirmError>>,
    },
    Cancel {
        request: CancelRequest,
        reply: oneshot::Sender<Result<CancelSummary, CancelError>>,
    },
    Describe {
        reply: oneshot::Sender<SessionView>,
    },
}

/// A live session as `GetSession` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionView {
    /// The session's workspace (a server with a workspaces root).
    pub workspace: Option<crate::workspaces::WorkspaceName>,
    pub mode: ApprovalMode,
    /// The batch running now.
    pub running_batch: Option<String>,
    /// Batches waiting behind it, in order.
    pub queued_batches: Vec<String>,
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
    /// The batch's last reader went away before it completed: the client
    /// went away.
    BatchDetached {
        batch_id: String,
        generation: u64,
    },
    /// The disconnect grace that started at detach `generation` is over.
    GraceExpired {
        batch_id: String,
        generation: u64,
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
    /// A call that waited for an execution slot of its tenant got one: its
    /// tool starts now, and its held Executing event goes out (the tool's
    /// reports follow this on the same channel).
    SlotGranted {
        batch_id: String,
        index: usize,
    },
    /// A side-effecting call's end was recorded in the durable store
    /// (`recorded`), or could not be (the session passed to another
    /// replica, or the server is stopping): the call ends now, in its end
    /// or `outcome_unknown`, as a replica taking the batch over says.
    EndRecorded {
        batch_id: String,
        index: usize,
        recorded: bool,
    },
    /// The durable store's answer to recording a prompt's answer
    /// ([`crate::store::Store::record_answer_durably`]): the winner, or why
    /// it was not recorded.
    AnswerRecorded {
        call_id: String,
        correlation_id: String,
        result: Result<Answer, StoreError>,
    },
}

/// How long a Confirm waits for its answer to be recorded in a durable
/// store before it is refused UNAVAILABLE (nothing applied): well within a
/// client's deadline and a relayed request's wait.
pub(crate) const ANSWER_RECORD_TIMEOUT: Duration = Duration::from_secs(5);

/// A Confirm whose answer a durable store is recording: applied, and its
/// callers answered, once recorded.
struct PendingAnswer {
    request: ConfirmRequest,
    answer: Answer,
    /// The first Confirm and any identical one that came meanwhile.
    replies: Vec<oneshot::Sender<Result<Confirmed, ConfirmError>>>,
    /// The prompt's confirmation timeout fired meanwhile (call index): it
    /// applies if the answer could not be recorded.
    timed_out: Option<usize>,
}

struct PendingBatch {
    id: String,
    request: BatchRequest,
    events: EventSink,
    token: CancellationToken,
    held: BatchHold,
}

/// The running batch and where its events go.
struct ActiveBatch {
    batch: Batch,
    events: EventSink,
    /// How long it runs on once its last reader went away.
    grace: Duration,
    /// Counted as one of the session's batches until it completes.
    _batch: Arc<()>,
    /// Executing events of calls waiting for an execution slot of their
    /// tenant, by call id: sent when the slot is granted, dropped when the
    /// call ends first (it never executed).
    held: HashMap<String, BatchEvent>,
    /// Side-effecting calls whose end is being recorded in the durable
    /// store, by index: each ends (and the client is told) once its end is
    /// recorded, never before (the client is never told an end the store
    /// could forget).
    ending: HashMap<usize, Terminal>,
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
    /// The session's tenant's rules, when it has a `[[tenants]]` table.
    tenant: Option<Arc<super::tenants::TenantState>>,
    /// The policy its calls are decided by: the server's, or its tenant's
    /// tier over it.
    policy: crate::policy::PolicyHandle,
    topic: Option<String>,
    queue: VecDeque<PendingBatch>,
    active: Option<ActiveBatch>,
    internal_tx: InternalTx,
    /// Commands processed, reported to the hub when idle so that it only
    /// retires a session that has no command in flight.
    processed: u64,
    /// The session's own workspace (a workspaces root): its built-in tools
    /// replace the shared ones for every call of the session.
    workspace: Option<Arc<crate::workspaces::OpenWorkspace>>,
    /// A durable store: answers, ends and settings are recorded in it.
    durable: bool,
    /// Answers being recorded in the durable store.
    answering: Vec<PendingAnswer>,
    /// Changes of the session's settings so far (their writes carry it).
    settings_version: u64,
}

impl Session {
    /// Runs the session until the hub drops its sender. `token` (a child of
    /// the server's shutdown token) cancels every batch of the session.
    /// `kept`: what its previous actor kept (`None`: a new session);
    /// `actor`: its number, in its idle reports.
    #[allow(clippy::too_many_arguments)]
    pub async fn run(
        id: String,
        shared: Arc<Shared>,
        mut commands: mpsc::UnboundedReceiver<Box<SessionCommand>>,
        internal: InternalChannel,
        (idle, actor): (mpsc::Sender<IdleReport>, u64),
        token: CancellationToken,
        workspace: Option<Arc<crate::workspaces::OpenWorkspace>>,
        kept: Option<Kept>,
    ) {
        let InternalChannel {
            tx: internal_tx,
            rx: mut internal_rx,
        } = internal;
        // One future for the session's life: re-created per message it would
        // register and deregister a waiter on the token each time.
        let shutdown = token.clone().cancelled_owned();
        tokio::pin!(shutdown);
        let mut shut_down = false;
        let tenant = shared.tenants.of_key(&id).cloned();
        let policy = tenant
            .as_ref()
            .and_then(|t| t.policy.clone())
            .unwrap_or_else(|| shared.policy.clone());
        // Redirection targets are placed in the session's own workspace.
        let policy = match &workspace {
            Some(w) => policy.with_workspace(w.workspace.root()),
            None => policy,
        };
        // A tenant's most permissive level caps the server's: its sessions
        // start there (clamped), and may ask only for stricter ones.
        let sandbox = tenant
            .as_ref()
            .and_then(|t| t.config.max_sandbox_level)
            .filter(|max| !shared.config.sandbox.level.at_most(*max))
            .and_then(|max| shared.sandboxes.get(&max).cloned())
            .unwrap_or_else(|| shared.sandbox.clone());
        let durable = shared.config.store.is_some();
        let kept = kept.unwrap_or_else(|| Kept {
            mode: shared.config.default_mode,
            rules: SessionRules::default(),
            topic: None,
            sandbox,
            settings_version: 0,
        });
        let mut session = Session {
            id,
            mode: kept.mode,
            sandbox: kept.sandbox,
            shared,
            rules: kept.rules,
            tenant,
            policy,
            topic: kept.topic,
            queue: VecDeque::new(),
            active: None,
            internal_tx,
            processed: 0,
            workspace,
            durable,
            answering: Vec::new(),
            settings_version: kept.settings_version,
        };
        // Idle this long, the actor hands its state to the hub (which
        // forgets the session after the idle TTL).
        let ttl = ACTOR_IDLE.min(session.shared.config.session_idle_ttl);
        // One timer, re-armed when the session becomes idle (or sees a
        // command while idle), not re-created for every message.
        let idle_timer = tokio::time::sleep(ttl);
        tokio::pin!(idle_timer);
        let mut armed = false;
        let mut idle_reported = false;
        loop {
            // An answer being recorded still has callers to tell.
            let is_idle = session.active.is_none()
                && session.queue.is_empty()
                && session.answering.is_empty();
            if !is_idle {
                armed = false;
            } else if !armed {
                idle_timer.as_mut().reset(tokio::time::Instant::now() + ttl);
                armed = true;
                idle_reported = false;
            }
            tokio::select! {
                // Commands first: a batch's Schedule is always sent before
                // its stream can be dropped, so the stream's detach (an
                // internal report) finds the batch here; in random order a
                // detach seen first found no batch and was forgotten, and
                // the batch ran on with nobody reading
                // (tests/dropped_at_once.rs).
                biased;
                cmd = commands.recv() => match cmd {
                    Some(cmd) => {
                        session.processed += 1;
                        armed = false;
                        session.handle(*cmd);
                    }
                    None => break,
                },
                Some(msg) = internal_rx.recv() => session.handle_internal(*msg),
                () = &mut shutdown, if !shut_down => {
                    shut_down = true;
                    session.drop_all();
                }
                () = &mut idle_timer, if is_idle && armed && !idle_reported => {
                    let report = IdleReport {
                        session_id: session.id.clone(),
                        actor,
                        processed: session.processed,
                        kept: Box::new(session.kept()),
                    };
                    match idle.try_send(report) {
                        Ok(()) => idle_reported = true,
                        // The hub is behind: try again after another TTL.
                        Err(_) => armed = false,
                    }
                }
            }
            session.process();
            session.flush_events();
        }
        // The hub is gone (retired us, or every Scheduler handle was
        // dropped): nothing may keep running on our behalf.
        token.cancel();
        tracing::debug!(session = %session.id, "session retired");
    }

    /// What the session keeps between batches.
    fn kept(&self) -> Kept {
        Kept {
            mode: self.mode,
            rules: self.rules.clone(),
            topic: self.topic.clone(),
            sandbox: self.sandbox.clone(),
            settings_version: self.settings_version,
        }
    }

    /// Ends a step: what it emitted goes to the streams.
    fn flush_events(&self) {
        if let Some(active) = &self.active {
            active.events.flush();
        }
        for pending in &self.queue {
            pending.events.flush();
        }
    }

    /// The tools this session's calls are built from: the shared registry
    /// (read once per batch, so MCP changes apply to later batches) with
    /// the session's workspace's built-ins in place of the server's, and
    /// only the MCP servers its tenant sees (a hidden tool is an unknown
    /// tool). Both views share every compiled schema: maps of a few `Arc`s.
    fn registry(&self) -> Arc<crate::tools::Registry> {
        let shared = self.shared.registry.load();
        let seen = match &self.tenant {
            Some(t) if t.config.mcp_servers.is_some() => {
                Arc::new(shared.restricted(&|server| t.sees_mcp_server(server)))
            }
            _ => shared,
        };
        match &self.workspace {
            Some(w) => Arc::new(seen.overlaid(&w.builtin)),
            None => seen,
        }
    }

    /// What `GetSession` shows of the session.
    fn describe(&self) -> SessionView {
        SessionView {
            workspace: self.workspace.as_ref().map(|w| w.name.clone()),
            mode: self.mode,
            running_batch: self.active.as_ref().map(|a| a.batch.id().to_string()),
            queued_batches: self.queue.iter().map(|p| p.id.clone()).collect(),
        }
    }

    // === commands ===

    fn handle(&mut self, cmd: SessionCommand) {
        match cmd {
            SessionCommand::Schedule {
                batch_id,
                mut request,
                events,
                token,
                held,
            } => {
                // This replica's hold on the session is new: the settings
                // the store has (another replica may have changed them).
                if let Some(settings) = request.settings.take() {
                    self.take_settings(&settings);
                }
                let ahead = self.queue.len() + usize::from(self.active.is_some());
                events.emit(BatchEvent::Accepted {
                    batch_id: batch_id.clone(),
                    queued: ahead > 0,
                    batches_ahead: ahead as u32,
                });
                let pending = PendingBatch {
                    id: batch_id,
                    request,
                    events,
                    token,
                    held,
                };
                if ahead == 0 {
                    // Nothing ahead: it starts now. The queue stays
                    // unallocated (its first push keeps room for four
                    // batches, ~1.5 KB, for the session's life).
                    self.start_batch(pending);
                } else {
                    self.shared.metrics.queued_batches.inc();
                    self.queue.push_back(pending);
                }
            }
            SessionCommand::Confirm { request, reply } if self.durable => {
                self.confirm_durably(request, reply);
            }
            SessionCommand::Confirm { request, reply } => {
                let _ = reply.send(self.confirm_recorded(request));
            }
            SessionCommand::Cancel { request, reply } => {
                let _ = reply.send(self.cancel(request));
            }
            SessionCommand::Describe { reply } => {
                let _ = reply.send(self.describe());
            }
        }
    }

    /// Answers a prompt; the first answer wins and is recorded. An answer
    /// to a prompt that is no longer open is compared with the recorded
    /// winner: the same is OK (already applied), a different one is refused
    /// naming the winner.
    fn confirm_recorded(&mut self, req: ConfirmRequest) -> Result<Confirmed, ConfirmError> {
        let answer = crate::store::Answer {
            outcome: req.outcome.name().to_string(),
            new_content: req.new_content.clone(),
        };
        let (call_id, correlation_id) = (req.call_id.clone(), req.correlation_id.clone());
        let batch_id = self.active.as_ref().map(|a| a.batch.id().to_string());
        match self.confirm(req) {
            Ok(()) => {
                if let Some(batch_id) = batch_id {
                    self.shared.store.record_answer(
                        &self.id,
                        &batch_id,
                        &call_id,
                        &correlation_id,
                        answer,
                    );
                }
                Ok(Confirmed {
                    already_applied: false,
                })
            }
            Err(e) => self.refused(call_id, &correlation_id, &answer, e),
        }
    }

    /// A Confirm `e` refused: the same answer as the recorded winner is OK
    /// (already applied), a different one is refused naming the winner.
    fn refused(
        &self,
        call_id: String,
        correlation_id: &str,
        answer: &Answer,
        e: ConfirmError,
    ) -> Result<Confirmed, ConfirmError> {
        refused(
            &self.shared.store,
            &self.id,
            call_id,
            correlation_id,
            answer,
            e,
        )
    }

    /// A Confirm with a durable store: the answer is recorded (fenced by
    /// the session's lease) before it is applied and before anyone is told
    /// OK, so that a replica taking the session over applies it too instead
    /// of offering the prompt again. Not recorded (the store unreachable,
    /// the session passed to another replica): UNAVAILABLE, nothing
    /// applied, the prompt still open. Meanwhile the prompt stays open;
    /// the same answer again waits for the same record, a different one is
    /// refused naming it (the first answer wins).
    fn confirm_durably(
        &mut self,
        req: ConfirmRequest,
        reply: oneshot::Sender<Result<Confirmed, ConfirmError>>,
    ) {
        let answer = Answer {
            outcome: req.outcome.name().to_string(),
            new_content: req.new_content.clone(),
        };
        if let Some(pending) = self.answering.iter_mut().find(|p| {
            p.request.call_id == req.call_id && p.request.correlation_id == req.correlation_id
        }) {
            if pending.answer == answer {
                pending.replies.push(reply);
            } else {
                let _ = reply.send(Err(ConfirmError::AnsweredDifferently {
                    call_id: req.call_id,
                    with_content: pending.answer.new_content.is_some(),
                    winner: pending.answer.outcome.clone(),
                }));
            }
            return;
        }
        let registry = self.registry();
        let checked = match self
            .active
            .as_ref()
            .and_then(|a| a.batch.find(&req.call_id).map(|i| (a, i)))
        {
            Some((active, index)) => active
                .batch
                .check_confirm(index, &req, &registry)
                .map(|grant| (active.batch.id().to_string(), grant)),
            None => Err(self.call_not_awaiting(&req.call_id)),
        };
        let (batch_id, grant) = match checked {
            Ok(checked) => checked,
            Err(e) => {
                let _ = reply.send(self.refused(req.call_id, &req.correlation_id, &answer, e));
                return;
            }
        };
        // The settings an "always" answer makes, in the answer's statement.
        let settings = grant.map(|grant| {
            let (rules, mode) = self.after_always(&grant);
            self.settings_version += 1;
            Settings {
                version: self.settings_version,
                body: encode_settings(mode, &rules, self.topic.as_deref()),
            }
        });
        let store = self.shared.store.clone();
        let tx = self.internal_tx.clone();
        let (session_id, call_id, correlation_id) = (
            self.id.clone(),
            req.call_id.clone(),
            req.correlation_id.clone(),
        );
        let recorded = answer.clone();
        tokio::spawn(async move {
            let write = store.record_answer_durably(
                &session_id,
                &batch_id,
                &call_id,
                &correlation_id,
                recorded,
                settings,
            );
            let result = match tokio::time::timeout(ANSWER_RECORD_TIMEOUT, write).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Unavailable {
                    reason: format!("no answer within {} s", ANSWER_RECORD_TIMEOUT.as_secs()),
                }),
            };
            let _ = tx.send(Internal::AnswerRecorded {
                call_id,
                correlation_id,
                result,
            });
        });
        self.answering.push(PendingAnswer {
            request: req,
            answer,
            replies: vec![reply],
            timed_out: None,
        });
    }

    /// A prompt's answer was recorded (or not): applied, and its callers
    /// told.
    fn answer_recorded(
        &mut self,
        call_id: &str,
        correlation_id: &str,
        result: Result<Answer, StoreError>,
    ) {
        let Some(at) = self.answering.iter().position(|p| {
            p.request.call_id == call_id && p.request.correlation_id == correlation_id
        }) else {
            return;
        };
        let pending = self.answering.swap_remove(at);
        let told = match result {
            Ok(winner) if winner == pending.answer => {
                self.confirm(pending.request).map(|()| Confirmed {
                    already_applied: false,
                })
            }
            // Recorded before (a write whose answer was lost): that one
            // wins; the prompt is answered by it on the replica that takes
            // the session over.
            Ok(winner) => Err(ConfirmError::AnsweredDifferently {
                call_id: call_id.to_string(),
                with_content: winner.new_content.is_some(),
                winner: winner.outcome,
            }),
            Err(e) => {
                tracing::warn!(session = %self.id, call = %call_id, reason = %e,
                    "an answer could not be recorded; it was not applied");
                if let Some(index) = pending.timed_out
                    && let Some(active) = self.active.as_mut()
                {
                    let effects = active.batch.on_confirm_timeout(index, correlation_id);
                    self.perform(effects);
                }
                Err(ConfirmError::NotRecorded {
                    call_id: call_id.to_string(),
                    reason: match e {
                        StoreError::LeaseLost { .. } => {
                            "another replica took the session over".to_string()
                        }
                        e => e.to_string(),
                    },
                })
            }
        };
        for reply in pending.replies {
            let _ = reply.send(told.clone());
        }
    }

    /// The session's rules and mode after an "always" answer's `grant`:
    /// the rule added, and the mode it switches to where the tenant may use
    /// it (the rule applies regardless).
    fn after_always(&self, grant: &super::approval::AlwaysGrant) -> (SessionRules, ApprovalMode) {
        let mut rules = self.rules.clone();
        rules.allow_always(&grant.tool_name, &grant.subject, grant.scope);
        let next = outcomes::mode_after_always(self.mode, grant.kind);
        let mode = if self.tenant.as_ref().is_none_or(|t| t.allows_mode(next)) {
            next
        } else {
            self.mode
        };
        (rules, mode)
    }

    /// Takes the settings the store recorded (empty: the defaults).
    fn take_settings(&mut self, bytes: &[u8]) {
        let decoded = decode_settings(bytes);
        let (mode, rules, topic) = match decoded {
            Some(s) => s,
            None if bytes.is_empty() => (None, SessionRules::default(), None),
            None => {
                tracing::warn!(session = %self.id, "the session's recorded settings cannot be read; the defaults apply");
                (None, SessionRules::default(), None)
            }
        };
        self.mode = mode.unwrap_or(self.shared.config.default_mode);
        self.rules = rules;
        self.topic = topic;
    }

    /// The session's settings changed: written in the durable store, fenced,
    /// behind (retried while the store is unreachable; given up when the
    /// session passed to another replica or the server stops).
    fn persist_settings(&mut self) {
        if !self.durable {
            return;
        }
        self.settings_version += 1;
        let settings = Settings {
            version: self.settings_version,
            body: encode_settings(self.mode, &self.rules, self.topic.as_deref()),
        };
        let store = self.shared.store.clone();
        let shutdown = self.shared.shutdown.clone();
        let session_id = self.id.clone();
        tokio::spawn(async move {
            loop {
                match store.record_settings(&session_id, settings.clone()).await {
                    Ok(()) => return,
                    Err(e @ StoreError::LeaseLost { .. }) => {
                        tracing::warn!(session = %session_id, reason = %e,
                            "the session's settings could not be recorded");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(session = %session_id, reason = %e,
                            "recording the session's settings failed; retrying");
                        tokio::select! {
                            () = tokio::time::sleep(RECORD_END_RETRY) => {}
                            () = shutdown.cancelled() => return,
                        }
                    }
                }
            }
        });
    }

    fn confirm(&mut self, req: ConfirmRequest) -> Result<(), ConfirmError> {
        let found = self
            .active
            .as_ref()
            .and_then(|a| a.batch.find(&req.call_id));
        let registry = self.registry();
        let (Some(index), Some(active)) = (found, self.active.as_mut()) else {
            return Err(self.call_not_awaiting(&req.call_id));
        };
        let confirmed = active.batch.on_confirm(index, req, &registry)?;
        self.perform(confirmed.effects);
        if let Some(grant) = confirmed.always {
            self.always(&grant);
            if let Some(active) = self.active.as_mut() {
                let decider = Decider {
                    policy: &self.policy,
                    mode: self.mode,
                    rules: &self.rules,
                    interactive: active.batch.interactive(),
                };
                let effects = active.batch.approve_open_prompts(&decider);
                self.perform(effects);
            }
        }
        Ok(())
    }

    /// Records an "always" answer's rule and mode ("always" on an edit
    /// switches to auto_edit only where the tenant may use it; the rule it
    /// added still applies), and writes them in a durable store.
    fn always(&mut self, grant: &super::approval::AlwaysGrant) {
        let (rules, mode) = self.after_always(grant);
        let changed = rules != self.rules || mode != self.mode;
        self.rules = rules;
        self.mode = mode;
        if changed {
            self.persist_settings();
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
        } else {
            not_awaiting(&self.shared.store, &self.id, call_id)
        }
    }

    fn cancel(&mut self, req: CancelRequest) -> Result<CancelSummary, CancelError> {
        let reason = if req.reason.trim().is_empty() {
            "Cancelled by the client.".to_string()
        } else {
            req.reason.clone()
        };
        let matches = |id: &str| req.batch_id.as_deref().is_none_or(|b| b == id);
        let known = self.active.as_ref().is_some_and(|a| matches(a.batch.id()))
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
        if self.active.as_ref().is_some_and(|a| matches(a.batch.id())) {
            summary.cancelled_batches += 1;
            summary.cancelled_calls += self.cancel_active(&reason);
        }
        Ok(summary)
    }

    /// Cancels every non-terminal call of the running batch.
    fn cancel_active(&mut self, reason: &str) -> u32 {
        let Some(active) = self.active.as_mut() else {
            return 0;
        };
        let (count, effects) = active.batch.cancel(reason);
        self.perform(effects);
        count
    }

    fn cancel_pending(&mut self, pending: PendingBatch, reason: &str) {
        let ended = pending
            .request
            .calls
            .iter()
            .map(|c| crate::store::EndedCall {
                call_id: c.id.clone(),
                state: "cancelled",
            })
            .collect();
        let batch_id = pending.id.clone();
        cancel_pending(&self.shared.metrics, &self.registry(), pending, reason);
        self.shared.store.complete_batch(&self.id, &batch_id, ended);
    }

    // === internal reports ===

    fn handle_internal(&mut self, msg: Internal) {
        let drop_reason = self.drop_reason();
        let (batch_id, report) = match msg {
            Internal::BatchDetached {
                batch_id,
                generation,
            } => {
                self.batch_detached(batch_id, generation);
                return;
            }
            Internal::GraceExpired {
                batch_id,
                generation,
            } => {
                self.grace_expired(&batch_id, generation);
                return;
            }
            Internal::PromptReady {
                batch_id,
                index,
                result,
                reason,
            } => (batch_id, Report::PromptReady(index, result, reason)),
            Internal::Progress {
                batch_id,
                index,
                progress,
            } => (batch_id, Report::Progress(index, progress)),
            Internal::Executed {
                batch_id,
                index,
                outcome,
            } => (batch_id, Report::Executed(index, outcome)),
            Internal::ConfirmTimeout {
                batch_id,
                index,
                correlation_id,
            } => (batch_id, Report::ConfirmTimeout(index, correlation_id)),
            Internal::CancelGuard { batch_id, index } => (batch_id, Report::CancelGuard(index)),
            Internal::EndRecorded {
                batch_id,
                index,
                recorded,
            } => {
                if let Some(active) = self.active.as_mut().filter(|a| a.batch.id() == batch_id)
                    && let Some(end) = active.ending.remove(&index)
                {
                    // Not recorded: the replica that holds the session now
                    // ends the call outcome_unknown, and so does this one.
                    let end = if recorded {
                        Some(end)
                    } else {
                        active.batch.outcome_unknown(index)
                    };
                    if let Some(end) = end {
                        let effects = active.batch.finish_call(index, end);
                        self.perform(effects);
                    }
                }
                return;
            }
            Internal::AnswerRecorded {
                call_id,
                correlation_id,
                result,
            } => {
                self.answer_recorded(&call_id, &correlation_id, result);
                return;
            }
            Internal::SlotGranted { batch_id, index } => {
                if let Some(active) = self.active.as_mut().filter(|a| a.batch.id() == batch_id)
                    && let Some(call) = active.batch.calls.get(index)
                    && let Some(event) = active.held.remove(&call.request.id)
                {
                    active.events.emit(event);
                }
                return;
            }
        };
        // A late report of a batch that is gone is dropped.
        let Some(active) = self.active.as_mut().filter(|a| a.batch.id() == batch_id) else {
            return;
        };
        let batch = &mut active.batch;
        let effects = match report {
            Report::PromptReady(index, result, reason) => {
                let decider = Decider {
                    policy: &self.policy,
                    mode: self.mode,
                    rules: &self.rules,
                    interactive: batch.interactive(),
                };
                batch.on_prompt_ready(&decider, index, result, reason)
            }
            Report::Progress(index, progress) => batch.on_progress(index, progress),
            Report::Executed(index, outcome) => {
                // A side-effecting call's end is recorded (a durable store)
                // before the call takes it and the client is told it: a
                // replica taking an uncompleted batch over keeps it instead
                // of ending the call outcome_unknown, and never says
                // otherwise than the stream.
                let side_effecting = batch.calls.get(index).is_some_and(|slot| {
                    !slot
                        .tool
                        .as_ref()
                        .is_some_and(|t| t.declaration().read_only)
                });
                if !(self.durable && side_effecting) {
                    batch.on_executed(index, outcome, drop_reason)
                } else if let Some(end) = batch.ending(index, outcome, drop_reason) {
                    record_end(
                        self.shared.store.clone(),
                        self.shared.shutdown.clone(),
                        self.id.clone(),
                        (batch.id().to_string(), index),
                        batch.calls[index].request.id.clone(),
                        end.encode(),
                        self.internal_tx.clone(),
                    );
                    active.ending.insert(index, end);
                    return;
                } else {
                    return;
                }
            }
            Report::ConfirmTimeout(index, id) => {
                // Its answer is being recorded: the timeout applies only if
                // the answer cannot be.
                if let Some(pending) = self
                    .answering
                    .iter_mut()
                    .find(|p| p.request.correlation_id == id)
                {
                    pending.timed_out = Some(index);
                    return;
                }
                batch.on_confirm_timeout(index, &id)
            }
            // Its end is being recorded: it ends in that (or
            // outcome_unknown), never Cancelled by the guard meanwhile.
            Report::CancelGuard(index) if active.ending.contains_key(&index) => return,
            Report::CancelGuard(index) => batch.on_cancel_guard(index),
        };
        self.perform(effects);
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
            .chain(self.active.as_ref().map(|a| a.batch.id().to_string()))
            .collect();
        for id in ids {
            self.batch_dropped(&id);
        }
    }

    /// The grace and log of a queued or running batch.
    fn grace_of(&self, batch_id: &str) -> Option<(Duration, &Arc<BatchLog<BatchEvent>>)> {
        if let Some(active) = self.active.as_ref().filter(|a| a.batch.id() == batch_id) {
            return Some((active.grace, active.events.log()));
        }
        self.queue.iter().find(|b| b.id == batch_id).map(|b| {
            (
                b.request.disconnect_grace.unwrap_or_default(),
                b.events.log(),
            )
        })
    }

    /// Nobody reads the batch any more: without a grace it is cancelled at
    /// once (as a dropped stream always was); with one, a timer decides.
    fn batch_detached(&mut self, batch_id: String, generation: u64) {
        let Some((grace, _)) = self.grace_of(&batch_id) else {
            return; // already completed
        };
        if grace.is_zero() {
            self.batch_dropped(&batch_id);
            return;
        }
        tracing::info!(session = %self.id, batch = %batch_id, grace_secs = grace.as_secs(), "batch detached; it runs on for its grace");
        let tx = self.internal_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = tx.send(Internal::GraceExpired {
                batch_id,
                generation,
            });
        });
    }

    /// The grace of detach `generation` is over: cancelled unless somebody
    /// re-attached meanwhile (a later detach has its own timer).
    fn grace_expired(&mut self, batch_id: &str, generation: u64) {
        let Some((grace, log)) = self.grace_of(batch_id) else {
            return;
        };
        if !log.still_detached(generation) {
            return;
        }
        let reason = super::resume::grace_reason(grace);
        tracing::info!(session = %self.id, batch = %batch_id, "disconnect grace over; cancelling the batch");
        self.end_batch(batch_id, &reason);
    }

    fn batch_dropped(&mut self, batch_id: &str) {
        let reason = self.drop_reason();
        self.end_batch(batch_id, reason);
    }

    /// Cancels a queued or running batch with `reason`.
    fn end_batch(&mut self, batch_id: &str, reason: &str) {
        if let Some(pos) = self.queue.iter().position(|b| b.id == batch_id) {
            if let Some(pending) = self.queue.remove(pos) {
                self.shared.metrics.queued_batches.dec();
                self.cancel_pending(pending, reason);
            }
        } else if self
            .active
            .as_ref()
            .is_some_and(|a| a.batch.id() == batch_id)
        {
            self.cancel_active(reason);
        }
    }

    // === the processing loop ===

    /// Advances the session as far as it can without waiting.
    fn process(&mut self) {
        loop {
            let Some(active) = self.active.as_mut() else {
                let Some(pending) = self.queue.pop_front() else {
                    return;
                };
                self.shared.metrics.queued_batches.dec();
                self.start_batch(pending);
                continue;
            };
            let decider = Decider {
                policy: &self.policy,
                mode: self.mode,
                rules: &self.rules,
                interactive: active.batch.interactive(),
            };
            let effects = active.batch.step(&decider);
            if effects.is_empty() {
                return;
            }
            self.perform(effects);
        }
    }

    fn start_batch(&mut self, pending: PendingBatch) {
        if pending.token.is_cancelled() {
            let reason = self.drop_reason();
            self.cancel_pending(pending, reason);
            return;
        }
        let PendingBatch {
            id,
            request,
            events,
            token,
            held,
        } = pending;
        // Out of the queue: the tenant's queue slot is free again.
        let BatchHold { _batch, _queued } = held;
        drop(_queued);
        let request_grace = request.disconnect_grace.unwrap_or_default();
        if let Some(mode) = request.approval_mode
            && mode != self.mode
        {
            self.mode = mode;
            self.persist_settings();
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
        let registry = self.registry();
        // Read when the batch was taken over (an unreadable one is
        // outcome_unknown there).
        let ended: Vec<(String, Terminal)> = request
            .ended
            .iter()
            .filter_map(|(id, end)| Terminal::decode(end).map(|t| (id.clone(), t)))
            .collect();
        let (batch, effects) = Batch::start(BatchStart {
            id,
            session_id: &self.id,
            calls: request.calls,
            interactive: request.interactive,
            trace_parent: &request.trace_parent,
            registry: &registry,
            token,
            metrics: self.shared.metrics.clone(),
            confirmation_timeout: self.shared.config.confirmation_timeout,
            outcome_unknown: &request.outcome_unknown,
            principal: request.principal.clone(),
            workspace: self
                .workspace
                .as_ref()
                .map_or_else(|| "".into(), |w| w.name.as_str().into()),
            ended: &ended,
            answered: &final_answers(&request.answered),
        });
        self.active = Some(ActiveBatch {
            batch,
            events,
            grace: request_grace,
            _batch,
            held: HashMap::new(),
            ending: HashMap::new(),
        });
        self.perform(effects);
    }

    /// Performs the running batch's effects in order. Executions that end at
    /// their first poll are applied after the rest, as one step.
    fn perform(&mut self, effects: Vec<Effect>) {
        let mut finished = Vec::new();
        // The execution slot taken for the call whose Executing event just
        // went out (the next effect starts it).
        let mut taken: Option<(usize, super::tenants::ExecutionSlot)> = None;
        let mut effects = effects.into_iter().peekable();
        while let Some(effect) = effects.next() {
            let Some(active) = self.active.as_mut() else {
                return;
            };
            let batch_id = active.batch.id();
            match effect {
                Effect::Emit(event) => {
                    let BatchEvent::CallUpdate {
                        call_id, update, ..
                    } = &event
                    else {
                        active.events.emit(event);
                        continue;
                    };
                    // A call is Executing once its tool starts: with its
                    // tenant's slots all taken, its Executing waits with it.
                    if matches!(update, super::StateUpdate::Executing(None))
                        && let Some(Effect::Execute { index, .. }) = effects.peek()
                        && let Some(slots) = self.tenant.as_ref().and_then(|t| t.execution_slots())
                    {
                        match slots.try_acquire_owned() {
                            Ok(slot) => {
                                taken = Some((*index, slot));
                                active.events.emit(event);
                            }
                            Err(_) => {
                                active.held.insert(call_id.clone(), event);
                            }
                        }
                        continue;
                    }
                    // A call that ends while it waits for a slot never
                    // executed: its held Executing is dropped.
                    active.held.remove(call_id);
                    active.events.emit(event);
                }
                Effect::PreparePrompt {
                    index,
                    invocation,
                    reason,
                } => {
                    let tx = self.internal_tx.clone();
                    let batch_id = batch_id.to_string();
                    // An edit's prompt reads the file to diff it.
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
                Effect::Execute {
                    index,
                    invocation,
                    token,
                } => {
                    let job = ExecJob {
                        batch_id: batch_id.to_string(),
                        index,
                        invocation,
                        token,
                        timeout: self.shared.config.execution_timeout,
                        output: self.shared.config.output,
                        sandbox: self.sandbox.clone(),
                        session: self.id.as_str().into(),
                        metrics: self.shared.metrics.clone(),
                        slots: self.tenant.as_ref().and_then(|t| t.execution_slots()),
                        slot: taken.take().filter(|(i, _)| *i == index).map(|(_, s)| s),
                    };
                    let slot = &active.batch.calls[index];
                    let read_only = slot
                        .tool
                        .as_ref()
                        .is_some_and(|t| t.declaration().read_only);
                    let call_id = slot.request.id.clone();
                    if self.shared.config.store.is_some() && !read_only {
                        // A durable store: the call is recorded Executing
                        // before its tool starts, so that a replica taking
                        // the batch over never runs it again.
                        record_then_start(
                            self.shared.store.clone(),
                            self.id.clone(),
                            call_id,
                            job,
                            self.internal_tx.clone(),
                        );
                    } else if let Some(outcome) = exec::start(job, &self.internal_tx) {
                        finished.push((index, outcome));
                    }
                }
                Effect::ArmConfirmTimeout {
                    index,
                    correlation_id,
                    after,
                } => {
                    let tx = self.internal_tx.clone();
                    let batch_id = batch_id.to_string();
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let _ = tx.send(Internal::ConfirmTimeout {
                            batch_id,
                            index,
                            correlation_id,
                        });
                    });
                }
                Effect::ArmCancelGuard { index } => {
                    let tx = self.internal_tx.clone();
                    let batch_id = batch_id.to_string();
                    tokio::spawn(async move {
                        tokio::time::sleep(CANCEL_GUARD).await;
                        let _ = tx.send(Internal::CancelGuard { batch_id, index });
                    });
                }
                Effect::Topic(topic) => {
                    self.topic = Some(topic);
                    self.persist_settings();
                }
                Effect::Always(grant) => self.always(&grant),
                Effect::Completed { responses, calls } => self.complete(responses, calls),
            }
        }
        let drop_reason = self.drop_reason();
        for (index, outcome) in finished {
            let Some(active) = self.active.as_mut() else {
                return;
            };
            let effects = active.batch.on_executed(index, outcome, drop_reason);
            self.perform(effects);
        }
    }

    /// The running batch completed: its responses go out and the next queued
    /// batch may start.
    fn complete(
        &mut self,
        responses: Vec<super::FunctionResponse>,
        calls: Vec<super::CallSummary>,
    ) {
        let Some(active) = self.active.take() else {
            return;
        };
        let ended = active
            .batch
            .states()
            .map(|(id, state)| crate::store::EndedCall {
                call_id: id.to_string(),
                state,
            })
            .collect();
        active.events.emit(BatchEvent::Completed {
            batch_id: active.batch.id().to_string(),
            responses,
            calls,
        });
        // After the last event, as the store expects (a durable one writes
        // the whole log then).
        self.shared
            .store
            .complete_batch(&self.id, active.batch.id(), ended);
    }
}

/// Records call `call_id` Executing in the store, then starts `job`; a
/// call that could not be recorded does not start (it ends Error saying
/// why). A call whose tenant's execution slots are all taken waits for one
/// first, unrecorded: until its tool starts it has not begun, and a replica
/// taking its batch over may run it (once).
fn record_then_start(
    store: crate::store::SharedStore<BatchEvent>,
    session_id: String,
    call_id: String,
    mut job: ExecJob,
    reports: InternalTx,
) {
    tokio::spawn(async move {
        let (batch_id, index) = (job.batch_id.clone(), job.index);
        let mut granted = false;
        if job.slot.is_none()
            && let Some(slots) = job.slots.clone()
        {
            let token = job.token.clone();
            let slot = tokio::select! {
                slot = slots.acquire_owned() => slot.ok(),
                () = token.cancelled() => None,
            };
            match slot {
                Some(slot) => {
                    job.slot = Some(slot);
                    granted = true;
                }
                // Cancelled meanwhile: the batch already ended the call
                // (this late outcome is dropped).
                None => {
                    let _ = reports.send(Internal::Executed {
                        batch_id,
                        index,
                        outcome: crate::tools::ToolError::new(
                            crate::tools::ErrorKind::UnhandledException,
                            "cancelled while waiting for an execution slot of its tenant",
                        )
                        .into(),
                    });
                    return;
                }
            }
        }
        let outcome = match store
            .record_executing(&session_id, &batch_id, &call_id)
            .await
        {
            Ok(()) => {
                if granted {
                    // Its held Executing event goes out now, before the
                    // tool's reports on the same channel.
                    let _ = reports.send(Internal::SlotGranted {
                        batch_id: batch_id.clone(),
                        index,
                    });
                }
                exec::start(job, &reports)
            }
            Err(e) => Some(
                crate::tools::ToolError::new(
                    crate::tools::ErrorKind::UnhandledException,
                    format!("the call was not started: it could not be recorded ({e})"),
                )
                .into(),
            ),
        };
        if let Some(outcome) = outcome {
            let _ = reports.send(Internal::Executed {
                batch_id,
                index,
                outcome,
            });
        }
    });
}

/// How long a failed write of a call's end waits before it is tried again
/// (the store is unreachable: the call's end waits for it).
const RECORD_END_RETRY: Duration = Duration::from_millis(500);

/// Records a side-effecting call's end in the durable store, then reports
/// [`Internal::EndRecorded`]. An unreachable store is retried until it is
/// back (the call's end waits: telling it first could be contradicted by a
/// replica taking over); a session that passed to another replica, or a
/// server that is stopping, gives up (logged): that replica ends the call
/// `outcome_unknown`.
fn record_end(
    store: crate::store::SharedStore<BatchEvent>,
    shutdown: CancellationToken,
    session_id: String,
    (batch_id, index): (String, usize),
    call_id: String,
    end: Vec<u8>,
    reports: InternalTx,
) {
    tokio::spawn(async move {
        let recorded = loop {
            match store
                .record_ended(&session_id, &batch_id, &call_id, end.clone())
                .await
            {
                Ok(()) => break true,
                Err(e @ StoreError::LeaseLost { .. }) => {
                    tracing::warn!(session = %session_id, batch = %batch_id, call = %call_id,
                        reason = %e, "a call's end could not be recorded; it ends outcome_unknown");
                    break false;
                }
                Err(e) => {
                    tracing::warn!(session = %session_id, batch = %batch_id, call = %call_id,
                        reason = %e, "recording a call's end failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(RECORD_END_RETRY) => {}
                        () = shutdown.cancelled() => break false,
                    }
                }
            }
        };
        let _ = reports.send(Internal::EndRecorded {
            batch_id,
            index,
            recorded,
        });
    });
}

/// The final answers among those a stopped replica recorded (a re-prompt,
/// `modify_with_editor`, is not one: the call is prompted again).
fn final_answers(
    recorded: &[(String, Answer)],
) -> Vec<(String, ConfirmationOutcome, Option<String>)> {
    use ConfirmationOutcome as O;
    recorded
        .iter()
        .filter_map(|(call_id, answer)| {
            let outcome = [
                O::ProceedOnce,
                O::ProceedAlways,
                O::ProceedAlwaysTool,
                O::ProceedAlwaysServer,
                O::Cancel,
            ]
            .into_iter()
            .find(|o| o.name() == answer.outcome)?;
            Some((call_id.clone(), outcome, answer.new_content.clone()))
        })
        .collect()
}

/// The session's settings as a durable store keeps them (JSON).
#[derive(serde::Serialize, serde::Deserialize)]
struct RecordedSettings {
    mode: String,
    rules: SessionRules,
    topic: Option<String>,
}

fn encode_settings(mode: ApprovalMode, rules: &SessionRules, topic: Option<&str>) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "mode": crate::policy::mode_name(mode),
        "rules": rules,
        "topic": topic,
    }))
    .unwrap_or_default()
}

/// The approval mode recorded settings hold, when they can be read.
pub(super) fn recorded_mode(bytes: &[u8]) -> Option<ApprovalMode> {
    decode_settings(bytes)?.0
}

/// What [`encode_settings`] wrote; `None` when it cannot be read.
fn decode_settings(bytes: &[u8]) -> Option<(Option<ApprovalMode>, SessionRules, Option<String>)> {
    let recorded: RecordedSettings = serde_json::from_slice(bytes).ok()?;
    let mode = recorded.mode.parse::<ApprovalMode>().ok()?;
    Some((Some(mode), recorded.rules, recorded.topic))
}

/// An internal report addressed to the running batch.
enum Report {
    PromptReady(
        usize,
        Result<ConfirmationDetails, ToolError>,
        Option<(String, DecisionSource)>,
    ),
    Progress(usize, Progress),
    Executed(usize, ToolOutcome),
    ConfirmTimeout(usize, String),
    CancelGuard(usize),
}

/// Ends a batch that never started: every call Cancelled, then Completed.
fn cancel_pending(
    metrics: &Arc<Metrics>,
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
    )
    .by(
        pending.request.principal.clone(),
        pending
            .request
            .workspace
            .as_ref()
            .map_or_else(|| "".into(), |w| w.as_str().into()),
    )
    .observed_by(metrics.clone());
    for call in &pending.request.calls {
        let declaration = registry.get(&call.name).ok().map(|t| t.declaration());
        trace.call(call, declaration).cancelled(reason);
        calls.push(super::CallSummary {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            end: super::CallEnd::Cancelled {
                reason: reason.to_string(),
            },
            duration: Duration::ZERO,
        });
        let terminal = Terminal::cancelled(call, reason, None);
        let tool = registry
            .get(&call.name)
            .ok()
            .map(|t| t.declaration().name.clone());
        metrics.call_finished(tool.as_deref(), &terminal);
        responses.push(terminal.response().clone());
        pending.events.emit(BatchEvent::CallUpdate {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            update: terminal.update(),
        });
    }
    pending.events.emit(BatchEvent::Completed {
        batch_id: pending.id,
        responses,
        calls,
    });
}
