//! A batch's event log: every event appended with its `sequence` (1, 2, 3 …
//! without gaps; a batch taken over from a replica that stopped continues
//! after a base, [`LogWriter::continue_after`]) and its time, read by any number of readers, each at its
//! own pace from its own cursor.
//!
//! A reader holds only a cursor and a waker: a slow reader (a client that
//! stopped reading, an HTTP/2 window that is full) costs nothing but the log
//! itself, which every reader shares. The log is bounded by what is appended
//! to it: every event but one is bounded by the batch itself (a few state
//! changes per call, live output capped per call by `max_streamed_bytes`),
//! and the one that is not, a progress report, is merged once the slowest
//! reader lags by [`LAG_EVENTS`] (or nobody reads): a new report then
//! replaces the same key's (call's) previous report while no reader has
//! read it and nothing else of the key came after it. So a tool flooding
//! progress notifications costs at most one entry per call beyond the first
//! [`LAG_EVENTS`] while no reader keeps up; a reader that keeps up sees
//! every report (and the log keeps what it read for the others: a report
//! one reader has read is never replaced under another).
//!
//! Owns: the entries, their sequence numbers, the readers' count (for the
//! disconnect grace) and their wake-ups. Not here: what an event means (the
//! scheduler), how long a completed log is kept ([`super::MemoryStore`]).
//!
//! The entries sit behind a `std::sync::Mutex` shared by the one writer (the
//! session owning the batch) and the readers (stream handlers): it is never
//! held across an await, and each critical section is a push, a copy of
//! `Arc`s, or the copy of bytes already encoded (nothing is encoded under
//! it while readers may wait, see [`BatchLog::keep_read_encoded`]).
//!
//! A log made with a codec ([`BatchLog::compacting`]) keeps the entries
//! every open reader has read in their encoded form, and is compacted once
//! it is finished and nobody reads it: its entries, one allocation each with
//! the event's strings and JSON behind it (~4 KB for one small call), become
//! their encoded events in one buffer (~0.5 KB), kept for WatchBatch and
//! request-id replays during the batch's retention. A reader attaching
//! later decodes them ([`EventCodec::decode`]: the event as it was sent).
//! An entry's encoded form is made once ([`Entry::encoded`]), most often by
//! the stream that sent it, and the log keeps those bytes.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::SystemTime;

use bytes::Bytes;

use super::EventCodec;

/// Unread entries past which the slowest reader counts as lagging and
/// reports merge: far more than one step of a batch appends (so a reader
/// that keeps up sees every report), few enough to be a small bound.
pub const LAG_EVENTS: u64 = 256;

/// What a log can hold: anything that can say about how many bytes it keeps
/// in memory (for the retention bounds) and whether it may be merged.
pub trait LogEvent: Send + Sync + 'static {
    /// Estimated bytes held by the event (strings and payloads; a small
    /// constant for the rest).
    fn approx_bytes(&self) -> usize;

    /// How the event takes part in merging under backpressure.
    fn merge_key(&self) -> MergeKey<'_> {
        MergeKey::None
    }
}

/// How an event takes part in merging (see the module's backpressure rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeKey<'a> {
    /// Never merged, and does not affect merging.
    None,
    /// An event of this key that is not a report: a later report of the key
    /// never merges across it.
    Other(&'a str),
    /// A report that supersedes the key's previous report.
    Report(&'a str),
}

/// One logged event.
#[derive(Debug)]
pub struct Entry<E> {
    /// 1, 2, 3 … within the batch, the same for every reader (continued
    /// after a base once the batch is taken over by another replica).
    pub sequence: u64,
    /// When the event was appended.
    pub at: SystemTime,
    pub event: E,
    /// The event in its encoded form (what a stream sends), made once by
    /// whoever needs it first (a stream sending it, the log's compaction, a
    /// durable store writing it) and shared by the rest.
    encoded: OnceLock<Bytes>,
}

impl<E> Entry<E> {
    pub fn new(sequence: u64, at: SystemTime, event: E) -> Self {
        Self {
            sequence,
            at,
            event,
            encoded: OnceLock::new(),
        }
    }

    /// The encoded form, if it was made.
    fn encoded_if_made(&self) -> Option<&Bytes> {
        self.encoded.get()
    }
}

impl<E: 'static> Entry<E> {
    /// An entry read back from its encoded form (a store's row, a compacted
    /// log): its event is what `codec` decodes, and `encoded` stays its
    /// encoded form (see [`EventCodec`]).
    pub fn decoded(
        sequence: u64,
        at: SystemTime,
        encoded: Bytes,
        codec: &dyn EventCodec<E>,
    ) -> Self {
        Self {
            sequence,
            at,
            event: codec.decode(encoded.clone()),
            encoded: OnceLock::from(encoded),
        }
    }

    /// The encoded form by `codec`, unless it was made before.
    pub fn encoded_by(&self, codec: &dyn EventCodec<E>) -> &Bytes {
        self.encoded.get_or_init(|| Bytes::from(codec.encode(self)))
    }
}

/// Entries are equal by what they say: whether one's encoded form was made
/// yet does not count.
impl<E: PartialEq> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.sequence, self.at, &self.event) == (other.sequence, other.at, &other.event)
    }
}

