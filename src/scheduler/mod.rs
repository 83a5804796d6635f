//! The core scheduler: sessions, call states, waves, the per-session queue,
//! approval and cancellation.
//!
//! A [`Scheduler`] is a cheap handle to the hub task ([`hub`]), which owns
//! the map of sessions; each session is its own actor task ([`session`])
//! owning its queue, mode and rules, and driving its running batch: a
//! synchronous engine ([`batch`], with [`approval`]) whose effects the
//! session performs (executions in [`exec`]). Handlers send commands and
//! read a [`BatchStream`] of a batch's logged events ([`feed`] writes the
//! log of [`crate::store`]; [`resume`] is what lets a batch outlive its
//! stream). Cancellation is
//! a `CancellationToken` tree: server → session → batch → call.
//!
//! Layering: imports `store`, `policy`, `tools`, `sandbox`; never `api`.
//!
//! Not here: gRPC (see `api`), what a tool does (`tools`), whether it may
//! (`policy`).

mod approval;
mod batch;
mod call;
pub mod events;
mod exec;
mod feed;
mod hub;
pub mod metrics;
pub mod resume;
mod session;
pub mod tenants;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

pub use events::{
    BatchEvent, BatchRequest, CallEnd, CallRequest, CallSummary, CancelRequest, CancelSummary,
    ConfirmRequest, ConfirmationOutcome, Event, FunctionResponse, StateUpdate,
};
pub use hub::BatchStream;
use hub::{Hub, HubCommand};
pub use metrics::Metrics;
pub use resume::{Confirmed, WatchError, WatchRequest};
pub use validate::{InvalidBatch, InvalidRequest, Shown};

use crate::store::{BatchLog, Begun, NewBatch, SharedStore, StoreError};

use crate::policy::{ApprovalMode, PolicyHandle};
use crate::sandbox::{OutputLimits, SandboxConfig, SharedSandbox};
use crate::tenant::TenantId;
use crate::tools::{Registry, SharedRegistry};
use crate::workspaces::{OpenWorkspace, WorkspaceError, WorkspaceName, Workspaces};

pub use session::SessionView;

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
    /// idle session (no open stream, no batch queued or running); when
    /// every session is busy it is
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
    /// Grace of a batch whose request names none: how long it keeps running
    /// once its last reader went away. Zero cancels it at once.
    pub disconnect_grace: Duration,
    /// Longest grace a request may ask for: a detached batch holds its
    /// session, its processes and its log that long.
    pub max_disconnect_grace: Duration,
    /// How long and how much of completed batches is kept for WatchBatch
    /// and request_id replays.
    pub retention: crate::store::Retention,
    /// A durable store (`--store postgres://…`); `None` is the embedded
    /// memory store.
    pub store: Option<DurableStore>,
    /// How the memory store compacts a completed log nobody reads (the
    /// API's wire form, set by `crate::build_scheduler`); `None` keeps
    /// retained logs as appended (~4 KB more per idle session).
    pub log_codec: Option<LogCodec>,
    /// Where and how much of shell output beyond the cap is kept.
    pub kept_output: crate::tools::kept::KeptOutputConfig,
    /// Named workspaces under a root (`--workspaces-root`); `None`: the one
    /// workspace the scheduler was built over serves every session.
    pub workspaces: Option<crate::workspaces::WorkspacesConfig>,
    /// `[[tenants]]`: what each configured tenant may do, and its quotas.
    pub tenants: Vec<crate::tenant::TenantConfig>,
    /// The loaded policy file of each tenant that has one (see
    /// [`tenants::TenantPolicies`]).
    pub tenant_policies: tenants::TenantPolicies,
}

/// The store a server was configured with, when not the memory one.
#[derive(Clone)]
pub struct DurableStore(pub SharedStore<BatchEvent>);

/// What encodes a retained log's events when it is compacted (see
/// [`crate::store::BatchLog::compacting`]).
#[derive(Clone)]
pub struct LogCodec(pub Arc<dyn crate::store::EventCodec<BatchEvent>>);

impl std::fmt::Debug for LogCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogCodec")
    }
}

