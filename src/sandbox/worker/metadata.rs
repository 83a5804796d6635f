//! File metadata outside the writable paths: mode (set-id bits included),
//! owner, times and extended attributes, which Landlock does not govern.
//!
//! **Threat.** Landlock checks opens, creations, removals and renames, not
//! `chmod`, `chown`, `utime*` or `*setxattr`. A command could make a file
//! outside the workspace world-writable or setuid (`chmod u+s /usr/bin/x`),
//! back-date it to hide a change (`touch -d`), or plant extended
//! attributes, on every file its uid owns. For a root server that is every
//! root-owned file on the host: dropping capabilities does not help, the
//! owner needs none for these calls.
//!
//! **Mechanism: seccomp user notification, the worker performing the call.**
//! seccomp cannot read the path a call names, and a check of the path
//! followed by letting the kernel run the call would race (another thread
//! rewrites the path between the check and the kernel's read). So every
//! metadata call of the command traps to the worker ([`notify_program`]),
//! which copies the arguments out of the command's memory once, resolves the
//! object itself (relative to the command's cwd or directory fd, following
//! symlinks exactly as the call would) to an `O_PATH` fd, asks the kernel
//! where that object is (`/proc/self/fd`), and only if it lies beneath a
//! writable root (the workspace at a writing level, the private tmp) and
//! not beneath a protected path (every `.git`, the service's files) performs
//! the call on that fd and returns its result; otherwise the call fails
//! with EPERM. What is changed is the object that was checked, never a path
//! read again. Objects that are no file (pipes, sockets) are left alone.
//! The worker drops its capabilities before it serves (see
//! [`super::supervise`]), so it never does more than the command could.
//!
//! Set-id bits are refused everywhere, inside the workspace too
//! ([`super::seccomp`]: `chmod` family and `open`/`creat`/`mknod` with a
//! set-id mode), because a root-owned setuid file in the workspace would be
//! a root shell for every local user. `FS_IOC_SETFLAGS`/`FS_IOC_FSSETXATTR`
//! (`chattr`) are refused there too, and the `*xattrat`/`file_setattr`
//! calls answer ENOSYS so libc falls back to the calls trapped here.
//!
//! If the worker could not serve (it died), the kernel answers the trapped
//! calls ENOSYS: fail closed.
//!
//! Not here: the other seccomp rules ([`super::seccomp`]).

#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use seccompiler::{BpfProgram, sock_filter};

use super::entries::{CREATING_FLAGS, Reply, TRAPPED_WITH_FLAGS};

/// The metadata system calls trapped to the worker.
const TRAPPED: &[i64] = &[
    // The path forms without `at`: x86_64 has them, aarch64 (asm-generic
    // numbering) only the `*at` forms, which libc uses there.
    #[cfg(target_arch = "x86_64")]
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    SYS_FCHMODAT2,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_chown,
    libc::SYS_fchown,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_lchown,
    libc::SYS_fchownat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_utime,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_utimes,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_futimesat,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
];

/// `fchmodat2` (Linux 6.6): 452 on every architecture (the unified
/// numbering from 424 on); the libc crate defines it for x86_64 only.
pub(super) const SYS_FCHMODAT2: i64 = 452;

/// The audit architecture of this build, as `seccomp_data.arch` holds it.
#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_003E;
/// The audit architecture of this build, as `seccomp_data.arch` holds it.
#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the worker's seccomp filters know x86_64 and aarch64 system call numbers only");

/// Longest path copied from the command (PATH_MAX).
pub(super) const MAX_PATH: usize = 4096;
/// Longest attribute name (XATTR_NAME_MAX + NUL).
const MAX_XATTR_NAME: usize = 256;
/// Largest attribute value (XATTR_SIZE_MAX).
const MAX_XATTR_VALUE: usize = 65536;

/// Every call [`notify_program`] may notify the worker of; it allows every
/// other call of the native architecture.
pub(super) fn notified_calls() -> Vec<i64> {
    let mut calls = always_notified();
    calls.extend(TRAPPED_WITH_FLAGS.iter().map(|(nr, _)| *nr));
    calls
}

