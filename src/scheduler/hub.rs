//! The hub: the map of live sessions, and the streams of their batches.
//!
//! Owns: [`Hub`] (one task; creates a session actor on first use, routes
//! Schedule / Confirm / Cancel to it, keeps an idle session's state as data
//! once its actor reports idleness on its own [`IdleReport`] channel (and
//! starts a new actor with it on the next batch), forgets a session idle
//! for its TTL, hands out readers of a batch's log)
//! and [`BatchStream`] (a batch's log as read by one client; the last one
//! going away detaches the batch). Not here: what a session does with a
//! command (`session.rs`), request validation (`validate.rs`, run by the
//! `Scheduler` handle before a command is sent), the log and its retention
//! (`crate::store`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::feed::EventSink;
use super::session::SessionView;
use super::session::{self, Kept, Session, SessionCommand, SessionLink};
use super::tenants::TenantState;
use super::{
    BatchEvent, BatchRequest, CancelError, CancelRequest, CancelSummary, ConfirmError,
    ConfirmRequest, Confirmed, ScheduleError, Shared, WatchError,
};
use crate::store::{BatchLog, Entry, LogReader, LogWriter};
use crate::workspaces::{OpenWorkspace, WorkspaceError};

pub(crate) enum HubCommand {
    Schedule {
        request: BatchRequest,
        batch_id: String,
        /// The log the store began for it.
        writer: LogWriter<BatchEvent>,
        /// The workspace the request named, opened (`None`: it named none).
        workspace: Option<Arc<OpenWorkspace>>,
        reply: oneshot::Sender<Result<BatchStream, ScheduleError>>,
    },
    /// A new reader of a batch's log (WatchBatch, a replayed request id).
    Attach {
        session_id: String,
        batch_id: String,
        log: Arc<BatchLog<BatchEvent>>,
        after: u64,
        replayed: bool,
        reply: oneshot::Sender<Result<BatchStream, WatchError>>,
    },
    Confirm {
        request: ConfirmRequest,
        reply: oneshot::Sender<Result<Confirmed, ConfirmError>>,
    },
    Cancel {
        request: CancelRequest,
        reply: oneshot::Sender<Result<CancelSummary, CancelError>>,
    },
    /// What `GetSession` shows of a live session; `None`: no such session.
    Describe {
        session_id: String,
        reply: oneshot::Sender<Option<oneshot::Receiver<SessionView>>>,
    },
    StopAccepting,
}

/// A session's actor has been idle for [`session::ACTOR_IDLE`] after
/// `processed` commands; `kept` is what it keeps between batches.
pub(crate) struct IdleReport {
    pub session_id: String,
    /// Which actor of the session reports (a report of an earlier one,
    /// evicted, must not end a later one).
    pub actor: u64,
    pub processed: u64,
    pub kept: Box<Kept>,
}

/// Idle reports waiting for the hub. A session whose report does not fit
/// (thousands of sessions went idle at once) tries again after another
/// [`session::ACTOR_IDLE`].
pub(crate) const IDLE_CHANNEL_CAPACITY: usize = 1024;

/// A session's actor, or what it kept once it ended.
enum Actor {
    /// The session has work, or had some within [`session::ACTOR_IDLE`].
    Running {
        /// Unbounded: the hub must not wait on one session (that would
        /// stall every other), and a session handles each command without
        /// waiting, so its backlog is bounded by what the hub's own bounded
        /// channel (`HUB_CHANNEL_CAPACITY`) lets through.
        tx: mpsc::UnboundedSender<Box<SessionCommand>>,
        /// Given to each of the session's streams.
        link: SessionLink,
        token: CancellationToken,
        /// Commands sent to the session; compared with what it processed.
        forwarded: u64,
        /// The actor's number ([`IdleReport::actor`]).
        id: u64,
    },
    /// Idle: no task, no channels; the next batch starts an actor with it.
    /// Boxed: an entry of the map is as large as its largest variant.
    Idle(Box<Kept>),
}

