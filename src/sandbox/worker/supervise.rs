//! The worker's supervision (steps 1 and 3 of [`super`]'s list): it leads
//! its own session, ends its command when the server dies, becomes the
//! child subreaper, joins
//! the command's cgroup, starts the command process, waits for it and for
//! SIGTERM, and kills and reaps every descendant.
//!
//! Not here: what the command process does before `exec` ([`super::confine`]).

#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::confine::{Launch, drop_capabilities};
use super::metadata::MetadataGuard;
use super::mounts::{ANCHOR_TMP, MountView};
use super::protected_in;
use super::{Ended, Forked, WorkerArgs, errno};

/// The worker's parent-death signal (`PR_SET_PDEATHSIG`). Not SIGKILL: a
/// worker killed outright would leave its command's descendants (which the
/// fork cleared of any parent-death signal) re-parented to init, running
/// on after the server died. On this signal the worker kills the whole
/// command at once (its group, its re-parented descendants, its cgroup),
/// reaps it and exits; before its command started, it just ends (the
/// default action).
const PARENT_DIED: i32 = libc::SIGHUP;

/// Steps 1 and 3 of the module doc; the command's start in between.
/// `protected`: the workspace's protected paths the server passed, if any.
/// `forked`: what the zygote that forked this worker handed it, if one did
/// (else the server exec'd it).
pub(super) fn supervise(
    args: &WorkerArgs,
    protected: Option<&[PathBuf]>,
    forked: Option<Forked>,
    status: &mut File,
) -> Result<Ended, String> {
    let proc_hidden = forked.as_ref().is_some_and(|f| f.proc_hidden);
    let parent = forked.as_ref().map(|f| f.zygote);
    let settled = forked.as_ref().and_then(|f| f.settled.clone());
    let (mut prepared, mut ahead, namespace_before, started_signal) = forked
        .map_or((None, None, None, None), |f| {
            (f.ruleset, f.ahead, f.namespace_before, f.started)
        });
    let namespace_ahead = namespace_before.is_some();
    // A spare worker settled and joined its cgroup before its command came
    // (see [`super::super::zygote`]); everyone else does it now.
    let (worker_pid, joined) = match settled {
        Some(s) => (s.worker, s.joined),
        None => (settle(parent)?, None),
    };
    if let Some(cg) = &args.cgroup {
        match joined {
            Some(Ok(j)) if &j == cg => {}
            // The spare's join failed (or it joined another): once more,
            // and this time its failure is the command's. A process it
            // confined ahead is where the spare was, not in the cgroup.
            _ => {
                if let Some(a) = ahead.take() {
                    a.abort();
                }
                join_cgroup(cg)?
            }
        }
    }
    // The workspace's protected paths, walked here once when the server
    // passed none: the mounts, the grants and the metadata guard use them.
    let walked;
    let protected: Option<&[PathBuf]> = match protected {
        Some(p) => Some(p),
        None if args.level.writes_workspace() => {
            walked = protected_in(&args.workspace);
            Some(&walked)
        }
        None => None,
    };
    // Before the clone, so the worker (which performs the trapped calls) and
    // the command see the same read-only mounts; while the worker still has
    // its capabilities.
    let mounted = args.level.is_confined() && !args.landlock_only;
    if let Some(ns) = &namespace_before
        && !mounted
    {
        // The spare made a namespace for a confined command; this one
        // runs in the zygote's, as one forked for it would.
        back_to(ns)?;
    }
    let mounts = super::mounts::enter(
        mounted,
        args.level.writes_workspace(),
        &args.workspace,
        protected.unwrap_or_default(),
        args.tmp_at.as_deref().map(|a| (args.tmp.as_path(), a)),
        proc_hidden,
        namespace_ahead && mounted,
    );
    drop(namespace_before);
    if mounted {
        enter_again()?;
    }
    // The tmp the command sees: at its anchor, or (no bind) its own path,
    // where the server's environment then must point too.
    let tmp = match &args.tmp_at {
        Some(anchor) if mounts.tmp_anchored => anchor.join(ANCHOR_TMP),
        Some(anchor) => {
            let anchored = anchor.join(ANCHOR_TMP);
            for var in ["TMPDIR", "HOME"] {
                if std::env::var_os(var).is_some_and(|v| Path::new(&v) == anchored) {
                    // SAFETY: the worker is single-threaded.
                    unsafe { std::env::set_var(var, &args.tmp) };
                }
            }
            args.tmp.clone()
        }
        None => args.tmp.clone(),
    };
    // The zygote's ruleset assumes these mounts: the tmp beneath the
    // anchor, the protected paths read-only (or not writable at all), and
    // the `/proc` it was built with.
    let usable = mounts.tmp_anchored
        && !mounts.proc_mounted
        && (mounts.protected_read_only || !args.level.writes_workspace());
    if !usable {
        prepared = None;
    }
    let signals = [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, PARENT_DIED];
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

    // The command process: everything it needs is prepared here, then it
    // is cloned and this returns once it `exec`ed (see [`super::confine`]),
    // with the metadata filter's listener (confined levels).
    // The process confined ahead holds the prepared ruleset: usable only
    // where that ruleset is.
    let ahead = match ahead {
        Some(a) if prepared.is_some() => Some(a),
        Some(a) => {
            a.abort();
            None
        }
        None => None,
    };
    let launch = Launch::prepare(args, protected, mounts, &tmp, prepared, worker_pid)?;
    let started = match ahead {
        Some(a) => launch.start_ahead(a)?,
        None => launch.start()?,
    };
    // The command runs: the zygote may fork the next spare now.
    drop(started_signal);
    let child = started.pid;
    if let Some(message) = &started.failure {
        super::report(status, &serde_json::json!({ "setup_error": message }));
    }
    let mut listener = started.listener;
    let guard = metadata_guard(args, protected, mounts, &tmp);
    // From here on the worker only waits, signals, reads /proc and performs
    // the command's allowed metadata calls: with no capability, it can never
    // do more for the command than the command's uid could itself.
    if args.level.is_confined() {
        drop_capabilities()?;
    }
    // SAFETY: a signalfd for the signals blocked above.
    let sfd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
    if sfd < 0 {
        return Err(errno("signalfd"));
    }
    // SAFETY: just created, owned by nobody else.
    let sfd = unsafe { OwnedFd::from_raw_fd(sfd) };

    let grace = Duration::from_millis(args.kill_grace_ms);
    let mut ended: Option<Ended> = None;
    let mut deadline: Option<Instant> = None;
    while ended.is_none() {
        let sig = wait_event(&sfd, &mut listener, &guard, deadline);
        match sig {
            Some(libc::SIGCHLD) => {
                reap(child, &mut ended, false);
            }
            // Nobody waits for the command any more: everything of it dies
            // now, without a grace.
            Some(PARENT_DIED) => break,
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

/// Enters the command's directory again, by its path, now that the
/// command's mounts exist. The worker entered it before they did (the
/// zygote's child sets it from the request), so it stayed on the writable
/// mount beneath them: the workspace root and every directory on the way to
/// a protected path are bound on themselves, and a command whose directory
/// was `.git`, or one on the way to a nested repository, then wrote the
/// repository through relative paths. The same directory, or a setup error.
fn enter_again() -> Result<(), String> {
    Here::now()?.enter("while its mounts were made")
}

/// The command's directory: its path and its inode.
struct Here {
    path: PathBuf,
    id: (u64, u64),
}

impl Here {
    fn fail(e: std::io::Error) -> String {
        format!("entering the command's directory again: {e}")
    }

    fn id() -> Result<(u64, u64), String> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(".").map_err(Self::fail)?;
        Ok((m.dev(), m.ino()))
    }

    fn now() -> Result<Self, String> {
        Ok(Self {
            id: Self::id()?,
            path: std::env::current_dir().map_err(Self::fail)?,
        })
    }

    /// Enters the directory by its path: the same inode, or a setup error.
    fn enter(self, meanwhile: &str) -> Result<(), String> {
        std::env::set_current_dir(&self.path).map_err(Self::fail)?;
        if Self::id()? != self.id {
            return Err(format!(
                "the command's directory {} changed {meanwhile}",
                self.path.display()
            ));
        }
        Ok(())
    }
}

/// Returns to the mount namespace `ns` (the zygote's, kept by a spare that
/// made its own ahead), in the same directory: `setns` moves the caller to
/// the namespace's root (a breaker's finding: a command at level `none`
/// after a confined one ran in `/`, whatever its `dir_path`).
fn back_to(ns: &OwnedFd) -> Result<(), String> {
    let here = Here::now()?;
    // SAFETY: setns on a namespace fd we own, in this single-threaded process.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) } != 0 {
        return Err(errno("returning to the zygote's mount namespace"));
    }
    here.enter("when it returned to the zygote's mount namespace")
}

/// The first part of step 1, which depends on nothing of the command:
/// leads its own session, is told of its parent's death (`parent`: the
/// zygote, else the server, which exec'd it) by [`PARENT_DIED`], becomes
/// the child subreaper, takes no core dumps. Returns this process's pid.
pub(in crate::sandbox) fn settle(parent: Option<libc::pid_t>) -> Result<libc::pid_t, String> {
    // SAFETY: plain syscalls on our own process with valid arguments.
    unsafe {
        // EPERM when we already lead a group: fine, we are one then.
        libc::setsid();
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            PARENT_DIED as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(errno("PR_SET_PDEATHSIG"));
        }
        // The server (or the zygote) may have died before the line above
        // took effect: we would then be an orphan, re-parented.
        let ppid = libc::getppid();
        if parent.map_or(ppid == 1, |p| ppid != p) {
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
        Ok(libc::getpid())
    }
}

/// Moves this process into the pids cgroup `cg`. Joining before the fork
/// puts the command and all it spawns in the cgroup, whose pids.max the
/// server already set.
///
/// On cgroup v1 a single-threaded process joins through `tasks`: moving
/// only the calling thread skips `cgroup_threadgroup_rwsem` (the kernel
/// elides it when the thread moved is `current`), while `cgroup.procs`
/// takes it for writing, whose `rcu_sync` sleeps a full RCU grace period
/// (9.6–36 ms measured on this host when joins are 25 ms apart; 0.03 ms
/// through `tasks`) **holding `cgroup_mutex`**, so that the server's
/// `mkdir` and `rmdir` of other commands' cgroups waited for it too
/// (BENCHMARKS.md, "Session 11"). With the only thread moved, the whole
/// process is, and everything it forks after. A process with more than one
/// thread (never a worker: none starts a thread) would leave the others
/// behind, so it joins through `cgroup.procs`; so does one on cgroup v2,
/// which has no `tasks`.
pub(in crate::sandbox) fn join_cgroup(cg: &Path) -> Result<(), String> {
    let tasks = cg.join("tasks");
    let file = if single_threaded() && tasks.exists() {
        tasks
    } else {
        cg.join("cgroup.procs")
    };
    std::fs::write(&file, "0").map_err(|e| format!("joining cgroup {}: {e}", cg.display()))
}

/// Whether this process has exactly one thread (`/proc/self/task`); unsure
/// counts as no.
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.take(2).count() == 1)
}

