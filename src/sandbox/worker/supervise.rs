//! The worker's supervision (steps 1 and 3 of [`super`]'s list): it leads
//! its own session, dies with the server, becomes the child subreaper, joins
//! the command's cgroup, forks the command process, waits for it and for
//! SIGTERM, and kills and reaps every descendant.
//!
//! Not here: what the forked process does before `exec` ([`super::confine`]).

#![allow(unsafe_code)]

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::confine::confine_and_exec;
use super::{Ended, SETUP_FAILED_EXIT, WorkerArgs, errno};

/// Steps 1 and 3 of the module doc; the fork in between.
/// `protected`: the workspace's protected paths the server passed, if any.
pub(super) fn supervise(
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