impl std::fmt::Debug for DurableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DurableStore")
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            default_mode: ApprovalMode::Default,
            confirmation_timeout: Some(Duration::from_secs(600)),
            execution_timeout: Duration::from_secs(300),
            output: OutputLimits::default(),
            max_calls_per_batch: 128,
            // About 2.5 KB each when idle with its last batch retained,
            // ~25 KB while it runs a batch (BENCHMARKS.md, session 9):
            // ~25 MB idle at the cap.
            max_sessions: 10_000,
            session_idle_ttl: Duration::from_secs(1800),
            sandbox: SandboxConfig::default(),
            blocking_file_io: false,
            disconnect_grace: Duration::ZERO,
            max_disconnect_grace: Duration::from_secs(600),
            retention: crate::store::Retention::default(),
            store: None,
            log_codec: None,
            kept_output: Default::default(),
            workspaces: None,
            tenants: Vec::new(),
            tenant_policies: Default::default(),
        }
    }
}

/// Batches one session may hold running or queued at once: each holds its
/// calls and log until it runs, and `GetSession` lists the queued ones
/// (1,024 ids stay far below a 4 MiB response).
pub const MAX_BATCHES_PER_SESSION: usize = 1024;

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
    #[error(
        "session has {limit} batches running or queued; the limit is MAX_BATCHES_PER_SESSION = {limit}: wait for one to complete"
    )]
    TooManyBatches { limit: usize },
    #[error("the server is shutting down and accepts no new batches")]
    ShuttingDown,
    #[error(
        "sandbox level {requested} is more permissive than the server's ({server}); a session may only choose a level at most as permissive"
    )]
    SandboxLevelNotAllowed {
        requested: crate::sandbox::SandboxLevel,
        server: crate::sandbox::SandboxLevel,
    },
    #[error(
        "disconnect_grace_secs {asked} is over the server's limit max_disconnect_grace_secs = {limit}"
    )]
    GraceTooLong { asked: u64, limit: u64 },
    /// The workspace named (or not) cannot serve this batch.
    #[error(transparent)]
    Workspace(#[from] crate::workspaces::WorkspaceError),
    /// Outside what the caller's tenant may do, or over one of its quotas.
    #[error(transparent)]
    Tenant(#[from] tenants::TenantRefusal),
    /// A request id known with other calls, or the store failing.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a Confirm was refused. Nothing changed.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
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
    /// longer be answered. Known while its batch is retained (see
    /// [`crate::store::Retention`]); later it is [`ConfirmError::UnknownCall`].
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
    /// The first answer to a prompt wins; this one differs from it.
    #[error(
        "the prompt of call '{}' was already answered with {winner}{}; the first answer wins and this different one changed nothing",
        Shown(call_id),
        if *with_content { " (with new_content)" } else { "" }
    )]
    AnsweredDifferently {
        call_id: String,
        winner: String,
        with_content: bool,
    },
    /// A durable store did not record the answer (it cannot be reached, or
    /// the session passed to another replica): nothing changed, the prompt
    /// is still open here.
    #[error(
        "the answer to the prompt of call '{}' was not applied: it could not be recorded in the store ({reason}); nothing changed, send the Confirm again",
        Shown(call_id)
    )]
    NotRecorded { call_id: String, reason: String },
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

// === impl for_client: errors name the client's session id ===
//
// The hub and the store key a session by `<tenant>/<id>`; what goes back to
// the client names its own id, so another tenant's session and one that
// never existed read the same.

fn unkey(session_id: &mut String) {
    *session_id = TenantId::client_session_id(session_id).to_string();
}

impl ScheduleError {
    fn for_client(mut self) -> Self {
        if let ScheduleError::Store(e) = &mut self {
            e.for_client();
        }
        self
    }
}

impl WatchError {
    fn for_client(mut self) -> Self {
        if let WatchError::Store(e) = &mut self {
            e.for_client();
        }
        self
    }
}

impl ConfirmError {
    fn for_client(mut self) -> Self {
        if let ConfirmError::UnknownSession { session_id }
        | ConfirmError::UnknownCall { session_id, .. } = &mut self
        {
            unkey(session_id);
        }
        self
    }
}

impl CancelError {
    fn for_client(mut self) -> Self {
        if let CancelError::UnknownSession { session_id }
        | CancelError::UnknownBatch { session_id, .. } = &mut self
        {
            unkey(session_id);
        }
        self
    }
}

