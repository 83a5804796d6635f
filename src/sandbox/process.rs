//! Running a command through the worker (forked by the zygote, see
//! [`super::zygote`]), with bounded output, a timeout and a kill that
//! reaches every descendant.
//!
//! As codex-rs does: the command runs in its own process group with stdin
//! from `/dev/null` and an environment built from a short allowlist; cancel
//! and timeout send SIGTERM, then SIGKILL after a grace; pipes are drained
//! for a bounded time only, because a background grandchild can keep them
//! open forever. Beyond that, the worker (see [`super::worker`]) confines the
//! command and, as child subreaper, also kills descendants that left the
//! group with `setsid` or a double fork; where a pids cgroup is delegated
//! the server gives every command its own, bounded by `pids.max` (made one
//! command ahead, for the zygote's spare worker to join: see
//! [`super::zygote`]), and sweeps it after the command.
//!
//! Output (stdout and stderr share one pipe: one stream, in the order it
//! was written) is read by the call's own task as it comes, into a
//! fixed-size head and a ring-buffer tail, so the server's memory stays flat
//! however much a command prints (`yes | head -c 5G`): while the task is
//! busy the pipe fills and the command waits.

#![allow(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::probe::ProcessLimitKind;
use super::worker::{ANCHOR_TMP, PROTECTED_FD, WorkerArgs};
use super::zygote::{PidsCgroup, Request};
use super::{SandboxLevel, SharedSandbox};
use crate::scratch::{PooledTmp, TmpPool};

/// Environment variables passed through to commands. Everything else
/// (tokens, keys, the server's own settings) is dropped so that a command
/// cannot read the server's secrets from its environment.
const ENV_ALLOWLIST: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER",
];

/// Name parts that mark a secret: such a variable is dropped even when an
/// allowlist entry would pass it (defence against a widened allowlist).
const SECRET_MARKERS: &[&str] = &["TOKEN", "SECRET", "KEY", "PASSWORD"];

/// How long a worker has to exit once it reported its command's end (it
/// exits at once; a stopped one is killed then).
const WORKER_EXIT_GRACE: Duration = Duration::from_secs(5);

/// Time between SIGTERM and SIGKILL: enough for a well-behaved program to
/// flush, short enough that cancel feels immediate.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// How long the server waits for the worker beyond [`KILL_GRACE`] after
/// asking it to stop, before it SIGKILLs the worker itself.
pub const WORKER_EXIT_SLACK: Duration = Duration::from_secs(2);

/// How long pipes are drained after the command ended: a background
/// grandchild that escaped every kill may hold them open forever.
pub const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// Bytes read from a pipe at once.
const READ_CHUNK: usize = 64 * 1024;

/// Bytes read from the status pipe at once: a whole report in one read.
const STATUS_READ_CHUNK: usize = 512;

/// Longest line of the status report kept (the worker's are a few dozen
/// bytes); a longer one is skipped up to its newline.
const MAX_STATUS_LINE: usize = 64 * 1024;

/// Output lines that mark a refusal by the sandbox: Landlock answers EACCES,
/// seccomp EPERM, the process limit EAGAIN on fork (EROFS for read-only
/// mounts the operator set up, should the host provide them).
const DENIAL_MARKERS: &[&str] = &[
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    // Renaming or removing a protected path, a mount point of the
    // command's mount namespace.
    "Device or resource busy",
    "fork: Resource temporarily unavailable",
    "fork: retry: Resource temporarily unavailable",
];

/// Output that shows a failed network access. At a level without network
/// every such failure is the sandbox's doing (tools like curl print no
/// errno), so there these mark a denial too.
const NETWORK_FAILURE_MARKERS: &[&str] = &[
    "Couldn't connect to server",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Network is unreachable",
];

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
#[derive(Debug)]
pub struct ProcessSpec {
    pub program: String,
    pub args: Vec<String>,
    /// Working directory (inside the workspace).
    pub cwd: PathBuf,
    pub timeout: Duration,
    pub limits: OutputLimits,
    /// The sandbox the command runs in.
    pub sandbox: SharedSandbox,
    /// The canonical workspace root (what the level lets it write).
    pub workspace: PathBuf,
    /// Where the whole output goes once it outgrows
    /// [`OutputLimits::max_bytes`]; `None` keeps only head and tail.
    pub spill: Option<Spill>,
}

/// A place for the whole output of a command that outgrows its cap: opened
/// only when it does (most commands never need it), written with the
/// output's text up to `cap` bytes (binary output after its start is not
/// kept). `written` says afterwards how many bytes it took (0: never
/// opened or nothing written).
pub struct Spill {
    pub open: Box<dyn FnOnce() -> Option<(std::fs::File, u64)> + Send + Sync>,
    pub written: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Spill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spill").finish_non_exhaustive()
    }
}

enum SpillState {
    Armed(Spill),
    Writing {
        file: std::fs::File,
        room: u64,
        written: std::sync::Arc<std::sync::atomic::AtomicU64>,
    },
    Off,
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
    /// The command failed and its output shows a refusal the sandbox
    /// produces (EACCES from Landlock, EPERM from seccomp, EAGAIN from the
    /// process limit) while it ran confined. A heuristic on the output: the
    /// kernel does not tell us which refusal was the sandbox's.
    SandboxDenied {
        exit_code: Option<i32>,
        signal: Option<i32>,
        output: String,
        /// The output line that shows the refusal.
        evidence: String,
    },
    TimedOut {
        output: String,
    },
    Cancelled {
        output: String,
    },
    /// The worker could not confine the command, so it never ran.
    SandboxSetupFailed {
        message: String,
        output: String,
    },
    SpawnFailed {
        message: String,
    },
}

