//! The server's own directories under the system temp dir, and the sweep of
//! those a killed server left behind.
//!
//! Owns: [`ScratchDir`] (a private directory, mode 0700, removed with its
//! contents when dropped) and [`sweep_stale`]. Three kinds are made
//! ([`Kind`]): the sandbox's tmp anchor, the directory of kept shell
//! outputs, and each command's private tmp.
//!
//! **Why a lock.** A server stopped by SIGKILL (an OOM kill, a pod killed
//! after its grace period, a crash) runs no destructor, so its directories
//! stay in `/tmp` (or `$TMPDIR`), with whatever its commands wrote there;
//! a node's tmpfs fills over weeks of restarts. Every [`ScratchDir`] holds
//! an exclusive `flock` on its directory for as long as it exists; the
//! kernel drops the lock when the last descriptor closes, which happens
//! however the server ends. At start-up [`sweep_stale`] removes every
//! directory of these kinds, owned by this user, whose lock it can take:
//! nobody holds it, so no live server uses it. A live server's directories
//! are never touched, whatever their age, and no clock or pid is trusted
//! (pids repeat across containers).
//!
//! **Why a rename.** A directory is made under a name the sweep does not
//! match ([`NEW_PREFIX`]), locked, and only then renamed into its kind's
//! name (without replacing anything), so a sweep running in another server
//! at that moment never sees one of its kind unlocked. A server killed in
//! the microseconds between `mkdir` and the rename leaves an empty
//! `.toolsched-new-*` directory; nothing else is left.
//!
//! **Removal** ([`remove_tree`]) is ours and not `std::fs::remove_dir_all`
//! because a command decides what its tmp holds: a tree deep enough to
//! overflow a recursive walk's stack (a breaker built ~18,000 levels by
//! renaming chains into each other, and every later start crashed in the
//! sweep), and directories it made unreadable, which a non-root server
//! could not remove.
//!
//! Not here: what lives inside (`sandbox::zygote` for the anchor,
//! `tools::kept` for outputs, `sandbox::process` for a command's tmp).

use std::ffi::{CStr, CString};
use std::fs::{File, TryLockError};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};

/// Where a directory is made before it is locked and renamed; never swept.
pub const NEW_PREFIX: &str = ".toolsched-new-";

/// The kinds of the server's directories; each name is its prefix and a
/// random suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The sandbox's tmp anchor (`sandbox::zygote`).
    Anchor,
    /// The kept outputs of shell commands (`tools::kept`).
    Output,
    /// One command's private tmp (`sandbox::process`).
    CommandTmp,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Anchor, Kind::Output, Kind::CommandTmp];

    /// The directory name's prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Anchor => "toolsched-anchor-",
            Kind::Output => "toolsched-output-",
            Kind::CommandTmp => "toolsched-tmp-",
        }
    }
}

/// A private directory in the system temp dir (mode 0700), locked while it
/// exists and removed with its contents when dropped (or [`ScratchDir::close`]d).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    /// The directory itself, opened; its `flock` tells a sweep it is in use.
    /// Closed after the removal (fields drop after `Drop::drop`).
    _lock: File,
    removed: bool,
}

/// Attempts at a free name before giving up (each is 6 random characters).
const NAME_ATTEMPTS: usize = 16;

impl ScratchDir {
    /// Makes a directory of `kind` in [`temp_dir`].
    pub fn create(kind: Kind) -> io::Result<Self> {
        Self::create_in(&temp_dir(), kind)
    }

    /// Makes a directory of `kind` in `parent`.
    pub fn create_in(parent: &Path, kind: Kind) -> io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let mut last = None;
        for _ in 0..NAME_ATTEMPTS {
            let new = tempfile::Builder::new()
                .prefix(NEW_PREFIX)
                .permissions(std::fs::Permissions::from_mode(0o700))
                .tempdir_in(parent)?;
            let lock = open_dir(new.path())?;
            lock.lock()?;
            let suffix = new
                .path()
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(NEW_PREFIX))
                .unwrap_or_default()
                .to_owned();
            let path = parent.join(format!("{}{suffix}", kind.prefix()));
            match rename_noreplace(rustix::fs::CWD, new.path(), rustix::fs::CWD, path.as_path()) {
                Ok(()) => {
                    // Ours now under its new name; the guard of the old
                    // name must not remove anything.
                    let _ = new.keep();
                    return Ok(Self {
                        path,
                        _lock: lock,
                        removed: false,
                    });
                }
                // The name is taken (left by an earlier server): another.
                Err(e) if e == rustix::io::Errno::EXIST => last = Some(io::Error::from(e)),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory and everything in it, saying what failed.
    pub fn close(mut self) -> io::Result<()> {
        self.removed = true;
        remove_all(&self.path)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.removed {
            let _ = remove_all(&self.path);
        }
    }
}

/// What a fresh directory looked like, to tell whether a command left it
/// as it found it ([`TmpPool`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pristine {
    dev: u64,
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    size: i64,
    /// Inode flags (`FS_IOC_GETFLAGS`), where the filesystem has them.
    flags: Option<u32>,
    /// Names of its extended attributes (ACLs among them).
    xattrs: Vec<u8>,
}

