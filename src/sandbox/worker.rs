//! The worker: `toolsched sandbox-exec [options] -- PROGRAM ARGS…`, this
//! binary re-executed by the server for every command. It runs no async
//! runtime (Landlock and seccomp bind the calling thread; a single-threaded
//! process confines all of itself) and the server never confines itself.
//!
//! The worker is a small supervisor:
//! 1. It leads its own session, dies with the server (`PR_SET_PDEATHSIG`),
//!    becomes a child subreaper (orphans of the command, including those
//!    that `setsid` or double-fork, are re-parented to it, not to init), and
//!    joins the per-command pids cgroup the server created, if any.
//! 2. It forks the command process, which leads its own process group and
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
//! `.git`" cannot be one rule: the workspace is granted piecewise instead.
//! Every directory on the way to a protected path gets only read rights;
//! its other children get full rights (directories) or file rights (files).
//! The price: in a directory that holds a protected path (a repository root)
//! a command may change existing files but not create, delete or rename
//! entries. Children are opened with `O_NOFOLLOW` relative to their parent's
//! fd, so a symlink swapped in during the walk never earns a grant.
//! Read-only bind mounts of each `.git` in a private mount namespace (where
//! the worker may create one) would lift that price, but leave a hole the
//! piecewise grants close: the command could rename the repository
//! directory away and plant a new one, with its own `.git/hooks`, at the
//! path the user trusts.
//!
//! Where the protected paths come from: the server finds them and keeps them
//! between commands ([`super::protected`]), and passes them on
//! [`PROTECTED_FD`]; the worker reads that fd before it opens anything else
//! and refuses to run the command if it cannot. Without the option (the
//! worker run by hand) it walks the workspace itself, fail-closed the same
//! way.

#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::ops::Bound;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use super::{ResourceLimits, SandboxLevel};

/// Exit code of the command process when its confinement failed (as `env`
/// and `timeout` use 125 for their own failures). The status fd says why.
pub const SETUP_FAILED_EXIT: i32 = 125;

/// The fd the server passes the status pipe on.
pub const STATUS_FD: i32 = 3;

/// Landlock ABI whose access rights we ask for (best effort below it; the
/// start-up probe refuses kernels below [`super::probe::MIN_LANDLOCK_ABI`]).
/// Newer rights are added after being tested on a kernel that has them.
const TARGET_ABI: ABI = ABI::V6;

/// The fd the server passes the workspace's protected paths on (see
/// [`WorkerArgs::protected_fd`]).
pub const PROTECTED_FD: i32 = 4;

/// Largest protected-path list the worker reads: far above what
/// [`super::protected::MAX_SCAN_ENTRIES`] entries can yield; a longer one is
/// a setup failure, not a truncated (fail-open) list.
const MAX_PROTECTED_BYTES: u64 = 256 << 20;

/// System directories commands may read and execute, when they exist.
const SYSTEM_READ_DIRS: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/nix/store",
];

/// Under `/etc`, what is never readable: password hashes, sudo rules,
/// private keys. `/etc` is granted entry by entry around these.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssl/private",
    "krb5.keytab",
    "security/opasswd",
];

/// Device files commands may read; `/dev/null` may also be written.
const READ_DEVICES: &[&str] = &["/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// `toolsched sandbox-exec`: options the server passes (hidden subcommand).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    #[arg(long)]
    pub level: SandboxLevel,
    /// Canonical workspace root.
    #[arg(long)]
    pub workspace: PathBuf,
    /// Private tmp directory of this command (writable at every level).
    #[arg(long)]
    pub tmp: PathBuf,
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
    /// absolute path followed by a NUL. Without it, the worker walks the
    /// workspace itself. An fd that cannot be read fails the setup.
    #[arg(long)]
    pub protected_fd: Option<i32>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

impl WorkerArgs {
    /// The command line for these options (after the subcommand name).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut opt = |k: &str, v: OsString| {
            a.push(format!("--{k}").into());
            a.push(v);
        };
        opt("level", self.level.name().into());
        opt("workspace", self.workspace.clone().into());
        opt("tmp", self.tmp.clone().into());
        opt("cpu-secs", self.cpu_secs.to_string().into());
        opt(
            "address-space-bytes",
            self.address_space_bytes.to_string().into(),
        );
        opt("file-size-bytes", self.file_size_bytes.to_string().into());
        opt("processes", self.processes.to_string().into());
        opt("open-files", self.open_files.to_string().into());
        opt("kill-grace-ms", self.kill_grace_ms.to_string().into());
        for p in &self.protect {
            opt("protect", p.clone().into());
        }
        for p in &self.read {
            opt("read", p.clone().into());
        }
        if let Some(c) = &self.cgroup {
            opt("cgroup", c.clone().into());
        }
        if self.best_effort {
            a.push("--best-effort".into());
        }
        if let Some(fd) = self.protected_fd {
            a.push("--protected-fd".into());
            a.push(fd.to_string().into());
        }
        a.push("--".into());
        a.extend(self.command.iter().cloned());
        a
    }

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

