//! New directory entries: no confined command may create an entry named
//! `.git` (compared ASCII-case-insensitively), anywhere.
//!
//! **Threat.** A repository a command makes (`git init x && echo evil >
//! x/.git/hooks/pre-commit`, `mkdir -p x/.git/hooks`, `mv staged x/.git`, a
//! `.git` file or symlink pointing at a directory laid out as a git dir)
//! carries hooks and `core.fsmonitor` that git, run on the workspace
//! outside the sandbox, executes. The protected set only learns about it
//! at the next command. So the command cannot create one at all: `git
//! init` and `git clone` fail in confined commands (run them outside, or
//! at level `none`), everything else creates files, directories and links
//! as before.
//!
//! **Mechanism: Landlock withholds the rights to make regular files,
//! directories and symlinks on every writable tree (the workspace, the
//! private tmp); every call that makes one traps to the worker** (seccomp
//! user notification, as [`super::metadata`]): `mkdir*`, `mknod*` (regular
//! files), `symlink*`, `link*`, `rename*`, and `open`/`openat`/`creat`
//! with `O_CREAT` or `O_TMPFILE`. The worker copies the path once, resolves
//! the parent directory itself to an `O_PATH` fd, asks the kernel where it
//! is, and when the parent lies beneath a writable root (and, without the
//! mount namespace, not on the way to a protected path, as the Landlock
//! grants say) and the new name is not `.git`, it makes the entry itself on
//! that fd, with the command's umask (a created file's fd is handed to the
//! command with `SECCOMP_IOCTL_NOTIF_ADDFD`; a file is made with `O_EXCL`,
//! so that an entry another process put there after the worker looked,
//! such as a symlink, is never followed with the worker's rights). A
//! `.git` name there fails `EPERM`. Anything else (an existing file opened
//! with `O_CREAT`, a parent outside the writable roots, `/proc` paths, a
//! name taken after the worker looked) goes back to the kernel
//! unchanged (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`), which is safe whatever
//! the command rewrites meanwhile: without the make rights the kernel can
//! only open what exists, never create. `openat2` answers ENOSYS
//! ([`super::seccomp`]: its mode and flags are in memory no filter reads),
//! so programs fall back to `openat`. Sockets and FIFOs
//! keep their own make rights (git ignores a `.git` that is neither a
//! directory nor a regular file), but one made by `mknod` traps too and is
//! refused at a protected path that does not exist yet (the entry where a
//! `.git` or hook link stops, which a FIFO would turn into a hang of git
//! outside); a socket `bind` makes is the kernel's.
//!
//! Not here: metadata calls ([`super::metadata`]), mounts
//! ([`super::mounts`]).

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::landlock::any_at_or_beneath;
use super::metadata::{Caller, Errno, Follow, MAX_PATH, MetadataGuard, last_errno};

/// The system calls that make directory entries, trapped always.
pub(super) const TRAPPED: &[i64] = &[
    #[cfg(target_arch = "x86_64")]
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_mknod,
    libc::SYS_mknodat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_link,
    libc::SYS_linkat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_rename,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_renameat,
    libc::SYS_renameat2,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_creat,
];

/// `open`-style calls trapped only when their flags (argument index) ask
/// for a new file: `O_CREAT` or `O_TMPFILE`.
pub(super) const TRAPPED_WITH_FLAGS: &[(i64, u32)] = &[
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 1),
    (libc::SYS_openat, 2),
];

/// `__O_TMPFILE` (the bit without `O_DIRECTORY`), the same on x86_64 and
/// aarch64.
pub(super) const O_TMPFILE_BIT: u32 = 0x40_0000;

/// The flag bits of [`TRAPPED_WITH_FLAGS`] that make a call trap.
pub(super) const CREATING_FLAGS: u32 = libc::O_CREAT as u32 | O_TMPFILE_BIT;

/// The answer to one trapped call.
pub(super) enum Reply {
    /// Done by the worker: this return value.
    Value(i64),
    /// Refused, or failed when the worker did it: this errno.
    Error(Errno),
    /// Let the kernel run the call as the command made it.
    Continue,
    /// Answered already (a file descriptor handed over with ADDFD).
    Sent,
}

