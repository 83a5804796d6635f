//! The core scheduler: sessions, call states, waves, the per-session queue,
//! approval and cancellation.
//!
//! A [`Scheduler`] is a cheap handle to the hub task, which owns the map of
//! sessions; each session is its own actor task ([`session`]) owning its
//! queue and calls. Handlers send commands and read a [`BatchStream`] of
//! domain [`Event`]s. Cancellation is a `CancellationToken` tree: server →
//! session → batch → call.
//!
//! Not here: gRPC (see `api`), what a tool does (`tools`), whether it may
//! (`policy`).

mod call;
pub mod events;
pub mod metrics;
mod session;
pub mod validate;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

pub use events::{
    BatchEvent, BatchRequest, CallEnd, CallRequest, CallSummary, CancelRequest, CancelSummary,
    ConfirmRequest, ConfirmationOutcome, Event, FunctionResponse, StateUpdate,
};
pub use metrics::Metrics;
use session::{EventSink, Session, SessionCommand, SessionLink};
pub use validate::{InvalidBatch, InvalidRequest, Shown};

use crate::policy::{ApprovalMode, PolicyHandle};
use crate::sandbox::{OutputLimits, SandboxConfig, SharedSandbox};
use crate::tools::{Registry, SharedRegistry};

/// Limits and timeouts of the scheduler. Every field is a documented limit.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Approval mode of a new session.
    pub default_mode: ApprovalMode,
    /// An unanswered prompt is cancelled after this; `None` waits forever
    /// (the deadlock guard is off).
    pub confirmation_timeout: Option<Duration>,
    /// Longest a call may execute (a shell command may ask for less).
    pub execution_timeout: Duration,
    /// Output kept and streamed per call.
    pub output: OutputLimits,
    /// Calls in one batch; more is RESOURCE_EXHAUSTED.
    pub max_calls_per_batch: usize,
    /// Live sessions. A new one at the cap evicts the least recently used
    /// idle session (no open stream); when every session is busy it is
    /// RESOURCE_EXHAUSTED.
    pub max_sessions: usize,
    /// A session with nothing to do is forgotten (rules, mode, topic) after
    /// this.
    pub session_idle_ttl: Duration,
    /// The sandbox commands run in (level, limits); what the kernel
    /// enforces of it is probed once, by `crate::build_scheduler`.
    pub sandbox: SandboxConfig,
    /// All file I/O of tools on the blocking pool, small reads included
    /// (a workspace on a network filesystem); see
    /// [`crate::sandbox::Workspace::with_blocking_io`].
    pub blocking_file_io: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            default_mode: ApprovalMode::Default,
            confirmation_timeout: Some(Duration::from_secs(600)),
            execution_timeout: Duration::from_secs(300),
            output: OutputLimits::default(),
            max_calls_per_batch: 128,
            // About 15 KB each when idle: ~150 MB at the cap.
            max_sessions: 10_000,
            session_idle_ttl: Duration::from_secs(1800),
            sandbox: SandboxConfig::default(),
            blocking_file_io: false,
        }
    }
}

/// Why a batch was not accepted.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScheduleError {
    #[error("invalid batch: {0}")]
    Invalid(#[from] InvalidBatch),
    #[error("batch has {got} calls; the limit is max_calls_per_batch = {limit}")]
    TooManyCalls { got: usize, limit: usize },
    #[error(
        "{limit} sessions are live, each with an open batch stream; the limit is max_sessions = {limit}"
    )]
    TooManySessions { limit: usize },
    #[error("the server is shutting down and accepts no new batches")]
    ShuttingDown,
    #[error(
        "sandbox level {requested} is more permissive than the server's ({server}); a session may only choose a level at most as permissive"
    )]
    SandboxLevelNotAllowed {
        requested: crate::sandbox::SandboxLevel,
        server: crate::sandbox::SandboxLevel,
    },
}