struct SessionEntry {
    actor: Actor,
    /// When the hub last sent it a command: the oldest idle session is
    /// evicted first when `max_sessions` is reached, and one idle for the
    /// TTL since is forgotten.
    last_used: tokio::time::Instant,
    /// Whether the hub's expiry heap holds the session (at most once).
    expiring: bool,
    /// One clone per open [`BatchStream`] of the session: a session with
    /// more than this one is busy and never evicted.
    streams: Arc<()>,
    /// The session's workspace, fixed for its life (a workspaces root).
    workspace: Option<Arc<OpenWorkspace>>,
    /// One clone per batch accepted and not completed: a batch arriving
    /// while there is one waits in the queue (`max_queued_batches`).
    batches: Arc<()>,
    /// The session's tenant rules, when it has a `[[tenants]]` table.
    tenant: Option<Arc<TenantState>>,
}

impl SessionEntry {
    fn idle(&self) -> bool {
        Arc::strong_count(&self.streams) == 1
    }

    /// Sends `cmd` to the session's actor, counted; `Err(cmd)`: it has
    /// none (idle), or its actor is gone (the server stops).
    fn send(&mut self, cmd: Box<SessionCommand>) -> Result<(), Box<SessionCommand>> {
        self.last_used = tokio::time::Instant::now();
        match &mut self.actor {
            Actor::Running { tx, forwarded, .. } => {
                *forwarded += 1;
                tx.send(cmd).map_err(|e| e.0)
            }
            Actor::Idle(_) => Err(cmd),
        }
    }

    fn link(&self) -> Option<SessionLink> {
        match &self.actor {
            Actor::Running { link, .. } => Some(link.clone()),
            Actor::Idle(_) => None,
        }
    }
}

/// Owns the map of sessions.
pub(crate) struct Hub {
    shared: Arc<Shared>,
    sessions: HashMap<String, SessionEntry>,
    accepting: bool,
    open_streams: Arc<watch::Sender<usize>>,
    idle_tx: mpsc::Sender<IdleReport>,
    /// Sessions without an actor, by when their idle TTL runs out (as of
    /// when they were pushed: a session used since is pushed again).
    /// Bounded by the map: each session at most once (`expiring`).
    expiry: BinaryHeap<Reverse<(tokio::time::Instant, String)>>,
    /// Numbers the actors started.
    actors_started: u64,
}

impl Hub {
    pub fn new(
        shared: Arc<Shared>,
        open_streams: watch::Sender<usize>,
    ) -> (Self, mpsc::Receiver<IdleReport>) {
        let (idle_tx, idle_rx) = mpsc::channel(IDLE_CHANNEL_CAPACITY);
        let hub = Self {
            shared,
            sessions: HashMap::new(),
            accepting: true,
            open_streams: Arc::new(open_streams),
            idle_tx,
            expiry: BinaryHeap::new(),
            actors_started: 0,
        };
        (hub, idle_rx)
    }

