//! Running a command as a whole process group, with bounded output, a
//! timeout and a kill that reaches background children.
//!
//! As codex-rs does: the command leads its own process group; cancel and
//! timeout send SIGTERM to the group, then SIGKILL after a grace; pipes are
//! drained for a bounded time only, because a background grandchild can keep
//! them open forever.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Environment variables passed through to commands. Everything else
/// (tokens, keys, the server's own settings) is dropped so that a command
/// cannot read the server's secrets from its environment.
const ENV_ALLOWLIST: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER"];

/// Time between SIGTERM and SIGKILL to the group: enough for a well-behaved
/// program to flush, short enough that cancel feels immediate.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// How long pipes are drained after the command ended: a background
/// grandchild that escaped the group kill may hold them open forever.
pub const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// Output bounds for one command.
#[derive(Debug, Clone, Copy)]
pub struct OutputLimits {
    /// Bytes kept of the output: the first half and the last half; what lies
    /// between is counted and replaced by a marker.
    pub max_bytes: usize,
    /// Bytes of live output streamed as progress; later output is only kept
    /// (head and tail) for the result.
    pub max_streamed_bytes: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_bytes: 1024 * 1024,
            max_streamed_bytes: 1024 * 1024,
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub timeout: Duration,
    pub limits: OutputLimits,
}

/// How a command ended. `output` is stdout and stderr interleaved as read,
/// bounded by [`OutputLimits::max_bytes`] (head and tail).
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessOutcome {
    Exited {
        /// `None` when killed by a signal.
        exit_code: Option<i32>,
        signal: Option<i32>,
        output: String,
    },
    TimedOut {
        output: String,
    },
    Cancelled {
        output: String,
    },
    SpawnFailed {
        message: String,
    },
}

/// Events while the process runs.
#[derive(Debug, Clone)]
pub enum ProcessEvent {
    Started { pid: u32 },
    Output(String),
}

