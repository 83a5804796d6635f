//! The command process from its `clone` to `exec` (step 2 of [`super`]'s
//! list): its own process group, a parent-death signal, no capabilities,
//! then Landlock ([`super::landlock`]) and seccomp ([`super::seccomp`]),
//! and last the resource limits.
//!
//! **How it starts.** The worker prepares everything first ([`Launch`]:
//! the Landlock ruleset, the seccomp program, the argument vector, the
//! limits), then starts the command process with `clone(CLONE_VM |
//! CLONE_VFORK | CLONE_FILES)`, as `posix_spawn` does: the child runs on a
//! stack of its own in the worker's memory, the worker waits until it
//! `exec`s (or fails), and no copy of the worker's page tables is made or
//! torn down (a `fork` of the big binary and the `exec` that discards it
//! were most of a command's start: BENCHMARKS.md, "Session 18"). So the
//! child makes system calls only: it allocates nothing, formats nothing and
//! takes no lock; a failure is left in [`Launch`] for the worker to report.
//!
//! Sharing the fd table is what hands the metadata filter's listener
//! ([`super::metadata`]) to the worker: the kernel makes it close-on-exec in
//! the shared table, so the worker keeps it and `exec` (which gives the
//! command a copy of the table, without close-on-exec fds) takes it from the
//! command. No step before `exec` makes a call the metadata filter traps,
//! which would wait for a worker that is itself waiting.
//!
//! Not here: which paths are granted, which system calls are refused.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::landlock::{fs_rules, landlock_ruleset};
use super::mounts::MountView;
use super::seccomp::{install_with_listener, program_with_notify};
use super::{ResourceLimits, WorkerArgs};

/// A step of the command's setup that failed, and the `errno` it failed
/// with (0: none). Plain data, so that the cloned child can leave it for
/// the worker without allocating; [`std::fmt::Display`] makes the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Failure {
    what: &'static str,
    /// A number the message names (a capability, a limit's value).
    value: Option<u64>,
    errno: i32,
}

impl Failure {
    /// `what` failed with the current `errno`.
    pub(super) fn last(what: &'static str) -> Self {
        Self::last_with(what, None)
    }

    fn last_with(what: &'static str, value: Option<u64>) -> Self {
        Self {
            what,
            value,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what)?;
        if let Some(v) = self.value {
            write!(f, " {v}")?;
        }
        if self.errno != 0 {
            write!(f, ": {}", std::io::Error::from_raw_os_error(self.errno))?;
        }
        Ok(())
    }
}

impl From<Failure> for String {
    fn from(f: Failure) -> Self {
        f.to_string()
    }
}

/// The step [`Launch::start`] reports with the program's name.
const EXEC: &str = "exec";

/// Bytes of the cloned child's stack beyond what its arguments need: its
/// deep frames are `execvp`'s path buffer (PATH_MAX + NAME_MAX on the
/// stack) and our own.
const CHILD_STACK_BYTES: usize = 256 << 10;

/// The cloned child's stack for `argc` arguments, and the guard page below
/// it. When `execve` answers ENOEXEC (a script without `#!`), glibc's
/// `execvp` builds a new argument vector for `/bin/sh` on the stack: one
/// pointer per argument (a breaker's 32,700 arguments overflowed a fixed
/// 256 KiB). The stack is sized for that, as glibc's own `posix_spawn`
/// sizes its child's; and an overflow, should one still happen, hits the
/// guard page (the child dies of SIGSEGV) instead of the worker's memory,
/// which the child shares.
fn child_stack_bytes(argc: usize, page: usize) -> usize {
    let vector = (argc + 2) * std::mem::size_of::<*const libc::c_char>();
    (CHILD_STACK_BYTES + vector).div_ceil(page) * page
}

/// A cloned child's stack: [`child_stack_bytes`] for `argc` arguments
/// above a guard page (the stack grows down). The caller unmaps
/// `stack`/`mapped` once the child no longer runs on it.
struct ChildStack {
    stack: *mut libc::c_void,
    mapped: usize,
    /// What `clone` is given: the highest address.
    top: *mut libc::c_void,
}