    /// Runs until every [`super::Scheduler`] handle is gone.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<HubCommand>,
        mut idle: mpsc::Receiver<IdleReport>,
    ) {
        // One timer, reset to the earliest expiry when that changes.
        let timer = tokio::time::sleep(self.shared.config.session_idle_ttl);
        tokio::pin!(timer);
        let mut armed: Option<tokio::time::Instant> = None;
        loop {
            let next = self.expiry.peek().map(|Reverse((at, _))| *at);
            if next.is_some() && next != armed {
                if let Some(at) = next {
                    timer.as_mut().reset(at);
                }
                armed = next;
            }
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => self.handle(cmd),
                    None => break,
                },
                Some(report) = idle.recv() => self.idle(report),
                () = &mut timer, if next.is_some() => {
                    armed = None;
                    self.expire(tokio::time::Instant::now());
                }
            }
        }
    }

    fn handle(&mut self, cmd: HubCommand) {
        match cmd {
            HubCommand::Schedule {
                request,
                batch_id,
                writer,
                workspace,
                reply,
            } => {
                let _ = reply.send(self.schedule(request, batch_id, writer, workspace));
            }
            HubCommand::Describe { session_id, reply } => {
                let Some(entry) = self.sessions.get_mut(&session_id) else {
                    let _ = reply.send(None);
                    return;
                };
                let (tx, rx) = oneshot::channel();
                if let Err(cmd) = entry.send(Box::new(SessionCommand::Describe { reply: tx }))
                    && let SessionCommand::Describe { reply: tx } = *cmd
                    && let Actor::Idle(kept) = &entry.actor
                {
                    let workspace = entry.workspace.as_ref().map(|w| w.name.clone());
                    let _ = tx.send(kept.view(workspace));
                }
                let _ = reply.send(Some(rx));
            }
            HubCommand::Attach {
                session_id,
                batch_id,
                log,
                after,
                replayed,
                reply,
            } => {
                let _ = reply.send(self.attach(&session_id, batch_id, &log, after, replayed));
            }
            HubCommand::Confirm { request, reply } => {
                let Some(entry) = self.sessions.get_mut(&request.session_id) else {
                    let _ = reply.send(Err(ConfirmError::UnknownSession {
                        session_id: request.session_id,
                    }));
                    return;
                };
                if let Err(cmd) = entry.send(Box::new(SessionCommand::Confirm { request, reply }))
                    && let SessionCommand::Confirm { request, reply } = *cmd
                {
                    let _ = reply.send(session::confirm_idle(
                        &self.shared.store,
                        &request.session_id,
                        &request,
                    ));
                }
            }
            HubCommand::Cancel { request, reply } => {
                let Some(entry) = self.sessions.get_mut(&request.session_id) else {
                    let _ = reply.send(Err(CancelError::UnknownSession {
                        session_id: request.session_id,
                    }));
                    return;
                };
                if let Err(cmd) = entry.send(Box::new(SessionCommand::Cancel { request, reply }))
                    && let SessionCommand::Cancel { request, reply } = *cmd
                {
                    let session_id = request.session_id.clone();
                    let _ = reply.send(session::cancel_idle(&session_id, request));
                }
            }
            HubCommand::StopAccepting => self.accepting = false,
        }
    }

    /// Ends an idle session's actor, only when no command is in flight to
    /// it, keeping what it reported (its streams, of completed batches,
    /// need no actor). The actor exits when its sender is dropped.
    fn idle(&mut self, report: IdleReport) {
        let ttl = self.shared.config.session_idle_ttl;
        let Some(entry) = self.sessions.get_mut(&report.session_id) else {
            return;
        };
        let Actor::Running { forwarded, id, .. } = &entry.actor else {
            return;
        };
        if *id != report.actor || *forwarded != report.processed {
            // An evicted actor's late report; or a command is on its way
            // (the actor reports again once idle).
            return;
        }
        entry.actor = Actor::Idle(report.kept);
        self.shared.metrics.session_actors.dec();
        if !entry.expiring {
            entry.expiring = true;
            self.expiry
                .push(Reverse((entry.last_used + ttl, report.session_id)));
        }
    }

    /// Forgets the sessions without an actor whose idle TTL ran out by
    /// `now`, as the idle TTL says (with their mode and rules); one with an
    /// open stream waits another TTL.
    fn expire(&mut self, now: tokio::time::Instant) {
        let ttl = self.shared.config.session_idle_ttl;
        while let Some(Reverse((at, _))) = self.expiry.peek()
            && *at <= now
        {
            let Some(Reverse((_, session_id))) = self.expiry.pop() else {
                return;
            };
            let Some(entry) = self.sessions.get_mut(&session_id) else {
                continue;
            };
            entry.expiring = false;
            if matches!(entry.actor, Actor::Running { .. }) {
                continue; // pushed again when it is idle again
            }
            let due = entry.last_used + ttl;
            let again = if due > now {
                Some(due)
            } else if !entry.idle() {
                Some(now + ttl)
            } else {
                None
            };
            match again {
                Some(at) => {
                    entry.expiring = true;
                    self.expiry.push(Reverse((at, session_id)));
                }
                None => {
                    self.forget(&session_id);
                    tracing::debug!(session = %session_id, "idle session forgotten");
                }
            }
        }
    }

    /// Drops a session from the map (it drains what it was sent and exits).
    fn forget(&mut self, session_id: &str) {
        if let Some(entry) = self.sessions.remove(session_id) {
            // Its settings live on in a durable store: the session's next
            // actor here reads them, as another replica's would.
            self.shared.store.session_forgotten(session_id);
            self.shared.metrics.sessions.dec();
            if matches!(entry.actor, Actor::Running { .. }) {
                self.shared.metrics.session_actors.dec();
            }
            if let Some(tenant) = &entry.tenant {
                tenant.session_closed();
            }
        }
    }

    /// A reader of `log` after sequence `after`; the session (if it still
    /// runs) is told when the batch's last reader goes away.
    fn attach(
        &self,
        session_id: &str,
        batch_id: String,
        log: &Arc<BatchLog<BatchEvent>>,
        after: u64,
        replayed: bool,
    ) -> Result<BatchStream, WatchError> {
        let reader = log.reader(after).map_err(|e| WatchError::BeyondEnd {
            batch_id: batch_id.clone(),
            after: e.after,
            last: e.last,
        })?;
        let entry = self.sessions.get(session_id);
        self.open_streams.send_modify(|n| *n += 1);
        Ok(BatchStream {
            batch_id,
            reader,
            session: entry.and_then(SessionEntry::link),
            replayed,
            _open: OpenStream(self.open_streams.clone()),
            _session_open: entry.map(|e| e.streams.clone()),
        })
    }

    fn schedule(
        &mut self,
        mut request: BatchRequest,
        batch_id: String,
        writer: LogWriter<BatchEvent>,
        workspace: Option<Arc<OpenWorkspace>>,
    ) -> Result<BatchStream, ScheduleError> {
        let grace = request
            .disconnect_grace
            .unwrap_or(self.shared.config.disconnect_grace);
        if grace > self.shared.config.max_disconnect_grace {
            return Err(ScheduleError::GraceTooLong {
                asked: grace.as_secs(),
                limit: self.shared.config.max_disconnect_grace.as_secs(),
            });
        }
        request.disconnect_grace = Some(grace);
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
        // A session's workspace is fixed for its life: a later batch names
        // the same one or none.
        match (self.sessions.get(&request.session_id), &workspace) {
            (Some(entry), Some(asked)) => match &entry.workspace {
                Some(have) if have.name != asked.name => {
                    return Err(WorkspaceError::Mismatch {
                        session_workspace: have.name.to_string(),
                        requested: asked.name.to_string(),
                    }
                    .into());
                }
                _ => {}
            },
            (None, None) if self.shared.workspaces.is_some() => {
                return Err(WorkspaceError::Required.into());
            }
            _ => {}
        }
        let tenant = self.shared.tenants.of_key(&request.session_id).cloned();
        let existing = self.sessions.get(&request.session_id);
        // Each accepted, uncompleted batch holds a clone of `batches`.
        if let Some(e) = existing
            && Arc::strong_count(&e.batches) > super::MAX_BATCHES_PER_SESSION
        {
            return Err(ScheduleError::TooManyBatches {
                limit: super::MAX_BATCHES_PER_SESSION,
            });
        }
        // Checked before anything is counted or evicted: a batch refused by
        // any check holds nothing and has changed nothing.
        let new_session = existing.is_none();
        let limit = self.shared.config.max_sessions;
        if new_session && self.sessions.len() >= limit && !self.has_idle_session(None) {
            return Err(ScheduleError::TooManySessions { limit });
        }
        let queued = existing.is_some_and(|e| Arc::strong_count(&e.batches) > 1);
        let mut queued_slot = None;
        let mut shell = 0;
        if let Some(t) = &tenant {
            if new_session
                && let Some(limit) = t.at_session_quota()
                && !self.tenant_has_idle_session(&t.config.name)
            {
                return Err(t.session_refusal(limit).into());
            }
            shell = t.check_admission(&request.calls, queued)?;
            if let Some(limit) = t.config.quotas.max_retained_event_bytes {
                // The last check of a tenant's: it drops the tenant's
                // oldest completed events to fit only when it admits.
                self.shared
                    .store
                    .make_room(&t.config.name, limit, &batch_id)
                    .map_err(|held| t.retained_refusal(limit, held))?;
            }
        }
        // Every check passed; what follows counts and evicts.
        if let Some(t) = &tenant {
            queued_slot = t.admitted(shell, queued);
        }
        if new_session {
            // At the tenant's quota (checked above: it has an idle session),
            // one of its own idle sessions makes room, never another
            // tenant's.
            if let Some(t) = &tenant
                && t.at_session_quota().is_some()
            {
                let prefix = format!("{}/", t.config.name);
                self.evict_oldest_idle(Some(&prefix));
            }
            // At the server's cap: the tenant's own least recently used
            // idle session first, another tenant's only when it has none
            // (a forgotten session loses its mode and rules).
            let limit = self.shared.config.max_sessions;
            if self.sessions.len() >= limit {
                let own = request
                    .session_id
                    .split_once('/')
                    .map(|(tenant, _)| format!("{tenant}/"));
                let made_room = own.is_some_and(|p| self.evict_oldest_idle(Some(&p)))
                    || self.evict_oldest_idle(None);
                if !made_room {
                    return Err(ScheduleError::TooManySessions { limit });
                }
            }
            self.shared.metrics.sessions.inc();
            if let Some(t) = &tenant {
                t.session_opened();
            }
            let actor = self.start_actor(&request.session_id, workspace.clone(), None);
            self.sessions.insert(
                request.session_id.clone(),
                SessionEntry {
                    actor,
                    last_used: tokio::time::Instant::now(),
                    expiring: false,
                    streams: Arc::new(()),
                    workspace,
                    batches: Arc::new(()),
                    tenant: tenant.clone(),
                },
            );
        }
        let entry = self
            .sessions
            .get_mut(&request.session_id)
            .ok_or(ScheduleError::ShuttingDown)?;
        // An idle session's next batch: a new actor with what it kept.
        if let Actor::Idle(kept) = &entry.actor {
            let kept = Some(kept.as_ref().clone());
            let workspace = entry.workspace.clone();
            self.actors_started += 1;
            entry.actor = start_actor(
                &self.shared,
                &self.idle_tx,
                (&request.session_id, self.actors_started),
                workspace,
                kept,
            );
        }
        let Actor::Running {
            token: session_token,
            link,
            ..
        } = &entry.actor
        else {
            return Err(ScheduleError::ShuttingDown);
        };
        let token = session_token.child_token();
        let link = link.clone();
        // Read from the first event on: the stream sees Accepted.
        let reader = writer
            .log()
            .reader(0)
            .map_err(|_| ScheduleError::ShuttingDown)?;
        // The batch keeps its session busy until it completes, streams or
        // not: a detached batch in its grace is not evicted.
        let events = EventSink::new(writer, entry.streams.clone(), self.shared.metrics.clone());
        self.shared.metrics.batch_accepted();
        let held = session::BatchHold {
            _batch: entry.batches.clone(),
            _queued: queued_slot,
        };
        entry
            .send(Box::new(SessionCommand::Schedule {
                batch_id: batch_id.clone(),
                request,
                events,
                token,
                held,
            }))
            .map_err(|_| ScheduleError::ShuttingDown)?;
        self.open_streams.send_modify(|n| *n += 1);
        Ok(BatchStream {
            batch_id,
            reader,
            session: Some(link),
            replayed: false,
            _open: OpenStream(self.open_streams.clone()),
            _session_open: Some(entry.streams.clone()),
        })
    }

    fn start_actor(
        &mut self,
        session_id: &str,
        workspace: Option<Arc<OpenWorkspace>>,
        kept: Option<Kept>,
    ) -> Actor {
        self.actors_started += 1;
        let id = (session_id, self.actors_started);
        start_actor(&self.shared, &self.idle_tx, id, workspace, kept)
    }

    /// Whether tenant `name` has a session [`Hub::evict_oldest_idle`] could
    /// forget. A scan of the map, only when the tenant is at its quota.
    fn tenant_has_idle_session(&self, name: &str) -> bool {
        self.has_idle_session(Some(&format!("{name}/")))
    }

    /// Whether a session (of `prefix`, `<tenant>/`) is one
    /// [`Hub::evict_oldest_idle`] could forget. A scan of the map, only at
    /// a cap.
    fn has_idle_session(&self, prefix: Option<&str>) -> bool {
        self.sessions
            .iter()
            .any(|(id, e)| e.idle() && prefix.is_none_or(|p| id.starts_with(p)))
    }

    /// At `max_sessions`: forgets the idle session (no open stream) the hub
    /// used least recently, as its idle TTL would; false when every session
    /// is busy. One scan of the map, only when the cap is reached.
    /// With `prefix` (`<tenant>/`), only a session of that tenant.
    fn evict_oldest_idle(&mut self, prefix: Option<&str>) -> bool {
        let Some(oldest) = self
            .sessions
            .iter()
            .filter(|(id, e)| e.idle() && prefix.is_none_or(|p| id.starts_with(p)))
            .min_by_key(|(_, e)| e.last_used)
            .map(|(id, _)| id.clone())
        else {
            return false;
        };
        // The session drains what was already sent to it and exits when
        // its sender is dropped.
        self.forget(&oldest);
        tracing::debug!(session = %oldest, "max_sessions reached: evicted the least recently used idle session");
        true
    }
}