/// Events while the process runs.
#[derive(Debug, Clone)]
pub enum ProcessEvent {
    /// The worker's pid (the command runs as its child).
    Started {
        pid: u32,
    },
    Output(String),
}

/// Where a running process reports its [`ProcessEvent`]s: a channel, or a
/// caller's own sink (the shell tool's progress, so it needs no relay task).
/// Called from the process's reader; must not block.
pub trait ProcessEvents: Send + Sync + 'static {
    fn send_event(&self, event: ProcessEvent);
}

impl ProcessEvents for mpsc::UnboundedSender<ProcessEvent> {
    fn send_event(&self, event: ProcessEvent) {
        let _ = self.send(event);
    }
}

/// Runs `spec` through the worker, sending [`ProcessEvent`]s to `events`,
/// until it exits, times out or `token` is cancelled. Never hangs on pipes
/// held open by background children: after the worker exits, the pipes are
/// drained for at most [`DRAIN_TIMEOUT`].
pub async fn run_process(
    mut spec: ProcessSpec,
    token: CancellationToken,
    events: impl ProcessEvents,
) -> ProcessOutcome {
    // Started first: the walk for the protected paths runs on the blocking
    // pool while the tmp, the pipes and the request are made here, and
    // while the request goes out and the worker starts.
    let protected = {
        let level = spec.sandbox.config.level;
        (level.is_confined() && level.writes_workspace())
            .then(|| protected_set(&spec))
            .flatten()
    };
    let tmps = spec.sandbox.tmps().clone();
    let mut tmp = match tmps.take(&spec.workspace) {
        Ok(t) => t,
        Err(e) => {
            return ProcessOutcome::SpawnFailed {
                message: format!("could not create the command's private tmp: {e}"),
            };
        }
    };
    // The zygote picks the cgroup (the one its spare worker already
    // joined, see [`super::zygote`]); this says where and with what limit.
    let pids_cgroup = match &spec.sandbox.probe.process_limit {
        ProcessLimitKind::Cgroup(base) => Some(PidsCgroup {
            base: base.clone(),
            max: spec.sandbox.config.limits.processes,
        }),
        _ => None,
    };
    let (status_r, status_w) = match pipe_cloexec() {
        Ok(p) => p,
        Err(e) => {
            return ProcessOutcome::SpawnFailed {
                message: format!("could not create the status pipe: {e}"),
            };
        }
    };
    let config = &spec.sandbox.config;
    let limits = config.limits;
    // Where the worker's namespace can bind it, the tmp is seen beneath the
    // zygote's anchor, so that one prepared ruleset serves every command.
    let tmp_at = match spec.sandbox.zygote().anchor() {
        Some(a) if config.level.is_confined() && spec.sandbox.probe.mount_namespace => {
            Some(a.to_path_buf())
        }
        _ => None,
    };
    let seen_tmp = tmp_at
        .as_ref()
        .map_or_else(|| tmp.path().to_path_buf(), |a| a.join(ANCHOR_TMP));
    // What the worker's final report carries: only the worker knows it.
    let report_token = uuid::Uuid::new_v4().simple().to_string();
    let mut command: Vec<OsString> = vec![spec.program.clone().into()];
    command.extend(spec.args.iter().map(OsString::from));
    let worker_args = WorkerArgs {
        level: config.level,
        workspace: spec.workspace.clone(),
        tmp: tmp.path().to_path_buf(),
        tmp_at,
        cpu_secs: limits.cpu_secs,
        address_space_bytes: limits.address_space_bytes,
        file_size_bytes: limits.file_size_bytes,
        processes: limits.processes,
        open_files: limits.open_files,
        kill_grace_ms: KILL_GRACE.as_millis() as u64,
        protect: config.protected_paths.clone(),
        read: config.extra_read_paths.clone(),
        // Set by the zygote's handle to the cgroup it picks.
        cgroup: None,
        best_effort: config.allow_weaker,
        protected_fd: protected.as_ref().map(|_| PROTECTED_FD),
        landlock_only: config.landlock_only,
        report_token: Some(report_token.clone()),
        command,
    };
    let mut env = command_env();
    env.push(("TMPDIR".into(), seen_tmp.clone().into_os_string()));
    if config.level.is_confined() {
        // The server user's home is outside the ruleset: tools that read
        // dotfiles there (git's ~/.gitconfig) would fail with a denial that
        // has nothing to do with the command. The private tmp stands in.
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".into(), seen_tmp.into_os_string()));
    }
    // One pipe for stdout and stderr: the output is one stream, in the
    // order the command wrote it (as a terminal shows it), read by this
    // task alone (see [`OutputPipe`]).
    let (out_r, out_w, err_w, stdin) = match (
        pipe_cloexec().and_then(|(r, w)| Ok((r, w.try_clone()?, w))),
        std::fs::File::open("/dev/null"),
    ) {
        (Ok((out_r, out_w, err_w)), Ok(null)) => (out_r, out_w, err_w, OwnedFd::from(null)),
        (Err(e), _) | (_, Err(e)) => {
            return ProcessOutcome::SpawnFailed {
                message: format!("could not create the command's pipes: {e}"),
            };
        }
    };
    let request = Request {
        cwd: spec.cwd.clone(),
        env: env
            .into_iter()
            .map(|(k, v)| (OsString::from(k), v))
            .collect(),
        worker_args,
        pids_cgroup,
        stdin,
        stdout: out_w,
        stderr: err_w,
        status: status_w,
        protected,
    };
    // The request (and with it our copies of the write ends and the
    // protected set) is dropped once sent: only the worker and the zygote
    // hold the status pipe's write end, so its end of file means the
    // worker was reaped.
    let spawned = match spec.sandbox.zygote().spawn(request).await {
        Ok(s) => s,
        Err(message) => {
            return ProcessOutcome::SpawnFailed {
                message: format!("could not start the sandbox worker: {message}"),
            };
        }
    };
    let cgroup = spawned.cgroup;
    let mut worker = Worker {
        pidfd: spawned.pidfd,
        ended: false,
    };
    let mut status = StatusPipe::read(status_r, report_token);
    events.send_event(ProcessEvent::Started { pid: spawned.pid });

    let mut out = OutputPipe::new(out_r);

    let mut sink = OutputSink::new(spec.limits, Box::new(events));
    if let Some(spill) = spec.spill.take() {
        sink.spill = SpillState::Armed(spill);
    }
    let deadline = tokio::time::sleep(spec.timeout);
    tokio::pin!(deadline);

    enum End {
        Exited,
        TimedOut,
        Cancelled,
    }
    let mut reported = None;
    let end = loop {
        tokio::select! {
            r = &mut status.ended => {
                reported = Some(match r {
                    Ok(r) => r,
                    // No final report: what the pipe held when it closed.
                    Err(_) => (&mut status.reaped).await.unwrap_or_default(),
                });
                break End::Exited;
            }
            () = out.readable(), if out.is_open() => out.read_some(&mut sink),
            () = &mut deadline => break End::TimedOut,
            () = token.cancelled() => break End::Cancelled,
        }
    };
    let reported = match reported {
        Some(r) => r,
        None => stop_worker(&worker, &mut status.reaped, &mut out, &mut sink).await,
    };
    if reported.is_final() {
        // The worker's own report: every process of the command is reaped.
        // (Without it, the cgroup sweep behind the call decides.)
        tmp.command_ended();
    }
    worker.ended = true;
    // The worker reaped everything it could; the cgroup sweep catches what
    // a SIGKILLed worker could not. After the worker's own report this runs
    // behind the call: the worker is then still exiting, and its cgroup
    // and the private tmp go once the zygote reaped it.
    let workspace = spec.workspace.clone();
    // A confined command cannot have changed its cgroup (Landlock grants
    // nothing under /sys/fs/cgroup): it may be kept. Not where the kernel
    // enforces less than the level (`--sandbox-allow-weaker`).
    let confined = config.level.is_confined() && spec.sandbox.enforced();
    let sandbox = spec.sandbox.clone();
    if status.reaped.is_finished() {
        let keep = confined.then(|| sandbox.zygote().cgroups());
        remove_after(cgroup, keep, tmp, &tmps, &workspace).await;
    } else {
        let mut exiting = status.reaped;
        tokio::spawn(async move {
            if tokio::time::timeout(WORKER_EXIT_GRACE, &mut exiting)
                .await
                .is_err()
            {
                // Stopped (or stuck) after its command was over: nothing of
                // the command may outlive its call, the worker included (a
                // breaker's finding: a worker stopped by another session's
                // unconfined command held its cgroup and pipes for good).
                worker.signal(Signal::SIGKILL);
                let _ = exiting.await;
            }
            let keep = confined.then(|| sandbox.zygote().cgroups());
            remove_after(cgroup, keep, tmp, &tmps, &workspace).await;
        });
    }
    if reported.is_final() {
        // The worker's own report (its token checked): the command and every
        // descendant are reaped, so all they wrote is in the pipe now, and
        // nobody is left to write more. Read without waiting for the end of
        // file, which comes with the worker's exit: waiting was one more
        // wake-up of this task on every call's path.
        out.read_now(&mut sink);
    } else {
        out.drain(&mut sink).await;
    }
    drop(out);
    let output = sink.finish();
    if let Some(message) = reported.spawn_error {
        return ProcessOutcome::SpawnFailed {
            message: format!("could not start the sandbox worker: {message}"),
        };
    }
    if let Some(message) = reported.setup_error {
        return ProcessOutcome::SandboxSetupFailed { message, output };
    }
    match end {
        End::Exited => {
            // The worker's report is exact; its own exit (as the zygote
            // reaped it) mirrors it, and stands in when it reported none.
            let (exit_code, signal) = match (reported.exit_code, reported.signal) {
                (None, None) => (reported.worker_exit_code, reported.worker_signal),
                other => other,
            };
            classify(config.level, exit_code, signal, output)
        }
        End::TimedOut => ProcessOutcome::TimedOut { output },
        End::Cancelled => ProcessOutcome::Cancelled { output },
    }
}