/// Runs the worker; does not return (exits like the command did).
pub fn main(args: WorkerArgs) -> ! {
    // First, before this process opens an fd that could take its number.
    let protected = args.protected_fd.map(read_protected).transpose();
    // SAFETY: the status fd is ours, passed by the server on purpose; no
    // other File owns it.
    let mut status = unsafe { File::from_raw_fd(STATUS_FD) };
    match protected.and_then(|p| supervise(&args, p.as_deref(), &mut status)) {
        Ok(ended) => {
            let line = match ended {
                Ended::Code(c) => serde_json::json!({ "exit_code": c }),
                Ended::Signal(s) => serde_json::json!({ "signal": s }),
            };
            let _ = writeln!(status, "{line}");
            drop(status);
            exit_like(ended)
        }
        Err(message) => {
            let _ = writeln!(status, "{}", serde_json::json!({ "setup_error": message }));
            std::process::exit(SETUP_FAILED_EXIT)
        }
    }
}

fn exit_like(ended: Ended) -> ! {
    match ended {
        Ended::Code(c) => std::process::exit(c),
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
            }
            std::process::exit(128 + s)
        }
    }
}

fn errno(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Steps 1 and 3 of the module doc; the fork in between.
/// `protected`: the workspace's protected paths the server passed, if any.
fn supervise(
    args: &WorkerArgs,
    protected: Option<&[PathBuf]>,
    status: &mut File,
) -> Result<Ended, String> {
    // SAFETY: plain syscalls on our own process with valid arguments.
    let worker_pid = unsafe {
        // EPERM when we already lead a group: fine, we are one then.
        libc::setsid();
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(errno("PR_SET_PDEATHSIG"));
        }
        // The server may have died before the line above took effect.
        if libc::getppid() == 1 {
            return Err("the server exited".into());
        }
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(errno("PR_SET_CHILD_SUBREAPER"));
        }
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::getpid()
    };
    if let Some(cg) = &args.cgroup {
        // Joining before the fork puts the command and all it spawns in the
        // cgroup, whose pids.max the server already set.
        std::fs::write(cg.join("cgroup.procs"), "0")
            .map_err(|e| format!("joining cgroup {}: {e}", cg.display()))?;
    }
    let signals = [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP];
    // SAFETY: building and installing a signal mask for this thread.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in signals {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };

    // SAFETY: the worker is single-threaded (no async runtime, no threads
    // spawned), so the child may allocate and run ordinary Rust code.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(errno("fork"));
    }
    if child == 0 {
        let err = confine_and_exec(args, protected, worker_pid);
        let _ = writeln!(status, "{}", serde_json::json!({ "setup_error": err }));
        // SAFETY: leaving the forked child without running the parent's
        // destructors or atexit handlers.
        unsafe { libc::_exit(SETUP_FAILED_EXIT) }
    }

    let grace = Duration::from_millis(args.kill_grace_ms);
    let mut ended: Option<Ended> = None;
    let mut deadline: Option<Instant> = None;
    while ended.is_none() {
        let sig = wait_signal(
            &set,
            deadline.map(|d| d.saturating_duration_since(Instant::now())),
        );
        match sig {
            Some(libc::SIGCHLD) => {
                reap(child, &mut ended, false);
            }
            Some(_) => {
                if deadline.is_none() {
                    kill_tree(worker_pid, child, args.cgroup.as_deref(), libc::SIGTERM);
                    deadline = Some(Instant::now() + grace);
                }
            }
            // Grace over: the final sweep below kills what is left.
            None => break,
        }
    }
    // The command is gone (or out of grace). Whatever it left behind dies
    // now: in its group, re-parented to us, or in our cgroup.
    loop {
        kill_tree(worker_pid, child, args.cgroup.as_deref(), libc::SIGKILL);
        if reap(child, &mut ended, true) {
            break;
        }
    }
    Ok(ended.unwrap_or(Ended::Signal(libc::SIGKILL)))
}

