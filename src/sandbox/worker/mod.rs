//! The worker: what runs every command, forked for it by the zygote
//! ([`super::zygote`], which calls [`main_with_parent`]), or by hand as
//! `toolsched sandbox-exec [options] -- PROGRAM ARGS…`. It runs no async
//! runtime (Landlock and seccomp bind the calling thread; a single-threaded
//! process confines all of itself) and the server never confines itself.
//!
//! This file owns the worker's face: its command-line options
//! ([`WorkerArgs`]), the fds the server passes (status, protected paths) and
//! the status report. The mechanisms live beside it, one file each, as
//! codex-rs's `linux-sandbox` splits them:
//! - [`supervise`]: the supervisor (session, subreaper, cgroup, fork, wait,
//!   kill the whole tree, reap);
//! - [`confine`]: the command process, cloned, up to `exec` (fds, signal mask,
//!   capabilities, resource limits, then Landlock and seccomp);
//! - [`landlock`]: the filesystem and network grants of each level;
//! - [`prepared`]: those grants prepared once in the zygote and reused by
//!   every command with the same options;
//! - [`seccomp`]: the system-call filters;
//! - [`metadata`]: mode, owner, times and xattrs, which Landlock does not
//!   govern: trapped to the worker, performed only beneath writable roots;
//! - [`entries`]: new files, directories, links and renames, made by the
//!   worker so that none is named `.git`;
//! - [`mounts`]: the private mount namespace (read-only protected paths, a
//!   `/proc` showing only the command's processes).
//!
//! Not here: spawning the worker and reading its output (`super::process`),
//! finding the protected paths between commands (`super::protected`).
//!
//! The worker is a small supervisor:
//! 1. It leads its own session, kills its command and ends when the server
//!    (or the zygote it was forked from) dies (`PR_SET_PDEATHSIG`),
//!    becomes a child subreaper (orphans of the command, including those
//!    that `setsid` or double-fork, are re-parented to it, not to init), and
//!    joins the per-command pids cgroup the server created, if any. The
//!    zygote's spare worker does all of this before its command arrives
//!    ([`Settled`]).
//! 2. It prepares the command and clones its process (as `posix_spawn`
//!    does: [`confine`]), which leads its own process group and
//!    then, before `exec`: marks inherited fds close-on-exec, sets resource
//!    limits and a parent-death signal, drops every capability, applies
//!    Landlock (read: system directories, the workspace; write: the
//!    workspace minus protected paths, a private tmp, `/dev/null`) and
//!    seccomp (no non-UNIX sockets unless the level allows network; no
//!    ptrace, io_uring, bpf, mount, namespaces, keyrings, module loading).
//!    A failure there is reported on the status fd and the command never
//!    runs: there is no silent fallback to running unconfined.
//! 3. It waits. On SIGTERM (cancel, timeout) it sends SIGTERM to the
//!    command's group and every descendant, SIGKILL after the grace; when the
//!    command ends it SIGKILLs whatever descendants are left and reaps them
//!    all, then reports how the command ended as one JSON line on the status
//!    fd and exits the same way.
//!
//! Threat model of the protected paths: a command that can write `.git`
//! (hooks, `config` with `core.fsmonitor`, …) gets code executed later by
//! whoever runs git on the workspace outside the sandbox. Landlock grants are
//! additive and always cover a whole subtree, so "the workspace except
//! `.git`" cannot be one Landlock rule. Where the worker can make a private
//! mount namespace ([`mounts`]) every protected path is a read-only bind
//! mount and every directory on the way to one a mount point of its own (so
//! the repository cannot be renamed away and replaced); the workspace then
//! keeps a whole grant. Elsewhere (the fallback, `--landlock-only`) the
//! workspace is granted piecewise: every directory on the way to a protected
//! path gets only read rights, its other children full rights (directories)
//! or file rights (files), so such a directory takes no new, removed or
//! renamed entry. Children are opened with `O_NOFOLLOW` relative to their
//! parent's fd, so a symlink swapped in during the walk never earns a grant.
//! In both, no `.git` may be made at all ([`entries`]): a repository made by
//! the command would be unprotected until the next one.
//!
//! Where the protected paths come from: the server finds them and keeps them
//! between commands ([`super::protected`]), and passes them on
//! [`PROTECTED_FD`]; the worker reads that fd before it opens anything else
//! and refuses to run the command if it cannot. Without the option (the
//! worker run by hand) it walks the workspace itself, fail-closed the same
//! way.

