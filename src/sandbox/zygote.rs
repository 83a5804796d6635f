//! The zygote: one worker process per sandbox, started once and forked for
//! every command, instead of the server forking itself and re-executing
//! this ~29 MB binary as `toolsched sandbox-exec` per command (issue 17
//! item 3; BENCHMARKS.md, "Session 7"). Loading and relocating the binary
//! alone cost about as much as the whole `bash -c true` it ran.
//!
//! What this file owns: the zygote process (`toolsched sandbox-zygote`,
//! entered from `main` before anything else runs), its control protocol,
//! and the server's handle on it ([`Zygote`]). What each forked child does
//! next is exactly the worker's ([`super::worker`]): the child only puts the
//! command's fds, directory and environment where `sandbox-exec` would have
//! found them after `exec`, then runs the same code.
//!
//! **Why it confines nothing less.** The zygote is started with an empty
//! environment, stdin/stdout/stderr on `/dev/null`, and no fd of the server
//! but its end of the control socket; it is single-threaded and never
//! confined (like the server), and holds nothing a command can reach: a
//! forked child closes every fd but the five it was sent before running
//! any of the worker's code, and the worker then confines the command
//! exactly as before. What the children inherit on purpose is memory: the
//! compiled seccomp programs and the kernel's last capability number,
//! prepared once here ([`super::worker::prepare`]); every value there
//! depends only on the architecture and the kernel, not on the command.
//! And one fd, on [`RULESET_FD`]: the Landlock ruleset prepared here for
//! the command's options ([`super::worker::RulesetCache`], which says why
//! sharing it grants nothing a fresh build would not). The zygote reads
//! each request's options itself to pick it; as root it also lives in a
//! private mount namespace with one hidden `/proc` (`--hide-proc`), which
//! each worker's namespace copies, so that the `/proc` a prepared ruleset
//! grants is the one the command sees.
//!
//! **Protocol** (a `SOCK_SEQPACKET` socket pair; the zygote's end is its fd
//! [`CONTROL_FD`]): the server sends one message per command, the bytes
//! [`REQUEST_TAG`] followed by the path of the pids cgroup it made for the
//! *next* command (if any), with `SCM_RIGHTS` carrying, in order, a memfd
//! holding the request (directory, environment, worker options, among them
//! this command's cgroup: see [`encode`]), the command's stdin, stdout and
//! stderr, the status pipe and, optionally, the protected-paths pipe. The
//! zygote hands the command to its spare worker when the spare joined the
//! command's cgroup, else forks a worker, and replies with the worker's pid
//! (4 bytes, native order; a negative errno when it could not fork) and a
//! pidfd of it. Then it forks the next spare, which joins the next cgroup:
//! once the command the spare took has started (its channel hangs up, see
//! [`Pending`]), or at once when it forked the worker itself.
//!
//! **The spare worker** ([`Spare`]; issue 17 item 3): a worker forked,
//! settled and moved into the next command's cgroup ahead, while the
//! previous command runs and the client prepares the next. (Joining
//! through `cgroup.procs` slept a full RCU grace period on cgroup v1,
//! BENCHMARKS.md "Session 8"; a single-threaded worker now joins through
//! `tasks`, which does not: see [`super::worker::join_cgroup`].)
//! The server still makes, and after the command sweeps and removes, every
//! cgroup ([`super::cgroup`]); it only makes each one a command early. The
//! cgroup a spare joined is removed by the zygote when the server is gone
//! (it kills and reaps the spare first), and by the server's handle when
//! the zygote is (a sweep after the zygote exited). The zygote keeps a copy of the status pipe until it has
//! reaped the child, then writes how the child ended (`{"worker_exit":…}`)
//! and closes it: end of file on the status pipe therefore means the worker
//! is gone, which is what the server waits for (it is not the worker's
//! parent and cannot `waitpid` it).
//!
//! **Lifetime.** Started on the first command of a sandbox (and again if it
//! died), killed when the last sandbox sharing it is dropped (the handle
//! owns the process, `kill_on_drop`). It exits by itself when the server's
//! end of the socket closes (the server died). Each worker it forks sets
//! `PR_SET_PDEATHSIG` and checks that its parent is still the zygote, so
//! workers and their commands die with the zygote as they died with the
//! server. The zygote itself sets no parent-death signal: that signal
//! follows the thread that spawned it, and a tokio thread may end long
//! before the server does.

#![allow(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::cgroup::{CgroupPool, CommandCgroup};
use super::worker::{
    ANCHOR_TMP, Forked, PROTECTED_FD, RulesetCache, SETUP_FAILED_EXIT, STATUS_FD, WorkerArgs,
};
use crate::scratch::{Kind, ScratchDir};

/// The zygote's subcommand (`main` dispatches on it before parsing
/// anything else, so the zygote never builds the server's command line).
pub const SUBCOMMAND: &str = "sandbox-zygote";

/// The fd the zygote finds its end of the control socket on.
pub const CONTROL_FD: RawFd = 3;

/// The zygote's option: make its mount namespace private with a hidden
/// `/proc` before forking any worker.
const HIDE_PROC_FLAG: &str = "--hide-proc";

/// The zygote's option naming the tmp anchor: it removes the anchor when
/// the server is gone (a server killed outright never drops its handle).
const ANCHOR_FLAG: &str = "--anchor";

/// The fd a forked worker finds its prepared Landlock ruleset on.
const RULESET_FD: RawFd = 5;

/// The first bytes of a request message; the rest of its bytes name the
/// cgroup for the next spare worker (none: a spare without one), its fds
/// carry the command.
const REQUEST_TAG: &[u8; 4] = b"TSZ2";

/// Largest request message: the tag and a cgroup path (`PATH_MAX`).
const MAX_MESSAGE_BYTES: usize = REQUEST_TAG.len() + libc::PATH_MAX as usize;

/// How long dropping the handle waits for the zygote to exit by itself
/// after its socket closed (it kills its spare, waits for it, which may
/// take one RCU grace period, and removes its cgroup) before killing it.
const ZYGOTE_EXIT_WAIT: Duration = Duration::from_secs(2);

/// The fd a spare worker waits for its command on (below [`HIGH_FD`], above
/// everything placed for the command).
const SPARE_CHAN_FD: RawFd = HIGH_FD - 1;

/// Bits of a hand-over's one byte: which optional fds follow the five,
/// and whether the process the spare confined ahead fits the command (its
/// ruleset is the one the command's options map to).
const HANDOVER_PROTECTED: u8 = 1;
const HANDOVER_RULESET: u8 = 2;
const HANDOVER_AHEAD: u8 = 4;

/// The fd a spare worker finds the ruleset to confine ahead with on (see
/// [`Guess`]); closed once that is done.
const AHEAD_RULESET_FD: RawFd = SPARE_CHAN_FD - 1;

/// The fd a spare worker keeps the metadata listener of the process it
/// confined ahead on, through the placing of the command's fds.
const AHEAD_LISTENER_FD: RawFd = SPARE_CHAN_FD - 2;

/// The fd a spare worker that made its mount namespace ahead keeps the
/// zygote's on, through the placing of the command's fds.
const AHEAD_NAMESPACE_FD: RawFd = SPARE_CHAN_FD - 3;

/// Fds of a request: body, stdin, stdout, stderr, status; a sixth, the
/// protected paths, is optional.
const REQUEST_FDS: usize = 5;
const MAX_REQUEST_FDS: usize = REQUEST_FDS + 1;