/// What a command leaves once its worker is gone: its cgroup (swept of
/// anything a SIGKILLed worker could not reap) and its private tmp, kept
/// for the next command when the command left it as it was made (see
/// [`TmpPool`]), else removed on a blocking thread (a command may leave any
/// number of files there).
async fn remove_after(
    cgroup: Option<super::cgroup::CommandCgroup>,
    keep_cgroup: Option<&super::cgroup::CgroupPool>,
    tmp: PooledTmp,
    tmps: &TmpPool,
    workspace: &std::path::Path,
) {
    if let Some(cgroup) = cgroup {
        cgroup.remove(keep_cgroup).await;
    }
    // Every process of the command is gone: the worker was reaped and the
    // cgroup swept.
    let Some(tmp) = tmps.give_back(workspace, tmp) else {
        return;
    };
    match tokio::task::spawn_blocking(move || tmp.close()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "could not remove a command's private tmp"),
        Err(e) => tracing::warn!(error = %e, "the private tmp's removal did not finish"),
    }
}

/// The running worker, signalled through its pidfd (never a recycled pid).
/// Dropped before it ended (the call's future was dropped), it is killed,
/// and the command with it (its parent-death signal).
struct Worker {
    pidfd: OwnedFd,
    ended: bool,
}

impl Worker {
    fn signal(&self, sig: Signal) {
        // SAFETY: pidfd_send_signal on a pidfd we own; ESRCH once it ended.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                sig as libc::c_int,
                std::ptr::null::<libc::siginfo_t>(),
                0 as libc::c_uint,
            );
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.ended {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// A failed confined command whose output shows a sandbox refusal is
/// [`ProcessOutcome::SandboxDenied`]; everything else is what it is.
fn classify(
    level: SandboxLevel,
    exit_code: Option<i32>,
    signal: Option<i32>,
    output: String,
) -> ProcessOutcome {
    let failed = exit_code != Some(0);
    if failed && level.is_confined() {
        let network_denied = !level.allows_network();
        let evidence = output
            .lines()
            .find(|l| {
                DENIAL_MARKERS.iter().any(|m| l.contains(m))
                    || (network_denied && NETWORK_FAILURE_MARKERS.iter().any(|m| l.contains(m)))
            })
            .map(str::to_string);
        if let Some(evidence) = evidence {
            return ProcessOutcome::SandboxDenied {
                exit_code,
                signal,
                output,
                evidence,
            };
        }
    }
    ProcessOutcome::Exited {
        exit_code,
        signal,
        output,
    }
}

/// The command's environment: the allowlist, minus anything named like a
/// secret.
fn command_env() -> Vec<(String, OsString)> {
    ENV_ALLOWLIST
        .iter()
        .filter(|k| {
            let upper = k.to_ascii_uppercase();
            !SECRET_MARKERS.iter().any(|m| upper.contains(m))
        })
        .filter_map(|k| std::env::var_os(k).map(|v| (k.to_string(), v)))
        .collect()
}

/// SIGTERM to the worker, which forwards it to the command's group and every
/// descendant and SIGKILLs them after [`KILL_GRACE`]; if the worker itself
/// is not gone after the grace and [`WORKER_EXIT_SLACK`], SIGKILL it. Output
/// keeps being read meanwhile so that a writer blocked on a full pipe can
/// die. Returns the status report, complete once the worker was reaped.
async fn stop_worker(
    worker: &Worker,
    status_reader: &mut tokio::task::JoinHandle<Reported>,
    out: &mut OutputPipe,
    sink: &mut OutputSink,
) -> Reported {
    worker.signal(Signal::SIGTERM);
    let until = tokio::time::Instant::now() + KILL_GRACE + WORKER_EXIT_SLACK;
    loop {
        tokio::select! {
            r = &mut *status_reader => return r.unwrap_or_default(),
            () = out.readable(), if out.is_open() => out.read_some(sink),
            () = tokio::time::sleep_until(until) => break,
        }
    }
    tracing::warn!("sandbox worker ignored SIGTERM; killing it");
    worker.signal(Signal::SIGKILL);
    status_reader.await.unwrap_or_default()
}

/// The read end of the command's output pipe (stdout and stderr), read by
/// the call's own task as it becomes readable: no task per pipe and no
/// channel between them and the call (each was a wake-up on the path; the
/// end of file of two pipes was two more at every call's end).
struct OutputPipe {
    /// `None` once at end of file (or unreadable).
    rx: Option<tokio::net::unix::pipe::Receiver>,
    buf: Vec<u8>,
}

/// Reads per wake-up before the call's other events get a turn (a command
/// writing without pause must not starve its timeout or cancel).
const READS_PER_TURN: usize = 16;

/// Most reads of what the pipe holds at the worker's report: far more than
/// a pipe holds packets (`pipe-max-size` is 1 MiB, 256 pages, for an
/// unprivileged command) or 64 KiB reads.
const MAX_READS_AT_END: usize = 1 << 16;

impl OutputPipe {
    fn new(fd: OwnedFd) -> Self {
        let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .inspect_err(|e| tracing::warn!(error = %e, "cannot read a command's output pipe"))
            .ok();
        Self {
            rx,
            buf: Vec::new(),
        }
    }

    fn is_open(&self) -> bool {
        self.rx.is_some()
    }

    /// Until there is something to read (or end of file); pending forever
    /// once closed (callers guard it with [`Self::is_open`]).
    async fn readable(&self) {
        match &self.rx {
            Some(rx) => {
                let _ = rx.readable().await;
            }
            None => std::future::pending().await,
        }
    }

    /// Reads what is there, at most `turns` reads, until the pipe is empty
    /// or closed.
    fn read_up_to(&mut self, sink: &mut OutputSink, turns: usize) {
        for _ in 0..turns {
            let Some(rx) = &self.rx else {
                return;
            };
            // Into spare capacity: nothing is zeroed, and only the pages a
            // read fills are ever touched.
            self.buf.clear();
            self.buf.reserve(READ_CHUNK);
            match rx.try_read_buf(&mut self.buf) {
                Ok(0) => self.rx = None,
                Ok(_) => sink.push(&self.buf),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => self.rx = None,
            }
        }
    }

    /// After a wake-up: reads what is there, a turn's worth.
    fn read_some(&mut self, sink: &mut OutputSink) {
        self.read_up_to(sink, READS_PER_TURN);
    }

    /// Reads what is in the pipe now, without waiting for more, until it
    /// is empty: with no writer left, that is all there will be. Not a
    /// count of reads worked out from the pipe's size: a command may put
    /// its pipe in packet mode (`O_DIRECT`), where each read returns one
    /// write, however small (a breaker lost ~240 lines that way). Bounded
    /// only against a writer that should not exist (one that escaped the
    /// sweep): [`MAX_READS_AT_END`].
    fn read_now(&mut self, sink: &mut OutputSink) {
        self.read_up_to(sink, MAX_READS_AT_END);
    }

    /// Reads to end of file, for at most [`DRAIN_TIMEOUT`] (a descendant
    /// that escaped the sweep may hold the pipe open).
    async fn drain(&mut self, sink: &mut OutputSink) {
        let until = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        while self.is_open() {
            if tokio::time::timeout_at(until, self.readable())
                .await
                .is_err()
            {
                return;
            }
            self.read_some(sink);
        }
    }
}

// === the protected paths ===

/// The workspace's protected paths, from the cache the sandbox keeps (see
/// [`super::protected`]), for the worker: the read end of a pipe, returned
/// at once, into which the walk on the blocking pool writes them when it
/// has them (NUL after each absolute path, then the end mark: one more
/// NUL). The request need not wait for the walk: the zygote's hand-over and
/// the worker's start overlap it, and the worker reads the pipe before it
/// does anything with the paths. A walk that does not finish its write
/// leaves no end mark, and the worker then refuses to run the command
/// (fail closed). `None` when no pipe could be made; the worker then walks
/// the workspace itself, as fail-closed as the cache.
fn protected_set(spec: &ProcessSpec) -> Option<OwnedFd> {
    let (read, write) = match pipe_cloexec() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "could not pass the protected paths; the worker walks the workspace");
            return None;
        }
    };
    let cache = spec.sandbox.protected_paths(&spec.workspace);
    if let Some(found) = cache.current_if_unchanged() {
        let text = protected_text(&found);
        // At most PIPE_BUF bytes into the new, empty pipe: written whole
        // without blocking. A longer list goes the blocking way below.
        if text.len() <= libc::PIPE_BUF {
            use std::io::Write;
            if let Err(e) = std::fs::File::from(write).write_all(&text) {
                tracing::debug!(error = %e, "the worker did not take the protected paths");
            }
            return Some(read);
        }
    }
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let text = protected_text(&cache.current());
        // Blocks while the worker has not read a list longer than the
        // pipe; fails (EPIPE) when no worker will: the call then ends on
        // the worker's setup failure or the zygote's.
        if let Err(e) = std::fs::File::from(write).write_all(&text) {
            tracing::debug!(error = %e, "the worker did not take the protected paths");
        }
    });
    Some(read)
}

