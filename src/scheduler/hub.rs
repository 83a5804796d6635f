//! The hub: the map of live sessions, and the streams of their batches.
//!
//! Owns: [`Hub`] (one task; creates a session actor on first use, routes
//! Schedule / Confirm / Cancel to it, retires it when it reports idleness
//! on its own [`IdleReport`] channel) and [`BatchStream`] (a batch's events
//! as read by one client; dropping it cancels the batch). Not here: what a
//! session does with a command (`session.rs`), request validation
//! (`validate.rs`, run by the `Scheduler` handle before a command is sent).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::feed::{self, FeedReader};
use super::session::{self, Session, SessionCommand, SessionLink};
use super::{
    BatchRequest, CancelError, CancelRequest, CancelSummary, ConfirmError, ConfirmRequest, Event,
    ScheduleError, Shared,
};

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
    StopAccepting,
}

/// A session has been idle for its TTL after `processed` commands.
pub(crate) struct IdleReport {
    pub session_id: String,
    pub processed: u64,
}

/// Idle reports waiting for the hub. A session whose report does not fit
/// (thousands of sessions went idle at once) tries again after another TTL.
pub(crate) const IDLE_CHANNEL_CAPACITY: usize = 1024;

struct SessionEntry {
    /// Unbounded: the hub must not wait on one session (that would stall
    /// every other), and a session handles each command without waiting, so
    /// its backlog is bounded by what the hub's own bounded channel
    /// (`HUB_CHANNEL_CAPACITY`) lets through.
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

    /// Counts a command sent to the session.
    fn sent(&mut self) {
        self.forwarded += 1;
        self.last_used = tokio::time::Instant::now();
    }
}

/// Owns the map of sessions.
pub(crate) struct Hub {
    shared: Arc<Shared>,
    sessions: HashMap<String, SessionEntry>,
    accepting: bool,
    open_streams: Arc<watch::Sender<usize>>,
    idle_tx: mpsc::Sender<IdleReport>,
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
        };
        (hub, idle_rx)
    }

    /// Runs until every [`super::Scheduler`] handle is gone.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<HubCommand>,
        mut idle: mpsc::Receiver<IdleReport>,
    ) {
        loop {
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => self.handle(cmd),
                    None => break,
                },
                Some(report) = idle.recv() => self.idle(report),
            }
        }
    }

    fn handle(&mut self, cmd: HubCommand) {
        match cmd {
            HubCommand::Schedule { request, reply } => {
                let _ = reply.send(self.schedule(request));
            }
            HubCommand::Confirm { request, reply } => {
                let Some(entry) = self.sessions.get_mut(&request.session_id) else {
                    let _ = reply.send(Err(ConfirmError::UnknownSession {
                        session_id: request.session_id,
                    }));
                    return;
                };
                entry.sent();
                let _ = entry.tx.send(SessionCommand::Confirm { request, reply });
            }
            HubCommand::Cancel { request, reply } => {
                let Some(entry) = self.sessions.get_mut(&request.session_id) else {
                    let _ = reply.send(Err(CancelError::UnknownSession {
                        session_id: request.session_id,
                    }));
                    return;
                };
                entry.sent();
                let _ = entry.tx.send(SessionCommand::Cancel { request, reply });
            }
            HubCommand::StopAccepting => self.accepting = false,
        }
    }

    /// Retires an idle session, only when no command is in flight to it
    /// and no stream of it is open; the session drains and exits when its
    /// sender is dropped.
    fn idle(&mut self, report: IdleReport) {
        if self
            .sessions
            .get(&report.session_id)
            .is_some_and(|e| e.forwarded == report.processed && e.idle())
        {
            self.sessions.remove(&report.session_id);
            self.shared.metrics.sessions.dec();
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
                self.idle_tx.clone(),
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
        let (events, reader) = feed::feed();
        entry.sent();
        self.shared.metrics.batch_accepted();
        entry
            .tx
            .send(SessionCommand::Schedule {
                batch_id: batch_id.clone(),
                request,
                events,
                token: token.clone(),
            })
            .map_err(|_| ScheduleError::ShuttingDown)?;
        self.open_streams.send_modify(|n| *n += 1);
        Ok(BatchStream {
            batch_id,
            feed: reader,
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
    /// What the session emitted, read at this stream's pace (see
    /// [`feed`] for what bounds it while the client lags).
    feed: FeedReader,
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
        let polled = self.feed.poll_next(cx);
        if let Poll::Ready(None) = polled {
            self.ended = true;
        }
        polled
    }
}

impl tokio_stream::Stream for BatchStream {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.poll_event(cx)
    }
}