/// Whether `nr` is one of this module's calls.
pub(super) fn handles(nr: i64) -> bool {
    TRAPPED.contains(&nr) || TRAPPED_WITH_FLAGS.iter().any(|(n, _)| *n == nr)
}

/// Whether no new entry may be called `name`: `.git`, and the server's own
/// temp files ([`crate::sandbox::is_temp_name`]: a file tool's content
/// waits in one before it replaces a file, possibly one commands may not
/// write; a command swapping its own file in there, by rename or link,
/// would have it installed instead).
pub fn is_forbidden_name(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(crate::sandbox::protected::PROTECTED_NAME.as_bytes())
        || crate::sandbox::is_temp_name(name)
}

/// A new entry's parent directory (resolved by the worker) and name.
struct NewEntry {
    parent: OwnedFd,
    /// Where the kernel says the parent is.
    parent_path: PathBuf,
    name: CString,
}

impl NewEntry {
    fn full_path(&self) -> PathBuf {
        self.parent_path
            .join(std::ffi::OsStr::from_bytes(self.name.as_bytes()))
    }
}

/// The object `fd` names, as the kernel says (`/proc/self/fd`).
fn located(fd: &OwnedFd) -> Option<PathBuf> {
    let p = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    // An unlinked file (an `O_TMPFILE` one, say) is `PATH (deleted)`.
    let p = super::metadata::strip_deleted(&p);
    p.as_os_str().as_bytes().starts_with(b"/").then_some(p)
}

/// The caller's umask, from `/proc/<tid>/status`.
fn umask_of(tid: u32) -> Option<libc::mode_t> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Umask:"))?;
    libc::mode_t::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
}

/// Runs `f` with this process's umask set to `mask` (the worker is
/// single-threaded, so nothing else sees it).
fn with_umask<T>(mask: libc::mode_t, f: impl FnOnce() -> T) -> T {
    // SAFETY: umask cannot fail.
    let old = unsafe { libc::umask(mask) };
    let out = f();
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    out
}

fn result(r: libc::c_long) -> Reply {
    if r < 0 {
        Reply::Error(last_errno())
    } else {
        Reply::Value(r)
    }
}

impl MetadataGuard {
    /// Whether the command may add or remove entries in `dir` (as the
    /// Landlock grants would let it): beneath a writable root, not beneath
    /// a protected path, not on the way to a path locked piecewise.
    fn may_change_entries_in(&self, dir: &Path) -> bool {
        self.allows(dir) && !any_at_or_beneath(&self.way_locked, dir)
    }

    /// Whether `path` is or lies beneath a protected path.
    fn is_excluded(&self, path: &Path) -> bool {
        self.excluded.iter().any(|x| path.starts_with(x))
    }

    /// Answers one trapped call of [`TRAPPED`] or [`TRAPPED_WITH_FLAGS`].
    pub(super) fn serve_entry(&self, listener: RawFd, req: &libc::seccomp_notif) -> Reply {
        match self.entry(listener, req) {
            Ok(r) => r,
            Err(e) => Reply::Error(e),
        }
    }