/// `paths` as the worker reads them: NUL after each, then one more NUL
/// (the end mark; no path is empty).
fn protected_text(paths: &[PathBuf]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut text =
        Vec::with_capacity(paths.iter().map(|p| p.as_os_str().len() + 1).sum::<usize>() + 1);
    for p in paths {
        text.extend_from_slice(p.as_os_str().as_bytes());
        text.push(0);
    }
    text.push(0);
    text
}

// === the worker's status report ===

/// What the worker reported on the status pipe (one JSON object a line).
#[derive(Debug, Default, Clone)]
struct Reported {
    exit_code: Option<i32>,
    signal: Option<i32>,
    setup_error: Option<String>,
    /// The worker never started: its directory, environment or options
    /// could not be set (the zygote's child says why).
    spawn_error: Option<String>,
    /// How the worker process itself ended, as the zygote reaped it.
    worker_exit_code: Option<i32>,
    worker_signal: Option<i32>,
}

fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The status pipe, read as it is written: `ended` resolves at the worker's
/// own report of how the command ended (written once it reaped the command
/// and every descendant), `reaped` at end of file (the zygote reaped the
/// worker and closed its copy). A call ends at the first: the worker's exit,
/// its mount namespace's teardown and the zygote's reap are its own
/// cleanup, not the command's, and cost 1-5 ms (BENCHMARKS.md, "Session
/// 12"). Without such a report (a worker killed, a setup error) `ended`
/// fails and only `reaped` tells.
///
/// The report counts only with the command's token
/// ([`WorkerArgs::report_token`]): ending the call on it trusts that the
/// command and its descendants are gone, and a line written on the pipe
/// by anyone else (a command that got hold of its write end) would end
/// the call while the command runs on, past its timeout and cancel. Such
/// a line is ignored; end of file still ends the call.
struct StatusPipe {
    ended: oneshot::Receiver<Reported>,
    reaped: tokio::task::JoinHandle<Reported>,
}

