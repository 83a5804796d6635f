//! The feed of one batch's events from its session to its stream.
//!
//! Owns: the queue between the session (writer, [`EventSink`]) and the
//! batch's [`super::BatchStream`] (reader, [`FeedReader`]), and its
//! backpressure policy. The session never waits for a reader, so a client
//! that stops reading must not make the queue grow without bound: every
//! event but one is bounded by the batch itself (a few state changes per
//! call, live output capped per call by `max_streamed_bytes`), and the one
//! that is not, a progress report, is merged once the reader lags by
//! [`LAG_EVENTS`]: a new report then replaces the same call's previous
//! report while that one is unread and nothing else of the call came after
//! it (the latest progress, total and message are kept). So a tool flooding
//! progress notifications costs at most one queued report per call beyond
//! the first [`LAG_EVENTS`]; a reader that keeps up sees every report.
//!
//! Not here: sequence numbers (the gRPC layer numbers what it reads), what
//! the events mean (`events.rs`).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::SystemTime;

use super::events::{BatchEvent, Event, StateUpdate};
use crate::tools::Progress;

/// Unread events past which a stream counts as lagging and progress
/// reports merge: far more than one step of a batch emits (so a reader that
/// keeps up sees every report), few enough to be a small bound.
pub(crate) const LAG_EVENTS: usize = 256;

#[derive(Default)]
struct Queue {
    events: VecDeque<Event>,
    /// Events popped so far: `events[i]` is the `popped + i`-th event.
    popped: u64,
    /// Per call id, the position (as above) of its latest event when that
    /// event is an unread progress report, so a newer report replaces it.
    last_report: HashMap<String, u64>,
    /// The writer is gone: the reader ends once the queue is empty.
    closed: bool,
    waker: Option<Waker>,
}

impl Queue {
    fn push(&mut self, event: Event) {
        if let BatchEvent::CallUpdate {
            call_id, update, ..
        } = &event.event
        {
            let is_report = matches!(
                update,
                StateUpdate::Executing(Some(Progress::Report { .. }))
            );
            if is_report {
                if self.events.len() >= LAG_EVENTS
                    && let Some(&at) = self.last_report.get(call_id)
                    && at >= self.popped
                    && let Some(slot) = self.events.get_mut((at - self.popped) as usize)
                {
                    *slot = event;
                    return;
                }
                let at = self.popped + self.events.len() as u64;
                self.last_report.insert(call_id.clone(), at);
            } else {
                self.last_report.remove(call_id.as_str());
            }
        }
        self.events.push_back(event);
    }

    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new feed: the session's writer and the stream's reader.
pub(crate) fn feed() -> (EventSink, FeedReader) {
    let queue = Arc::new(Mutex::new(Queue::default()));
    (
        EventSink {
            queue: queue.clone(),
            held: RefCell::new(Vec::new()),
        },
        FeedReader { queue },
    )
}

/// Sends a batch's events to its stream. The events of one step of the
/// session (e.g. Accepted, Started, Validating, Scheduled, Executing for an
/// allowed call) are held and queued together when the step ends
/// ([`EventSink::flush`], and on drop): the stream wakes once and encodes
/// them into one HTTP/2 write instead of racing the session event by event.
/// Each event keeps the time it was emitted. A gone reader is not an error
/// here (its stream's drop tells the session). Dropping the sink ends the
/// stream after what it queued.
pub(crate) struct EventSink {
    queue: Arc<Mutex<Queue>>,
    held: RefCell<Vec<Event>>,
}

impl EventSink {
    pub fn emit(&self, event: BatchEvent) {
        self.held.borrow_mut().push(Event {
            at: SystemTime::now(),
            event,
        });
    }