/// Bytes of extended attribute names read to compare; a directory with more
/// (none that a fresh tmp has) is not kept.
const MAX_XATTR_NAMES_BYTES: usize = 1024;

impl Pristine {
    /// The directory `fd` (at `path`) now; `None` when it cannot be told.
    fn of(fd: &File, path: &Path) -> Option<Self> {
        let st = rustix::fs::fstat(fd).ok()?;
        // Still at its path (not renamed away, nothing mounted over it).
        let at = rustix::fs::statat(rustix::fs::CWD, path, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if (at.st_dev, at.st_ino) != (st.st_dev, st.st_ino) || st.st_nlink != 2 {
            return None;
        }
        let mut names = vec![0u8; MAX_XATTR_NAMES_BYTES];
        let len = rustix::fs::flistxattr(fd, &mut names[..]).ok()?;
        names.truncate(len);
        Some(Self {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size,
            flags: rustix::fs::ioctl_getflags(fd).ok().map(|f| f.bits()),
            xattrs: names,
        })
    }

    /// Whether the directory `fd` holds no entry (its size, unchanged,
    /// bounds the listing).
    fn empty(fd: &File) -> bool {
        let Ok(dup) = fd.try_clone() else {
            return false;
        };
        let Ok(mut entries) = rustix::fs::Dir::read_from(&dup) else {
            return false;
        };
        while let Some(entry) = entries.read() {
            match entry {
                Ok(e) if e.file_name() == c"." || e.file_name() == c".." => {}
                _ => return false,
            }
        }
        true
    }
}

/// Commands' private tmps given back as they were made, for the next
/// command of the same workspace: a fresh one costs a `mkdir`, a lock and a
/// rename on the path of every shell call, and an `rmdir` and the inode's
/// eviction after it (ext4: 13% of the server's CPU per `true`,
/// BENCHMARKS.md "Session 20"). A tmp is taken back only when
/// - its command ran alone: no other command held a tmp at any moment of
///   its life, from the take to [`PooledTmp::command_ended`] (every
///   process of the command reaped; its worker, ours, may still be
///   exiting). A descriptor of the directory, handed over a unix socket to
///   a command running beside it, would reach the next command's files
///   (a breaker read and wrote them, and planted a `.gitconfig` in a pooled
///   tmp); with no other command alive, no such descriptor outlives the
///   command;
/// - nothing of the command is left in or on it: empty, the same inode at
///   the same path, mode, owner, size, inode flags and extended attributes
///   (ACLs) as when made; its times are set to now (a command could leave
///   a few bytes there for the next).
///
/// Anything else is removed as before. Never shared between workspaces
/// (tenants have their own).
#[derive(Debug, Default)]
pub struct TmpPool {
    by_workspace: std::sync::Mutex<std::collections::HashMap<PathBuf, Vec<(ScratchDir, Pristine)>>>,
    /// Commands holding a tmp now.
    running: std::sync::atomic::AtomicUsize,
    /// Tmps handed out so far.
    handed: std::sync::atomic::AtomicU64,
}

/// Tmps kept per workspace, and over all of them.
const POOLED_PER_WORKSPACE: usize = 4;
const POOLED_IN_ALL: usize = 64;

/// A command's private tmp, from a [`TmpPool`] or made for it.
#[derive(Debug)]
pub struct PooledTmp {
    dir: ScratchDir,
    /// How it looked when made; `None`: not to be kept.
    pristine: Option<Pristine>,
    life: Life,
}

/// Where a tmp's command is in the "ran alone" question ([`TmpPool`]).
#[derive(Debug)]
enum Life {
    /// Counted in [`TmpPool::running`] while the command may run.
    Running {
        /// No other command held a tmp when this one was taken.
        alone_at_take: bool,
        /// [`TmpPool::handed`] when this one was taken (it counted).
        handed: u64,
        _counted: Running,
    },
    /// Every process of the command is gone; whether no other command ran
    /// beside it at any moment.
    Ended { alone: bool },
}

/// One command counted in [`TmpPool::running`].
#[derive(Debug)]
struct Running(std::sync::Arc<TmpPool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0
            .running
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl PooledTmp {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Every process of the command is gone (its worker reported it, or
    /// was reaped): it no longer counts as running, and whether it ran
    /// alone is settled now. A later command may take a tmp before this
    /// one is given back (the worker exits behind the call).
    pub fn command_ended(&mut self) {
        if let Life::Running {
            alone_at_take,
            handed,
            _counted: Running(pool),
        } = &self.life
        {
            let alone =
                *alone_at_take && pool.handed.load(std::sync::atomic::Ordering::SeqCst) == *handed;
            // Dropping the `Running` counts the command out.
            self.life = Life::Ended { alone };
        }
    }
}

impl TmpPool {
    /// A clean tmp for a command in `workspace`: one given back, else a
    /// new one.
    pub fn take(self: &std::sync::Arc<Self>, workspace: &Path) -> io::Result<PooledTmp> {
        use std::sync::atomic::Ordering::SeqCst;
        let kept = self.lock().get_mut(workspace).and_then(Vec::pop);
        let (dir, pristine) = match kept {
            Some((dir, pristine)) => (dir, Some(pristine)),
            None => {
                let dir = ScratchDir::create(Kind::CommandTmp)?;
                let pristine = Pristine::of(&dir._lock, &dir.path);
                (dir, pristine)
            }
        };
        let alone = self.running.fetch_add(1, SeqCst) == 0;
        let handed = self.handed.fetch_add(1, SeqCst) + 1;
        Ok(PooledTmp {
            dir,
            pristine,
            life: Life::Running {
                alone_at_take: alone,
                handed,
                _counted: Running(self.clone()),
            },
        })
    }

    /// Takes `tmp` back when the command left it as it was made (call it
    /// once every process of the command is gone); otherwise returns it,
    /// to be removed (on a blocking thread: it may hold anything). The
    /// check is a handful of metadata calls on one local directory whose
    /// listing its unchanged size bounds, made where the caller runs (the
    /// runtime, as [`ScratchDir::create`] is): a blocking-pool hop for it
    /// was 4 of a shell call's 19 context switches.
    pub fn give_back(&self, workspace: &Path, tmp: PooledTmp) -> Option<ScratchDir> {
        let mut tmp = tmp;
        tmp.command_ended();
        let alone = matches!(tmp.life, Life::Ended { alone: true });
        let PooledTmp { dir, pristine, .. } = tmp;
        let Some(pristine) = pristine.filter(|_| alone) else {
            return Some(dir);
        };
        if Pristine::of(&dir._lock, &dir.path).as_ref() != Some(&pristine)
            || !Pristine::empty(&dir._lock)
        {
            return Some(dir);
        }
        let now = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        };
        let times = rustix::fs::Timestamps {
            last_access: now,
            last_modification: now,
        };
        if rustix::fs::futimens(&dir._lock, &times).is_err() {
            return Some(dir);
        }
        let mut map = self.lock();
        let pooled: usize = map.values().map(Vec::len).sum();
        let list = map.entry(workspace.to_path_buf()).or_default();
        if pooled >= POOLED_IN_ALL || list.len() >= POOLED_PER_WORKSPACE {
            if list.is_empty() {
                map.remove(workspace);
            }
            return Some(dir);
        }
        list.push((dir, pristine));
        None
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<PathBuf, Vec<(ScratchDir, Pristine)>>>
    {
        self.by_workspace
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Removes `path` and its contents; already gone counts as removed. The
/// error names the path.
fn remove_all(path: &Path) -> io::Result<()> {
    remove_tree(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Removes the directory `path` with everything beneath it, whatever a
/// command left there: a tree of any depth (std's `remove_dir_all` recurses
/// once per level and holds a descriptor per level, so a tree a command
/// built deep enough by renaming chains into each other overflowed the
/// stack), and directories a command made unreadable or unwritable (`chmod
/// 000`: the server owns them and gives them back `0700`; root ignores modes
/// anyway). Without recursion, in time linear in what the tree holds: the
/// top is emptied into a fresh *stage* directory inside it (files unlinked,
/// subdirectories moved there, on the same filesystem), then every
/// directory of that stage is emptied the same way into the next fresh
/// stage, and so on until a stage stays empty. Each directory is listed
/// once, by one stream (never again from its start: a directory that held
/// many entries keeps its size on ext4, so re-reading it once per level of
/// a deep chain was quadratic — a breaker's 109 MB top with a 15,000-level
/// chain took ~10 minutes), and a handful of descriptors are open at a time
/// (never one per level). Nothing is followed: symlinks are removed as entries, every open
/// is `O_NOFOLLOW`, a mode is changed only through a descriptor of the
/// directory itself. Already gone counts as removed. A listing may miss
/// an entry removed or added while it streams (POSIX leaves it open): a
/// directory then found not empty is emptied again, from what is left.
/// A top without subdirectories (a command's tmp, mostly) needs no stage:
/// its files are unlinked in a first listing and it is removed (a `mkdir`
/// and `rmdir` of two stages were 1% of the server's CPU per shell call).
pub fn remove_tree(path: &Path) -> io::Result<()> {
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        match remove_tree_once(path) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) && attempt < ATTEMPTS => {
                attempt += 1;
            }
            done => return done,
        }
    }
}

fn remove_tree_once(path: &Path) -> io::Result<()> {
    let top = match open_for_removal(rustix::fs::CWD, path) {
        Ok(fd) => fd,
        Err(e) if e == rustix::io::Errno::NOENT => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if unlink_files(&top)? {
        // No subdirectory (a command's tmp usually holds none): no stage.
        // Something made meanwhile (not empty) goes the long way.
        match rustix::fs::unlinkat(rustix::fs::CWD, path, AtFlags::REMOVEDIR) {
            Err(e) if e == rustix::io::Errno::NOTEMPTY => {}
            Err(e) if e != rustix::io::Errno::NOENT => return Err(e.into()),
            _ => return Ok(()),
        }
    }
    let mut names = 0u64;
    let mut stage = Stage::new(&top, &mut names)?;
    empty_into(&top, Some(&stage.name), &stage.fd, &mut names)?;
    loop {
        let next = Stage::new(&top, &mut names)?;
        let mut moved_on = false;
        let mut entries = rustix::fs::Dir::read_from(&stage.fd)?;
        while let Some(entry) = entries.read() {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            moved_on = true;
            if !is_directory(&stage.fd, &entry) {
                unlink(&stage.fd, name, AtFlags::empty())?;
                continue;
            }
            let dir = match open_for_removal(&stage.fd, name) {
                Ok(fd) => fd,
                Err(e) if e == rustix::io::Errno::NOENT => continue,
                Err(e) => return Err(e.into()),
            };
            empty_into(&dir, None, &next.fd, &mut names)?;
            drop(dir);
            unlink(&stage.fd, name, AtFlags::REMOVEDIR)?;
        }
        drop(entries);
        stage.remove(&top)?;
        stage = next;
        if !moved_on {
            // Nothing was moved into the stage made last: done.
            stage.remove(&top)?;
            break;
        }
    }
    drop(top);
    match rustix::fs::unlinkat(rustix::fs::CWD, path, AtFlags::REMOVEDIR) {
        Err(e) if e != rustix::io::Errno::NOENT => Err(e.into()),
        _ => Ok(()),
    }
}

/// A directory made inside the tree being removed, receiving the
/// subdirectories of the directories emptied in one round.
struct Stage {
    name: CString,
    fd: OwnedFd,
}

impl Stage {
    /// A fresh stage under `top`, under a name nothing there has.
    fn new(top: &OwnedFd, names: &mut u64) -> io::Result<Self> {
        loop {
            *names += 1;
            let name = CString::new(format!(".toolsched-stage-{names}"))
                .map_err(|e| io::Error::other(e.to_string()))?;
            match rustix::fs::mkdirat(top, name.as_c_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::EXIST => continue,
                Err(e) => return Err(e.into()),
            }
            let fd = open_for_removal(top, name.as_c_str())?;
            return Ok(Self { name, fd });
        }
    }

    /// Removes the (emptied) stage.
    fn remove(self, top: &OwnedFd) -> io::Result<()> {
        drop(self.fd);
        unlink(top, &self.name, AtFlags::REMOVEDIR)
    }
}

/// Unlinks the files (and symlinks) of `dir`, in one stream of its
/// entries; whether it held no directory.
fn unlink_files(dir: &OwnedFd) -> io::Result<bool> {
    let mut flat = true;
    let mut entries = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if is_directory(dir, &entry) {
            flat = false;
        } else {
            unlink(dir, name, AtFlags::empty())?;
        }
    }
    Ok(flat)
}

/// Empties `dir` in one stream of its entries: files (and symlinks)
/// unlinked, subdirectories moved into `into` under fresh names; `skip` is
/// the stage itself when `dir` is the top.
fn empty_into(
    dir: &OwnedFd,
    skip: Option<&CStr>,
    into: &OwnedFd,
    names: &mut u64,
) -> io::Result<()> {
    let mut entries = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." || Some(name) == skip {
            continue;
        }
        if !is_directory(dir, &entry) {
            unlink(dir, name, AtFlags::empty())?;
            continue;
        }
        // A directory moved to another parent must be writable itself
        // (its `..` changes): given `0700` when not.
        let mut fixed = false;
        loop {
            *names += 1;
            let to = format!("d{names}");
            match rename_noreplace(dir, name, into, to.as_str()) {
                Ok(()) => break,
                Err(e) if e == rustix::io::Errno::EXIST => continue,
                Err(e) if e == rustix::io::Errno::NOENT => break,
                Err(e) if e == rustix::io::Errno::ACCESS && !fixed => {
                    drop(open_for_removal(dir, name)?);
                    fixed = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Whether `entry` of `dir` is a directory (not following a symlink).
fn is_directory(dir: &OwnedFd, entry: &rustix::fs::DirEntry) -> bool {
    match entry.file_type() {
        FileType::Directory => true,
        FileType::Unknown => rustix::fs::statat(dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
        _ => false,
    }
}

/// `renameat2(..., RENAME_NOREPLACE)`; where the filesystem does not offer
/// the flag (`EINVAL`: some network and FUSE filesystems), a plain rename
/// after checking that `to` does not exist (`EEXIST` when it does). Only
/// this server makes names under these prefixes, so the check and the
/// rename do not race with anyone else's rename to the same name.
fn rename_noreplace<Fd: AsFd, P: rustix::path::Arg + Copy, Q: rustix::path::Arg + Copy>(
    from_dir: Fd,
    from: P,
    to_dir: Fd,
    to: Q,
) -> rustix::io::Result<()> {
    match rustix::fs::renameat_with(&from_dir, from, &to_dir, to, RenameFlags::NOREPLACE) {
        Err(e) if e == rustix::io::Errno::INVAL => {
            match rustix::fs::statat(&to_dir, to, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(_) => Err(rustix::io::Errno::EXIST),
                Err(e) if e == rustix::io::Errno::NOENT => {
                    rustix::fs::renameat(&from_dir, from, &to_dir, to)
                }
                Err(e) => Err(e),
            }
        }
        other => other,
    }
}

/// `unlinkat`, where already gone is done.
fn unlink(dir: &OwnedFd, name: &CStr, flags: AtFlags) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, flags) {
        Err(e) if e != rustix::io::Errno::NOENT => Err(e.into()),
        _ => Ok(()),
    }
}

/// Opens the directory `name` in `at` (never through a symlink) to read
/// and empty it, giving it mode `0700` first when it is not readable and
/// after when it is not writable and searchable.
fn open_for_removal<P: rustix::path::Arg + Copy, Fd: AsFd>(
    at: Fd,
    name: P,
) -> rustix::io::Result<OwnedFd> {
    const NEEDED: u32 = 0o700;
    let fd = match rustix::fs::openat(&at, name, DIR_READ, Mode::empty()) {
        Err(e) if e == rustix::io::Errno::ACCESS => {
            // Unreadable: its mode changed through a descriptor of the
            // directory itself (an `O_PATH` one, reached by its
            // /proc/self/fd link), never by a name that could be swapped.
            let path_only = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let handle = rustix::fs::openat(&at, name, path_only, Mode::empty())?;
            rustix::fs::chmod(
                format!("/proc/self/fd/{}", handle.as_raw_fd()).as_str(),
                Mode::from_raw_mode(NEEDED),
            )?;
            rustix::fs::openat(&at, name, DIR_READ, Mode::empty())?
        }
        other => other?,
    };
    if rustix::fs::fstat(&fd)?.st_mode & NEEDED != NEEDED {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(NEEDED))?;
    }
    Ok(fd)
}

/// How a directory is opened to be read, emptied or locked: the directory
/// itself, never through a symlink.
const DIR_READ: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opens the directory `path` itself for its lock.
fn open_dir(path: &Path) -> io::Result<File> {
    Ok(File::from(rustix::fs::open(path, DIR_READ, Mode::empty())?))
}

/// What a sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Directories removed: no live server held their lock.
    pub removed: usize,
    /// Directories in use by a live server, left alone.
    pub in_use: usize,
    /// Stale directories that could not be removed (each logged).
    pub failed: usize,
}

/// Removes the directories of every [`Kind`] in [`temp_dir`] that this
/// user owns and no live process holds locked (see the module's
/// documentation). Symlinks and other users' entries are left alone.
pub fn sweep_stale() -> Swept {
    sweep_stale_in(&temp_dir())
}

/// The system temp dir, absolute: `$TMPDIR` (a relative one taken from the
/// working directory at start-up, an empty one as the working directory),
/// else `/tmp`. Paths made in it are handed to workers that run elsewhere.
pub fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir();
    if dir.as_os_str().is_empty() {
        return std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/tmp"));
    }
    std::path::absolute(&dir).unwrap_or(dir)
}

/// [`sweep_stale`] in `parent`.
pub fn sweep_stale_in(parent: &Path) -> Swept {
    let mut swept = Swept::default();
    let Ok(entries) = std::fs::read_dir(parent) else {
        return swept;
    };
    let me = rustix::process::geteuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !Kind::ALL.iter().any(|k| name.starts_with(k.prefix())) {
            continue;
        }
        let path = entry.path();
        // Not a directory (a symlink included), or another user's: not ours.
        let ours =
            rustix::fs::statat(rustix::fs::CWD, &path, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
                FileType::from_raw_mode(st.st_mode) == FileType::Directory && st.st_uid == me
            });
        if !ours {
            continue;
        }
        // Opened as removal opens (a command may have left its tmp `chmod
        // 000`, which a non-root server could not even open for the lock).
        let dir = match open_for_removal(rustix::fs::CWD, path.as_path()) {
            Ok(fd) => File::from(fd),
            Err(e) => {
                swept.failed += 1;
                tracing::warn!(path = %path.display(), error = %e, "could not open a directory to see whether it is stale");
                continue;
            }
        };
        match dir.try_lock() {
            Ok(()) => match remove_all(&path) {
                Ok(()) => swept.removed += 1,
                Err(e) => {
                    swept.failed += 1;
                    tracing::warn!(path = %path.display(), error = %e, "could not remove a stale directory of a server that is gone");
                }
            },
            Err(TryLockError::WouldBlock) => swept.in_use += 1,
            Err(TryLockError::Error(e)) => {
                swept.failed += 1;
                tracing::warn!(path = %path.display(), error = %e, "could not lock a directory to see whether it is stale");
            }
        }
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tmp the command left as it was made is the next command's (of the
    /// same workspace only); one it changed in any way is not kept: a file
    /// or directory left in it, its mode, an extended attribute (an ACL
    /// is one), moved from its path, or grown.
    /// A tmp is kept only when its command ran alone: one taken while
    /// another was held, or one held while another was taken, could have
    /// been handed to the other command (a descriptor over a unix socket)
    /// and is removed. A kept one's times are set to now.
    #[test]
    fn a_tmp_is_kept_only_when_its_command_ran_alone() {
        let pool = std::sync::Arc::new(TmpPool::default());
        let ws = Path::new("/ws");
        // Taken while another is held: neither is kept.
        let first = pool.take(ws).unwrap();
        let second = pool.take(ws).unwrap();
        let back = pool.give_back(ws, second).expect("the second is not kept");
        back.close().unwrap();
        let back = pool.give_back(ws, first).expect("the first is not kept");
        back.close().unwrap();
        // Held while another was taken and given back: not kept.
        let long = pool.take(ws).unwrap();
        let short = pool.take(ws).unwrap();
        pool.give_back(ws, short).unwrap().close().unwrap();
        pool.give_back(ws, long).unwrap().close().unwrap();
        // A command that ended (its worker still exiting) before the next
        // took a tmp ran alone, and so does the next: both kept.
        let mut before = pool.take(ws).unwrap();
        before.command_ended();
        let next = pool.take(ws).unwrap();
        assert!(pool.give_back(ws, before).is_none(), "the ended one kept");
        assert!(pool.give_back(ws, next).is_none(), "the next one kept");
        // Alone: kept, with its times set to now.
        let alone = pool.take(ws).unwrap();
        let path = alone.path().to_path_buf();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_234_567_890);
        let f = File::open(&path).unwrap();
        f.set_times(
            std::fs::FileTimes::new()
                .set_accessed(old)
                .set_modified(old),
        )
        .unwrap();
        assert!(pool.give_back(ws, alone).is_none(), "kept");
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert!(modified > old, "{modified:?}");
        assert_eq!(pool.take(ws).unwrap().path(), path);
    }

    #[test]
    fn a_tmp_is_kept_only_as_it_was_made() {
        use std::os::unix::fs::PermissionsExt;
        let pool = std::sync::Arc::new(TmpPool::default());
        let ws = Path::new("/ws/a");
        let first = pool.take(ws).unwrap();
        let path = first.path().to_path_buf();
        assert!(pool.give_back(ws, first).is_none(), "kept");
        assert!(pool.take(Path::new("/ws/b")).unwrap().path() != path);
        let again = pool.take(ws).unwrap();
        assert_eq!(again.path(), path);
        // A file made and removed leaves it as it was.
        std::fs::write(path.join("f"), "x").unwrap();
        std::fs::remove_file(path.join("f")).unwrap();
        assert!(pool.give_back(ws, again).is_none());
        type Change = fn(&Path);
        let changes: [(&str, Change); 6] = [
            ("a file", |p| std::fs::write(p.join("f"), "x").unwrap()),
            ("a directory", |p| std::fs::create_dir(p.join("d")).unwrap()),
            ("its mode", |p| {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap()
            }),
            ("an xattr", |p| {
                rustix::fs::setxattr(p, "user.x", b"1", rustix::fs::XattrFlags::empty()).unwrap()
            }),
            ("moved", |p| {
                let to = p.with_extension("moved");
                std::fs::rename(p, &to).unwrap();
                std::fs::create_dir(p).unwrap();
                std::fs::remove_dir(&to).unwrap();
            }),
            ("grown", |p| {
                for i in 0..400 {
                    std::fs::write(p.join(format!("{i:0>60}")), "").unwrap();
                }
                for i in 0..400 {
                    std::fs::remove_file(p.join(format!("{i:0>60}"))).unwrap();
                }
            }),
        ];
        for (what, change) in changes {
            let tmp = pool.take(ws).unwrap();
            let path = tmp.path().to_path_buf();
            change(&path);
            let back = pool.give_back(ws, tmp);
            assert!(back.is_some(), "{what}: kept");
            back.unwrap().close().unwrap();
            assert!(!path.exists(), "{what}: not removed");
            assert!(pool.take(ws).unwrap().path() != path, "{what}: taken again");
        }
    }

    #[test]
    fn a_held_directory_is_kept_and_a_released_one_swept() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let live = ScratchDir::create_in(parent.path(), Kind::Anchor).unwrap();
        std::fs::write(live.path().join("f"), b"x").unwrap();
        // Left behind as by a SIGKILL: the directory stays, its lock goes.
        let dead = ScratchDir::create_in(parent.path(), Kind::CommandTmp).unwrap();
        let dead_path = dead.path().to_path_buf();
        std::fs::create_dir(dead_path.join("sub")).unwrap();
        std::fs::write(dead_path.join("sub/f"), b"x").unwrap();
        let mut dead = dead;
        dead.removed = true;
        drop(dead);
        // Its command left it unreadable (a non-root sweep must still
        // open it for the lock).
        std::fs::set_permissions(&dead_path, std::fs::Permissions::from_mode(0o000)).unwrap();
        // An older server's directory, never locked.
        std::fs::create_dir(parent.path().join("toolsched-output-old")).unwrap();
        // Not ours: other names, a symlink to a directory, a plain file.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), parent.path().join("toolsched-tmp-link"))
            .unwrap();
        std::fs::write(parent.path().join("toolsched-anchor-file"), b"x").unwrap();
        std::fs::create_dir(parent.path().join("other-dir")).unwrap();

        let swept = sweep_stale_in(parent.path());

        assert_eq!(
            swept,
            Swept {
                removed: 2,
                in_use: 1,
                failed: 0
            }
        );
        assert!(live.path().join("f").exists());
        assert!(!dead_path.exists());
        assert!(!parent.path().join("toolsched-output-old").exists());
        assert!(outside.path().join("keep").exists());
        assert!(parent.path().join("toolsched-tmp-link").exists());
        assert!(parent.path().join("toolsched-anchor-file").exists());
        assert!(parent.path().join("other-dir").exists());
        let mut left: Vec<_> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let live_name = live.path().file_name().unwrap().to_str().unwrap();
        let mut want = [
            live_name,
            "other-dir",
            "toolsched-anchor-file",
            "toolsched-tmp-link",
        ];
        want.sort();
        assert_eq!(left, want);
    }