/// Largest request body a forked child reads: the options hold the command
/// itself, which only the gRPC message size bounds (far below this); a
/// longer body is a setup failure, never a truncated command.
const MAX_REQUEST_BYTES: u64 = 64 << 20;

/// How long the server waits for the zygote's reply to one request (a fork
/// and a send): far above what it takes, so that a zygote that stopped
/// answering is replaced instead of holding every later command.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Received fds are first moved at or above this number in a forked child,
/// so that placing them on 0–4 cannot overwrite one not yet placed.
const HIGH_FD: RawFd = 64;

// === the server's side ===

/// One command for the zygote: where it runs, its environment, the
/// worker's options (their `cgroup` is set by [`Zygote::spawn`]), the pids
/// cgroup it needs, if any, and its fds.
pub struct Request {
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    pub worker_args: WorkerArgs,
    pub pids_cgroup: Option<PidsCgroup>,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub status: OwnedFd,
    pub protected: Option<OwnedFd>,
}

/// Where a command's pids cgroup is made: a child of `base` (a delegated
/// pids cgroup) with `pids.max` = `max`.
#[derive(Debug, Clone)]
pub struct PidsCgroup {
    pub base: PathBuf,
    pub max: u64,
}

/// A worker the zygote forked: its pid (for the Started event and logs), a
/// pidfd to signal it with (never a recycled pid), and the pids cgroup it
/// runs in, swept and removed when dropped (after the worker ended).
pub struct Spawned {
    pub pid: u32,
    pub pidfd: OwnedFd,
    pub cgroup: Option<CommandCgroup>,
}

/// The server's handle on the zygote of one worker binary.
pub struct Zygote {
    exe: PathBuf,
    /// Start the zygote in a private mount namespace with a hidden `/proc`
    /// (see [`main`]).
    hide_proc: bool,
    /// The anchor every command's private tmp is bound beneath (see
    /// [`super::worker::RulesetCache`]): an empty directory of ours holding
    /// an empty [`ANCHOR_TMP`]. `None` when it could not be made (commands
    /// then get their tmp at its own path, and build their own rulesets).
    anchor: Option<ScratchDir>,
    /// The running zygote; `None` before the first command and after it
    /// died. One request at a time: its reply is the next message.
    conn: tokio::sync::Mutex<Option<Conn>>,
    /// Commands' pids cgroups, emptied and kept for the next ones.
    cgroups: CgroupPool,
}

struct Conn {
    sock: AsyncFd<OwnedFd>,
    /// Killed (and reaped by tokio) when the handle is dropped.
    process: tokio::process::Child,
    /// The cgroup the zygote's spare worker joins (or joined), made with the
    /// last request: the next command's. Swept when the zygote goes (after
    /// the process: the spare dies with it).
    spare: Option<SpareCgroup>,
}

struct SpareCgroup {
    cgroup: CommandCgroup,
    base: PathBuf,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The zygote, told by the end of file on its socket, kills its
        // spare, waits for it and removes its cgroup itself (as when the
        // server dies); killing it outright is for one that does not exit.
        // The socket is closed before the kill below (fields drop after).
        // SAFETY: shutdown on a socket we own; it stays open until dropped.
        unsafe {
            libc::shutdown(self.sock.get_ref().as_raw_fd(), libc::SHUT_RDWR);
        }
        if let Some(pid) = self.process.id() {
            wait_pid_exit(pid as i32, ZYGOTE_EXIT_WAIT);
        }
        let _ = self.process.start_kill();
        // `spare` drops last: a sweep of what the zygote did not remove.
    }
}

impl std::fmt::Debug for Zygote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zygote")
            .field("exe", &self.exe)
            .finish_non_exhaustive()
    }
}

