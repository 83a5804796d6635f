//! The PostgreSQL store (`--store postgres://…`): what the memory store
//! holds, also written to PostgreSQL, so that a restarted server (or another
//! replica) still serves a completed batch within its retention.
//!
//! The owner of a batch keeps its live log in memory (the
//! [`MemoryStore`] inside) and readers in this process read it there. The
//! store's round trips are only those [`Store`] awaits: claiming a batch and
//! its request id ([`Store::begin_batch`]), recording a side-effecting call
//! before its tool starts ([`Store::record_executing`]), its end and a
//! prompt's answer before anyone is told them ([`Store::record_ended`],
//! [`Store::record_answer_durably`]), a session's settings when they change
//! ([`Store::record_settings`], not waited on by the session) and reading
//! them when the session's lease is new ([`Store::session_settings`]).
//! Everything else (a completed batch's events, an abandoned batch) goes
//! through one writer task, sent in groups (pipelined on one connection)
//! and retried until the database takes them, so that a store lost for a
//! while loses nothing that was recorded.
//!
//! The schema is versioned: the files of `migrations/` are embedded and
//! applied at start-up, once, under an advisory lock (replicas starting
//! together apply them once).
//!
//! Not here: what the events mean or how they are encoded (an
//! [`EventCodec`] given by the caller).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::{mpsc, watch};
use tokio_postgres::NoTls;

use super::{
    Adopted, Answer, AnswerRecord, BatchLog, Begun, EndedCall, Entry, EventCodec, InboxItem,
    LogEvent, MemoryStore, NewBatch, RetainedUse, Retention, Settings, Store, StoreError,
    StoreFuture, StoredSession,
};

/// The schema's versions, in order: (version, name, SQL). A database at a
/// newer version than this binary knows is refused (an older binary must
/// not write a schema it does not understand).
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "batches",
        include_str!("../../migrations/0001_batches.sql"),
    ),
    (
        2,
        "leases",
        include_str!("../../migrations/0002_leases.sql"),
    ),
    (
        3,
        "takeover",
        include_str!("../../migrations/0003_takeover.sql"),
    ),
    (4, "inbox", include_str!("../../migrations/0004_inbox.sql")),
    (
        5,
        "call_ends",
        include_str!("../../migrations/0005_call_ends.sql"),
    ),
    (
        6,
        "batch_log",
        include_str!("../../migrations/0006_batch_log.sql"),
    ),
    (
        7,
        "session_settings",
        include_str!("../../migrations/0007_session_settings.sql"),
    ),
];

/// Longest a request relayed to a session's owner ([`Store::relay`]) waits
/// for its answer (or the lease's length, when shorter): an owner that does
/// not answer by then is taken to be gone (its lease runs out by then), and
/// the caller gets UNAVAILABLE.
pub const RELAY_TIMEOUT: Duration = Duration::from_secs(10);

/// A reader of a batch another replica runs ([`Store::tail`]) reads the
/// store at least this often. Every write it waits for wakes it at once by
/// NOTIFY (its owner's log entries and its completion), so this only
/// notices what nothing notifies: that the owner died (its lease ran out),
/// or notifications lost with a LISTEN connection that broke unnoticed.
pub const TAIL_POLL: Duration = Duration::from_secs(1);

/// How long a replica's leases last and how often its tails read the store
/// unwoken.
#[derive(Debug, Clone, Copy)]
pub struct StoreTiming {
    /// A session's lease unrenewed ([`LEASE_TTL`]).
    pub lease_ttl: Duration,
    /// A tail's read without a notification ([`TAIL_POLL`]); tests set it
    /// very long to show that notifications alone end a tail.
    pub tail_poll: Duration,
}

impl Default for StoreTiming {
    fn default() -> Self {
        Self {
            lease_ttl: LEASE_TTL,
            tail_poll: TAIL_POLL,
        }
    }
}

/// Sequences each owner of a batch numbers its log in: the owner at the
/// batch's n-th epoch since it began logs from `n × this + 1`. Far more than
/// one owner's log can hold (each entry is an event kept in memory), so a
/// sequence a client saw from a replica that stopped is always before the
/// first one of the replica that took the batch over.
pub const SEQUENCES_PER_OWNER: u64 = 1 << 32;

/// Longest a mirror asked for a batch that completed here waits for the
/// writes queued before it (its completion among them) to be written, so
/// that the replica asking reads the completed batch from the store (well
/// within [`RELAY_TIMEOUT`]).
const COMPLETION_WAIT: Duration = Duration::from_secs(5);

/// Entries a mirror writes in one statement (a backlog goes in chunks).
const MIRROR_CHUNK: usize = 256;

/// Relayed requests are kept this long after they were posted (for the
/// record), then swept.
const INBOX_KEPT: Duration = Duration::from_secs(3600);

/// How long a session's lease lasts unrenewed: a replica that died (or is
/// paused, or cut off) holds its sessions at most this long; renewed every
/// third of it while the session has a batch running here.
pub const LEASE_TTL: Duration = Duration::from_secs(10);

/// Key of the advisory lock migrations run under (any constant shared by
/// every replica; "toolsche" in ASCII).
const MIGRATION_LOCK: i64 = 0x746f_6f6c_7363_6865;

/// Connections kept to the database: a few round trips are in flight at a
/// time (one per batch starting, one per side-effecting call starting, the
/// writer, the probe).
const POOL_SIZE: usize = 16;

/// Longest wait for a connection (to open one, or for a free one): past
/// it the store counts as unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often reachability is probed: health turns NOT_SERVING within about
/// this after the database goes away, and SERVING after it comes back.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// A failed background write is retried after this (in order: later writes
/// wait behind it).
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// Longest time between two deletions of expired batches.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Claims a session's lease ($1 session, $2 this replica, $3 seconds):
/// free, expired, or already this replica's (then renewed). Taking it from
/// another replica bumps the epoch. A CTE named `claimed` (its `epoch`),
/// shared by [`CLAIM`] and [`CLAIM_AND_INSERT`].
macro_rules! claimed_cte {
    () => {
        "WITH claimed AS (\
           INSERT INTO toolsched_leases AS l (session_id, owner, epoch, expires_at) \
           VALUES ($1, $2, 1, now() + make_interval(secs => $3)) \
           ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, \
             epoch = CASE WHEN l.owner = EXCLUDED.owner THEN l.epoch ELSE l.epoch + 1 END, \
             expires_at = EXCLUDED.expires_at, renewed_at = now() \
           WHERE l.owner = EXCLUDED.owner OR l.expires_at <= now() \
           RETURNING epoch) "
    };
}

/// Claims a session's lease: its epoch, or no row when another replica
/// holds it.
const CLAIM: &str = concat!(claimed_cte!(), "SELECT epoch FROM claimed");

/// [`CLAIM`] and a batch's row in one statement ($4 batch id, $5 request
/// id, $6 digest, $7 request). Gives the epoch (NULL: owned elsewhere),
/// the inserted batch id (NULL: not inserted), the batch its request id
/// already names and its digest, the lease's owner and seconds left, and
/// the session's running batches before this one, oldest first (those not
/// running here are a stopped owner's, to be resumed first).
const CLAIM_AND_INSERT: &str = concat!(
    claimed_cte!(),
    ", inserted AS (INSERT INTO toolsched_batches \
       (session_id, batch_id, request_id, digest, epoch, request) \
       SELECT $1, $4, $5, $6, epoch, $7 FROM claimed \
       ON CONFLICT (session_id, request_id) DO NOTHING RETURNING batch_id) \
     SELECT (SELECT epoch FROM claimed), (SELECT batch_id FROM inserted), \
       b.batch_id, b.digest, l.owner, \
       greatest(extract(epoch FROM l.expires_at - now()), 0)::float8, \
       ARRAY(SELECT r.batch_id FROM toolsched_batches r WHERE r.session_id = $1 \
         AND r.completed_at IS NULL AND r.request IS NOT NULL ORDER BY r.began_at) \
     FROM (SELECT 1) one \
     LEFT JOIN toolsched_batches b ON b.session_id = $1 AND b.request_id = $5 \
     LEFT JOIN toolsched_leases l ON l.session_id = $1"
);

/// The rows of batches beginning under leases this replica holds, many
/// batches in one statement ($1 sessions, $2 batch ids, $3 request ids, $4
/// digests, $5 epochs, $6 requests, $7 this replica): a row is inserted
/// only while its session's lease is still this replica's at that epoch and
/// unexpired (fencing), and not when its request id is known (or its row
/// is already there: a row written behind, [`BeginRow`]). Rows of one
/// statement began in the order given (`began_at` a microsecond apart), so
/// a session's running batches keep their order. Gives the batch ids
/// inserted.
const INSERT_FENCED: &str = "INSERT INTO toolsched_batches \
       (session_id, batch_id, request_id, digest, epoch, request, began_at) \
     SELECT i.session_id, i.batch_id, i.request_id, i.digest, i.epoch, i.request, \
       now() + make_interval(secs => i.n * 1e-6) \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[], $6::bytea[]) \
       WITH ORDINALITY AS i(session_id, batch_id, request_id, digest, epoch, request, n) \
     WHERE EXISTS (SELECT 1 FROM toolsched_leases l WHERE l.session_id = i.session_id \
       AND l.owner = $7 AND l.epoch = i.epoch AND l.expires_at > now()) \
     ON CONFLICT DO NOTHING RETURNING batch_id";

/// An answer to a prompt, fenced like a call's end ($1 session, $2 batch,
/// $3 call, $4 correlation id, $5 outcome, $6 new content, $7 this replica,
/// $8 epoch): the lease row is held (FOR SHARE) for the statement, so a
/// replica claiming the session either waits and then reads the answer, or
/// claimed first and nothing is written. With $9 (the session's settings,
/// NULL: none) and $10 (their version), the settings the answer makes, in
/// the same statement (as [`RECORD_SETTINGS_FENCED`]). Gives whether the
/// lease was held, the outcome inserted, and the answer recorded before it
/// (on a conflict).
const RECORD_ANSWER_FENCED: &str = "WITH held AS (SELECT 1 FROM toolsched_leases \
       WHERE session_id = $1 AND owner = $7 AND epoch = $8 FOR SHARE), \
     inserted AS (INSERT INTO toolsched_answers \
       (session_id, batch_id, call_id, correlation_id, outcome, new_content) \
       SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM held) \
       ON CONFLICT DO NOTHING RETURNING outcome), \
     earlier AS (SELECT outcome, new_content FROM toolsched_answers \
       WHERE session_id = $1 AND batch_id = $2 AND call_id = $3 AND correlation_id = $4), \
     settings AS (INSERT INTO toolsched_sessions AS s (session_id, settings, epoch, version) \
       SELECT $1, $9, $8, $10 WHERE $9::bytea IS NOT NULL AND EXISTS (SELECT 1 FROM held) \
       ON CONFLICT (session_id) DO UPDATE SET settings = EXCLUDED.settings, \
         epoch = EXCLUDED.epoch, version = EXCLUDED.version, updated_at = now() \
       WHERE (s.epoch, s.version) < (EXCLUDED.epoch, EXCLUDED.version)) \
     SELECT EXISTS (SELECT 1 FROM held), (SELECT outcome FROM inserted), \
       (SELECT outcome FROM earlier), (SELECT new_content FROM earlier)";