/// Waits for one of the blocked signals, or the timeout. `None` on timeout.
fn wait_signal(set: &libc::sigset_t, timeout: Option<Duration>) -> Option<i32> {
    loop {
        // SAFETY: `set` is a valid signal set; a null/valid timespec pointer.
        let r = unsafe {
            match timeout {
                None => libc::sigwaitinfo(set, std::ptr::null_mut()),
                Some(t) => {
                    let ts = libc::timespec {
                        tv_sec: t.as_secs() as libc::time_t,
                        tv_nsec: t.subsec_nanos() as libc::c_long,
                    };
                    libc::sigtimedwait(set, std::ptr::null_mut(), &ts)
                }
            }
        };
        if r >= 0 {
            return Some(r);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            _ => return None,
        }
    }
}

/// Reaps children. With `block`, waits for one child and returns true when
/// none is left (ECHILD); otherwise reaps what has exited and returns false.
fn reap(command: libc::pid_t, ended: &mut Option<Ended>, block: bool) -> bool {
    loop {
        let mut st: libc::c_int = 0;
        let flags = if block { 0 } else { libc::WNOHANG };
        // SAFETY: waitpid writes the status into a valid local.
        let pid = unsafe { libc::waitpid(-1, &mut st, flags) };
        if pid < 0 {
            return match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                _ => true,
            };
        }
        if pid == 0 {
            return false;
        }
        if pid == command {
            *ended = Some(if libc::WIFSIGNALED(st) {
                Ended::Signal(libc::WTERMSIG(st))
            } else {
                Ended::Code(libc::WEXITSTATUS(st))
            });
        }
        if block {
            return false;
        }
    }
}

/// Sends `sig` to the command's process group, every descendant of the
/// worker (found through `/proc`: those that left the group with `setsid`),
/// and every process of the command's cgroup.
fn kill_tree(worker: libc::pid_t, command: libc::pid_t, cgroup: Option<&Path>, sig: i32) {
    // SAFETY: signalling processes we spawned; errors (ESRCH) are expected.
    unsafe {
        libc::kill(-command, sig);
    }
    // Reading every process's /proc stat is most of what the worker does
    // for a short command; with no child left there is no descendant.
    let mut targets = if has_children() {
        descendants(worker)
    } else {
        Vec::new()
    };
    if let Some(cg) = cgroup
        && let Ok(procs) = std::fs::read_to_string(cg.join("cgroup.procs"))
    {
        targets.extend(
            procs
                .lines()
                .filter_map(|l| l.trim().parse::<libc::pid_t>().ok()),
        );
    }
    for pid in targets {
        if pid != worker && pid > 1 {
            // SAFETY: as above.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }
}

/// Whether this process has a child (running, stopped or a zombie). Every
/// descendant's parent chain passes through a child (orphans are
/// re-parented to us, the subreaper), so none means no descendant, and no
/// new one can appear. Unsure (an error other than ECHILD) counts as yes.
fn has_children() -> bool {
    // SAFETY: waitid writes into a zeroed local; WNOWAIT reaps nothing.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WSTOPPED | libc::WCONTINUED | libc::WNOHANG | libc::WNOWAIT,
        );
        !(r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
    }
}

/// Every process whose parent chain leads to `root`, from `/proc/*/stat`.
fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut parent_of: Vec<(libc::pid_t, libc::pid_t)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may contain spaces and ')'.
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = after
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<libc::pid_t>().ok())
            {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

// === the command process ===

/// Step 2 of the module doc. Returns only on failure, with the reason.
fn confine_and_exec(
    args: &WorkerArgs,
    protected: Option<&[PathBuf]>,
    worker_pid: libc::pid_t,
) -> String {
    // SAFETY: plain syscalls on our own (single-threaded) process.
    unsafe {
        // Its own group, so the worker can signal the whole command at once.
        libc::setpgid(0, 0);
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return errno("PR_SET_PDEATHSIG");
        }
        if libc::getppid() != worker_pid {
            return "the worker exited".into();
        }
        // Undo the worker's mask and Rust's ignored SIGPIPE: both would be
        // inherited by the command and everything it runs.
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // Every inherited fd above stderr (the status pipe included) closes
        // on exec: a leaked server socket or file must not reach the command.
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        if libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            return errno("close_range");
        }
    }
    if args.level.is_confined() {
        let mut ruleset = match landlock_ruleset(args) {
            Ok(r) => r,
            Err(e) => return e,
        };
        // Grants are opened before capabilities go, as they always were.
        if let Err(e) = fs_rules(args, protected, &mut ruleset) {
            return e;
        }
        if let Err(e) = drop_capabilities() {
            return e;
        }
        if let Err(e) = apply_landlock(args, ruleset) {
            return e;
        }
        if let Err(e) = apply_seccomp(args.level.allows_network()) {
            return e;
        }
    }
    // Last: building the Landlock rules holds an fd per grant, which a low
    // RLIMIT_NOFILE would refuse.
    if let Err(e) = set_rlimits(&args.limits()) {
        return e;
    }
    let Some((program, rest)) = args.command.split_first() else {
        return "no command given".into();
    };
    let err = std::process::Command::new(program).args(rest).exec();
    format!("exec {}: {err}", Path::new(program).display())
}

