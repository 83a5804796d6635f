//! What must outlive a connection (and, with a durable store, a process):
//! batches and their event logs, request ids with a digest of their calls,
//! the answers given to prompts, the calls that ended, and how long all of
//! it is kept (DESIGN §10).
//!
//! The scheduler sees only the [`Store`] trait. [`MemoryStore`] is the
//! embedded default (one process, nothing to install); a PostgreSQL store
//! implements the same trait without touching the engine.
//!
//! Which calls are awaited, and why:
//! - [`Store::begin_batch`]: a request id must be claimed before anything of
//!   its batch runs, or a retry reaching another replica would run it again.
//! - [`Store::record_executing`]: a side-effecting call is recorded
//!   Executing before its tool starts, so that a call found Executing after
//!   its owner died ends `outcome_unknown` instead of running twice.
//! - [`Store::batch`]: a watcher may be served by a replica that does not
//!   own the session and must read the store.
//! - [`Store::record_ended`], [`Store::record_answer_durably`] (a durable
//!   store): a call's end and a prompt's answer are recorded before the
//!   client is told them, so that a replica taking the session over says
//!   the same.
//!
//! Everything else is synchronous: the session's owner is its only writer,
//! so an implementation answers from what it wrote and persists it in order
//! behind (events are re-derived from the recorded states). A session's
//! settings ([`Store::record_settings`]) are written when they change,
//! fenced, without holding the session.
//!
//! Not here: what an event or an answer means (the scheduler), proto types
//! (`api`). No SQL above this module.

mod log;
mod memory;
mod postgres;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use log::{BatchLog, BeyondEnd, Entry, LAG_EVENTS, LogEvent, LogReader, LogWriter, MergeKey};
pub use memory::MemoryStore;
pub use postgres::{
    LEASE_TTL, PostgresError, PostgresStore, RELAY_TIMEOUT, SEQUENCES_PER_OWNER, StoreTiming,
    TAIL_POLL,
};

/// A future returned by a store call that may need a round trip.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A digest of a batch's calls (SHA-256 of their canonical form): a retried
/// request id must come with the same calls.
pub type CallsDigest = [u8; 32];

/// Longest accepted request id, in bytes: it is a key the store indexes and
/// echoes in errors.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// A batch about to be scheduled.
#[derive(Debug, Clone)]
pub struct NewBatch {
    pub session_id: String,
    pub batch_id: String,
    /// The client's idempotency key, unique per session.
    pub request_id: Option<String>,
    pub digest: CallsDigest,
    /// The batch's request as the scheduler encodes it, kept by a durable
    /// store so that another replica can take the batch over if this one
    /// dies (`None`: not needed, the memory store).
    pub request: Option<Vec<u8>>,
    /// Every call names a read-only tool. With no request id, a durable
    /// store need not record the batch before it runs (there is nothing to
    /// claim, and a read run again is harmless): its row may be written
    /// behind, with its completion.
    pub reads_only: bool,
}

/// A running batch taken over from a replica that stopped
/// ([`Store::adopt`]): the lease is this replica's now.
pub struct Adopted<E: LogEvent> {
    /// The batch's new log: its sequences continue past every one the
    /// stopped owner could have handed out ([`SEQUENCES_PER_OWNER`]).
    pub writer: LogWriter<E>,
    /// [`NewBatch::request`] as recorded.
    pub request: Vec<u8>,
    /// Calls recorded Executing with no end: they may have run, and are
    /// never run again.
    pub executing: Vec<String>,
    /// Calls whose end was recorded ([`Store::record_ended`]): (call id, the
    /// end as the scheduler encoded it); they keep it.
    pub ended: Vec<(String, Vec<u8>)>,
    /// Answers recorded for prompts of the batch ([`Store::record_answer_durably`]):
    /// (call id, answer). A call that never began and has a final answer
    /// among them takes it instead of being prompted again.
    pub answers: Vec<(String, Answer)>,
    /// The session's other batches the stopped owner was running or had
    /// queued, oldest first: those that began before this one, and after.
    pub began_before: Vec<String>,
    pub began_after: Vec<String>,
}

