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
    /// is left. With `keep_in`, an emptied cgroup the command could not have
    /// changed (a confined command: Landlock grants nothing under
    /// `/sys/fs/cgroup`) goes to that pool instead of being removed.
    pub async fn remove(mut self, keep_in: Option<&CgroupPool>) {
        let dir = std::mem::take(&mut self.dir);
        let keep = keep_in.is_some();
        // The common case, a confined command that left nothing: the cgroup
        // is already empty and unused, which three reads of its files say
        // without blocking; kept at once, with no hop to the blocking pool
        // (two thread wake-ups on the path to the call's end).
        if let Some(pool) = keep_in
            && empty_now(&dir)
            && unused(&dir)
        {
            pool.give_back(Self { dir, max: self.max });
            return;
        }
        match tokio::task::spawn_blocking(move || (sweep(&dir, keep), dir)).await {
            Ok((Swept::Kept, dir)) => {
                if let Some(pool) = keep_in {
                    pool.give_back(Self { dir, max: self.max });
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "the cgroup sweep did not finish"),
        }
    }
}

/// Commands' pids cgroups, emptied and kept for later commands: a cgroup's
/// `mkdir` (its control files made), `pids.max` write and `rmdir` (taken
/// offline behind an RCU grace period) were ~8% of the server's CPU per
/// confined `true` (BENCHMARKS.md "Session 20"). One is kept only when a
/// confined command ran in it, nothing is left in it (no process, no
/// `pids.current`, no child cgroup), and its `pids.max` is written again
/// when it is taken.
#[derive(Debug, Default)]
pub struct CgroupPool {
    free: std::sync::Mutex<Vec<CommandCgroup>>,
}

/// Cgroups kept at most.
const POOLED_CGROUPS: usize = 8;

impl CgroupPool {
    /// An empty pids cgroup under `base` with `pids.max` = `max`: a kept
    /// one, else a new one.
    pub fn take(&self, base: &Path, max: u64) -> std::io::Result<CommandCgroup> {
        loop {
            let kept = {
                let mut free = self.lock();
                let at = free.iter().position(|c| c.dir.parent() == Some(base));
                at.map(|i| free.swap_remove(i))
            };
            let Some(mut cgroup) = kept else {
                return CommandCgroup::create(base, max);
            };
            // Written whatever it was: nothing but this pool's owner
            // decides it.
            cgroup.max = u64::MAX;
            match cgroup.set_max(max) {
                Ok(()) => return Ok(cgroup),
                // Gone or broken: swept by its drop, and another one.
                Err(e) => tracing::debug!(error = %e, "a kept pids cgroup could not be reused"),
            }
        }
    }

    fn give_back(&self, cgroup: CommandCgroup) {
        let mut free = self.lock();
        if free.len() < POOLED_CGROUPS {
            free.push(cgroup);
        }
        // Else dropped: swept and removed behind.
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<CommandCgroup>> {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How a sweep ended.
#[derive(Debug, PartialEq, Eq)]
enum Swept {
    Removed,
    /// Empty and left in place, to be used again.
    Kept,
    /// Could not be emptied: left, with `pids.max` still binding it.
    Stuck,
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
                runtime.spawn_blocking(move || sweep(&dir, false));
            }
            Err(_) => {
                sweep(&dir, false);
            }
        }
    }
}

/// Kills whatever is still in the cgroup `dir`, waits for it to exit and
/// removes the directory, or with `keep` leaves it when it is then unused
/// ([`unused`]); blocking (up to [`SWEEP_WAIT`] per round).
fn sweep(dir: &Path, keep: bool) -> Swept {
    let until = Instant::now() + SWEEP_WAIT;
    for _ in 0..CGROUP_SWEEPS {
        let procs = match std::fs::read_to_string(dir.join("cgroup.procs")) {
            Ok(p) => p,
            // Removed already (a zygote that cleaned up its spare's).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Swept::Removed,
            Err(_) => String::new(),
        };
        let pids: Vec<i32> = procs
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.is_empty() {
            if keep && unused(dir) {
                return Swept::Kept;
            }
            match std::fs::remove_dir(dir) {
                Ok(()) => return Swept::Removed,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Swept::Removed,
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
    Swept::Stuck
}

/// Whether `cgroup.procs` of `dir` lists no process now.
fn empty_now(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
}

/// Whether the emptied cgroup `dir` holds nothing: no process counted in
/// `pids.current` (one killed but not yet released still is), and no child
/// cgroup (a cgroup directory's link count is 2 and one per child).
fn unused(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).is_ok_and(|m| m.nlink() == 2)
        && std::fs::read_to_string(dir.join("pids.current")).is_ok_and(|c| c.trim() == "0")
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