impl StatusPipe {
    fn read(fd: OwnedFd, token: String) -> Self {
        let (tx, ended) = oneshot::channel();
        let reaped = tokio::spawn(read_status(fd, tx, token));
        Self { ended, reaped }
    }
}

async fn read_status(fd: OwnedFd, ended: oneshot::Sender<Reported>, token: String) -> Reported {
    let mut ended = Some(ended);
    let mut r = Reported::default();
    let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return r;
    };
    // Read to the end of file however much comes (what `reaped` means:
    // stopping early would end the call as if the worker were reaped),
    // keeping only the line being read, and not one longer than
    // MAX_STATUS_LINE (`long`: skipped up to its newline).
    let mut line = Vec::new();
    let mut long = false;
    let mut chunk = [0u8; STATUS_READ_CHUNK];
    loop {
        let n = match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for piece in chunk[..n].split_inclusive(|&b| b == b'\n') {
            let (body, complete) = match piece.split_last() {
                Some((b'\n', body)) => (body, true),
                _ => (piece, false),
            };
            if line.len() + body.len() > MAX_STATUS_LINE {
                long = true;
                line.clear();
            } else if !long {
                line.extend_from_slice(body);
            }
            if complete {
                if !long
                    && r.take_line(&line, &token)
                    && let Some(tx) = ended.take()
                {
                    let _ = tx.send(r.clone());
                }
                line.clear();
                long = false;
            }
        }
    }
    if !long {
        r.take_line(&line, &token);
    }
    r
}