    /// A chain of `depth` directories named `d` under `top`, made through
    /// descriptors (its path is far longer than `PATH_MAX`).
    fn chain(top: &Path, depth: usize) {
        let mut fd =
            rustix::fs::open(top, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o700)).unwrap();
            fd = rustix::fs::openat(&fd, "d", OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())
                .unwrap();
        }
        rustix::fs::openat(
            &fd,
            "leaf",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
    }

    #[test]
    fn a_tree_of_any_depth_is_removed_without_recursion() {
        let parent = tempfile::tempdir().unwrap();
        let top = parent.path().join("toolsched-tmp-deep");
        std::fs::create_dir(&top).unwrap();
        // Deeper than the descriptors a per-level walk may hold, on a
        // stack far too small for one frame per level.
        chain(&top, 5_000);
        let at = top.clone();
        std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || remove_tree(&at))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert!(!top.exists());
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }

    #[test]
    fn unreadable_and_unwritable_directories_symlinks_and_many_entries_are_removed() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("kept"), b"x").unwrap();
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let top = parent.path().join("t");
        std::fs::create_dir_all(top.join("a/b/c")).unwrap();
        std::fs::write(top.join("a/b/c/f"), b"x").unwrap();
        std::fs::write(top.join("a/b/g"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), top.join("a/b/link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("kept"), top.join("a/flink")).unwrap();
        // The names removal gives its own directories, taken already; and
        // a wide tree (every directory of a round in one stage).
        std::fs::create_dir_all(top.join(".toolsched-stage-1/x")).unwrap();
        std::fs::create_dir_all(top.join(".toolsched-stage-2")).unwrap();
        std::fs::create_dir_all(top.join("d1/d2")).unwrap();
        for i in 0..50 {
            for j in 0..20 {
                std::fs::create_dir_all(top.join(format!("wide/{i}/{j}/k"))).unwrap();
            }
        }
        // Many entries in one directory.
        std::fs::create_dir(top.join("many")).unwrap();
        for i in 0..5000 {
            std::fs::write(top.join(format!("many/{i}")), b"").unwrap();
        }
        // Left by a command: no mode at all, read-only, and the top too.
        for (dir, mode) in [
            ("a/b/c", 0o000),
            ("a/b", 0o500),
            ("a", 0o000),
            ("many", 0o500),
        ] {
            std::fs::set_permissions(top.join(dir), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o500)).unwrap();

        remove_tree(&top).unwrap();

        assert!(!top.exists());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("kept")).unwrap(),
            "x"
        );
        let mode = std::fs::metadata(outside.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        // Gone already: done.
        remove_tree(&top).unwrap();
    }

    #[test]
    fn a_top_without_subdirectories_is_removed_without_a_stage() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(outside.path().join("dir")).unwrap();
        std::fs::write(outside.path().join("kept"), b"x").unwrap();
        for mode in [0o700, 0o500, 0o000] {
            let top = parent.path().join(format!("t{mode:o}"));
            std::fs::create_dir(&top).unwrap();
            std::fs::write(top.join("f"), b"x").unwrap();
            std::os::unix::fs::symlink(outside.path().join("kept"), top.join("flink")).unwrap();
            std::os::unix::fs::symlink(outside.path().join("dir"), top.join("dlink")).unwrap();
            rustix::fs::mknodat(
                rustix::fs::CWD,
                top.join("fifo").as_path(),
                FileType::Fifo,
                Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap();
            std::fs::set_permissions(&top, std::fs::Permissions::from_mode(mode)).unwrap();
            remove_tree(&top).unwrap();
            assert!(!top.exists(), "mode {mode:o}");
        }
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_to_string(outside.path().join("kept")).unwrap(),
            "x"
        );
        assert!(outside.path().join("dir").is_dir());
    }

    #[test]
    fn a_directory_is_made_private_under_its_kind_and_removed_with_its_contents() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let dir = ScratchDir::create_in(parent.path(), Kind::Output).unwrap();
        let name = dir.path().file_name().unwrap().to_str().unwrap().to_owned();
        assert!(name.starts_with("toolsched-output-"), "{name}");
        assert_eq!(name.len(), "toolsched-output-".len() + 6);
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/c"), b"x").unwrap();
        // Nothing under the temporary name is left.
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
        let path = dir.path().to_path_buf();
        dir.close().unwrap();
        assert!(!path.exists());
        let dropped = ScratchDir::create_in(parent.path(), Kind::Anchor).unwrap();
        let path = dropped.path().to_path_buf();
        drop(dropped);
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }
}
