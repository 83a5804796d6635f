//! The execution of one call: the task that runs a tool, relays its
//! progress and reports its outcome to the session.
//!
//! Owns: the execution guard (a tool that does not enforce its own timeout
//! is given up on after the execution timeout plus [`TIMEOUT_SLACK`];
//! progress restarts the guard), the one progress drain, which merges
//! consecutive progress reports once [`MERGE_BACKLOG`] are waiting (a tool
//! flooding reports faster than the session takes them costs one message
//! per drain, not one per report), and the shortcut for a tool that
//! finishes at its first poll (no task, timer or message). Not here: the
//! call's state (`batch.rs`), what the tool does (`tools`).

use std::time::Duration;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use super::session::{Internal, InternalTx};
use crate::sandbox::{OutputLimits, SharedSandbox};
use crate::tools::{
    ErrorKind, ExecContext, Invocation, Progress, ProgressReceiver, ProgressSender, ToolError,
    ToolOutcome,
};

/// Slack over the execution timeout before the scheduler stops waiting for a
/// tool that does not enforce its own timeout.
pub(crate) const TIMEOUT_SLACK: Duration = Duration::from_secs(5);

/// Progress reports waiting in one call's channel past which consecutive
/// ones merge into the latest: a tool reporting at a normal pace has every
/// report relayed; one outpacing the session is merged.
pub(crate) const MERGE_BACKLOG: usize = 64;

/// One call to run.
pub(crate) struct ExecJob {
    pub batch_id: String,
    pub index: usize,
    pub invocation: std::sync::Arc<dyn Invocation>,
    pub token: CancellationToken,
    pub timeout: Duration,
    pub output: OutputLimits,
    pub sandbox: SharedSandbox,
    /// The call's session.
    pub session: std::sync::Arc<str>,
    /// Counts the reports merged here (`events_lagged_total`).
    pub metrics: std::sync::Arc<super::Metrics>,
    /// The execution slots of the call's tenant (`max_executing_calls`):
    /// the tool starts once it holds one, and gives it back when it stopped.
    pub slots: Option<std::sync::Arc<tokio::sync::Semaphore>>,
    /// A slot of them the session already took (its Executing event went
    /// out with it).
    pub slot: Option<super::tenants::ExecutionSlot>,
}

/// Starts `job` once it holds an execution slot of its tenant, if its
/// tenant has a quota; see [`start_now`] for the rest. A call whose tenant's
/// slots are all taken (by batches admitted at the same time) waits for one
/// in its own task: only that tenant's calls wait.
pub(crate) fn start(mut job: ExecJob, reports: &InternalTx) -> Option<ToolOutcome> {
    if let Some(slot) = job.slot.take() {
        return start_now(job, Some(slot), reports);
    }
    let Some(slots) = job.slots.take() else {
        return start_now(job, None, reports);
    };
    match slots.clone().try_acquire_owned() {
        Ok(slot) => start_now(job, Some(slot), reports),
        Err(_) => {
            let reports = reports.clone();
            tokio::spawn(async move {
                let (batch_id, index) = (job.batch_id.clone(), job.index);
                let token = job.token.clone();
                let slot = tokio::select! {
                    slot = slots.acquire_owned() => slot.ok(),
                    () = token.cancelled() => None,
                };
                let outcome = match slot {
                    Some(slot) => {
                        // Before the tool's reports, on the same channel: the
                        // session sends the call's Executing event now.
                        let _ = reports.send(Internal::SlotGranted {
                            batch_id: batch_id.clone(),
                            index,
                        });
                        start_now(job, Some(slot), &reports)
                    }
                    // Cancelled meanwhile: the batch already ended the call
                    // (this late outcome is dropped).
                    None => Some(
                        ToolError::new(
                            ErrorKind::UnhandledException,
                            "cancelled while waiting for an execution slot of its tenant",
                        )
                        .into(),
                    ),
                };
                if let Some(outcome) = outcome {
                    let _ = reports.send(Internal::Executed {
                        batch_id,
                        index,
                        outcome,
                    });
                }
            });
            None
        }
    }
}