impl Zygote {
    /// A handle for the worker binary `exe`; nothing starts until the first
    /// [`Zygote::spawn`]. `hide_proc`: whether workers hide `/proc` (the
    /// zygote then does it once for all of them).
    pub fn new(exe: PathBuf, hide_proc: bool) -> Self {
        let anchor = ScratchDir::create(Kind::Anchor)
            .and_then(|d| std::fs::create_dir(d.path().join(ANCHOR_TMP)).map(|()| d));
        let anchor = match anchor {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(error = %e, "no tmp anchor: every confined command builds its own Landlock ruleset");
                None
            }
        };
        Self {
            exe,
            hide_proc,
            anchor,
            conn: tokio::sync::Mutex::new(None),
            cgroups: CgroupPool::default(),
        }
    }

    /// Where commands' emptied pids cgroups are kept (see
    /// [`CommandCgroup::remove`]).
    pub fn cgroups(&self) -> &CgroupPool {
        &self.cgroups
    }

    /// The tmp anchor (see [`super::WorkerArgs::tmp_at`]), if there is one.
    pub fn anchor(&self) -> Option<&Path> {
        self.anchor.as_ref().map(ScratchDir::path)
    }

    /// Runs `req` in a worker: the zygote's spare one, already in the
    /// cgroup made for this command with the previous request, or one it
    /// forks now. An error says why no worker started; the command then
    /// never ran.
    pub async fn spawn(&self, mut req: Request) -> Result<Spawned, String> {
        let mut conn = self.conn.lock().await;
        // A zygote that died since the last command (its socket reports
        // hang-up) is replaced before it is sent anything; one that dies
        // between the send and the reply fails this command only: the
        // command may have started, so it is never sent twice.
        if conn.as_ref().is_some_and(Conn::hung_up) {
            *conn = None;
        }
        if conn.is_none() {
            *conn = Some(self.start()?);
        }
        let Some(c) = conn.as_mut() else {
            return Err("the sandbox zygote is not running".into());
        };
        // This command's cgroup: the spare's when it is under the same base
        // (its pids.max set to this command's limit), else a new one; and
        // the next spare's, made now so that the spare settles in it while
        // this command runs.
        let (cgroup, next) = match &req.pids_cgroup {
            Some(want) => {
                let spare = c.spare.take().filter(|s| s.base == want.base);
                let cgroup = match spare {
                    Some(mut s) => {
                        s.cgroup.set_max(want.max).map_err(|e| {
                            format!("could not set the command's pids cgroup limit: {e}")
                        })?;
                        s.cgroup
                    }
                    None => self
                        .cgroups
                        .take(&want.base, want.max)
                        .map_err(|e| format!("could not create the command's pids cgroup: {e}"))?,
                };
                let next = match self.cgroups.take(&want.base, want.max) {
                    Ok(n) => Some(SpareCgroup {
                        cgroup: n,
                        base: want.base.clone(),
                    }),
                    Err(e) => {
                        // Only the next command's head start is lost.
                        tracing::warn!(error = %e, "could not create a pids cgroup ahead");
                        None
                    }
                };
                (Some(cgroup), next)
            }
            None => {
                c.spare = None;
                (None, None)
            }
        };
        req.worker_args.cgroup = cgroup.as_ref().map(|g| g.dir().to_path_buf());
        let body = encode(&req.cwd, &req.env, &req.worker_args)
            .map_err(|e| format!("could not write the worker's request: {e}"))?;
        let mut fds: Vec<RawFd> = vec![
            body.as_raw_fd(),
            req.stdin.as_raw_fd(),
            req.stdout.as_raw_fd(),
            req.stderr.as_raw_fd(),
            req.status.as_raw_fd(),
        ];
        if let Some(p) = &req.protected {
            fds.push(p.as_raw_fd());
        }
        // Where the zygote's next spare goes: a cgroup path, or empty for a
        // spare without one (no pids cgroup here).
        let mut message = REQUEST_TAG.to_vec();
        if let Some(n) = &next {
            tracing::debug!(cgroup = %n.cgroup.dir().display(), "a pids cgroup made ahead for the next command");
            message.extend_from_slice(n.cgroup.dir().as_os_str().as_bytes());
        }
        if let Err(e) = c.send(&message, &fds).await {
            *conn = None;
            return Err(format!("could not reach the sandbox zygote: {e}"));
        }
        c.spare = next;
        let reply = tokio::time::timeout(REPLY_TIMEOUT, c.recv_reply()).await;
        match reply {
            Ok(Ok((pid, Some(pidfd)))) if pid > 0 => Ok(Spawned {
                pid: pid as u32,
                pidfd,
                cgroup,
            }),
            Ok(Ok((pid, _))) => Err(format!(
                "the sandbox zygote could not fork the worker: {}",
                std::io::Error::from_raw_os_error(-pid)
            )),
            Ok(Err(e)) => {
                *conn = None;
                Err(format!("the sandbox zygote did not answer: {e}"))
            }
            Err(_) => {
                *conn = None;
                Err(format!(
                    "the sandbox zygote did not answer within {} s",
                    REPLY_TIMEOUT.as_secs()
                ))
            }
        }
    }

    fn start(&self) -> Result<Conn, String> {
        let (ours, theirs) = seqpacket_pair()
            .map_err(|e| format!("could not start the sandbox zygote: socketpair: {e}"))?;
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg(SUBCOMMAND);
        if self.hide_proc {
            cmd.arg(HIDE_PROC_FLAG);
        }
        if let Some(a) = self.anchor() {
            cmd.arg(ANCHOR_FLAG).arg(a);
        }
        cmd.env_clear()
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let raw = theirs.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and only
        // calls async-signal-safe dup2/fcntl on an fd open there.
        unsafe {
            cmd.pre_exec(move || {
                if raw == CONTROL_FD {
                    if libc::fcntl(raw, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(raw, CONTROL_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let process = cmd.spawn().map_err(|e| {
            format!(
                "could not start the sandbox zygote {}: {e}",
                self.exe.display()
            )
        })?;
        drop(theirs);
        set_nonblocking(&ours).map_err(|e| format!("could not start the sandbox zygote: {e}"))?;
        // SAFETY: an OwnedFd's fd stays open and the same until it is
        // dropped, which only dropping the AsyncFd does.
        let sock = unsafe { AsyncFd::register(ours) }
            .map_err(|e| format!("could not start the sandbox zygote: {e}"))?;
        Ok(Conn {
            sock,
            process,
            spare: None,
        })
    }
}

impl Conn {
    /// Whether the zygote's end is gone (it exited or was killed).
    fn hung_up(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.sock.get_ref().as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r < 0 || p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
    }

    async fn send(&self, message: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
        loop {
            let mut ready = self.sock.writable().await?;
            match ready.try_io(|s| send_with_fds(s.get_ref().as_raw_fd(), message, fds)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    async fn recv_reply(&self) -> std::io::Result<(i32, Option<OwnedFd>)> {
        loop {
            let mut ready = self.sock.readable().await?;
            match ready.try_io(|s| {
                let mut buf = [0u8; 4];
                let (n, mut fds) = recv_with_fds(s.get_ref().as_raw_fd(), &mut buf, 1)?;
                if n == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "it exited",
                    ));
                }
                if n != buf.len() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "a malformed reply",
                    ));
                }
                Ok((i32::from_ne_bytes(buf), fds.pop()))
            }) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }
}

/// Waits up to `timeout` for the process `pid` (our child, not reaped) to
/// exit: its pidfd turns readable then.
fn wait_pid_exit(pid: i32, timeout: Duration) {
    // SAFETY: pidfd_open with a pid and no flags; the fd is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return;
    }
    // SAFETY: just returned by pidfd_open, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let until = std::time::Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The request body, in a memfd: one protobuf message, encoded by the
/// server and decoded by the zygote (which picks the ruleset by the
/// options) and by the worker. Paths, variables and the command are bytes:
/// they need not be UTF-8. (It was the worker's command line, parsed by
/// clap twice per command on the way to `exec`: ~70 µs each when warm,
/// BENCHMARKS.md "Session 17".)
#[derive(Clone, PartialEq, prost::Message)]
struct WireRequest {
    /// The command's directory.
    #[prost(bytes = "vec", tag = "1")]
    cwd: Vec<u8>,
    /// The command's environment, and nothing else.
    #[prost(message, repeated, tag = "2")]
    env: Vec<WireVar>,
    #[prost(message, optional, tag = "3")]
    args: Option<WireArgs>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct WireVar {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// [`WorkerArgs`], field by field.
#[derive(Clone, PartialEq, prost::Message)]
struct WireArgs {
    /// [`crate::sandbox::SandboxLevel::name`].
    #[prost(string, tag = "1")]
    level: String,
    #[prost(bytes = "vec", tag = "2")]
    workspace: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    tmp: Vec<u8>,
    #[prost(bytes = "vec", optional, tag = "4")]
    tmp_at: Option<Vec<u8>>,
    #[prost(uint64, tag = "5")]
    cpu_secs: u64,
    #[prost(uint64, tag = "6")]
    address_space_bytes: u64,
    #[prost(uint64, tag = "7")]
    file_size_bytes: u64,
    #[prost(uint64, tag = "8")]
    processes: u64,
    #[prost(uint64, tag = "9")]
    open_files: u64,
    #[prost(uint64, tag = "10")]
    kill_grace_ms: u64,
    #[prost(bytes = "vec", repeated, tag = "11")]
    protect: Vec<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "12")]
    read: Vec<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "13")]
    cgroup: Option<Vec<u8>>,
    #[prost(bool, tag = "14")]
    best_effort: bool,
    #[prost(int32, optional, tag = "15")]
    protected_fd: Option<i32>,
    #[prost(bool, tag = "16")]
    landlock_only: bool,
    #[prost(string, optional, tag = "17")]
    report_token: Option<String>,
    #[prost(bytes = "vec", repeated, tag = "18")]
    command: Vec<Vec<u8>>,
}

fn bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

fn path(b: Vec<u8>) -> PathBuf {
    PathBuf::from(OsString::from_vec(b))
}

impl From<&WorkerArgs> for WireArgs {
    fn from(a: &WorkerArgs) -> Self {
        Self {
            level: a.level.name().to_owned(),
            workspace: bytes(&a.workspace),
            tmp: bytes(&a.tmp),
            tmp_at: a.tmp_at.as_deref().map(bytes),
            cpu_secs: a.cpu_secs,
            address_space_bytes: a.address_space_bytes,
            file_size_bytes: a.file_size_bytes,
            processes: a.processes,
            open_files: a.open_files,
            kill_grace_ms: a.kill_grace_ms,
            protect: a.protect.iter().map(|p| bytes(p)).collect(),
            read: a.read.iter().map(|p| bytes(p)).collect(),
            cgroup: a.cgroup.as_deref().map(bytes),
            best_effort: a.best_effort,
            protected_fd: a.protected_fd,
            landlock_only: a.landlock_only,
            report_token: a.report_token.clone(),
            command: a.command.iter().map(|w| w.as_bytes().to_vec()).collect(),
        }
    }
}

impl TryFrom<WireArgs> for WorkerArgs {
    type Error = String;

    fn try_from(w: WireArgs) -> Result<Self, String> {
        let level = crate::sandbox::SandboxLevel::from_name(&w.level)
            .ok_or_else(|| format!("no sandbox level {:?}", w.level))?;
        if w.command.is_empty() {
            return Err("no command".into());
        }
        Ok(Self {
            level,
            workspace: path(w.workspace),
            tmp: path(w.tmp),
            tmp_at: w.tmp_at.map(path),
            cpu_secs: w.cpu_secs,
            address_space_bytes: w.address_space_bytes,
            file_size_bytes: w.file_size_bytes,
            processes: w.processes,
            open_files: w.open_files,
            kill_grace_ms: w.kill_grace_ms,
            protect: w.protect.into_iter().map(path).collect(),
            read: w.read.into_iter().map(path).collect(),
            cgroup: w.cgroup.map(path),
            best_effort: w.best_effort,
            protected_fd: w.protected_fd,
            landlock_only: w.landlock_only,
            report_token: w.report_token,
            command: w.command.into_iter().map(OsString::from_vec).collect(),
        })
    }
}

/// Writes the request into a memfd (see [`WireRequest`]).
fn encode(cwd: &Path, env: &[(OsString, OsString)], args: &WorkerArgs) -> std::io::Result<OwnedFd> {
    let request = WireRequest {
        cwd: bytes(cwd),
        env: env
            .iter()
            .map(|(k, v)| WireVar {
                key: k.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            })
            .collect(),
        args: Some(args.into()),
    };
    let text = prost::Message::encode_to_vec(&request);
    // SAFETY: a valid NUL-terminated name and flags; the fd is owned below.
    let fd = unsafe { libc::memfd_create(c"toolsched-request".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just created, owned by nobody else.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(&text)?;
    // The child's fd shares this offset: it reads from the start.
    file.rewind()?;
    Ok(file.into())
}

/// What a forked child runs: the directory and the environment (the
/// worker's options beside it).
struct Decoded {
    cwd: PathBuf,
    env: Vec<(OsString, OsString)>,
}

fn decode(body: &[u8]) -> Result<(Decoded, WorkerArgs), String> {
    let request: WireRequest = prost::Message::decode(body).map_err(|e| e.to_string())?;
    if request.cwd.is_empty() {
        return Err("the request names no directory".into());
    }
    let args = request
        .args
        .ok_or("the request holds no worker options")?
        .try_into()
        .map_err(|e| format!("the worker's options: {e}"))?;
    let env = request
        .env
        .into_iter()
        .map(|v| (OsString::from_vec(v.key), OsString::from_vec(v.value)))
        .collect();
    Ok((
        Decoded {
            cwd: path(request.cwd),
            env,
        },
        args,
    ))
}

/// `sendmsg` of `data` with `fds` as `SCM_RIGHTS`.
fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation on a length.
    let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
    // u64 words keep the buffer aligned for cmsghdr.
    let mut cbuf = vec![0u64; space.div_ceil(8).max(1)];
    // SAFETY: a zeroed msghdr is a valid "no name, no control" message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds one header of `space` bytes;
        // CMSG_FIRSTHDR/CMSG_DATA point inside it and `bytes` fit after it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), bytes);
        }
    }
    // SAFETY: a valid message whose buffers outlive the call.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "a short send",
        ));
    }
    Ok(())
}