/// Why a Confirm was refused. Nothing changed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfirmError {
    #[error("invalid Confirm: {0}")]
    Invalid(#[from] InvalidRequest),
    #[error("no session '{}'", Shown(session_id))]
    UnknownSession { session_id: String },
    #[error("no call '{}' in session '{}'", Shown(call_id), Shown(session_id))]
    UnknownCall { session_id: String, call_id: String },
    #[error("call '{}' is not awaiting approval", Shown(call_id))]
    NotAwaitingApproval { call_id: String },
    /// The call's batch has completed; its prompt (if it had one) can no
    /// longer be answered. Remembered for the session's last
    /// `RECENT_ENDED_CALLS` calls; older ids are [`ConfirmError::UnknownCall`].
    #[error(
        "call '{}' already ended ({state}) and its batch has completed; there is no prompt to answer",
        Shown(call_id)
    )]
    AlreadyEnded {
        call_id: String,
        state: &'static str,
    },
    /// The current prompt's id is deliberately not named: knowing it would
    /// let an answer to an old prompt approve the new one.
    #[error(
        "correlation id '{}' is not the current prompt of call '{}' (the prompt was replaced or answered); answer the latest AwaitingApproval event",
        Shown(given),
        Shown(call_id)
    )]
    StaleCorrelation { call_id: String, given: String },
    #[error(
        "outcome {} is not offered by this prompt (offered: {})",
        outcome.name(),
        offered.iter().map(|o| o.name()).collect::<Vec<_>>().join(", ")
    )]
    OutcomeNotOffered {
        outcome: ConfirmationOutcome,
        offered: Vec<ConfirmationOutcome>,
    },
    #[error("tool '{tool}' does not accept new_content")]
    CannotModify { tool: String },
    #[error("new_content makes invalid arguments: {message}")]
    InvalidNewContent { message: String },
    #[error("the scheduler is not running")]
    Unavailable,
}

/// Why a Cancel was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CancelError {
    #[error("invalid Cancel: {0}")]
    Invalid(#[from] InvalidRequest),
    #[error("no session '{}'", Shown(session_id))]
    UnknownSession { session_id: String },
    #[error(
        "no batch '{}' running or queued in session '{}'",
        Shown(batch_id),
        Shown(session_id)
    )]
    UnknownBatch {
        session_id: String,
        batch_id: String,
    },
    #[error("the scheduler is not running")]
    Unavailable,
}

/// What every session shares (read-only).
pub(crate) struct Shared {
    pub config: SchedulerConfig,
    /// Read once per batch (a snapshot), so MCP tool list changes apply to
    /// batches that start later.
    pub registry: SharedRegistry,
    pub policy: PolicyHandle,
    /// Cancelled at server shutdown: every batch is cancelled with it.
    pub shutdown: CancellationToken,
    pub hub: mpsc::Sender<HubCommand>,
    pub metrics: Arc<Metrics>,
    /// The server's sandbox (its level is the most permissive a session may
    /// choose).
    pub sandbox: SharedSandbox,
    /// The sandbox of each level a session may choose.
    pub sandboxes: std::collections::BTreeMap<crate::sandbox::SandboxLevel, SharedSandbox>,
}

pub(crate) enum HubCommand {
    Schedule {
        request: BatchRequest,
        reply: oneshot::Sender<Result<BatchStream, ScheduleError>>,
    },
    Confirm {
        request: ConfirmRequest,
        reply: oneshot::Sender<Result<(), ConfirmError>>,
    },
    Cancel {
        request: CancelRequest,
        reply: oneshot::Sender<Result<CancelSummary, CancelError>>,
    },
    /// A session has been idle for its TTL after `processed` commands.
    SessionIdle {
        session_id: String,
        processed: u64,
    },
    StopAccepting,
}

/// Commands queued to the hub; handlers wait when it is this far behind.
const HUB_CHANNEL_CAPACITY: usize = 4096;

/// Handle to the scheduler. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    hub: mpsc::Sender<HubCommand>,
    registry: SharedRegistry,
    open_streams: watch::Receiver<usize>,
    metrics: Arc<Metrics>,
    sandbox: SharedSandbox,
    /// The MCP servers feeding the registry, for their status.
    mcp: Option<crate::tools::mcp::McpManager>,
}