/// A batch's log. Shared (`Arc`) by its writer, its readers and the store.
pub struct BatchLog<E> {
    state: Mutex<LogState<E>>,
    /// Hands out reader ids (to find a reader's waker and cursor).
    next_reader: AtomicU64,
    /// Compacts the log once it is finished and nobody reads it (`None`:
    /// kept as appended).
    codec: Option<Arc<dyn EventCodec<E>>>,
}

struct LogState<E> {
    /// `entries[i].sequence == base + i + 1`.
    entries: Entries<E>,
    /// The sequence before the first entry: 0, or where the log of a batch
    /// taken over continues. Cursors and `last_report` count positions in
    /// `entries` (1-based), not sequences.
    base: u64,
    bytes: usize,
    /// The last event has been appended, or the writer went away: readers
    /// end after the last entry.
    closed: bool,
    /// Whether the writer finished the batch (its last event is logged) as
    /// opposed to going away without it.
    finished: bool,
    /// Open readers: (id, cursor = sequences read so far, waker).
    readers: Vec<ReaderSlot>,
    /// Per key, the sequence of its latest entry when that entry is a
    /// report (which a newer report of the key may replace).
    last_report: HashMap<String, u64>,
    /// Bumped whenever a reader attaches or the last one detaches, so that a
    /// grace timer armed at one detach does not fire for a later one.
    generation: u64,
}

struct ReaderSlot {
    id: u64,
    cursor: u64,
    waker: Option<Waker>,
}

/// A log's entries: the first ones in their encoded form, the rest as
/// appended.
struct Entries<E> {
    /// In a log with a codec: the entries every reader has read
    /// ([`BatchLog::keep_read_encoded`]), or all of a finished log nobody
    /// reads ([`BatchLog::compact_if_unread`]).
    encoded: Option<Box<Encoded<E>>>,
    /// The entries after them, one shared entry each, handed to readers as
    /// is.
    live: Vec<Arc<Entry<E>>>,
}

/// Entries encoded by the log's codec, in one buffer.
struct Encoded<E> {
    codec: Arc<dyn EventCodec<E>>,
    /// The encoded events, one after the other.
    bytes: Vec<u8>,
    /// Where each entry's bytes end in `bytes`.
    ends: Vec<u32>,
    /// When each entry was appended.
    at: Vec<SystemTime>,
}