#![allow(unsafe_code)]

mod confine;
mod entries;
mod landlock;
mod metadata;
mod mounts;
mod prepared;
mod seccomp;
mod supervise;

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

pub(super) use confine::{Ahead, stopped};
pub(super) use mounts::enter_ahead;
pub use mounts::{ANCHOR_TMP, MAX_BIND_MOUNTS, hide_proc_here, probe as probe_namespace};
pub use prepared::{MAX_PREPARED_RULESETS, RulesetCache};
pub(super) use supervise::{join_cgroup, settle};

use super::{ResourceLimits, SandboxLevel};

/// Exit code of the command process when its confinement failed (as `env`
/// and `timeout` use 125 for their own failures). The status fd says why.
pub const SETUP_FAILED_EXIT: i32 = 125;

/// The fd the server passes the status pipe on.
pub const STATUS_FD: i32 = 3;

/// The fd the server passes the workspace's protected paths on (see
/// [`WorkerArgs::protected_fd`]).
pub const PROTECTED_FD: i32 = 4;

/// Largest protected-path list the worker reads: far above what
/// [`super::protected::MAX_SCAN_ENTRIES`] entries can yield; a longer one is
/// a setup failure, not a truncated (fail-open) list.
const MAX_PROTECTED_BYTES: u64 = 256 << 20;

/// `toolsched sandbox-exec`: options the server passes (hidden subcommand).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct WorkerArgs {
    #[arg(long)]
    pub level: SandboxLevel,
    /// Canonical workspace root.
    #[arg(long)]
    pub workspace: PathBuf,
    /// Private tmp directory of this command (writable at every level).
    #[arg(long)]
    pub tmp: PathBuf,
    /// An anchor directory to bind the private tmp beneath (at
    /// `ANCHOR/tmp`, what the command is told its tmp is) in the private
    /// mount namespace: the same for every command, so its Landlock
    /// ruleset can be prepared once ([`RulesetCache`]). Where the bind
    /// fails the command gets the tmp at its own path instead.
    #[arg(long)]
    pub tmp_at: Option<PathBuf>,
    #[arg(long)]
    pub cpu_secs: u64,
    #[arg(long)]
    pub address_space_bytes: u64,
    #[arg(long)]
    pub file_size_bytes: u64,
    #[arg(long)]
    pub processes: u64,
    #[arg(long)]
    pub open_files: u64,
    /// Milliseconds between SIGTERM and SIGKILL on termination.
    #[arg(long)]
    pub kill_grace_ms: u64,
    /// Never writable (and, outside the workspace, not readable).
    #[arg(long)]
    pub protect: Vec<PathBuf>,
    /// Extra readable directories.
    #[arg(long)]
    pub read: Vec<PathBuf>,
    /// A pids cgroup directory the server created for this command.
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Run with whatever the kernel enforces instead of refusing.
    #[arg(long)]
    pub best_effort: bool,
    /// An fd holding the workspace's protected paths, as the server keeps
    /// them (`.git` entries and, fail-closed, unread directories): each
    /// absolute path followed by a NUL, then one more NUL (the end mark;
    /// the server's pipe gets it when its walk finished). Without it, the
    /// worker walks the workspace itself. An fd that cannot be read, or
    /// ends before the end mark, fails the setup.
    #[arg(long)]
    pub protected_fd: Option<i32>,
    /// No private mount namespace: protected paths by Landlock alone (see
    /// [`mounts`]).
    #[arg(long)]
    pub landlock_only: bool,
    /// A secret the final report carries (`"token"`), so that the server
    /// ends the call on the worker's report only, never on a line someone
    /// else managed to write on the status pipe (see
    /// `super::process`). The server's random one per command; only this
    /// process's memory holds it (the zygote passes the options in a memfd
    /// the worker closes), which a confined command cannot read.
    #[arg(long)]
    pub report_token: Option<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