impl Reported {
    /// Whether the worker's own final report came (how the command ended,
    /// its token checked): every process of the command is reaped.
    fn is_final(&self) -> bool {
        self.exit_code.is_some() || self.signal.is_some()
    }

    /// Takes one JSON line of the report; true when it was the worker's
    /// final one (how the command ended), which carries `token`: a final
    /// line without it is not the worker's, and is ignored.
    fn take_line(&mut self, line: &[u8], token: &str) -> bool {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return false;
        };
        let final_line = v.get("exit_code").is_some() || v.get("signal").is_some();
        if final_line && v.get("token").and_then(serde_json::Value::as_str) != Some(token) {
            return false;
        }
        if let Some(m) = v.get("setup_error").and_then(|m| m.as_str()) {
            self.setup_error = Some(m.to_string());
        }
        let int = |v: &serde_json::Value, k| {
            v.get(k)
                .and_then(serde_json::Value::as_i64)
                .and_then(|c| i32::try_from(c).ok())
        };
        let code = int(&v, "exit_code");
        let signal = int(&v, "signal");
        if code.is_some() {
            self.exit_code = code;
        }
        if signal.is_some() {
            self.signal = signal;
        }
        if let Some(m) = v.get("spawn_error").and_then(|m| m.as_str()) {
            self.spawn_error = Some(m.to_string());
        }
        if let Some(w) = v.get("worker_exit") {
            self.worker_exit_code = int(w, "exit_code");
            self.worker_signal = int(w, "signal");
        }
        code.is_some() || signal.is_some()
    }
}

// === output ===

/// Keeps the head and tail of the output within `max_bytes`, counts what
/// was dropped in between, and streams live chunks up to
/// `max_streamed_bytes`. Memory stays flat however much a command prints:
/// the tail is a fixed ring written with slice copies.
///
/// Binary output (a NUL byte, or bytes that are not UTF-8) is detected as it
/// arrives, as Gemini CLI's shell tool does: from the first such byte on
/// nothing more is streamed or kept, only counted; the result keeps the
/// text before it and says how many bytes of binary output followed, rather
/// than tens of thousands of U+FFFD.
struct OutputSink {
    limits: OutputLimits,
    head: Vec<u8>,
    tail: Ring,
    omitted: u64,
    streamed: usize,
    /// Bytes of an incomplete UTF-8 sequence held back from streaming.
    pending: Vec<u8>,
    /// The incomplete UTF-8 sequence that ended the previous chunk (at most
    /// 3 bytes), so a character split across reads is not taken for binary.
    carry: Vec<u8>,
    /// Bytes seen so far.
    seen: u64,
    /// Once binary output began: where (byte offset) and how many bytes.
    binary: Option<BinaryOutput>,
    events: Box<dyn ProcessEvents>,
    spill: SpillState,
}

#[derive(Debug, Clone, Copy)]
struct BinaryOutput {
    offset: u64,
    bytes: u64,
}

/// How a chunk reads as text, given the incomplete UTF-8 sequence that
/// ended the previous one (`carry`): where binary output begins in `chunk`
/// (the first NUL byte or invalid UTF-8 sequence; 0 when the carried
/// character does not complete), else the incomplete sequence it ends with.
/// No copy of the chunk: this runs on every 64 KiB read.
fn scan_text(carry: &[u8], chunk: &[u8]) -> Result<Vec<u8>, usize> {
    let mut skip = 0;
    if !carry.is_empty() {
        // Complete the carried character with the chunk's first bytes.
        let mut small = carry.to_vec();
        for (i, b) in chunk.iter().take(4 - carry.len()).enumerate() {
            small.push(*b);
            match std::str::from_utf8(&small) {
                Ok(_) => {
                    skip = i + 1;
                    break;
                }
                Err(e) if e.error_len().is_some() => return Err(0),
                Err(_) => {}
            }
        }
        if skip == 0 {
            return if small.len() < 4 && chunk.len() < 4 - carry.len() {
                Ok(small)
            } else {
                Err(0)
            };
        }
    }
    let rest = &chunk[skip..];
    let nul = if rest.contains(&0) {
        rest.iter().position(|b| *b == 0)
    } else {
        None
    };
    let (invalid, tail) = match std::str::from_utf8(rest) {
        Ok(_) => (None, Vec::new()),
        Err(e) if e.error_len().is_some() => (Some(e.valid_up_to()), Vec::new()),
        Err(e) => (None, rest[e.valid_up_to()..].to_vec()),
    };
    match (nul, invalid) {
        (Some(a), Some(b)) => Err(skip + a.min(b)),
        (Some(a), None) | (None, Some(a)) => Err(skip + a),
        (None, None) => Ok(tail),
    }
}

