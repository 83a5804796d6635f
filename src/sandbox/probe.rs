//! What the kernel can enforce, probed once at start-up: the Landlock ABI,
//! seccomp filters, user namespaces (reported, not used), and how the number
//! of processes of a command is bounded (a delegated pids cgroup, or
//! RLIMIT_NPROC, which does not bind uid 0).
//!
//! The probe only reads kernel facts; the worker still checks each
//! restriction it applies and refuses to run a command whose confinement
//! failed, so a wrong probe cannot make a command run unconfined.

#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

use super::SandboxLevel;

/// Lowest Landlock ABI with which a confined level is complete: ABI 3 adds
/// `truncate`, without which a command could truncate any file it can read.
pub const MIN_LANDLOCK_ABI: i32 = 3;

/// Landlock ABI that adds scopes (signals, abstract UNIX sockets). Below it,
/// a confined command can signal other processes of the same user.
pub const SCOPE_LANDLOCK_ABI: i32 = 6;

/// Landlock ABI that governs connecting to pathname UNIX sockets. Below it
/// a confined command can connect to any socket file it can reach by path.
pub const UNIX_SOCKET_LANDLOCK_ABI: i32 = 9;

/// How a command's number of processes is bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessLimitKind {
    /// A per-command child of this delegated pids cgroup, with `pids.max`.
    Cgroup(PathBuf),
    /// RLIMIT_NPROC (counts every process of the user, not only the
    /// command's).
    Rlimit,
    /// Nothing binds: uid 0 without a writable pids cgroup.
    None,
}

impl ProcessLimitKind {
    /// Short name for reports: `cgroup`, `rlimit`, `none`.
    pub fn name(&self) -> &'static str {
        match self {
            ProcessLimitKind::Cgroup(_) => "cgroup",
            ProcessLimitKind::Rlimit => "rlimit",
            ProcessLimitKind::None => "none",
        }
    }
}

/// What the kernel offers, and what the configured level lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// Landlock ABI version; 0 when Landlock is missing or disabled.
    pub landlock_abi: i32,
    /// seccomp filter mode is available.
    pub seccomp: bool,
    /// Unprivileged user namespaces look available (a possible stronger
    /// tier; not used by this version).
    pub user_namespaces: bool,
    /// The worker can make a private mount namespace per command (see
    /// `worker::mounts`): protected paths become read-only mounts, so only
    /// they are locked, not the directories on the way to them.
    pub mount_namespace: bool,
    /// The worker can mount a `/proc` that shows a command only its own
    /// processes (root, or a user namespace with its own pid namespace).
    pub proc_hidden: bool,
    /// How a command's processes are counted and bounded.
    pub process_limit: ProcessLimitKind,
    /// What the configured level needs and the kernel lacks. Non-empty means
    /// the service refuses to start unless weaker is allowed.
    pub missing: Vec<String>,
    /// Weaker spots that do not block start-up, each saying what it allows.
    pub gaps: Vec<String>,
}

/// Probes the running kernel for `level`.
pub fn probe(level: SandboxLevel) -> ProbeReport {
    let (mount_namespace, proc_hidden) = super::worker::probe_namespace();
    ProbeReport {
        landlock_abi: landlock_abi(),
        seccomp: seccomp_filters(),
        user_namespaces: user_namespaces(),
        mount_namespace,
        proc_hidden,
        process_limit: process_limit(),
        missing: Vec::new(),
        gaps: Vec::new(),
    }
    .at_level(level)
}