/// Starts `job`. A tool that finishes at its first poll without reporting
/// progress (a small read) returns its outcome here, to be applied within
/// the caller's step; otherwise its progress and outcome arrive on
/// `reports`, progress first.
fn start_now(
    job: ExecJob,
    slot: Option<super::tenants::ExecutionSlot>,
    reports: &InternalTx,
) -> Option<ToolOutcome> {
    let ExecJob {
        batch_id,
        index,
        invocation,
        token,
        timeout,
        output,
        sandbox,
        session,
        metrics,
        slots: _,
        slot: _,
    } = job;
    // Drained without waiting by the task below (or right here); see
    // `ExecContext::progress` for what bounds the producers. None for a
    // tool that reports nothing (two allocations less per call).
    let (progress_tx, mut progress_rx) = if invocation.reports_progress() {
        let (tx, rx) = ProgressSender::channel();
        (tx, Some(rx))
    } else {
        (ProgressSender::none(), None)
    };
    let ctx = ExecContext {
        token,
        progress: progress_tx,
        timeout,
        output,
        sandbox,
        session,
    };
    let mut run = invocation.execute(ctx);
    let relay = Relay {
        batch_id,
        index,
        reports: reports.clone(),
        metrics: Some(metrics),
    };
    if let Some(outcome) = (&mut run).now_or_never() {
        let Some(rx) = progress_rx.as_mut().filter(|rx| !rx.is_empty()) else {
            return Some(outcome);
        };
        relay.drain(None, rx);
        relay.executed(outcome);
        return None;
    }
    tokio::spawn(async move {
        // Held until the tool stopped, whatever ends it.
        let _slot = slot;
        let guard = timeout + TIMEOUT_SLACK;
        let limit = tokio::time::sleep(guard);
        tokio::pin!(limit);
        let mut progress_open = progress_rx.is_some();
        let outcome = loop {
            tokio::select! {
                biased;
                p = next_progress(&mut progress_rx), if progress_open => match p {
                    Some(first) => {
                        // A tool reporting progress is alive: the guard
                        // restarts (MCP calls outlive it while progress
                        // flows; the tool enforces its own inactivity and
                        // total limits).
                        limit.as_mut().reset(tokio::time::Instant::now() + guard);
                        if let Some(rx) = &mut progress_rx {
                            relay.drain(Some(*first), rx);
                        }
                    }
                    None => progress_open = false,
                },
                outcome = &mut run => break outcome,
                () = &mut limit => break ToolError::new(
                    ErrorKind::ExecutionTimeout,
                    format!("The tool did not finish within the execution timeout of {} s.", timeout.as_secs_f64()),
                ).into(),
            }
        };
        // Progress sent just before the end still goes first.
        if let Some(rx) = &mut progress_rx {
            relay.drain(None, rx);
        }
        relay.executed(outcome);
    });
    None
}

/// The next report of a call's progress channel; `None` when it has none
/// or it closed.
async fn next_progress(rx: &mut Option<ProgressReceiver>) -> Option<Box<Progress>> {
    match rx {
        Some(rx) => rx.recv().await,
        None => None,
    }
}

/// Where one call's reports go.
struct Relay {
    batch_id: String,
    index: usize,
    reports: InternalTx,
    /// Where merged reports are counted (none in the unit test).
    metrics: Option<std::sync::Arc<super::Metrics>>,
}

impl Relay {
    /// Forwards `first` and everything already queued behind it, merging
    /// consecutive reports into the latest when [`MERGE_BACKLOG`] or more
    /// are waiting.
    fn drain(&self, first: Option<Progress>, rx: &mut ProgressReceiver) {
        let merge = rx.len() >= MERGE_BACKLOG;
        let mut pending = first;
        while let Ok(next) = rx.try_recv() {
            pending = match (pending, *next) {
                (Some(Progress::Report { .. }), next @ Progress::Report { .. }) if merge => {
                    if let Some(m) = &self.metrics {
                        m.events_lagged(super::metrics::LagAction::Merged, 1);
                    }
                    Some(next)
                }
                (Some(earlier), next) => {
                    self.progress(earlier);
                    Some(next)
                }
                (None, next) => Some(next),
            };
        }
        if let Some(last) = pending {
            self.progress(last);
        }
    }

    fn progress(&self, progress: Progress) {
        let _ = self.reports.send(Internal::Progress {
            batch_id: self.batch_id.clone(),
            index: self.index,
            progress,
        });
    }

    fn executed(self, outcome: ToolOutcome) {
        let _ = self.reports.send(Internal::Executed {
            batch_id: self.batch_id,
            index: self.index,
            outcome,
        });
    }
}

/// What [`Relay::drain`] forwards of `reports`, for the unit test.
#[cfg(test)]
fn merged(reports: Vec<Progress>) -> Vec<Progress> {
    let (tx, mut rx) = ProgressSender::channel();
    let (out_tx, mut out_rx) = tokio::sync::mpsc::unbounded_channel();
    for r in reports {
        tx.send(r);
    }
    let relay = Relay {
        batch_id: "b".into(),
        index: 0,
        reports: InternalTx(out_tx),
        metrics: None,
    };
    relay.drain(None, &mut rx);
    let mut out = Vec::new();
    while let Ok(msg) = out_rx.try_recv() {
        let Internal::Progress { progress, .. } = *msg else {
            break;
        };
        out.push(progress);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(progress: f64) -> Progress {
        Progress::Report {
            progress: Some(progress),
            total: Some(10.0),
            percent: Some(progress * 10.0),
            message: format!("step {progress}"),
        }
    }

    #[test]
    fn a_backlog_of_reports_merges_into_the_latest_and_output_keeps_its_place() {
        let out = |s: &str| Progress::Output(s.into());
        let backlog: Vec<Progress> = (0..MERGE_BACKLOG).map(|n| report(n as f64)).collect();
        let mut flood = vec![out("a")];
        flood.extend(backlog.clone());
        flood.push(out("b"));
        flood.extend(backlog.clone());
        let last = report((MERGE_BACKLOG - 1) as f64);
        let table = vec![
            // A tool at a normal pace: every report is relayed.
            (
                vec![report(1.0), out("a"), report(2.0), report(3.0)],
                vec![report(1.0), out("a"), report(2.0), report(3.0)],
            ),
            (backlog.clone(), vec![last.clone()]),
            (flood, vec![out("a"), last.clone(), out("b"), last]),
            (vec![], vec![]),
        ];
        for (input, want) in table {
            assert_eq!(merged(input.clone()), want, "{input:?}");
        }
    }
}