/// `recvmsg` into `buf`, taking at most `max_fds` fds (close-on-exec).
/// More fds than that, or a cut control message, is an error (the fds that
/// did arrive are closed).
fn recv_with_fds(
    sock: RawFd,
    buf: &mut [u8],
    max_fds: usize,
) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one more than allowed, so that too many is seen, not cut.
    let room = (max_fds + 1) * std::mem::size_of::<RawFd>();
    // SAFETY: a pure computation on a length.
    let space = unsafe { libc::CMSG_SPACE(room as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: a zeroed msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: a valid message whose buffers outlive the call.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `cbuf`
    // with the CMSG macros; each SCM_RIGHTS payload is an array of fds
    // that are now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > max_fds {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "too many fds",
        ));
    }
    Ok((n as usize, fds))
}

// === the zygote's side ===

/// `toolsched sandbox-zygote`: serves requests on [`CONTROL_FD`] until the
/// server's end closes. Never returns.
pub fn main() -> ! {
    // SAFETY: F_GETFD only asks whether the fd is open; F_SETFD marks it
    // close-on-exec (workers close it anyway, see `child`).
    if unsafe { libc::fcntl(CONTROL_FD, libc::F_GETFD) } < 0
        || unsafe { libc::fcntl(CONTROL_FD, libc::F_SETFD, libc::FD_CLOEXEC) } != 0
    {
        std::process::exit(SETUP_FAILED_EXIT);
    }
    // One hidden `/proc` for every worker, so that their prepared rulesets
    // (which grant it by inode) reach it; each worker mounting its own
    // would hide the one the ruleset grants.
    let proc_hidden =
        std::env::args_os().any(|a| a == HIDE_PROC_FLAG) && super::worker::hide_proc_here();
    let anchor: Option<PathBuf> = std::env::args_os()
        .skip_while(|a| a != ANCHOR_FLAG)
        .nth(1)
        .map(PathBuf::from);
    super::worker::prepare();
    // What a spare leaves when it is killed (the process it confined ahead
    // for its command) comes to us, not to init: reaped by the loop below.
    // SAFETY: a prctl on our own process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    let mut rulesets = RulesetCache::default();
    // SAFETY: blocking SIGCHLD for this (only) thread and reading it from a
    // signalfd; plain calls with valid arguments.
    let sfd = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            std::process::exit(SETUP_FAILED_EXIT);
        }
        OwnedFd::from_raw_fd(fd)
    };
    // SAFETY: cannot fail.
    let me = unsafe { libc::getpid() };
    // Each live worker's status pipe, written and closed once it is reaped.
    let mut live: Vec<(libc::pid_t, File)> = Vec::new();
    // The worker forked ahead for the next command (see [`Spare`]), or
    // what it will be forked with once the last command started.
    let mut spare: Option<Spare> = None;
    let mut pending: Option<Pending> = None;
    let ctx = Ctx { me, proc_hidden };
    loop {
        let mut fds = [
            libc::pollfd {
                fd: CONTROL_FD,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A negative fd is left out of the poll.
                fd: pending.as_ref().map_or(-1, |p| p.started.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: three valid pollfd entries.
        if unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) } < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            std::process::exit(SETUP_FAILED_EXIT);
        }
        if fds[1].revents & libc::POLLIN != 0 {
            drain_signalfd(&sfd);
            reap(&mut live, &mut spare);
        }
        // Hung up (or written to, or failed): the command started, or its
        // worker is gone. Either way the next spare is due.
        if fds[2].revents != 0
            && let Some(p) = pending.take()
        {
            spare = Spare::fork(p.cgroup, ctx, p.guess);
        }
        if fds[0].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            let mut message = [0u8; MAX_MESSAGE_BYTES + 1];
            match recv_with_fds(CONTROL_FD, &mut message, MAX_REQUEST_FDS) {
                // The server is gone: so are we (the workers follow through
                // their parent-death signal), the anchor it made, and the
                // spare with the cgroup it joined.
                Ok((0, _)) => {
                    if let Some(sp) = spare.take() {
                        sp.discard(true);
                    }
                    // Made by the server for a spare not forked yet.
                    if let Some(cg) = pending.take().and_then(|p| p.cgroup) {
                        let _ = std::fs::remove_dir(cg);
                    }
                    if let Some(a) = &anchor {
                        // Never recursive: only the empty layout it made.
                        let _ = std::fs::remove_dir(a.join(ANCHOR_TMP));
                        let _ = std::fs::remove_dir(a);
                    }
                    std::process::exit(0)
                }
                Ok((n, received))
                    if (REQUEST_TAG.len()..=MAX_MESSAGE_BYTES).contains(&n)
                        && message.starts_with(REQUEST_TAG) =>
                {
                    let next = &message[REQUEST_TAG.len()..n];
                    let next = (!next.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(next)));
                    // A command came before the last one started: its
                    // spare is forked now and takes it (the hand-over waits
                    // in its channel while it gets ready).
                    if let Some(p) = pending.take() {
                        spare = Spare::fork(p.cgroup, ctx, p.guess);
                    }
                    let mut guess = None;
                    let started =
                        match serve(received, ctx, &mut rulesets, spare.take(), &mut guess) {
                            Some(Served { worker, started }) => {
                                live.push(worker);
                                started
                            }
                            None => None,
                        };
                    // After the reply. A spare took the command: the next
                    // one is forked once the command started; otherwise
                    // now, beside the worker forked for it.
                    match started {
                        Some(started) => {
                            pending = Some(Pending {
                                cgroup: next,
                                guess,
                                started,
                            })
                        }
                        None => spare = Spare::fork(next, ctx, guess),
                    }
                }
                Ok(_) => reply(-libc::EINVAL, None),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) => reply(-e.raw_os_error().unwrap_or(libc::EINVAL), None),
            }
        }
    }
}