impl OutputSink {
    fn new(limits: OutputLimits, events: Box<dyn ProcessEvents>) -> Self {
        let head_cap = limits.max_bytes / 2;
        Self {
            limits,
            head: Vec::new(),
            tail: Ring::new(limits.max_bytes - head_cap),
            omitted: 0,
            streamed: 0,
            pending: Vec::new(),
            carry: Vec::new(),
            seen: 0,
            binary: None,
            events,
            spill: SpillState::Off,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if let Some(b) = &mut self.binary {
            b.bytes += chunk.len() as u64;
            return;
        }
        match scan_text(&self.carry, chunk) {
            Err(text) => {
                let offset = self.seen + text as u64;
                self.binary = Some(BinaryOutput {
                    offset,
                    bytes: (chunk.len() - text) as u64,
                });
                self.keep(&chunk[..text]);
                self.events.send_event(ProcessEvent::Output(format!(
                    "\n[binary output detected at byte {offset}: not streamed]\n"
                )));
            }
            Ok(tail) => {
                self.carry = tail;
                self.keep(chunk);
            }
        }
    }

    /// Streams and keeps (head and tail) a chunk of text.
    fn keep(&mut self, chunk: &[u8]) {
        self.seen += chunk.len() as u64;
        self.stream(chunk);
        let head_cap = self.limits.max_bytes / 2;
        let take = head_cap.saturating_sub(self.head.len()).min(chunk.len());
        self.head.extend_from_slice(&chunk[..take]);
        self.spill(&chunk[take..]);
        self.omitted += self.tail.push(&chunk[take..]);
    }

    /// Copies the output to the spill file once it outgrows the cap: at
    /// that moment head and tail still hold every byte so far (nothing was
    /// dropped yet), so the file gets head, tail and `rest` (the part of
    /// this chunk past the head), then every later chunk.
    fn spill(&mut self, rest: &[u8]) {
        match &mut self.spill {
            SpillState::Off => {}
            SpillState::Armed(_) => {
                if self.seen <= self.limits.max_bytes as u64 {
                    return;
                }
                let SpillState::Armed(spill) = std::mem::replace(&mut self.spill, SpillState::Off)
                else {
                    return;
                };
                let Some((file, cap)) = (spill.open)() else {
                    return;
                };
                self.spill = SpillState::Writing {
                    file,
                    room: cap,
                    written: spill.written,
                };
                let so_far = [self.head.clone(), self.tail.contents(), rest.to_vec()].concat();
                self.write_spill(&so_far);
            }
            // The head is full by now: all of `rest` is new output.
            SpillState::Writing { .. } => self.write_spill(rest),
        }
    }

    fn write_spill(&mut self, data: &[u8]) {
        use std::io::Write;
        let SpillState::Writing {
            file,
            room,
            written,
        } = &mut self.spill
        else {
            return;
        };
        let part = &data[..data.len().min(*room as usize)];
        if part.is_empty() {
            return;
        }
        match file.write_all(part) {
            Ok(()) => {
                *room -= part.len() as u64;
                written.fetch_add(part.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            // A full disk stops keeping; what was written stays readable.
            Err(_) => self.spill = SpillState::Off,
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
            self.events.send_event(ProcessEvent::Output(
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
        out.push_str(&String::from_utf8_lossy(&self.tail.contents()));
        if let Some(b) = self.binary {
            out.push_str(&format!(
                "\n[binary output: {} bytes from byte {} on, not shown]",
                b.bytes, b.offset
            ));
        }
        out
    }
}

/// The last `cap` bytes written. Memory grows with the output, up to
/// `cap` (a command that prints nothing holds none): a zeroed buffer of
/// the whole cap, half of `output_cap_bytes`, was made for every command.
struct Ring {
    /// Until it holds `cap` bytes, the output in order; then a ring whose
    /// oldest byte is at `start`.
    buf: Vec<u8>,
    cap: usize,
    start: usize,
}

impl Ring {
    fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            start: 0,
        }
    }

    /// Appends `data`; returns how many bytes fell out of the front.
    fn push(&mut self, data: &[u8]) -> u64 {
        let cap = self.cap;
        if data.is_empty() {
            return 0;
        }
        if cap == 0 {
            return data.len() as u64;
        }
        if data.len() >= cap {
            let dropped = self.buf.len() + data.len() - cap;
            self.buf.clear();
            self.buf.reserve_exact(cap);
            self.buf.extend_from_slice(&data[data.len() - cap..]);
            self.start = 0;
            return dropped as u64;
        }
        // Not full yet: appended, growing by doubling but never past `cap`.
        let fit = data.len().min(cap - self.buf.len());
        if fit > 0 {
            let want = self.buf.len() + fit;
            if want > self.buf.capacity() {
                let grown = want.max(self.buf.capacity() * 2).min(cap);
                self.buf.reserve_exact(grown - self.buf.len());
            }
            self.buf.extend_from_slice(&data[..fit]);
        }
        // Full: the rest overwrites the oldest bytes, from `start` on.
        let rest = &data[fit..];
        if rest.is_empty() {
            return 0;
        }
        let first = rest.len().min(cap - self.start);
        self.buf[self.start..self.start + first].copy_from_slice(&rest[..first]);
        self.buf[..rest.len() - first].copy_from_slice(&rest[first..]);
        self.start = (self.start + rest.len()) % cap;
        rest.len() as u64
    }

    fn contents(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buf.len());
        out.extend_from_slice(&self.buf[self.start..]);
        out.extend_from_slice(&self.buf[..self.start]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_keeps_head_and_tail() {
        let (tx, _rx) = mpsc::unbounded_channel::<ProcessEvent>();
        let mut sink = OutputSink::new(
            OutputLimits {
                max_bytes: 10,
                max_streamed_bytes: 0,
            },
            Box::new(tx),
        );
        sink.push(b"0123456789");
        sink.push(b"abcdefghij");
        assert_eq!(
            sink.finish(),
            "01234\n... [10 bytes of output omitted] ...\nfghij"
        );
    }

    #[test]
    fn binary_output_stops_the_text_and_is_counted() {
        let (tx, mut rx) = mpsc::unbounded_channel::<ProcessEvent>();
        let mut sink = OutputSink::new(OutputLimits::default(), Box::new(tx));
        // "é" split across two reads is text, not binary.
        sink.push(b"caf\xc3");
        sink.push(b"\xa9\n");
        sink.push(b"more\x00\x01\xff");
        sink.push(&[0xffu8; 1000]);
        assert_eq!(
            sink.finish(),
            "caf\u{e9}\nmore\n[binary output: 1003 bytes from byte 10 on, not shown]"
        );
        let mut streamed = String::new();
        while let Ok(ProcessEvent::Output(c)) = rx.try_recv() {
            streamed.push_str(&c);
        }
        assert_eq!(
            streamed,
            "caf\u{e9}\nmore\n[binary output detected at byte 10: not streamed]\n"
        );
        for (carry, chunk, expected) in [
            (&b""[..], &b"abc"[..], Ok(vec![])),
            (b"", b"ab\xe2\x82", Ok(b"\xe2\x82".to_vec())),
            (b"\xe2\x82", b"\xac!", Ok(vec![])),
            (b"\xe2", b"\x82", Ok(b"\xe2\x82".to_vec())),
            (b"\xe2", b"!", Err(0)),
            (b"", b"a\x00", Err(1)),
            (b"", b"ab\x80", Err(2)),
            (b"\xc3", b"\xa9\x00", Err(1)),
        ] {
            assert_eq!(scan_text(carry, chunk), expected, "{carry:?} {chunk:?}");
        }
    }

    #[test]
    fn ring_wraps_and_counts_drops() {
        let mut r = Ring::new(4);
        assert_eq!(r.contents(), b"");
        assert_eq!(r.buf.capacity(), 0);
        assert_eq!(r.push(b"ab"), 0);
        assert_eq!(r.contents(), b"ab");
        assert_eq!(r.push(b"cde"), 1);
        assert_eq!(r.contents(), b"bcde");
        assert_eq!(r.push(b"f"), 1);
        assert_eq!(r.contents(), b"cdef");
        assert_eq!(r.push(b"ghi"), 3);
        assert_eq!(r.contents(), b"fghi");
        assert_eq!(r.push(b"0123456"), 7);
        assert_eq!(r.contents(), b"3456");
        assert_eq!(r.push(b"78"), 2);
        assert_eq!(r.contents(), b"5678");
        assert_eq!(r.buf.capacity(), 4);
        let mut empty = Ring::new(0);
        assert_eq!(empty.push(b"xy"), 2);
        assert_eq!(empty.contents(), b"");
    }

    /// Against a plain model (everything kept, the last `cap` bytes read
    /// off its end), over pushes of every size around the cap.
    #[test]
    fn ring_keeps_exactly_the_last_cap_bytes() {
        for cap in [1usize, 2, 3, 7, 16] {
            let mut r = Ring::new(cap);
            let mut all: Vec<u8> = Vec::new();
            let mut dropped = 0u64;
            let mut next = 0u8;
            for size in [0usize, 1, 2, 3, 5, 7, 8, 15, 16, 17, 1, 0, 31, 2, 9] {
                let chunk: Vec<u8> = (0..size)
                    .map(|_| {
                        next = next.wrapping_add(1);
                        next
                    })
                    .collect();
                all.extend_from_slice(&chunk);
                dropped += r.push(&chunk);
                let keep = all.len().min(cap);
                assert_eq!(r.contents(), &all[all.len() - keep..], "cap {cap}");
                assert_eq!(dropped, (all.len() - keep) as u64, "cap {cap}");
                assert!(r.buf.capacity() <= cap, "cap {cap}");
            }
        }
    }

    #[test]
    fn denial_needs_failure_confinement_and_a_marker() {
        let out = "bash: line 1: /tmp/x: Permission denied\n".to_string();
        assert!(matches!(
            classify(SandboxLevel::WorkspaceWrite, Some(1), None, out.clone()),
            ProcessOutcome::SandboxDenied { .. }
        ));
        assert!(matches!(
            classify(SandboxLevel::None, Some(1), None, out.clone()),
            ProcessOutcome::Exited { .. }
        ));
        assert!(matches!(
            classify(SandboxLevel::WorkspaceWrite, Some(0), None, out),
            ProcessOutcome::Exited { .. }
        ));
    }

    #[test]
    fn secrets_never_reach_the_environment() {
        assert!(
            command_env()
                .iter()
                .all(|(k, _)| !k.contains("TOKEN") && !k.contains("KEY"))
        );
    }
}