/// The calls notified whatever their arguments.
fn always_notified() -> Vec<i64> {
    TRAPPED
        .iter()
        .chain(super::entries::TRAPPED)
        .copied()
        .collect()
}

/// The notifying filter: every call of [`TRAPPED`] and of
/// [`super::entries::TRAPPED`] goes to the listener, and the calls of
/// [`TRAPPED_WITH_FLAGS`] when their flags ask for a new file.
pub(super) fn notify_program() -> BpfProgram {
    use super::seccomp::{
        ARCH_OFFSET, ARGS_OFFSET, JMP_JEQ_K, JMP_JSET_K, LD_W_ABS, NR_OFFSET, RET_K,
    };
    let op = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    let always = always_notified();
    let (n, m) = (always.len(), TRAPPED_WITH_FLAGS.len());
    // Layout: arch check, load nr, one jump per always-trapped call, one
    // per flag-checked call, ALLOW, NOTIFY, then per flag-checked call its
    // own four (load the flags, test them, NOTIFY, ALLOW): BPF jumps only
    // go forward.
    let allow = 3 + n + m; // index of the ALLOW return
    let notify = allow + 1;
    let check = |j: usize| notify + 1 + 4 * j;
    let rel = |from: usize, to: usize| (to - from - 1) as u8;
    let mut p = vec![
        op(LD_W_ABS, ARCH_OFFSET, 0, 0),
        // Another arch: the main filter already kills it.
        op(JMP_JEQ_K, AUDIT_ARCH, 0, rel(1, allow)),
        op(LD_W_ABS, NR_OFFSET, 0, 0),
    ];
    for nr in &always {
        let at = p.len();
        p.push(op(JMP_JEQ_K, *nr as u32, rel(at, notify), 0));
    }
    for (j, (nr, _)) in TRAPPED_WITH_FLAGS.iter().enumerate() {
        let at = p.len();
        p.push(op(JMP_JEQ_K, *nr as u32, rel(at, check(j)), 0));
    }
    p.push(op(RET_K, libc::SECCOMP_RET_ALLOW, 0, 0));
    p.push(op(RET_K, libc::SECCOMP_RET_USER_NOTIF, 0, 0));
    for (_, arg) in TRAPPED_WITH_FLAGS {
        p.push(op(LD_W_ABS, ARGS_OFFSET + 8 * arg, 0, 0));
        p.push(op(JMP_JSET_K, CREATING_FLAGS, 0, 1));
        p.push(op(RET_K, libc::SECCOMP_RET_USER_NOTIF, 0, 0));
        p.push(op(RET_K, libc::SECCOMP_RET_ALLOW, 0, 0));
    }
    p
}

/// Where the command may change metadata, and where not.
pub(super) struct MetadataGuard {
    /// Writable roots (canonical): the workspace at a writing level, the
    /// private tmp.
    pub roots: Vec<PathBuf>,
    /// Never, even beneath a root: protected paths.
    pub excluded: BTreeSet<PathBuf>,
    /// Paths the Landlock grants go around piecewise: no entry may be
    /// added, removed or renamed in a directory on the way to one (every
    /// protected path without the mount namespace; the service's own files
    /// always). See [`super::entries`].
    pub way_locked: BTreeSet<PathBuf>,
    /// The workspace (canonical), when the command may write it: no
    /// directory there may lose its owner's read or search permission
    /// (see [`Self::hides_a_directory`]).
    pub workspace: Option<PathBuf>,
}

pub(super) type Errno = i32;

/// How a trapped call names its object.
pub(super) enum Follow {
    Yes,
    No,
}