impl ChildStack {
    fn map(argc: usize) -> Result<Self, Failure> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let mapped = child_stack_bytes(argc, page) + page;
        // SAFETY: a fresh anonymous mapping, ours alone; the guard is its
        // lowest page, and `top` its end.
        unsafe {
            let stack = libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if stack == libc::MAP_FAILED {
                return Err(Failure::last("mmap of the command's stack"));
            }
            if libc::mprotect(stack, page, libc::PROT_NONE) != 0 {
                let f = Failure::last("mprotect of the command's stack guard");
                libc::munmap(stack, mapped);
                return Err(f);
            }
            Ok(Self {
                stack,
                mapped,
                top: stack.cast::<u8>().add(mapped).cast(),
            })
        }
    }
}

/// Everything the command process does before `exec`, prepared by the
/// worker, and what the child leaves behind for it.
pub(super) struct Launch {
    worker_pid: libc::pid_t,
    /// What a confined level applies; `None` at `none`.
    confine: Option<Confine>,
    limits: [(libc::__rlimit_resource_t, u64, &'static str); 6],
    program: CString,
    /// `argv` (NUL-terminated) and the strings it points into.
    argv: Vec<*const libc::c_char>,
    _args: Vec<CString>,
    /// Left by the child: why it did not `exec`.
    failure: Cell<Option<Failure>>,
    /// Left by the child: the metadata listener's fd, in the shared table.
    listener: Cell<RawFd>,
}

/// The confinement of a confined level's command, prepared.
struct Confine {
    /// Whether the worker runs as root (bounding capabilities to drop).
    root: bool,
    last_cap: libc::c_ulong,
    /// The Landlock ruleset to enforce (`None` only with `best_effort` on a
    /// kernel without Landlock).
    ruleset: Option<OwnedFd>,
    /// The seccomp program, the metadata filter its tail.
    seccomp: &'static seccompiler::BpfProgram,
}

/// The command process, started.
pub(super) struct Started {
    pub(super) pid: libc::pid_t,
    /// The metadata filter's listener (confined levels).
    pub(super) listener: Option<OwnedFd>,
    /// Why the process did not reach `exec` (it exits with
    /// [`super::SETUP_FAILED_EXIT`]); the worker reports it.
    pub(super) failure: Option<String>,
}

impl Launch {
    /// Prepares the command of `args`. `prepared`: the zygote's ruleset for
    /// these options and mounts, used instead of building one; `tmp`: the
    /// private tmp as the command sees it. Runs in the worker, before it
    /// drops its capabilities: grants are opened with them, as always.
    pub(super) fn prepare(
        args: &WorkerArgs,
        protected: Option<&[PathBuf]>,
        mounts: MountView,
        tmp: &Path,
        prepared: Option<OwnedFd>,
        worker_pid: libc::pid_t,
    ) -> Result<Self, String> {
        let confine = if args.level.is_confined() {
            let ruleset = match prepared {
                Some(fd) => Some(fd),
                None => {
                    let mut ruleset = landlock_ruleset(args)?;
                    fs_rules(args, protected, mounts, tmp, &mut ruleset, None)?;
                    let fd: Option<OwnedFd> = ruleset.into();
                    if fd.is_none() && !args.best_effort {
                        return Err("Landlock is not enforced by this kernel".into());
                    }
                    fd
                }
            };
            Some(Confine {
                // SAFETY: geteuid has no preconditions.
                root: unsafe { libc::geteuid() } == 0,
                last_cap: last_cap(),
                ruleset,
                seccomp: program_with_notify(args.level.allows_network())?,
            })
        } else {
            None
        };
        let Some((program_name, _)) = args.command.split_first() else {
            return Err("no command given".into());
        };
        let c = |s: &OsString| {
            CString::new(s.as_bytes()).map_err(|_| {
                format!(
                    "exec {}: an argument holds a NUL byte",
                    Path::new(program_name).display()
                )
            })
        };
        let program = c(program_name)?;
        let args_c = args.command.iter().map(c).collect::<Result<Vec<_>, _>>()?;
        let mut argv: Vec<*const libc::c_char> = args_c.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        Ok(Self {
            worker_pid,
            confine,
            limits: rlimits(&args.limits()),
            program,
            argv,
            _args: args_c,
            failure: Cell::new(None),
            listener: Cell::new(-1),
        })
    }

    /// Starts the command process and returns once it `exec`ed or failed.
    /// Every fd of the worker above stderr is made close-on-exec first (a
    /// leaked server socket or file must not reach the command).
    pub(super) fn start(self) -> Result<Started, String> {
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        // SAFETY: plain syscalls; the stack is a fresh private mapping the
        // child alone uses and that is unmapped only after it `exec`ed or
        // exited (CLONE_VFORK suspends this process until then); `self`
        // outlives the child's use of it for the same reason.
        unsafe {
            if libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            ) != 0
            {
                return Err(Failure::last("close_range").into());
            }
            let ChildStack { stack, mapped, top } = ChildStack::map(self.argv.len())?;
            let pid = libc::clone(
                command_child,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD,
                (&self as *const Self).cast_mut().cast(),
            );
            let clone_failed = (pid < 0).then(|| Failure::last("clone"));
            libc::munmap(stack, mapped);
            if let Some(f) = clone_failed {
                return Err(f.into());
            }
            let listener = self.listener.get();
            Ok(Started {
                pid,
                listener: (listener >= 0).then(|| OwnedFd::from_raw_fd(listener)),
                failure: self.failure.get().map(|f| self.describe(f)),
            })
        }
    }

    /// The child's steps up to `exec`; returns only on failure.
    ///
    /// # Safety
    /// Only in the child [`Self::start`] clones: system calls on its own
    /// process, nothing allocated.
    unsafe fn run_child(&self) -> Failure {
        // SAFETY: see the function's contract.
        unsafe {
            match confine_self(self.worker_pid, self.confine.as_ref()) {
                Ok(listener) => self.listener.set(listener),
                Err(f) => return f,
            }
            if let Err(f) = set_rlimits(&self.limits) {
                return f;
            }
            libc::execvp(self.program.as_ptr(), self.argv.as_ptr());
            Failure::last(EXEC)
        }
    }

    /// Runs the command in `ahead`, the process a spare worker cloned and
    /// confined before the command came ([`Ahead`]), instead of cloning
    /// one: what is left is its directory, its limits and `exec`. Returns
    /// once it `exec`ed or failed. The process shares the worker's memory
    /// and fds, not its directory: it enters the worker's through an fd of
    /// it (by its path, a symlink swapped in since the worker entered it
    /// would be followed).
    pub(super) fn start_ahead(self, ahead: Ahead) -> Result<Started, String> {
        use rustix::fs::{Mode, OFlags};
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        let (Ok(cwd), true, true) = (
            rustix::fs::open(
                ".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ),
            self.argv.len() <= AHEAD_MAX_ARGS,
            ahead.waits(),
        ) else {
            // Its stack is not sized for this vector (or the directory
            // cannot be opened): cloned now, as without a spare.
            ahead.abort();
            return self.start();
        };
        // SAFETY: as in `start`: every fd above stderr close-on-exec, in
        // the table the process shares.
        if unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            )
        } != 0
        {
            let f = Failure::last("close_range");
            ahead.abort();
            return Err(f.into());
        }
        let shared = ahead.shared;
        // SAFETY: the process reads these only after GO, and this process
        // waits below until it `exec`ed or exited: the pointers (into
        // `self`) and `cwd` outlive every use.
        unsafe {
            *shared.exec.get() = Some(ExecParams {
                program: self.program.as_ptr(),
                argv: self.argv.as_ptr(),
                cwd: cwd.as_raw_fd(),
                limits: self.limits,
            });
        }
        shared.state.store(GO, Ordering::Release);
        futex_wake(&shared.state);
        // The kernel clears `tid` when the process `exec`s or exits
        // (CLONE_CHILD_CLEARTID, released with its view of our memory).
        loop {
            let t = shared.tid.load(Ordering::Acquire);
            if t == 0 {
                break;
            }
            futex_wait(&shared.tid, t, Some(STOPPED_CHECK_EVERY));
            // Stopped from outside before its `exec` (a same-user process
            // not in a sandbox can), it would hold this worker, deaf to
            // cancel, until the call's timeout: killed instead, the
            // command ends as one killed at its start.
            if shared.tid.load(Ordering::Acquire) != 0 && stopped(ahead.pid) {
                // SAFETY: our own child, not reaped yet.
                unsafe { libc::kill(ahead.pid, libc::SIGKILL) };
            }
        }
        Ok(Started {
            pid: ahead.pid,
            listener: Some(ahead.listener),
            failure: shared.failure.get().map(|f| self.describe(f)),
        })
    }