fn set_rlimits(l: &ResourceLimits) -> Result<(), String> {
    let set = |res, v: u64, name: &str| -> Result<(), String> {
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into a valid local struct.
        if unsafe { libc::getrlimit(res, &mut current) } != 0 {
            return Err(errno(&format!("getrlimit {name}")));
        }
        // Capabilities are gone: a limit can only be lowered, so a
        // configured value above the inherited hard limit becomes that.
        let v = (v as libc::rlim_t).min(current.rlim_max);
        let lim = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        // SAFETY: setrlimit reads a valid local struct.
        if unsafe { libc::setrlimit(res, &lim) } != 0 {
            return Err(errno(&format!("setrlimit {name}={v}")));
        }
        Ok(())
    };
    set(libc::RLIMIT_CPU, l.cpu_secs, "RLIMIT_CPU")?;
    set(libc::RLIMIT_AS, l.address_space_bytes, "RLIMIT_AS")?;
    set(libc::RLIMIT_FSIZE, l.file_size_bytes, "RLIMIT_FSIZE")?;
    set(libc::RLIMIT_NPROC, l.processes, "RLIMIT_NPROC")?;
    set(libc::RLIMIT_NOFILE, l.open_files, "RLIMIT_NOFILE")?;
    set(libc::RLIMIT_CORE, 0, "RLIMIT_CORE")
}

/// Drops every capability (bounding, ambient, effective, permitted,
/// inheritable). A server running as root would otherwise hand the command
/// CAP_SYS_MODULE, CAP_SYS_ADMIN, … which Landlock does not restrict. For a
/// non-root server there is nothing to drop and the calls that need
/// CAP_SETPCAP are skipped.
fn drop_capabilities() -> Result<(), String> {
    // SAFETY: prctl and capset with valid arguments on our own process.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::geteuid() == 0 {
            let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
                .ok()
                .and_then(|s| s.trim().parse::<libc::c_ulong>().ok())
                .unwrap_or(63);
            for cap in 0..=last {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
                {
                    return Err(errno(&format!("PR_CAPBSET_DROP {cap}")));
                }
            }
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
        let header = Header {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) != 0 {
            return Err(errno("capset"));
        }
    }
    Ok(())
}

/// The Landlock ruleset being built: each grant (an fd opened without
/// following symlinks, and rights) is added as soon as it is found and its
/// fd closed, so the worker holds a handful of fds whatever the number of
/// grants (a repository root with thousands of entries would otherwise run
/// into the inherited RLIMIT_NOFILE).
struct Grants<'a> {
    ruleset: &'a mut RulesetCreated,
}

impl Grants<'_> {
    fn add(&mut self, fd: OwnedFd, access: BitFlags<AccessFs>) -> Result<(), String> {
        (&mut *self.ruleset)
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("Landlock: {e}"))?;
        Ok(())
    }
}

