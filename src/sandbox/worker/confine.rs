//! The forked command process up to `exec` (step 2 of [`super`]'s list):
//! its own process group, a parent-death signal, inherited fds
//! close-on-exec, no capabilities, then Landlock ([`super::landlock`]) and
//! seccomp ([`super::seccomp`]), and last the resource limits.
//!
//! Not here: which paths are granted, which system calls are refused.

#![allow(unsafe_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::landlock::{apply_landlock, apply_shared, fs_rules, landlock_ruleset};
use super::mounts::MountView;
use super::seccomp::{apply_seccomp, apply_seccomp_with_listener};
use super::{ResourceLimits, WorkerArgs, errno};

/// Step 2 of the module doc. Returns only on failure, with the reason.
/// `tmp`: the private tmp as the command sees it; `prepared`: the
/// zygote's ruleset for these options and mounts, applied instead of
/// building one.
pub(super) fn confine_and_exec(
    args: &WorkerArgs,
    protected: Option<&[PathBuf]>,
    mounts: MountView,
    tmp: &Path,
    prepared: Option<&OwnedFd>,
    worker_pid: libc::pid_t,
    handoff: Option<(RawFd, RawFd)>,
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
        if let Some(fd) = prepared {
            if let Err(e) = drop_capabilities() {
                return e;
            }
            if let Err(e) = apply_shared(fd) {
                return e;
            }
        } else {
            let mut ruleset = match landlock_ruleset(args) {
                Ok(r) => r,
                Err(e) => return e,
            };
            // Grants are opened before capabilities go, as they always were.
            if let Err(e) = fs_rules(args, protected, mounts, tmp, &mut ruleset, None) {
                return e;
            }
            if let Err(e) = drop_capabilities() {
                return e;
            }
            if let Err(e) = apply_landlock(args, ruleset) {
                return e;
            }
        }
        // One program: the level's filter and, with a hand-off, the
        // metadata filter (see `super::seccomp::with_front`).
        let network = args.level.allows_network();
        let installed = match handoff {
            None => apply_seccomp(network),
            Some((ready, go)) => apply_seccomp_with_listener(network)
                .and_then(|listener| hand_over_listener(listener, ready, go)),
        };
        if let Err(e) = installed {
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
pub(super) fn drop_capabilities() -> Result<(), String> {
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
            for cap in 0..=last_cap() {
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

/// The kernel's highest capability number (63 when it cannot be read:
/// dropping numbers it does not know fails EINVAL, which is ignored). Read
/// once per process; the zygote reads it before it forks any worker.
pub(super) fn last_cap() -> libc::c_ulong {
    static LAST: std::sync::OnceLock<libc::c_ulong> = std::sync::OnceLock::new();
    *LAST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse::<libc::c_ulong>().ok())
            .unwrap_or(63)
    })
}

/// Tells the worker the number of the metadata filter's `listener`
/// ([`super::metadata`]) on `ready`, waits until it took a copy (`go`), then
/// closes ours: the command must never answer its own notifications.
fn hand_over_listener(listener: OwnedFd, ready: RawFd, go: RawFd) -> Result<(), String> {
    // SAFETY: both pipe ends were made by the worker for this hand-over and
    // are owned by nothing else in this process.
    let (mut ready, mut go) = unsafe { (File::from_raw_fd(ready), File::from_raw_fd(go)) };
    use std::os::fd::AsRawFd;
    ready
        .write_all(&listener.as_raw_fd().to_ne_bytes())
        .map_err(|e| format!("handing over the metadata listener: {e}"))?;
    let mut byte = [0u8; 1];
    go.read_exact(&mut byte)
        .map_err(|e| format!("waiting for the worker to take the metadata listener: {e}"))?;
    drop(listener);
    Ok(())
}