    fn entry(&self, listener: RawFd, req: &libc::seccomp_notif) -> Result<Reply, Errno> {
        let t = Caller::open(req.pid)?;
        let a = req.data.args;
        let fd = |x: u64| x as u32 as i32;
        let nr = i64::from(req.data.nr);
        // The forms without `at` (x86_64 only) are relative to the cwd.
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
        let cwd = libc::AT_FDCWD;
        let valid = || {
            let mut id = req.id;
            // SAFETY: ID_VALID reads the u64 id.
            unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) == 0 }
        };
        // Read only when an entry is made (most trapped opens are of an
        // existing file and go back to the kernel).
        let umask_now = || umask_of(t.tid()).unwrap_or(0o022);
        let umask: &dyn Fn() -> libc::mode_t = &umask_now;
        match nr {
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mkdir => self.mkdir(&t, cwd, a[0], a[1], umask, valid),
            libc::SYS_mkdirat => self.mkdir(&t, fd(a[0]), a[1], a[2], umask, valid),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mknod => self.mknod(&t, cwd, a[0], a[1], a[2], umask, valid),
            libc::SYS_mknodat => self.mknod(&t, fd(a[0]), a[1], a[2], a[3], umask, valid),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_symlink => self.symlink(&t, a[0], cwd, a[1], valid),
            libc::SYS_symlinkat => self.symlink(&t, a[0], fd(a[1]), a[2], valid),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_link => self.link(&t, cwd, a[0], cwd, a[1], 0, valid),
            libc::SYS_linkat => self.link(&t, fd(a[0]), a[1], fd(a[2]), a[3], a[4], valid),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_rename => self.rename(&t, cwd, a[0], cwd, a[1], 0, valid),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_renameat => self.rename(&t, fd(a[0]), a[1], fd(a[2]), a[3], 0, valid),
            libc::SYS_renameat2 => self.rename(&t, fd(a[0]), a[1], fd(a[2]), a[3], a[4], valid),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_creat => {
                let flags = (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64;
                self.open(&t, listener, req, cwd, a[0], flags, a[1], umask, valid)
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => self.open(&t, listener, req, cwd, a[0], a[1], a[2], umask, valid),
            libc::SYS_openat => {
                self.open(&t, listener, req, fd(a[0]), a[1], a[2], a[3], umask, valid)
            }
            _ => Ok(Reply::Continue),
        }
    }

    /// The parent and name of the new entry `path` (relative to the
    /// caller's `dirfd`), when the command may add entries there. `None`:
    /// not the worker's to make (the kernel decides, and cannot create):
    /// so for a path with trailing slashes unless it may name a directory
    /// (`dir`: `mkdir`, `rename`), which the kernel refuses (`mkfifo f/`
    /// fails `ENOENT`, `open("f/", O_CREAT)` `EISDIR`).
    fn new_entry(
        &self,
        t: &Caller,
        dirfd: i32,
        path: u64,
        dir: bool,
    ) -> Result<Option<NewEntry>, Errno> {
        let p = t.path(path)?;
        let bytes = p.as_bytes();
        let trimmed = {
            let mut end = bytes.len();
            while end > 1 && bytes[end - 1] == b'/' {
                end -= 1;
            }
            &bytes[..end]
        };
        if !dir && trimmed.len() < bytes.len() {
            return Ok(None);
        }
        let (parent, name) = match trimmed.iter().rposition(|b| *b == b'/') {
            Some(0) => (&b"/"[..], &trimmed[1..]),
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&b""[..], trimmed),
        };
        if name.is_empty() || name == b"." || name == b".." || name == b"/" {
            return Ok(None);
        }
        let parent_fd = if parent.is_empty() {
            t.fd(dirfd)?
        } else {
            let c = CString::new(parent).map_err(|_| libc::EINVAL)?;
            let base = if parent.starts_with(b"/") {
                None
            } else {
                Some(t.fd(dirfd)?)
            };
            match t.open_path(
                base.as_ref().map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd),
                &c,
                Follow::Yes,
            ) {
                Ok(fd) => fd,
                // The kernel reports a missing or unreadable parent itself.
                Err(_) => return Ok(None),
            }
        };
        let Some(parent_path) = located(&parent_fd) else {
            return Ok(None);
        };
        if !self.may_change_entries_in(&parent_path) {
            return Ok(None);
        }
        let name = CString::new(name).map_err(|_| libc::EINVAL)?;
        Ok(Some(NewEntry {
            parent: parent_fd,
            parent_path,
            name,
        }))
    }

    /// [`Self::new_entry`], refusing a `.git` name where one could be made.
    fn allowed_entry(
        &self,
        t: &Caller,
        dirfd: i32,
        path: u64,
        dir: bool,
    ) -> Result<Option<NewEntry>, Errno> {
        let Some(e) = self.new_entry(t, dirfd, path, dir)? else {
            return Ok(None);
        };
        if is_forbidden_name(e.name.as_bytes()) {
            return Err(libc::EPERM);
        }
        if self.is_excluded(&e.full_path()) {
            return Ok(None);
        }
        Ok(Some(e))
    }

    fn mkdir(
        &self,
        t: &Caller,
        dirfd: i32,
        path: u64,
        mode: u64,
        umask: &dyn Fn() -> libc::mode_t,
        valid: impl Fn() -> bool,
    ) -> Result<Reply, Errno> {
        let Some(e) = self.allowed_entry(t, dirfd, path, true)? else {
            return Ok(Reply::Continue);
        };
        if !valid() {
            return Err(libc::ESRCH);
        }
        // A workspace directory keeps its owner's read and search
        // permission, whatever the mode or umask asked (`mkdir -m 300`): a
        // server that is not root could not look into it, and a
        // repository put there later would not be protected (a breaker's
        // finding; `chmod` refuses the same, see `super::metadata`).
        let (mut mode, mut mask) = (mode as libc::mode_t, umask());
        if self
            .workspace
            .as_ref()
            .is_some_and(|w| e.parent_path.starts_with(w))
        {
            mode |= libc::S_IRUSR | libc::S_IXUSR;
            mask &= !(libc::S_IRUSR | libc::S_IXUSR);
        }
        // SAFETY: a valid fd and NUL-terminated name.
        let r = with_umask(mask, || unsafe {
            libc::mkdirat(e.parent.as_raw_fd(), e.name.as_ptr(), mode)
        });
        Ok(result(r.into()))
    }

    #[allow(clippy::too_many_arguments)]
    fn mknod(
        &self,
        t: &Caller,
        dirfd: i32,
        path: u64,
        mode: u64,
        dev: u64,
        umask: &dyn Fn() -> libc::mode_t,
        valid: impl Fn() -> bool,
    ) -> Result<Reply, Errno> {
        let kind = mode as libc::mode_t & libc::S_IFMT;
        let e = match kind {
            0 | libc::S_IFREG => match self.allowed_entry(t, dirfd, path, false)? {
                Some(e) => e,
                None => return Ok(Reply::Continue),
            },
            // FIFOs and sockets keep their own make rights (see the
            // module doc), so the kernel would make one even at a
            // protected path that does not exist yet (where a link leads
            // nowhere: a breaker's finding); the worker makes them, as a
            // file, once it has checked the path.
            libc::S_IFIFO | libc::S_IFSOCK => match self.new_entry(t, dirfd, path, false)? {
                Some(e)
                    if is_forbidden_name(e.name.as_bytes()) || self.is_excluded(&e.full_path()) =>
                {
                    return Err(libc::EACCES);
                }
                Some(e) => e,
                None => return Ok(Reply::Continue),
            },
            // Devices: no capability makes one; the kernel's call.
            _ => return Ok(Reply::Continue),
        };
        if !valid() {
            return Err(libc::ESRCH);
        }
        // SAFETY: a valid fd and NUL-terminated name.
        let r = with_umask(umask(), || unsafe {
            libc::mknodat(
                e.parent.as_raw_fd(),
                e.name.as_ptr(),
                mode as libc::mode_t,
                dev as libc::dev_t,
            )
        });
        Ok(result(r.into()))
    }

    fn symlink(
        &self,
        t: &Caller,
        target: u64,
        dirfd: i32,
        path: u64,
        valid: impl Fn() -> bool,
    ) -> Result<Reply, Errno> {
        let target = t.cstr(target, MAX_PATH)?;
        let Some(e) = self.allowed_entry(t, dirfd, path, false)? else {
            return Ok(Reply::Continue);
        };
        if !valid() {
            return Err(libc::ESRCH);
        }
        // SAFETY: valid NUL-terminated strings and fd.
        let r = unsafe { libc::symlinkat(target.as_ptr(), e.parent.as_raw_fd(), e.name.as_ptr()) };
        Ok(result(r.into()))
    }

    #[allow(clippy::too_many_arguments)]
    fn link(
        &self,
        t: &Caller,
        olddirfd: i32,
        oldpath: u64,
        newdirfd: i32,
        newpath: u64,
        flags: u64,
        valid: impl Fn() -> bool,
    ) -> Result<Reply, Errno> {
        let follow = if flags as i32 & libc::AT_SYMLINK_FOLLOW != 0 {
            Follow::Yes
        } else {
            Follow::No
        };
        let source = if flags as i32 & libc::AT_EMPTY_PATH != 0
            && t.cstr(oldpath, MAX_PATH)?.as_bytes().is_empty()
        {
            t.fd(olddirfd)?
        } else {
            match t.at(olddirfd, oldpath, 0, follow) {
                Ok(fd) => fd,
                Err(_) => return Ok(Reply::Continue),
            }
        };
        // A link to a file outside the writable paths (or inside a
        // protected one) would make it writable through the new name.
        let Some(source_path) = located(&source) else {
            return Ok(Reply::Continue);
        };
        if !self.allows(&source_path) {
            return Ok(Reply::Continue);
        }
        // The server's temp file (see `crate::sandbox::is_temp_name`) gets
        // no other name either: one kept would outlive its rename.
        if source_path
            .file_name()
            .is_some_and(|n| crate::sandbox::is_temp_name(n.as_bytes()))
        {
            return Err(libc::EPERM);
        }
        let Some(e) = self.new_entry(t, newdirfd, newpath, false)? else {
            return Ok(Reply::Continue);
        };
        if is_forbidden_name(e.name.as_bytes()) {
            return Err(libc::EPERM);
        }
        // The kernel would link a FIFO or socket there (their make rights
        // are kept): a protected path that does not exist must stay so.
        if self.is_excluded(&e.full_path()) {
            return Err(libc::EACCES);
        }
        if !valid() {
            return Err(libc::ESRCH);
        }
        let magic = CString::new(format!("/proc/self/fd/{}", source.as_raw_fd()))
            .map_err(|_| libc::EINVAL)?;
        // SAFETY: valid NUL-terminated strings and fds.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                magic.as_ptr(),
                e.parent.as_raw_fd(),
                e.name.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        Ok(result(r.into()))
    }

    #[allow(clippy::too_many_arguments)]
    fn rename(
        &self,
        t: &Caller,
        olddirfd: i32,
        oldpath: u64,
        newdirfd: i32,
        newpath: u64,
        flags: u64,
        valid: impl Fn() -> bool,
    ) -> Result<Reply, Errno> {
        let Some(old) = self.new_entry(t, olddirfd, oldpath, true)? else {
            return Ok(Reply::Continue);
        };
        let Some(new) = self.new_entry(t, newdirfd, newpath, true)? else {
            return Ok(Reply::Continue);
        };
        // Moving a `.git` in or out (or exchanging one) is making one.
        if is_forbidden_name(old.name.as_bytes()) || is_forbidden_name(new.name.as_bytes()) {
            return Err(libc::EPERM);
        }
        let (from, to) = (old.full_path(), new.full_path());
        // Nothing is moved onto a protected path: the kernel would move a
        // FIFO or socket onto one that does not exist (their make rights
        // are kept; a breaker's finding), and refuses the rest. Exchanged,
        // both names are destinations.
        let exchange = flags as libc::c_uint & libc::RENAME_EXCHANGE != 0;
        if self.is_excluded(&to) || (exchange && self.is_excluded(&from)) {
            return Err(libc::EACCES);
        }
        if [&from, &to]
            .iter()
            .any(|p| self.is_excluded(p) || any_at_or_beneath(&self.way_locked, p))
        {
            return Ok(Reply::Continue);
        }
        if !valid() {
            return Err(libc::ESRCH);
        }
        // SAFETY: valid NUL-terminated names and fds.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                old.parent.as_raw_fd(),
                old.name.as_ptr(),
                new.parent.as_raw_fd(),
                new.name.as_ptr(),
                flags as libc::c_uint,
            )
        };
        Ok(result(r))
    }

    #[allow(clippy::too_many_arguments)]
    fn open(
        &self,
        t: &Caller,
        listener: RawFd,
        req: &libc::seccomp_notif,
        dirfd: i32,
        path: u64,
        flags: u64,
        mode: u64,
        umask: &dyn Fn() -> libc::mode_t,
        valid: impl Fn() -> bool,
    ) -> Result<Reply, Errno> {
        let flags = flags as i32;
        let opened = if flags as u32 & O_TMPFILE_BIT != 0 {
            // An unnamed file in a directory (a name comes later, through
            // linkat, which is trapped).
            let Ok(dir) = t.at(dirfd, path, 0, Follow::Yes) else {
                return Ok(Reply::Continue);
            };
            let Some(dir_path) = located(&dir) else {
                return Ok(Reply::Continue);
            };
            if !self.may_change_entries_in(&dir_path) {
                return Ok(Reply::Continue);
            }
            if !valid() {
                return Err(libc::ESRCH);
            }
            let magic = CString::new(format!("/proc/self/fd/{}", dir.as_raw_fd()))
                .map_err(|_| libc::EINVAL)?;
            open_as(libc::AT_FDCWD, &magic, flags, mode, umask())
        } else {
            let Some(e) = self.new_entry(t, dirfd, path, false)? else {
                return Ok(Reply::Continue);
            };
            if exists(&e.parent, &e.name) {
                // Opening what is there: the kernel's call, which (without
                // the make rights) cannot create anything whatever the
                // path says by then.
                return Ok(Reply::Continue);
            }
            if is_forbidden_name(e.name.as_bytes()) {
                return Err(libc::EPERM);
            }
            if self.excluded.iter().any(|x| e.full_path().starts_with(x)) {
                return Ok(Reply::Continue);
            }
            if !valid() {
                return Err(libc::ESRCH);
            }
            // Only ever a new file: an entry that appeared since the look
            // above (a symlink another command's worker made there, say)
            // is not followed with this process's rights, which no
            // Landlock ruleset bounds (to a file outside every writable
            // root, or to this worker's own status pipe); opening it is the
            // kernel's call, as above.
            match open_as(
                e.parent.as_raw_fd(),
                &e.name,
                flags | libc::O_EXCL,
                mode,
                umask(),
            ) {
                Err(libc::EEXIST) => return Ok(Reply::Continue),
                opened => opened,
            }
        };
        let file = match opened {
            Ok(f) => f,
            Err(e) => return Ok(Reply::Error(e)),
        };
        let addfd = libc::seccomp_notif_addfd {
            id: req.id,
            flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
            srcfd: file.as_raw_fd() as u32,
            newfd: 0,
            newfd_flags: (flags & libc::O_CLOEXEC) as u32,
        };
        // SAFETY: ADDFD reads `addfd`, which has the kernel's layout; with
        // SEND it also answers the notification with the new fd number.
        let r = unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ADDFD, &addfd) };
        if r < 0 {
            return Ok(Reply::Error(last_errno()));
        }
        Ok(Reply::Sent)
    }
}

/// Whether `name` exists in `parent` (not following a final symlink).
fn exists(parent: &OwnedFd, name: &CStr) -> bool {
    // SAFETY: fstatat into a zeroed local with a valid fd and name.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstatat(
            parent.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) == 0
    }
}

/// `openat` as the command asked, with its umask; the worker's copy of the
/// fd is close-on-exec whatever the command's flags.
fn open_as(
    dirfd: RawFd,
    name: &CStr,
    flags: i32,
    mode: u64,
    umask: libc::mode_t,
) -> Result<OwnedFd, Errno> {
    // SAFETY: a valid fd and NUL-terminated name.
    let fd = with_umask(umask, || unsafe {
        libc::openat(
            dirfd,
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    });
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: just returned by openat, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_names_are_forbidden_in_any_case() {
        for (n, bad) in [
            (".git", true),
            (".GIT", true),
            (".Git", true),
            ("git", false),
            (".git2", false),
            (".gitignore", false),
            ("x.git", false),
        ] {
            assert_eq!(is_forbidden_name(n.as_bytes()), bad, "{n}");
        }
    }
}
