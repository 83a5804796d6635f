//! The embedded store: everything in this process's memory, kept within
//! [`Retention`]. Nothing survives a restart; nothing needs installing.
//!
//! Expired batches are swept lazily: a session's own records on each of its
//! calls, every session at most once per [`SWEEP_EVERY`] (on any call), so
//! an idle server holds what it held and a busy one never scans per batch.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{
    Answer, AnswerRecord, BatchLog, Begun, CallsDigest, EndedCall, EventCodec, LogEvent, NewBatch,
    RetainedUse, Retention, Store, StoreError, StoreFuture,
};

/// Longest time between two sweeps of every session's expired batches.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// The in-memory [`Store`].
pub struct MemoryStore<E: LogEvent> {
    retention: Retention,
    state: Mutex<State<E>>,
    /// Compacts each completed log once nobody reads it
    /// ([`BatchLog::compacting`]); `None`: logs are kept as appended.
    codec: Option<Arc<dyn EventCodec<E>>>,
}

struct State<E: LogEvent> {
    /// By session key `<tenant>/<id>`: ordered, so that one tenant's
    /// sessions are a range ([`MemoryStore::make_room`]).
    sessions: BTreeMap<String, SessionRecord<E>>,
    last_sweep: Instant,
}

struct SessionRecord<E: LogEvent> {
    /// In the order they began. Looked up by id from the newest end: the
    /// batch a call concerns is almost always the last (a front-first
    /// scan compared ids with up to `max_batches_per_session` retained
    /// ones, 3.4% of S1's CPU).
    ///
    /// Boxed: a `VecDeque` reserves 4 slots at its first push, and a session
    /// usually retains one or two batches (4 records inline, ~0.9 KB an
    /// idle session; 4 boxes, 32 bytes).
    batches: VecDeque<Box<BatchRecord<E>>>,
    /// Sum of the completed batches' `bytes`.
    completed_bytes: usize,
    /// No completed batch completed before this (`None`: none completed):
    /// until it is past retention, [`SessionRecord::expire`] has nothing
    /// to drop and looks at no record (a scan of every record at every
    /// batch was 2.4% of S1's CPU). A batch removed otherwise may leave it
    /// early, which only costs one scan that sets it again.
    completed_since: Option<Instant>,
}

struct BatchRecord<E: LogEvent> {
    id: String,
    request_id: Option<String>,
    digest: CallsDigest,
    log: Arc<BatchLog<E>>,
    /// When its last event was logged; `None` while it runs.
    completed: Option<Instant>,
    /// Estimated log bytes, taken when it completed (a running batch's log
    /// still grows; it is never dropped).
    bytes: usize,
    /// Its events were dropped to fit its tenant's
    /// `max_retained_event_bytes` ([`Store::make_room`]): its request id,
    /// answers and ended calls stay for the retention, so that a retry runs
    /// nothing again, but neither a replay nor WatchBatch can read it.
    dropped: bool,
    ended: Vec<EndedCall>,
    /// (call id, correlation id) → the winning answer.
    answers: HashMap<(String, String), Answer>,
    /// Side-effecting calls recorded before their tool started.
    executing: Vec<String>,
}

impl<E: LogEvent> MemoryStore<E> {
    pub fn new(retention: Retention) -> Self {
        Self {
            retention,
            state: Mutex::new(State {
                sessions: BTreeMap::new(),
                last_sweep: Instant::now(),
            }),
            codec: None,
        }
    }