impl Scheduler {
    /// Starts the hub. `sandbox` is `config.sandbox` probed (see
    /// [`crate::sandbox::Sandbox::new`]); the other levels a session may
    /// choose reuse that probe. `shutdown` cancels every session, batch and
    /// call. `registry` is an `Arc<Registry>` or a [`SharedRegistry`] that
    /// MCP servers update.
    pub fn start(
        config: SchedulerConfig,
        sandbox: SharedSandbox,
        registry: impl Into<SharedRegistry>,
        policy: PolicyHandle,
        shutdown: CancellationToken,
        metrics: Arc<Metrics>,
    ) -> Self {
        let registry = registry.into();
        let (hub_tx, hub_rx) = mpsc::channel(HUB_CHANNEL_CAPACITY);
        let (open_tx, open_rx) = watch::channel(0usize);
        // The levels a session may switch to: those at most as permissive as
        // the server's, each judged from the one probe of the kernel.
        let sandboxes = crate::sandbox::SandboxLevel::ALL
            .into_iter()
            .filter(|l| l.at_most(sandbox.config.level))
            .map(|level| {
                let s = if level == sandbox.config.level {
                    sandbox.clone()
                } else {
                    Arc::new(sandbox.at_level(level))
                };
                (level, s)
            })
            .collect();
        let shared = Arc::new(Shared {
            sandbox: sandbox.clone(),
            sandboxes,
            config,
            registry: registry.clone(),
            policy,
            shutdown,
            hub: hub_tx.clone(),
            metrics: metrics.clone(),
        });
        let hub = Hub {
            shared,
            sessions: HashMap::new(),
            accepting: true,
            open_streams: Arc::new(open_tx),
        };
        tokio::spawn(hub.run(hub_rx));
        Self {
            hub: hub_tx,
            registry,
            open_streams: open_rx,
            metrics,
            sandbox,
            mcp: None,
        }
    }

    /// Attaches the MCP servers whose tools the registry holds, so that
    /// their status can be reported.
    pub fn with_mcp(mut self, mcp: crate::tools::mcp::McpManager) -> Self {
        self.mcp = Some(mcp);
        self
    }

    /// Each configured MCP server's status, by name (empty without MCP).
    pub fn mcp_statuses(
        &self,
    ) -> std::collections::BTreeMap<String, crate::tools::mcp::McpServerStatus> {
        self.mcp.as_ref().map(|m| m.statuses()).unwrap_or_default()
    }

    /// The scheduler's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The sandbox commands run in (for `GetServerInfo`).
    pub fn sandbox(&self) -> &SharedSandbox {
        &self.sandbox
    }