/// Whether `set` holds `dir` or a path beneath it. Paths order component
/// by component, so everything beneath `dir` follows it contiguously: the
/// first element not below `dir` answers.
fn any_at_or_beneath(set: &BTreeSet<PathBuf>, dir: &Path) -> bool {
    set.range::<Path, _>((Bound::Included(dir), Bound::Unbounded))
        .next()
        .is_some_and(|p| p.starts_with(dir))
}

fn open_nofollow(
    dirfd: Option<&OwnedFd>,
    path: &Path,
    directory: bool,
) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut flags = libc::O_CLOEXEC | libc::O_NOFOLLOW;
    flags |= if directory {
        libc::O_RDONLY | libc::O_DIRECTORY
    } else {
        libc::O_PATH
    };
    let base = dirfd.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a valid NUL-terminated path and flags; the fd is owned below.
    let fd = unsafe { libc::openat(base, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Grants `access` on `dir` except on `excluded` paths beneath it: a
/// directory on the way to an excluded path gets no grant of its own, its
/// other children get one each (files: only the file rights of `access`).
/// Symlinks never get a grant.
fn grant_except(
    grants: &mut Grants<'_>,
    dirfd: OwnedFd,
    dir: &Path,
    access: BitFlags<AccessFs>,
    excluded: &BTreeSet<PathBuf>,
) -> Result<(), String> {
    if excluded.contains(dir) {
        return Ok(());
    }
    if !any_at_or_beneath(excluded, dir) {
        return grants.add(dirfd, access);
    }
    let listing = File::from(
        open_nofollow(Some(&dirfd), Path::new("."), true)
            .map_err(|e| format!("open {}: {e}", dir.display()))?,
    );
    let entries = cap_std::fs::Dir::from_std_file(listing)
        .entries()
        .map_err(|e| format!("list {}: {e}", dir.display()))?;
    let file_access = access & AccessFs::from_file(TARGET_ABI);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let path = dir.join(&name);
        let Ok(ft) = entry.file_type() else { continue };
        if ft.is_dir() {
            // Gone or swapped for a symlink since listing: no grant.
            if let Ok(fd) = open_nofollow(Some(&dirfd), Path::new(&name), true) {
                grant_except(grants, fd, &path, access, excluded)?;
            }
        } else if !ft.is_symlink()
            && !excluded.contains(&path)
            && let Ok(fd) = open_nofollow(Some(&dirfd), Path::new(&name), false)
        {
            grants.add(fd, file_access)?;
        }
    }
    Ok(())
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
    let mut paths = Vec::new();
    for raw in text.split(|b| *b == 0).filter(|r| !r.is_empty()) {
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

/// The filesystem grants for `args.level` (step 2 of the module doc),
/// added to `ruleset` as they are found. `protected`: the workspace's
/// protected paths from the server; `None` walks the workspace for them.
fn fs_rules(
    args: &WorkerArgs,
    protected: Option<&[PathBuf]>,
    ruleset: &mut RulesetCreated,
) -> Result<(), String> {
    let read = AccessFs::from_read(TARGET_ABI);
    let all = AccessFs::from_all(TARGET_ABI);
    let grants = &mut Grants { ruleset };
    let none = BTreeSet::new();
    let config_protected: BTreeSet<PathBuf> = args.protect.iter().cloned().collect();
    let add_tree = |grants: &mut Grants<'_>, path: &Path, access, excluded: &BTreeSet<PathBuf>| {
        match open_nofollow(None, path, true) {
            Ok(fd) => grant_except(grants, fd, path, access, excluded),
            // Missing system directories are normal (no /lib32 here).
            Err(_) => Ok(()),
        }
    };
    for dir in SYSTEM_READ_DIRS {
        add_tree(grants, Path::new(dir), read, &none)?;
    }
    for dir in &args.read {
        add_tree(grants, dir, read, &config_protected)?;
    }
    let mut etc_excluded: BTreeSet<PathBuf> = ETC_SECRETS
        .iter()
        .map(|s| Path::new("/etc").join(s))
        .collect();
    if let Ok(ssh) = std::fs::read_dir("/etc/ssh") {
        // Host private keys; their `.pub` halves stay readable.
        etc_excluded.extend(ssh.flatten().map(|e| e.path()).filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n.starts_with("ssh_host_") && !n.ends_with(".pub")
        }));
    }
    etc_excluded.extend(args.protect.iter().cloned());
    add_tree(grants, Path::new("/etc"), read, &etc_excluded)?;
    // Resolver config is often a symlink into /run.
    for dir in ["/run/systemd/resolve", "/run/resolvconf"] {
        add_tree(grants, Path::new(dir), read, &none)?;
    }
    // /proc: the command's own view (ps, /proc/self/fd for `<(…)`); other
    // processes' secrets (environ, mem, fds) stay behind Landlock's ptrace
    // check: a confined process cannot ptrace-access one outside its domain.
    add_tree(
        grants,
        Path::new("/proc"),
        AccessFs::ReadFile | AccessFs::ReadDir,
        &none,
    )?;
    for dev in READ_DEVICES {
        if let Ok(fd) = open_nofollow(None, Path::new(dev), false) {
            grants.add(fd, AccessFs::ReadFile.into())?;
        }
    }
    let null = open_nofollow(None, Path::new("/dev/null"), false)
        .map_err(|e| format!("open /dev/null: {e}"))?;
    grants.add(
        null,
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
    )?;
    let ws = open_nofollow(None, &args.workspace, true)
        .map_err(|e| format!("open workspace {}: {e}", args.workspace.display()))?;
    if args.level.writes_workspace() {
        let mut protected: BTreeSet<PathBuf> = match protected {
            Some(p) => p.iter().cloned().collect(),
            None => protected_in(&args.workspace).into_iter().collect(),
        };
        protected.extend(args.protect.iter().cloned());
        grants.add(ws.try_clone().map_err(|e| format!("dup: {e}"))?, read)?;
        grant_except(grants, ws, &args.workspace, all, &protected)?;
    } else {
        grants.add(ws, read)?;
    }
    let tmp = open_nofollow(None, &args.tmp, true)
        .map_err(|e| format!("open private tmp {}: {e}", args.tmp.display()))?;
    grants.add(tmp, all)
}