    /// A store whose completed logs are compacted with `codec` once nobody
    /// reads them: a retained batch then holds its encoded events in one
    /// buffer instead of its events (an idle session's last batch, ~4 KB
    /// → ~0.5 KB for one small call; see BENCHMARKS.md, session 9).
    pub fn compacting(retention: Retention, codec: Arc<dyn EventCodec<E>>) -> Self {
        Self {
            codec: Some(codec),
            ..Self::new(retention)
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<E>> {
        // Every critical section leaves the maps consistent before anything
        // that could panic.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if now.duration_since(state.last_sweep) >= SWEEP_EVERY.min(self.retention.completed_for) {
            state.last_sweep = now;
            let retention = self.retention;
            state.sessions.retain(|_, s| {
                s.expire(&retention, now);
                !s.batches.is_empty()
            });
        }
        state
    }

    /// Batches retained for `session_id` (for tests and diagnostics).
    pub fn retained(&self, session_id: &str) -> Vec<String> {
        let now = Instant::now();
        let mut state = self.lock();
        let Some(session) = state.sessions.get_mut(session_id) else {
            return Vec::new();
        };
        session.expire(&self.retention, now);
        session.batches.iter().map(|b| b.id.clone()).collect()
    }

    /// Whether this process began (or took over) the batch and still keeps
    /// its record: running, or completed within the retention.
    pub fn knows(&self, session_id: &str, batch_id: &str) -> bool {
        let state = self.lock();
        state
            .sessions
            .get(session_id)
            .is_some_and(|s| s.batches.iter().any(|b| b.id == batch_id))
    }

    /// Calls of a batch recorded Executing (for tests and diagnostics).
    pub fn recorded_executing(&self, session_id: &str, batch_id: &str) -> Vec<String> {
        let state = self.lock();
        state
            .sessions
            .get(session_id)
            .and_then(|s| s.batches.iter().rev().find(|b| b.id == batch_id))
            .map(|b| b.executing.clone())
            .unwrap_or_default()
    }

    fn with_batch<T>(
        &self,
        session_id: &str,
        batch_id: &str,
        f: impl FnOnce(&mut BatchRecord<E>) -> T,
    ) -> Option<T> {
        let mut state = self.lock();
        state
            .sessions
            .get_mut(session_id)?
            .batches
            .iter_mut()
            .rev()
            .find(|b| b.id == batch_id)
            .map(|b| f(b))
    }

    fn begin(&self, new: NewBatch) -> Result<Begun<E>, StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        let session = state
            .sessions
            .entry(new.session_id.clone())
            .or_insert_with(|| SessionRecord {
                batches: VecDeque::new(),
                completed_bytes: 0,
                completed_since: None,
            });
        session.expire(&self.retention, now);
        if let Some(request_id) = &new.request_id
            && let Some(known) = session
                .batches
                .iter()
                .find(|b| b.request_id.as_ref() == Some(request_id))
        {
            return if known.digest == new.digest && known.dropped {
                Err(StoreError::EventsDropped {
                    session_id: new.session_id,
                    batch_id: known.id.clone(),
                })
            } else if known.digest == new.digest {
                Ok(Begun::Existing {
                    batch_id: known.id.clone(),
                    log: known.log.clone(),
                })
            } else {
                Err(StoreError::RequestIdConflict {
                    request_id: request_id.clone(),
                    batch_id: known.id.clone(),
                })
            };
        }
        let (log, writer) = match &self.codec {
            Some(codec) => BatchLog::compacting(codec.clone()),
            None => BatchLog::new(),
        };
        session.batches.push_back(Box::new(BatchRecord {
            id: new.batch_id,
            request_id: new.request_id,
            digest: new.digest,
            log,
            completed: None,
            bytes: 0,
            dropped: false,
            ended: Vec::new(),
            answers: HashMap::new(),
            executing: Vec::new(),
        }));
        let gone = session.bound(&self.retention);
        drop(state);
        drop(gone);
        Ok(Begun::New(writer))
    }
}

impl<E: LogEvent> SessionRecord<E> {
    /// Drops the completed batches past their retention time.
    fn expire(&mut self, retention: &Retention, now: Instant) {
        if self
            .completed_since
            .is_none_or(|at| now.duration_since(at) < retention.completed_for)
        {
            return;
        }
        let mut freed = 0;
        let mut since = None::<Instant>;
        self.batches.retain(|b| {
            let Some(at) = b.completed else {
                return true;
            };
            let keep = now.duration_since(at) < retention.completed_for;
            if keep {
                since = Some(since.map_or(at, |s| s.min(at)));
            } else {
                freed += b.bytes;
            }
            keep
        });
        self.completed_bytes -= freed;
        self.completed_since = since;
    }