    /// The current tool registry (for `ListTools`).
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.load()
    }

    /// Accepts a batch. The stream starts with `Accepted` and ends after
    /// `Completed`; dropping it cancels the batch.
    pub async fn schedule(&self, request: BatchRequest) -> Result<BatchStream, ScheduleError> {
        request.validate()?;
        let (reply, rx) = oneshot::channel();
        self.hub
            .send(HubCommand::Schedule { request, reply })
            .await
            .map_err(|_| ScheduleError::ShuttingDown)?;
        rx.await.map_err(|_| ScheduleError::ShuttingDown)?
    }

    /// Answers an approval prompt.
    pub async fn confirm(&self, request: ConfirmRequest) -> Result<(), ConfirmError> {
        request.validate()?;
        let (reply, rx) = oneshot::channel();
        self.hub
            .send(HubCommand::Confirm { request, reply })
            .await
            .map_err(|_| ConfirmError::Unavailable)?;
        rx.await.map_err(|_| ConfirmError::Unavailable)?
    }

    /// Cancels a session's batches (or one of them).
    pub async fn cancel(&self, request: CancelRequest) -> Result<CancelSummary, CancelError> {
        request.validate()?;
        let (reply, rx) = oneshot::channel();
        self.hub
            .send(HubCommand::Cancel { request, reply })
            .await
            .map_err(|_| CancelError::Unavailable)?;
        rx.await.map_err(|_| CancelError::Unavailable)?
    }

    /// Refuses new batches from now on (shutdown has begun).
    pub async fn stop_accepting(&self) {
        let _ = self.hub.send(HubCommand::StopAccepting).await;
    }

    /// Waits until no batch stream is open.
    pub async fn idle(&self) {
        let mut rx = self.open_streams.clone();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

struct SessionEntry {
    tx: mpsc::UnboundedSender<SessionCommand>,
    /// Given to each of the session's streams.
    link: SessionLink,
    token: CancellationToken,
    /// Commands sent to the session; compared with what it processed.
    forwarded: u64,
    /// When the hub last sent it a command: the oldest idle session is
    /// evicted first when `max_sessions` is reached.
    last_used: tokio::time::Instant,
    /// One clone per open [`BatchStream`] of the session: a session with
    /// more than this one is busy and never evicted.
    streams: Arc<()>,
}

impl SessionEntry {
    fn idle(&self) -> bool {
        Arc::strong_count(&self.streams) == 1
    }
}

/// Owns the map of sessions.
struct Hub {
    shared: Arc<Shared>,
    sessions: HashMap<String, SessionEntry>,
    accepting: bool,
    open_streams: Arc<watch::Sender<usize>>,
}

impl Hub {
    async fn run(mut self, mut rx: mpsc::Receiver<HubCommand>) {
        while let Some(cmd) = rx.recv().await {
            match cmd {
                HubCommand::Schedule { request, reply } => {
                    let _ = reply.send(self.schedule(request));
                }
                HubCommand::Confirm { request, reply } => {
                    let Some(entry) = self.sessions.get_mut(&request.session_id) else {
                        let _ = reply.send(Err(ConfirmError::UnknownSession {
                            session_id: request.session_id,
                        }));
                        continue;
                    };
                    entry.forwarded += 1;
                    entry.last_used = tokio::time::Instant::now();
                    let _ = entry.tx.send(SessionCommand::Confirm { request, reply });
                }
                HubCommand::Cancel { request, reply } => {
                    let Some(entry) = self.sessions.get_mut(&request.session_id) else {
                        let _ = reply.send(Err(CancelError::UnknownSession {
                            session_id: request.session_id,
                        }));
                        continue;
                    };
                    entry.forwarded += 1;
                    entry.last_used = tokio::time::Instant::now();
                    let _ = entry.tx.send(SessionCommand::Cancel { request, reply });
                }
                HubCommand::SessionIdle {
                    session_id,
                    processed,
                } => {
                    // Retire only when no command is in flight to it; the
                    // session drains and exits when its sender is dropped.
                    if self
                        .sessions
                        .get(&session_id)
                        .is_some_and(|e| e.forwarded == processed && e.idle())
                    {
                        self.sessions.remove(&session_id);
                        self.shared.metrics.sessions.dec();
                    }
                }
                HubCommand::StopAccepting => self.accepting = false,
            }
        }
    }

    fn schedule(&mut self, request: BatchRequest) -> Result<BatchStream, ScheduleError> {
        if let Some(requested) = request.sandbox_level
            && !self.shared.sandboxes.contains_key(&requested)
        {
            return Err(ScheduleError::SandboxLevelNotAllowed {
                requested,
                server: self.shared.config.sandbox.level,
            });
        }
        if !self.accepting || self.shared.shutdown.is_cancelled() {
            return Err(ScheduleError::ShuttingDown);
        }
        let limit = self.shared.config.max_calls_per_batch;
        if request.calls.len() > limit {
            return Err(ScheduleError::TooManyCalls {
                got: request.calls.len(),
                limit,
            });
        }
        if !self.sessions.contains_key(&request.session_id) {
            let limit = self.shared.config.max_sessions;
            if self.sessions.len() >= limit && !self.evict_oldest_idle() {
                return Err(ScheduleError::TooManySessions { limit });
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let (link, internal) = session::internal_channel();
            let token = self.shared.shutdown.child_token();
            tokio::spawn(Session::run(
                request.session_id.clone(),
                self.shared.clone(),
                rx,
                internal,
                token.clone(),
            ));
            self.shared.metrics.sessions.inc();
            self.sessions.insert(
                request.session_id.clone(),
                SessionEntry {
                    tx,
                    link,
                    token,
                    forwarded: 0,
                    last_used: tokio::time::Instant::now(),
                    streams: Arc::new(()),
                },
            );
        }
        let entry = self
            .sessions
            .get_mut(&request.session_id)
            .ok_or(ScheduleError::ShuttingDown)?;
        let batch_id = uuid::Uuid::new_v4().to_string();
        let token = entry.token.child_token();
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        entry.forwarded += 1;
        entry.last_used = tokio::time::Instant::now();
        self.shared.metrics.batch_accepted();
        entry
            .tx
            .send(SessionCommand::Schedule {
                batch_id: batch_id.clone(),
                request,
                events: EventSink::new(events_tx),
                token: token.clone(),
            })
            .map_err(|_| ScheduleError::ShuttingDown)?;
        self.open_streams.send_modify(|n| *n += 1);
        Ok(BatchStream {
            batch_id,
            rx: events_rx,
            burst: Vec::new().into_iter(),
            token,
            session: entry.link.clone(),
            ended: false,
            _open: OpenStream(self.open_streams.clone()),
            _session_open: entry.streams.clone(),
        })
    }

    /// At `max_sessions`: forgets the idle session (no open stream) the hub
    /// used least recently, as its idle TTL would; false when every session
    /// is busy. One scan of the map, only when the cap is reached.
    fn evict_oldest_idle(&mut self) -> bool {
        let Some(oldest) = self
            .sessions
            .iter()
            .filter(|(_, e)| e.idle())
            .min_by_key(|(_, e)| e.last_used)
            .map(|(id, _)| id.clone())
        else {
            return false;
        };
        // The session drains what was already sent to it and exits when
        // its sender is dropped.
        self.sessions.remove(&oldest);
        self.shared.metrics.sessions.dec();
        tracing::debug!(session = %oldest, "max_sessions reached: evicted the least recently used idle session");
        true
    }
}

/// Counts an open stream while alive.
struct OpenStream(Arc<watch::Sender<usize>>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The events of one batch. Ends after `Completed`. Dropping it (the client
/// went away) cancels the batch: queued, its calls end Cancelled; running,
/// every non-terminal call is cancelled and running tools are stopped.
pub struct BatchStream {
    batch_id: String,
    /// Events come in the bursts the session emitted them in.
    rx: mpsc::UnboundedReceiver<Vec<Event>>,
    /// The rest of the burst being read.
    burst: std::vec::IntoIter<Event>,
    /// The batch's token, cancelled on drop: stops its running tools.
    token: CancellationToken,
    /// Told when the stream is dropped before the end, so the session ends
    /// the batch's calls Cancelled.
    session: SessionLink,
    /// The last event (`Completed`) was read.
    ended: bool,
    _open: OpenStream,
    /// Marks the session busy while the stream is open (see
    /// `Hub::evict_oldest_idle`).
    _session_open: Arc<()>,
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        self.token.cancel();
        if !self.ended {
            self.session
                .batch_dropped(std::mem::take(&mut self.batch_id));
        }
    }
}

impl BatchStream {
    /// The server-assigned batch id.
    pub fn batch_id(&self) -> &str {
        &self.batch_id
    }

    /// The next event, `None` after `Completed`.
    pub async fn next(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        loop {
            if let Some(event) = self.burst.next() {
                return Poll::Ready(Some(event));
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(burst)) => self.burst = burst.into_iter(),
                Poll::Ready(None) => {
                    self.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl tokio_stream::Stream for BatchStream {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.poll_event(cx)
    }
}