/// What [`Store::begin_batch`] found.
pub enum Begun<E: LogEvent> {
    /// A new batch: its log, to be written by its owner.
    New(LogWriter<E>),
    /// The request id names a retained batch with the same calls: nothing is
    /// scheduled; its log is read from the start.
    Existing {
        batch_id: String,
        log: Arc<BatchLog<E>>,
    },
}

/// An answer to a prompt, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The outcome's name (`proceed_once`, …).
    pub outcome: String,
    /// The modified content sent with it, if any.
    pub new_content: Option<String>,
}

/// A session's settings as its owner writes them: `body` in the
/// scheduler's encoding, `version` its count of changes (a write replaces
/// only an older one of the same lease, so writes may land in any order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub version: u64,
    pub body: Vec<u8>,
}

/// What a durable store holds of a session ([`Store::stored_session`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// The replica holding an unexpired lease on it.
    pub owner: Option<String>,
    /// Its settings as recorded ([`Store::record_settings`]).
    pub settings: Option<Vec<u8>>,
    /// Its running batches, oldest first.
    pub running: Vec<String>,
    /// The recorded requests of its retained batches, newest first.
    pub requests: Vec<Vec<u8>>,
}

/// What recording an answer found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerRecord {
    /// The first answer to the prompt: it wins.
    First,
    /// The prompt was already answered the same way.
    Same,
    /// The prompt was already answered differently; this is the winner.
    Different(Answer),
}

/// A call of a completed batch and the name of its terminal state, so that
/// a late Confirm is told the call ended rather than that it never existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedCall {
    pub call_id: String,
    pub state: &'static str,
}

/// How long and how much of a session's completed batches are kept. Every
/// field is a documented limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// A completed batch stays watchable and its request id replayable for
    /// this long.
    pub completed_for: Duration,
    /// Batches of one session kept (running ones included; the oldest
    /// completed go first): a retry or re-attach concerns recent batches.
    pub max_batches_per_session: usize,
    /// Estimated log bytes of one session's batches kept (oldest completed
    /// first; the newest completed batch stays for its retention whatever
    /// its size, so its request id can always be replayed).
    pub max_bytes_per_session: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            completed_for: Duration::from_secs(300),
            max_batches_per_session: 64,
            max_bytes_per_session: 64 * 1024 * 1024,
        }
    }
}

/// What a tenant's batches hold that [`Store::make_room`] could not drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetainedUse {
    /// Estimated log bytes of the tenant's batches held now.
    pub bytes: usize,
    /// Running batches holding them (their logs still grow; a completed
    /// batch's events can always be dropped).
    pub running: usize,
}

impl std::fmt::Display for RetainedUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes held by {} running batch{}",
            self.bytes,
            self.running,
            if self.running == 1 { "" } else { "es" }
        )
    }
}