impl MetadataGuard {
    /// Whether `mode` would take its owner's read or search permission
    /// from the workspace directory `object` (at `located`). A server that
    /// is not root finds the protected paths with the permissions of the
    /// user the commands run as: a directory it cannot list hides the
    /// `.git` links inside it, and the repositories they lead to would be
    /// writable for the next command (a breaker's finding: `chmod 311 p`
    /// hid `p/.git -> ../.repo/projects/p.git`). Refused for a root server
    /// too, so that a command behaves the same under both.
    fn hides_a_directory(&self, object: &OwnedFd, located: &Path, mode: u64) -> bool {
        let needed = u64::from(libc::S_IRUSR | libc::S_IXUSR);
        if mode & needed == needed
            || !self
                .workspace
                .as_ref()
                .is_some_and(|w| located.starts_with(w))
        {
            return false;
        }
        rustix::fs::fstat(object).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
        })
    }

    /// Whether the object at `path` (as the kernel names it) may change.
    pub(super) fn allows(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
            && !self.excluded.iter().any(|e| path.starts_with(e))
    }

    /// Receives one notification on `listener` and answers it.
    pub(super) fn serve_one(&self, listener: RawFd) {
        // SAFETY: zeroed plain-data structs filled by the kernel.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: RECV writes into `req`, which has the kernel's layout.
        if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } != 0 {
            // ENOENT: the caller died before we read it.
            return;
        }
        let reply = if super::entries::handles(i64::from(req.data.nr)) {
            self.serve_entry(listener, &req)
        } else {
            match self.perform(listener, &req) {
                Ok(()) => Reply::Value(0),
                Err(e) => Reply::Error(e),
            }
        };
        let (val, error, flags) = match reply {
            Reply::Value(v) => (v, 0, 0),
            Reply::Error(e) => (0, -e, 0),
            Reply::Continue => (0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
            Reply::Sent => return,
        };
        let resp = libc::seccomp_notif_resp {
            id: req.id,
            val,
            error,
            flags,
        };
        // SAFETY: SEND reads `resp`, which has the kernel's layout.
        unsafe {
            libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp);
        }
    }

    fn perform(&self, listener: RawFd, req: &libc::seccomp_notif) -> Result<(), Errno> {
        let t = Caller::open(req.pid)?;
        let a = req.data.args;
        let fd = |x: u64| x as u32 as i32;
        let nr = i64::from(req.data.nr);
        // Copy everything out of the caller's memory and resolve the object
        // first; then make sure the notification (and so the pid) is still
        // live before acting on it.
        let (object, op) = match nr {
            #[cfg(target_arch = "x86_64")]
            libc::SYS_chmod => (t.at(libc::AT_FDCWD, a[0], 0, Follow::Yes)?, Op::Mode(a[1])),
            libc::SYS_fchmod => (t.fd(fd(a[0]))?, Op::Mode(a[1])),
            libc::SYS_fchmodat => (t.at(fd(a[0]), a[1], 0, Follow::Yes)?, Op::Mode(a[2])),
            SYS_FCHMODAT2 => (t.at_flags(fd(a[0]), a[1], a[3])?, Op::Mode(a[2])),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_chown => (
                t.at(libc::AT_FDCWD, a[0], 0, Follow::Yes)?,
                Op::Owner(a[1], a[2]),
            ),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_lchown => (
                t.at(libc::AT_FDCWD, a[0], 0, Follow::No)?,
                Op::Owner(a[1], a[2]),
            ),
            libc::SYS_fchown => (t.fd(fd(a[0]))?, Op::Owner(a[1], a[2])),
            libc::SYS_fchownat => (t.at_flags(fd(a[0]), a[1], a[4])?, Op::Owner(a[2], a[3])),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_utime => (
                t.at(libc::AT_FDCWD, a[0], 0, Follow::Yes)?,
                Op::Times(t.utimbuf(a[1])?),
            ),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_utimes => (
                t.at(libc::AT_FDCWD, a[0], 0, Follow::Yes)?,
                Op::Times(t.timevals(a[1])?),
            ),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_futimesat => (
                t.at(fd(a[0]), a[1], 0, Follow::Yes)?,
                Op::Times(t.timevals(a[2])?),
            ),
            libc::SYS_utimensat => {
                let object = if a[1] == 0 {
                    // futimens(fd): the fd itself; AT_FDCWD with no path
                    // is the kernel's EFAULT.
                    if fd(a[0]) == libc::AT_FDCWD {
                        return Err(libc::EFAULT);
                    }
                    t.fd(fd(a[0]))?
                } else {
                    t.at_flags(fd(a[0]), a[1], a[3])?
                };
                (object, Op::Times(t.timespecs(a[2])?))
            }
            libc::SYS_setxattr | libc::SYS_lsetxattr | libc::SYS_fsetxattr => {
                let object = match nr {
                    libc::SYS_fsetxattr => t.fd(fd(a[0]))?,
                    libc::SYS_lsetxattr => t.at(libc::AT_FDCWD, a[0], 0, Follow::No)?,
                    _ => t.at(libc::AT_FDCWD, a[0], 0, Follow::Yes)?,
                };
                let name = t.cstr(a[1], MAX_XATTR_NAME)?;
                let size = a[3] as usize;
                if size > MAX_XATTR_VALUE {
                    return Err(libc::E2BIG);
                }
                let value = if size == 0 {
                    Vec::new()
                } else {
                    t.bytes(a[2], size)?
                };
                (object, Op::SetXattr(name, value, a[4] as i32))
            }
            libc::SYS_removexattr | libc::SYS_lremovexattr | libc::SYS_fremovexattr => {
                let object = match nr {
                    libc::SYS_fremovexattr => t.fd(fd(a[0]))?,
                    libc::SYS_lremovexattr => t.at(libc::AT_FDCWD, a[0], 0, Follow::No)?,
                    _ => t.at(libc::AT_FDCWD, a[0], 0, Follow::Yes)?,
                };
                (object, Op::RemoveXattr(t.cstr(a[1], MAX_XATTR_NAME)?))
            }
            _ => return Err(libc::ENOSYS),
        };
        let mut id = req.id;
        // SAFETY: ID_VALID reads the u64 id.
        if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) } != 0 {
            return Err(libc::ESRCH);
        }
        let self_path = CString::new(format!("/proc/self/fd/{}", object.as_raw_fd()))
            .map_err(|_| libc::EINVAL)?;
        let located =
            std::fs::read_link(Path::new(std::ffi::OsStr::from_bytes(self_path.as_bytes())))
                .map_err(|_| libc::EPERM)?;
        // Pipes, sockets and other anonymous inodes ("pipe:[…]") are no
        // file anywhere: nothing to protect.
        let on_disk = located.as_os_str().as_bytes().starts_with(b"/");
        if on_disk && !self.allows(&strip_deleted(&located)) {
            return Err(libc::EPERM);
        }
        // A file tool's temp file is made with no permission bits, which
        // its owner could otherwise give back and then open it (see
        // `crate::sandbox::is_temp_name`).
        if located
            .file_name()
            .is_some_and(|n| crate::sandbox::is_temp_name(n.as_bytes()))
        {
            return Err(libc::EPERM);
        }
        let hides = match &op {
            Op::Mode(mode) => self.hides_a_directory(&object, &located, *mode),
            // An access ACL carries the owner's permission bits too
            // (`setfacl -m u::- dir`); a default ACL gives them to the
            // directories made in it.
            Op::SetXattr(name, value, _)
                if matches!(
                    name.as_bytes(),
                    b"system.posix_acl_access" | b"system.posix_acl_default"
                ) =>
            {
                acl_owner_mode(value)
                    .is_some_and(|mode| self.hides_a_directory(&object, &located, mode))
            }
            _ => false,
        };
        if hides {
            return Err(libc::EPERM);
        }
        op.apply(&object, &self_path)
    }
}