/// What every child of the zygote is told: its pid (their parent) and
/// whether `/proc` here is hidden.
#[derive(Clone, Copy)]
struct Ctx {
    me: libc::pid_t,
    proc_hidden: bool,
}

/// A worker forked before its command arrived (issue 17 item 3): it has
/// already done what does not depend on the command (session, parent-death
/// signal, subreaper) and joined the cgroup the server made for the next
/// command. The next request is handed to it over `chan` instead of
/// forking, so that the fork and that setup overlap the previous command
/// and the client's turn instead of delaying the next command.
///
/// It holds nothing of the zygote's but `chan` (everything else is closed
/// before it does anything), and runs nothing of a command's until the
/// hand-over, after which it is exactly the worker a fork would have made.
/// Every request uses it up: handed over, or killed when it cannot serve
/// the request (another cgroup, a hand-over that failed).
struct Spare {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    /// Our end of the socket its command comes down.
    chan: OwnedFd,
    /// The cgroup it joins; the server's for the next command.
    cgroup: Option<PathBuf>,
    /// The kept ruleset it confines a command process with ahead.
    ahead: Option<u64>,
}

/// What the zygote expects of the next command: the options of the last
/// one, as the kept ruleset they mapped to (its id and a copy of it) and
/// whether their level allows network (the seccomp program). A spare
/// confines a command process with them before its command comes
/// ([`super::worker::Ahead`]); the hand-over says whether it fits.
struct Guess {
    ruleset: OwnedFd,
    id: u64,
    network: bool,
}

/// A connected pair of close-on-exec `SOCK_SEQPACKET` Unix sockets (message
/// boundaries kept, fds passed with a message): the server's line to its
/// zygote, and the zygote's to its spare worker.
fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut pair = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two fds into a valid array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) })
}

impl Spare {
    /// Forks a spare that joins `cgroup`. `None` when it could not be forked
    /// (the next command is then forked as it comes).
    fn fork(cgroup: Option<PathBuf>, ctx: Ctx, guess: Option<Guess>) -> Option<Self> {
        let (ours, theirs) = seqpacket_pair().ok()?;
        // Only where `/proc` is the zygote's hidden one: a worker that
        // mounts its own cannot use a prepared ruleset.
        let guess = guess.filter(|_| ctx.proc_hidden);
        let ahead = guess.as_ref().map(|g| (g.ruleset.as_raw_fd(), g.network));
        // SAFETY: this process is single-threaded (no runtime, no threads),
        // so the child may allocate and run ordinary Rust code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return None;
        }
        if pid == 0 {
            // SAFETY: in the freshly forked child.
            unsafe { spare_child(theirs.as_raw_fd(), cgroup.as_deref(), ctx, ahead) }
        }
        drop(theirs);
        let ahead = guess.map(|g| g.id);
        // SAFETY: pidfd_open on our own child, not reaped yet (only this
        // loop reaps); the fd is owned below.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            // SAFETY: our own child, which nobody else knows of.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return None;
        }
        Some(Self {
            pid,
            // SAFETY: just returned by pidfd_open, owned by nobody else.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) },
            chan: ours,
            cgroup,
            ahead,
        })
    }

    /// Kills the spare. With `wait`, also reaps it and removes its cgroup
    /// (the zygote is exiting: nobody else will); otherwise the loop reaps
    /// it and the server, which made the cgroup, sweeps it.
    fn discard(self, wait: bool) {
        // SAFETY: signalling our own unreaped child through its pidfd.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0 as libc::c_uint,
            );
        }
        if !wait {
            return;
        }
        loop {
            // SAFETY: waiting for our own child; a null status is allowed.
            let r = unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
            if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        if let Some(cg) = &self.cgroup {
            // The process the spare confined ahead is in its cgroup too:
            // killed by its parent-death signal, re-parented to us (the
            // child subreaper) and reaped here, so that the cgroup is
            // empty when it is removed.
            let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
            for pid in procs
                .lines()
                .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
            {
                // SAFETY: signalling and reaping a process of the spare's
                // cgroup, now our child; an error (not ours) is ignored.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    while libc::waitpid(pid, std::ptr::null_mut(), 0) < 0
                        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                    {
                    }
                }
            }
            let _ = std::fs::remove_dir(cg);
        }
    }

    /// Hands the command to the spare: one byte saying which optional fds
    /// follow, the request's fds in order, then the ruleset, if any.
    fn hand_over(
        &self,
        received: &[OwnedFd],
        ruleset: Option<&OwnedFd>,
        fits_ahead: bool,
    ) -> std::io::Result<()> {
        let mut flags = 0;
        if fits_ahead {
            flags |= HANDOVER_AHEAD;
        }
        if received.len() > REQUEST_FDS {
            flags |= HANDOVER_PROTECTED;
        }
        let mut fds: Vec<RawFd> = received.iter().map(AsRawFd::as_raw_fd).collect();
        if let Some(r) = ruleset {
            flags |= HANDOVER_RULESET;
            fds.push(r.as_raw_fd());
        }
        send_with_fds(self.chan.as_raw_fd(), &[flags], &fds)
    }
}