    /// The message of a failure the child left.
    fn describe(&self, f: Failure) -> String {
        match f.what {
            EXEC => format!(
                "exec {}: {}",
                Path::new(std::ffi::OsStr::from_bytes(self.program.as_bytes())).display(),
                std::io::Error::from_raw_os_error(f.errno)
            ),
            _ => f.to_string(),
        }
    }
}

/// The command process's own setup up to its confinement: its own process
/// group, a parent-death signal, the signal mask and SIGPIPE reset, then
/// (confined levels) no capabilities, Landlock and seccomp. Returns the
/// metadata filter's listener (-1 at `none`).
///
/// # Safety
/// Only in a command process cloned with `CLONE_VM`: system calls on its
/// own process, nothing allocated.
unsafe fn confine_self(
    worker_pid: libc::pid_t,
    confine: Option<&Confine>,
) -> Result<RawFd, Failure> {
    // SAFETY: see the function's contract.
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
            return Err(Failure::last("PR_SET_PDEATHSIG"));
        }
        if libc::getppid() != worker_pid {
            return Err(Failure {
                what: "the worker exited",
                value: None,
                errno: 0,
            });
        }
        // Undo the worker's mask and Rust's ignored SIGPIPE: both would
        // be inherited by the command and everything it runs.
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let Some(c) = confine else {
            return Ok(-1);
        };
        drop_capabilities_with(c.root, c.last_cap)?;
        if let Some(fd) = &c.ruleset {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(Failure::last("no_new_privs"));
            }
            if libc::syscall(
                libc::SYS_landlock_restrict_self,
                fd.as_raw_fd(),
                0 as libc::c_uint,
            ) != 0
            {
                return Err(Failure::last("Landlock: restricting with the ruleset"));
            }
        }
        // One program: the level's filter and the metadata filter
        // (see `super::seccomp::with_front`).
        install_with_listener(c.seccomp)
    }
}