/// The owner's permission bits (as a mode's `S_IRWXU`) in a POSIX access
/// ACL as `system.posix_acl_access` carries it (the kernel's
/// `posix_acl_xattr` layout: a version word, then 8-byte entries of tag,
/// permissions and id, little-endian); `None` when it is not one the
/// kernel would take.
fn acl_owner_mode(value: &[u8]) -> Option<u64> {
    const VERSION: u32 = 2;
    const ACL_USER_OBJ: u16 = 0x01;
    let (version, entries) = value.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*version) != VERSION || entries.len() % 8 != 0 {
        return None;
    }
    entries.chunks_exact(8).find_map(|e| {
        (u16::from_le_bytes([e[0], e[1]]) == ACL_USER_OBJ)
            .then(|| u64::from(u16::from_le_bytes([e[2], e[3]]) & 0o7) << 6)
    })
}

/// `/proc/self/fd` names a deleted file `PATH (deleted)`.
pub(super) fn strip_deleted(p: &Path) -> PathBuf {
    let b = p.as_os_str().as_bytes();
    let b = b.strip_suffix(b" (deleted)").unwrap_or(b);
    PathBuf::from(std::ffi::OsStr::from_bytes(b))
}

/// The change a trapped call asks for, with its arguments copied.
enum Op {
    Mode(u64),
    Owner(u64, u64),
    /// `None`: set both to now.
    Times(Option<[libc::timespec; 2]>),
    SetXattr(CString, Vec<u8>, i32),
    RemoveXattr(CString),
}