/// Runs `spec`, sending [`ProcessEvent`]s to `events`, until it exits, times
/// out or `token` is cancelled. Never hangs on pipes held open by background
/// children: after the leader exits, the rest of the group is killed and the
/// pipes are drained for at most [`DRAIN_TIMEOUT`].
pub async fn run_process(
    spec: ProcessSpec,
    token: CancellationToken,
    events: mpsc::UnboundedSender<ProcessEvent>,
) -> ProcessOutcome {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .process_group(0)
        .kill_on_drop(true);
    for key in ENV_ALLOWLIST {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return ProcessOutcome::SpawnFailed {
                message: format!("could not start {}: {e}", spec.program),
            };
        }
    };
    let pid = child.id().unwrap_or_default();
    let _ = events.send(ProcessEvent::Started { pid });
    let pgid = Pid::from_raw(pid as i32);

    let (chunk_tx, mut chunk_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    if let Some(out) = child.stdout.take() {
        tokio::spawn(pump(out, chunk_tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(pump(err, chunk_tx.clone()));
    }
    drop(chunk_tx);

    let mut sink = OutputSink::new(spec.limits, events);
    let deadline = tokio::time::sleep(spec.timeout);
    tokio::pin!(deadline);

    enum End {
        Exited(std::process::ExitStatus),
        WaitFailed,
        TimedOut,
        Cancelled,
    }
    let mut pipes_open = true;
    let end = loop {
        tokio::select! {
            status = child.wait() => break match status {
                Ok(s) => End::Exited(s),
                Err(_) => End::WaitFailed,
            },
            chunk = chunk_rx.recv(), if pipes_open => match chunk {
                Some(c) => sink.push(&c),
                None => pipes_open = false,
            },
            () = &mut deadline => break End::TimedOut,
            () = token.cancelled() => break End::Cancelled,
        }
    };

    match end {
        End::Exited(_) | End::WaitFailed => {
            // The leader is gone; whatever it left running in its group would
            // hold our pipes and outlive the call.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        End::TimedOut | End::Cancelled => kill_group(pgid, &mut child).await,
    }
    drain(&mut chunk_rx, &mut sink).await;
    let output = sink.finish();
    match end {
        End::Exited(status) => {
            use std::os::unix::process::ExitStatusExt;
            ProcessOutcome::Exited {
                exit_code: status.code(),
                signal: status.signal(),
                output,
            }
        }
        End::WaitFailed => ProcessOutcome::Exited {
            exit_code: None,
            signal: None,
            output,
        },
        End::TimedOut => ProcessOutcome::TimedOut { output },
        End::Cancelled => ProcessOutcome::Cancelled { output },
    }
}

/// SIGTERM to the group, SIGKILL after [`KILL_GRACE`] if the leader is still
/// there, then SIGKILL again for members that ignored SIGTERM.
async fn kill_group(pgid: Pid, child: &mut tokio::process::Child) {
    let _ = killpg(pgid, Signal::SIGTERM);
    if tokio::time::timeout(KILL_GRACE, child.wait()).await.is_err() {
        let _ = killpg(pgid, Signal::SIGKILL);
        let _ = child.wait().await;
    }
    // Background members that ignore SIGTERM outlive the leader.
    let _ = killpg(pgid, Signal::SIGKILL);
}

async fn drain(rx: &mut mpsc::UnboundedReceiver<Vec<u8>>, sink: &mut OutputSink) {
    let until = Instant::now() + DRAIN_TIMEOUT;
    loop {
        match tokio::time::timeout_at(until.into(), rx.recv()).await {
            Ok(Some(c)) => sink.push(&c),
            Ok(None) | Err(_) => break,
        }
    }
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut r: R, tx: mpsc::UnboundedSender<Vec<u8>>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        }
    }
}

/// Keeps the head and tail of the output within `max_bytes`, counts what
/// was dropped in between, and streams live chunks up to
/// `max_streamed_bytes`. Memory stays flat however much a command prints.
struct OutputSink {
    limits: OutputLimits,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    omitted: u64,
    streamed: usize,
    /// Bytes of an incomplete UTF-8 sequence held back from streaming.
    pending: Vec<u8>,
    events: mpsc::UnboundedSender<ProcessEvent>,
}

impl OutputSink {
    fn new(limits: OutputLimits, events: mpsc::UnboundedSender<ProcessEvent>) -> Self {
        Self {
            limits,
            head: Vec::new(),
            tail: VecDeque::new(),
            omitted: 0,
            streamed: 0,
            pending: Vec::new(),
            events,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.stream(chunk);
        let head_cap = self.limits.max_bytes / 2;
        let tail_cap = self.limits.max_bytes - head_cap;
        let take = head_cap.saturating_sub(self.head.len()).min(chunk.len());
        self.head.extend_from_slice(&chunk[..take]);
        let rest = &chunk[take..];
        // Only the last `tail_cap` bytes of `rest` can survive in the tail.
        let skip = rest.len().saturating_sub(tail_cap);
        self.omitted += skip as u64;
        for &b in &rest[skip..] {
            if self.tail.len() == tail_cap {
                self.tail.pop_front();
                self.omitted += 1;
            }
            self.tail.push_back(b);
        }
    }

    fn stream(&mut self, chunk: &[u8]) {
        if self.streamed >= self.limits.max_streamed_bytes {
            return;
        }
        let room = self.limits.max_streamed_bytes - self.streamed;
        let part = &chunk[..chunk.len().min(room)];
        self.streamed += part.len();
        self.pending.extend_from_slice(part);
        let valid_up_to = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let text: Vec<u8> = self.pending.drain(..valid_up_to).collect();
        if !text.is_empty() {
            let _ = self.events.send(ProcessEvent::Output(
                String::from_utf8_lossy(&text).into_owned(),
            ));
        }
    }

    fn finish(self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.omitted > 0 {
            out.push_str(&format!(
                "\n... [{} bytes of output omitted] ...\n",
                self.omitted
            ));
        }
        let tail: Vec<u8> = self.tail.into_iter().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_keeps_head_and_tail() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let mut sink = OutputSink::new(
            OutputLimits {
                max_bytes: 10,
                max_streamed_bytes: 0,
            },
            tx,
        );
        sink.push(b"0123456789");
        sink.push(b"abcdefghij");
        assert_eq!(
            sink.finish(),
            "01234\n... [10 bytes of output omitted] ...\nfghij"
        );
    }
}