impl ProbeReport {
    /// What this probe's kernel facts mean for `level`, without probing
    /// again (the facts do not depend on the level; `missing` and `gaps`
    /// do).
    pub fn at_level(&self, level: SandboxLevel) -> ProbeReport {
        let landlock_abi = self.landlock_abi;
        let seccomp = self.seccomp;
        let process_limit = self.process_limit.clone();
        let mut missing = Vec::new();
        let mut gaps = Vec::new();
        if level.is_confined() {
            if landlock_abi < MIN_LANDLOCK_ABI {
                missing.push(format!(
                    "Landlock ABI >= {MIN_LANDLOCK_ABI} (kernel has {landlock_abi}; needs Linux >= 6.2 with 'landlock' in the LSM list)"
                ));
            } else if landlock_abi < SCOPE_LANDLOCK_ABI {
                gaps.push(format!(
                    "Landlock ABI {landlock_abi} < {SCOPE_LANDLOCK_ABI}: confined commands can signal other processes of the same user and reach abstract UNIX sockets"
                ));
            }
            if landlock_abi >= MIN_LANDLOCK_ABI {
                gaps.push(format!(
                    "connect() to pathname UNIX sockets is not confined (needs Landlock ABI >= {UNIX_SOCKET_LANDLOCK_ABI} and a toolsched that asks for it): keep daemon sockets such as /var/run/docker.sock out of the host"
                ));
            }
            if !seccomp {
                missing.push("seccomp filters (CONFIG_SECCOMP_FILTER)".to_string());
            }
            if !self.mount_namespace {
                gaps.push(
                    "no private mount namespace for commands (needs root or unprivileged user namespaces): protected paths are kept by Landlock alone, so no entry may be created, removed or renamed in any directory on the way to a .git (up to the workspace root)"
                        .to_string(),
                );
            }
            if !self.proc_hidden {
                gaps.push(
                    "no private /proc for commands (needs root and a private mount namespace): confined commands can read other processes' /proc/<pid>/cmdline, the server's included"
                        .to_string(),
                );
            }
        }
        if process_limit == ProcessLimitKind::None {
            gaps.push(
                "no process limit: running as uid 0 (RLIMIT_NPROC does not bind it) without a writable pids cgroup"
                    .to_string(),
            );
        }
        ProbeReport {
            landlock_abi,
            seccomp,
            user_namespaces: self.user_namespaces,
            mount_namespace: self.mount_namespace,
            proc_hidden: self.proc_hidden,
            process_limit,
            missing,
            gaps,
        }
    }
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute pointer and size 0 the kernel only
    // returns the ABI version (or an error); no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

/// `seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &SECCOMP_RET_ERRNO)` succeeds when
/// filter mode is built in and not blocked by an outer filter.
fn seccomp_filters() -> bool {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: the kernel reads one u32 from a valid pointer to a local.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0 as libc::c_uint,
            &action as *const u32,
        )
    };
    r == 0
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn user_namespaces() -> bool {
    let max_ok = read_trimmed("/proc/sys/user/max_user_namespaces")
        .and_then(|s| s.parse::<u64>().ok())
        .is_some_and(|n| n > 0);
    // Debian/Ubuntu knobs; absent elsewhere, where the max decides.
    let debian_ok =
        read_trimmed("/proc/sys/kernel/unprivileged_userns_clone").is_none_or(|s| s == "1");
    let apparmor_ok = read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
        .is_none_or(|s| s == "0");
    max_ok && debian_ok && apparmor_ok
}

/// A writable pids cgroup we may create children in, else RLIMIT_NPROC for
/// a non-root user, else nothing.
fn process_limit() -> ProcessLimitKind {
    if let Some(dir) = pids_cgroup() {
        return ProcessLimitKind::Cgroup(dir);
    }
    // SAFETY: getuid cannot fail and touches no memory.
    if unsafe { libc::getuid() } != 0 {
        return ProcessLimitKind::Rlimit;
    }
    ProcessLimitKind::None
}

/// The pids cgroup this process is in, when we can create children in it
/// (cgroup v1 `pids` hierarchy, or v2 with `pids` delegated to the subtree).
fn pids_cgroup() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut candidates = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "pids") {
            candidates.push(Path::new("/sys/fs/cgroup/pids").join(rel));
        } else if controllers.is_empty() {
            let dir = Path::new("/sys/fs/cgroup").join(rel);
            let delegated = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"));
            if delegated {
                candidates.push(dir);
            }
        }
    }
    candidates.into_iter().find(|dir| {
        let test = dir.join(format!("toolsched-probe-{}", std::process::id()));
        let ok = std::fs::create_dir(&test).is_ok() && test.join("pids.max").exists();
        let _ = std::fs::remove_dir(&test);
        ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_level_never_misses_anything() {
        let r = probe(SandboxLevel::None);
        assert!(r.missing.is_empty(), "{r:?}");
    }
}