/// The Landlock ruleset of `args.level`, created (nothing enforced yet).
fn landlock_ruleset(args: &WorkerArgs) -> Result<RulesetCreated, String> {
    let err = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(err)?
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(err)?;
    if !args.level.allows_network() {
        // Handled with no rule: no TCP bind or connect at all. seccomp
        // already refuses non-UNIX sockets; this holds if it were bypassed.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET_ABI))
            .map_err(err)?;
    }
    ruleset.create().map_err(err)
}

/// Enforces `ruleset` on this process from now on.
fn apply_landlock(args: &WorkerArgs, ruleset: RulesetCreated) -> Result<(), String> {
    let status = ruleset
        .restrict_self()
        .map_err(|e| format!("Landlock: {e}"))?;
    if !status.no_new_privs {
        return Err("no_new_privs could not be set".into());
    }
    if status.ruleset == RulesetStatus::NotEnforced && !args.best_effort {
        return Err("Landlock is not enforced by this kernel".into());
    }
    Ok(())
}

/// The seccomp program: `EPERM` for the listed syscalls, for `socket` with
/// a family other than AF_UNIX (unless `network`), and for `clone` with a
/// namespace flag.
fn seccomp_program(network: bool) -> Result<BpfProgram, String> {
    let err = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let denied: &[i64] = &[
        // Debugging other processes, reading/writing their memory.
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        // io_uring runs operations outside the syscall filter.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        // Kernel attack surface and kernel state.
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_syslog,
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        // Handle-based opens skip path checks' intent.
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        // Mounts and namespaces: a new view of the filesystem.
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        // Kernel keyrings hold other users' and the server's secrets.
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ];
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> =
        denied.iter().map(|s| (*s, Vec::new())).collect();
    if !network {
        rules.insert(
            libc::SYS_socket,
            vec![
                SeccompRule::new(vec![
                    SeccompCondition::new(
                        0,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::Ne,
                        libc::AF_UNIX as u64,
                    )
                    .map_err(err)?,
                ])
                .map_err(err)?,
            ],
        );
    }
    let ns_flags = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ];
    let mut clone_rules = Vec::new();
    for flag in ns_flags {
        let flag = flag as u64;
        clone_rules.push(
            SeccompRule::new(vec![
                SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(flag),
                    flag,
                )
                .map_err(err)?,
            ])
            .map_err(err)?,
        );
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("seccomp: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(err)?;
    filter.try_into().map_err(err)
}