/// Spawns a session's actor (`kept`: what its previous one kept).
fn start_actor(
    shared: &Arc<Shared>,
    idle_tx: &mpsc::Sender<IdleReport>,
    (session_id, id): (&str, u64),
    workspace: Option<Arc<OpenWorkspace>>,
    kept: Option<Kept>,
) -> Actor {
    let (tx, rx) = mpsc::unbounded_channel();
    let (link, internal) = session::internal_channel();
    let token = shared.shutdown.child_token();
    tokio::spawn(Session::run(
        session_id.to_string(),
        shared.clone(),
        rx,
        internal,
        (idle_tx.clone(), id),
        token.clone(),
        workspace,
        kept,
    ));
    shared.metrics.session_actors.inc();
    Actor::Running {
        tx,
        link,
        token,
        forwarded: 0,
        id,
    }
}

/// Counts an open stream while alive.
struct OpenStream(Arc<watch::Sender<usize>>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A reader of one batch's log, from where it attached to `Completed`. The
/// batch's readers each read at their own pace; when the last one goes away
/// before the end (the client went away), the session is told: it cancels
/// the batch at once (queued: its calls end Cancelled; running: every
/// non-terminal call is cancelled and running tools are stopped), or after
/// the batch's disconnect grace if nobody re-attached.
pub struct BatchStream {
    batch_id: String,
    reader: LogReader<BatchEvent>,
    /// Told when the last reader goes away before the end; `None` when the
    /// session is gone (its batches have all completed).
    session: Option<SessionLink>,
    /// Attached to an existing batch by a repeated request id.
    replayed: bool,
    _open: OpenStream,
    /// Marks the session busy while the stream is open (see
    /// `Hub::evict_oldest_idle`).
    _session_open: Option<Arc<()>>,
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        if let Some(generation) = self.reader.detach()
            && let Some(session) = &self.session
        {
            session.batch_detached(std::mem::take(&mut self.batch_id), generation);
        }
    }
}

impl BatchStream {
    /// The server-assigned batch id.
    pub fn batch_id(&self) -> &str {
        &self.batch_id
    }

    /// True when this stream re-attached to an existing batch (a repeated
    /// request id) instead of scheduling one.
    pub fn replayed(&self) -> bool {
        self.replayed
    }

    /// Whether the batch's last event (`Completed`) is logged. A stream
    /// that ended without it lost its batch's writer: the replica running
    /// the batch stopped (killed, or its lease lost).
    pub fn completed(&self) -> bool {
        self.reader.log().is_finished()
    }

    /// The next logged event, `None` after `Completed`.
    pub async fn next(&mut self) -> Option<Arc<Entry<BatchEvent>>> {
        self.reader.next().await
    }
}

impl tokio_stream::Stream for BatchStream {
    type Item = Arc<Entry<BatchEvent>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.reader.poll_entry(cx)
    }
}