/// A session's settings, fenced like a call's end ($1 session, $2 this
/// replica, $3 epoch, $4 settings, $5 version), replacing only an older
/// write ((epoch, version) ordered: the owner's writes may land in any
/// order). Gives whether the lease was held.
const RECORD_SETTINGS_FENCED: &str = "WITH held AS (SELECT 1 FROM toolsched_leases \
       WHERE session_id = $1 AND owner = $2 AND epoch = $3 FOR SHARE), \
     settings AS (INSERT INTO toolsched_sessions AS s (session_id, settings, epoch, version) \
       SELECT $1, $4, $3, $5 WHERE EXISTS (SELECT 1 FROM held) \
       ON CONFLICT (session_id) DO UPDATE SET settings = EXCLUDED.settings, \
         epoch = EXCLUDED.epoch, version = EXCLUDED.version, updated_at = now() \
       WHERE (s.epoch, s.version) < (EXCLUDED.epoch, EXCLUDED.version)) \
     SELECT EXISTS (SELECT 1 FROM held)";

/// What the store holds of a session ($1), for GetSession on a replica not
/// running it: the lease's owner while unexpired, the recorded settings,
/// the running batches (oldest first), the requests of the retained
/// batches (newest first, at most [`Retention::max_batches_per_session`]
/// are kept), and whether anything of the session is known.
const STORED_SESSION: &str = "SELECT \
       (SELECT owner FROM toolsched_leases WHERE session_id = $1 AND expires_at > now()), \
       (SELECT settings FROM toolsched_sessions WHERE session_id = $1), \
       ARRAY(SELECT batch_id FROM toolsched_batches WHERE session_id = $1 \
         AND completed_at IS NULL AND request IS NOT NULL ORDER BY began_at, batch_id), \
       ARRAY(SELECT request FROM toolsched_batches WHERE session_id = $1 \
         AND request IS NOT NULL ORDER BY began_at DESC), \
       EXISTS (SELECT 1 FROM toolsched_leases WHERE session_id = $1) \
         OR EXISTS (SELECT 1 FROM toolsched_batches WHERE session_id = $1)";

/// Why the PostgreSQL store could not start.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    #[error("the store URL is not a valid PostgreSQL URL: {reason}")]
    Url { reason: String },
    #[error("cannot reach the store (PostgreSQL): {reason}")]
    Connect { reason: String },
    #[error("cannot apply the store's schema migration {version} ({name}): {reason}")]
    Migration {
        version: i32,
        name: &'static str,
        reason: String,
    },
    #[error(
        "the store's schema is at version {found}, newer than this toolsched knows ({known}); run a newer toolsched"
    )]
    NewerSchema { found: i32, known: i32 },
}