/// `clone3` passes its flags in memory a filter cannot read: refuse it with
/// ENOSYS so libc falls back to `clone`, whose flags the first filter sees.
fn clone3_program() -> Result<BpfProgram, String> {
    let err = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let arch = std::env::consts::ARCH.try_into().map_err(err)?;
    let filter = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(err)?;
    filter.try_into().map_err(err)
}

/// x32 system calls reach the same kernel entry points under numbers with
/// bit 30 set and the x86_64 audit arch, so the per-number rules above would
/// not see them: refuse every one (where the kernel has x32 at all).
#[cfg(target_arch = "x86_64")]
fn x32_program() -> BpfProgram {
    use seccompiler::sock_filter;
    // BPF_LD | BPF_W | BPF_ABS (the first two are 0).
    const LD_W_ABS: u16 = 0x20;
    const JMP_JEQ_K: u16 = 0x05 | 0x10;
    const JMP_JGE_K: u16 = 0x05 | 0x30;
    const RET_K: u16 = 0x06;
    const ARCH_OFFSET: u32 = 4;
    const NR_OFFSET: u32 = 0;
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let op = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    vec![
        op(LD_W_ABS, ARCH_OFFSET, 0, 0),
        op(JMP_JEQ_K, AUDIT_ARCH_X86_64, 0, 3),
        op(LD_W_ABS, NR_OFFSET, 0, 0),
        op(JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        op(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32, 0, 0),
        op(RET_K, libc::SECCOMP_RET_ALLOW, 0, 0),
    ]
}

fn apply_seccomp(network: bool) -> Result<(), String> {
    let main = seccomp_program(network)?;
    let clone3 = clone3_program()?;
    #[cfg(target_arch = "x86_64")]
    seccompiler::apply_filter(&x32_program()).map_err(|e| format!("seccomp: {e}"))?;
    seccompiler::apply_filter(&clone3).map_err(|e| format!("seccomp: {e}"))?;
    seccompiler::apply_filter(&main).map_err(|e| format!("seccomp: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beneath_finds_descendants_in_the_ordered_set() {
        let set: BTreeSet<PathBuf> = ["/w/a/.git", "/w/ab", "/w/b/c/d", "/w/b.c"]
            .into_iter()
            .map(PathBuf::from)
            .collect();
        for (dir, expected) in [
            ("/w", true),
            ("/w/a", true),
            ("/w/a/.git", true),
            ("/w/ab", true),
            ("/w/b", true),
            ("/w/b/c", true),
            ("/w/b/c/d/e", false),
            ("/w/a/src", false),
            ("/w/aa", false),
            ("/w/c", false),
            ("/x", false),
        ] {
            assert_eq!(any_at_or_beneath(&set, Path::new(dir)), expected, "{dir}");
        }
    }

    #[test]
    fn seccomp_programs_compile() {
        assert!(!seccomp_program(false).unwrap().is_empty());
        assert!(!seccomp_program(true).unwrap().is_empty());
        assert!(!clone3_program().unwrap().is_empty());
    }

    #[test]
    fn worker_args_round_trip() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: WorkerArgs,
        }
        let a = WorkerArgs {
            level: SandboxLevel::ReadOnly,
            workspace: "/w".into(),
            tmp: "/t".into(),
            cpu_secs: 1,
            address_space_bytes: 2,
            file_size_bytes: 3,
            processes: 4,
            open_files: 5,
            kill_grace_ms: 6,
            protect: vec!["/w/c.toml".into()],
            read: vec![],
            cgroup: Some("/sys/fs/cgroup/pids/x".into()),
            best_effort: true,
            protected_fd: Some(PROTECTED_FD),
            command: vec!["bash".into(), "-c".into(), "--x".into()],
        };
        let mut argv: Vec<OsString> = vec!["w".into()];
        argv.extend(a.to_args());
        let b = P::parse_from(argv).a;
        assert_eq!(b.level, SandboxLevel::ReadOnly);
        assert_eq!(b.protect, a.protect);
        assert_eq!(b.cgroup, a.cgroup);
        assert!(b.best_effort);
        assert_eq!(b.protected_fd, Some(PROTECTED_FD));
        assert_eq!(b.command, a.command);
    }
}
