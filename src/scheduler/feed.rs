//! The feed of one batch's events from its session into the batch's log.
//!
//! Owns: [`EventSink`], the session's writing end of the log of
//! [`crate::store`], and when readers are woken. The session never waits
//! for a reader: each reader reads the shared log at its own pace, and the
//! log's backpressure rule ([`crate::store::LAG_EVENTS`]) merges a call's
//! progress reports while the slowest reader lags, so a client that stops
//! reading costs a bounded amount.
//!
//! Not here: sequence numbers and readers (the log), what the events mean
//! (`events.rs`), how they merge (`resume.rs` says which are reports).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::Metrics;
use super::events::BatchEvent;
use super::metrics::LagAction;
use crate::store::{BatchLog, LogWriter};

/// Appends a batch's events to its log. The events of one step of the
/// session (e.g. Accepted, Started, Validating, Scheduled, Executing for an
/// allowed call) are appended as they happen and published together when
/// the step ends ([`EventSink::flush`], and on drop): a waiting reader wakes
/// once and encodes them into one HTTP/2 write instead of racing the
/// session event by event. `Completed` finishes the log; dropping the sink
/// without it closes the log (readers end after what was logged).
pub(crate) struct EventSink {
    writer: RefCell<Option<LogWriter<BatchEvent>>>,
    log: Arc<BatchLog<BatchEvent>>,
    /// Marks the batch's session busy until the batch is done (see
    /// `Hub::evict_oldest_idle`), whether or not anyone reads it.
    _busy: Arc<()>,
    /// The highest sequence appended: an append that returns one at or
    /// below it merged into an unread report (`events_lagged_total`).
    last: Cell<u64>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    pub fn new(writer: LogWriter<BatchEvent>, busy: Arc<()>, metrics: Arc<Metrics>) -> Self {
        Self {
            log: writer.log().clone(),
            writer: RefCell::new(Some(writer)),
            _busy: busy,
            last: Cell::new(0),
            metrics,
        }
    }

    pub fn emit(&self, event: BatchEvent) {
        let mut writer = self.writer.borrow_mut();
        if matches!(event, BatchEvent::Completed { .. }) {
            if let Some(w) = writer.take() {
                w.finish(event);
            }
        } else if let Some(w) = writer.as_ref() {
            let sequence = w.append(event);
            if sequence <= self.last.get() {
                self.metrics.events_lagged(LagAction::Merged, 1);
            } else {
                self.last.set(sequence);
            }
        }
        // Else the log is finished: nothing comes after Completed.
    }

    /// Wakes the readers for what the step appended.
    pub fn flush(&self) {
        if let Some(w) = self.writer.borrow().as_ref() {
            w.publish();
        }
    }

    /// The batch's log.
    pub fn log(&self) -> &Arc<BatchLog<BatchEvent>> {
        &self.log
    }
}

impl Drop for EventSink {
    fn drop(&mut self) {
        self.flush();
    }
}