/// A write done behind the session, in order.
enum Write {
    /// The row of a batch that began without waiting for it ([`BeginRow`]).
    Begin(Arc<BeginRow>),
    Complete(Completion),
    Answer {
        session_id: String,
        batch_id: String,
        call_id: String,
        correlation_id: String,
        answer: Answer,
    },
    Abandon {
        session_id: String,
        batch_id: String,
    },
    /// Everything before it is written: answered then.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// A batch's row as it begins under a lease this replica holds (fenced by
/// `epoch`).
///
/// A batch of read-only calls with no request id does not wait for it
/// (nothing to claim, and re-running a read is harmless): its row goes
/// through the writer ([`Write::Begin`]), and usually into the same
/// statement as its completion when the two meet in one group. Until it is
/// written it is kept in [`PostgresStore::unwritten`]: whatever needs the
/// row first (a call recorded Executing, an answer, a mirror for a watcher
/// elsewhere, a batch of the session that waits for its row) writes it
/// then.
struct BeginRow {
    session_id: String,
    batch_id: String,
    request_id: Option<String>,
    digest: super::CallsDigest,
    epoch: i64,
    request: Option<Vec<u8>>,
}

/// A batch beginning under a lease this replica holds, waiting for its row
/// ([`begins`]).
struct PendingBegin {
    row: BeginRow,
    reply: tokio::sync::oneshot::Sender<BeginAnswer>,
}

/// Whether a [`PendingBegin`]'s row was inserted (no: a known request id,
/// or the lease is not this replica's at its epoch), and its request given
/// back.
type BeginAnswer = (Result<bool, StoreError>, Option<Vec<u8>>);

/// Rows written behind ([`BeginRow`]) not known to be written yet, by
/// session, oldest first.
type Unwritten = HashMap<String, Vec<Arc<BeginRow>>>;

/// A batch's completion, with its log to write into its row.
struct Completion {
    fence: Fence,
    session_id: String,
    batch_id: String,
    /// Encoded already: (sequence, time, body).
    entries: Vec<(i64, SystemTime, bytes::Bytes)>,
    ended: Vec<EndedCall>,
    /// The batch's row when it began behind ([`BeginRow`]): the completion
    /// inserts it if it is not there (its own write may have been fenced
    /// out by an expiry the completion's fence does not check).
    row: Option<Arc<BeginRow>>,
    /// Its log is mirrored for readers on other replicas: they wait for
    /// this completion, which wakes them (NOTIFY) once written.
    watched: bool,
}

/// What a write is fenced by: the lease it was made under.
#[derive(Debug, Clone)]
struct Fence {
    owner: Arc<str>,
    epoch: i64,
}

/// A lease this replica holds on a session, as far as it knows.
#[derive(Debug, Clone, Copy)]
struct Held {
    epoch: i64,
    /// Until when (this process's clock) a new batch skips the claim: half
    /// the lease after it was taken or renewed. Only a shortcut: the batch's
    /// insert is still fenced by owner, epoch and expiry in the database,
    /// and falls back to a claim when that fails.
    fresh_until: Instant,
}

/// Live logs by (session id, batch id).
type LiveLogs<E> = HashMap<(String, String), Arc<BatchLog<E>>>;

/// The PostgreSQL [`Store`].
pub struct PostgresStore<E: LogEvent> {
    memory: MemoryStore<E>,
    pool: Pool,
    codec: Arc<dyn EventCodec<E>>,
    retention: Retention,
    /// The live logs of the batches this process began, until they complete
    /// (to write their entries then).
    live: Mutex<LiveLogs<E>>,
    /// Unbounded: one write per completed batch, per answer and per
    /// abandoned batch, each already bounded by the batch's own limits and
    /// held in memory anyway until written.
    writes: mpsc::UnboundedSender<Write>,
    /// Unbounded: each one is awaited by the request that sent it, and
    /// requests in flight are bounded by the API.
    begins: mpsc::UnboundedSender<PendingBegin>,
    /// Rows of batches that began without waiting for them, until written.
    unwritten: Mutex<Unwritten>,
    /// The same rows, until their batch completes or is abandoned.
    began_behind: Mutex<HashMap<(String, String), Arc<BeginRow>>>,
    reachable: watch::Receiver<bool>,
    /// This process's name in lease rows.
    replica: Arc<str>,
    lease_ttl: Duration,
    /// How often a tail reads the store unwoken ([`TAIL_POLL`]).
    tail_poll: Duration,
    /// The lease this replica holds (or last held) on each session.
    epochs: Mutex<HashMap<String, Held>>,
    /// Requests relayed by this replica, awaiting the owner's answer, by id.
    waiters: Mutex<HashMap<i64, tokio::sync::oneshot::Sender<Vec<u8>>>>,
    /// Requests relayed to this replica, for the API to apply (taken once).
    inbox: Mutex<Option<mpsc::UnboundedReceiver<InboxItem>>>,
    inbox_tx: mpsc::UnboundedSender<InboxItem>,
    /// Running batches of a stopped owner found when a session was claimed
    /// for a new batch, by session: to be resumed before it
    /// ([`Store::take_orphans`]), taken once.
    orphans: Mutex<HashMap<String, Vec<String>>>,
    /// Batches whose log is copied into the store as it grows.
    mirrored: Mutex<std::collections::HashSet<(String, String)>>,
    /// Readers here of batches another replica runs, woken by NOTIFY, by
    /// batch id: one waker per reader (two WatchBatch of one batch are two
    /// readers), each removed by its reader's [`TailWaker`].
    tails: Mutex<HashMap<String, Vec<std::sync::Weak<tokio::sync::Notify>>>>,
    /// The epoch at which this process last wrote or read each session's
    /// settings: at the lease's epoch, its own are current
    /// ([`Store::session_settings`]).
    settled: Mutex<HashMap<String, i64>>,
    /// This store, for the tasks it starts.
    me: std::sync::OnceLock<std::sync::Weak<Self>>,
}

/// A reader's wake-up for its batch's notifications (see
/// `PostgresStore::tails`), registered while it lives. `notify_one` keeps a
/// wake-up that comes while the reader reads, so none is lost between a
/// read and the next wait.
struct TailWaker<E: LogEvent> {
    notify: Arc<tokio::sync::Notify>,
    store: std::sync::Weak<PostgresStore<E>>,
    batch_id: String,
}

impl<E: LogEvent> TailWaker<E> {
    fn new(store: &Arc<PostgresStore<E>>, batch_id: &str) -> Self {
        let notify = Arc::new(tokio::sync::Notify::new());
        store
            .tails()
            .entry(batch_id.to_string())
            .or_default()
            .push(Arc::downgrade(&notify));
        Self {
            notify,
            store: Arc::downgrade(store),
            batch_id: batch_id.to_string(),
        }
    }
}

impl<E: LogEvent> Drop for TailWaker<E> {
    fn drop(&mut self) {
        let Some(store) = self.store.upgrade() else {
            return;
        };
        let mut tails = store.tails();
        if let Some(wakers) = tails.get_mut(&self.batch_id) {
            let me = Arc::downgrade(&self.notify);
            wakers.retain(|w| !w.ptr_eq(&me) && w.strong_count() > 0);
            if wakers.is_empty() {
                tails.remove(&self.batch_id);
            }
        }
    }
}

/// A recorded event: sequence, time, the event's encoded body.
type Recorded = (i64, SystemTime, Vec<u8>);

/// The log a completed batch's row holds (migration 6: the arrays
/// `log_sequences`, `log_at`, `log_bodies` from column `first` on), in
/// sequence order; `None` when the row has none (running, or completed
/// before migration 6: its events are rows of `toolsched_events`).
fn logged(row: &tokio_postgres::Row, first: usize) -> Option<Vec<Recorded>> {
    let sequences: Vec<i64> = row.get::<_, Option<Vec<i64>>>(first)?;
    let at: Vec<SystemTime> = row.get::<_, Option<Vec<SystemTime>>>(first + 1)?;
    let bodies: Vec<Vec<u8>> = row.get::<_, Option<Vec<Vec<u8>>>>(first + 2)?;
    Some(
        sequences
            .into_iter()
            .zip(at)
            .zip(bodies)
            .map(|((s, a), b)| (s, a, b))
            .collect(),
    )
}

fn reason(e: &(dyn std::error::Error + 'static)) -> String {
    // tokio-postgres puts the cause (connection refused, the server's
    // message) in the source chain.
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

fn unavailable(e: &(dyn std::error::Error + 'static)) -> StoreError {
    StoreError::Unavailable { reason: reason(e) }
}

impl<E: LogEvent> PostgresStore<E> {
    /// Connects to `url`, applies the schema's migrations and starts the
    /// writer and the reachability probe (on the current runtime).
    pub async fn connect(
        url: &str,
        retention: Retention,
        codec: Arc<dyn EventCodec<E>>,
    ) -> Result<Arc<Self>, PostgresError> {
        Self::connect_with(url, retention, codec, StoreTiming::default()).await
    }

    /// Like [`PostgresStore::connect`], with `timing`'s lease and poll.
    pub async fn connect_with(
        url: &str,
        retention: Retention,
        codec: Arc<dyn EventCodec<E>>,
        timing: StoreTiming,
    ) -> Result<Arc<Self>, PostgresError> {
        let StoreTiming {
            lease_ttl,
            tail_poll,
        } = timing;
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| PostgresError::Url { reason: reason(&e) })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("toolsched");
        }
        let listen_config = config.clone();
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| PostgresError::Connect { reason: reason(&e) })?;
        migrate(&pool).await?;

        let (writes, rx) = mpsc::unbounded_channel();
        let (begins, begins_rx) = mpsc::unbounded_channel();

        let (inbox_tx, inbox_rx) = mpsc::unbounded_channel();
        let (reachable_tx, reachable) = watch::channel(true);
        let replica: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        tokio::spawn(writer(pool.clone(), replica.clone(), rx, retention));
        tokio::spawn(probe(pool.clone(), reachable_tx));
        tokio::spawn(insert_begins(pool.clone(), replica.clone(), begins_rx));
        let store = Arc::new(Self {
            memory: MemoryStore::new(retention),
            pool,
            codec,
            retention,
            live: Mutex::new(HashMap::new()),
            writes,
            begins,
            unwritten: Mutex::new(HashMap::new()),
            began_behind: Mutex::new(HashMap::new()),
            reachable,
            replica,
            lease_ttl,
            tail_poll,
            epochs: Mutex::new(HashMap::new()),
            waiters: Mutex::new(HashMap::new()),
            inbox: Mutex::new(Some(inbox_rx)),
            inbox_tx,
            orphans: Mutex::new(HashMap::new()),
            mirrored: Mutex::new(Default::default()),
            tails: Mutex::new(HashMap::new()),
            settled: Mutex::new(HashMap::new()),
            me: std::sync::OnceLock::new(),
        });
        let _ = store.me.set(Arc::downgrade(&store));
        tokio::spawn(renew(Arc::downgrade(&store)));
        tokio::spawn(listen(listen_config, Arc::downgrade(&store)));
        Ok(store)
    }

    /// This process's name in lease rows.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Claims (or renews) the session's lease: free, expired, or already
    /// this replica's. Taking it from another replica bumps the epoch.
    async fn claim(
        &self,
        client: &deadpool_postgres::Object,
        session_id: &str,
    ) -> Result<i64, StoreError> {
        let ttl = self.lease_ttl.as_secs_f64();
        let asked = Instant::now();
        let statement = client
            .prepare_cached(CLAIM)
            .await
            .map_err(|e| unavailable(&e))?;
        let claimed = client
            .query_opt(&statement, &[&session_id, &&*self.replica, &ttl])
            .await
            .map_err(|e| unavailable(&e))?;
        if let Some(row) = claimed {
            let epoch: i64 = row.get(0);
            self.held(session_id, epoch, asked);
            return Ok(epoch);
        }
        let row = client
            .query_opt(
                "SELECT owner, greatest(extract(epoch FROM expires_at - now()), 0)::float8 \
                 FROM toolsched_leases WHERE session_id = $1",
                &[&session_id],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let (owner, secs): (String, f64) =
            row.map_or((String::new(), 0.0), |r| (r.get(0), r.get(1)));
        Err(self.owned_elsewhere(session_id, owner, secs))
    }

    fn owned_elsewhere(&self, session_id: &str, owner: String, secs: f64) -> StoreError {
        StoreError::OwnedElsewhere {
            session_id: session_id.to_string(),
            owner,
            expires_in: Duration::from_secs_f64(secs.max(0.0).ceil()),
        }
    }

    fn epochs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        // Inserts and reads only: consistent after any panic.
        self.epochs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lease on `session_id` is this replica's at `epoch`, taken or
    /// renewed by a statement sent at `asked`.
    fn held(&self, session_id: &str, epoch: i64, asked: Instant) {
        let held = Held {
            epoch,
            fresh_until: asked + self.lease_ttl / 2,
        };
        self.epochs().insert(session_id.to_string(), held);
    }

    /// The epoch of this replica's lease on `session_id` while it is fresh
    /// (a new batch then skips the claim).
    fn fresh_epoch(&self, session_id: &str) -> Option<i64> {
        self.epochs()
            .get(session_id)
            .filter(|h| h.fresh_until > Instant::now())
            .map(|h| h.epoch)
    }

    fn fence(&self, session_id: &str) -> Fence {
        Fence {
            owner: self.replica.clone(),
            epoch: self.epochs().get(session_id).map_or(0, |h| h.epoch),
        }
    }

    /// Lets go of every lease of this replica at once (shutting down: the
    /// next request for its sessions takes them over without waiting for
    /// expiry).
    pub async fn release(&self) {
        let Ok(client) = self.client().await else {
            return;
        };
        if let Err(e) = client
            .execute(
                "UPDATE toolsched_leases SET expires_at = now() WHERE owner = $1",
                &[&&*self.replica],
            )
            .await
        {
            tracing::warn!(reason = %reason(&e), "store: releasing leases failed; they expire");
        }
    }

    /// Waits until every write queued so far is in the database, at most
    /// `timeout` (a store still unreachable then loses them; it is logged).
    /// The server calls it on its way out.
    pub async fn flush(&self, timeout: Duration) {
        let (done, written) = tokio::sync::oneshot::channel();
        self.write(Write::Flush(done));
        if tokio::time::timeout(timeout, written).await.is_err() {
            tracing::error!(
                timeout_secs = timeout.as_secs_f64(),
                "store: writes still pending at exit were not written"
            );
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, LiveLogs<E>> {
        // Inserts and removes only: consistent after any panic.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, write: Write) {
        // The writer lives as long as the runtime; a send fails only at exit.
        let _ = self.writes.send(write);
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| unavailable(&e))
    }

    /// One round trip: while this replica's lease on the session is fresh,
    /// the batch's row is inserted fenced by that lease (no lease write),
    /// with the other batches beginning at the same time ([`begins`]);
    /// otherwise the lease is claimed and the row inserted in one statement.
    /// No round trip for a batch of reads with no request id under a fresh
    /// lease: its row is written behind ([`BeginRow`]).
    async fn begin(&self, mut new: NewBatch) -> Result<Begun<E>, StoreError> {
        let fresh = self.fresh_epoch(&new.session_id);
        // (A store found unreachable refuses new batches, these too: the
        // claiming statement below tells.)
        if let Some(epoch) = fresh
            && new.reads_only
            && new.request_id.is_none()
            && *self.reachable.borrow()
        {
            let row = Arc::new(self.row(&mut new, epoch));
            // Listed before the batch is in `live`: a mirror never finds it
            // running with its row in no list.
            self.unwritten()
                .entry(row.session_id.clone())
                .or_default()
                .push(row.clone());
            self.began_behind()
                .insert((row.session_id.clone(), row.batch_id.clone()), row.clone());
            let begun = match self.begun(new).await {
                Ok(begun) => begun,
                Err(e) => {
                    let _ = self.forget_unwritten(&row.session_id, &row.batch_id);
                    return Err(e);
                }
            };
            self.write(Write::Begin(row));
            return Ok(begun);
        }
        // Its row comes after those of the session's batches that began
        // before it (their order is the order a replica taking the session
        // over resumes them in).
        self.write_unwritten(&new.session_id).await?;
        let mut found = None;
        if let Some(epoch) = fresh {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let row = self.row(&mut new, epoch);
            let sent = self.begins.send(PendingBegin { row, reply });
            let (inserted, request) = match sent {
                Ok(()) => answer.await.map_err(|_| StoreError::Unavailable {
                    reason: "the server is shutting down".into(),
                })?,
                // The grouping task lives as long as the runtime.
                Err(unsent) => (Ok(false), unsent.0.row.request),
            };
            new.request = request;
            if inserted? {
                found = Some(None);
            }
            // Else a known request id, or the lease is not what we thought:
            // the claiming statement below tells which.
        }
        let found = match found {
            Some(found) => found,
            None => {
                let client = self.client().await?;
                self.claim_and_insert(&client, &new).await?
            }
        };
        if let Some(batch_id) = found {
            let log = self.load(&new.session_id, &batch_id).await?;
            return Ok(Begun::Existing { batch_id, log });
        }
        self.begun(new).await
    }

    /// `new`'s row under the lease at `epoch` (its request taken).
    fn row(&self, new: &mut NewBatch, epoch: i64) -> BeginRow {
        BeginRow {
            session_id: new.session_id.clone(),
            batch_id: new.batch_id.clone(),
            request_id: new.request_id.clone(),
            digest: new.digest,
            epoch,
            request: new.request.take(),
        }
    }

    /// A batch whose row is written (or on its way): its live log.
    async fn begun(&self, new: NewBatch) -> Result<Begun<E>, StoreError> {
        let key = (new.session_id.clone(), new.batch_id.clone());
        let begun = self.memory.begin_batch(new).await?;
        if let Begun::New(writer) = &begun {
            self.live().insert(key, writer.log().clone());
        }
        Ok(begun)
    }

    fn unwritten(&self) -> std::sync::MutexGuard<'_, Unwritten> {
        // Inserts and removes only: consistent after any panic.
        self.unwritten.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the rows of `session_id`'s batches that began without
    /// waiting for them and are not known to be written yet (the writer
    /// writes them too: whichever comes second inserts nothing).
    async fn write_unwritten(&self, session_id: &str) -> Result<(), StoreError> {
        // Kept listed until written: a caller arriving meanwhile writes them
        // too (nothing twice) rather than going ahead of them.
        let rows = self.unwritten().get(session_id).cloned();
        self.write_rows(session_id, rows.unwrap_or_default())
            .await
            .map(drop)
    }

    /// Writes `rows` of `session_id` (taken from [`PostgresStore::unwritten`],
    /// oldest first) and unlists them once committed: the batch ids this
    /// statement inserted (a row not among them was there already, or was
    /// fenced out).
    async fn write_rows(
        &self,
        session_id: &str,
        rows: Vec<Arc<BeginRow>>,
    ) -> Result<std::collections::HashSet<String>, StoreError> {
        if rows.is_empty() {
            return Ok(Default::default());
        }
        let client = self.client().await?;
        let refs: Vec<&BeginRow> = rows.iter().map(|r| &**r).collect();
        let inserted = insert_rows(&client, &self.replica, &refs).await?;
        if inserted.len() < rows.len() {
            tracing::debug!(
                session = %session_id,
                rows = rows.len(),
                inserted = inserted.len(),
                "store: rows written behind already there or fenced out (their completions insert them under their own fence)"
            );
        }
        let mut unwritten = self.unwritten();
        if let Some(listed) = unwritten.get_mut(session_id) {
            listed.retain(|r| !rows.iter().any(|w| Arc::ptr_eq(r, w)));
            if listed.is_empty() {
                unwritten.remove(session_id);
            }
        }
        Ok(inserted)
    }

    fn began_behind(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<BeginRow>>> {
        // Inserts and removes only: consistent after any panic.
        self.began_behind.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets `batch_id`'s row written behind, if any (completed or
    /// abandoned: the writer has it in order); the row, for its completion.
    /// Called under the `live` lock, as the batch leaves `live` (see
    /// `start_mirror`).
    fn forget_unwritten(&self, session_id: &str, batch_id: &str) -> Option<Arc<BeginRow>> {
        let mut unwritten = self.unwritten();
        if let Some(rows) = unwritten.get_mut(session_id) {
            rows.retain(|r| r.batch_id != batch_id);
            if rows.is_empty() {
                unwritten.remove(session_id);
            }
        }
        drop(unwritten);
        self.began_behind()
            .remove(&(session_id.to_string(), batch_id.to_string()))
    }

    /// Claims the session's lease and inserts the batch's row in one
    /// statement: `None` when inserted, the batch its request id names
    /// when known with the same calls.
    async fn claim_and_insert(
        &self,
        client: &deadpool_postgres::Object,
        new: &NewBatch,
    ) -> Result<Option<String>, StoreError> {
        let asked = Instant::now();
        let statement = client
            .prepare_cached(CLAIM_AND_INSERT)
            .await
            .map_err(|e| unavailable(&e))?;
        let row = client
            .query_one(
                &statement,
                &[
                    &new.session_id,
                    &&*self.replica,
                    &self.lease_ttl.as_secs_f64(),
                    &new.batch_id,
                    &new.request_id,
                    &new.digest.as_slice(),
                    &new.request,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let epoch: Option<i64> = row.get(0);
        let inserted: Option<String> = row.get(1);
        let Some(epoch) = epoch else {
            let owner: Option<String> = row.get(4);
            let secs: Option<f64> = row.get(5);
            return Err(self.owned_elsewhere(
                &new.session_id,
                owner.unwrap_or_default(),
                secs.unwrap_or(0.0),
            ));
        };
        self.held(&new.session_id, epoch, asked);
        let running: Vec<String> = row.get(6);
        // Batches this process began or took over are its own, running or
        // completed (their completion may not be written yet): never
        // orphans.
        let orphans: Vec<String> = running
            .into_iter()
            .filter(|b| !self.memory.knows(&new.session_id, b))
            .collect();
        if !orphans.is_empty() {
            self.orphans().insert(new.session_id.clone(), orphans);
        }
        if inserted.is_some() {
            return Ok(None);
        }
        // The request id is known: the same calls replay that batch. (Read
        // again when another replica inserted it during this statement: its
        // row was not in the statement's snapshot.)
        let (batch_id, digest): (Option<String>, Option<Vec<u8>>) = (row.get(2), row.get(3));
        let (batch_id, digest) = match (batch_id, digest) {
            (Some(b), Some(d)) => (b, d),
            _ => {
                let row = client
                    .query_one(
                        "SELECT batch_id, digest FROM toolsched_batches \
                         WHERE session_id = $1 AND request_id = $2",
                        &[&new.session_id, &new.request_id],
                    )
                    .await
                    .map_err(|e| unavailable(&e))?;
                (row.get(0), row.get(1))
            }
        };
        if digest != new.digest {
            return Err(StoreError::RequestIdConflict {
                request_id: new.request_id.clone().unwrap_or_default(),
                batch_id,
            });
        }
        Ok(Some(batch_id))
    }

    /// A retained batch's log: this process's live one, or read back.
    async fn load(&self, session_id: &str, batch_id: &str) -> Result<Arc<BatchLog<E>>, StoreError> {
        if let Ok(log) = self.memory.batch(session_id, batch_id).await {
            return Ok(log);
        }
        let unknown = || StoreError::UnknownBatch {
            session_id: session_id.to_string(),
            batch_id: batch_id.to_string(),
            retention: self.retention,
        };
        let client = self.client().await?;
        let retention_secs = self.retention.completed_for.as_secs_f64();
        let found = client
            .query_opt(
                "SELECT completed_at IS NOT NULL, log_sequences, log_at, log_bodies \
                 FROM toolsched_batches WHERE session_id = $1 AND batch_id = $2 \
                 AND (completed_at IS NULL OR completed_at > now() - make_interval(secs => $3))",
                &[&session_id, &batch_id, &retention_secs],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(found) = found else {
            // A batch of reads whose row its owner writes behind
            // ([`BeginRow`]) is not there yet: the replica holding the
            // session, if another one does, tells.
            if let Some(owner) = self.owner_of(session_id).await? {
                return Err(self.owned_elsewhere(session_id, owner, 0.0));
            }
            return Err(unknown());
        };
        if !found.get::<_, bool>(0) {
            // Running, and not here: its owner serves it, or it died and
            // the batch is to be taken over (`Store::adopt`).
            return Err(StoreError::RunningElsewhere {
                session_id: session_id.to_string(),
                batch_id: batch_id.to_string(),
            });
        }
        let recorded = match logged(&found, 1) {
            Some(entries) => entries,
            // Completed before migration 6: one row per event.
            None => client
                .query(
                    "SELECT sequence, at, body FROM toolsched_events \
                     WHERE session_id = $1 AND batch_id = $2 ORDER BY sequence",
                    &[&session_id, &batch_id],
                )
                .await
                .map_err(|e| unavailable(&e))?
                .into_iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect(),
        };
        let mut entries = Vec::with_capacity(recorded.len());
        // A taken-over batch's log continues after a base.
        let first = recorded.first().map_or(1, |r| r.0);
        for (i, (sequence, at, body)) in recorded.into_iter().enumerate() {
            if sequence != first + i as i64 {
                return Err(StoreError::Unavailable {
                    reason: format!(
                        "the recorded log of batch '{batch_id}' has a gap before sequence {sequence}"
                    ),
                });
            }
            entries.push(Entry::decoded(
                sequence as u64,
                at,
                body.into(),
                &*self.codec,
            ));
        }
        Ok(BatchLog::recorded(entries))
    }

    async fn take_over(
        &self,
        session_id: &str,
        batch_id: &str,
    ) -> Result<Option<Adopted<E>>, StoreError> {
        // A batch this process began or took over is its own: it runs here,
        // or completed here (its completion perhaps not written yet, so the
        // store's row still says running). Taking it over again would run
        // it twice and delete the log its completion writes.
        if self.memory.knows(session_id, batch_id) {
            return Ok(None);
        }
        let client = self.client().await?;
        // Only a running batch whose owner's lease is gone (expired or let
        // go) is claimed: a live owner keeps it (OwnedElsewhere).
        let epoch = self.claim(&client, session_id).await?;
        let row = client
            .query_opt(
                "SELECT request, request_id, digest, epoch FROM toolsched_batches \
                 WHERE session_id = $1 AND batch_id = $2 AND completed_at IS NULL",
                &[&session_id, &batch_id],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let request: Option<Vec<u8>> = row.get(0);
        let Some(request) = request else {
            return Ok(None);
        };
        let request_id: Option<String> = row.get(1);
        let digest: Vec<u8> = row.get(2);
        let began_at_epoch: i64 = row.get(3);
        // Every epoch since the batch began had its own range of sequences:
        // the new log starts past all of them. What the stopped owner
        // mirrored is superseded by the new log (one log per batch in the
        // store).
        let base = u64::try_from(epoch.saturating_sub(began_at_epoch))
            .unwrap_or(0)
            .saturating_mul(SEQUENCES_PER_OWNER);
        client
            .execute(
                "DELETE FROM toolsched_events WHERE session_id = $1 AND batch_id = $2",
                &[&session_id, &batch_id],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        // The session's other running batches of stopped owners (not this
        // process's own), in the order they began.
        let mut began_before = Vec::new();
        let mut began_after = Vec::new();
        let mut seen_this = false;
        for row in client
            .query(
                "SELECT batch_id FROM toolsched_batches WHERE session_id = $1 \
                 AND completed_at IS NULL AND request IS NOT NULL ORDER BY began_at, batch_id",
                &[&session_id],
            )
            .await
            .map_err(|e| unavailable(&e))?
        {
            let id: String = row.get(0);
            if id == batch_id {
                seen_this = true;
            } else if !self.memory.knows(session_id, &id) {
                if seen_this {
                    began_after.push(id);
                } else {
                    began_before.push(id);
                }
            }
        }
        let mut executing = Vec::new();
        let mut ended = Vec::new();
        for row in client
            .query(
                "SELECT call_id, ended FROM toolsched_executing \
                 WHERE session_id = $1 AND batch_id = $2",
                &[&session_id, &batch_id],
            )
            .await
            .map_err(|e| unavailable(&e))?
        {
            let call_id: String = row.get(0);
            match row.get::<_, Option<Vec<u8>>>(1) {
                Some(end) => ended.push((call_id, end)),
                None => executing.push(call_id),
            }
        }
        let answers = client
            .query(
                "SELECT call_id, outcome, new_content FROM toolsched_answers \
                 WHERE session_id = $1 AND batch_id = $2 ORDER BY call_id, correlation_id",
                &[&session_id, &batch_id],
            )
            .await
            .map_err(|e| unavailable(&e))?
            .into_iter()
            .map(|row| {
                let answer = Answer {
                    outcome: row.get(1),
                    new_content: row.get(2),
                };
                (row.get::<_, String>(0), answer)
            })
            .collect();
        // This process's record of the batch, as if it had begun it here
        // (the row is kept: its request id still names it).
        let mut new = NewBatch {
            session_id: session_id.to_string(),
            batch_id: batch_id.to_string(),
            request_id,
            digest: [0; 32],
            request: None,
            reads_only: false,
        };
        if digest.len() == 32 {
            new.digest.copy_from_slice(&digest);
        }
        let Begun::New(writer) = self.memory.begin_batch(new).await? else {
            return Ok(None);
        };
        writer.continue_after(base);
        for call_id in executing.iter().chain(ended.iter().map(|(c, _)| c)) {
            self.memory
                .record_executing(session_id, batch_id, call_id)
                .await?;
        }
        self.live().insert(
            (session_id.to_string(), batch_id.to_string()),
            writer.log().clone(),
        );
        Ok(Some(Adopted {
            writer,
            request,
            executing,
            ended,
            answers,
            began_before,
            began_after,
        }))
    }

    fn waiters(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<i64, tokio::sync::oneshot::Sender<Vec<u8>>>> {
        // Inserts and removes only: consistent after any panic.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn owner_of(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt(
                "SELECT owner FROM toolsched_leases \
                 WHERE session_id = $1 AND expires_at > now() AND owner <> $2",
                &[&session_id, &&*self.replica],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn post(
        &self,
        owner: &str,
        session_id: &str,
        kind: &str,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "WITH posted AS (INSERT INTO toolsched_inbox (owner, session_id, kind, body) \
                   VALUES ($1, $2, $3, $4) RETURNING id) \
                 SELECT id, pg_notify('toolsched_inbox', $1) FROM posted",
                &[&owner, &session_id, &kind, &body],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let id: i64 = row.get(0);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.waiters().insert(id, tx);
        // Answered before the waiter was in place: read it now.
        let early = client
            .query_opt(
                "SELECT answer FROM toolsched_inbox WHERE id = $1 AND answer IS NOT NULL",
                &[&id],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        drop(client);
        if let Some(row) = early {
            self.waiters().remove(&id);
            return Ok(row.get(0));
        }
        // An owner that does not answer within its lease is gone.
        let wait = RELAY_TIMEOUT.min(self.lease_ttl);
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            _ => {
                self.waiters().remove(&id);
                Err(StoreError::OwnerSilent {
                    // The client's own id, never the tenant's key.
                    session_id: crate::tenant::TenantId::client_session_id(session_id)
                        .chars()
                        .take(64)
                        .collect(),
                    waited: wait,
                })
            }
        }
    }

    /// Claims the requests posted to this replica and hands them to the
    /// API; each answer is recorded and its sender woken.
    async fn take_posted(self: &Arc<Self>) -> Result<(), String> {
        let rows = self
            .pool
            .get()
            .await
            .map_err(|e| reason(&e))?
            .query(
                "UPDATE toolsched_inbox SET claimed_at = now() \
                 WHERE owner = $1 AND claimed_at IS NULL RETURNING id, session_id, kind, body",
                &[&&*self.replica],
            )
            .await
            .map_err(|e| reason(&e))?;
        for row in rows {
            let id: i64 = row.get(0);
            let (reply, answer) = tokio::sync::oneshot::channel();
            let item = InboxItem {
                session_id: row.get(1),
                kind: row.get(2),
                body: row.get(3),
                reply,
            };
            if self.inbox_tx.send(item).is_err() {
                continue;
            }
            let pool = self.pool.clone();
            tokio::spawn(async move {
                let Ok(answer) = answer.await else {
                    return;
                };
                let answered = async {
                    pool.get()
                        .await
                        .map_err(|e| reason(&e))?
                        .execute(
                            "WITH answered AS (UPDATE toolsched_inbox \
                               SET answer = $2, answered_at = now() WHERE id = $1 RETURNING id) \
                             SELECT pg_notify('toolsched_answer', id::text) FROM answered",
                            &[&id, &answer],
                        )
                        .await
                        .map_err(|e| reason(&e))
                };
                if let Err(reason) = answered.await {
                    tracing::warn!(%reason, id, "store: recording a relayed request's answer failed");
                }
            });
        }
        Ok(())
    }

    /// The answer to relayed request `id` arrived: its waiter gets it.
    async fn answered(&self, id: i64) -> Result<(), String> {
        if !self.waiters().contains_key(&id) {
            return Ok(());
        }
        let row = self
            .pool
            .get()
            .await
            .map_err(|e| reason(&e))?
            .query_opt(
                "SELECT answer FROM toolsched_inbox WHERE id = $1 AND answer IS NOT NULL",
                &[&id],
            )
            .await
            .map_err(|e| reason(&e))?;
        if let Some(row) = row
            && let Some(waiter) = self.waiters().remove(&id)
        {
            let _ = waiter.send(row.get(0));
        }
        Ok(())
    }

    fn orphans(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<String>>> {
        // Inserts and removes only: consistent after any panic.
        self.orphans.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mirrored(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<(String, String)>> {
        // Inserts and removes only: consistent after any panic.
        self.mirrored.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tails(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, Vec<std::sync::Weak<tokio::sync::Notify>>>> {
        // Inserts and removes only: consistent after any panic.
        self.tails.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the readers here of `batch_id` (every batch's: `None`). A
    /// reader busy reading keeps the wake-up and reads again after.
    fn wake_tails(&self, batch_id: Option<&str>) {
        let wake = |wakers: &Vec<std::sync::Weak<tokio::sync::Notify>>| {
            wakers
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .for_each(|n| n.notify_one());
        };
        let tails = self.tails();
        match batch_id {
            Some(batch) => tails.get(batch).into_iter().for_each(wake),
            None => tails.values().for_each(wake),
        }
    }

    async fn start_mirror(&self, session_id: &str, batch_id: &str) -> Result<bool, StoreError> {
        let key = (session_id.to_string(), batch_id.to_string());
        // Under the `live` lock, as `complete_batch` takes the batch out of
        // `live` and its row written behind out of `unwritten`, both at
        // once: either the batch is still running here and the rows its
        // events need (its own among them, unless written already) are
        // taken now, or its completion, which inserts its row, is queued
        // already. (Taking the rows before this look let a completion
        // unlist the row between the two: the mirror then wrote events
        // whose row was neither committed nor to be written by it, and the
        // foreign key refused them.)
        let running = {
            let live = self.live();
            live.get(&key).map(|log| {
                let rows = self
                    .unwritten()
                    .get(session_id)
                    .cloned()
                    .unwrap_or_default();
                let first = self.mirrored().insert(key.clone());
                // What is logged so far is read from here.
                (rows, first.then(|| log.reader(0)))
            })
        };
        let Some((rows, reader)) = running else {
            // Completed here: once its completion, perhaps still queued, is
            // written, the store serves it.
            if self.memory.knows(session_id, batch_id) {
                self.flush(COMPLETION_WAIT).await;
                return Ok(true);
            }
            return Ok(false);
        };
        let first = reader.is_some();
        // `Break(answer)`: nothing (more) to mirror from here.
        use std::ops::ControlFlow;
        let started = async {
            // Its events refer to its row: committed before any of them.
            self.write_own_row(session_id, batch_id, rows).await?;
            let Some(reader) = reader else {
                // Another mirror of it writes its log.
                return Ok(ControlFlow::Break(true));
            };
            let Ok(mut reader) = reader else {
                return Ok(ControlFlow::Break(false));
            };
            let mut logged = Vec::new();
            while let Some(Some(entry)) = futures::FutureExt::now_or_never(reader.next()) {
                logged.push(entry);
            }
            for chunk in logged.chunks(MIRROR_CHUNK) {
                let written = write_entries(&self.pool, &*self.codec, session_id, batch_id, chunk)
                    .await
                    .map_err(|reason| StoreError::Unavailable { reason })?;
                if !written {
                    // Its row was deleted since (abandoned).
                    return Ok(ControlFlow::Break(false));
                }
            }
            Ok::<_, StoreError>(ControlFlow::Continue(reader))
        };
        let mut reader = match started.await {
            Ok(ControlFlow::Continue(reader)) => reader,
            Ok(ControlFlow::Break(answer)) => return Ok(answer),
            Err(e) => {
                // Not mirrored: the next WatchBatch asks again.
                if first {
                    self.mirrored().remove(&key);
                }
                return Err(e);
            }
        };
        let (pool, codec) = (self.pool.clone(), self.codec.clone());
        let (session, batch) = key;
        tokio::spawn(async move {
            while let Some(next) = reader.next().await {
                let mut chunk = vec![next];
                while chunk.len() < MIRROR_CHUNK
                    && let Some(Some(entry)) = futures::FutureExt::now_or_never(reader.next())
                {
                    chunk.push(entry);
                }
                // In order, retried: a reader elsewhere waits for it.
                loop {
                    match write_entries(&pool, &*codec, &session, &batch, &chunk).await {
                        Ok(true) => break,
                        // Its row was deleted (abandoned, or swept once
                        // completed): nobody reads these events any more.
                        Ok(false) => return,
                        Err(reason) => {
                            tracing::warn!(%reason, "store: mirroring a batch's log failed; retrying");
                            tokio::time::sleep(RETRY_EVERY).await;
                        }
                    }
                }
            }
        });
        Ok(true)
    }

    /// Writes `rows` (the session's rows written behind, taken with the
    /// batch still running) and makes sure `batch_id`'s row is committed:
    /// [`StoreError::LeaseLost`] when it is not there because its fenced
    /// insert was refused (the session's lease passed to another replica).
    async fn write_own_row(
        &self,
        session_id: &str,
        batch_id: &str,
        rows: Vec<Arc<BeginRow>>,
    ) -> Result<(), StoreError> {
        let own = rows.iter().any(|r| r.batch_id == batch_id);
        let inserted = self.write_rows(session_id, rows).await?;
        if !own || inserted.contains(batch_id) {
            // Not listed: written when it began, or by an earlier write of
            // the listed rows (its statement committed before it unlisted
            // them).
            return Ok(());
        }
        // Inserted by another statement (the writer, another mirror), or
        // fenced out: one more round trip, only then.
        let there = self
            .client()
            .await?
            .query_opt(
                "SELECT 1 FROM toolsched_batches WHERE session_id = $1 AND batch_id = $2",
                &[&session_id, &batch_id],
            )
            .await
            .map_err(|e| unavailable(&e))?
            .is_some();
        if there {
            Ok(())
        } else {
            Err(StoreError::LeaseLost {
                session_id: session_id.to_string(),
            })
        }
    }

    async fn start_tail(
        self: Arc<Self>,
        session_id: &str,
        batch_id: &str,
    ) -> Result<Arc<BatchLog<E>>, StoreError> {
        let (log, writer) = BatchLog::new();
        // Listening before the first read: what is written after it wakes
        // this reader, even while it reads.
        let waker = TailWaker::new(&self, batch_id);
        // What is recorded so far is in the log before it is returned.
        let (mut last, ended) = self.read_tail(session_id, batch_id, &writer, 0).await?;
        if ended {
            writer.finish_recorded();
            return Ok(log);
        }
        let (session, batch) = (session_id.to_string(), batch_id.to_string());
        let store = Arc::downgrade(&self);
        let poll = self.tail_poll;
        drop(self);
        tokio::spawn(async move {
            loop {
                // A notification since the last read, or the poll.
                let _ = tokio::time::timeout(poll, waker.notify.notified()).await;
                let Some(s) = store.upgrade() else {
                    return;
                };
                match s.read_tail(&session, &batch, &writer, last).await {
                    Ok((_, true)) => {
                        writer.finish_recorded();
                        return;
                    }
                    Ok((seen, false)) => last = seen,
                    // The owner stopped: readers end; a WatchBatch again
                    // takes the batch over.
                    Err(StoreError::OwnedElsewhere { .. }) => return,
                    Err(e) => tracing::debug!(reason = %e, "store: reading a batch's log failed"),
                }
            }
        });
        Ok(log)
    }

    /// Appends the recorded entries after `after` to `writer`; returns the
    /// last sequence and whether the batch completed (every entry is then
    /// in). `OwnedElsewhere` (with no owner) when it is unfinished and its
    /// owner's lease ran out.
    async fn read_tail(
        &self,
        session_id: &str,
        batch_id: &str,
        writer: &super::LogWriter<E>,
        after: i64,
    ) -> Result<(i64, bool), StoreError> {
        let client = self.client().await?;
        let status = client
            .query_opt(
                "SELECT b.completed_at IS NOT NULL, EXISTS (SELECT 1 FROM toolsched_leases l \
                   WHERE l.session_id = b.session_id AND l.expires_at > now()), \
                   b.log_sequences, b.log_at, b.log_bodies \
                 FROM toolsched_batches b WHERE b.session_id = $1 AND b.batch_id = $2",
                &[&session_id, &batch_id],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(status) = status else {
            return Err(StoreError::UnknownBatch {
                session_id: session_id.to_string(),
                batch_id: batch_id.to_string(),
                retention: self.retention,
            });
        };
        let (completed, owned): (bool, bool) = (status.get(0), status.get(1));
        let recorded = match logged(&status, 2) {
            // Completed: the whole log is in its row.
            Some(entries) => entries,
            // Running (mirrored by its owner as it grows), or completed
            // before migration 6: one row per event.
            None => client
                .query(
                    "SELECT sequence, at, body FROM toolsched_events \
                     WHERE session_id = $1 AND batch_id = $2 AND sequence > $3 ORDER BY sequence",
                    &[&session_id, &batch_id, &after],
                )
                .await
                .map_err(|e| unavailable(&e))?
                .into_iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect(),
        };
        let mut last = after;
        for (sequence, at, body) in recorded.into_iter().filter(|e| e.0 > after) {
            if writer.append_recorded(Entry::decoded(
                sequence as u64,
                at,
                body.into(),
                &*self.codec,
            )) {
                last = sequence;
            }
        }
        writer.publish();
        if !completed && !owned {
            return Err(StoreError::OwnedElsewhere {
                session_id: session_id.to_string(),
                owner: String::new(),
                expires_in: Duration::ZERO,
            });
        }
        Ok((last, completed))
    }

    /// Writes a side-effecting call's end, fenced like a batch's completion:
    /// the lease row is held (FOR SHARE) for the statement, so a replica
    /// claiming the session either waits for this write and then reads the
    /// end, or has claimed first and nothing is written (LeaseLost). One
    /// round trip (a statement prepared once per connection).
    async fn ended_now(
        &self,
        session_id: &str,
        batch_id: &str,
        call_id: &str,
        end: Vec<u8>,
    ) -> Result<(), StoreError> {
        let fence = self.fence(session_id);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "WITH held AS (SELECT 1 FROM toolsched_leases WHERE session_id = $1 \
                   AND owner = $5 AND epoch = $6 FOR SHARE), \
                 ended AS (UPDATE toolsched_executing SET ended = $4 \
                   WHERE session_id = $1 AND batch_id = $2 AND call_id = $3 \
                   AND EXISTS (SELECT 1 FROM held) RETURNING 1) \
                 SELECT EXISTS (SELECT 1 FROM ended)",
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let written: bool = client
            .query_one(
                &statement,
                &[
                    &session_id,
                    &batch_id,
                    &call_id,
                    &end,
                    &&*fence.owner,
                    &fence.epoch,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?
            .get(0);
        if written {
            Ok(())
        } else {
            Err(StoreError::LeaseLost {
                session_id: session_id.to_string(),
            })
        }
    }

    fn is_recorded_executing(&self, session_id: &str, batch_id: &str, call_id: &str) -> bool {
        self.memory
            .recorded_executing(session_id, batch_id)
            .iter()
            .any(|c| c == call_id)
    }

    async fn executing(
        &self,
        session_id: &str,
        batch_id: &str,
        call_id: &str,
    ) -> Result<(), StoreError> {
        // The call refers to its batch's row (a batch of reads whose row
        // was written behind, when a tool changed meanwhile).
        self.write_unwritten(session_id).await?;
        let fence = self.fence(session_id);
        // Fenced: only under a lease this replica still holds, unexpired.
        // One round trip (a statement prepared once per connection).
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "INSERT INTO toolsched_executing (session_id, batch_id, call_id) \
                 SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM toolsched_leases \
                   WHERE session_id = $1 AND owner = $4 AND epoch = $5 AND expires_at > now()) \
                 ON CONFLICT DO NOTHING",
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let written = client
            .execute(
                &statement,
                &[
                    &session_id,
                    &batch_id,
                    &call_id,
                    &&*fence.owner,
                    &fence.epoch,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        if written == 0 && !self.is_recorded_executing(session_id, batch_id, call_id) {
            return Err(StoreError::LeaseLost {
                session_id: session_id.to_string(),
            });
        }
        self.memory
            .record_executing(session_id, batch_id, call_id)
            .await
    }
}

// === answers and session settings ===

impl<E: LogEvent> PostgresStore<E> {
    fn settled(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        // Inserts and reads only: consistent after any panic.
        self.settled.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Store::record_answer_durably`]: one round trip.
    async fn answer_now(
        &self,
        key: (&str, &str, &str, &str),
        answer: Answer,
        settings: Option<Settings>,
    ) -> Result<Answer, StoreError> {
        let (session_id, batch_id, call_id, correlation_id) = key;
        // The answer refers to its batch's row.
        self.write_unwritten(session_id).await?;
        let fence = self.fence(session_id);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(RECORD_ANSWER_FENCED)
            .await
            .map_err(|e| unavailable(&e))?;
        let (body, version) = match &settings {
            Some(s) => (Some(s.body.as_slice()), s.version as i64),
            None => (None, 0),
        };
        let row = client
            .query_one(
                &statement,
                &[
                    &session_id,
                    &batch_id,
                    &call_id,
                    &correlation_id,
                    &answer.outcome,
                    &answer.new_content,
                    &&*fence.owner,
                    &fence.epoch,
                    &body,
                    &version,
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        let held: bool = row.get(0);
        let inserted: Option<String> = row.get(1);
        let earlier: Option<String> = row.get(2);
        let winner = match (held, inserted, earlier) {
            (false, _, _) => {
                return Err(StoreError::LeaseLost {
                    session_id: session_id.to_string(),
                });
            }
            (true, Some(_), _) => answer,
            (true, None, Some(outcome)) => Answer {
                outcome,
                new_content: row.get(3),
            },
            // Inserted by a statement this one's snapshot did not see: the
            // prompt's only answerer is its owner, so it is this answer.
            (true, None, None) => answer,
        };
        if settings.is_some() {
            self.settled().insert(session_id.to_string(), fence.epoch);
        }
        self.memory.record_answer(
            session_id,
            batch_id,
            call_id,
            correlation_id,
            winner.clone(),
        );
        Ok(winner)
    }

    /// [`Store::record_settings`]: one round trip.
    async fn settings_now(&self, session_id: &str, settings: Settings) -> Result<(), StoreError> {
        let fence = self.fence(session_id);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(RECORD_SETTINGS_FENCED)
            .await
            .map_err(|e| unavailable(&e))?;
        let held: bool = client
            .query_one(
                &statement,
                &[
                    &session_id,
                    &&*fence.owner,
                    &fence.epoch,
                    &settings.body,
                    &(settings.version as i64),
                ],
            )
            .await
            .map_err(|e| unavailable(&e))?
            .get(0);
        if !held {
            return Err(StoreError::LeaseLost {
                session_id: session_id.to_string(),
            });
        }
        self.settled().insert(session_id.to_string(), fence.epoch);
        Ok(())
    }

    /// [`Store::stored_session`]: one round trip.
    async fn stored(&self, session_id: &str) -> Result<Option<StoredSession>, StoreError> {
        let row = self
            .client()
            .await?
            .query_one(STORED_SESSION, &[&session_id])
            .await
            .map_err(|e| unavailable(&e))?;
        if !row.get::<_, bool>(4) {
            return Ok(None);
        }
        Ok(Some(StoredSession {
            owner: row.get(0),
            settings: row.get(1),
            running: row.get(2),
            requests: row.get(3),
        }))
    }

    /// [`Store::session_settings`]: a round trip only when the lease's
    /// epoch moved since this process last wrote or read them.
    async fn settings_of(&self, session_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let epoch = self.epochs().get(session_id).map(|h| h.epoch);
        if epoch.is_some() && self.settled().get(session_id).copied() == epoch {
            return Ok(None);
        }
        let row = self
            .client()
            .await?
            .query_opt(
                "SELECT settings FROM toolsched_sessions WHERE session_id = $1",
                &[&session_id],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        if let Some(epoch) = epoch {
            self.settled().insert(session_id.to_string(), epoch);
        }
        Ok(Some(row.map(|r| r.get(0)).unwrap_or_default()))
    }
}

impl<E: LogEvent> Store<E> for PostgresStore<E> {
    fn begin_batch(&self, batch: NewBatch) -> StoreFuture<'_, Result<Begun<E>, StoreError>> {
        Box::pin(self.begin(batch))
    }

    fn abandon_batch(&self, session_id: &str, batch_id: &str) {
        self.memory.abandon_batch(session_id, batch_id);
        // Together, under the `live` lock, as in `complete_batch`.
        let mut live = self.live();
        let _ = self.forget_unwritten(session_id, batch_id);
        live.remove(&(session_id.to_string(), batch_id.to_string()));
        drop(live);
        self.write(Write::Abandon {
            session_id: session_id.to_string(),
            batch_id: batch_id.to_string(),
        });
    }

    fn batch<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<Arc<BatchLog<E>>, StoreError>> {
        Box::pin(self.load(session_id, batch_id))
    }

    fn complete_batch(&self, session_id: &str, batch_id: &str, ended: Vec<EndedCall>) {
        self.memory
            .complete_batch(session_id, batch_id, ended.clone());
        let key = (session_id.to_string(), batch_id.to_string());
        // The log is whole: `Completed` was its last event. Encoded before
        // the lock below is taken (the mirror waits for it).
        let log = self.live().get(&key).cloned();
        let entries: Option<Vec<_>> = log.map(|log| {
            log.entries()
                .iter()
                .map(|e| (e.sequence as i64, e.at, e.encoded_by(&*self.codec).clone()))
                .collect()
        });
        let fence = self.fence(session_id);
        // Under the `live` lock, as `start_mirror` looks: the batch leaves
        // `live` and its row written behind leaves `unwritten` together,
        // the row into its completion. A mirror started before sees both
        // (it writes the row before any event), one asked after finds the
        // completion queued (and waits for it to be written); none sees
        // the batch running with its row in neither place.
        let mut live = self.live();
        let row = self.forget_unwritten(session_id, batch_id);
        let running = live.remove(&key).is_some();
        let watched = self.mirrored().remove(&key);
        let Some(entries) = entries.filter(|_| running) else {
            return;
        };
        self.write(Write::Complete(Completion {
            fence,
            session_id: key.0,
            batch_id: key.1,
            entries,
            ended,
            row,
            watched,
        }));
        drop(live);
    }

    fn adopt<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<Adopted<E>>, StoreError>> {
        Box::pin(self.take_over(session_id, batch_id))
    }

    fn record_ended<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
        call_id: &'a str,
        end: Vec<u8>,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(self.ended_now(session_id, batch_id, call_id, end))
    }

    fn record_answer_durably<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
        call_id: &'a str,
        correlation_id: &'a str,
        answer: Answer,
        settings: Option<Settings>,
    ) -> StoreFuture<'a, Result<Answer, StoreError>> {
        Box::pin(self.answer_now(
            (session_id, batch_id, call_id, correlation_id),
            answer,
            settings,
        ))
    }

    fn record_settings<'a>(
        &'a self,
        session_id: &'a str,
        settings: Settings,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(self.settings_now(session_id, settings))
    }

    fn session_settings<'a>(
        &'a self,
        session_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(self.settings_of(session_id))
    }

    fn stored_session<'a>(
        &'a self,
        session_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<StoredSession>, StoreError>> {
        Box::pin(self.stored(session_id))
    }

    fn session_forgotten(&self, session_id: &str) {
        self.settled().remove(session_id);
    }

    fn take_orphans(&self, session_id: &str) -> Vec<String> {
        self.orphans().remove(session_id).unwrap_or_default()
    }

    fn replica_id(&self) -> Option<&str> {
        Some(&self.replica)
    }

    fn owner_elsewhere<'a>(
        &'a self,
        session_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(self.owner_of(session_id))
    }

    fn relay<'a>(
        &'a self,
        owner: &'a str,
        session_id: &'a str,
        kind: &'a str,
        body: Vec<u8>,
    ) -> StoreFuture<'a, Result<Vec<u8>, StoreError>> {
        Box::pin(self.post(owner, session_id, kind, body))
    }

    fn mirror<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.start_mirror(session_id, batch_id))
    }

    fn tail<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<Arc<BatchLog<E>>, StoreError>> {
        Box::pin(async move {
            let Some(me) = self.me.get().and_then(std::sync::Weak::upgrade) else {
                return Err(StoreError::Unavailable {
                    reason: "the store is closing".into(),
                });
            };
            me.start_tail(session_id, batch_id).await
        })
    }

    fn take_inbox(&self) -> Option<mpsc::UnboundedReceiver<InboxItem>> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn record_executing<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
        call_id: &'a str,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(self.executing(session_id, batch_id, call_id))
    }

    fn record_answer(
        &self,
        session_id: &str,
        batch_id: &str,
        call_id: &str,
        correlation_id: &str,
        answer: Answer,
    ) -> AnswerRecord {
        let record = self.memory.record_answer(
            session_id,
            batch_id,
            call_id,
            correlation_id,
            answer.clone(),
        );
        if record == AnswerRecord::First {
            self.write(Write::Answer {
                session_id: session_id.to_string(),
                batch_id: batch_id.to_string(),
                call_id: call_id.to_string(),
                correlation_id: correlation_id.to_string(),
                answer,
            });
        }
        record
    }

    fn answer(&self, session_id: &str, call_id: &str, correlation_id: &str) -> Option<Answer> {
        self.memory.answer(session_id, call_id, correlation_id)
    }

    fn ended(&self, session_id: &str, call_id: &str) -> Option<&'static str> {
        self.memory.ended(session_id, call_id)
    }

    fn recorded_answer<'a>(
        &'a self,
        session_id: &'a str,
        call_id: &'a str,
        correlation_id: &'a str,
    ) -> StoreFuture<'a, Result<Option<Answer>, StoreError>> {
        Box::pin(async move {
            if let Some(answer) = self.memory.answer(session_id, call_id, correlation_id) {
                return Ok(Some(answer));
            }
            let row = self
                .client()
                .await?
                .query_opt(
                    "SELECT outcome, new_content FROM toolsched_answers \
                     WHERE session_id = $1 AND call_id = $2 AND correlation_id = $3 LIMIT 1",
                    &[&session_id, &call_id, &correlation_id],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            Ok(row.map(|r| Answer {
                outcome: r.get(0),
                new_content: r.get(1),
            }))
        })
    }

    fn retention(&self) -> Retention {
        self.retention
    }

    fn make_room(&self, tenant: &str, limit: usize, admitting: &str) -> Result<(), RetainedUse> {
        // What this replica holds; the database's rows follow the
        // retention alone.
        self.memory.make_room(tenant, limit, admitting)
    }

    fn reachable(&self) -> Option<watch::Receiver<bool>> {
        Some(self.reachable.clone())
    }
}

// === migrations ===

async fn migrate(pool: &Pool) -> Result<(), PostgresError> {
    let mut client = pool
        .get()
        .await
        .map_err(|e| PostgresError::Connect { reason: reason(&e) })?;
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    let setup = |e: tokio_postgres::Error| PostgresError::Connect { reason: reason(&e) };
    let tx = client.transaction().await.map_err(setup)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(setup)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS toolsched_migrations (\
           version int PRIMARY KEY, name text NOT NULL, \
           applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await
    .map_err(setup)?;
    let found: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM toolsched_migrations",
            &[],
        )
        .await
        .map_err(setup)?
        .get(0);
    if found > known {
        return Err(PostgresError::NewerSchema { found, known });
    }
    for &(version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > found) {
        let failed = |e: tokio_postgres::Error| PostgresError::Migration {
            version,
            name,
            reason: reason(&e),
        };
        tx.batch_execute(sql).await.map_err(failed)?;
        tx.execute(
            "INSERT INTO toolsched_migrations (version, name) VALUES ($1, $2)",
            &[&version, &name],
        )
        .await
        .map_err(failed)?;
        tracing::info!(version, name, "store: schema migration applied");
    }
    tx.commit().await.map_err(setup)?;
    Ok(())
}

// === background tasks ===

/// Writes taken from the queue at once: sent together on one connection
/// (tokio-postgres pipelines concurrent statements), one round trip for all
/// of them. A bound on what one failed group retries.
const WRITE_GROUP: usize = 64;

/// Statements inserting beginning batches' rows at once, each over its own
/// pooled connection. A begin waits for its statement, so the next group
/// forms while these run: one statement per batch when they come one at a
/// time, fewer as they crowd (PostgreSQL's fixed cost per statement was
/// most of a read-only batch's).
const BEGINS_IN_FLIGHT: usize = 4;

/// The most rows one statement inserts (a bound on its parameters).
const BEGIN_GROUP: usize = 64;

/// Inserts the rows of the batches that begin under a fresh lease
/// ([`INSERT_FENCED`]), those that arrived together in one statement.
async fn insert_begins(
    pool: Pool,
    replica: Arc<str>,
    mut rx: mpsc::UnboundedReceiver<PendingBegin>,
) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(BEGINS_IN_FLIGHT));
    loop {
        // A permit first: while every statement is out, the begins that
        // arrive meanwhile wait in the channel and go together.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut group = Vec::with_capacity(BEGIN_GROUP);
        if rx.recv_many(&mut group, BEGIN_GROUP).await == 0 {
            return;
        }
        let (pool, replica) = (pool.clone(), replica.clone());
        tokio::spawn(async move {
            match insert_group(&pool, &replica, &group).await {
                Ok(ids) => {
                    for begin in group {
                        let inserted = ids.contains(begin.row.batch_id.as_str());
                        // The request may have gone away; nothing to tell.
                        let _ = begin.reply.send((Ok(inserted), begin.row.request));
                    }
                }
                // One statement failed for all: each goes again alone, so
                // that what failed it (one session's conflict, a row the
                // database refuses) fails only its own batch.
                Err(_) if group.len() > 1 => {
                    for begin in group {
                        let alone = insert_group(&pool, &replica, std::slice::from_ref(&begin))
                            .await
                            .map(|ids| ids.contains(begin.row.batch_id.as_str()));
                        let _ = begin.reply.send((alone, begin.row.request));
                    }
                }
                Err(e) => {
                    for begin in group {
                        let _ = begin.reply.send((Err(e.clone()), begin.row.request));
                    }
                }
            }
            drop(permit);
        });
    }
}

/// One [`INSERT_FENCED`] for `rows`: the batch ids inserted.
async fn insert_rows(
    client: &deadpool_postgres::Object,
    replica: &str,
    rows: &[&BeginRow],
) -> Result<std::collections::HashSet<String>, StoreError> {
    let statement = client
        .prepare_cached(INSERT_FENCED)
        .await
        .map_err(|e| unavailable(&e))?;
    let sessions: Vec<&str> = rows.iter().map(|b| b.session_id.as_str()).collect();
    let batches: Vec<&str> = rows.iter().map(|b| b.batch_id.as_str()).collect();
    let request_ids: Vec<Option<&str>> = rows.iter().map(|b| b.request_id.as_deref()).collect();
    let digests: Vec<&[u8]> = rows.iter().map(|b| b.digest.as_slice()).collect();
    let epochs: Vec<i64> = rows.iter().map(|b| b.epoch).collect();
    let requests: Vec<Option<&[u8]>> = rows.iter().map(|b| b.request.as_deref()).collect();
    let inserted = client
        .query(
            &statement,
            &[
                &sessions,
                &batches,
                &request_ids,
                &digests,
                &epochs,
                &requests,
                &replica,
            ],
        )
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(inserted.into_iter().map(|r| r.get(0)).collect())
}

/// [`insert_rows`] of beginning batches, over a pooled connection.
async fn insert_group(
    pool: &Pool,
    replica: &str,
    group: &[PendingBegin],
) -> Result<std::collections::HashSet<String>, StoreError> {
    let client = pool.get().await.map_err(|e| unavailable(&e))?;
    let rows: Vec<&BeginRow> = group.iter().map(|b| &b.row).collect();
    insert_rows(&client, replica, &rows).await
}

async fn writer(
    pool: Pool,
    replica: Arc<str>,
    mut rx: mpsc::UnboundedReceiver<Write>,
    retention: Retention,
) {
    let mut last_sweep = tokio::time::Instant::now();
    let mut group = Vec::with_capacity(WRITE_GROUP);
    while rx.recv_many(&mut group, WRITE_GROUP).await > 0 {
        // The writes of a group are independent of each other (a batch's
        // completion, an answer, an abandoned batch: each idempotent), so
        // they may run in any order, once the rows they need are written; a
        // failed group is retried whole.
        loop {
            match apply_group(&pool, &replica, &group).await {
                Ok(()) => break,
                Err(reason) => {
                    tracing::warn!(%reason, writes = group.len(), "store: a write failed; retrying");
                    tokio::time::sleep(RETRY_EVERY).await;
                }
            }
        }
        // A flush is answered once everything queued before it is written.
        for write in group.drain(..) {
            if let Write::Flush(done) = write {
                let _ = done.send(());
            }
        }
        if last_sweep.elapsed() >= SWEEP_EVERY.min(retention.completed_for) {
            last_sweep = tokio::time::Instant::now();
            if let Err(reason) = sweep(&pool, retention).await {
                tracing::warn!(%reason, "store: deleting expired batches failed");
            }
        }
    }
}

/// Applies a group of writes: first the rows written behind ([`BeginRow`])
/// that the other writes may need, then the rest together. A row whose
/// batch completes in the same group (under the same epoch, with no other
/// write of that batch in the group) is inserted by its completion instead:
/// one row written once.
async fn apply_group(pool: &Pool, replica: &str, group: &[Write]) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| reason(&e))?;
    let mut completions = Vec::new();
    let mut completing = HashMap::new();
    let mut touched = std::collections::HashSet::new();
    for write in group {
        match write {
            Write::Complete(c) => {
                completions.push(c);
                completing.insert((c.session_id.as_str(), c.batch_id.as_str()), c.fence.epoch);
            }
            Write::Answer {
                session_id,
                batch_id,
                ..
            }
            | Write::Abandon {
                session_id,
                batch_id,
            } => {
                touched.insert((session_id.as_str(), batch_id.as_str()));
            }
            Write::Begin(_) | Write::Flush(_) => {}
        }
    }
    // A row whose completion is in the group is inserted by it.
    let mut alone = Vec::new();
    for write in group {
        if let Write::Begin(row) = write {
            let key = (row.session_id.as_str(), row.batch_id.as_str());
            if completing.get(&key) != Some(&row.epoch) || touched.contains(&key) {
                alone.push(&**row);
            }
        }
    }
    if !alone.is_empty() {
        insert_rows(&client, replica, &alone)
            .await
            .map_err(|e| e.to_string())?;
    }
    let others = group
        .iter()
        .filter(|w| !matches!(w, Write::Complete(_) | Write::Begin(_)))
        .map(|w| apply(&client, w));
    futures::future::try_join(
        complete_all(&client, &completions),
        futures::future::try_join_all(others),
    )
    .await?;
    Ok(())
}

/// Completes a group's batches in one statement (one round trip, one
/// commit, however many batches): each batch's log goes into its own row
/// with its completion (migration 6). Per statement, PostgreSQL's fixed
/// cost (bind, executor start, commit) was most of a batch's when each
/// completion was its own. The logs and ended calls travel as flat arrays
/// with each batch's range in them. Fenced: a replica that lost a session
/// writes nothing more of it (the owner and the epoch each completion was
/// made under must still be the lease's, held FOR SHARE for the statement;
/// a group may hold completions of one session from two epochs). The lease
/// rows are locked in session order, as `renew` and the claims lock them,
/// so that two statements never wait on each other in a cycle. A batch
/// that began behind ([`BeginRow`]) gets its row inserted, completed, in the
/// same statement when it is not there yet (under the same fence).
async fn complete_all(
    client: &deadpool_postgres::Object,
    completions: &[&Completion],
) -> Result<(), String> {
    if completions.is_empty() {
        return Ok(());
    }
    let err = |e: tokio_postgres::Error| reason(&e);
    let mut completions = completions.to_vec();
    completions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    let n = completions.len();
    let (mut sessions, mut batches, mut epochs) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut log_from, mut log_to, mut ended_from, mut ended_to) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut sequences, mut times, mut bodies) = (Vec::new(), Vec::new(), Vec::new());
    let (mut calls, mut states) = (Vec::new(), Vec::new());
    let (mut fresh, mut digests, mut requests) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    // The owner is this process for every write it queues.
    let owner = completions[0].fence.owner.clone();
    for c in &completions {
        sessions.push(c.session_id.as_str());
        batches.push(c.batch_id.as_str());
        epochs.push(c.fence.epoch);
        // PostgreSQL arrays are 1-based and a slice [a:b] is inclusive; an
        // empty range (b = a - 1) slices to '{}'.
        log_from.push(sequences.len() as i32 + 1);
        for (sequence, at, body) in &c.entries {
            sequences.push(*sequence);
            times.push(*at);
            bodies.push(&body[..]);
        }
        log_to.push(sequences.len() as i32);
        ended_from.push(calls.len() as i32 + 1);
        for call in &c.ended {
            calls.push(call.call_id.as_str());
            states.push(call.state);
        }
        ended_to.push(calls.len() as i32);
        let row = c.row.as_deref();
        fresh.push(row.is_some());
        digests.push(row.map(|r| r.digest.as_slice()));
        requests.push(row.and_then(|r| r.request.as_deref()));
    }
    let statement = client
        .prepare_cached(
            "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], \
               $4::int[], $5::int[], $6::int[], $7::int[], $14::bool[], $15::bytea[], \
               $16::bytea[]) AS i(session_id, batch_id, epoch, log_from, log_to, \
               ended_from, ended_to, fresh, digest, request)), \
             held AS (SELECT l.session_id, l.epoch FROM toolsched_leases l JOIN input i \
               ON l.session_id = i.session_id AND l.epoch = i.epoch \
               WHERE l.owner = $8 ORDER BY l.session_id FOR SHARE OF l), \
             inserted AS (INSERT INTO toolsched_batches (session_id, batch_id, digest, \
               epoch, request, completed_at, ended_calls, ended_states, log_sequences, \
               log_at, log_bodies) \
               SELECT i.session_id, i.batch_id, i.digest, i.epoch, i.request, now(), \
               ($12::text[])[i.ended_from:i.ended_to], \
               ($13::text[])[i.ended_from:i.ended_to], \
               ($9::bigint[])[i.log_from:i.log_to], \
               ($10::timestamptz[])[i.log_from:i.log_to], \
               ($11::bytea[])[i.log_from:i.log_to] \
               FROM input i WHERE i.fresh \
               AND (i.session_id, i.epoch) IN (SELECT session_id, epoch FROM held) \
               ON CONFLICT (session_id, batch_id) DO UPDATE SET \
               completed_at = EXCLUDED.completed_at, ended_calls = EXCLUDED.ended_calls, \
               ended_states = EXCLUDED.ended_states, log_sequences = EXCLUDED.log_sequences, \
               log_at = EXCLUDED.log_at, log_bodies = EXCLUDED.log_bodies), \
             completed AS (UPDATE toolsched_batches b SET completed_at = now(), \
               ended_calls = ($12::text[])[i.ended_from:i.ended_to], \
               ended_states = ($13::text[])[i.ended_from:i.ended_to], \
               log_sequences = ($9::bigint[])[i.log_from:i.log_to], \
               log_at = ($10::timestamptz[])[i.log_from:i.log_to], \
               log_bodies = ($11::bytea[])[i.log_from:i.log_to] \
               FROM input i WHERE NOT i.fresh \
               AND b.session_id = i.session_id AND b.batch_id = i.batch_id \
               AND (i.session_id, i.epoch) IN (SELECT session_id, epoch FROM held)) \
             SELECT session_id, batch_id FROM input \
               WHERE (session_id, epoch) NOT IN (SELECT session_id, epoch FROM held)",
        )
        .await
        .map_err(err)?;
    let lost = client
        .query(
            &statement,
            &[
                &sessions,
                &batches,
                &epochs,
                &log_from,
                &log_to,
                &ended_from,
                &ended_to,
                &&*owner,
                &sequences,
                &times,
                &bodies,
                &calls,
                &states,
                &fresh,
                &digests,
                &requests,
            ],
        )
        .await
        .map_err(err)?;
    for row in lost {
        let (session, batch): (&str, &str) = (row.get(0), row.get(1));
        tracing::warn!(
            %session,
            %batch,
            "store: the session's lease passed to another replica; this batch's log is not written"
        );
    }
    // Readers on other replicas end at the completion (`read_tail`): wake
    // them once it is committed. The mirror's last write (its `Completed`
    // event) may have woken them before it was, and nothing else would
    // until their poll. A statement of its own, only for batches watched
    // elsewhere: most completions notify nobody. (A notification for a
    // completion fenced out just makes its readers read again.)
    let watched: Vec<&str> = completions
        .iter()
        .filter(|c| c.watched)
        .map(|c| c.batch_id.as_str())
        .collect();
    if !watched.is_empty() {
        client
            .execute(
                "SELECT pg_notify('toolsched_events', b) FROM unnest($1::text[]) AS b",
                &[&watched],
            )
            .await
            .map_err(err)?;
    }
    Ok(())
}

async fn apply(client: &deadpool_postgres::Object, write: &Write) -> Result<(), String> {
    let err = |e: tokio_postgres::Error| reason(&e);
    match write {
        // Written by `insert_rows` and `complete_all`, a group's at once.
        Write::Begin(_) | Write::Complete(_) => Ok(()),
        Write::Answer {
            session_id,
            batch_id,
            call_id,
            correlation_id,
            answer,
        } => client
            .execute(
                "INSERT INTO toolsched_answers \
                 (session_id, batch_id, call_id, correlation_id, outcome, new_content) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                &[
                    session_id,
                    batch_id,
                    call_id,
                    correlation_id,
                    &answer.outcome,
                    &answer.new_content,
                ],
            )
            .await
            .map(drop)
            .map_err(err),
        Write::Abandon {
            session_id,
            batch_id,
        } => client
            .execute(
                "DELETE FROM toolsched_batches WHERE session_id = $1 AND batch_id = $2",
                &[session_id, batch_id],
            )
            .await
            .map(drop)
            .map_err(err),
        Write::Flush(_) => Ok(()),
    }
}

async fn sweep(pool: &Pool, retention: Retention) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| reason(&e))?;
    client
        .execute(
            "DELETE FROM toolsched_batches \
             WHERE completed_at < now() - make_interval(secs => $1)",
            &[&retention.completed_for.as_secs_f64()],
        )
        .await
        .map_err(|e| reason(&e))?;
    client
        .execute(
            "DELETE FROM toolsched_inbox WHERE posted_at < now() - make_interval(secs => $1)",
            &[&INBOX_KEPT.as_secs_f64()],
        )
        .await
        .map(drop)
        .map_err(|e| reason(&e))
}

/// Renews the leases of the sessions with a batch running here, every
/// third of the lease, until the store is dropped.
async fn renew<E: LogEvent>(store: std::sync::Weak<PostgresStore<E>>) {
    let every = store
        .upgrade()
        .map_or(LEASE_TTL, |s| s.lease_ttl / 3)
        .max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(store) = store.upgrade() else {
            return;
        };
        let sessions: Vec<String> = {
            let live = store.live();
            let mut s: Vec<String> = live.keys().map(|(session, _)| session.clone()).collect();
            s.sort();
            s.dedup();
            s
        };
        if sessions.is_empty() {
            continue;
        }
        let asked = Instant::now();
        let renewed = async {
            let client = store.pool.get().await.map_err(|e| reason(&e))?;
            client
                .query(
                    "UPDATE toolsched_leases SET expires_at = now() + make_interval(secs => $3), \
                     renewed_at = now() WHERE owner = $1 AND session_id = ANY($2) \
                     RETURNING session_id, epoch",
                    &[&&*store.replica, &sessions, &store.lease_ttl.as_secs_f64()],
                )
                .await
                .map_err(|e| reason(&e))
        };
        match renewed.await {
            // Renewed: new batches of these sessions skip the claim a while
            // longer.
            Ok(rows) => {
                for row in rows {
                    store.held(row.get(0), row.get(1), asked);
                }
            }
            Err(reason) => tracing::warn!(%reason, "store: renewing leases failed"),
        }
    }
}

/// The LISTEN connection: wakes this replica for requests posted to it and
/// for answers to those it posted. Reconnects after a loss (and then picks
/// up what was posted meanwhile).
async fn listen<E: LogEvent>(
    config: tokio_postgres::Config,
    store: std::sync::Weak<PostgresStore<E>>,
) {
    use futures::StreamExt;
    loop {
        if store.strong_count() == 0 {
            return;
        }
        let (client, mut connection) = match config.connect(NoTls).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(reason = %reason(&e), "store: LISTEN connection failed; retrying");
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            }
        };
        let (tx, mut notifications) = mpsc::unbounded_channel();
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let tokio_postgres::AsyncMessage::Notification(n) = message
                    && tx.send(n).is_err()
                {
                    return;
                }
            }
        });
        if let Err(e) = client
            .batch_execute(
                "LISTEN toolsched_inbox; LISTEN toolsched_answer; LISTEN toolsched_events",
            )
            .await
        {
            tracing::debug!(reason = %reason(&e), "store: LISTEN failed; retrying");
            driver.abort();
            tokio::time::sleep(RETRY_EVERY).await;
            continue;
        }
        if let Some(s) = store.upgrade() {
            // Whatever was notified before this LISTEN (at start-up, or
            // while the connection was lost) is read now.
            s.wake_tails(None);
            if let Err(reason) = s.take_posted().await {
                tracing::warn!(%reason, "store: reading relayed requests failed");
            }
        }
        while let Some(n) = notifications.recv().await {
            let Some(s) = store.upgrade() else {
                return;
            };
            let done = match n.channel() {
                "toolsched_inbox" if n.payload() == &*s.replica => s.take_posted().await,
                "toolsched_events" => {
                    s.wake_tails(Some(n.payload()));
                    Ok(())
                }
                "toolsched_answer" => match n.payload().parse::<i64>() {
                    Ok(id) => s.answered(id).await,
                    Err(_) => Ok(()),
                },
                _ => Ok(()),
            };
            if let Err(reason) = done {
                tracing::warn!(%reason, "store: handling a notification failed");
            }
        }
        drop(client);
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

/// Writes `entries` of a running batch (a mirror, [`Store::mirror`]) and
/// wakes its readers elsewhere (NOTIFY toolsched_events, payload the batch
/// id). Entries already written are kept. `false`: the batch's row is not
/// there (deleted since the mirror wrote it: abandoned, or swept), nothing
/// written.
async fn write_entries<E: LogEvent>(
    pool: &Pool,
    codec: &dyn EventCodec<E>,
    session_id: &str,
    batch_id: &str,
    entries: &[Arc<Entry<E>>],
) -> Result<bool, String> {
    let sequences: Vec<i64> = entries.iter().map(|e| e.sequence as i64).collect();
    let times: Vec<SystemTime> = entries.iter().map(|e| e.at).collect();
    let bodies: Vec<&[u8]> = entries.iter().map(|e| &e.encoded_by(codec)[..]).collect();
    let client = pool.get().await.map_err(|e| reason(&e))?;
    let statement = client
        .prepare_cached(
            "WITH written AS (INSERT INTO toolsched_events (session_id, batch_id, sequence, at, body) \
               SELECT $1, $2, * FROM unnest($3::bigint[], $4::timestamptz[], $5::bytea[]) \
               ON CONFLICT DO NOTHING RETURNING 1) \
             SELECT pg_notify('toolsched_events', $2) FROM (SELECT count(*) FROM written) w",
        )
        .await
        .map_err(|e| reason(&e))?;
    match client
        .execute(
            &statement,
            &[&session_id, &batch_id, &sequences, &times, &bodies],
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION) => {
            Ok(false)
        }
        Err(e) => Err(reason(&e)),
    }
}

async fn probe(pool: Pool, reachable: watch::Sender<bool>) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let ok = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let client = pool.get().await.map_err(|e| reason(&e))?;
            client
                .simple_query("SELECT 1")
                .await
                .map(drop)
                .map_err(|e| reason(&e))
        })
        .await
        .unwrap_or_else(|_| Err("no answer within the connect timeout".into()));
        let now = ok.is_ok();
        if *reachable.borrow() != now {
            match &ok {
                Ok(()) => tracing::info!("store: reachable again"),
                Err(reason) => tracing::error!(%reason, "store: unreachable"),
            }
        }
        reachable.send_if_modified(|r| std::mem::replace(r, now) != now);
        if reachable.is_closed() {
            return;
        }
    }
}