impl Op {
    /// Performs the change on `object` (an O_PATH fd; `path` is its
    /// `/proc/self/fd` name, which reaches exactly that object).
    fn apply(self, object: &OwnedFd, path: &CString) -> Result<(), Errno> {
        // SAFETY: valid NUL-terminated strings, buffers and lengths that
        // live across each call.
        let r = unsafe {
            match self {
                Op::Mode(mode) => {
                    libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), mode as libc::mode_t, 0)
                }
                Op::Owner(uid, gid) => libc::fchownat(
                    object.as_raw_fd(),
                    c"".as_ptr(),
                    uid as u32,
                    gid as u32,
                    libc::AT_EMPTY_PATH,
                ),
                Op::Times(t) => libc::utimensat(
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
                    0,
                ),
                Op::SetXattr(name, value, flags) => libc::setxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    flags,
                ),
                Op::RemoveXattr(name) => libc::removexattr(path.as_ptr(), name.as_ptr()),
            }
        };
        if r == 0 { Ok(()) } else { Err(last_errno()) }
    }
}

pub(super) fn last_errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EPERM)
}

/// The calling thread, seen through `/proc/<tid>`.
pub(super) struct Caller {
    tid: u32,
    mem: File,
}

impl Caller {
    /// The calling thread's id.
    pub(super) fn tid(&self) -> u32 {
        self.tid
    }

    /// The path at `addr`, with the names that mean "the caller itself"
    /// (`/proc/self`, `/proc/thread-self`, `/dev/fd`, `/dev/std*`) spelled
    /// as the caller's `/proc/<tid>`: resolved by the worker they would
    /// name the worker's own fds.
    pub(super) fn path(&self, addr: u64) -> Result<CString, Errno> {
        let p = self.cstr(addr, MAX_PATH)?;
        let b = p.as_bytes();
        let tid = self.tid;
        let fixed: Option<Vec<u8>> = [
            (&b"/proc/self/"[..], format!("/proc/{tid}/")),
            (
                &b"/proc/thread-self/"[..],
                format!("/proc/{tid}/task/{tid}/"),
            ),
            (&b"/dev/fd/"[..], format!("/proc/{tid}/fd/")),
            (&b"/dev/stdin"[..], format!("/proc/{tid}/fd/0")),
            (&b"/dev/stdout"[..], format!("/proc/{tid}/fd/1")),
            (&b"/dev/stderr"[..], format!("/proc/{tid}/fd/2")),
        ]
        .into_iter()
        .find_map(|(prefix, with)| {
            let rest = b.strip_prefix(prefix)?;
            let whole = !prefix.ends_with(b"/");
            (!whole || rest.is_empty()).then(|| [with.as_bytes(), rest].concat())
        });
        match fixed {
            Some(f) => CString::new(f).map_err(|_| libc::EINVAL),
            None => Ok(p),
        }
    }

