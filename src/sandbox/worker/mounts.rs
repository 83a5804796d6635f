//! The worker's private mount namespace: every protected path a read-only
//! bind mount, and a `/proc` of its own that shows only the command's own
//! processes.
//!
//! **Protected paths (threat: a hook or `core.fsmonitor` planted in a
//! `.git`, run later by git outside the sandbox).** Landlock grants cover a
//! whole subtree and cannot say "except", so without a mount namespace the
//! workspace is granted piecewise ([`super::landlock`]) and every directory
//! on the way to a `.git` loses create, remove and rename, up to the
//! workspace root. Here each protected path is instead re-mounted on itself
//! read-only (`open_tree` clone + `mount_setattr(MOUNT_ATTR_RDONLY)` +
//! `move_mount`, all on fds opened with `O_NOFOLLOW`, so a symlink swapped in
//! never redirects a mount), and the rest of the workspace keeps a full
//! Landlock grant. Writes beneath a protected path fail `EROFS`; renaming or
//! removing the mount point itself fails `EBUSY` (a mount point of this
//! namespace); a hard link out of it fails `EXDEV`. Renaming an *ancestor*
//! would move the repository away (its read-only `.git` with it) and let
//! the command plant a new repository with a hook at the path the user
//! trusts, so every directory between the workspace root and a protected
//! path is also a mount point of its own (bound on itself, read-write):
//! entries in it are created, removed and renamed freely, but it cannot be
//! renamed or removed itself (`EBUSY`). The price: a rename or hard link
//! between two of those levels (`mv x vendor/lib/` when
//! `vendor/lib/.git` exists) crosses mounts and fails `EXDEV` (`mv`
//! copies instead).
//!
//! **`/proc` (threat: reading the server's or another command's
//! `/proc/<pid>/cmdline`, which may hold secrets passed on a command line).**
//! A fresh procfs instance with `hidepid=noaccess` is mounted over `/proc`
//! (Linux 5.8 gave each procfs mount its own options). hidepid opens a
//! process's `/proc/<pid>` only to callers that may ptrace-read it (others
//! get `EPERM`, a denial the output shows; `invisible` would answer
//! `ENOENT`, which reads as "no such process" rather than as the
//! sandbox's refusal), and Landlock refuses a
//! confined process that access to every process outside its own domain: the
//! server, the worker, other commands (each has its own domain), pid 1. The
//! command still sees itself and its descendants (`/proc/self`, `ps`,
//! `<(…)` through `/dev/fd`).
//!
//! The namespace is private (`MS_SLAVE` from `/`): nothing mounted here
//! reaches the host, and it ends with the command's last process. As root
//! the worker unshares the mount namespace directly; otherwise inside a new
//! user namespace mapping only its own uid and gid, where the read-only
//! binds work but a procfs mount does not (it needs a pid namespace of that
//! user namespace): `/proc` then stays as it is. Where no namespace can be
//! made (containers without user namespaces, `kernel.unprivileged_userns_
//! clone=0`), the worker falls back to the piecewise grants; the start-up
//! probe reports both as gaps ([`crate::sandbox::probe`]).
//!
//! Not here: the Landlock grants ([`super::landlock`]), the seccomp rules
//! of the command ([`super::seccomp`]: it may not mount or unshare).

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Most protected paths made read-only mounts; beyond it the worker falls
/// back to the piecewise grants: each mount costs a few microseconds and a
/// slot of the per-namespace mount limit (`fs.mount-max`, 100,000).
pub const MAX_BIND_MOUNTS: usize = 10_000;

/// The entry of a tmp anchor the command's private tmp is bound on.
pub const ANCHOR_TMP: &str = "tmp";