/// One request: reads it, finds (or prepares) its Landlock ruleset, hands
/// it to the spare worker (when it joined the command's cgroup) or forks a
/// worker, and replies. Returns the worker's pid and a copy of its status
/// pipe.
fn serve(
    received: Vec<OwnedFd>,
    ctx: Ctx,
    rulesets: &mut RulesetCache,
    spare: Option<Spare>,
    guess: &mut Option<Guess>,
) -> Option<Served> {
    if !(REQUEST_FDS..=MAX_REQUEST_FDS).contains(&received.len()) {
        reply(-libc::EINVAL, None);
        return None;
    }
    let status = match received[4].try_clone() {
        Ok(s) => File::from(s),
        Err(e) => {
            reply(-e.raw_os_error().unwrap_or(libc::EMFILE), None);
            return None;
        }
    };
    let served = |pid, started| {
        Some(Served {
            worker: (pid, status),
            started,
        })
    };
    // Read here, not in the child: the options decide the ruleset. What is
    // wrong with them the child reports on the status pipe, as before.
    let request = read_request(&received[0]);
    let kept = request
        .as_ref()
        .ok()
        .and_then(|(_, args)| Some((rulesets.get_kept(args)?, args.level.allows_network())));
    let (ruleset, id) = match kept {
        Some(((fd, id), network)) => {
            // The next command is expected to be like this one.
            *guess = id.and_then(|id| {
                Some(Guess {
                    ruleset: fd.try_clone().ok()?,
                    id,
                    network,
                })
            });
            (Some(fd), id)
        }
        None => {
            *guess = None;
            (None, None)
        }
    };
    if let Some(sp) = spare {
        // The spare serves only the cgroup it joined, which the server made
        // for this command; anything else (a request it cannot read, a
        // hand-over that failed, a spare something outside the sandbox
        // stopped, which would hold the command until its timeout) and it
        // goes, and a worker is forked.
        let fits = matches!(&request, Ok((_, args)) if args.cgroup == sp.cgroup)
            && !super::worker::stopped(sp.pid);
        let fits_ahead = id.is_some() && sp.ahead == id;
        if fits
            && sp
                .hand_over(&received, ruleset.as_ref(), fits_ahead)
                .is_ok()
        {
            reply(sp.pid, Some(&sp.pidfd));
            return served(sp.pid, Some(sp.chan));
        }
        sp.discard(false);
    }
    let raw: Vec<RawFd> = received.iter().map(AsRawFd::as_raw_fd).collect();
    // SAFETY: this process is single-threaded (no runtime, no threads), so
    // the child may allocate and run ordinary Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        reply(
            -std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EAGAIN),
            None,
        );
        return None;
    }
    if pid == 0 {
        let forked = Forked {
            zygote: ctx.me,
            ruleset,
            proc_hidden: ctx.proc_hidden,
            settled: None,
            namespace_before: None,
            ahead: None,
            started: None,
        };
        // SAFETY: in the freshly forked child; `raw` are its copies.
        unsafe { child(&raw, request, forked) }
    }
    drop(received);
    drop(ruleset);
    // SAFETY: pidfd_open on our own child, which cannot have been reaped
    // yet (only this loop reaps); the fd is owned below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL);
        // SAFETY: our own child; the server will never know of it.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        reply(-errno, None);
        return served(pid, None);
    }
    // SAFETY: just returned by pidfd_open, owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    reply(pid, Some(&pidfd));
    served(pid, None)
}

/// A request served: the worker (its pid and a copy of its status pipe)
/// and, when a spare took the command, our end of its channel, which
/// hangs up once the command's process has started.
struct Served {
    worker: (libc::pid_t, File),
    started: Option<OwnedFd>,
}

/// The next spare, not forked yet: it waits until the command just handed
/// over has started (its channel hangs up), or until the next request.
/// Forked at once, the spare's fork, namespace and the process it confines
/// ahead (~0.5 ms of CPU) ran beside the hand-over and took one of two
/// cores from the command's start.
struct Pending {
    cgroup: Option<PathBuf>,
    guess: Option<Guess>,
    started: OwnedFd,
}

/// The spare worker, from its fork until its command arrives: it closes
/// everything of the zygote's but its end of `chan`, settles (see
/// [`super::worker::settle`]), joins `cgroup`, then waits for the hand-over
/// (see [`Spare::hand_over`]) and runs the command exactly as a forked
/// worker does ([`child`]). Exits when the zygote's end closes.
///
/// # Safety
/// Only in a freshly forked child of the (single-threaded) zygote.
unsafe fn spare_child(
    chan: RawFd,
    cgroup: Option<&Path>,
    ctx: Ctx,
    ahead: Option<(RawFd, bool)>,
) -> ! {
    // SAFETY: plain calls on this process's own fds.
    let ahead = unsafe {
        // Close-on-exec: the command's process never holds it.
        let placed = if chan == SPARE_CHAN_FD {
            libc::fcntl(chan, libc::F_SETFD, libc::FD_CLOEXEC)
        } else {
            libc::dup3(chan, SPARE_CHAN_FD, libc::O_CLOEXEC)
        };
        if placed < 0 {
            libc::_exit(SETUP_FAILED_EXIT);
        }
        ahead.and_then(|(fd, network)| {
            (libc::dup2(fd, AHEAD_RULESET_FD) == AHEAD_RULESET_FD).then_some(network)
        })
    };
    // SAFETY: plain calls on this process's own fds.
    unsafe {
        // Nothing of the zygote's survives (its socket, signalfd, the
        // workers' status pipes, the prepared rulesets but the one to
        // confine with ahead): 0–2 are its `/dev/null`, replaced at the
        // hand-over.
        for (from, to) in [
            (3, AHEAD_RULESET_FD - 1),
            (
                if ahead.is_some() {
                    SPARE_CHAN_FD
                } else {
                    AHEAD_RULESET_FD
                },
                SPARE_CHAN_FD - 1,
            ),
            (SPARE_CHAN_FD + 1, libc::c_int::MAX),
        ] {
            if from > to {
                continue;
            }
            if libc::syscall(
                libc::SYS_close_range,
                from as libc::c_uint,
                to as libc::c_uint,
                0 as libc::c_uint,
            ) != 0
            {
                libc::_exit(SETUP_FAILED_EXIT);
            }
        }
    }
    let Ok(worker) = super::worker::settle(Some(ctx.me)) else {
        // The zygote is gone, or this process cannot supervise: the next
        // command is forked instead (the zygote reaps us).
        // SAFETY: leaving without running the zygote's destructors.
        unsafe { libc::_exit(SETUP_FAILED_EXIT) }
    };
    // The wait this process exists for: ahead of the command.
    let joined = cgroup.map(|cg| super::worker::join_cgroup(cg).map(|()| cg.to_path_buf()));
    // The command process, confined ahead in the namespace its command's
    // mounts will be made in (after the cgroup join: it is the command's).
    let mut namespace_before = None;
    let mut confined = None;
    // Only in the command's cgroup: a process cloned before a failed join
    // would stay outside it (the worker joins again for the command).
    let joined_well = !matches!(joined, Some(Err(_)));
    if let Some(network) = ahead {
        // SAFETY: the fd was placed above and nothing else owns it.
        let ruleset = unsafe { OwnedFd::from_raw_fd(AHEAD_RULESET_FD) };
        namespace_before = std::fs::File::open("/proc/self/ns/mnt")
            .ok()
            .filter(|_| joined_well)
            .and_then(|ns| {
                // SAFETY: moving our own fd to its fixed number.
                unsafe {
                    (libc::dup3(ns.as_raw_fd(), AHEAD_NAMESPACE_FD, libc::O_CLOEXEC)
                        == AHEAD_NAMESPACE_FD)
                        .then(|| OwnedFd::from_raw_fd(AHEAD_NAMESPACE_FD))
                }
            });
        if namespace_before.is_some() && !super::worker::enter_ahead() {
            namespace_before = None;
        }
        if namespace_before.is_some() {
            let place = |fd: RawFd| {
                // SAFETY: `fd` is the listener the process left in the
                // table we share; moved to its fixed number.
                unsafe {
                    if libc::dup3(fd, AHEAD_LISTENER_FD, libc::O_CLOEXEC) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                    Ok(OwnedFd::from_raw_fd(AHEAD_LISTENER_FD))
                }
            };
            confined = super::worker::Ahead::start(ruleset, network, worker, place).ok();
        }
    }
    let mut flags = [0u8; 1];
    let received = loop {
        match recv_with_fds(SPARE_CHAN_FD, &mut flags, MAX_REQUEST_FDS + 1) {
            Ok((1, fds)) => break fds,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            // SAFETY: the zygote closed our channel (or sent nonsense):
            // there is no command, and nothing to report it to.
            _ => unsafe { libc::_exit(0) },
        }
    };
    let mut received = received;
    if flags[0] & HANDOVER_AHEAD == 0
        && let Some(a) = confined.take()
    {
        a.abort();
    }
    let ruleset = if flags[0] & HANDOVER_RULESET != 0 {
        received.pop()
    } else {
        None
    };
    let expected = REQUEST_FDS + usize::from(flags[0] & HANDOVER_PROTECTED != 0);
    if received.len() != expected {
        // SAFETY: as above; the status pipe is not known to be among them.
        unsafe { libc::_exit(SETUP_FAILED_EXIT) }
    }
    let request = read_request(&received[0]);
    let raw: Vec<RawFd> = received.iter().map(AsRawFd::as_raw_fd).collect();
    // `child` places copies of them; these numbers are closed there.
    for fd in received {
        std::mem::forget(fd);
    }
    let forked = Forked {
        zygote: ctx.me,
        ruleset,
        proc_hidden: ctx.proc_hidden,
        settled: Some(super::worker::Settled { worker, joined }),
        namespace_before,
        ahead: confined,
        // SAFETY: the channel placed above; nothing else owns it.
        started: Some(unsafe { OwnedFd::from_raw_fd(SPARE_CHAN_FD) }),
    };
    // SAFETY: still the spare forked from the zygote; `raw` are open here.
    unsafe { child(&raw, request, forked) }
}