/// A request another replica relayed to this one, for the session it owns.
pub struct InboxItem {
    pub session_id: String,
    /// What the request is (`confirm`, `cancel`): named by the API.
    pub kind: String,
    pub body: Vec<u8>,
    /// The answer (in the API's wire form), recorded for the sender.
    pub reply: tokio::sync::oneshot::Sender<Vec<u8>>,
}

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The request id is taken by a batch with other calls.
    #[error(
        "request_id '{request_id}' was already used in this session by batch '{batch_id}' with different calls or settings (approval_mode, sandbox_level, workspace, interactive); use a new request_id for a new batch"
    )]
    RequestIdConflict {
        request_id: String,
        batch_id: String,
    },
    /// Never existed, or completed longer ago than the retention.
    #[error(
        "no batch '{batch_id}' in session '{session_id}' (a completed batch is kept for batch_retention_secs = {} s; a session keeps at most max_retained_batches = {} batches and max_retained_bytes = {} bytes of them, the oldest completed dropped first)",
        retention.completed_for.as_secs(),
        retention.max_batches_per_session,
        retention.max_bytes_per_session
    )]
    UnknownBatch {
        session_id: String,
        batch_id: String,
        retention: Retention,
    },
    /// A completed batch whose events were dropped to fit its tenant's
    /// `max_retained_event_bytes`: its request id is still known (a retry
    /// runs nothing again) but its events cannot be read.
    #[error(
        "batch '{batch_id}' of session '{session_id}' completed, but its events were dropped to fit the tenant's max_retained_event_bytes: they cannot be replayed or watched (nothing was run again)"
    )]
    EventsDropped {
        session_id: String,
        batch_id: String,
    },
    /// The store cannot be reached (a durable store only).
    #[error("the store is unavailable: {reason}")]
    Unavailable { reason: String },
    /// The replica holding the session's lease did not answer a relayed
    /// request in time (a durable store only): it is busy, partitioned or
    /// stopped. Once its lease runs out, the next request takes the session
    /// over.
    #[error(
        "the replica running session '{session_id}' did not answer within {} s (it may have stopped: once its lease runs out, at most --store-lease-secs, the next request takes the session over); retry",
        waited.as_secs()
    )]
    OwnerSilent {
        session_id: String,
        waited: Duration,
    },
    /// Another replica holds the session's lease (a durable store only).
    #[error(
        "session '{session_id}' is run by another replica ({owner}) for up to {} s more; retry (it is taken over once that replica stops renewing), or route by the x-toolsched-session header",
        expires_in.as_secs()
    )]
    OwnedElsewhere {
        session_id: String,
        owner: String,
        expires_in: Duration,
    },
    /// The batch is running and this process is not running it: its owner
    /// serves it, or, when that owner stopped, [`Store::adopt`] takes it
    /// over.
    #[error("batch '{batch_id}' of session '{session_id}' is running on another replica")]
    RunningElsewhere {
        session_id: String,
        batch_id: String,
    },
    /// This replica's lease on the session expired and another replica took
    /// it over: nothing more is written for it here (fencing).
    #[error(
        "this replica no longer owns session '{session_id}' (its lease passed to another replica)"
    )]
    LeaseLost { session_id: String },
}