/// Arguments a spare's [`Ahead`] process may take: its stack is sized for
/// this many (see [`child_stack_bytes`]); a longer command is cloned as
/// without a spare.
const AHEAD_MAX_ARGS: usize = 4096;

/// How often a worker waiting for its [`Ahead`] process to `exec` checks
/// that nothing stopped it (it is killed then).
const STOPPED_CHECK_EVERY: Duration = Duration::from_millis(50);

/// How often a spare waiting for its [`Ahead`] process to be confined
/// checks that it did not exit without saying so (a kill from outside).
const CONFINING_CHECK_EVERY: Duration = Duration::from_millis(10);

/// [`AheadShared::state`]: being confined; confined and waiting; failed
/// (the reason in `failure`, then it exits); told to run; told to exit.
const PREPARING: u32 = 0;
const READY: u32 = 1;
const FAILED: u32 = 2;
const GO: u32 = 3;
const ABORT: u32 = 4;

/// A command process a spare worker cloned and confined before its command
/// came (issue 17 item 3: Landlock and seccomp's install were ~0.3 ms of
/// a short command's path). It is confined exactly as [`Launch::start`]'s
/// child would be, with the ruleset the zygote prepared for the previous
/// command's options, then waits. The worker uses it only when the
/// zygote says the command's options map to that same kept ruleset and
/// the command's mounts are what the ruleset assumes (as for any prepared
/// ruleset); otherwise it is killed and the command cloned as before.
///
/// It shares the worker's memory and fd table (`CLONE_VM | CLONE_FILES`,
/// as `Launch::start`'s child does) but not its suspension: the worker
/// goes on, so the two never run our code at once but around the futex
/// words below (the process makes system calls only, and the worker
/// waits while it does: before it is ready, and from GO to its `exec`).
pub(in crate::sandbox) struct Ahead {
    pid: libc::pid_t,
    /// The metadata filter's listener, moved by [`Ahead::start`]'s caller
    /// to a fixed fd.
    listener: OwnedFd,
    shared: &'static AheadShared,
}