    /// Queues the held events, if any, waking the reader once.
    pub fn flush(&self) {
        let held = std::mem::take(&mut *self.held.borrow_mut());
        if held.is_empty() {
            return;
        }
        let mut queue = lock(&self.queue);
        for event in held {
            queue.push(event);
        }
        queue.wake();
    }
}

impl Drop for EventSink {
    fn drop(&mut self) {
        self.flush();
        let mut queue = lock(&self.queue);
        queue.closed = true;
        queue.wake();
    }
}

/// The stream's end of a [`feed`].
pub(crate) struct FeedReader {
    queue: Arc<Mutex<Queue>>,
}

impl FeedReader {
    /// The next event; `None` once the sink is gone and everything was read.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        let mut queue = lock(&self.queue);
        if let Some(event) = queue.events.pop_front() {
            queue.popped += 1;
            return Poll::Ready(Some(event));
        }
        if queue.closed {
            return Poll::Ready(None);
        }
        queue.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Events queued and not yet read (for tests).
    #[cfg(test)]
    fn queued(&self) -> usize {
        lock(&self.queue).events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn update(call: &str, update: StateUpdate) -> BatchEvent {
        BatchEvent::CallUpdate {
            call_id: call.into(),
            tool_name: "t".into(),
            update,
        }
    }

    fn report(call: &str, n: f64) -> BatchEvent {
        update(
            call,
            StateUpdate::Executing(Some(Progress::Report {
                progress: Some(n),
                total: Some(1e6),
                percent: None,
                message: format!("at {n}"),
            })),
        )
    }

    fn output(call: &str, s: &str) -> BatchEvent {
        update(
            call,
            StateUpdate::Executing(Some(Progress::Output(s.into()))),
        )
    }

    fn read_all(reader: &mut FeedReader) -> Vec<BatchEvent> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        while let Poll::Ready(Some(e)) = reader.poll_next(&mut cx) {
            out.push(e.event);
        }
        out
    }

    #[test]
    fn a_progress_flood_to_a_lagging_reader_costs_a_bounded_queue() {
        let (sink, mut reader) = feed();
        sink.emit(update("a", StateUpdate::Executing(None)));
        sink.emit(update("b", StateUpdate::Executing(None)));
        sink.flush();
        // A million reports of two interleaved calls, nobody reading.
        for n in 0..1_000_000 {
            sink.emit(report("a", f64::from(n)));
            sink.emit(report("b", f64::from(n)));
            if n % 1000 == 0 {
                sink.flush();
            }
        }
        sink.flush();
        assert!(reader.queued() <= LAG_EVENTS + 2, "{}", reader.queued());
        drop(sink);
        let events = read_all(&mut reader);
        // Each call's reports still arrive in order, ending with the latest.
        for call in ["a", "b"] {
            let seen: Vec<f64> = events
                .iter()
                .filter_map(|e| match e {
                    BatchEvent::CallUpdate {
                        call_id,
                        update: StateUpdate::Executing(Some(Progress::Report { progress, .. })),
                        ..
                    } if call_id == call => *progress,
                    _ => None,
                })
                .collect();
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "{call}: in order");
            assert_eq!(seen.last(), Some(&999_999.0), "{call}: the latest kept");
        }
        assert_eq!(events.last(), Some(&report("b", 999_999.0)));
    }

    #[test]
    fn a_reader_that_keeps_up_sees_every_report() {
        let (sink, mut reader) = feed();
        let sent: Vec<BatchEvent> = (0..LAG_EVENTS).map(|n| report("a", n as f64)).collect();
        for e in &sent {
            sink.emit(e.clone());
        }
        sink.flush();
        assert_eq!(read_all(&mut reader), sent);
    }

    #[test]
    fn reports_merge_only_while_lagging_unread_and_never_across_other_events_of_the_call() {
        let (sink, mut reader) = feed();
        let emit_all = |events: Vec<BatchEvent>| {
            for e in events {
                sink.emit(e);
            }
            sink.flush();
        };
        // Another call's output puts the reader LAG_EVENTS behind.
        let lag: Vec<BatchEvent> = (0..LAG_EVENTS).map(|_| output("z", "x")).collect();
        emit_all(lag.clone());
        emit_all(vec![
            report("a", 1.0),
            report("a", 2.0),
            output("a", "x"),
            report("a", 3.0),
        ]);
        emit_all(vec![report("b", 1.0), report("a", 4.0)]);
        let mut want = lag;
        want.extend([
            report("a", 2.0),
            output("a", "x"),
            report("a", 4.0),
            report("b", 1.0),
        ]);
        assert_eq!(read_all(&mut reader), want);
        // Read: a later report is a new event, not a rewrite of history.
        emit_all(vec![report("a", 5.0), report("a", 6.0)]);
        assert_eq!(
            read_all(&mut reader),
            vec![report("a", 5.0), report("a", 6.0)]
        );
    }

    #[test]
    fn the_reader_ends_after_the_sink_is_dropped_and_the_queue_read() {
        let (sink, mut reader) = feed();
        sink.emit(output("a", "x"));
        drop(sink); // flushes what it held
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(reader.poll_next(&mut cx), Poll::Ready(Some(_))));
        assert!(matches!(reader.poll_next(&mut cx), Poll::Ready(None)));
    }
}