/// The scheduler's view of durable state. `E` is what a batch's log holds.
pub trait Store<E: LogEvent>: Send + Sync + 'static {
    /// Starts the record of a batch, claiming its request id. A known request
    /// id with the same digest gives [`Begun::Existing`]; with another digest
    /// [`StoreError::RequestIdConflict`].
    fn begin_batch(&self, batch: NewBatch) -> StoreFuture<'_, Result<Begun<E>, StoreError>>;

    /// Forgets a batch that [`Store::begin_batch`] started but that was then
    /// refused (the server stopped accepting, a limit): its request id is
    /// free again.
    fn abandon_batch(&self, session_id: &str, batch_id: &str);

    /// The log of a retained batch.
    fn batch<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<Arc<BatchLog<E>>, StoreError>>;

    /// The batch's last event is logged: its retention time starts, its
    /// calls' end states are kept for late Confirms, and the session's
    /// oldest completed batches beyond the bounds are dropped.
    fn complete_batch(&self, session_id: &str, batch_id: &str, ended: Vec<EndedCall>);

    /// Takes over a running batch of another replica that stopped (its
    /// lease expired or was let go): claims the session, gives the batch a
    /// new log here and says what was recorded of it. `None`: nothing to
    /// take over (the memory store; a batch that completed meanwhile).
    /// [`StoreError::OwnedElsewhere`] while its owner still holds the lease.
    fn adopt<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<Adopted<E>>, StoreError>> {
        let _ = (session_id, batch_id);
        Box::pin(async { Ok(None) })
    }

    /// The running batches of a replica that stopped, found when
    /// [`Store::begin_batch`] claimed their session for a new batch, oldest
    /// first: the scheduler resumes them ([`Store::adopt`]) before the new
    /// one, as the session's queue order says. Each is handed out once.
    fn take_orphans(&self, session_id: &str) -> Vec<String> {
        let _ = session_id;
        Vec::new()
    }

    /// The id this process holds sessions' leases under (what
    /// [`Store::owner_elsewhere`] and GetSession's `owner_replica` name it
    /// by); `None` for a store no other process shares (memory).
    fn replica_id(&self) -> Option<&str> {
        None
    }

    /// The replica holding an unexpired lease on the session, when it is
    /// not this one (`None`: the memory store, nobody, or this replica).
    fn owner_elsewhere<'a>(
        &'a self,
        session_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<String>, StoreError>> {
        let _ = session_id;
        Box::pin(async { Ok(None) })
    }

    /// Records a request (`kind`, `body` in the API's wire form) for the
    /// session's owner `owner`, wakes it, and resolves to its answer.
    fn relay<'a>(
        &'a self,
        owner: &'a str,
        session_id: &'a str,
        kind: &'a str,
        body: Vec<u8>,
    ) -> StoreFuture<'a, Result<Vec<u8>, StoreError>> {
        let _ = (owner, session_id, kind, body);
        Box::pin(async {
            Err(StoreError::Unavailable {
                reason: "this store relays nothing".into(),
            })
        })
    }

    /// The requests other replicas relay to this one ([`Store::relay`]),
    /// taken once by the server that applies them; `None` for a store
    /// that relays nothing.
    fn take_inbox(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<InboxItem>> {
        None
    }

    /// Copies the log of a batch running here into the store as it grows
    /// (for readers on other replicas, [`Store::tail`]); resolves once what
    /// is logged so far is written. `false`: the batch is not running here.
    fn mirror<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<bool, StoreError>> {
        let _ = (session_id, batch_id);
        Box::pin(async { Ok(false) })
    }

    /// The log of a batch another replica runs and mirrors, read from the
    /// store as it grows; it ends when the batch completes, or (unfinished)
    /// when its owner's lease runs out.
    fn tail<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<Arc<BatchLog<E>>, StoreError>> {
        Box::pin(async move {
            Err(StoreError::UnknownBatch {
                session_id: session_id.to_string(),
                batch_id: batch_id.to_string(),
                retention: self.retention(),
            })
        })
    }

    /// A side-effecting call is about to start; resolves once recorded.
    fn record_executing<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
        call_id: &'a str,
    ) -> StoreFuture<'a, Result<(), StoreError>>;

    /// A call recorded Executing ended; `end` is its terminal state as the
    /// scheduler encodes it. Resolves once recorded: the scheduler tells
    /// the client the call's end only then, so that a replica taking the
    /// batch over keeps that end (a call recorded Executing with no end is
    /// `outcome_unknown` there). A durable store writes it fenced by the
    /// session's lease ([`StoreError::LeaseLost`] when another replica holds
    /// it now). Nothing to do for a store that does not outlive the process.
    fn record_ended<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
        call_id: &'a str,
        end: Vec<u8>,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        let _ = (session_id, batch_id, call_id, end);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Records the answer to prompt `correlation_id` of `call_id`; the first
    /// answer wins.
    fn record_answer(
        &self,
        session_id: &str,
        batch_id: &str,
        call_id: &str,
        correlation_id: &str,
        answer: Answer,
    ) -> AnswerRecord;

    /// Records the answer to prompt `correlation_id` of `call_id` in a
    /// durable store before the Confirm is told OK, fenced by the
    /// session's lease ([`StoreError::LeaseLost`] when another replica
    /// holds it now). Resolves to the winning answer as recorded: `answer`
    /// when it is the first, the earlier one otherwise. Only called with a
    /// durable store (the memory store records answers with
    /// [`Store::record_answer`], at no cost); kept by [`Store::answer`]
    /// once recorded. `settings`: the session's settings the answer makes
    /// (an "always" answer adds a rule, may switch the mode), written in
    /// the same statement.
    fn record_answer_durably<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
        call_id: &'a str,
        correlation_id: &'a str,
        answer: Answer,
        settings: Option<Settings>,
    ) -> StoreFuture<'a, Result<Answer, StoreError>> {
        let _ = (session_id, batch_id, call_id, correlation_id, settings);
        Box::pin(std::future::ready(Ok(answer)))
    }

    /// Writes the session's settings (approval mode, "always" rules,
    /// topic; `settings` as the scheduler encodes them), fenced by the
    /// session's lease. Resolves once written. Nothing to do for a store
    /// that does not outlive the process.
    fn record_settings<'a>(
        &'a self,
        session_id: &'a str,
        settings: Settings,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        let _ = (session_id, settings);
        Box::pin(std::future::ready(Ok(())))
    }

    /// The session's settings as recorded ([`Store::record_settings`]),
    /// when what this process holds of them may be stale: its lease on the
    /// session began (at a new epoch) after it last wrote or read them.
    /// `Some(empty)`: none recorded (the defaults). `None`: this process's
    /// are current (always, for the memory store), no round trip.
    fn session_settings<'a>(
        &'a self,
        session_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        let _ = session_id;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// What a durable store holds of a session (for a replica not running
    /// it); `None` when it knows no such session (always, for a store that
    /// does not outlive the process: the session's actor has it all).
    fn stored_session<'a>(
        &'a self,
        session_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<StoredSession>, StoreError>> {
        let _ = session_id;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// The session's actor in this process is gone (idle, or evicted):
    /// what it held of the session's settings is no longer here, so the
    /// next [`Store::session_settings`] reads them.
    fn session_forgotten(&self, session_id: &str) {
        let _ = session_id;
    }

    /// The winning answer to a prompt of a retained batch.
    fn answer(&self, session_id: &str, call_id: &str, correlation_id: &str) -> Option<Answer>;

    /// The winning answer to a prompt as a durable store recorded it, for
    /// a Confirm that reaches a replica not holding it in memory (the
    /// prompt's replica stopped, or its lease lapsed and the session is
    /// served here now): a repeated answer is then `already_applied` as on
    /// one replica. `None` from a store with nothing beyond
    /// [`Store::answer`] (the memory store).
    fn recorded_answer<'a>(
        &'a self,
        session_id: &'a str,
        call_id: &'a str,
        correlation_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<Answer>, StoreError>> {
        let _ = (session_id, call_id, correlation_id);
        Box::pin(async { Ok(None) })
    }

    /// The terminal state of `call_id` in a retained completed batch of the
    /// session (the most recent such call).
    fn ended(&self, session_id: &str, call_id: &str) -> Option<&'static str>;

    /// How long completed batches are kept (named in errors).
    fn retention(&self) -> Retention;

    /// Makes the event logs of `tenant`'s batches held in this process fit
    /// under `limit` estimated bytes (its `max_retained_event_bytes`),
    /// dropping the events of its completed batches, oldest first
    /// ([`StoreError::EventsDropped`] from then on); `Err`, with nothing
    /// dropped, when its running batches alone hold `limit` (`admitting`,
    /// the batch being admitted, is not counted). Only the tenant's own
    /// sessions are looked at.
    fn make_room(&self, tenant: &str, limit: usize, admitting: &str) -> Result<(), RetainedUse>;

    /// Whether the store can be reached, for a store that can be lost (the
    /// server's health follows it); `None` for one that cannot.
    fn reachable(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        None
    }
}

/// How a durable store writes a log's entries and reads them back, and a
/// finished log compacts them. The store keeps the bytes opaque; the
/// encoding (the wire form) belongs to the layer that owns it (`api`).
///
/// An entry read back keeps `bytes` as its encoded form
/// ([`Entry::recorded`]): encoding what `decode` made gives `bytes` again.
pub trait EventCodec<E>: Send + Sync + 'static {
    fn encode(&self, entry: &Entry<E>) -> Vec<u8>;
    /// The event recorded as `bytes` (sequence and time are kept apart).
    fn decode(&self, bytes: bytes::Bytes) -> E;
}

/// The store the scheduler holds.
pub type SharedStore<E> = Arc<dyn Store<E>>;