/// What an [`Ahead`] process and its worker share: leaked, so that it
/// outlives the process's use of it whatever the worker does.
struct AheadShared {
    state: AtomicU32,
    /// The process's tid until the kernel clears it at its `exec` or exit.
    tid: AtomicU32,
    worker_pid: libc::pid_t,
    confine: Confine,
    failure: Cell<Option<Failure>>,
    listener: Cell<RawFd>,
    exec: std::cell::UnsafeCell<Option<ExecParams>>,
}

/// What the process needs after GO.
struct ExecParams {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    /// The worker's directory, open in the table they share.
    cwd: RawFd,
    limits: [(libc::__rlimit_resource_t, u64, &'static str); 6],
}

impl Ahead {
    /// Clones a process and confines it with `ruleset` and the seccomp
    /// program of a level with (or without) network, then returns once it
    /// waits for its command; `place(listener)` moves the metadata
    /// listener where the caller keeps it. Runs in a spare worker, with
    /// its capabilities, before its command is known.
    pub(in crate::sandbox) fn start(
        ruleset: OwnedFd,
        network: bool,
        worker_pid: libc::pid_t,
        place: impl FnOnce(RawFd) -> std::io::Result<OwnedFd>,
    ) -> Result<Self, String> {
        let shared: &'static AheadShared = Box::leak(Box::new(AheadShared {
            state: AtomicU32::new(PREPARING),
            tid: AtomicU32::new(1),
            worker_pid,
            confine: Confine {
                // SAFETY: geteuid has no preconditions.
                root: unsafe { libc::geteuid() } == 0,
                last_cap: last_cap(),
                ruleset: Some(ruleset),
                seccomp: program_with_notify(network)?,
            },
            failure: Cell::new(None),
            listener: Cell::new(-1),
            exec: std::cell::UnsafeCell::new(None),
        }));
        // SAFETY: a fresh private mapping the process alone uses as its
        // stack, never unmapped (it is small, and the process may run on
        // it until its `exec`); `shared` is leaked.
        let pid = unsafe {
            let ChildStack { stack, mapped, top } = ChildStack::map(AHEAD_MAX_ARGS)?;
            let pid = libc::clone(
                ahead_child,
                top,
                libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD,
                (shared as *const AheadShared).cast_mut().cast(),
                std::ptr::null_mut::<libc::pid_t>(),
                std::ptr::null_mut::<libc::c_void>(),
                shared.tid.as_ptr(),
            );
            if pid < 0 {
                let f = Failure::last("clone");
                libc::munmap(stack, mapped);
                return Err(f.into());
            }
            pid
        };
        // Until it is confined (or gone): nothing of ours runs meanwhile.
        loop {
            let s = shared.state.load(Ordering::Acquire);
            if s != PREPARING || shared.tid.load(Ordering::Acquire) == 0 {
                break;
            }
            futex_wait(&shared.state, PREPARING, Some(CONFINING_CHECK_EVERY));
        }
        // The process is confined (or gone): the ruleset, which could
        // still take rules, is closed now rather than with the worker. Its
        // owner is leaked with `shared` and never dropped.
        if let Some(fd) = &shared.confine.ruleset {
            // SAFETY: closing our own fd, which nothing uses any more.
            unsafe { libc::close(fd.as_raw_fd()) };
        }
        let ready = shared.state.load(Ordering::Acquire) == READY;
        let listener = shared.listener.get();
        let placed = if ready { Some(place(listener)) } else { None };
        match placed {
            Some(Ok(listener)) => Ok(Self {
                pid,
                listener,
                shared,
            }),
            other => {
                let why = match other {
                    Some(Err(e)) => format!("placing the metadata listener: {e}"),
                    _ => shared
                        .failure
                        .get()
                        .map_or_else(|| "the process exited".into(), |f| f.to_string()),
                };
                abort(pid, shared);
                Err(why)
            }
        }
    }

    /// Whether the process still waits for its command: not killed or
    /// stopped from outside meanwhile (a same-user process outside any
    /// sandbox can signal it), which would otherwise end or hold the
    /// command it was kept for before it ran.
    fn waits(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == READY
            && !stopped(self.pid)
            && has_state(self.pid, libc::WEXITED) == Some(false)
    }

    /// Kills the process and reaps it: its command is cloned as without a
    /// spare.
    pub(in crate::sandbox) fn abort(self) {
        abort(self.pid, self.shared);
    }
}