/// What the namespace gave this command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct MountView {
    /// Every protected path is a read-only mount: the workspace may be
    /// granted whole.
    pub protected_read_only: bool,
    /// `/proc` is a `hidepid=noaccess` instance.
    pub proc_hidden: bool,
    /// This worker mounted that `/proc` itself: a ruleset prepared before
    /// (the zygote's) grants the `/proc` this mount hides, not this one.
    pub proc_mounted: bool,
    /// The private tmp is bound on the anchor's [`ANCHOR_TMP`], and the
    /// anchor itself is read-only (see [`enter`]).
    pub tmp_anchored: bool,
}

const OPEN_TREE_CLONE: u32 = 1;
const AT_RECURSIVE: u32 = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Enters a private mount namespace and sets it up for a command confined
/// at `confined` that may write the `workspace` (`writes`), with the
/// workspace's `protected` paths. Call it in the worker before the fork,
/// while it still has its capabilities. Never fails: what could not be
/// done is reported false and the caller falls back.
///
/// `tmp_at`: the command's private tmp and an anchor directory (the same
/// for every command of a zygote) to bind it beneath, at
/// `anchor/`[`ANCHOR_TMP`], so that a Landlock ruleset granting the anchor
/// can be prepared once for every command (issue 17 item 3). Landlock's
/// walk from a file up to the root skips the directory a mount hides (it
/// goes from a mount's root to the mount point's *parent*; tested by
/// `worker::mounts::tests`), so the rule is on the anchor, and the anchor
/// is first bound on itself read-only: no command can leave an entry in it
/// for another (`EROFS`), and the tmp mount point cannot be removed or
/// renamed. `proc_hidden`: `/proc` is already a hidden instance (the
/// zygote's namespace, see [`super::super::zygote`]); no new one is mounted.
pub(super) fn enter(
    confined: bool,
    writes: bool,
    workspace: &Path,
    protected: &[PathBuf],
    tmp_at: Option<(&Path, &Path)>,
    proc_hidden: bool,
    entered: bool,
) -> MountView {
    // `entered`: a spare worker made the namespace before its command came
    // ([`enter_ahead`]).
    if !confined || !(entered || enter_private()) {
        return MountView::default();
    }
    let proc_mounted = !proc_hidden && mount_hidden_proc();
    let proc_hidden = proc_hidden || proc_mounted;
    let tmp_anchored = tmp_at.is_some_and(|(tmp, anchor)| {
        match bind(anchor, true).and_then(|()| bind_onto(tmp, &anchor.join(ANCHOR_TMP))) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(anchor = %anchor.display(), error = %e, "binding the tmp failed");
                false
            }
        }
    });
    let pinned = pinned_ancestors(workspace, protected);
    let bind_all = |paths: &[PathBuf], read_only: bool| {
        paths.iter().all(|p| match bind(p, read_only) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(path = %p.display(), error = %e, "bind failed");
                false
            }
        })
    };
    // Ancestors first (shortest paths first), each on itself read-write;
    // then the protected paths read-only, inside them.
    let protected_read_only = writes
        && pinned.len() + protected.len() <= MAX_BIND_MOUNTS
        && bind_all(&pinned, false)
        && bind_all(protected, true);
    MountView {
        protected_read_only,
        proc_hidden,
        proc_mounted,
        tmp_anchored,
    }
}

/// A private mount namespace of this process's own (a copy of its
/// current one, receiving the host's mounts but propagating none back).
/// False when it could not be made, or made private: then no mount may be
/// made in it.
fn enter_private() -> bool {
    if unshare_mount_namespace().is_err() {
        return false;
    }
    // SAFETY: plain mount(2) with NUL-terminated constants.
    unsafe {
        libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) == 0
    }
}

/// [`enter`]'s namespace, made by a spare worker ahead of its command (so
/// that the process it confines ahead is in it); `enter(.., entered:
/// true)` makes the command's mounts in it. True when it was made.
pub(in crate::sandbox) fn enter_ahead() -> bool {
    enter_private()
}

/// Makes this process's mount namespace private with a hidden `/proc`: the
/// zygote's, so that its workers (each in a copy of it) share one `/proc`
/// instance that a prepared ruleset can grant. Root only (a procfs mount
/// needs it); false when anything failed (the workers then mount their own).
pub fn hide_proc_here() -> bool {
    // SAFETY: getter that cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    root && enter_private() && mount_hidden_proc()
}