impl WorkerArgs {
    fn limits(&self) -> ResourceLimits {
        ResourceLimits {
            cpu_secs: self.cpu_secs,
            address_space_bytes: self.address_space_bytes,
            file_size_bytes: self.file_size_bytes,
            processes: self.processes,
            open_files: self.open_files,
        }
    }
}

/// How the command ended, as the worker reports it.
enum Ended {
    Code(i32),
    Signal(i32),
}

/// What the zygote hands a worker it forked (see [`super::zygote`]).
pub struct Forked {
    /// The zygote's pid: the worker's parent.
    pub zygote: libc::pid_t,
    /// The Landlock ruleset the zygote prepared for these options
    /// ([`RulesetCache`]), used when the command's mounts are what it
    /// assumes (protected paths read-only, the tmp at its anchor).
    pub ruleset: Option<OwnedFd>,
    /// `/proc` in the zygote's namespace is already a hidden instance.
    pub proc_hidden: bool,
    /// What a spare worker did before its command came; `None` for a
    /// worker forked for its command.
    pub settled: Option<Settled>,
    /// The zygote's mount namespace, kept by a spare that made its own
    /// before its command came ([`enter_ahead`]): the command's mounts are
    /// made in the spare's, and a command that takes none returns to this
    /// one.
    pub namespace_before: Option<OwnedFd>,
    /// The command process the spare cloned and confined before its
    /// command came, which the zygote said fits it ([`Ahead`]).
    pub(in crate::sandbox) ahead: Option<Ahead>,
    /// A spare's channel from the zygote, closed once the command's process
    /// has started: the zygote forks the next spare at that hang-up, so
    /// that the spare's setup (its fork, namespace and the process it
    /// confines ahead) does not take the CPU this command's start needs.
    pub started: Option<OwnedFd>,
}

/// What a spare worker (see [`super::zygote`]) did before its command
/// came: [`settle`] (this is its result) and, if it was given one, the
/// cgroup join.
#[derive(Debug, Clone)]
pub struct Settled {
    /// The worker's own pid.
    pub worker: libc::pid_t,
    /// The cgroup it joined, or why it could not.
    pub joined: Option<Result<PathBuf, String>>,
}

/// Runs the worker; does not return (exits like the command did).
pub fn main(args: WorkerArgs) -> ! {
    main_with_parent(args, None)
}

/// Runs the worker forked by the zygote (see [`super::zygote`]), or exec'd
/// by the server (`None`); does not return.
pub fn main_with_parent(args: WorkerArgs, forked: Option<Forked>) -> ! {
    // First, before this process opens an fd that could take its number.
    let protected = args.protected_fd.map(read_protected).transpose();
    // SAFETY: the status fd is ours, passed by the server on purpose; no
    // other File owns it.
    let mut status = unsafe { File::from_raw_fd(STATUS_FD) };
    match protected.and_then(|p| supervise::supervise(&args, p.as_deref(), forked, &mut status)) {
        Ok(ended) => {
            let mut line = match ended {
                Ended::Code(c) => serde_json::json!({ "exit_code": c }),
                Ended::Signal(s) => serde_json::json!({ "signal": s }),
            };
            if let Some(t) = &args.report_token {
                line["token"] = t.as_str().into();
            }
            // The report first: the server ends the call on it (the
            // command and its descendants are reaped, so their output is
            // all in the pipe) and reads the output pipe without waiting
            // for its end of file. Closing the command's stdout and stderr
            // before it woke the server once more per call.
            report(&mut status, &line);
            drop(status);
            exit_like(ended)
        }
        Err(message) => {
            report(&mut status, &serde_json::json!({ "setup_error": message }));
            std::process::exit(SETUP_FAILED_EXIT)
        }
    }
}