/// The request body on `body` (a memfd of [`encode`]), decoded, and the
/// worker's options parsed.
fn read_request(body: &OwnedFd) -> Result<(Decoded, WorkerArgs), String> {
    use std::os::unix::fs::FileExt;
    let err = |e: std::io::Error| format!("reading the worker's request: {e}");
    // SAFETY: the fd stays owned by `body`; `ManuallyDrop` never closes it.
    let file = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(body.as_raw_fd()) });
    let size = file.metadata().map_err(err)?.len();
    if size > MAX_REQUEST_BYTES {
        return Err(format!(
            "the worker's request exceeds {MAX_REQUEST_BYTES} bytes"
        ));
    }
    // At offsets from the start, in one read of its size (and one that
    // finds its end): a spare worker receives the fd after the zygote read
    // it, and they share the file offset. (A small buffer grown by
    // `read_to_end` was seven reads, in the zygote and again in the spare.)
    let mut text = vec![0u8; size as usize + 1];
    let mut filled = 0;
    loop {
        match file.read_at(&mut text[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
        if filled == text.len() {
            return Err("the worker's request grew while it was read".into());
        }
    }
    text.truncate(filled);
    decode(&text).map_err(|e| format!("a malformed worker request: {e}"))
}

fn reply(pid: i32, pidfd: Option<&OwnedFd>) {
    let fds: Vec<RawFd> = pidfd.map(AsRawFd::as_raw_fd).into_iter().collect();
    // The server is waiting for exactly this message; if it is gone, the
    // next poll sees the hang-up.
    let _ = send_with_fds(CONTROL_FD, &pid.to_ne_bytes(), &fds);
}

fn drain_signalfd(sfd: &OwnedFd) {
    // SAFETY: plain data the kernel fills; reading whole records.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reading into a buffer of one record's size (non-blocking).
    while unsafe {
        libc::read(
            sfd.as_raw_fd(),
            (&mut info as *mut libc::signalfd_siginfo).cast(),
            size,
        )
    } == size as isize
    {}
}

/// Reaps every worker that ended, telling its status pipe how (a spare
/// that ended before its command came is just forgotten).
fn reap(live: &mut Vec<(libc::pid_t, File)>, spare: &mut Option<Spare>) {
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waitpid writes into a valid local.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if spare.as_ref().is_some_and(|sp| sp.pid == pid) {
            *spare = None;
        }
        let Some(at) = live.iter().position(|(p, _)| *p == pid) else {
            continue;
        };
        let (_, mut status) = live.swap_remove(at);
        let line = if libc::WIFSIGNALED(st) {
            serde_json::json!({ "worker_exit": { "signal": libc::WTERMSIG(st) } })
        } else {
            serde_json::json!({ "worker_exit": { "exit_code": libc::WEXITSTATUS(st) } })
        };
        // A few bytes into a pipe the server drains: does not block.
        super::worker::report(&mut status, &line);
    }
}

/// Enters `cwd`, the command's directory as resolved when its call was
/// accepted (canonical: no symlink in it), beneath `workspace` and through
/// no symlink: a component swapped for a symlink since (by another
/// session's command, say) is refused, where entering by its path followed
/// it anywhere (a breaker's finding: another session's confined command
/// turned a `dir_path` into a link to `/`, and a level-`none` command's
/// relative writes went to the host's root). A directory outside the
/// workspace is entered by its path.
fn enter_beneath(workspace: &Path, cwd: &Path) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let Ok(rel) = cwd.strip_prefix(workspace) else {
        return std::env::set_current_dir(cwd);
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root = rustix::fs::open(workspace, flags, Mode::empty())?;
    let dir = if rel.as_os_str().is_empty() {
        root
    } else {
        match rustix::fs::openat2(
            &root,
            rel,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(dir) => dir,
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::XDEV) => {
                return Err(std::io::Error::other(
                    "it is no longer the directory the call was accepted with (a symlink \
                     now stands on its path)",
                ));
            }
            // A kernel without openat2 (before 5.6): by its path.
            Err(rustix::io::Errno::NOSYS) => return std::env::set_current_dir(cwd),
            Err(e) => return Err(e.into()),
        }
    };
    rustix::process::fchdir(&dir)?;
    Ok(())
}