    pub(super) fn open(tid: u32) -> Result<Self, Errno> {
        let mem = File::open(format!("/proc/{tid}/mem"))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EPERM))?;
        Ok(Self { tid, mem })
    }

    fn bytes(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; len];
        self.mem
            .read_exact_at(&mut buf, addr)
            .map_err(|_| libc::EFAULT)?;
        Ok(buf)
    }

    /// A NUL-terminated string of at most `max` bytes (NUL included) at
    /// `addr`, read a page at a time so that it may end just before an
    /// unmapped page.
    pub(super) fn cstr(&self, addr: u64, max: usize) -> Result<CString, Errno> {
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        const PAGE: u64 = 4096;
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < max {
            let room = (PAGE - at % PAGE) as usize;
            let mut chunk = vec![0u8; room.min(max - out.len())];
            let n = self.mem.read_at(&mut chunk, at).map_err(|_| libc::EFAULT)?;
            if n == 0 {
                return Err(libc::EFAULT);
            }
            if let Some(end) = chunk[..n].iter().position(|b| *b == 0) {
                out.extend_from_slice(&chunk[..end]);
                return CString::new(out).map_err(|_| libc::EINVAL);
            }
            out.extend_from_slice(&chunk[..n]);
            at += n as u64;
        }
        Err(libc::ENAMETOOLONG)
    }

    pub(super) fn open_path(
        &self,
        base: RawFd,
        path: &CString,
        follow: Follow,
    ) -> Result<OwnedFd, Errno> {
        let mut flags = libc::O_PATH | libc::O_CLOEXEC;
        if matches!(follow, Follow::No) {
            flags |= libc::O_NOFOLLOW;
        }
        // SAFETY: a valid NUL-terminated path; the fd is owned below.
        let fd = unsafe { libc::openat(base, path.as_ptr(), flags) };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: just returned by openat, owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The caller's fd `fd` (or its cwd for AT_FDCWD), as an O_PATH fd of
    /// ours: its `/proc/<tid>/fd` magic link reaches the very object.
    pub(super) fn fd(&self, fd: i32) -> Result<OwnedFd, Errno> {
        let link = if fd == libc::AT_FDCWD {
            format!("/proc/{}/cwd", self.tid)
        } else if fd < 0 {
            return Err(libc::EBADF);
        } else {
            format!("/proc/{}/fd/{fd}", self.tid)
        };
        let c = CString::new(link).map_err(|_| libc::EINVAL)?;
        self.open_path(libc::AT_FDCWD, &c, Follow::Yes)
            .map_err(|e| if e == libc::ENOENT { libc::EBADF } else { e })
    }

    /// The object `path` names relative to the caller's `dirfd`.
    pub(super) fn at(
        &self,
        dirfd: i32,
        path: u64,
        _flags: u64,
        follow: Follow,
    ) -> Result<OwnedFd, Errno> {
        let p = self.path(path)?;
        if p.as_bytes().is_empty() {
            return Err(libc::ENOENT);
        }
        if p.as_bytes().starts_with(b"/") {
            return self.open_path(libc::AT_FDCWD, &p, follow);
        }
        let base = self.fd(dirfd)?;
        self.open_path(base.as_raw_fd(), &p, follow)
    }

    /// [`Caller::at`] with `AT_SYMLINK_NOFOLLOW` and `AT_EMPTY_PATH` flags.
    fn at_flags(&self, dirfd: i32, path: u64, flags: u64) -> Result<OwnedFd, Errno> {
        let flags = flags as i32;
        let follow = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
            Follow::No
        } else {
            Follow::Yes
        };
        if flags & libc::AT_EMPTY_PATH != 0 && path != 0 {
            let p = self.cstr(path, MAX_PATH)?;
            if p.as_bytes().is_empty() {
                return self.fd(dirfd);
            }
        }
        self.at(dirfd, path, 0, follow)
    }

    /// `struct timespec[2]` at `addr`, or now for a null pointer.
    fn timespecs(&self, addr: u64) -> Result<Option<[libc::timespec; 2]>, Errno> {
        if addr == 0 {
            return Ok(None);
        }
        let b = self.bytes(addr, 32)?;
        let n = |i: usize| i64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Ok(Some([
            libc::timespec {
                tv_sec: n(0),
                tv_nsec: n(1),
            },
            libc::timespec {
                tv_sec: n(2),
                tv_nsec: n(3),
            },
        ]))
    }

    /// `struct timeval[2]` at `addr` (utimes, futimesat).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn timevals(&self, addr: u64) -> Result<Option<[libc::timespec; 2]>, Errno> {
        let Some([a, m]) = self.timespecs(addr)? else {
            return Ok(None);
        };
        let conv = |t: libc::timespec| {
            if !(0..1_000_000).contains(&t.tv_nsec) {
                return Err(libc::EINVAL);
            }
            Ok(libc::timespec {
                tv_sec: t.tv_sec,
                tv_nsec: t.tv_nsec * 1000,
            })
        };
        Ok(Some([conv(a)?, conv(m)?]))
    }

    /// `struct utimbuf` at `addr` (utime).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn utimbuf(&self, addr: u64) -> Result<Option<[libc::timespec; 2]>, Errno> {
        if addr == 0 {
            return Ok(None);
        }
        let b = self.bytes(addr, 16)?;
        let n = |i: usize| i64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Ok(Some([
            libc::timespec {
                tv_sec: n(0),
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: n(1),
                tv_nsec: 0,
            },
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owners_bits_are_read_from_an_access_acl() {
        let acl = |entries: &[(u16, u16)]| {
            let mut v = 2u32.to_le_bytes().to_vec();
            for (tag, perm) in entries {
                v.extend_from_slice(&tag.to_le_bytes());
                v.extend_from_slice(&perm.to_le_bytes());
                v.extend_from_slice(&u32::MAX.to_le_bytes());
            }
            v
        };
        // user::r-x group::r-x other::---
        assert_eq!(
            acl_owner_mode(&acl(&[(1, 5), (4, 5), (0x20, 0)])),
            Some(0o500)
        );
        assert_eq!(acl_owner_mode(&acl(&[(4, 7), (1, 0), (0x20, 7)])), Some(0));
        assert_eq!(acl_owner_mode(&acl(&[(4, 7)])), None);
        assert_eq!(acl_owner_mode(&[2, 0, 0, 0, 1]), None);
        assert_eq!(acl_owner_mode(&[]), None);
    }

    #[test]
    fn only_objects_beneath_a_root_and_outside_protected_paths_may_change() {
        let g = MetadataGuard {
            roots: vec!["/w".into(), "/t".into()],
            excluded: ["/w/r/.git".into()].into_iter().collect(),
            way_locked: BTreeSet::new(),
            workspace: Some("/w".into()),
        };
        for (p, ok) in [
            ("/w/a", true),
            ("/w", true),
            ("/t/x", true),
            ("/w/r/src", true),
            ("/w/r/.git/hooks/pre-commit", false),
            ("/w/r/.git", false),
            ("/wx", false),
            ("/etc/passwd", false),
        ] {
            assert_eq!(g.allows(Path::new(p)), ok, "{p}");
        }
        assert_eq!(
            strip_deleted(Path::new("/w/a (deleted)")),
            PathBuf::from("/w/a")
        );
    }

    #[test]
    fn the_notify_program_traps_every_listed_call() {
        let p = notify_program();
        // Arch check, load, one jump per call, ALLOW, NOTIFY, and four
        // instructions per flag check.
        assert_eq!(
            p.len(),
            5 + TRAPPED.len() + super::super::entries::TRAPPED.len() + 5 * TRAPPED_WITH_FLAGS.len()
        );
        // Every jump lands inside the program.
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == 0x05 {
                assert!(i + 1 + usize::from(ins.jt.max(ins.jf)) < p.len(), "{i}");
            }
        }
    }
}