/// `unshare(CLONE_NEWNS)`, inside a new user namespace (own uid and gid
/// mapped to themselves) when not root.
fn unshare_mount_namespace() -> std::io::Result<()> {
    // SAFETY: getters that cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        // SAFETY: unshare on our own single-threaded process.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0 {
            return Ok(());
        }
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above; the worker runs no other thread (CLONE_NEWUSER
    // requires it).
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    Ok(())
}

/// Mounts a procfs instance with `hidepid=noaccess` over `/proc`. Its
/// `gid=` group sees every process; left out it is group 0, root's, which
/// would exempt a root command: so it names a group this process (and so
/// the command) is not in.
fn mount_hidden_proc() -> bool {
    let Some(gid) = group_not_held() else {
        return false;
    };
    let Ok(options) = CString::new(format!("hidepid=noaccess,gid={gid}")) else {
        return false;
    };
    // SAFETY: plain mount(2) with NUL-terminated strings.
    unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            options.as_ptr().cast(),
        ) == 0
    }
}

/// A group id this process is not in (neither its effective group nor a
/// supplementary one): 65534 (`nogroup`) or the first free one below it.
fn group_not_held() -> Option<libc::gid_t> {
    let mut groups = [0 as libc::gid_t; 256];
    // SAFETY: getgroups writes at most `groups.len()` entries.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    let held = &groups[..usize::try_from(n).ok()?];
    // SAFETY: cannot fail.
    let (egid, gid) = unsafe { (libc::getegid(), libc::getgid()) };
    (1..=65534)
        .rev()
        .find(|g| *g != egid && *g != gid && !held.contains(g))
}

fn check(r: libc::c_long) -> std::io::Result<libc::c_long> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Every directory strictly between the workspace root and a protected
/// path, shortest first. Each becomes a mount point of its own (bound on
/// itself, read-write), because a mount point cannot be renamed or removed
/// (`EBUSY`): `mv a/b/repo elsewhere` (or `mv a …`) followed by a new
/// `a/b/repo/.git` with a hook would otherwise replace the repository at
/// the path the user trusts, while its read-only `.git` moved away with it.
fn pinned_ancestors(workspace: &Path, protected: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = std::collections::BTreeSet::new();
    for p in protected {
        let mut at = p.parent();
        while let Some(dir) = at {
            if dir == workspace || !dir.starts_with(workspace) || !dirs.insert(dir.to_path_buf()) {
                break;
            }
            at = dir.parent();
        }
    }
    let mut dirs: Vec<PathBuf> = dirs.into_iter().collect();
    dirs.sort_by_key(|d| d.components().count());
    dirs
}

/// Re-mounts `path` on itself (recursively), read-only when `read_only`.
/// A path that is gone needs nothing. A symlink is bound on itself, not at
/// its target: that pins it (it cannot be removed or replaced while it is a
/// mount point), and the directory a `.git` symlink leads to is in the
/// protected list itself, with the entries on the way to it
/// (`crate::sandbox::protected`).
fn bind(path: &Path, read_only: bool) -> std::io::Result<()> {
    let target = match open_path(path, libc::O_NOFOLLOW | libc::O_PATH | libc::O_CLOEXEC) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    // SAFETY: open_tree, mount_setattr and move_mount on fds we own, with
    // empty NUL-terminated paths and a struct of the kernel's layout.
    unsafe {
        let tree = check(libc::syscall(
            libc::SYS_open_tree,
            target.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE,
        ))?;
        let tree = OwnedFd::from_raw_fd(tree as i32);
        let attr = MountAttr {
            attr_set: if read_only { MOUNT_ATTR_RDONLY } else { 0 },
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        check(libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ))?;
        check(libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        ))?;
    }
    Ok(())
}