fn abort(pid: libc::pid_t, shared: &AheadShared) {
    shared.state.store(ABORT, Ordering::Release);
    futex_wake(&shared.state);
    // SAFETY: our own child, not reaped yet; the status is not needed.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        while libc::waitpid(pid, std::ptr::null_mut(), libc::__WALL) < 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
    }
}

/// The [`Ahead`] process: confined, then waits for GO, then its
/// directory, its limits and `exec`.
extern "C" fn ahead_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the leaked `AheadShared`; the worker touches `exec`
    // only before GO and waits from GO until this process `exec`s or
    // exits; everything here is system calls.
    unsafe {
        let s = &*arg.cast_const().cast::<AheadShared>();
        match confine_self(s.worker_pid, Some(&s.confine)) {
            Ok(fd) => s.listener.set(fd),
            Err(f) => {
                s.failure.set(Some(f));
                s.state.store(FAILED, Ordering::Release);
                futex_wake(&s.state);
                libc::_exit(super::SETUP_FAILED_EXIT)
            }
        }
        s.state.store(READY, Ordering::Release);
        futex_wake(&s.state);
        loop {
            match s.state.load(Ordering::Acquire) {
                GO => break,
                ABORT => libc::_exit(super::SETUP_FAILED_EXIT),
                v => futex_wait(&s.state, v, None),
            }
        }
        let failure = match &*s.exec.get() {
            Some(p) => {
                if libc::fchdir(p.cwd) != 0 {
                    Failure::last("fchdir")
                } else if let Err(f) = set_rlimits(&p.limits) {
                    f
                } else {
                    libc::execvp(p.program, p.argv);
                    Failure::last(EXEC)
                }
            }
            None => Failure {
                what: "no command",
                value: None,
                errno: 0,
            },
        };
        s.failure.set(Some(failure));
        libc::_exit(super::SETUP_FAILED_EXIT)
    }
}

/// Whether our child `pid` is stopped (by a signal), without reaping it.
pub(in crate::sandbox) fn stopped(pid: libc::pid_t) -> bool {
    has_state(pid, libc::WSTOPPED) == Some(true)
}

/// Whether our child `pid` reports `state` (`WSTOPPED`, `WEXITED`) now,
/// without reaping it; `None` when it cannot be asked (no such child).
fn has_state(pid: libc::pid_t, state: libc::c_int) -> Option<bool> {
    // SAFETY: waitid with WNOWAIT reaps nothing; it writes into a zeroed
    // local.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        (libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            state | libc::WNOHANG | libc::WNOWAIT,
        ) == 0)
            .then(|| info.si_pid() == pid)
    }
}