/// Writes `line` and a newline to the status pipe in one `write`: the
/// server's reader wakes once per write, and `writeln!` of a JSON value on
/// an unbuffered file makes one per token (8 for `{"exit_code":0}`), each
/// on the exit path of the call. A few bytes into a pipe the server drains
/// never block; a failure (the server is gone) leaves nobody to tell.
pub(crate) fn report(status: &mut File, line: &serde_json::Value) {
    let mut text = line.to_string();
    text.push('\n');
    let _ = status.write_all(text.as_bytes());
}

/// What every worker computes the same way, done once in the zygote
/// before it forks any (see [`super::zygote`]): the seccomp programs and
/// the kernel's last capability. A worker run on its own computes them
/// itself; a failure here is left for the worker to meet and report.
pub fn prepare() {
    seccomp::prepare();
    confine::last_cap();
}

/// Ends the worker with `ended`'s status, at once: `_exit`, not
/// `std::process::exit`, whose exit handlers (mimalloc's heap collection,
/// the loader's finalizers) only touched copy-on-write pages of a process
/// about to vanish: ~5% of the zygote tree's CPU per command. Nothing is
/// left buffered: the report is written with one `write`.
fn exit_like(ended: Ended) -> ! {
    match ended {
        // SAFETY: `_exit` ends this process; nothing of it is needed after.
        Ended::Code(c) => unsafe { libc::_exit(c) },
        Ended::Signal(s) => {
            // SAFETY: plain libc calls on our own process; restoring the
            // default action makes the signal end us as it ended the command.
            unsafe {
                libc::signal(s, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, s);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::raise(s);
                libc::_exit(128 + s)
            }
        }
    }
}

fn errno(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Every `.git` (directory or file) beneath `root`, plus, fail-closed, the
/// directories that could not be read or were not reached within
/// [`super::protected::MAX_SCAN_ENTRIES`]. Symlinked directories are not
/// followed (they get no grant anyway). The server keeps this set between
/// commands ([`super::ProtectedPaths`]); this is the walk without the cache.
pub fn protected_in(root: &Path) -> Vec<PathBuf> {
    super::protected::scan_once(root)
}

/// The protected paths the server passed on `fd` (see
/// [`WorkerArgs::protected_fd`]).
fn read_protected(fd: i32) -> Result<Vec<PathBuf>, String> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let err = |e: std::io::Error| format!("reading the protected paths from fd {fd}: {e}");
    // SAFETY: F_GETFD only asks whether the fd is open (owning a closed fd
    // would abort the process on drop).
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    // SAFETY: the fd is open and was passed by the server for this purpose;
    // nothing else in this process owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    let mut text = Vec::new();
    file.take(MAX_PROTECTED_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(err)?;
    if text.len() as u64 > MAX_PROTECTED_BYTES {
        return Err(format!(
            "the protected paths on fd {fd} exceed {MAX_PROTECTED_BYTES} bytes"
        ));
    }
    // The end mark (an empty record) says the server's walk finished: a
    // list cut short (the walk failed or the server died) is refused, not
    // taken for a shorter one.
    let body = match text.strip_suffix(b"\0") {
        Some(body) if body.is_empty() || body.ends_with(b"\0") => body,
        _ => {
            return Err(format!(
                "the protected paths on fd {fd} end before their end mark (the walk did not finish)"
            ));
        }
    };
    let mut paths = Vec::new();
    for raw in body.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(raw));
        if !p.is_absolute() {
            return Err(format!(
                "a protected path on fd {fd} is not absolute: {}",
                p.display()
            ));
        }
        paths.push(p);
    }
    Ok(paths)
}