/// `open(path, flags)`; a path longer than the kernel takes (`PATH_MAX`:
/// a command can make directories that deep, and the walk then protects
/// the one it cannot open whole) is opened one component at a time from
/// the root, no directory on the way followed if it is a symlink. Binding
/// it then keeps the namespace, which a failed bind would give up for the
/// Landlock-only fallback (a breaker's finding).
fn open_path(path: &Path, flags: i32) -> std::io::Result<OwnedFd> {
    let raw = |dir: libc::c_int, name: &[u8], flags: i32| -> std::io::Result<OwnedFd> {
        let c = CString::new(name)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: a valid NUL-terminated path and a directory fd (or
        // AT_FDCWD); the fd is owned below.
        let fd = unsafe { libc::openat(dir, c.as_ptr(), flags) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: just returned by openat, owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    match raw(libc::AT_FDCWD, path.as_os_str().as_bytes(), flags) {
        Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) && path.is_absolute() => {}
        other => return other,
    }
    let mut names: Vec<&std::ffi::OsStr> = Vec::new();
    for c in path.components() {
        match c {
            std::path::Component::Normal(n) => names.push(n),
            std::path::Component::RootDir | std::path::Component::CurDir => {}
            // `..` would need the directories it climbs out of: not a
            // path the walk makes.
            _ => return Err(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG)),
        }
    }
    let Some((last, dirs)) = names.split_last() else {
        return raw(libc::AT_FDCWD, b"/", flags);
    };
    let step = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let mut at = raw(libc::AT_FDCWD, b"/", step)?;
    for name in dirs {
        at = raw(at.as_raw_fd(), name.as_bytes(), step)?;
    }
    raw(at.as_raw_fd(), last.as_bytes(), flags)
}

/// Binds the directory `source` (recursively) on the directory `target`,
/// both opened without following a symlink.
fn bind_onto(source: &Path, target: &Path) -> std::io::Result<()> {
    let open = |p: &Path| -> std::io::Result<OwnedFd> {
        let c = CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: a valid NUL-terminated path; the fd is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: just returned by open, owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let (source, target) = (open(source)?, open(target)?);
    // SAFETY: open_tree and move_mount on fds we own, with empty
    // NUL-terminated paths.
    unsafe {
        let tree = check(libc::syscall(
            libc::SYS_open_tree,
            source.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE,
        ))?;
        let tree = OwnedFd::from_raw_fd(tree as i32);
        check(libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        ))?;
    }
    Ok(())
}

/// Whether this kernel and user may make the namespace: the start-up
/// probe's question, answered by a forked child that tries (the answer for
/// protected paths, the answer for `/proc`).
pub fn probe() -> (bool, bool) {
    // SAFETY: the child only makes system calls and `_exit`s; it touches
    // no lock another thread of the server could hold (no allocation: the
    // strings are constants, the uid/gid maps are written with `write`).
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return (false, false);
        }
        if pid == 0 {
            let code = probe_child();
            libc::_exit(code);
        }
        let mut st = 0;
        if libc::waitpid(pid, &mut st, 0) != pid || !libc::WIFEXITED(st) {
            return (false, false);
        }
        match libc::WEXITSTATUS(st) {
            0 => (true, true),
            1 => (true, false),
            _ => (false, false),
        }
    }
}

