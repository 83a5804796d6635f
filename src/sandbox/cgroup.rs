//! The per-command pids cgroup, on the server's side: made (with its
//! `pids.max`) before the command's worker joins it, and swept (every
//! process in it SIGKILLed, then the directory removed) once the command
//! ended, so that nothing a command started outlives its call and no
//! directory is left behind.
//!
//! Who joins it is not decided here: the zygote's spare worker joins the
//! cgroup made for the *next* command ahead of time (see
//! [`super::zygote`]), and how it joins decides whether that waits for an
//! RCU grace period holding `cgroup_mutex`, which the `mkdir` and `rmdir`
//! here take too (see [`super::worker::join_cgroup`]).

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Maximum rounds of "kill everything in the cgroup" before giving up on a
/// cgroup that keeps gaining members (it stays; pids.max still bounds it).
const CGROUP_SWEEPS: usize = 100;

/// How long one sweep waits for the processes it SIGKILLed to exit: a
/// killed process exits at once unless it is inside an uninterruptible
/// wait, such as a spare worker joining its cgroup (one RCU grace period,
/// ~10–25 ms). Bounded so that a process stuck in the kernel cannot hang
/// the server; the cgroup is then left, with pids.max still binding it.
const SWEEP_WAIT: Duration = Duration::from_secs(2);

/// A pids cgroup for one command; on drop, kills whatever is still in it,
/// waits for it to exit and removes the directory.
#[derive(Debug)]
pub struct CommandCgroup {
    dir: PathBuf,
    max: u64,
}

impl CommandCgroup {
    /// A new child of `base` (a pids cgroup we may create children in) with
    /// `pids.max` = `max`.
    pub fn create(base: &Path, max: u64) -> std::io::Result<Self> {
        let dir = base.join(format!("toolsched-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir)?;
        // Made first, so that a failure below still removes the directory.
        let me = Self { dir, max };
        std::fs::write(me.dir.join("pids.max"), max.to_string())?;
        Ok(me)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sets `pids.max` to `max` unless it already is (a cgroup made ahead
    /// for the next command, which may come from a sandbox with another
    /// limit).
    pub fn set_max(&mut self, max: u64) -> std::io::Result<()> {
        if self.max != max {
            std::fs::write(self.dir.join("pids.max"), max.to_string())?;
            self.max = max;
        }
        Ok(())
    }
}

impl CommandCgroup {
    /// Sweeps and removes the cgroup (see [`sweep`]) on a blocking thread,
    /// and waits for it: a command's call ends only once nothing it started
    /// is left.
    pub async fn remove(mut self) {
        let dir = std::mem::take(&mut self.dir);
        if let Err(e) = tokio::task::spawn_blocking(move || sweep(&dir)).await {
            tracing::warn!(error = %e, "the cgroup sweep did not finish");
        }
    }
}

impl Drop for CommandCgroup {
    /// A cgroup dropped without [`CommandCgroup::remove`] (a spare's, one
    /// made for a command that never started) is swept behind, on a
    /// blocking thread: the sweep may wait up to [`SWEEP_WAIT`], which must
    /// not stall a runtime thread (or the zygote's lock held around it).
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.dir);
        if dir.as_os_str().is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || sweep(&dir));
            }
            Err(_) => sweep(&dir),
        }
    }
}

/// Kills whatever is still in the cgroup `dir`, waits for it to exit and
/// removes the directory; blocking (up to [`SWEEP_WAIT`] per round).
fn sweep(dir: &Path) {
    let until = Instant::now() + SWEEP_WAIT;
    for _ in 0..CGROUP_SWEEPS {
        let procs = match std::fs::read_to_string(dir.join("cgroup.procs")) {
            Ok(p) => p,
            // Removed already (a zygote that cleaned up its spare's).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => String::new(),
        };
        let pids: Vec<i32> = procs
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.is_empty() {
            match std::fs::remove_dir(dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => {}
            }
        }
        let killed: Vec<OwnedFd> = pids
            .into_iter()
            .filter_map(|p| kill_member(p, dir))
            .collect();
        if killed.is_empty() {
            std::thread::yield_now();
        } else if !wait_exited(&killed, until) {
            break;
        }
    }
    tracing::warn!(cgroup = %dir.display(), "could not empty the command's cgroup");
}

/// SIGKILLs `pid` if it is (still) a member of the cgroup `dir`, and
/// returns a pidfd to wait for its exit. A pid read from `cgroup.procs` may
/// have exited and been reused by an unrelated process since: the pidfd
/// pins one process, and it is killed only when `/proc/<pid>/cgroup`, read
/// while that process is seen alive before and after, names `dir`.
fn kill_member(pid: i32, dir: &Path) -> Option<OwnedFd> {
    // SAFETY: pidfd_open with a pid and no flags; the fd is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: just returned by pidfd_open, owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let name = dir.file_name()?.to_string_lossy().into_owned();
    let member = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|c| {
            c.lines()
                .any(|l| l.rsplit('/').next() == Some(name.as_str()))
        })
        .unwrap_or(false);
    if !member || exited(&pidfd, 0) {
        return None;
    }
    // SAFETY: pidfd_send_signal on a pidfd we own; ESRCH once it ended.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        );
    }
    Some(pidfd)
}

/// Waits until every process of `pidfds` exited (a pidfd turns readable
/// then; its zombie no longer counts in the cgroup) or `until` passed.
/// True when all did.
fn wait_exited(pidfds: &[OwnedFd], until: Instant) -> bool {
    pidfds.iter().all(|fd| {
        let left = until.saturating_duration_since(Instant::now());
        exited(fd, left.as_millis().min(i32::MAX as u128) as i32)
    })
}

/// Whether the process of `pidfd` exited, waiting up to `timeout_ms`.
fn exited(pidfd: &OwnedFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return r > 0;
    }
}