impl<E: LogEvent> Encoded<E> {
    fn new(codec: Arc<dyn EventCodec<E>>) -> Self {
        Self {
            codec,
            bytes: Vec::new(),
            ends: Vec::new(),
            at: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Appends `entries`, the buffer grown to fit exactly (a log is
    /// encoded a few entries at a time).
    fn extend(&mut self, entries: &[Arc<Entry<E>>]) {
        let encoded: Vec<&Bytes> = entries
            .iter()
            // Most often encoded already, by the stream that sent it.
            .map(|entry| entry.encoded_by(&*self.codec))
            .collect();
        self.bytes
            .reserve_exact(encoded.iter().map(|b| b.len()).sum());
        self.ends.reserve_exact(entries.len());
        self.at.reserve_exact(entries.len());
        for (entry, bytes) in entries.iter().zip(encoded) {
            self.bytes.extend_from_slice(bytes);
            // A log's bytes are bounded far below 4 GiB (each event by
            // `max_event_bytes`, a batch by `max_calls_per_batch`).
            self.ends
                .push(u32::try_from(self.bytes.len()).unwrap_or(u32::MAX));
            self.at.push(entry.at);
        }
    }

    /// Entry `i` (0-based) decoded, its sequence `base + i + 1`.
    fn entry(&self, i: usize, base: u64) -> Arc<Entry<E>> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        let end = (self.ends[i] as usize).min(self.bytes.len());
        Arc::new(Entry::decoded(
            base + i as u64 + 1,
            self.at[i],
            Bytes::copy_from_slice(&self.bytes[start.min(end)..end]),
            &*self.codec,
        ))
    }
}

impl<E: LogEvent> Entries<E> {
    fn new(live: Vec<Arc<Entry<E>>>) -> Self {
        Self {
            encoded: None,
            live,
        }
    }

    fn encoded_len(&self) -> usize {
        self.encoded.as_ref().map_or(0, |e| e.len())
    }

    fn len(&self) -> usize {
        self.encoded_len() + self.live.len()
    }

    /// Appends the entries from position `from` (0-based) to `out`.
    fn read_from(
        &self,
        from: usize,
        base: u64,
        out: &mut std::collections::VecDeque<Arc<Entry<E>>>,
    ) {
        let encoded = self.encoded_len();
        if let Some(e) = &self.encoded {
            out.extend((from..encoded).map(|i| e.entry(i, base)));
        }
        let from = from.saturating_sub(encoded).min(self.live.len());
        out.extend(self.live[from..].iter().cloned());
    }

    /// The live entry at position `i` (0-based), unless it is encoded.
    fn live_at(&mut self, i: usize) -> Option<&mut Arc<Entry<E>>> {
        let encoded = self.encoded_len();
        i.checked_sub(encoded).and_then(|i| self.live.get_mut(i))
    }

    /// Encodes the entries before position `upto` (0-based) with `codec`;
    /// with `made_only`, only as far as their encoded form was made (by the
    /// stream that sent them), so that nothing is encoded here. The log's
    /// estimate of its bytes stays as appended (the retention bounds count
    /// events, whatever their form).
    fn encode_upto(&mut self, upto: usize, codec: &Arc<dyn EventCodec<E>>, made_only: bool) {
        let mut n = upto.saturating_sub(self.encoded_len()).min(self.live.len());
        if made_only {
            n = self.live[..n]
                .iter()
                .take_while(|e| e.encoded_if_made().is_some())
                .count();
        }
        if n == 0 {
            return;
        }
        self.encoded
            .get_or_insert_with(|| Box::new(Encoded::new(codec.clone())))
            .extend(&self.live[..n]);
        self.live.drain(..n);
    }
}

/// Why a reader could not start where it asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("after_sequence {after} is beyond the last event of the batch ({last})")]
pub struct BeyondEnd {
    pub after: u64,
    pub last: u64,
}

impl<E: LogEvent> BatchLog<E> {
    /// An empty log and the handle that appends to it. Dropping the handle
    /// without [`LogWriter::finish`] closes the log (readers end).
    pub fn new() -> (Arc<Self>, LogWriter<E>) {
        Self::with_codec(None)
    }

    /// [`BatchLog::new`], compacted with `codec` once finished and unread:
    /// its entries become their encoded events in one buffer (see the
    /// module's doc).
    pub fn compacting(codec: Arc<dyn EventCodec<E>>) -> (Arc<Self>, LogWriter<E>) {
        Self::with_codec(Some(codec))
    }

    fn with_codec(codec: Option<Arc<dyn EventCodec<E>>>) -> (Arc<Self>, LogWriter<E>) {
        let log = Arc::new(Self {
            state: Mutex::new(LogState {
                entries: Entries::new(Vec::new()),
                base: 0,
                bytes: 0,
                closed: false,
                finished: false,
                readers: Vec::new(),
                last_report: HashMap::new(),
                generation: 0,
            }),
            next_reader: AtomicU64::new(1),
            codec,
        });
        (log.clone(), LogWriter { log })
    }

    /// A finished log holding `entries` as recorded (a durable store
    /// reading back a batch it did not write in this process).
    pub fn recorded(entries: Vec<Entry<E>>) -> Arc<Self> {
        let bytes = entries.iter().map(|e| e.event.approx_bytes()).sum();
        let base = entries.first().map_or(0, |e| e.sequence.saturating_sub(1));
        Arc::new(Self {
            state: Mutex::new(LogState {
                entries: Entries::new(entries.into_iter().map(Arc::new).collect()),
                base,
                bytes,
                closed: true,
                finished: true,
                readers: Vec::new(),
                last_report: HashMap::new(),
                generation: 0,
            }),
            next_reader: AtomicU64::new(1),
            codec: None,
        })
    }

    fn lock(&self) -> MutexGuard<'_, LogState<E>> {
        // A panic while appending leaves a consistent Vec (a push either
        // happened or not): the data is still good.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A reader of the entries with `sequence > after`, then of what is
    /// appended later. `after` may be at most the last sequence; one before
    /// a continued log's base (a position in the log of the replica that
    /// stopped) reads it from its first entry.
    pub fn reader(self: &Arc<Self>, after: u64) -> Result<LogReader<E>, BeyondEnd> {
        let id = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        let last = state.base + state.entries.len() as u64;
        if after > last {
            return Err(BeyondEnd { after, last });
        }
        let cursor = after.saturating_sub(state.base);
        state.readers.push(ReaderSlot {
            id,
            cursor,
            waker: None,
        });
        state.generation += 1;
        drop(state);
        Ok(LogReader {
            log: self.clone(),
            id,
            cursor,
            buffer: std::collections::VecDeque::new(),
            attached: true,
        })
    }

    /// The last sequence appended (the base, 0 unless continued, when
    /// empty).
    pub fn last_sequence(&self) -> u64 {
        let state = self.lock();
        state.base + state.entries.len() as u64
    }

    /// Estimated bytes held by the entries.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Whether the batch's last event is logged.
    pub fn is_finished(&self) -> bool {
        self.lock().finished
    }

    /// Open readers.
    pub fn readers(&self) -> usize {
        self.lock().readers.len()
    }

    /// True when nobody has read the log since the detach that returned
    /// `generation` ([`LogReader::detach`]) and the batch is not finished:
    /// the disconnect grace that started then has run out unanswered.
    pub fn still_detached(&self, generation: u64) -> bool {
        let state = self.lock();
        state.readers.is_empty() && state.generation == generation && !state.closed
    }

    /// A copy of every entry (for tests and diagnostics).
    pub fn entries(&self) -> Vec<Arc<Entry<E>>> {
        let state = self.lock();
        let mut out = std::collections::VecDeque::new();
        state.entries.read_from(0, state.base, &mut out);
        out.into()
    }

    /// Whether the log holds its entries compacted (for tests and
    /// diagnostics): finished, and every entry in its encoded form.
    pub fn is_compacted(&self) -> bool {
        let state = self.lock();
        state.finished && state.entries.live.is_empty() && state.entries.encoded.is_some()
    }

    /// In a log with a codec, the entries every open reader has read keep
    /// only their encoded form, as far as the readers made it (a stream
    /// makes it when it sends the entry; nothing is encoded here, under the
    /// lock the writer takes): the event's strings and JSON behind it go,
    /// so a batch held at a prompt holds its sent events as the bytes they
    /// were sent as (a reader attaching later decodes them, as from a
    /// compacted log). Entries not read by all stay as appended: a later
    /// report may still replace an unread one.
    fn keep_read_encoded(&self, state: &mut LogState<E>) {
        let Some(codec) = &self.codec else {
            return;
        };
        let Some(read) = state.readers.iter().map(|r| r.cursor).min() else {
            return;
        };
        state.entries.encode_upto(read as usize, codec, true);
    }

    /// Compacts the log when it is finished and nobody reads it (and it has
    /// a codec): called when its last reader goes away and when it
    /// finishes.
    fn compact_if_unread(&self, state: &mut LogState<E>) {
        let Some(codec) = &self.codec else {
            return;
        };
        if !state.finished || !state.readers.is_empty() || state.entries.live.is_empty() {
            return;
        }
        let all = state.entries.len();
        state.entries.encode_upto(all, codec, false);
        state.entries.live = Vec::new();
        if let Some(encoded) = &mut state.entries.encoded {
            encoded.bytes.shrink_to_fit();
            encoded.ends.shrink_to_fit();
            encoded.at.shrink_to_fit();
        }
        // What only a growing, read log needs: freed with its capacity.
        state.readers = Vec::new();
        state.last_report = HashMap::new();
    }
}

/// The one handle that appends to a log: the batch's owner holds it.
pub struct LogWriter<E: LogEvent> {
    log: Arc<BatchLog<E>>,
}

impl<E: LogEvent> LogWriter<E> {
    /// The log this writes.
    pub fn log(&self) -> &Arc<BatchLog<E>> {
        &self.log
    }

    /// Appends `event` now, returning its sequence: a new one, or, for a
    /// report while the readers lag, the sequence of the same key's unread
    /// report it replaced (no reader ever sees a sequence change under it).
    /// Readers are woken by [`LogWriter::publish`], so that the events of
    /// one step reach a reader together (one wake-up, one HTTP/2 write).
    pub fn append(&self, event: E) -> u64 {
        let mut state = self.log.lock();
        match event.merge_key() {
            MergeKey::None => push(&mut state, event),
            MergeKey::Other(key) => {
                if !state.last_report.is_empty() {
                    state.last_report.remove(key);
                }
                push(&mut state, event)
            }
            MergeKey::Report(key) => {
                let last = state.entries.len() as u64;
                let slowest = state.readers.iter().map(|r| r.cursor).min();
                let lagging = slowest.is_none_or(|c| last - c >= LAG_EVENTS);
                // Replaced only while no reader has read it: a reader that
                // keeps up beside one that lags sees every report, and
                // every reader gets the same event for a sequence.
                let fastest = state.readers.iter().map(|r| r.cursor).max();
                if lagging
                    && let Some(&position) = state.last_report.get(key)
                    && fastest.is_none_or(|c| c < position)
                {
                    let sequence = state.base + position;
                    let after = event.approx_bytes();
                    // An encoded entry (read by every reader) is not
                    // replaced: the report is appended instead.
                    if let Some(entry) = state.entries.live_at((position - 1) as usize) {
                        let before = entry.event.approx_bytes();
                        *entry = Arc::new(Entry::new(sequence, SystemTime::now(), event));
                        state.bytes = state.bytes - before + after;
                        return sequence;
                    }
                }
                let key = key.to_string();
                let sequence = push(&mut state, event);
                let position = state.entries.len() as u64;
                state.last_report.insert(key, position);
                sequence
            }
        }
    }

    /// Wakes the readers waiting for new entries.
    pub fn publish(&self) {
        let wakers = {
            let mut state = self.log.lock();
            take_wakers(&mut state)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Appends an entry as another replica logged it (read back from a
    /// durable store), its sequence and time kept. Only the next sequence
    /// is taken; returns whether it was.
    /// The first entry of an empty log sets its base (a continued log, read
    /// back).
    pub fn append_recorded(&self, entry: Entry<E>) -> bool {
        let mut state = self.log.lock();
        if state.entries.len() == 0 {
            state.base = entry.sequence.saturating_sub(1);
        }
        if entry.sequence != state.base + state.entries.len() as u64 + 1 {
            return false;
        }
        state.bytes += entry.event.approx_bytes();
        state.entries.live.push(Arc::new(entry));
        true
    }

    /// Numbers this (still empty) log's entries from `base + 1`: the log of
    /// a batch taken over from a replica that stopped continues after every
    /// sequence that replica could have handed out, so that a client
    /// re-attaching with the last sequence it saw there reads exactly what
    /// the new owner logs. No effect once an entry is logged.
    pub fn continue_after(&self, base: u64) {
        let mut state = self.log.lock();
        if state.entries.len() == 0 {
            state.base = base;
        }
    }

    /// Closes a log whose last entry [`LogWriter::append_recorded`] took:
    /// the batch completed; readers end after it.
    pub fn finish_recorded(self) {
        let wakers = {
            let mut state = self.log.lock();
            state.closed = true;
            state.finished = true;
            take_wakers(&mut state)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Appends the batch's last event and closes the log; readers end after
    /// it.
    pub fn finish(self, event: E) -> u64 {
        let (sequence, wakers) = {
            let mut state = self.log.lock();
            let sequence = push(&mut state, event);
            state.closed = true;
            state.finished = true;
            let wakers = take_wakers(&mut state);
            // Read by nobody (the client went away; a batch that was never
            // watched): compacted at once.
            self.log.compact_if_unread(&mut state);
            (sequence, wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
        sequence
    }
}

impl<E: LogEvent> Drop for LogWriter<E> {
    /// The writer went away without the last event (the owner stopped):
    /// readers end after what was logged instead of waiting forever.
    fn drop(&mut self) {
        let wakers = {
            let mut state = self.log.lock();
            state.closed = true;
            take_wakers(&mut state)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

fn push<E: LogEvent>(state: &mut LogState<E>, event: E) -> u64 {
    let sequence = state.base + state.entries.len() as u64 + 1;
    state.bytes += event.approx_bytes();
    state
        .entries
        .live
        .push(Arc::new(Entry::new(sequence, SystemTime::now(), event)));
    sequence
}

fn take_wakers<E>(state: &mut LogState<E>) -> Vec<Waker> {
    state
        .readers
        .iter_mut()
        .filter_map(|r| r.waker.take())
        .collect()
}

/// Reads a log from a cursor. A `Stream` of entries that ends after the
/// log's last event.
pub struct LogReader<E: LogEvent> {
    log: Arc<BatchLog<E>>,
    id: u64,
    /// Sequences taken from the log so far (read or in `buffer`).
    cursor: u64,
    /// Entries taken from the log in one lock, not yet handed out.
    buffer: std::collections::VecDeque<Arc<Entry<E>>>,
    attached: bool,
}

impl<E: LogEvent> LogReader<E> {
    /// The log being read.
    pub fn log(&self) -> &Arc<BatchLog<E>> {
        &self.log
    }

    /// The next entry, `None` after the last one.
    pub async fn next(&mut self) -> Option<Arc<Entry<E>>> {
        std::future::poll_fn(|cx| self.poll_entry(cx)).await
    }

    /// Polls for the next entry, registering the waker when there is none.
    pub fn poll_entry(&mut self, cx: &mut Context<'_>) -> Poll<Option<Arc<Entry<E>>>> {
        if let Some(entry) = self.buffer.pop_front() {
            return Poll::Ready(Some(entry));
        }
        let mut state = self.log.lock();
        let last = state.entries.len() as u64;
        if self.cursor < last {
            state
                .entries
                .read_from(self.cursor as usize, state.base, &mut self.buffer);
            self.cursor = last;
            if let Some(slot) = state.readers.iter_mut().find(|r| r.id == self.id) {
                slot.cursor = last;
            }
            drop(state);
            return Poll::Ready(self.buffer.pop_front());
        }
        if state.closed {
            return Poll::Ready(None);
        }
        // Caught up: what this reader took is sent (or dropped) by now.
        self.log.keep_read_encoded(&mut state);
        if let Some(slot) = state.readers.iter_mut().find(|r| r.id == self.id) {
            match &slot.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => slot.waker = Some(cx.waker().clone()),
            }
        }
        Poll::Pending
    }

    /// Stops reading. Returns the log's generation when this was the last
    /// reader of a log that is not closed: the batch is now detached (see
    /// [`BatchLog::still_detached`]).
    pub fn detach(&mut self) -> Option<u64> {
        if !std::mem::replace(&mut self.attached, false) {
            return None;
        }
        let mut state = self.log.lock();
        state.readers.retain(|r| r.id != self.id);
        if state.readers.is_empty() && !state.closed {
            state.generation += 1;
            Some(state.generation)
        } else {
            // The last reader of a finished log: nobody reads it live any
            // more (a later reader decodes it).
            self.log.compact_if_unread(&mut state);
            None
        }
    }
}

impl<E: LogEvent> Drop for LogReader<E> {
    fn drop(&mut self) {
        self.detach();
    }
}

impl<E: LogEvent> futures::Stream for LogReader<E> {
    type Item = Arc<Entry<E>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_entry(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[derive(Debug, Clone, PartialEq)]
    enum Ev {
        Step(&'static str),
        Progress(u32),
        Output(String),
        End,
    }

    impl LogEvent for Ev {
        fn approx_bytes(&self) -> usize {
            match self {
                Ev::Output(s) => s.len() + 8,
                _ => 8,
            }
        }

        /// Progress of key "p" is a report; output is the same key's other
        /// event.
        fn merge_key(&self) -> MergeKey<'_> {
            match self {
                Ev::Progress(_) => MergeKey::Report("p"),
                Ev::Output(_) => MergeKey::Other("p"),
                _ => MergeKey::None,
            }
        }
    }

    /// Appends events of another key until the log is `LAG_EVENTS` ahead of
    /// every reader.
    fn lag(writer: &LogWriter<Ev>) {
        for _ in 0..LAG_EVENTS {
            writer.append(Ev::Step("other"));
        }
    }

    /// What a reader has now, without waiting.
    fn drain(reader: &mut LogReader<Ev>) -> Vec<(u64, Ev)> {
        let mut out = Vec::new();
        while let Some(Some(e)) = reader.next().now_or_never() {
            out.push((e.sequence, e.event.clone()));
        }
        out
    }

    #[test]
    fn sequences_start_at_one_without_gaps() {
        let (log, writer) = BatchLog::new();
        assert_eq!(writer.append(Ev::Step("accepted")), 1);
        assert_eq!(writer.append(Ev::Step("started")), 2);
        assert_eq!(writer.finish(Ev::End), 3);
        let seqs: Vec<u64> = log.entries().iter().map(|e| e.sequence).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert!(log.is_finished());
    }

    #[test]
    fn a_continued_log_numbers_after_its_base_and_reads_earlier_positions_from_its_start() {
        let (log, writer) = BatchLog::new();
        writer.continue_after(1000);
        assert_eq!(writer.append(Ev::Step("again")), 1001);
        assert_eq!(writer.append(Ev::Step("next")), 1002);
        assert_eq!(log.last_sequence(), 1002);
        // A position in the stopped owner's log: everything logged here.
        let mut early = log.reader(7).unwrap();
        assert_eq!(
            drain(&mut early),
            [(1001, Ev::Step("again")), (1002, Ev::Step("next"))]
        );
        let mut late = log.reader(1001).unwrap();
        assert_eq!(drain(&mut late), [(1002, Ev::Step("next"))]);
        assert_eq!(
            log.reader(1003).err(),
            Some(BeyondEnd {
                after: 1003,
                last: 1002
            })
        );
        // Too late once something is logged.
        writer.continue_after(5);
        assert_eq!(writer.finish(Ev::End), 1003);
        // Read back from a store, the base comes with the first entry.
        let (copy, tail) = BatchLog::new();
        for e in log.entries() {
            assert!(tail.append_recorded(Entry::new(e.sequence, e.at, e.event.clone())));
        }
        assert!(!tail.append_recorded(Entry::new(1005, SystemTime::now(), Ev::End,)));
        tail.finish_recorded();
        assert_eq!(copy.last_sequence(), 1003);
        assert_eq!(drain(&mut copy.reader(1002).unwrap()), [(1003, Ev::End)]);
    }

    #[test]
    fn a_reader_starts_after_the_sequence_it_names_and_ends_after_the_last() {
        let (log, writer) = BatchLog::new();
        writer.append(Ev::Step("a"));
        writer.append(Ev::Step("b"));
        writer.append(Ev::Step("c"));
        let mut reader = log.reader(1).unwrap();
        assert_eq!(drain(&mut reader), [(2, Ev::Step("b")), (3, Ev::Step("c"))]);
        writer.finish(Ev::End);
        assert_eq!(drain(&mut reader), [(4, Ev::End)]);
        assert_eq!(reader.next().now_or_never(), Some(None));
    }

    #[test]
    fn after_the_last_sequence_is_the_live_tail_and_beyond_it_is_refused() {
        let (log, writer) = BatchLog::new();
        writer.append(Ev::Step("a"));
        let mut tail = log.reader(1).unwrap();
        assert_eq!(drain(&mut tail), []);
        assert!(matches!(
            log.reader(2),
            Err(BeyondEnd { after: 2, last: 1 })
        ));
        drop(writer);
    }

    #[tokio::test]
    async fn a_waiting_reader_is_woken_by_publish_not_by_each_append() {
        let (log, writer) = BatchLog::new();
        let mut reader = log.reader(0).unwrap();
        let read = tokio::spawn(async move {
            let first = reader.next().await.map(|e| e.sequence);
            let second = reader.next().await.map(|e| e.sequence);
            (first, second)
        });
        tokio::task::yield_now().await;
        writer.append(Ev::Step("a"));
        writer.append(Ev::Step("b"));
        writer.publish();
        assert_eq!(read.await.unwrap(), (Some(1), Some(2)));
    }

    #[test]
    fn two_readers_each_read_the_whole_log_at_their_own_pace() {
        let (log, writer) = BatchLog::new();
        let mut fast = log.reader(0).unwrap();
        let mut slow = log.reader(0).unwrap();
        writer.append(Ev::Step("a"));
        assert_eq!(drain(&mut fast), [(1, Ev::Step("a"))]);
        writer.append(Ev::Step("b"));
        assert_eq!(drain(&mut fast), [(2, Ev::Step("b"))]);
        writer.finish(Ev::End);
        assert_eq!(drain(&mut fast), [(3, Ev::End)]);
        assert_eq!(
            drain(&mut slow),
            [(1, Ev::Step("a")), (2, Ev::Step("b")), (3, Ev::End)]
        );
    }

    #[test]
    fn a_reader_that_keeps_up_sees_every_report() {
        let (log, writer) = BatchLog::new();
        let mut reader = log.reader(0).unwrap();
        for n in 0..LAG_EVENTS as u32 {
            writer.append(Ev::Progress(n));
        }
        let seen = drain(&mut reader);
        assert_eq!(seen.len() as u64, LAG_EVENTS);
        assert_eq!(
            seen.last(),
            Some(&(LAG_EVENTS, Ev::Progress(LAG_EVENTS as u32 - 1)))
        );
    }

    #[test]
    fn reports_merge_only_while_lagging_unread_and_never_across_other_events_of_the_key() {
        let (log, writer) = BatchLog::new();
        let mut reader = log.reader(0).unwrap();
        lag(&writer);
        let first = writer.append(Ev::Progress(1));
        assert_eq!(
            writer.append(Ev::Progress(2)),
            first,
            "merged while lagging"
        );
        writer.append(Ev::Output("x".into()));
        let after_output = writer.append(Ev::Progress(3));
        assert_eq!(after_output, first + 2, "not merged across the output");
        writer.append(Ev::Step("another key"));
        assert_eq!(
            writer.append(Ev::Progress(4)),
            after_output,
            "other keys do not matter"
        );
        let seen: Vec<Ev> = drain(&mut reader)
            .into_iter()
            .skip(LAG_EVENTS as usize)
            .map(|(_, e)| e)
            .collect();
        assert_eq!(
            seen,
            [
                Ev::Progress(2),
                Ev::Output("x".into()),
                Ev::Progress(4),
                Ev::Step("another key")
            ]
        );
        // Read (and no longer lagging): a later report is a new entry, not
        // a rewrite of what was read.
        let next = writer.append(Ev::Progress(5));
        assert_eq!(next, log.last_sequence());
        assert_eq!(writer.append(Ev::Progress(6)), next + 1);
    }

    #[test]
    fn a_flood_of_progress_with_a_stopped_reader_costs_a_bounded_log() {
        let (log, writer) = BatchLog::new();
        let _stopped = log.reader(0).unwrap();
        writer.append(Ev::Step("executing"));
        for n in 0..100_000 {
            writer.append(Ev::Progress(n));
        }
        assert!(
            log.last_sequence() <= LAG_EVENTS + 2,
            "{}",
            log.last_sequence()
        );
        assert_eq!(
            log.entries().last().map(|e| e.event.clone()),
            Some(Ev::Progress(99_999)),
            "the latest report is kept"
        );
    }

    #[test]
    fn a_report_one_reader_read_is_not_replaced_for_a_lagging_one() {
        let (log, writer) = BatchLog::new();
        let mut fast = log.reader(0).unwrap();
        let mut stalled = log.reader(0).unwrap();
        let n = LAG_EVENTS as u32 + 50;
        let mut seen = Vec::new();
        for i in 0..n {
            writer.append(Ev::Progress(i));
            writer.publish();
            // The fast reader reads each report as it comes.
            seen.extend(drain(&mut fast));
        }
        assert_eq!(seen.len(), n as usize, "the fast reader saw every report");
        assert_eq!(seen.last(), Some(&(u64::from(n), Ev::Progress(n - 1))));
        // The stalled one reads the same events under the same sequences.
        assert_eq!(drain(&mut stalled), seen);
        // Once both lag behind an unread report, it merges again.
        for i in n..n + LAG_EVENTS as u32 + 2 {
            writer.append(Ev::Output(format!("{i}")));
        }
        writer.append(Ev::Progress(1000));
        writer.append(Ev::Progress(1001));
        let last = log.last_sequence();
        assert_eq!(drain(&mut fast).last(), Some(&(last, Ev::Progress(1001))));
        assert_eq!(
            drain(&mut stalled).last(),
            Some(&(last, Ev::Progress(1001)))
        );
    }

    #[test]
    fn with_nobody_reading_reports_merge_at_once() {
        let (log, writer) = BatchLog::new();
        writer.append(Ev::Progress(1));
        writer.append(Ev::Progress(2));
        assert_eq!(log.last_sequence(), 1);
        drop(writer);
    }

    #[test]
    fn the_last_reader_going_away_detaches_until_someone_reads_again() {
        let (log, writer) = BatchLog::new();
        writer.append(Ev::Step("a"));
        let mut one = log.reader(0).unwrap();
        let mut two = log.reader(0).unwrap();
        assert_eq!(one.detach(), None, "another reader still follows");
        let generation = two.detach().expect("last reader detaches");
        assert!(log.still_detached(generation));
        let again = log.reader(1).unwrap();
        assert!(!log.still_detached(generation), "re-attached");
        drop(again);
        assert!(
            !log.still_detached(generation),
            "a later detach starts its own grace"
        );
        assert_eq!(log.readers(), 0);
        drop(writer);
    }

    #[test]
    fn a_finished_log_is_not_detached_and_a_dropped_writer_ends_readers() {
        let (log, writer) = BatchLog::new();
        let mut reader = log.reader(0).unwrap();
        writer.append(Ev::Step("a"));
        drop(writer);
        assert_eq!(drain(&mut reader), [(1, Ev::Step("a"))]);
        assert_eq!(reader.next().now_or_never(), Some(None));
        assert!(!log.is_finished());
        assert_eq!(reader.detach(), None, "closed: nothing left to cancel");
    }

    /// Events as text: `s<step>`, `p<n>`, `o<output>`, `e`.
    struct TextCodec;

    impl EventCodec<Ev> for TextCodec {
        fn encode(&self, entry: &Entry<Ev>) -> Vec<u8> {
            match &entry.event {
                Ev::Step(s) => format!("s{s}"),
                Ev::Progress(n) => format!("p{n}"),
                Ev::Output(o) => format!("o{o}"),
                Ev::End => "e".into(),
            }
            .into_bytes()
        }

        fn decode(&self, bytes: Bytes) -> Ev {
            let text = String::from_utf8(bytes.to_vec()).unwrap();
            let (tag, rest) = text.split_at(1);
            match tag {
                "s" => Ev::Step(Box::leak(rest.to_string().into_boxed_str())),
                "p" => Ev::Progress(rest.parse().unwrap()),
                "o" => Ev::Output(rest.to_string()),
                _ => Ev::End,
            }
        }
    }

    #[test]
    fn a_finished_log_is_compacted_when_its_last_reader_goes_and_reads_the_same() {
        let (log, writer) = BatchLog::compacting(Arc::new(TextCodec));
        let mut reader = log.reader(0).unwrap();
        writer.append(Ev::Step("accepted"));
        writer.append(Ev::Output(String::new()));
        writer.append(Ev::Output("out".into()));
        writer.finish(Ev::End);
        let appended = log.entries();
        assert!(!log.is_compacted(), "read live: kept as appended");
        let live = drain(&mut reader);
        assert_eq!(
            live,
            [
                (1, Ev::Step("accepted")),
                (2, Ev::Output(String::new())),
                (3, Ev::Output("out".into())),
                (4, Ev::End)
            ]
        );
        drop(reader);
        assert!(log.is_compacted());
        assert_eq!(log.readers(), 0);
        // The same entries (sequences, times, events), from any point.
        let compacted = log.entries();
        assert_eq!(compacted.len(), appended.len());
        for (a, b) in appended.iter().zip(&compacted) {
            assert_eq!(**a, **b);
        }
        let mut later = log.reader(2).unwrap();
        assert_eq!(drain(&mut later), live[2..]);
        assert_eq!(later.next().now_or_never(), Some(None));
        assert_eq!(log.bytes(), 8 + 8 + 11 + 8, "the estimate is kept");
        assert_eq!(
            log.reader(5).map(|_| ()),
            Err(BeyondEnd { after: 5, last: 4 })
        );
    }

    /// [`drain`] as a stream reads: each entry encoded (to be sent) before
    /// the next is asked for.
    fn send(reader: &mut LogReader<Ev>) -> Vec<(u64, Ev)> {
        let mut out = Vec::new();
        while let Some(Some(e)) = reader.next().now_or_never() {
            e.encoded_by(&TextCodec);
            out.push((e.sequence, e.event.clone()));
        }
        out
    }

    #[test]
    fn what_every_reader_read_is_kept_encoded_and_read_back_the_same() {
        let (log, writer) = BatchLog::compacting(Arc::new(TextCodec));
        let mut first = log.reader(0).unwrap();
        let mut second = log.reader(0).unwrap();
        writer.append(Ev::Step("accepted"));
        writer.append(Ev::Output("out".into()));
        writer.publish();
        assert_eq!(send(&mut first).len(), 2);
        assert_eq!(
            log.lock().entries.encoded_len(),
            0,
            "the second has not read"
        );
        assert_eq!(send(&mut second).len(), 2);
        assert_eq!(log.lock().entries.encoded_len(), 2, "read by both");
        assert_eq!(log.lock().entries.live.len(), 0);
        // A report after them is appended and read as usual; one that has
        // nothing unread to replace is appended, not merged into an encoded
        // entry.
        writer.append(Ev::Progress(1));
        writer.publish();
        assert_eq!(send(&mut first), [(3, Ev::Progress(1))]);
        assert_eq!(send(&mut second), [(3, Ev::Progress(1))]);
        assert_eq!(log.lock().entries.encoded_len(), 3);
        // Read by both but sent by neither (a reader that only drains): not
        // encoded under the lock, kept as appended.
        writer.append(Ev::Output("kept".into()));
        writer.publish();
        assert_eq!(drain(&mut first), [(4, Ev::Output("kept".into()))]);
        assert_eq!(drain(&mut second), [(4, Ev::Output("kept".into()))]);
        assert_eq!(log.lock().entries.encoded_len(), 3);
        assert_eq!(log.lock().entries.live.len(), 1);
        drop((first, second));
        // Nobody reads: reports merge.
        for n in 2..10 {
            writer.append(Ev::Progress(n));
        }
        assert_eq!(log.last_sequence(), 5, "merged into the unread report");
        assert!(!log.is_compacted());
        // A reader attaching later reads the encoded entries decoded.
        let mut late = log.reader(0).unwrap();
        assert_eq!(
            drain(&mut late),
            [
                (1, Ev::Step("accepted")),
                (2, Ev::Output("out".into())),
                (3, Ev::Progress(1)),
                (4, Ev::Output("kept".into())),
                (5, Ev::Progress(9)),
            ]
        );
        writer.finish(Ev::End);
        assert_eq!(drain(&mut late), [(6, Ev::End)]);
        drop(late);
        assert!(log.is_compacted());
        assert_eq!(log.entries().len(), 6);
    }

    #[test]
    fn a_log_finished_unread_is_compacted_at_once_and_one_without_codec_never() {
        let (log, writer) = BatchLog::compacting(Arc::new(TextCodec));
        writer.append(Ev::Progress(7));
        writer.finish(Ev::End);
        assert!(log.is_compacted());
        let mut reader = log.reader(0).unwrap();
        assert_eq!(drain(&mut reader), [(1, Ev::Progress(7)), (2, Ev::End)]);
        drop(reader);

        let (plain, writer) = BatchLog::new();
        writer.append(Ev::Step("a"));
        writer.finish(Ev::End);
        assert!(!plain.is_compacted());
        drop(plain.reader(0).unwrap());
        assert!(!plain.is_compacted());

        // A log whose writer went away without its last event is not
        // finished: never compacted (it is not retained as completed).
        let (gone, writer) = BatchLog::compacting(Arc::new(TextCodec));
        writer.append(Ev::Step("a"));
        drop(writer);
        drop(gone.reader(0).unwrap());
        assert!(!gone.is_compacted());
    }
}