    /// Drops the oldest completed batches while the session holds more than
    /// its bounds, never the newest completed one. Within the bounds (the
    /// usual case) this is two comparisons.
    ///
    /// Returns what it dropped, for the caller to free after releasing the
    /// store's lock: freeing a batch's log is most of this function's cost
    /// (3.9% of S1's CPU), and other sessions wait for the lock meanwhile.
    #[must_use = "free the dropped batches after releasing the lock"]
    // The records as the deque holds them (moved out, not unboxed).
    #[allow(clippy::vec_box)]
    fn bound(&mut self, retention: &Retention) -> Vec<Box<BatchRecord<E>>> {
        let over = |s: &Self| {
            s.batches.len() > retention.max_batches_per_session
                || s.completed_bytes > retention.max_bytes_per_session
        };
        let mut gone = Vec::new();
        if !over(self) {
            return gone;
        }
        let newest = self
            .batches
            .iter()
            .rev()
            .find(|b| b.completed.is_some())
            .map(|b| b.id.clone());
        while over(self) {
            let Some(oldest) = self
                .batches
                .iter()
                .position(|b| b.completed.is_some() && Some(&b.id) != newest.as_ref())
            else {
                return gone;
            };
            if let Some(batch) = self.batches.remove(oldest) {
                self.completed_bytes -= batch.bytes;
                gone.push(batch);
            }
        }
        gone
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl<E: LogEvent> Store<E> for MemoryStore<E> {
    fn begin_batch(&self, batch: NewBatch) -> StoreFuture<'_, Result<Begun<E>, StoreError>> {
        ready(self.begin(batch))
    }

    fn abandon_batch(&self, session_id: &str, batch_id: &str) {
        let mut state = self.lock();
        if let Some(session) = state.sessions.get_mut(session_id)
            && let Some(i) = session.batches.iter().rposition(|b| b.id == batch_id)
            && let Some(gone) = session.batches.remove(i)
        {
            session.completed_bytes -= gone.bytes;
        }
    }

    fn batch<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
    ) -> StoreFuture<'a, Result<Arc<BatchLog<E>>, StoreError>> {
        let now = Instant::now();
        let found = {
            let mut state = self.lock();
            state.sessions.get_mut(session_id).and_then(|s| {
                s.expire(&self.retention, now);
                s.batches
                    .iter()
                    .rev()
                    .find(|b| b.id == batch_id)
                    .map(|b| (!b.dropped).then(|| b.log.clone()))
            })
        };
        ready(match found {
            Some(Some(log)) => Ok(log),
            Some(None) => Err(StoreError::EventsDropped {
                session_id: session_id.to_string(),
                batch_id: batch_id.to_string(),
            }),
            None => Err(StoreError::UnknownBatch {
                session_id: session_id.to_string(),
                batch_id: batch_id.to_string(),
                retention: self.retention,
            }),
        })
    }

    fn complete_batch(&self, session_id: &str, batch_id: &str, ended: Vec<EndedCall>) {
        let mut state = self.lock();
        let Some(session) = state.sessions.get_mut(session_id) else {
            return;
        };
        if let Some(batch) = session.batches.iter_mut().rev().find(|b| b.id == batch_id)
            && batch.completed.is_none()
        {
            let now = Instant::now();
            batch.completed = Some(now);
            session.completed_since.get_or_insert(now);
            batch.bytes = batch.log.bytes();
            batch.ended = ended;
            session.completed_bytes += batch.bytes;
        }
        let gone = session.bound(&self.retention);
        drop(state);
        drop(gone);
    }

    fn record_executing<'a>(
        &'a self,
        session_id: &'a str,
        batch_id: &'a str,
        call_id: &'a str,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        self.with_batch(session_id, batch_id, |b| {
            b.executing.push(call_id.to_string())
        });
        ready(Ok(()))
    }

    fn record_answer(
        &self,
        session_id: &str,
        batch_id: &str,
        call_id: &str,
        correlation_id: &str,
        answer: Answer,
    ) -> AnswerRecord {
        self.with_batch(session_id, batch_id, |b| {
            let key = (call_id.to_string(), correlation_id.to_string());
            match b.answers.get(&key) {
                None => {
                    b.answers.insert(key, answer);
                    AnswerRecord::First
                }
                Some(winner) if *winner == answer => AnswerRecord::Same,
                Some(winner) => AnswerRecord::Different(winner.clone()),
            }
        })
        // A batch no longer retained has no prompt left to answer twice.
        .unwrap_or(AnswerRecord::First)
    }

    fn answer(&self, session_id: &str, call_id: &str, correlation_id: &str) -> Option<Answer> {
        let state = self.lock();
        let session = state.sessions.get(session_id)?;
        let key = (call_id.to_string(), correlation_id.to_string());
        session
            .batches
            .iter()
            .rev()
            .find_map(|b| b.answers.get(&key).cloned())
    }

    fn ended(&self, session_id: &str, call_id: &str) -> Option<&'static str> {
        let state = self.lock();
        let session = state.sessions.get(session_id)?;
        session
            .batches
            .iter()
            .rev()
            .find_map(|b| b.ended.iter().find(|c| c.call_id == call_id))
            .map(|c| c.state)
    }

    fn retention(&self) -> Retention {
        self.retention
    }

    fn make_room(&self, tenant: &str, limit: usize, admitting: &str) -> Result<(), RetainedUse> {
        let now = Instant::now();
        let retention = self.retention;
        // Keys are `<tenant>/<id>`: '0' follows '/', so this range is the
        // tenant's sessions and nobody else's.
        let range = format!("{tenant}/")..format!("{tenant}0");
        let mut gone = Vec::new();
        let result = {
            let mut state = self.lock();
            let mut held = RetainedUse {
                bytes: 0,
                running: 0,
            };
            let mut completed = 0;
            for session in state.sessions.range_mut(range.clone()).map(|(_, s)| s) {
                session.expire(&retention, now);
                completed += session.completed_bytes;
                for b in session
                    .batches
                    .iter()
                    .filter(|b| b.completed.is_none() && b.id != admitting)
                {
                    held.running += 1;
                    held.bytes += b.log.bytes();
                }
            }
            if held.bytes >= limit {
                // Nothing to drop would be enough: refused, nothing dropped.
                return Err(held);
            }
            held.bytes += completed;
            if held.bytes >= limit {
                // Over: the completed batches' events go, oldest first.
                let mut droppable: Vec<(Instant, String, String)> = Vec::new();
                for (key, session) in state.sessions.range(range) {
                    for b in &session.batches {
                        if let Some(at) = b.completed
                            && !b.dropped
                            && b.bytes > 0
                        {
                            droppable.push((at, key.clone(), b.id.clone()));
                        }
                    }
                }
                droppable.sort_by_key(|(at, _, _)| *at);
                for (_, key, id) in droppable {
                    if held.bytes < limit {
                        break;
                    }
                    if let Some(session) = state.sessions.get_mut(&key)
                        && let Some(b) = session.batches.iter_mut().find(|b| b.id == id)
                    {
                        session.completed_bytes -= b.bytes;
                        held.bytes -= b.bytes;
                        b.bytes = 0;
                        b.dropped = true;
                        gone.push(std::mem::replace(
                            &mut b.log,
                            BatchLog::recorded(Vec::new()),
                        ));
                    }
                }
            }
            Ok(())
        };
        // Freed after the lock, as in `bound`.
        drop(gone);
        result
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    struct Ev(usize);

    impl LogEvent for Ev {
        fn approx_bytes(&self) -> usize {
            self.0
        }
    }

    fn new(batch: &str, request_id: Option<&str>, digest: u8) -> NewBatch {
        NewBatch {
            session_id: "s".into(),
            batch_id: batch.into(),
            request_id: request_id.map(Into::into),
            digest: [digest; 32],
            request: None,
            reads_only: false,
        }
    }

    fn begin(store: &MemoryStore<Ev>, batch: NewBatch) -> Result<Begun<Ev>, StoreError> {
        store.begin_batch(batch).now_or_never().expect("ready")
    }

    fn writer(begun: Result<Begun<Ev>, StoreError>) -> crate::store::LogWriter<Ev> {
        match begun {
            Ok(Begun::New(w)) => w,
            _ => panic!("expected a new batch"),
        }
    }

    fn run_to_end(store: &MemoryStore<Ev>, batch: &str, bytes: usize) {
        let w = writer(begin(store, new(batch, None, 0)));
        w.finish(Ev(bytes));
        store.complete_batch("s", batch, Vec::new());
    }

    #[test]
    fn a_known_request_id_with_the_same_calls_is_the_original_batch() {
        let store = MemoryStore::new(Retention::default());
        let w = writer(begin(&store, new("b1", Some("r"), 7)));
        w.append(Ev(1));
        match begin(&store, new("b2", Some("r"), 7)) {
            Ok(Begun::Existing { batch_id, log }) => {
                assert_eq!(batch_id, "b1");
                assert_eq!(log.last_sequence(), 1);
            }
            _ => panic!("expected the original batch"),
        }
        assert_eq!(store.retained("s"), ["b1"], "nothing new was recorded");
    }

    #[test]
    fn a_known_request_id_with_other_calls_names_the_batch() {
        let store = MemoryStore::new(Retention::default());
        let _w = writer(begin(&store, new("b1", Some("r"), 7)));
        let err = begin(&store, new("b2", Some("r"), 8))
            .err()
            .expect("conflict");
        assert_eq!(
            err,
            StoreError::RequestIdConflict {
                request_id: "r".into(),
                batch_id: "b1".into()
            }
        );
    }

    #[test]
    fn an_abandoned_batch_frees_its_request_id() {
        let store = MemoryStore::new(Retention::default());
        let _w = writer(begin(&store, new("b1", Some("r"), 7)));
        store.abandon_batch("s", "b1");
        assert!(matches!(
            begin(&store, new("b2", Some("r"), 8)),
            Ok(Begun::New(_))
        ));
    }

    #[test]
    fn the_oldest_completed_batches_go_first_and_running_ones_stay() {
        let store = MemoryStore::new(Retention {
            max_batches_per_session: 3,
            ..Retention::default()
        });
        let _running = writer(begin(&store, new("running", None, 0)));
        run_to_end(&store, "c1", 1);
        run_to_end(&store, "c2", 1);
        run_to_end(&store, "c3", 1);
        assert_eq!(store.retained("s"), ["running", "c2", "c3"]);
    }

    #[test]
    fn the_byte_bound_drops_old_logs_but_keeps_the_newest_completed() {
        let store = MemoryStore::new(Retention {
            max_bytes_per_session: 100,
            ..Retention::default()
        });
        run_to_end(&store, "c1", 60);
        run_to_end(&store, "c2", 60);
        assert_eq!(store.retained("s"), ["c2"]);
        run_to_end(&store, "huge", 1000);
        assert_eq!(store.retained("s"), ["huge"], "kept whatever its size");
    }

    /// A batch of `session` (a store key) run to its end with `bytes` of
    /// events, its request id `request_id`.
    fn completed_in(store: &MemoryStore<Ev>, session: &str, batch: &str, bytes: usize) {
        let w = writer(begin(
            store,
            NewBatch {
                session_id: session.into(),
                request_id: Some(format!("r-{batch}")),
                ..new(batch, None, 1)
            },
        ));
        w.finish(Ev(bytes));
        store.complete_batch(session, batch, Vec::new());
    }

    fn watch(store: &MemoryStore<Ev>, session: &str, batch: &str) -> Result<(), StoreError> {
        store
            .batch(session, batch)
            .now_or_never()
            .expect("ready")
            .map(|_| ())
    }

    #[test]
    fn a_tenants_oldest_completed_events_go_first_and_only_its_own() {
        let store = MemoryStore::new(Retention::default());
        completed_in(&store, "a/s1", "a1", 40);
        completed_in(&store, "b/s1", "b1", 500);
        completed_in(&store, "a/s2", "a2", 40);
        completed_in(&store, "a/s1", "a3", 40);
        completed_in(&store, "ab/s1", "x", 500);
        // Under the limit: nothing goes.
        assert_eq!(store.make_room("a", 121, "new"), Ok(()));
        assert_eq!(watch(&store, "a/s1", "a1"), Ok(()));
        // 120 bytes against 100: the oldest (a1) goes, whatever its session.
        assert_eq!(store.make_room("a", 100, "new"), Ok(()));
        let dropped = StoreError::EventsDropped {
            session_id: "a/s1".into(),
            batch_id: "a1".into(),
        };
        assert_eq!(watch(&store, "a/s1", "a1"), Err(dropped.clone()));
        assert_eq!(watch(&store, "a/s2", "a2"), Ok(()));
        assert_eq!(watch(&store, "a/s1", "a3"), Ok(()));
        // Its request id is still known: a retry is told, and runs nothing.
        let retry = begin(
            &store,
            NewBatch {
                session_id: "a/s1".into(),
                request_id: Some("r-a1".into()),
                ..new("again", None, 1)
            },
        );
        assert_eq!(retry.err(), Some(dropped));
        // Other tenants (`b`, and `ab` whose name starts the same) keep all.
        assert_eq!(watch(&store, "b/s1", "b1"), Ok(()));
        assert_eq!(watch(&store, "ab/s1", "x"), Ok(()));
        // Down to nothing completed: the newest of each session goes too.
        assert_eq!(store.make_room("a", 1, "new"), Ok(()));
        assert!(watch(&store, "a/s1", "a3").is_err());
        assert_eq!(store.make_room("b", 501, "new"), Ok(()));
        assert_eq!(watch(&store, "b/s1", "b1"), Ok(()));
    }

    #[test]
    fn running_batches_that_hold_a_tenants_limit_refuse_more() {
        let store = MemoryStore::new(Retention::default());
        completed_in(&store, "a/s1", "done", 30);
        let running = writer(begin(
            &store,
            NewBatch {
                session_id: "a/s2".into(),
                ..new("running", None, 0)
            },
        ));
        running.append(Ev(70));
        assert_eq!(
            store.make_room("a", 50, "new"),
            Err(RetainedUse {
                bytes: 70,
                running: 1
            })
        );
        assert_eq!(
            watch(&store, "a/s1", "done"),
            Ok(()),
            "a refusal drops nothing"
        );
        assert_eq!(watch(&store, "a/s2", "running"), Ok(()), "never dropped");
        assert_eq!(store.make_room("a", 71, "new"), Ok(()));
    }

    #[test]
    fn a_completed_batch_expires_after_its_retention() {
        let store = MemoryStore::new(Retention {
            completed_for: Duration::ZERO,
            ..Retention::default()
        });
        let _running = writer(begin(&store, new("running", None, 0)));
        run_to_end(&store, "done", 1);
        let err = store
            .batch("s", "done")
            .now_or_never()
            .expect("ready")
            .err()
            .expect("expired");
        assert!(matches!(err, StoreError::UnknownBatch { .. }));
        assert!(
            err.to_string().contains("batch_retention_secs = 0 s"),
            "{err}"
        );
        assert!(
            store
                .batch("s", "running")
                .now_or_never()
                .expect("ready")
                .is_ok()
        );
    }

    #[test]
    fn the_first_answer_wins_and_a_repeat_is_told_apart_from_a_change() {
        let store = MemoryStore::new(Retention::default());
        let _w = writer(begin(&store, new("b1", None, 0)));
        let once = Answer {
            outcome: "proceed_once".into(),
            new_content: None,
        };
        let cancel = Answer {
            outcome: "cancel".into(),
            new_content: None,
        };
        assert_eq!(
            store.record_answer("s", "b1", "c1", "k1", once.clone()),
            AnswerRecord::First
        );
        assert_eq!(
            store.record_answer("s", "b1", "c1", "k1", once.clone()),
            AnswerRecord::Same
        );
        assert_eq!(
            store.record_answer("s", "b1", "c1", "k1", cancel),
            AnswerRecord::Different(once.clone())
        );
        assert_eq!(store.answer("s", "c1", "k1"), Some(once));
        assert_eq!(store.answer("s", "c1", "other"), None);
    }

    #[test]
    fn ended_calls_are_known_while_their_batch_is_retained() {
        let store = MemoryStore::new(Retention {
            max_batches_per_session: 1,
            ..Retention::default()
        });
        let w = writer(begin(&store, new("b1", None, 0)));
        w.finish(Ev(1));
        store.complete_batch(
            "s",
            "b1",
            vec![EndedCall {
                call_id: "c1".into(),
                state: "success",
            }],
        );
        assert_eq!(store.ended("s", "c1"), Some("success"));
        run_to_end(&store, "b2", 1);
        assert_eq!(store.ended("s", "c1"), None, "b1 was dropped");
    }

    #[test]
    fn executing_is_recorded_before_the_future_resolves() {
        let store = MemoryStore::<Ev>::new(Retention::default());
        let _w = writer(begin(&store, new("b1", None, 0)));
        store
            .record_executing("s", "b1", "c1")
            .now_or_never()
            .expect("ready")
            .expect("recorded");
        assert_eq!(store.recorded_executing("s", "b1"), ["c1"]);
    }
}