/// Waits for one of the blocked signals (read from `sfd`), serving the
/// metadata listener meanwhile, until `deadline`. `None` on timeout.
fn wait_event(
    sfd: &OwnedFd,
    listener: &mut Option<OwnedFd>,
    guard: &MetadataGuard,
    deadline: Option<Instant>,
) -> Option<i32> {
    loop {
        let timeout_ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return None;
                }
                left.as_millis().clamp(1, i32::MAX as u128) as i32
            }
        };
        let mut fds = [
            libc::pollfd {
                fd: sfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: listener.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfd entries (a negative fd is ignored).
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
        if let Some(l) = listener.as_ref() {
            if fds[1].revents & libc::POLLIN != 0 {
                guard.serve_one(l.as_raw_fd());
            } else if fds[1].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                // No process under the filter is left.
                *listener = None;
            }
        }
        if fds[0].revents & libc::POLLIN != 0 {
            // SAFETY: signalfd_siginfo is plain data the kernel fills.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            // SAFETY: reading one record into a buffer of its size.
            let n = unsafe {
                libc::read(
                    sfd.as_raw_fd(),
                    (&mut info as *mut libc::signalfd_siginfo).cast(),
                    size,
                )
            };
            if n as usize == size {
                return Some(info.ssi_signo as i32);
            }
        }
    }
}

/// Where the command may change metadata: the roots it may write, minus
/// the protected paths (as [`super::landlock`] grants them).
fn metadata_guard(
    args: &WorkerArgs,
    protected: Option<&[PathBuf]>,
    mounts: MountView,
    tmp: &Path,
) -> MetadataGuard {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut roots = vec![canonical(tmp)];
    let mut excluded: BTreeSet<PathBuf> = args.protect.iter().map(|p| canonical(p)).collect();
    let mut way_locked = excluded.clone();
    let mut workspace = None;
    if args.level.writes_workspace() {
        workspace = Some(canonical(&args.workspace));
        roots.push(canonical(&args.workspace));
        let protected =
            protected.map_or_else(|| protected_in(&args.workspace), <[PathBuf]>::to_vec);
        if !mounts.protected_read_only {
            way_locked.extend(protected.iter().cloned());
        }
        excluded.extend(protected);
    }
    MetadataGuard {
        roots,
        excluded,
        way_locked,
        workspace,
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