/// The forked child: its fds on 0–4 as the server's `exec` of
/// `sandbox-exec` would have had them (and the prepared ruleset, if any, on
/// [`RULESET_FD`]), the request's directory and environment, then the
/// worker. `raw`: the received fds, in request order.
///
/// # Safety
/// Only in a freshly forked child of the (single-threaded) zygote.
unsafe fn child(
    raw: &[RawFd],
    request: Result<(Decoded, WorkerArgs), String>,
    mut forked: Forked,
) -> ! {
    // SAFETY: plain calls on this process's own fds, mask and handlers.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        let mut high = [0 as RawFd; MAX_REQUEST_FDS];
        for (i, fd) in raw.iter().enumerate() {
            high[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, HIGH_FD);
            if high[i] < 0 {
                libc::_exit(SETUP_FAILED_EXIT);
            }
        }
        let ruleset_high = match &forked.ruleset {
            Some(r) => {
                let fd = libc::fcntl(r.as_raw_fd(), libc::F_DUPFD_CLOEXEC, HIGH_FD);
                if fd < 0 {
                    libc::_exit(SETUP_FAILED_EXIT);
                }
                Some(fd)
            }
            None => None,
        };
        // Its number is about to be closed or reused by the placing below.
        if let Some(r) = forked.ruleset.take() {
            std::mem::forget(r);
        }
        // stdin/stdout/stderr on 0–2, status and protected.
        let placed = [(1, 0), (2, 1), (3, 2), (4, STATUS_FD), (5, PROTECTED_FD)];
        for (from, to) in placed {
            if from < raw.len() && libc::dup2(high[from], to) < 0 {
                libc::_exit(SETUP_FAILED_EXIT);
            }
        }
        if raw.len() <= REQUEST_FDS {
            // No protected set: nothing of the zygote's may sit on its fd.
            libc::close(PROTECTED_FD);
        }
        if let Some(fd) = ruleset_high {
            if libc::dup2(fd, RULESET_FD) < 0 {
                libc::_exit(SETUP_FAILED_EXIT);
            }
            forked.ruleset = Some(OwnedFd::from_raw_fd(RULESET_FD));
        }
        let mut status = File::from_raw_fd(STATUS_FD);
        let fail = |status: &mut File, message: String| -> ! {
            super::worker::report(status, &serde_json::json!({ "spawn_error": message }));
            libc::_exit(SETUP_FAILED_EXIT)
        };
        // Nothing of the zygote's survives (its socket, signalfd, other
        // workers' status pipes, the other prepared rulesets), nor a spare
        // copy of what was placed.
        let keep = if forked.ruleset.is_some() {
            RULESET_FD
        } else {
            PROTECTED_FD
        };
        // The zygote's namespace, the listener of the process confined
        // ahead and a spare's channel (see [`Pending`]) stay, at their
        // numbers (each only when there is one).
        let ranges = [
            (keep + 1, AHEAD_NAMESPACE_FD - 1),
            (
                if forked.namespace_before.is_some() {
                    AHEAD_NAMESPACE_FD + 1
                } else {
                    AHEAD_NAMESPACE_FD
                },
                AHEAD_LISTENER_FD - 1,
            ),
            (
                if forked.ahead.is_some() {
                    AHEAD_LISTENER_FD + 1
                } else {
                    AHEAD_LISTENER_FD
                },
                SPARE_CHAN_FD - 1,
            ),
            (
                if forked.started.is_some() {
                    SPARE_CHAN_FD + 1
                } else {
                    SPARE_CHAN_FD
                },
                libc::c_int::MAX,
            ),
        ];
        for (from, to) in ranges {
            if from <= to
                && libc::syscall(
                    libc::SYS_close_range,
                    from as libc::c_uint,
                    to as libc::c_uint,
                    0 as libc::c_uint,
                ) != 0
            {
                fail(
                    &mut status,
                    format!("close_range: {}", std::io::Error::last_os_error()),
                );
            }
        }
        let (req, args) = match request {
            Ok(r) => r,
            Err(e) => fail(&mut status, e),
        };
        if let Err(e) = enter_beneath(&args.workspace, &req.cwd) {
            fail(&mut status, format!("{}: {e}", req.cwd.display()));
        }
        // The command's environment and nothing else (the zygote's is
        // empty); single-threaded, so changing it is sound.
        for (k, _) in std::env::vars_os() {
            std::env::remove_var(k);
        }
        for (k, v) in &req.env {
            std::env::set_var(k, v);
        }
        // The worker owns fd 3 again from here.
        std::mem::forget(status);
        super::worker::main_with_parent(args, Some(forked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn args() -> WorkerArgs {
        WorkerArgs {
            level: crate::sandbox::SandboxLevel::ReadOnly,
            workspace: "/w".into(),
            tmp: "/t".into(),
            tmp_at: Some("/a".into()),
            cpu_secs: 1,
            address_space_bytes: 2,
            file_size_bytes: 3,
            processes: 4,
            open_files: 5,
            kill_grace_ms: 6,
            protect: vec![
                "/w/c.toml".into(),
                OsString::from_vec(b"/w/\xff".to_vec()).into(),
            ],
            read: vec![],
            cgroup: Some("/sys/fs/cgroup/pids/x".into()),
            best_effort: true,
            protected_fd: Some(super::super::worker::PROTECTED_FD),
            landlock_only: true,
            report_token: Some("t0".into()),
            command: vec!["bash".into(), "-c".into(), "--x".into(), "".into()],
        }
    }

    #[test]
    fn requests_round_trip_with_empty_and_non_utf8_words() {
        let env = vec![
            (OsString::from("PATH"), OsString::from("/usr/bin:/bin")),
            (OsString::from("EMPTY"), OsString::new()),
            (OsString::from("EQ"), OsString::from("a=b")),
            (
                OsString::from("RAW"),
                OsString::from_vec(b"\xfe\0x".to_vec()),
            ),
        ];
        for level in crate::sandbox::SandboxLevel::ALL {
            let args = WorkerArgs { level, ..args() };
            let fd = encode(Path::new("/w/sub dir"), &env, &args).unwrap();
            let mut text = Vec::new();
            File::from(fd).read_to_end(&mut text).unwrap();
            let (d, back) = decode(&text).unwrap();
            assert_eq!(d.cwd, Path::new("/w/sub dir"));
            assert_eq!(d.env, env);
            assert_eq!(back, args);
        }
        let defaults = WorkerArgs {
            tmp_at: None,
            cgroup: None,
            protected_fd: None,
            report_token: None,
            best_effort: false,
            landlock_only: false,
            ..args()
        };
        let text = prost::Message::encode_to_vec(&WireRequest {
            cwd: b"/w".to_vec(),
            env: vec![],
            args: Some((&defaults).into()),
        });
        assert_eq!(decode(&text).unwrap().1, defaults);
    }

    #[test]
    fn malformed_requests_are_refused() {
        let err = |r: &WireRequest| decode(&prost::Message::encode_to_vec(r)).err().unwrap();
        let good = WireRequest {
            cwd: b"/w".to_vec(),
            env: vec![],
            args: Some((&args()).into()),
        };
        assert_eq!(
            err(&WireRequest {
                cwd: vec![],
                ..good.clone()
            }),
            "the request names no directory"
        );
        assert_eq!(
            err(&WireRequest {
                args: None,
                ..good.clone()
            }),
            "the request holds no worker options"
        );
        let mut bad_level = good.clone();
        bad_level.args.as_mut().unwrap().level = "root".into();
        assert_eq!(
            err(&bad_level),
            "the worker's options: no sandbox level \"root\""
        );
        let mut no_command = good.clone();
        no_command.args.as_mut().unwrap().command.clear();
        assert_eq!(err(&no_command), "the worker's options: no command");
        assert!(
            decode(b"\xff\xff\xff")
                .err()
                .unwrap()
                .starts_with("failed to decode Protobuf message")
        );
        assert_eq!(
            decode(&prost::Message::encode_to_vec(&good)).unwrap().1,
            args()
        );
    }
}