impl StoreError {
    /// Every session id a store error names is the client's, never the
    /// store's `<tenant>/<id>` key.
    fn for_client(&mut self) {
        match self {
            StoreError::UnknownBatch { session_id, .. }
            | StoreError::EventsDropped { session_id, .. }
            | StoreError::OwnerSilent { session_id, .. }
            | StoreError::OwnedElsewhere { session_id, .. }
            | StoreError::RunningElsewhere { session_id, .. }
            | StoreError::LeaseLost { session_id } => unkey(session_id),
            StoreError::RequestIdConflict { .. } | StoreError::Unavailable { .. } => {}
        }
    }
}

/// How many times a request claims its request id again after the batch
/// it named was refused before it started (requests with one request id
/// racing each other): each time one of them became the batch and was
/// refused, so this bounds a request's work, not the outcome.
const MAX_RECLAIMS: u32 = 8;

/// What every session shares (read-only).
pub(crate) struct Shared {
    pub config: SchedulerConfig,
    /// Read once per batch (a snapshot), so MCP tool list changes apply to
    /// batches that start later.
    pub registry: SharedRegistry,
    pub policy: PolicyHandle,
    /// Cancelled at server shutdown: every batch is cancelled with it.
    pub shutdown: CancellationToken,
    /// Batches, their logs, request ids and answers.
    pub store: SharedStore<BatchEvent>,
    pub metrics: Arc<Metrics>,
    /// The server's sandbox (its level is the most permissive a session may
    /// choose).
    pub sandbox: SharedSandbox,
    /// The sandbox of each level a session may choose.
    pub sandboxes: std::collections::BTreeMap<crate::sandbox::SandboxLevel, SharedSandbox>,
    /// Named workspaces (a workspaces root): every session must have one.
    pub workspaces: Option<Arc<Workspaces>>,
    /// Each configured tenant's rules and counters.
    pub tenants: Arc<tenants::TenantTable>,
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
    store: SharedStore<BatchEvent>,
    /// Whether the store is durable (batches' requests are recorded for a
    /// replica taking them over).
    durable: bool,
    /// Approval mode of a new session (a session the store knows without
    /// recorded settings has it).
    default_mode: ApprovalMode,
    /// The MCP servers feeding the registry, for their status.
    mcp: Option<crate::tools::mcp::McpManager>,
    /// Named workspaces (a workspaces root).
    workspaces: Option<Arc<Workspaces>>,
    tenants: Arc<tenants::TenantTable>,
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
        Self::start_with_workspaces(config, sandbox, registry, policy, shutdown, metrics, None)
    }

    /// [`Scheduler::start`] serving the named workspaces of `workspaces`
    /// (every session then works in one; see [`crate::workspaces`]).
    pub fn start_with_workspaces(
        config: SchedulerConfig,
        sandbox: SharedSandbox,
        registry: impl Into<SharedRegistry>,
        policy: PolicyHandle,
        shutdown: CancellationToken,
        metrics: Arc<Metrics>,
        workspaces: Option<Arc<Workspaces>>,
    ) -> Self {
        let registry = registry.into();
        let (hub_tx, hub_rx) = mpsc::channel(HUB_CHANNEL_CAPACITY);
        let (open_tx, open_rx) = watch::channel(0usize);
        let durable = config.store.is_some();
        let default_mode = config.default_mode;
        let store: SharedStore<BatchEvent> = match &config.store {
            Some(DurableStore(store)) => store.clone(),
            None => match &config.log_codec {
                Some(LogCodec(codec)) => Arc::new(crate::store::MemoryStore::compacting(
                    config.retention,
                    codec.clone(),
                )),
                None => Arc::new(crate::store::MemoryStore::new(config.retention)),
            },
        };
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
        let tenants = Arc::new(tenants::TenantTable::new(
            &config.tenants,
            &config.tenant_policies,
            &policy,
            &shutdown,
        ));
        let shared = Arc::new(Shared {
            tenants: tenants.clone(),
            sandbox: sandbox.clone(),
            sandboxes,
            config,
            registry: registry.clone(),
            policy,
            shutdown,
            store: store.clone(),
            metrics: metrics.clone(),
            workspaces: workspaces.clone(),
        });
        let (hub, idle_rx) = Hub::new(shared, open_tx);
        tokio::spawn(hub.run(hub_rx, idle_rx));
        Self {
            hub: hub_tx,
            registry,
            open_streams: open_rx,
            metrics,
            sandbox,
            store,
            durable,
            default_mode,
            mcp: None,
            workspaces,
            tenants,
        }
    }

    /// The named workspaces, when the server has a workspaces root.
    pub fn workspaces(&self) -> Option<&Arc<Workspaces>> {
        self.workspaces.as_ref()
    }

    /// `tenant`'s workspace `name` opened (created with
    /// `--create-workspaces`), off the async runtime; `None` when the
    /// request names none. A name on a server without a workspaces root is
    /// refused.
    async fn open_workspace(
        &self,
        tenant: &TenantId,
        name: Option<&WorkspaceName>,
    ) -> Result<Option<Arc<OpenWorkspace>>, WorkspaceError> {
        let Some(name) = name else {
            return Ok(None);
        };
        let Some(workspaces) = self.workspaces.clone() else {
            return Err(WorkspaceError::NotServed {
                given: name.to_string(),
            });
        };
        let (tenant, name) = (tenant.clone(), name.clone());
        let shown = name.to_string();
        tokio::task::spawn_blocking(move || workspaces.open(&tenant, &name))
            .await
            .unwrap_or(Err(WorkspaceError::Unusable { name: shown }))
            .map(Some)
    }

    /// `tenant`'s workspaces under the root (see [`Workspaces::list`]);
    /// `None` without a workspaces root.
    pub async fn list_workspaces(
        &self,
        tenant: &TenantId,
    ) -> Option<std::io::Result<(Vec<WorkspaceName>, bool)>> {
        let workspaces = self.workspaces.clone()?;
        let tenant = tenant.clone();
        Some(
            tokio::task::spawn_blocking(move || workspaces.list(&tenant))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
        )
    }

    /// What a live session of `tenant` looks like (its workspace, mode and
    /// batches); `None` when it does not exist, here and in this tenant
    /// (another tenant's session reads the same).
    pub async fn describe_as(&self, tenant: &TenantId, session_id: &str) -> Option<SessionView> {
        let (reply, rx) = oneshot::channel();
        self.hub
            .send(HubCommand::Describe {
                session_id: tenant.session_key(session_id),
                reply,
            })
            .await
            .ok()?;
        rx.await.ok()??.await.ok()
    }

    /// What a durable store holds of a session of `tenant` that this
    /// replica does not run: the replica holding its lease (if any), its
    /// mode (recorded settings), workspace (its latest batch naming one)
    /// and its running batches (the oldest running, the rest queued).
    /// `None`: the store knows no such session (or is not durable).
    pub async fn describe_stored(
        &self,
        tenant: &TenantId,
        session_id: &str,
    ) -> Result<Option<(SessionView, Option<String>)>, StoreError> {
        let Some(stored) = self
            .store
            .stored_session(&tenant.session_key(session_id))
            .await
            .map_err(|mut e| {
                e.for_client();
                e
            })?
        else {
            return Ok(None);
        };
        let mode = stored
            .settings
            .as_deref()
            .and_then(session::recorded_mode)
            .unwrap_or(self.default_mode);
        let workspace = stored
            .requests
            .iter()
            .filter_map(|r| resume::decode_request(r).ok())
            .find_map(|r| r.workspace);
        let mut running = stored.running.into_iter();
        let view = SessionView {
            workspace,
            mode,
            running_batch: running.next(),
            queued_batches: running.collect(),
        };
        Ok(Some((view, stored.owner)))
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

    /// Whether the store can be reached (`None`: it cannot be lost).
    pub fn store_reachable(&self) -> Option<watch::Receiver<bool>> {
        self.store.reachable()
    }

    /// The sandbox commands run in (for `GetServerInfo`).
    pub fn sandbox(&self) -> &SharedSandbox {
        &self.sandbox
    }

    /// The current tool registry (for `ListTools`).
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.load()
    }

    /// The tools `tenant` sees: without the MCP servers its `[[tenants]]`
    /// table leaves out.
    pub fn registry_for(&self, tenant: &TenantId) -> Arc<Registry> {
        let registry = self.registry.load();
        match self.tenants.get(tenant) {
            Some(t) if t.config.mcp_servers.is_some() => {
                Arc::new(registry.restricted(&|server| t.sees_mcp_server(server)))
            }
            _ => registry,
        }
    }

    /// Accepts a batch. The stream starts with `Accepted` and ends after
    /// `Completed`; dropping it (the last reader of the batch) cancels the
    /// batch at once, or after its disconnect grace when nobody re-attached.
    /// A request id known with the same calls schedules nothing: the stream
    /// reads the original batch's log from the start ([`BatchStream::replayed`]).
    pub async fn schedule(&self, request: BatchRequest) -> Result<BatchStream, ScheduleError> {
        self.schedule_as(&TenantId::default(), request).await
    }

    /// [`Scheduler::schedule`] in `tenant`'s namespace: its `session_id` is
    /// a different session from the same id of any other tenant.
    pub async fn schedule_as(
        &self,
        tenant: &TenantId,
        mut request: BatchRequest,
    ) -> Result<BatchStream, ScheduleError> {
        // Validated (on the client's id) before anything is claimed in the
        // store.
        request.validate()?;
        if let Some(t) = self.tenants.get(tenant) {
            t.check_request(request.approval_mode, request.sandbox_level)?;
        }
        // Opened before anything is claimed in the store: a refused
        // workspace leaves no trace.
        let workspace = self
            .open_workspace(tenant, request.workspace.as_ref())
            .await?;
        request.session_id = tenant.session_key(&request.session_id);
        self.schedule_key(request, workspace)
            .await
            .map_err(|e| e.for_client())
    }

    async fn schedule_key(
        &self,
        mut request: BatchRequest,
        workspace: Option<Arc<OpenWorkspace>>,
    ) -> Result<BatchStream, ScheduleError> {
        let batch_id = uuid::Uuid::new_v4().to_string();
        // Only a request id needs the digest: the hot path hashes nothing.
        let digest = match request.request_id {
            Some(_) => resume::batch_digest(&request),
            None => [0; 32],
        };
        // Whether a durable store may record the batch behind it (any
        // tenant's view of a tool declares the same kind).
        let reads_only = self.durable && request.request_id.is_none() && {
            let registry = self.registry.load();
            request.calls.iter().all(|call| {
                registry
                    .get(&call.name)
                    .is_ok_and(|tool| tool.declaration().read_only)
            })
        };
        let mut refused_originals = 0;
        let writer = loop {
            let begun = self
                .store
                .begin_batch(NewBatch {
                    session_id: request.session_id.clone(),
                    batch_id: batch_id.clone(),
                    request_id: request.request_id.clone(),
                    digest,
                    request: self.durable.then(|| resume::encode_request(&request)),
                    reads_only,
                })
                .await;
            let begun = match begun {
                // A retry of a batch whose replica stopped: taken over here,
                // nothing of it run twice.
                Err(StoreError::RunningElsewhere {
                    session_id,
                    batch_id,
                }) => {
                    return self
                        .take_over(&session_id, &batch_id)
                        .await
                        .map_err(|e| match e {
                            WatchError::Store(e) => ScheduleError::Store(e),
                            _ => ScheduleError::ShuttingDown,
                        });
                }
                other => other?,
            };
            match begun {
                Begun::New(writer) => break writer,
                Begun::Existing {
                    batch_id: original,
                    log,
                } => {
                    // A retry racing its original between the claim and the
                    // admission: an original then refused closes its log
                    // with no event and frees the request id, and this
                    // request claims it again (it is the batch now, and is
                    // told its own admission) rather than following an
                    // empty log.
                    if log.last_sequence() == 0
                        && let Ok(mut first) = log.reader(0)
                        && first.next().await.is_none()
                    {
                        refused_originals += 1;
                        // The original's own request frees the id too, when
                        // it is told; freeing it here first is the same.
                        // A durable store frees it behind, in order: there
                        // the client is told to retry.
                        if !self.durable && refused_originals < MAX_RECLAIMS {
                            self.store.abandon_batch(&request.session_id, &original);
                            continue;
                        }
                        return Err(ScheduleError::Store(StoreError::Unavailable {
                            reason: "the batch this request_id named was refused before it started (a request with the same request_id raced it); send the request again".into(),
                        }));
                    }
                    return self
                        .attach(request.session_id, original, log, 0, true)
                        .await
                        .map_err(|_| ScheduleError::ShuttingDown);
                }
            }
        };
        let session_id = request.session_id.clone();
        // The settings go with the first batch to reach the session.
        let mut settings = self.settings_if_moved(&session_id).await;
        // A stopped owner's running batches of this session go on here
        // first, queued before this one as they were (each runs to its end
        // with a reader here; its own client re-attaches with WatchBatch).
        for orphan in self.store.take_orphans(&session_id) {
            self.resume_orphan(&session_id, &orphan, &mut settings)
                .await;
        }
        request.settings = settings.map(Into::into);
        let (reply, rx) = oneshot::channel();
        let sent = self
            .hub
            .send(HubCommand::Schedule {
                request,
                batch_id: batch_id.clone(),
                writer,
                workspace,
                reply,
            })
            .await;
        let result = match sent {
            Ok(()) => rx.await.unwrap_or(Err(ScheduleError::ShuttingDown)),
            Err(_) => Err(ScheduleError::ShuttingDown),
        };
        if result.is_err() {
            // Refused after the claim: the request id is free again.
            self.store.abandon_batch(&session_id, &batch_id);
        }
        result
    }

    /// The session's settings as the durable store recorded them, when this
    /// replica's hold on the session is new (see
    /// [`crate::store::Store::session_settings`]). One the store cannot
    /// give now is logged and the session keeps what it holds.
    async fn settings_if_moved(&self, session_id: &str) -> Option<Vec<u8>> {
        if !self.durable {
            return None;
        }
        match self.store.session_settings(session_id).await {
            Ok(settings) => settings,
            Err(e) => {
                tracing::warn!(session = %session_id, reason = %e,
                    "store: reading the session's settings failed; keeping this replica's");
                None
            }
        }
    }

    /// Re-attaches to a batch's log after `after_sequence`.
    pub async fn watch(&self, request: WatchRequest) -> Result<BatchStream, WatchError> {
        self.watch_as(&TenantId::default(), request).await
    }

    /// [`Scheduler::watch`] in `tenant`'s namespace: another tenant's batch
    /// is NOT_FOUND exactly as a batch that never existed.
    pub async fn watch_as(
        &self,
        tenant: &TenantId,
        mut request: WatchRequest,
    ) -> Result<BatchStream, WatchError> {
        request.validate()?;
        request.session_id = tenant.session_key(&request.session_id);
        self.watch_key(request).await.map_err(|e| e.for_client())
    }

    async fn watch_key(&self, request: WatchRequest) -> Result<BatchStream, WatchError> {
        let log = match self
            .store
            .batch(&request.session_id, &request.batch_id)
            .await
        {
            Err(StoreError::RunningElsewhere { .. }) => {
                // Its owner stopped (or this is UNAVAILABLE naming it): the
                // batch goes on here, its log starting again.
                return self.take_over(&request.session_id, &request.batch_id).await;
            }
            other => other?,
        };
        self.attach(
            request.session_id,
            request.batch_id,
            log,
            request.after_sequence,
            false,
        )
        .await
    }

    /// Takes over a running batch whose replica stopped ([`Store::adopt`]):
    /// its calls recorded Executing end `outcome_unknown`, the others run
    /// (a prompt is offered again, with a new correlation id). The stream
    /// reads the batch's new log from its start.
    ///
    /// [`Store::adopt`]: crate::store::Store::adopt
    async fn take_over(&self, session_id: &str, batch_id: &str) -> Result<BatchStream, WatchError> {
        let unknown = || {
            WatchError::Store(StoreError::UnknownBatch {
                session_id: session_id.to_string(),
                batch_id: batch_id.to_string(),
                retention: self.store.retention(),
            })
        };
        let Some(mut adopted) = self.store.adopt(session_id, batch_id).await? else {
            // Completed meanwhile: read as any completed batch.
            let log = self
                .store
                .batch(session_id, batch_id)
                .await
                .map_err(|e| match e {
                    StoreError::RunningElsewhere { .. } => unknown(),
                    e => WatchError::Store(e),
                })?;
            return self
                .attach(session_id.to_string(), batch_id.to_string(), log, 0, false)
                .await;
        };
        // The stopped owner's other running batches of the session go on
        // here too, in the order they began around this one (queued behind
        // each other as they were), whether or not their clients come back.
        let before = std::mem::take(&mut adopted.began_before);
        let after = std::mem::take(&mut adopted.began_after);
        let mut settings = self.settings_if_moved(session_id).await;
        for orphan in &before {
            self.resume_orphan(session_id, orphan, &mut settings).await;
        }
        let stream = self
            .run_adopted(session_id, batch_id, adopted, &mut settings)
            .await;
        for orphan in &after {
            self.resume_orphan(session_id, orphan, &mut settings).await;
        }
        stream
    }

    /// Takes over a stopped owner's batch nobody asked for yet: it runs to
    /// its end here, read by a task (its own client re-attaches with
    /// WatchBatch).
    async fn resume_orphan(
        &self,
        session_id: &str,
        batch_id: &str,
        settings: &mut Option<Vec<u8>>,
    ) {
        let resumed = match self.store.adopt(session_id, batch_id).await {
            Ok(Some(adopted)) => {
                self.run_adopted(session_id, batch_id, adopted, settings)
                    .await
            }
            // Completed meanwhile, or already going on here.
            Ok(None) => return,
            Err(e) => Err(WatchError::Store(e)),
        };
        match resumed {
            Ok(mut stream) => {
                tokio::spawn(async move { while stream.next().await.is_some() {} });
            }
            Err(e) => tracing::warn!(
                session = %session_id,
                batch = %batch_id,
                reason = %e,
                "a stopped replica's batch could not be resumed"
            ),
        }
    }

    /// Runs a batch adopted from a stopped owner ([`Store::adopt`]);
    /// `settings` (the session's recorded settings, taken here) go with it.
    ///
    /// [`Store::adopt`]: crate::store::Store::adopt
    async fn run_adopted(
        &self,
        session_id: &str,
        batch_id: &str,
        adopted: crate::store::Adopted<BatchEvent>,
        settings: &mut Option<Vec<u8>>,
    ) -> Result<BatchStream, WatchError> {
        let mut request = match resume::decode_request(&adopted.request) {
            Ok(request) => request,
            Err(e) => {
                return Err(WatchError::Store(StoreError::Unavailable {
                    reason: e.to_string(),
                }));
            }
        };
        tracing::warn!(
            session = %session_id,
            batch = %batch_id,
            outcome_unknown = adopted.executing.len(),
            ended = adopted.ended.len(),
            "taking over a batch whose replica stopped"
        );
        request.outcome_unknown = adopted.executing;
        request.answered = adopted.answers.into();
        // The batch runs in the workspace its session named, opened here
        // for the tenant of its key.
        let tenant = session_id
            .split_once('/')
            .and_then(|(t, _)| TenantId::new(t).ok())
            .unwrap_or_default();
        let workspace = self
            .open_workspace(&tenant, request.workspace.as_ref())
            .await
            .map_err(|e| {
                WatchError::Store(StoreError::Unavailable {
                    reason: e.to_string(),
                })
            })?;
        for (call_id, end) in adopted.ended {
            match call::Terminal::decode(&end) {
                Some(_) => request.ended.push((call_id, end)),
                // Unreadable: as if its end had not been written.
                None => request.outcome_unknown.push(call_id),
            }
        }
        request.settings = settings.take().map(Into::into);
        let (reply, rx) = oneshot::channel();
        self.hub
            .send(HubCommand::Schedule {
                request,
                batch_id: batch_id.to_string(),
                writer: adopted.writer,
                workspace,
                reply,
            })
            .await
            .map_err(|_| WatchError::Unavailable)?;
        match rx.await {
            Ok(Ok(stream)) => Ok(stream),
            _ => Err(WatchError::Unavailable),
        }
    }

    async fn attach(
        &self,
        session_id: String,
        batch_id: String,
        log: Arc<BatchLog<BatchEvent>>,
        after: u64,
        replayed: bool,
    ) -> Result<BatchStream, WatchError> {
        let (reply, rx) = oneshot::channel();
        self.hub
            .send(HubCommand::Attach {
                session_id,
                batch_id,
                log,
                after,
                replayed,
                reply,
            })
            .await
            .map_err(|_| WatchError::Unavailable)?;
        rx.await.map_err(|_| WatchError::Unavailable)?
    }

    /// Answers an approval prompt.
    pub async fn confirm(&self, request: ConfirmRequest) -> Result<Confirmed, ConfirmError> {
        self.confirm_as(&TenantId::default(), request).await
    }

    /// [`Scheduler::confirm`] in `tenant`'s namespace: another tenant's
    /// session or call is NOT_FOUND exactly as one that never existed.
    pub async fn confirm_as(
        &self,
        tenant: &TenantId,
        mut request: ConfirmRequest,
    ) -> Result<Confirmed, ConfirmError> {
        request.validate()?;
        request.session_id = tenant.session_key(&request.session_id);
        self.confirm_key(request).await.map_err(|e| e.for_client())
    }

    async fn confirm_key(&self, request: ConfirmRequest) -> Result<Confirmed, ConfirmError> {
        let (session_id, call_id, correlation_id) = (
            request.session_id.clone(),
            request.call_id.clone(),
            request.correlation_id.clone(),
        );
        let answer = crate::store::Answer {
            outcome: request.outcome.name().to_string(),
            new_content: request.new_content.clone(),
        };
        let (reply, rx) = oneshot::channel();
        self.hub
            .send(HubCommand::Confirm { request, reply })
            .await
            .map_err(|_| ConfirmError::Unavailable)?;
        let refused = match rx.await.map_err(|_| ConfirmError::Unavailable)? {
            Ok(confirmed) => return Ok(confirmed),
            Err(
                e @ (ConfirmError::UnknownSession { .. }
                | ConfirmError::UnknownCall { .. }
                | ConfirmError::NotAwaitingApproval { .. }
                | ConfirmError::AlreadyEnded { .. }
                | ConfirmError::StaleCorrelation { .. }),
            ) => e,
            Err(e) => return Err(e),
        };
        // Not open here: the prompt may have been answered on a replica
        // that stopped (or whose lease lapsed); a durable store has the
        // answer.
        match self
            .store
            .recorded_answer(&session_id, &call_id, &correlation_id)
            .await
        {
            Ok(Some(winner)) if winner == answer => Ok(Confirmed {
                already_applied: true,
            }),
            Ok(Some(winner)) => Err(ConfirmError::AnsweredDifferently {
                call_id,
                with_content: winner.new_content.is_some(),
                winner: winner.outcome,
            }),
            Ok(None) => Err(refused),
            Err(e) => {
                tracing::warn!(reason = %e, "store: reading a recorded answer failed");
                Err(refused)
            }
        }
    }

    /// Cancels a session's batches (or one of them).
    pub async fn cancel(&self, request: CancelRequest) -> Result<CancelSummary, CancelError> {
        self.cancel_as(&TenantId::default(), request).await
    }

    /// [`Scheduler::cancel`] in `tenant`'s namespace: another tenant's
    /// session or batch is NOT_FOUND exactly as one that never existed.
    pub async fn cancel_as(
        &self,
        tenant: &TenantId,
        mut request: CancelRequest,
    ) -> Result<CancelSummary, CancelError> {
        request.validate()?;
        request.session_id = tenant.session_key(&request.session_id);
        self.cancel_key(request).await.map_err(|e| e.for_client())
    }

    async fn cancel_key(&self, request: CancelRequest) -> Result<CancelSummary, CancelError> {
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

    /// This replica's id in the store's leases (GetSession's
    /// `owner_replica`); `None` without a durable store.
    pub fn replica_id(&self) -> Option<&str> {
        self.store.replica_id()
    }

    /// The replica running `session_id`, when another one does (a durable
    /// store): a request this replica cannot serve goes there.
    pub async fn owner_elsewhere(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        self.store.owner_elsewhere(session_id).await
    }

    /// Relays a request to the replica running the session and waits for
    /// its answer (see [`crate::store::Store::relay`]).
    pub async fn relay(
        &self,
        owner: &str,
        session_id: &str,
        kind: &str,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, StoreError> {
        self.store.relay(owner, session_id, kind, body).await
    }

    /// The requests other replicas relay to this one (taken once).
    pub fn take_inbox(
        &self,
    ) -> Option<tokio::sync::mpsc::UnboundedReceiver<crate::store::InboxItem>> {
        self.store.take_inbox()
    }

    /// Whether the store is durable (and may hold sessions of other
    /// replicas).
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    /// Copies the log of a batch running here into the store as it grows,
    /// for a WatchBatch on another replica; `false` when it does not run
    /// here.
    pub async fn mirror(&self, session_id: &str, batch_id: &str) -> Result<bool, StoreError> {
        self.store.mirror(session_id, batch_id).await
    }

    /// WatchBatch of a batch another replica runs (and mirrors): its log
    /// read from the store as it grows.
    pub async fn watch_store(&self, request: WatchRequest) -> Result<BatchStream, WatchError> {
        let log = self
            .store
            .tail(&request.session_id, &request.batch_id)
            .await?;
        self.attach(
            request.session_id,
            request.batch_id,
            log,
            request.after_sequence,
            false,
        )
        .await
    }

    /// Waits until no batch stream is open.
    pub async fn idle(&self) {
        let mut rx = self.open_streams.clone();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}