/// The probe's child: 0 both work, 1 only the mount namespace, 2 neither.
///
/// # Safety
/// Only in a freshly forked child: it changes namespaces of the caller.
unsafe fn probe_child() -> i32 {
    // SAFETY: plain system calls on this (forked) process.
    unsafe {
        let uid = libc::geteuid();
        if uid == 0 {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return 2;
            }
        } else {
            // Writing the maps needs formatting without allocating: the
            // probe only needs "may unshare", which the write of `deny`
            // and the maps do not change for the unprivileged case.
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return 2;
            }
        }
        if libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) != 0
        {
            return 2;
        }
        let hidden = libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"hidepid=noaccess".as_ptr().cast(),
        ) == 0;
        if hidden { 0 } else { 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use landlock::{ABI, Access, AccessFs, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr};

    /// Runs `f` in a forked child in a private mount namespace of its own
    /// (Landlock and the mounts stay there); returns its exit code.
    fn in_namespace(f: impl FnOnce() -> i32) -> i32 {
        // SAFETY: the child runs plain system calls and small allocations
        // (glibc's malloc is fork-safe), then `_exit`s.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                let private = unshare_mount_namespace().is_ok()
                    && libc::mount(
                        c"none".as_ptr(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_SLAVE,
                        std::ptr::null(),
                    ) == 0;
                libc::_exit(if private { f() } else { 100 });
            }
            let mut st = 0;
            assert_eq!(libc::waitpid(pid, &mut st, 0), pid);
            assert!(libc::WIFEXITED(st), "the child died: {st}");
            libc::WEXITSTATUS(st)
        }
    }

    fn errno_of(r: std::io::Result<()>) -> i32 {
        match r {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(-1),
        }
    }

    fn mkfifo(p: &Path) -> std::io::Result<()> {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// What the tmp anchor relies on, on this kernel: a Landlock rule on a
    /// mount point does not reach the mount on top of it (the walk skips
    /// the hidden directory), a rule on its parent does; the read-only
    /// self-bind of the anchor takes no entry, and the command's own tmp is
    /// not reachable at its real path.
    #[test]
    fn a_rule_on_the_anchor_covers_the_tmp_bound_beneath_it() {
        let dir = tempfile::tempdir().unwrap();
        let (anchor, tmp) = (dir.path().join("anchor"), dir.path().join("own-tmp"));
        std::fs::create_dir_all(anchor.join(ANCHOR_TMP)).unwrap();
        std::fs::create_dir(&tmp).unwrap();
        let seen = anchor.join(ANCHOR_TMP);

        // The rule on the mount point itself: not enough.
        let code = in_namespace(|| {
            let granted = std::fs::File::open(&seen).unwrap();
            if bind_onto(&tmp, &seen).is_err() {
                return 4;
            }
            let all = AccessFs::from_all(ABI::V6);
            Ruleset::default()
                .handle_access(all)
                .unwrap()
                .create()
                .unwrap()
                .add_rule(PathBeneath::new(granted, all))
                .unwrap()
                .restrict_self()
                .unwrap();
            match errno_of(std::fs::write(seen.join("x"), "x")) {
                libc::EACCES => 0,
                0 => 1,
                _ => 2,
            }
        });
        assert_eq!(
            code, 0,
            "a rule on the hidden mount point reached the mount"
        );

        // The anchor's layout: a rule on the anchor, the anchor read-only,
        // the tmp bound beneath it.
        let code = in_namespace(|| {
            let granted = std::fs::File::open(&anchor).unwrap();
            if bind(&anchor, true).is_err() || bind_onto(&tmp, &seen).is_err() {
                return 10;
            }
            let all = AccessFs::from_all(ABI::V6);
            Ruleset::default()
                .handle_access(all)
                .unwrap()
                .create()
                .unwrap()
                .add_rule(PathBeneath::new(granted, all))
                .unwrap()
                .restrict_self()
                .unwrap();
            if errno_of(std::fs::write(seen.join("x"), "x")) != 0 {
                return 11;
            }
            if errno_of(mkfifo(&anchor.join("fifo"))) != libc::EROFS {
                return 12;
            }
            if errno_of(std::fs::remove_dir(&seen)) != libc::EROFS {
                return 13;
            }
            if errno_of(std::fs::write(tmp.join("y"), "y")) != libc::EACCES {
                return 14;
            }
            0
        });
        assert_eq!(code, 0, "see the step returning {code}");
        // The write went to the command's own tmp; the anchor stays empty.
        assert_eq!(std::fs::read_to_string(tmp.join("x")).unwrap(), "x");
        assert_eq!(std::fs::read_dir(&seen).unwrap().count(), 0);
        assert!(!anchor.join("fifo").exists());
    }
}