/// Sleeps while `word` holds `expected` (or until `timeout`, or a signal).
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    // SAFETY: a futex wait on a live word; the timeout (if any) is a valid
    // relative timespec. Its result is not needed: callers check the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts.as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec),
        );
    }
}

/// Wakes whoever waits on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: a futex wake on a live word.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// The cloned command process: [`Launch::run_child`], and on failure the
/// reason left for the worker and [`super::SETUP_FAILED_EXIT`].
extern "C" fn command_child(launch: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `launch` is the `Launch` that `start` passed, alive and not
    // touched by the suspended worker until this process `exec`s or exits.
    unsafe {
        let launch = &*launch.cast_const().cast::<Launch>();
        let failure = launch.run_child();
        launch.failure.set(Some(failure));
        libc::_exit(super::SETUP_FAILED_EXIT)
    }
}

/// The limits of `l` by resource (set in this order, RLIMIT_CORE to 0).
fn rlimits(l: &ResourceLimits) -> [(libc::__rlimit_resource_t, u64, &'static str); 6] {
    [
        (libc::RLIMIT_CPU, l.cpu_secs, "setrlimit RLIMIT_CPU"),
        (
            libc::RLIMIT_AS,
            l.address_space_bytes,
            "setrlimit RLIMIT_AS",
        ),
        (
            libc::RLIMIT_FSIZE,
            l.file_size_bytes,
            "setrlimit RLIMIT_FSIZE",
        ),
        (libc::RLIMIT_NPROC, l.processes, "setrlimit RLIMIT_NPROC"),
        (libc::RLIMIT_NOFILE, l.open_files, "setrlimit RLIMIT_NOFILE"),
        (libc::RLIMIT_CORE, 0, "setrlimit RLIMIT_CORE"),
    ]
}

/// Sets each limit (hard and soft). Capabilities are gone: a limit can only
/// be lowered, so a configured value above the inherited hard limit
/// becomes that. Last before `exec`: the seccomp listener is an fd, which a
/// low RLIMIT_NOFILE would refuse.
fn set_rlimits(limits: &[(libc::__rlimit_resource_t, u64, &'static str)]) -> Result<(), Failure> {
    for &(res, v, name) in limits {
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into a valid local struct.
        if unsafe { libc::getrlimit(res, &mut current) } != 0 {
            return Err(Failure::last_with(name, None));
        }
        let v = (v as libc::rlim_t).min(current.rlim_max);
        let lim = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        // SAFETY: setrlimit reads a valid local struct.
        if unsafe { libc::setrlimit(res, &lim) } != 0 {
            return Err(Failure::last_with(name, Some(v)));
        }
    }
    Ok(())
}

/// Drops every capability (bounding, ambient, effective, permitted,
/// inheritable). A server running as root would otherwise hand the command
/// CAP_SYS_MODULE, CAP_SYS_ADMIN, … which Landlock does not restrict. For a
/// non-root server there is nothing to drop and the calls that need
/// CAP_SETPCAP are skipped.
pub(super) fn drop_capabilities() -> Result<(), Failure> {
    // SAFETY: geteuid has no preconditions.
    drop_capabilities_with(unsafe { libc::geteuid() } == 0, last_cap())
}

/// [`drop_capabilities`] with the effective uid's rootness and the kernel's
/// last capability known: system calls only (the cloned child runs it).
fn drop_capabilities_with(root: bool, last_cap: libc::c_ulong) -> Result<(), Failure> {
    // SAFETY: prctl and capset with valid arguments on our own process.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        if root {
            for cap in 0..=last_cap {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
                {
                    return Err(Failure::last_with("PR_CAPBSET_DROP", Some(cap)));
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
            return Err(Failure::last("capset"));
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
