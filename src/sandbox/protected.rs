//! The protected paths of a workspace (every `.git` at any depth), found by
//! the server and kept across commands, so that a confined command does not
//! wait for a walk of the whole workspace before it starts.
//!
//! **What is kept.** [`ProtectedPaths`] remembers, for every directory of the
//! workspace it walked, that directory's listing (its subdirectories and
//! whether it holds a `.git`) together with its identity and change time
//! (device, inode, `ctime` in nanoseconds). Before every confined command
//! the server walks the workspace again in the same order, but a directory
//! whose identity and `ctime` are unchanged is not read: one `statx` stands
//! for the `open` + `getdents` + `close` and the per-entry work. A 50,000-file
//! repository in 500 directories costs 500 `statx` instead of reading 50,500
//! entries.
//!
//! **Why this is fail-closed.** The kernel sets a directory's `ctime` to the
//! current time whenever an entry is created, removed or renamed in it (and
//! on every attribute change); no system call sets it to a chosen value
//! (`utimensat` sets `mtime`, which is why `mtime` is not used: `touch -d`
//! would hide a change). So a `.git` created anywhere, by a command, by the
//! server's own tools or by anyone outside, changes its parent's `ctime` and
//! that directory is read again. Three things could make an unchanged-looking
//! `ctime` lie, and each is closed here:
//! - *Coarse timestamps.* A change in the same clock tick (or, on a
//!   filesystem with 1-second timestamps, the same second) as the listing
//!   leaves the `ctime` equal. A listing is kept only when the directory's
//!   `ctime` is at least [`RACY_MARGIN`] older than the moment the walk
//!   started ("racy git" rule); a recently changed directory is simply read
//!   again on every walk until it settles.
//! - *The wall clock stepped back.* Timestamps could then repeat. The walk
//!   compares wall-clock minus monotonic-clock time with the previous walk's;
//!   when it went down, every kept listing is dropped.
//! - *Filesystems whose `ctime` is not the kernel's* (network and FUSE
//!   filesystems, where another host or a daemon supplies the attributes).
//!   Listings are kept only on the local filesystems listed in
//!   [`TRUSTED_FILESYSTEMS`]; elsewhere every directory is read every time,
//!   as before this cache.
//!
//! A directory that cannot be listed is itself protected, and so is every
//! directory the walk did not reach within [`MAX_SCAN_ENTRIES`] entries.
//!
//! **Symlinks inside a repository.** A `.git` directory is read (listed,
//! kept, watched like any other) for its symlinks only, and so is its
//! `hooks`: a read-only mount does not stop a path at a symlink in it, so
//! what they lead to is protected too ([`Linked::inner_link`]), followed
//! again on every call as `.git` links are. A link that leads nowhere
//! protects the entry where it stops ([`Reached::Stopped`]).
//!
//! **Watches: no walk while nothing changed.** A walk of a 513-directory
//! workspace is still 513 `statx` (~0.75 ms, on the path of every confined
//! command). So every directory a walk reads is first given an inotify
//! watch, through the very descriptor it is then listed from (a change
//! after that is reported), for entries created, removed or renamed in it
//! and for the directory itself removed or moved; and the server's mount
//! table is polled (`POLLPRI` on `/proc/self/mountinfo`), because a
//! filesystem mounted over a directory changes no watched listing. When
//! the last walk reached only watched directories (none unreadable, none
//! past the budget, none on a filesystem whose changes made elsewhere are
//! not reported: overlayfs, and the untrusted ones), and since then no
//! watch reported anything (a queue overflow counts), no mount changed and
//! the wall clock did not step back, its result is the answer: no walk.
//! Gitlink files and `.git` symlinks are followed again on every call
//! (a file's writes are not watched), and the root's path must still name
//! the directory walked (a directory above it moved reports nothing to the
//! watches). Anything
//! reported makes the next call walk as above, with the `ctime` checks,
//! which stay the proof of what changed (only changed directories are
//! read); the watches only prove that nothing did. Watches are not shared
//! between roots and are bounded over the process ([`MAX_WATCHED_DIRS`],
//! a quarter of the user's limit, [`MAX_WATCHED_ROOTS`]); a walk they
//! cannot prove gives them back for a while ([`Watching::Off`]), and
//! without inotify or procfs every call walks.
//!
//! **Why not re-walk after writes.** Re-walking after every command that
//! could write costs the full walk again after every shell command (any of
//! them may write), which is the cost this removes; and it would miss a
//! `.git` made outside the server (`git clone` by the user), which the
//! walk catches.
//!
//! What stays as before: a `.git` made by a command that runs *concurrently*
//! with another command's start (another session) may be missed by that
//! start, exactly as with a walk in the worker; every later command sees it.

#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Directory entries a walk reads (or counts from kept listings) before it
/// gives up and protects the directories it did not reach (fail closed): it
/// bounds the time a pathological workspace can cost.
pub const MAX_SCAN_ENTRIES: usize = 200_000;

/// A listing is kept only when its directory's `ctime` is this much older
/// than the start of the walk: 1 s, the coarsest timestamp of the trusted
/// filesystems (ext2/3, ext4 with 128-byte inodes), plus a generous second
/// for the coarse clock the kernel stamps files with.
pub const RACY_MARGIN: Duration = Duration::from_secs(2);

/// Drift between the wall clock and the monotonic clock ignored when
/// looking for a step back: the two are read a few nanoseconds apart.
const CLOCK_STEP_TOLERANCE: Duration = Duration::from_millis(1);

/// Local filesystems (`statfs` magic numbers from `linux/magic.h`) whose
/// directory `ctime` the kernel itself maintains on every entry change.
pub const TRUSTED_FILESYSTEMS: &[(i64, &str)] = &[
    (0xEF53, "ext2/ext3/ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (OVERLAYFS_MAGIC, "overlayfs"),
    (0xF2F5_2010, "f2fs"),
    (0x2FC1_2FC1, "zfs"),
    (0xCA45_1A4E, "bcachefs"),
];

/// The protected paths of one workspace root, kept between commands.
/// Shared by every command on that root (behind a mutex: walks run one at a
/// time, a later one reuses what the earlier one read).
#[derive(Debug)]
pub struct ProtectedPaths {
    root: PathBuf,
    listings: Mutex<Listings>,
}

impl ProtectedPaths {
    /// A cache for `root` (canonical). Nothing is read until [`Self::current`].
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            listings: Mutex::new(Listings::default()),
        }
    }

    /// The workspace root this cache is for.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// [`Self::current`] when it needs no walk and no file read (the
    /// watches report nothing, no walk is running, no `.git` link must be
    /// followed again): a few non-blocking system calls, fit for an async task.
    /// `None` otherwise.
    pub fn current_if_unchanged(&self) -> Option<Vec<PathBuf>> {
        self.if_unchanged(|_, found| found)
    }

    /// [`Self::leads_to`] when it needs no walk and no file read, as
    /// [`Self::current_if_unchanged`]; `None` otherwise.
    pub fn leads_to_if_unchanged(&self, path: &Path) -> Option<bool> {
        self.if_unchanged(|l, _| l.targets.iter().any(|t| path.starts_with(t)))
    }

    fn if_unchanged<T>(&self, then: impl FnOnce(&Listings, Vec<PathBuf>) -> T) -> Option<T> {
        let mut listings = self.listings.try_lock().ok()?;
        if listings
            .armed()
            .is_none_or(|a| !a.links.is_empty() || !a.inner.is_empty())
        {
            return None;
        }
        let found = listings.unchanged_since_last_walk(&self.root)?;
        Some(then(&listings, found))
    }

    /// Every `.git` (directory or file) beneath the root now, plus,
    /// fail-closed, every directory that could not be listed and every
    /// directory not reached within [`MAX_SCAN_ENTRIES`]. Blocking: one
    /// `statx` per directory whose listing is kept, a full read of the
    /// others; call it off the async runtime.
    pub fn current(&self) -> Vec<PathBuf> {
        self.current_with(|_| ())
    }

    /// Whether `path` (canonical) is at or beneath where the workspace's
    /// `.git` links and the symlinks inside its repositories lead, in the
    /// workspace (outside any `.git`): the repositories they name, their
    /// common dirs, the hooks and config they link to, and the entries
    /// where a link stops (see [`Reached::Stopped`]). For the file tools'
    /// policy, which asks for a write there as for one inside a `.git`.
    /// Blocking as [`Self::current`].
    pub fn leads_to(&self, path: &Path) -> bool {
        let mut hit = false;
        self.current_with(|l| hit = l.targets.iter().any(|t| path.starts_with(t)));
        hit
    }

    /// [`Self::current`], and `then` with what it kept.
    fn current_with(&self, then: impl FnOnce(&Listings)) -> Vec<PathBuf> {
        let mut listings = match self.listings.lock() {
            Ok(l) => l,
            Err(poisoned) => {
                // A walk panicked half-way: start from nothing.
                let mut l = poisoned.into_inner();
                *l = Listings::default();
                l
            }
        };
        let started = Instant::now();
        if let Some(found) = listings.unchanged_since_last_walk(&self.root) {
            then(&listings);
            return found;
        }
        let found = listings.walk(&self.root);
        tracing::debug!(
            root = %self.root.display(),
            protected = found.len(),
            kept = listings.dirs.len(),
            reread = listings.reread,
            watched = listings.armed().is_some(),
            micros = started.elapsed().as_micros() as u64,
            "protected paths"
        );
        then(&listings);
        found
    }
}

/// Every protected path beneath `root` as [`ProtectedPaths::current`] finds
/// it, without keeping anything (the worker's fallback when the server
/// passed no set).
pub fn scan_once(root: &Path) -> Vec<PathBuf> {
    Listings {
        watching: Watching::Never,
        ..Listings::default()
    }
    .walk(root)
}

/// The name of the entries the walk protects, at any depth.
pub const PROTECTED_NAME: &str = ".git";

/// Whether `path` (relative to a workspace root, symlinks already resolved)
/// is a protected path or lies beneath one: whether one of its components is
/// [`PROTECTED_NAME`]. Compared ASCII-case-insensitively: on a
/// case-insensitive filesystem (or an ext4 `casefold` directory) `.GIT` is
/// the same entry as `.git`. For callers that check a single path (the file
/// tools' policy) rather than walk the workspace.
pub fn is_protected_path(path: &Path) -> bool {
    path.components().any(|c| match c {
        std::path::Component::Normal(name) => name
            .to_str()
            .is_some_and(|n| n.eq_ignore_ascii_case(PROTECTED_NAME)),
        _ => false,
    })
}

/// Whether `target` (canonical, beneath the workspace `root`) lies inside a
/// git repository's own directory, looked at as git does (`HEAD`, and
/// `objects` and `refs` or a `commondir` file) in each directory from its
/// parent up to the root: a repository a `.git` symlink or gitlink leads
/// to, a bare one, a linked worktree's git dir. For the file tools' policy:
/// a path through such a link has no `.git` component once resolved
/// (`p/.git/config` is `.repo/projects/p.git/config`), and a breaker wrote
/// `core.fsmonitor` there without a prompt.
pub fn inside_git_dir(root: &Path, target: &Path) -> bool {
    let is = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let dir = |p: &Path| p.is_dir();
    target
        .ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(root))
        .any(|d| {
            is(&d.join("HEAD"))
                && ((dir(&d.join("objects")) && dir(&d.join("refs"))) || is(&d.join("commondir")))
        })
}

/// One [`ProtectedPaths`] per workspace root, shared by the sandboxes of
/// every level (see [`super::Sandbox::at_level`]).
#[derive(Debug, Default)]
pub struct ProtectedRegistry {
    by_root: Mutex<HashMap<PathBuf, Arc<ProtectedPaths>>>,
}

/// Workspace roots whose protected paths are kept between commands; at the
/// cap, the caches no running command holds are dropped (a later command
/// walks its workspace again). With named workspaces, one per workspace
/// that ran a command.
pub const MAX_PROTECTED_ROOTS: usize = 4096;

impl ProtectedRegistry {
    /// The process's registry: every sandbox's, and the file tools' (see
    /// [`ProtectedPaths::leads_to`]), so that a workspace is walked
    /// and watched once.
    pub fn shared() -> Arc<ProtectedRegistry> {
        static SHARED: std::sync::OnceLock<Arc<ProtectedRegistry>> = std::sync::OnceLock::new();
        SHARED.get_or_init(Arc::default).clone()
    }

    /// The cache of `root`, made on first use.
    pub fn get(&self, root: &Path) -> Arc<ProtectedPaths> {
        let mut map = self
            .by_root
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= MAX_PROTECTED_ROOTS && !map.contains_key(root) {
            map.retain(|_, cache| Arc::strong_count(cache) > 1);
        }
        map.entry(root.to_path_buf())
            .or_insert_with(|| Arc::new(ProtectedPaths::new(root)))
            .clone()
    }
}

/// What a walk keeps: settled listings by path and the clock offset of the
/// last walk. Keyed by the path's bytes with a fast hash: `Path`'s own hash
/// and equality go component by component, and a walk looks up every
/// directory of the workspace (with SipHash, 1.4% of all CPU per confined
/// `true` in a 513-directory workspace: BENCHMARKS.md "Session 17"). A
/// directory's path is allocated once, when its parent is read, and shared
/// by the parent's listing, the walk's queue and this map's key; a kept
/// listing stays in place and is marked with the walk that reached it
/// (a walk of a 513-directory workspace made 513 paths and a new map:
/// "Session 18").
#[derive(Debug, Default)]
struct Listings {
    dirs: HashMap<Arc<OsStr>, Listing, foldhash::fast::RandomState>,
    clock: ClockWatch,
    /// Directories the last walk read (not taken from a kept listing).
    reread: usize,
    /// Walks so far: the mark of the current one.
    walks: u64,
    /// The inotify watches on the walked directories.
    watching: Watching,
    /// Calls answered from [`Watcher::armed`], without a walk.
    answered_unchanged: u64,
    /// The walk's budget in place of [`MAX_SCAN_ENTRIES`] (tests).
    max_entries: Option<usize>,
    /// Where the links of the last result led, in the workspace.
    targets: Vec<PathBuf>,
}

/// A walk's result that needs no walk while no watched directory reports a
/// change: the protected paths except what `.git` links lead to, which
/// may be named inside a file (its writes are not watched) or reached
/// outside the watched directories, and are followed again on every call.
#[derive(Debug)]
struct Armed {
    /// The root's device and inode when it was walked.
    root: (u64, u64),
    found: Vec<PathBuf>,
    /// The `.git` gitlink files and symlinks among `found`, followed
    /// again on every call (see [`push_git`]).
    links: Vec<PathBuf>,
    /// The symlinks inside the `.git` directories found, followed again on
    /// every call (see [`Linked::inner_link`]).
    inner: Vec<InnerLink>,
    /// Where the links led, when `links` and `inner` are empty because the
    /// watches prove it (see [`ProtectedPaths::leads_to`]).
    targets: Vec<PathBuf>,
}

/// A symlink in a `.git` directory (`top_level`) or in its `hooks`.
#[derive(Debug, Clone)]
struct InnerLink {
    path: PathBuf,
    top_level: bool,
}

/// What a walked directory is to the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A workspace directory: its subdirectories are walked and its `.git`
    /// found.
    Workspace,
    /// A `.git` directory: its symlinks are noted and its `hooks`
    /// directory walked, nothing else (see [`Linked::inner_link`]).
    GitDir,
    /// A `.git` directory's `hooks`: its symlinks are noted.
    Hooks,
}

impl Kind {
    /// What the subdirectories of a directory of this kind are.
    fn of_subdirs(self) -> Kind {
        match self {
            Kind::Workspace => Kind::Workspace,
            Kind::GitDir | Kind::Hooks => Kind::Hooks,
        }
    }
}

/// Whether the walked directories are watched.
#[derive(Debug, Default)]
enum Watching {
    /// Not tried yet: the first walk starts the watcher.
    #[default]
    Untried,
    /// Unavailable (no inotify instance or procfs, a limit, or a walk the
    /// watches could not prove): every call walks, as with no watcher,
    /// until walk `retry_at`; `backoff` walks the last time.
    Off {
        retry_at: u64,
        backoff: u64,
    },
    On(Watcher),
    /// Never watched: one walk kept nowhere ([`scan_once`]).
    Never,
}

/// Walks without watches after the first failure to watch a workspace
/// whole; doubled after each further one, up to [`MAX_BACKOFF_WALKS`].
const FIRST_BACKOFF_WALKS: u64 = 64;
const MAX_BACKOFF_WALKS: u64 = 4096;

/// Directories watched at most by this process, over every workspace, and
/// never more than a quarter of the user's `fs.inotify.max_user_watches`
/// (shared with every other program of the user: systemd, editors, file
/// watchers). A workspace that cannot be watched whole within it is walked
/// before every command instead.
pub const MAX_WATCHED_DIRS: usize = 65_536;

static WATCHES_IN_USE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// [`MAX_WATCHED_DIRS`], or a quarter of the user's limit when that is less.
fn watch_budget() -> usize {
    static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .map_or(0, |user| (user / 4).min(MAX_WATCHED_DIRS))
    })
}

/// Takes one watch from the process's budget.
fn reserve_watch() -> bool {
    use std::sync::atomic::Ordering;
    let taken = WATCHES_IN_USE.fetch_add(1, Ordering::Relaxed);
    if taken < watch_budget() {
        return true;
    }
    WATCHES_IN_USE.fetch_sub(1, Ordering::Relaxed);
    false
}

fn release_watches(n: usize) {
    WATCHES_IN_USE.fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
}

/// Workspace roots watched at once by this process: an inotify instance
/// each, out of the user's `fs.inotify.max_user_instances` (128 by
/// default, shared with every other program of the user); the others walk.
pub const MAX_WATCHED_ROOTS: usize = 32;

static WATCHED_ROOTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The buffer the reports are read into at a time (each report is 16
/// bytes; these carry no name longer than `NAME_MAX`).
const INOTIFY_READ_BYTES: usize = 4096;

/// What a change to a watched directory's entries raises: an entry
/// created, removed or renamed in it, or the directory itself removed or
/// renamed. (`IN_UNMOUNT`, `IN_Q_OVERFLOW` and `IN_IGNORED` come
/// unasked.) Not file writes or attribute changes: they change no
/// listing.
fn watch_flags() -> rustix::fs::inotify::WatchFlags {
    use rustix::fs::inotify::WatchFlags as W;
    W::CREATE | W::DELETE | W::MOVED_FROM | W::MOVED_TO | W::DELETE_SELF | W::MOVE_SELF | W::ONLYDIR
}

/// inotify watches on the directories a walk read, and the mount table's
/// change notification: while neither reports anything, every listing the
/// last walk used is still current, so the next call needs no walk at all
/// (see the module's doc, "Watches").
#[derive(Debug)]
struct Watcher {
    inotify: std::os::fd::OwnedFd,
    /// `/proc/self/mountinfo`: `poll` reports `POLLPRI` after any mount or
    /// unmount in the server's mount namespace (a filesystem mounted over
    /// a workspace directory changes no watched listing).
    mounts: File,
    /// Live watches: the walk that last reached each.
    watches: HashMap<i32, u64, foldhash::fast::RandomState>,
    /// The last walk's result, while these watches prove it current.
    armed: Option<Armed>,
}

impl Watcher {
    fn start() -> Option<Watcher> {
        use std::sync::atomic::Ordering;
        if WATCHED_ROOTS.fetch_add(1, Ordering::Relaxed) >= MAX_WATCHED_ROOTS {
            WATCHED_ROOTS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        match Self::open() {
            Ok((inotify, mounts)) => Some(Watcher {
                inotify,
                mounts,
                watches: HashMap::default(),
                armed: None,
            }),
            Err(e) => {
                WATCHED_ROOTS.fetch_sub(1, Ordering::Relaxed);
                tracing::info!(error = %e, "no inotify watches: every confined command walks the workspace");
                None
            }
        }
    }

    fn open() -> std::io::Result<(std::os::fd::OwnedFd, File)> {
        use rustix::fs::inotify::CreateFlags;
        let inotify = rustix::fs::inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        let mut mounts = File::open("/proc/self/mountinfo")?;
        // Read once: `poll` reports changes since the last read.
        std::io::Read::read_to_end(&mut mounts, &mut Vec::new())?;
        Ok((inotify, mounts))
    }

    /// Whether anything was reported since the last call; takes every
    /// report. Forgets the watches the kernel removed.
    fn changed(&mut self) -> bool {
        use rustix::fs::inotify::{ReadFlags, Reader};
        let mut changed = self.mounts_changed();
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); INOTIFY_READ_BYTES];
        let mut reader = Reader::new(&self.inotify, &mut buf);
        loop {
            match reader.next() {
                Ok(event) if event.events() == ReadFlags::IGNORED => {
                    if self.watches.remove(&event.wd()).is_some() {
                        release_watches(1);
                    }
                }
                Ok(_) => changed = true,
                Err(rustix::io::Errno::AGAIN) => return changed,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return true,
            }
        }
    }

    fn mounts_changed(&mut self) -> bool {
        use std::io::{Read, Seek};
        let mut fd = libc::pollfd {
            fd: self.mounts.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no timeout.
        let ready = unsafe { libc::poll(&mut fd, 1, 0) };
        if ready == 0 {
            return false;
        }
        // Reading the table again is what clears the notification.
        let _ = self.mounts.rewind();
        let _ = self.mounts.read_to_end(&mut Vec::new());
        true
    }

    /// Watches the directory open as `dir`; its descriptor when watched.
    fn watch(&mut self, dir: &File, mark: u64) -> Option<i32> {
        if !reserve_watch() {
            return None;
        }
        // Through the descriptor, not the path: the watch is on the very
        // directory about to be listed, added before its listing is read.
        let Ok(wd) = rustix::fs::inotify::add_watch(
            &self.inotify,
            format!("/proc/self/fd/{}", dir.as_raw_fd()),
            watch_flags(),
        ) else {
            release_watches(1);
            return None;
        };
        // The same directory again: its watch, counted once.
        if self.watches.insert(wd, mark).is_some() {
            release_watches(1);
        }
        Some(wd)
    }

    /// Marks a kept listing's watch as reached; false when it is gone.
    fn reached(&mut self, wd: i32, mark: u64) -> bool {
        self.watches.get_mut(&wd).map(|seen| *seen = mark).is_some()
    }

    /// Removes the watches of directories the last walk did not reach.
    fn forget_unreached(&mut self, mark: u64) {
        let inotify = &self.inotify;
        let before = self.watches.len();
        self.watches.retain(|wd, seen| {
            let keep = *seen == mark;
            if !keep {
                let _ = rustix::fs::inotify::remove_watch(inotify, *wd);
            }
            keep
        });
        release_watches(before - self.watches.len());
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Closing the instance removes its watches.
        release_watches(self.watches.len());
        WATCHED_ROOTS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Notices the wall clock being stepped back between two looks: `ctime`s
/// may then repeat, so whatever was kept on the strength of an unchanged
/// `ctime` must be dropped. Also used by the zygote's Landlock rulesets
/// ([`super::worker::RulesetCache`]).
#[derive(Debug)]
pub(crate) struct ClockWatch {
    /// Wall-clock minus monotonic time at the last look, in nanoseconds.
    offset: Option<i128>,
    /// The monotonic clock's origin for [`Self::offset`].
    epoch: Instant,
}

impl Default for ClockWatch {
    fn default() -> Self {
        Self {
            offset: None,
            epoch: Instant::now(),
        }
    }
}

impl ClockWatch {
    /// Whether the wall clock went back since the last call.
    pub(crate) fn stepped_back(&mut self) -> bool {
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        let offset = wall - self.epoch.elapsed().as_nanos() as i128;
        let back = self
            .offset
            .is_some_and(|previous| offset < previous - CLOCK_STEP_TOLERANCE.as_nanos() as i128);
        self.offset = Some(offset);
        back
    }
}

/// A directory as last read, and how to tell it has not changed since.
#[derive(Debug)]
struct Listing {
    dev: u64,
    ino: u64,
    /// `ctime` (seconds, nanoseconds).
    ctime: (i64, i64),
    /// What it was read as.
    kind: Kind,
    /// Entries in it (counted against [`MAX_SCAN_ENTRIES`]).
    entries: usize,
    /// Its entry named `.git`, if any.
    git: GitEntry,
    /// Its subdirectories (not symlinks, not `.git`), in listing order, by
    /// full path: for a [`Kind::GitDir`], only `hooks`; for a
    /// [`Kind::Hooks`], none.
    subdirs: Vec<Arc<OsStr>>,
    /// Its symlinks, for a [`Kind::GitDir`] or [`Kind::Hooks`] (a
    /// workspace directory's are not followed).
    symlinks: Vec<Arc<OsStr>>,
    /// A [`Kind::GitDir`] with a `commondir` file: a repository whose
    /// hooks and config are elsewhere, as a linked worktree's (followed on
    /// every call, see [`Linked::linked_repository`]).
    commondir: bool,
    /// The last walk that reached it unchanged or read it.
    seen: u64,
    /// Its inotify watch, added before it was read.
    wd: Option<i32>,
}

/// A directory's entry named `.git`. Its type cannot change without the
/// directory's `ctime`, so a kept listing still knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitEntry {
    Absent,
    /// A regular file: a gitlink, whose repository may be elsewhere (see
    /// [`push_git`]).
    Gitlink,
    /// A symlink: the repository is where it leads (see [`push_git`]).
    Symlink,
    /// A directory, FIFO, …
    Other,
}

/// How reading one directory went.
enum Read {
    /// Listed; `keep` when it may be reused by a later walk.
    Listed { listing: Listing, keep: bool },
    /// Gone, or no longer a directory (a symlink or file swapped in): there
    /// is nothing beneath it to protect, and the worker grants nothing
    /// through a symlink.
    Gone,
    /// Exists but cannot be read: protected as a whole.
    Unreadable,
}

impl Listings {
    /// Breadth-first from `root`, as the worker's walk always went: `.git`
    /// entries are found and not descended, symlinks are not followed.
    fn walk(&mut self, root: &Path) -> Vec<PathBuf> {
        self.walk_at(root, SystemTime::now())
    }

    /// [`Self::walk`] as if started at `started` (tests: a walk long after
    /// the tree's last change, whose listings are kept).
    fn walk_at(&mut self, root: &Path, started: SystemTime) -> Vec<PathBuf> {
        self.check_clock();
        // This walk's number is `self.walks + 1`.
        let retry = match self.watching {
            Watching::Untried => Some(false),
            Watching::Off { retry_at, .. } => (self.walks + 1 >= retry_at).then_some(true),
            Watching::On(_) | Watching::Never => None,
        };
        if let Some(again) = retry {
            match Watcher::start() {
                Some(w) => {
                    self.watching = Watching::On(w);
                    if again {
                        // Every directory read again, watched before it
                        // is: a kept listing has no watch of this instance.
                        self.dirs.clear();
                    }
                }
                None => self.back_off(),
            }
        }
        // Reports from before this walk are covered by it; later ones stay
        // queued for the next call.
        let mut watcher = match &mut self.watching {
            Watching::On(w) => {
                w.changed();
                w.armed = None;
                Some(w)
            }
            _ => None,
        };
        // Whether every directory reached is watched since before it was
        // read or checked, on a filesystem that reports every change.
        let mut armable = watcher.is_some();
        self.walks += 1;
        let mark = self.walks;
        let mut found = Vec::new();
        let mut links = Vec::new();
        let mut inner = Vec::new();
        let mut queue: VecDeque<(Arc<OsStr>, Kind)> =
            VecDeque::from([(Arc::from(root.as_os_str()), Kind::Workspace)]);
        let mut budget = self.max_entries.unwrap_or(MAX_SCAN_ENTRIES);
        self.reread = 0;
        // The root, held for this walk: a kept directory is checked by a
        // `statx` relative to it, which resolves only the components beneath
        // the root (the lookup of the whole path was half of each check).
        let root_fd = rustix::fs::open(
            root,
            rustix::fs::OFlags::PATH
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok();
        // Every directory this walk listed or found unchanged.
        let mut reached: Vec<Arc<OsStr>> = Vec::new();
        while let Some((dir, kind)) = queue.pop_front() {
            if budget == 0 && kind == Kind::Workspace {
                // Protected whole, not read. A `.git` directory found is
                // still read for its symlinks, however many entries came
                // before it (a breaker's finding: 200,000 FIFOs made at the
                // root left the root's `.git/hooks` unread, and the
                // worktree file a hook links to writable).
                armable = false;
                found.push(PathBuf::from(&*dir));
                continue;
            }
            let rel = beneath_root(root.as_os_str(), &dir);
            if let Some(old) = self.dirs.get_mut(&dir)
                && old.kind == kind
                && unchanged(root_fd.as_ref(), rel, &dir, old)
            {
                old.seen = mark;
                reached.push(dir.clone());
                armable &= match (&mut watcher, old.wd) {
                    (Some(w), Some(wd)) => w.reached(wd, mark),
                    _ => false,
                };
                budget = budget.saturating_sub(old.entries);
                take(
                    &dir, kind, old, &mut queue, &mut found, &mut links, &mut inner,
                );
                continue;
            }
            self.reread += 1;
            match read(
                Path::new(&*dir),
                kind,
                started,
                watcher.as_deref_mut(),
                mark,
            ) {
                Read::Listed { mut listing, keep } => {
                    armable &= listing.wd.is_some();
                    reached.push(dir.clone());
                    budget = budget.saturating_sub(listing.entries);
                    take(
                        &dir, kind, &listing, &mut queue, &mut found, &mut links, &mut inner,
                    );
                    if keep {
                        listing.seen = mark;
                        self.dirs.insert(dir, listing);
                    }
                }
                Read::Gone => {}
                Read::Unreadable => {
                    // Protected whole (a `.git` is already); it may become
                    // readable without a report.
                    armable = false;
                    if kind != Kind::GitDir {
                        found.push(PathBuf::from(&*dir));
                    }
                }
            }
        }
        // Directories not reached (removed, moved, changed and not yet
        // settled, beyond the budget) are forgotten.
        self.dirs.retain(|_, listing| listing.seen == mark);
        let root_id = root_fd.as_ref().and_then(|fd| identity(fd, Path::new("")));
        let Some(w) = watcher else {
            self.targets = Linked::new(root, &mut found).follow(&links, &inner).1;
            return found;
        };
        w.forget_unreached(mark);
        let Some(root_id) = root_id.filter(|_| armable) else {
            // Watches that cannot prove anything are given back to the
            // user's budget; tried again after a while.
            self.back_off();
            self.targets = Linked::new(root, &mut found).follow(&links, &inner).1;
            return found;
        };
        // What the links lead to is part of the armed result when the
        // watches prove it too (every directory looked in was reached by
        // the walk, so watched).
        let walked = found.clone();
        let (proven, targets) = if links.is_empty() && inner.is_empty() {
            (true, Vec::new())
        } else {
            // Every directory reached is watched (`armable`).
            let reached: std::collections::HashSet<&OsStr, foldhash::fast::RandomState> =
                reached.iter().map(|d| &**d).collect();
            let watched = |d: &Path| reached.contains(d.as_os_str());
            Linked::proving(root, &mut found, &watched).follow(&links, &inner)
        };
        w.armed = Some(if proven {
            Armed {
                root: root_id,
                found: found.clone(),
                links: Vec::new(),
                inner: Vec::new(),
                targets: targets.clone(),
            }
        } else {
            Armed {
                root: root_id,
                found: walked,
                links,
                inner,
                targets: Vec::new(),
            }
        });
        self.targets = targets;
        found
    }

    /// The last walk's result, when no watched directory reported a change
    /// since it ran, nor the mount table, nor the wall clock (which the
    /// next walk's `ctime` checks depend on) stepped back.
    fn unchanged_since_last_walk(&mut self, root: &Path) -> Option<Vec<PathBuf>> {
        let Watching::On(watcher) = &mut self.watching else {
            return None;
        };
        let armed = watcher.armed.take()?;
        if watcher.changed() {
            // The walk checks each kept listing's `ctime`: only what
            // changed is read again.
            return None;
        }
        if self.clock.stepped_back() {
            // The walk would not see the step again: it happened here.
            self.clock.offset = None;
            self.dirs.clear();
            return None;
        }
        // The root's path still names the directory the watches are on:
        // moving a directory above the root (a workspace re-provisioned
        // under the same name) reports nothing to them.
        if identity(rustix::fs::CWD, root) != Some(armed.root) {
            return None;
        }
        let mut found = armed.found.clone();
        self.targets = if armed.links.is_empty() && armed.inner.is_empty() {
            armed.targets.clone()
        } else {
            Linked::new(root, &mut found)
                .follow(&armed.links, &armed.inner)
                .1
        };
        self.answered_unchanged += 1;
        watcher.armed = Some(armed);
        Some(found)
    }

    /// The last walk's result, while the watches prove it current.
    fn armed(&self) -> Option<&Armed> {
        match &self.watching {
            Watching::On(w) => w.armed.as_ref(),
            _ => None,
        }
    }

    /// Gives up the watches (back to the user's budget) and walks without
    /// them for a while (see [`Watching::Off`]).
    fn back_off(&mut self) {
        let backoff = match self.watching {
            Watching::Never => return,
            Watching::Off { backoff, .. } => (backoff * 2).min(MAX_BACKOFF_WALKS),
            Watching::Untried | Watching::On(_) => FIRST_BACKOFF_WALKS,
        };
        // No listing may keep a descriptor of the instance that goes: a
        // later instance may hand out the same numbers.
        for listing in self.dirs.values_mut() {
            listing.wd = None;
        }
        self.watching = Watching::Off {
            retry_at: self.walks + backoff,
            backoff,
        };
    }

    /// Drops every kept listing when the wall clock was stepped back since
    /// the last walk: timestamps may then repeat.
    fn check_clock(&mut self) {
        if self.clock.stepped_back() {
            tracing::info!("the wall clock was stepped back; re-reading the workspace");
            self.dirs.clear();
        }
    }
}

/// What one listing of a walk adds to it: `dir`'s `.git` (see
/// [`push_git`]), walked next when it is a directory; its subdirectories;
/// the symlinks of a `.git` directory and its `hooks`.
fn take(
    dir: &OsStr,
    kind: Kind,
    listing: &Listing,
    queue: &mut VecDeque<(Arc<OsStr>, Kind)>,
    found: &mut Vec<PathBuf>,
    links: &mut Vec<PathBuf>,
    inner: &mut Vec<InnerLink>,
) {
    let dir = Path::new(dir);
    push_git(found, links, dir, listing.git);
    if listing.commondir {
        links.push(dir.to_path_buf());
    }
    if listing.git == GitEntry::Other {
        queue.push_back((
            dir.join(PROTECTED_NAME).into_os_string().into(),
            Kind::GitDir,
        ));
    }
    let sub = kind.of_subdirs();
    queue.extend(listing.subdirs.iter().map(|d| (d.clone(), sub)));
    inner.extend(listing.symlinks.iter().map(|l| InnerLink {
        path: PathBuf::from(&**l),
        top_level: kind == Kind::GitDir,
    }));
}

/// Protects `dir`'s `.git`, if it has one (`git`), and notes it among
/// `links` when it names a repository elsewhere (a gitlink file, `gitdir:
/// PATH`, as `git init --separate-git-dir` and `git worktree` write; or a
/// symlink, as Android's `repo` makes): see [`linked_repositories`], run on
/// every call, kept listing or not, because what a link leads to can
/// change without its directory's `ctime` (a file's content, an entry on
/// the way).
fn push_git(found: &mut Vec<PathBuf>, links: &mut Vec<PathBuf>, dir: &Path, git: GitEntry) {
    if git == GitEntry::Absent {
        return;
    }
    let dotgit = dir.join(PROTECTED_NAME);
    if matches!(git, GitEntry::Gitlink | GitEntry::Symlink) {
        links.push(dotgit.clone());
    }
    found.push(dotgit);
}

/// Adds to a walk's result what its links lead to, on every call (see
/// [`push_git`]): each path once.
struct Linked<'a> {
    root: &'a Path,
    found: &'a mut Vec<PathBuf>,
    seen: std::collections::HashSet<PathBuf, foldhash::fast::RandomState>,
    /// Whether a directory is watched by the walk just done (`None`: no
    /// proof is sought).
    watched: Option<&'a dyn Fn(&Path) -> bool>,
    /// Whether everything followed so far was looked up only in watched
    /// directories, and no file's content was read: while no watch
    /// reports a change, it leads to the same places.
    proven: bool,
    /// Where the links lead, in the workspace (see
    /// [`ProtectedPaths::leads_to`]), and the same as a set.
    targets: Vec<PathBuf>,
    target_seen: std::collections::HashSet<PathBuf, foldhash::fast::RandomState>,
}

/// Entries of a `hooks` directory a symlink leads to read at most for its
/// symlinks (see [`Linked::inner_link`]).
const MAX_HOOKS_ENTRIES: usize = 4096;

impl<'a> Linked<'a> {
    fn new(root: &'a Path, found: &'a mut Vec<PathBuf>) -> Self {
        Linked {
            root,
            found,
            seen: Default::default(),
            watched: None,
            proven: false,
            targets: Vec::new(),
            target_seen: Default::default(),
        }
    }

    /// [`Self::new`], proving what it follows by the watches `watched`
    /// tells of (see [`Self::follow`]).
    fn proving(
        root: &'a Path,
        found: &'a mut Vec<PathBuf>,
        watched: &'a dyn Fn(&Path) -> bool,
    ) -> Self {
        Linked {
            watched: Some(watched),
            proven: true,
            ..Self::new(root, found)
        }
    }

    /// Follows the `.git` links and the symlinks inside `.git` directories
    /// a walk found. True when what was followed is proven by the watches
    /// (see [`Self::proving`]): every entry on the way was looked up in a
    /// watched directory (a symlink cannot change without an entry change
    /// in its directory), no gitlink or `commondir` file was read (a
    /// file's writes are not watched).
    /// Also returns where the links lead, in the workspace.
    fn follow(mut self, links: &[PathBuf], inner: &[InnerLink]) -> (bool, Vec<PathBuf>) {
        if links.is_empty() && inner.is_empty() {
            return (self.proven, self.targets);
        }
        self.seen.extend(self.found.iter().cloned());
        for g in links {
            self.linked_repository(g);
        }
        for l in inner {
            if let Some(git_dir) = l.path.parent() {
                let git_dir = if l.top_level {
                    git_dir
                } else {
                    git_dir.parent().unwrap_or(git_dir)
                };
                self.inner_link(git_dir, &l.path, l.top_level);
            }
        }
        (self.proven, self.targets)
    }

    /// [`resolve`], noting whether it looked only in watched directories.
    fn resolve(&mut self, base: &Path, path: &Path) -> Option<Resolved> {
        let mut proven = self.proven;
        let watched = self.watched;
        let r = resolve(base, path, &mut |d| {
            proven &= watched.is_some_and(|w| w(d));
        });
        self.proven = proven;
        r
    }

    /// [`named_dir`]: a file's content, never proven by the watches.
    fn named_dir(&mut self, file: &Path, prefix: &[u8], base: &Path) -> Option<Resolved> {
        self.proven = false;
        named_dir(file, prefix, base, &mut |_| {})
    }

    /// [`symlinks_in`], noting whether `dir` is watched.
    fn symlinks_in(&mut self, dir: &Path) -> Vec<PathBuf> {
        self.proven &= self.watched.is_some_and(|w| w(dir));
        symlinks_in(dir)
    }

    /// Whether `p` lies in the workspace, below its root, outside any
    /// `.git`.
    fn in_workspace(&self, p: &Path) -> bool {
        p.strip_prefix(self.root)
            .is_ok_and(|rel| !rel.as_os_str().is_empty() && !is_protected_path(rel))
    }

    fn push(&mut self, p: &Path) {
        if self.seen.insert(p.to_path_buf()) {
            self.found.push(p.to_path_buf());
        }
    }

    /// Protects where `r` leads and what it passed, when in the workspace
    /// and not beneath `within` (a protected directory the resolution
    /// started in: read-only already). `anywhere`: the directory or file
    /// reached is protected outside the workspace too.
    fn add(&mut self, r: &Resolved, anywhere: bool, within: Option<&Path>) {
        let outside_within = |p: &Path| within.is_none_or(|w| !p.starts_with(w));
        for p in &r.passed {
            if self.in_workspace(p) && outside_within(p) {
                self.push(p);
            }
        }
        let path = &r.path;
        if path == self.root && r.kind == Reached::Dir {
            // A link to the workspace root (`p/.git -> ..`): protecting it
            // whole would leave nothing writable; what makes a directory a
            // repository to git, and what git runs from one, is protected
            // instead (a missing `HEAD` cannot be made, so the root cannot
            // become one; a breaker's finding).
            for name in ["HEAD", "config", "commondir", "hooks", "objects", "refs"] {
                self.push_target(&self.root.join(name));
            }
        }
        let in_workspace = self.in_workspace(path);
        let wanted = in_workspace
            || (anywhere && r.kind != Reached::Stopped && !path.starts_with(self.root));
        if wanted && outside_within(path) {
            if in_workspace {
                self.push_target(path);
            } else {
                self.push(path);
            }
        }
    }

    /// [`Self::push`], and notes `p` among the link targets, once (a set:
    /// an Android checkout has thousands).
    fn push_target(&mut self, p: &Path) {
        self.push(p);
        if self.target_seen.insert(p.to_path_buf()) {
            self.targets.push(p.to_path_buf());
        }
    }

    /// What the link `dotgit` (a gitlink file or a symlink named `.git`)
    /// leads to: the git dir git would use through it, that git dir's
    /// common dir when it has one (a linked worktree's `commondir`: the
    /// repository whose hooks and config git runs for it, e.g. a bare
    /// `main.git` with `git worktree add`; a breaker's finding), and every
    /// entry on the way that a command could swap to make the same link
    /// lead elsewhere ([`Resolved::passed`]). The directories on the way to
    /// each are pinned by the worker as for any protected path, so `mv
    /// .repo/projects old` cannot put a new repository where a `.git`
    /// symlink points (a breaker's finding). Each is added when it lies in
    /// the workspace outside any `.git` (one inside a `.git`, as
    /// submodules' and worktrees' are, is protected with it); the directory
    /// a `.git` symlink points to is added wherever it is, as the worker
    /// always bound it. Where a link leads nowhere (yet), the entry where
    /// it stops is protected ([`Reached::Stopped`]). The symlinks inside
    /// each git dir are followed too ([`Self::git_dir_links`]).
    fn linked_repository(&mut self, dotgit: &Path) {
        let Some(dir) = dotgit.parent() else {
            return;
        };
        let Ok(meta) = std::fs::symlink_metadata(dotgit) else {
            return;
        };
        if meta.is_dir() {
            // A `.git` directory with a `commondir` file (see [`take`]):
            // its own symlinks are walked.
            self.common_dir(dotgit);
            return;
        }
        let mut gitlink = Some(dotgit.to_path_buf());
        let mut git_dir = None;
        if meta.is_symlink() {
            let Some(r) = std::fs::read_link(dotgit)
                .ok()
                .and_then(|to| self.resolve(dir, &to))
            else {
                return;
            };
            self.add(&r, true, None);
            // A symlink to a gitlink file: git reads it as one, relative
            // to the `.git` it found.
            gitlink = (r.kind == Reached::File).then(|| r.path.clone());
            git_dir = Some(r);
        }
        if let Some(file) = gitlink {
            git_dir = self.named_dir(&file, b"gitdir: ", dir);
            if let Some(r) = &git_dir {
                self.add(r, false, None);
            }
        }
        let Some(git_dir) = git_dir.filter(|r| r.kind == Reached::Dir) else {
            return;
        };
        self.git_dir_links(&git_dir.path);
        self.common_dir(&git_dir.path);
    }

    /// Protects the common dir the git dir `git_dir` names in its
    /// `commondir` file, if it has one, and what its symlinks lead to.
    fn common_dir(&mut self, git_dir: &Path) {
        let file = git_dir.join("commondir");
        // No such file: proven by the watch on `git_dir`, if any.
        self.proven &= self.watched.is_some_and(|w| w(git_dir));
        if std::fs::symlink_metadata(&file).is_err() {
            return;
        }
        if let Some(common) = self.named_dir(&file, b"", git_dir) {
            self.add(&common, false, None);
            if common.kind == Reached::Dir {
                self.git_dir_links(&common.path);
            }
        }
    }

    /// Follows the symlinks at the top of the git dir `git_dir` and in its
    /// `hooks` directory (see [`Self::inner_link`]).
    fn git_dir_links(&mut self, git_dir: &Path) {
        for link in self.symlinks_in(git_dir) {
            self.inner_link(git_dir, &link, true);
        }
        let hooks = git_dir.join("hooks");
        if std::fs::symlink_metadata(&hooks).is_ok_and(|m| m.is_dir()) {
            for link in self.symlinks_in(&hooks) {
                self.inner_link(git_dir, &link, false);
            }
        }
    }

    /// Protects what the symlink `link` inside the protected git dir
    /// `git_dir` leads to (at its top when `top_level`, else in its
    /// `hooks`). A read-only mount does not stop a path at a symlink in it:
    /// Android's `repo` makes `p.git/hooks` a symlink to
    /// `.repo/project-objects/p.git/hooks`, and a hook linked into the
    /// worktree (`.git/hooks/pre-commit -> ../../scripts/pre-commit`) is a
    /// workspace file; writing either runs code in git outside the sandbox
    /// (a breaker's finding). A `hooks` symlink's directory is read for
    /// symlinks in turn (`repo` links each hook to `.repo/repo/hooks`).
    fn inner_link(&mut self, git_dir: &Path, link: &Path, top_level: bool) {
        let (Some(dir), Some(name)) = (link.parent(), link.file_name()) else {
            return;
        };
        let Some(r) = self.resolve(dir, Path::new(name)) else {
            return;
        };
        self.add(&r, false, Some(git_dir));
        // Wherever it leads, inside the git dir too (`hooks -> hooks.d`, a
        // directory no walk reads; a breaker's finding).
        if top_level && name == "hooks" && r.kind == Reached::Dir {
            for hook in self.symlinks_in(&r.path) {
                if let (Some(d), Some(n)) = (hook.parent(), hook.file_name())
                    && let Some(h) = self.resolve(d, Path::new(n))
                {
                    self.add(&h, false, Some(&r.path));
                }
            }
        }
    }
}

/// The symlinks directly in `dir` (at most [`MAX_HOOKS_ENTRIES`] entries
/// read), not following `dir` itself if it is one.
fn symlinks_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(file) = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
    else {
        return Vec::new();
    };
    let Ok(entries) = cap_std::fs::Dir::from_std_file(file).entries() else {
        return Vec::new();
    };
    let mut links = Vec::new();
    for (i, entry) in entries.flatten().enumerate() {
        if i == MAX_HOOKS_ENTRIES {
            tracing::warn!(dir = %dir.display(), "more entries than are read for symlinks in a repository's directory");
            break;
        }
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            links.push(dir.join(entry.file_name()));
        }
    }
    links
}

/// Most of a gitlink file read: git writes one `gitdir: PATH` line.
const MAX_GITLINK_BYTES: u64 = 4096;

/// Where the regular file `file` leads after `prefix` (its text less
/// trailing line ends, as git reads a gitlink and a `commondir`), relative
/// to `base` unless absolute (see [`resolve`]): a directory, or what a
/// command must not change for it to become one. `None` when `file` is not
/// a regular file or names nothing. Opened without
/// following a symlink and without blocking (a FIFO), and at most
/// [`MAX_GITLINK_BYTES`] read.
fn named_dir(
    file: &Path,
    prefix: &[u8],
    base: &Path,
    looked: &mut dyn FnMut(&Path),
) -> Option<Resolved> {
    use std::io::Read;
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_GITLINK_BYTES).read_to_end(&mut text).ok()?;
    // As git reads it: the whole file less its trailing line ends, after
    // the exact prefix; spaces are part of the path (a breaker's finding:
    // `gitdir: ../s.git ` is `s.git ` to git, and trimming it protected
    // another directory).
    let end = text
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    let named = text[..end].strip_prefix(prefix)?;
    if named.is_empty() {
        return None;
    }
    resolve(base, Path::new(OsStr::from_bytes(named)), looked)
}

/// Where a path leads: see [`resolve`].
#[derive(Debug, PartialEq)]
struct Resolved {
    /// The entry reached, canonical (see [`Reached`]).
    path: PathBuf,
    kind: Reached,
    /// What a command could swap to make the same path lead elsewhere,
    /// beyond the directories on the way to [`Self::path`] (which the worker
    /// pins for any protected path): every symlink followed, and every
    /// directory entered by name and left again by `..` (`a/../x`: `a`
    /// replaced by a symlink changes where `..` goes). Such a directory is
    /// then protected read-only, more than it needs; a symlink is bound on
    /// itself, which only pins it.
    passed: Vec<PathBuf>,
}

/// What a resolution reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reached {
    Dir,
    File,
    /// Nothing it could go through: an entry that does not exist (yet), a
    /// file or FIFO in the middle of the path, a symlink beyond
    /// [`MAX_SYMLINK_HOPS`]. [`Resolved::path`] is that entry, protected as
    /// it is: a missing one cannot be made (the worker's entry trap makes
    /// nothing at or beneath a protected path), an existing one cannot be
    /// removed or replaced (it is a mount point). Else a command could make
    /// the path lead somewhere, to a repository of its own with
    /// `core.fsmonitor` in its `config` (a breaker's finding: a dangling
    /// `.git` symlink).
    Stopped,
}

/// Symlinks followed at most in one resolution, as the kernel's limit
/// (`ELOOP`).
const MAX_SYMLINK_HOPS: usize = 40;

/// Resolves `path` relative to the directory `base` (canonical: a walk's
/// path, or one a resolution reached; `/` when `path` is absolute) one
/// entry at a time, as the kernel does, keeping what it passes through;
/// `looked` is told each directory an entry is looked up in. `None` when
/// `base` is not absolute.
fn resolve(base: &Path, path: &Path, looked: &mut dyn FnMut(&Path)) -> Option<Resolved> {
    use std::io::ErrorKind;
    use std::path::Component;
    let mut at = if path.is_absolute() {
        PathBuf::from("/")
    } else if base.is_absolute() {
        base.to_path_buf()
    } else {
        return None;
    };
    // Components still to take, the next one last.
    let mut todo: Vec<OsString> = Vec::new();
    let push = |todo: &mut Vec<OsString>, p: &Path| {
        todo.extend(p.components().rev().filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        }));
    };
    push(&mut todo, path);
    let mut passed = Vec::new();
    let mut entered: Vec<PathBuf> = Vec::new();
    let mut hops = 0;
    let mut kind = Reached::Dir;
    // Directories entered and not on the way to `path` join `passed`.
    let reached =
        |path: PathBuf, kind: Reached, mut passed: Vec<PathBuf>, entered: Vec<PathBuf>| {
            passed.extend(entered.into_iter().filter(|d| !path.starts_with(d)));
            Resolved { path, kind, passed }
        };
    while let Some(name) = todo.pop() {
        if kind != Reached::Dir {
            // A file in the middle of the path: replaced by a directory,
            // it would lead on.
            return Some(reached(at, Reached::Stopped, passed, entered));
        }
        if name == ".." {
            // `at` is canonical: its parent is where `..` goes.
            at.pop();
            continue;
        }
        let next = at.join(&name);
        looked(&at);
        let meta = match std::fs::symlink_metadata(&next) {
            Ok(meta) => meta,
            // Nothing there (yet).
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Some(reached(next, Reached::Stopped, passed, entered));
            }
            // Cannot be looked into (a non-root server, a directory a
            // command made `chmod 000`): what lies beyond cannot be told,
            // so the directory in the way is what is protected (read-only:
            // its mode cannot be given back), as the walk protects a
            // directory it cannot read. Else a command could hide the
            // repository from the next command's resolution and write it
            // then (a breaker's suspicion for non-root servers).
            Err(_) => return Some(reached(at, Reached::Dir, passed, entered)),
        };
        if meta.is_symlink() {
            hops += 1;
            passed.push(next.clone());
            let Some(to) = std::fs::read_link(&next)
                .ok()
                .filter(|_| hops <= MAX_SYMLINK_HOPS)
            else {
                // A loop: every link of it is pinned, so it stays one.
                return Some(reached(next, Reached::Stopped, passed, entered));
            };
            if to.is_absolute() {
                at = PathBuf::from("/");
            }
            push(&mut todo, &to);
        } else if meta.is_dir() {
            entered.push(next.clone());
            at = next;
        } else if meta.is_file() {
            kind = Reached::File;
            at = next;
        } else {
            return Some(reached(next, Reached::Stopped, passed, entered));
        }
    }
    Some(reached(at, kind, passed, entered))
}

/// Reads `dir` through an fd opened without following a symlink, so that
/// its identity, `ctime` and listing belong to the same directory.
fn read(
    dir: &Path,
    kind: Kind,
    walk_started: SystemTime,
    watcher: Option<&mut Watcher>,
    mark: u64,
) -> Read {
    let file = match File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
    {
        Ok(f) => f,
        Err(e) => return gone_or_unreadable(&e),
    };
    let Ok(meta) = file.metadata() else {
        return Read::Unreadable;
    };
    // Asked on every read, not remembered by device: anonymous device
    // numbers (tmpfs, FUSE, NFS) are reused after an unmount.
    let magic = filesystem_magic(&file);
    let trusted = magic.is_some_and(trusted_magic);
    // Before the listing is read: a change after this point is reported.
    let wd = match watcher {
        Some(w) if trusted && magic != Some(OVERLAYFS_MAGIC) => w.watch(&file, mark),
        _ => None,
    };
    let ctime = (meta.ctime(), meta.ctime_nsec());
    let Ok(entries) = cap_std::fs::Dir::from_std_file(file).entries() else {
        return Read::Unreadable;
    };
    let mut listing = Listing {
        dev: meta.dev(),
        ino: meta.ino(),
        ctime,
        kind,
        entries: 0,
        git: GitEntry::Absent,
        subdirs: Vec::new(),
        symlinks: Vec::new(),
        commondir: false,
        seen: 0,
        wd,
    };
    for entry in entries {
        // An entry that cannot be read leaves the listing incomplete.
        let Ok(entry) = entry else {
            return Read::Unreadable;
        };
        listing.entries += 1;
        let name = entry.file_name();
        if kind != Kind::Workspace {
            match entry.file_type() {
                Ok(t) if t.is_symlink() => {
                    listing
                        .symlinks
                        .push(dir.join(name).into_os_string().into());
                }
                Ok(t) if t.is_dir() && kind == Kind::GitDir && name == "hooks" => {
                    listing.subdirs.push(dir.join(name).into_os_string().into());
                }
                Ok(t) if t.is_file() && kind == Kind::GitDir && name == "commondir" => {
                    listing.commondir = true;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => return Read::Unreadable,
            }
            continue;
        }
        if name == ".git" {
            listing.git = match entry.file_type() {
                Ok(t) if t.is_file() => GitEntry::Gitlink,
                Ok(t) if t.is_symlink() => GitEntry::Symlink,
                _ => GitEntry::Other,
            };
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() => listing.subdirs.push(dir.join(name).into_os_string().into()),
            Ok(_) => {}
            // Removed since it was listed: nothing beneath it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return Read::Unreadable,
        }
    }
    let keep = trusted && settled(ctime, walk_started);
    Read::Listed { listing, keep }
}

/// `dir` relative to `root` (empty for the root itself), when it lies
/// beneath it: the bytes after the root and its separator. Compared as
/// bytes (a walk's paths are the root joined with names), not by
/// components.
fn beneath_root<'a>(root: &OsStr, dir: &'a OsStr) -> Option<&'a OsStr> {
    let rest = dir.as_bytes().strip_prefix(root.as_bytes())?;
    match rest {
        [] => Some(OsStr::new("")),
        [b'/', rel @ ..] => Some(OsStr::from_bytes(rel)),
        // The root is `/`: its children follow it without another `/`.
        rel if root.as_bytes().ends_with(b"/") => Some(OsStr::from_bytes(rel)),
        _ => None,
    }
}

/// Whether `dir` is still the directory `old` was read from, unchanged:
/// same device and inode, same `ctime`, not a symlink. Looked up as `rel`
/// relative to `root_fd` (the walk's root, opened) when there are both.
fn unchanged(
    root_fd: Option<&std::os::fd::OwnedFd>,
    rel: Option<&OsStr>,
    dir: &OsStr,
    old: &Listing,
) -> bool {
    use rustix::fs::{AtFlags, StatxFlags};
    let want = StatxFlags::TYPE | StatxFlags::INO | StatxFlags::CTIME;
    let nofollow = AtFlags::SYMLINK_NOFOLLOW;
    let st = match (root_fd, rel) {
        (Some(fd), Some(rel)) if rel.is_empty() => {
            rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH | nofollow, want)
        }
        (Some(fd), Some(rel)) => rustix::fs::statx(fd, rel, nofollow, want),
        _ => rustix::fs::statx(rustix::fs::CWD, dir, nofollow, want),
    };
    st.is_ok_and(|m| {
        StatxFlags::from_bits_retain(m.stx_mask).contains(want)
            && rustix::fs::FileType::from_raw_mode(m.stx_mode.into())
                == rustix::fs::FileType::Directory
            && rustix::fs::makedev(m.stx_dev_major, m.stx_dev_minor) == old.dev
            && m.stx_ino == old.ino
            && (m.stx_ctime.tv_sec, i64::from(m.stx_ctime.tv_nsec)) == old.ctime
    })
}

/// The device and inode of `path` relative to `dir` (itself when empty),
/// not following a symlink.
fn identity(dir: impl std::os::fd::AsFd, path: &Path) -> Option<(u64, u64)> {
    use rustix::fs::{AtFlags, StatxFlags};
    let flags = if path.as_os_str().is_empty() {
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    let st = rustix::fs::statx(dir, path, flags, StatxFlags::INO).ok()?;
    Some((
        rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        st.stx_ino,
    ))
}

/// Whether a `ctime` is old enough that any later change must stamp a
/// different one ([`RACY_MARGIN`]).
pub(crate) fn settled(ctime: (i64, i64), walk_started: SystemTime) -> bool {
    let Ok(started) = walk_started.duration_since(SystemTime::UNIX_EPOCH) else {
        return false;
    };
    let limit = started.saturating_sub(RACY_MARGIN);
    let (secs, nanos) = ctime;
    match (u64::try_from(secs), u32::try_from(nanos)) {
        (Ok(s), Ok(n)) if n < 1_000_000_000 => Duration::new(s, n) < limit,
        _ => false,
    }
}

fn gone_or_unreadable(e: &std::io::Error) -> Read {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP) => Read::Gone,
        _ => Read::Unreadable,
    }
}

/// Whether the filesystem holding `file` is one of [`TRUSTED_FILESYSTEMS`].
pub(crate) fn on_trusted_filesystem(file: &impl AsRawFd) -> bool {
    filesystem_magic(file).is_some_and(trusted_magic)
}

fn trusted_magic(magic: i64) -> bool {
    TRUSTED_FILESYSTEMS.iter().any(|(m, _)| *m == magic)
}

/// overlayfs reports what is done through it, not changes made to its
/// layers directly: its directories are checked by `ctime` on every walk,
/// never only watched.
const OVERLAYFS_MAGIC: i64 = 0x794C_7630;

/// The `statfs` magic number of the filesystem holding `file`.
fn filesystem_magic(file: &impl AsRawFd) -> Option<i64> {
    // SAFETY: fstatfs writes into a zeroed local struct through a valid fd.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(file.as_raw_fd(), &mut st) != 0 {
            return None;
        }
        Some(st.f_type as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets `path`'s mtime and atime far in the past, which moves its ctime
    /// to now: what a test needs to see that the ctime, not the mtime, is
    /// what the cache checks.
    fn set_old_mtime(path: &Path) {
        let old = std::fs::FileTimes::new()
            .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
            .set_accessed(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
        File::open(path).unwrap().set_times(old).unwrap();
    }

    fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
        v.sort();
        v
    }

    #[test]
    fn finds_nested_git_dirs_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("a/b/repo/.git")).unwrap();
        std::fs::create_dir_all(root.join("c")).unwrap();
        std::fs::write(root.join("c/.git"), "gitdir: ../.git/modules/c\n").unwrap();
        let expected = [
            root.join(".git"),
            root.join("a/b/repo/.git"),
            root.join("c/.git"),
        ];
        assert_eq!(sorted(scan_once(root)), expected);
        let cache = ProtectedPaths::new(root);
        assert_eq!(sorted(cache.current()), expected);
        assert_eq!(sorted(cache.current()), expected);
    }

    /// Reads `dirs` into `cache` as a walk long after their last change
    /// would, so that they are kept.
    fn keep_listings(cache: &ProtectedPaths, dirs: &[PathBuf]) {
        let mut l = cache.listings.lock().unwrap();
        // Unwatched listings: the next call walks.
        if let Watching::On(w) = &mut l.watching {
            w.armed = None;
        }
        let later = SystemTime::now() + RACY_MARGIN * 2;
        for d in dirs {
            let Read::Listed { listing, keep } = read(d, Kind::Workspace, later, None, 0) else {
                panic!("cannot read {}", d.display());
            };
            assert!(keep, "{} is not on a trusted filesystem", d.display());
            l.dirs.insert(d.as_os_str().into(), listing);
        }
    }

    /// Makes `a/b` and `c` beneath `root`; returns every directory.
    fn abc_tree(root: &Path) -> [PathBuf; 4] {
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("c")).unwrap();
        [
            root.to_path_buf(),
            root.join("a"),
            root.join("a/b"),
            root.join("c"),
        ]
    }

    #[test]
    fn settled_listings_are_reused_and_a_new_git_is_still_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let all = abc_tree(&root);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(
            cache.listings.lock().unwrap().dirs.len(),
            0,
            "just-changed directories are not kept"
        );
        keep_listings(&cache, &all);
        // A kept listing is used without reading the directory: plant a
        // `.git` in `c`'s kept listing only, and the walk reports it.
        cache
            .listings
            .lock()
            .unwrap()
            .dirs
            .get_mut(root.join("c").as_os_str())
            .unwrap()
            .git = GitEntry::Other;
        assert_eq!(cache.current(), [root.join("c/.git")]);
        assert_eq!(cache.listings.lock().unwrap().dirs.len(), 4);
        // A `.git` made in a/b is found, even with a/b's mtime set back:
        // its ctime moved, so it is read again.
        keep_listings(&cache, &all);
        std::fs::create_dir(root.join("a/b/.git")).unwrap();
        set_old_mtime(&root.join("a/b"));
        assert_eq!(cache.current(), [root.join("a/b/.git")]);
        // A directory swapped for another at the same path is read again.
        keep_listings(&cache, &all);
        std::fs::rename(root.join("c"), root.join("c-old")).unwrap();
        std::fs::create_dir_all(root.join("c/.git")).unwrap();
        assert_eq!(
            sorted(cache.current()),
            [root.join("a/b/.git"), root.join("c/.git")]
        );
    }

    #[test]
    fn a_directory_replaced_by_a_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("x/.git")).unwrap();
        let root = dir.path();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        assert_eq!(scan_once(root), Vec::<PathBuf>::new());
    }

    #[test]
    fn an_unreadable_directory_is_protected_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("locked/inner")).unwrap();
        std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o300))
            .unwrap();
        let readable = std::fs::read_dir(root.join("locked")).is_ok();
        let found = scan_once(root);
        std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        if readable {
            // Root ignores permissions: the directory is simply listed.
            assert_eq!(found, Vec::<PathBuf>::new());
        } else {
            assert_eq!(found, [root.join("locked")]);
        }
    }

    #[test]
    fn a_clock_step_back_drops_kept_listings() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Listings::default();
        let later = SystemTime::now() + RACY_MARGIN * 2;
        let Read::Listed { listing, keep } = read(dir.path(), Kind::Workspace, later, None, 0)
        else {
            panic!();
        };
        assert!(keep || !on_trusted_filesystem(&File::open(dir.path()).unwrap()));
        l.dirs.insert(dir.path().as_os_str().into(), listing);
        l.check_clock();
        l.clock.offset = l.clock.offset.map(|o| o + 10_000_000_000);
        l.check_clock();
        assert!(l.dirs.is_empty());
    }

    #[test]
    fn paths_beneath_the_root_are_cut_by_bytes() {
        fn b<'a>(root: &str, dir: &'a str) -> Option<&'a OsStr> {
            beneath_root(OsStr::new(root), OsStr::new(dir))
        }
        assert_eq!(b("/ws", "/ws"), Some(OsStr::new("")));
        assert_eq!(b("/ws", "/ws/a/b"), Some(OsStr::new("a/b")));
        assert_eq!(b("/", "/"), Some(OsStr::new("")));
        assert_eq!(b("/", "/a"), Some(OsStr::new("a")));
        // A sibling that shares the root's bytes is not beneath it.
        assert_eq!(b("/ws", "/wsx/a"), None);
        assert_eq!(b("/ws", "/other"), None);
    }

    /// A walk keeps exactly the settled directories it reached: a removed
    /// subtree is forgotten, and so is a directory that changed since.
    #[test]
    fn a_walk_keeps_only_what_it_reached() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let all = abc_tree(&root);
        std::fs::create_dir(root.join("c/.git")).unwrap();
        let cache = ProtectedPaths::new(&root);
        keep_listings(&cache, &all);
        assert_eq!(cache.current(), [root.join("c/.git")]);
        let kept = |cache: &ProtectedPaths| {
            let mut k: Vec<PathBuf> = cache
                .listings
                .lock()
                .unwrap()
                .dirs
                .keys()
                .map(|p| PathBuf::from(&**p))
                .collect();
            k.sort();
            k
        };
        assert_eq!(kept(&cache), all);
        std::fs::remove_dir_all(root.join("a")).unwrap();
        // The root changed (a is gone): it is read again and not kept (it
        // is not settled); `c` is reached through the fresh listing.
        assert_eq!(cache.current(), [root.join("c/.git")]);
        assert_eq!(kept(&cache), [root.join("c")]);
    }

    /// A gitlink file's repository in the workspace is protected with it;
    /// one inside a `.git` (submodules) or outside the workspace is not
    /// added, nor is what a FIFO or a symlink named `.git` would name.
    #[test]
    fn a_gitlink_files_repository_in_the_workspace_is_protected() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.join("sepgd/hooks")).unwrap();
        std::fs::create_dir_all(root.join("proj")).unwrap();
        std::fs::write(root.join("proj/.git"), "gitdir: ../sepgd\n").unwrap();
        std::fs::create_dir_all(root.join(".git/modules/sub")).unwrap();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
        std::fs::create_dir_all(root.join("out")).unwrap();
        std::fs::write(
            root.join("out/.git"),
            format!("gitdir: {}\n", outside.path().display()),
        )
        .unwrap();
        std::fs::create_dir_all(root.join("fifo")).unwrap();
        let fifo = std::ffi::CString::new(root.join("fifo/.git").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path and mode.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        // A `.git` symlink to a gitlink file: read as one, relative to the
        // symlink's directory (as git does): `link/../sepgd`.
        std::fs::create_dir_all(root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("proj/.git"), root.join("link/.git")).unwrap();
        let expected = sorted(vec![
            root.join(".git"),
            root.join("fifo/.git"),
            root.join("link/.git"),
            root.join("out/.git"),
            root.join("proj/.git"),
            root.join("sepgd"),
            root.join("sub/.git"),
        ]);
        assert_eq!(sorted(scan_once(&root)), expected);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(sorted(cache.current()), expected);
        // Kept listings: the file is read again, and a changed one counts.
        keep_listings(&cache, &[root.clone(), root.join("proj")]);
        std::fs::write(root.join("proj/.git"), "gitdir: ../elsewhere\n").unwrap();
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        let now = sorted(cache.current());
        assert!(now.contains(&root.join("elsewhere")), "{now:?}");
        assert!(!now.contains(&root.join("sepgd")), "{now:?}");
    }

    /// A `.git` symlink (Android's `repo`: `p/.git ->
    /// ../.repo/projects/p.git`) protects the directory it leads to, inside
    /// the workspace or out, so that the worker pins the directories on
    /// the way to it (a breaker renamed `.repo/projects` and made a new
    /// `p.git` with a hook there); every other symlink followed on the way,
    /// and a directory entered and left by `..`, are protected too (a
    /// command swapping one would make the link lead elsewhere). A loop
    /// leads nowhere. The same holds for a gitlink's path.
    #[test]
    fn what_a_git_symlink_leads_through_is_protected() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let outside = std::fs::canonicalize(outside.path()).unwrap();
        let link = |to: &str, at: &str| {
            std::fs::create_dir_all(root.join(at).parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(to, root.join(at)).unwrap();
        };
        for d in ["p.git", "q.git", "r.git", "g.git"] {
            std::fs::create_dir_all(root.join(".repo/projects").join(d).join("hooks")).unwrap();
        }
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(outside.join("w.git")).unwrap();
        link("../.repo/projects/p.git", "p/.git");
        link(".repo/projects", "l");
        link("../l/q.git", "q/.git");
        link("../a/b/../../.repo/projects/r.git", "r/.git");
        link(outside.join("w.git").to_str().unwrap(), "o/.git");
        link(".git", "loop/.git");
        std::fs::create_dir_all(root.join("g")).unwrap();
        std::fs::write(root.join("g/.git"), "gitdir: ../l/g.git\n").unwrap();
        let expected = sorted(vec![
            root.join(".repo/projects/g.git"),
            root.join(".repo/projects/p.git"),
            root.join(".repo/projects/q.git"),
            root.join(".repo/projects/r.git"),
            root.join("a"),
            root.join("a/b"),
            root.join("g/.git"),
            root.join("l"),
            root.join("loop/.git"),
            root.join("o/.git"),
            root.join("p/.git"),
            root.join("q/.git"),
            root.join("r/.git"),
            outside.join("w.git"),
        ]);
        assert_eq!(sorted(scan_once(&root)), expected);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(sorted(cache.current()), expected);
        // Kept listings: the link is followed again on every call; a
        // symlink changed on the way counts.
        keep_listings(&cache, &[root.clone(), root.join("q")]);
        std::fs::create_dir_all(root.join("m/q.git")).unwrap();
        std::fs::remove_file(root.join("l")).unwrap();
        link("m", "l");
        let now = sorted(cache.current());
        assert!(now.contains(&root.join("m/q.git")), "{now:?}");
        assert!(!now.contains(&root.join(".repo/projects/q.git")), "{now:?}");
        assert_eq!(cache.current_if_unchanged(), None, "links are followed");
    }

    /// A read-only mount does not stop a path at a symlink in it: what the
    /// symlinks at the top of a protected repository and in its `hooks`
    /// lead to is protected too (a breaker's finding), with `repo`'s
    /// `hooks` symlink followed to each hook it links; not what lies in
    /// the repository itself, nor beyond its top and `hooks`.
    #[test]
    fn what_symlinks_inside_a_repository_lead_to_is_protected() {
        let _no_mounts = MOUNTS
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let link = |to: &str, at: &str| {
            std::fs::create_dir_all(root.join(at).parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(to, root.join(at)).unwrap();
        };
        // Android's `repo`: the worktree's `.git` leads to `projects`,
        // whose `hooks` and `objects` lead to `project-objects`, whose
        // hooks lead to `repo`'s own.
        for d in [
            ".repo/projects/p.git/refs",
            ".repo/project-objects/p.git/hooks",
            ".repo/project-objects/p.git/objects",
            ".repo/repo/hooks",
            "p",
            "scripts",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join(".repo/repo/hooks/commit-msg"), "#!/bin/sh\n").unwrap();
        link("../.repo/projects/p.git", "p/.git");
        link(
            "../../project-objects/p.git/hooks",
            ".repo/projects/p.git/hooks",
        );
        link(
            "../../project-objects/p.git/objects",
            ".repo/projects/p.git/objects",
        );
        link(
            "../../../repo/hooks/commit-msg",
            ".repo/project-objects/p.git/hooks/commit-msg",
        );
        // A plain repository whose hook and config are workspace files.
        std::fs::create_dir_all(root.join("w/.git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("w/.git/refs/heads")).unwrap();
        std::fs::write(root.join("scripts/pre-commit"), "#!/bin/sh\n").unwrap();
        link("../../../scripts/pre-commit", "w/.git/hooks/pre-commit");
        link("../../shared-config", "w/.git/config");
        // Inside the repository, or deeper than its top and hooks: not
        // followed.
        link("refs/heads/main", "w/.git/HEAD");
        link("../../../../deep", "w/.git/refs/heads/x");
        let expected = sorted(vec![
            root.join(".repo/project-objects/p.git/hooks"),
            root.join(".repo/project-objects/p.git/objects"),
            root.join(".repo/projects/p.git"),
            root.join(".repo/repo/hooks/commit-msg"),
            root.join("p/.git"),
            root.join("scripts/pre-commit"),
            root.join("shared-config"),
            root.join("w/.git"),
        ]);
        assert_eq!(sorted(scan_once(&root)), expected);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(sorted(cache.current()), expected);
        // `HEAD` leads through `refs/heads`, which no walk watches: the
        // links are followed on every call.
        assert_eq!(cache.current_if_unchanged(), None);
        assert_eq!(
            cache.leads_to_if_unchanged(&root.join("scripts/pre-commit")),
            None
        );
        // Without it, every directory they lead through is watched: no
        // walk, and no link followed, while nothing changes.
        std::fs::remove_file(root.join("w/.git/HEAD")).unwrap();
        assert_eq!(sorted(cache.current()), expected);
        let answered = counts(&cache).0;
        assert_eq!(
            cache.current_if_unchanged().map(sorted),
            Some(expected.clone())
        );
        assert_eq!(counts(&cache).0, answered + 1);
        // The file tools' question, answered the same way without a walk.
        for (path, hit) in [
            ("scripts/pre-commit", true),
            ("shared-config", true),
            (".repo/projects/p.git/config", true),
            ("scripts/build.sh", false),
            ("p/src/main.rs", false),
        ] {
            assert_eq!(cache.leads_to(&root.join(path)), hit, "{path}");
            assert_eq!(
                cache.leads_to_if_unchanged(&root.join(path)),
                Some(hit),
                "{path}"
            );
        }
        assert_eq!(counts(&cache).0, answered + 11);
        // A hook linked later, in a directory a link led to: reported.
        link(
            "../../../repo/hooks/pre-push",
            ".repo/project-objects/p.git/hooks/pre-push",
        );
        std::fs::write(root.join(".repo/repo/hooks/pre-push"), "").unwrap();
        assert_eq!(cache.current_if_unchanged(), None);
        let now = sorted(cache.current());
        assert!(
            now.contains(&root.join(".repo/repo/hooks/pre-push")),
            "{now:?}"
        );
        // Kept listings of the `.git` and its `hooks`: a symlink made in
        // either later is found.
        keep_listings(&cache, &[root.clone(), root.join("w"), root.join("w/.git")]);
        link(
            "../../../scripts/post-checkout",
            "w/.git/hooks/post-checkout",
        );
        link("../../info-elsewhere", "w/.git/info");
        std::fs::create_dir(root.join("info-elsewhere")).unwrap();
        let now = sorted(cache.current());
        for p in ["scripts/post-checkout", "info-elsewhere"] {
            assert!(now.contains(&root.join(p)), "{p}: {now:?}");
        }
    }

    /// A link that leads nowhere (yet) protects the entry where it stops:
    /// a command cannot make it (a breaker's finding: a dangling `.git`
    /// symlink, and the repository made where it points, with
    /// `core.fsmonitor`). So for a gitlink, a `commondir`, a hook link, a
    /// file in the middle of the path, and a loop (its links pinned).
    #[test]
    fn a_link_that_leads_nowhere_protects_where_it_stops() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let link = |to: &str, at: &str| {
            std::fs::create_dir_all(root.join(at).parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(to, root.join(at)).unwrap();
        };
        std::fs::create_dir_all(root.join(".repo/projects")).unwrap();
        link("../.repo/projects/p.git", "p/.git");
        link("../.nothing/projects/q.git", "q/.git");
        std::fs::create_dir_all(root.join("g")).unwrap();
        std::fs::write(root.join("g/.git"), "gitdir: ../sep/g.git\n").unwrap();
        std::fs::create_dir_all(root.join("f")).unwrap();
        std::fs::write(root.join("afile"), "").unwrap();
        link("../afile/x.git", "f/.git");
        link("b", "loop/a");
        link("a", "loop/b");
        link("../loop/a", "l/.git");
        std::fs::create_dir_all(root.join("wt.git/objects")).unwrap();
        std::fs::create_dir_all(root.join("wt")).unwrap();
        std::fs::write(root.join("wt/.git"), "gitdir: ../wt.git\n").unwrap();
        std::fs::write(root.join("wt.git/commondir"), "../main.git\n").unwrap();
        std::fs::create_dir_all(root.join("h/.git/hooks")).unwrap();
        link("../../../hooks-gone/pre-push", "h/.git/hooks/pre-push");
        let expected = sorted(vec![
            root.join(".nothing"),
            root.join(".repo/projects/p.git"),
            root.join("afile"),
            root.join("f/.git"),
            root.join("g/.git"),
            root.join("h/.git"),
            root.join("hooks-gone"),
            root.join("l/.git"),
            root.join("loop/a"),
            root.join("loop/b"),
            root.join("main.git"),
            root.join("p/.git"),
            root.join("q/.git"),
            root.join("sep"),
            root.join("wt.git"),
            root.join("wt/.git"),
        ]);
        assert_eq!(sorted(scan_once(&root)), expected);
    }

    /// Past the walk's budget, directories are protected whole and not
    /// read, but a `.git` directory already found is still read for its
    /// symlinks (a breaker's finding: entries made at the root used the
    /// budget up, and the root file a hook links to was writable).
    #[test]
    fn a_repository_past_the_budget_is_still_read_for_its_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for i in 0..20 {
            std::fs::write(root.join(format!("f{i:02}")), "").unwrap();
        }
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(root.join("pre-commit.sh"), "").unwrap();
        std::os::unix::fs::symlink("../../pre-commit.sh", root.join(".git/hooks/pre-commit"))
            .unwrap();
        let mut listings = Listings {
            watching: Watching::Never,
            max_entries: Some(10),
            ..Listings::default()
        };
        assert_eq!(
            sorted(listings.walk(&root)),
            [
                root.join(".git"),
                root.join("d"),
                root.join("pre-commit.sh")
            ]
        );
    }

    /// A `.git` directory (not a link) with a `commondir` file: git runs
    /// the common dir's hooks and config for it, so that is protected too
    /// (a breaker's finding), with what its symlinks lead to; and followed
    /// again when the file changes.
    #[test]
    fn a_git_directorys_common_dir_is_protected() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("wt/.git")).unwrap();
        std::fs::write(root.join("wt/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join("wt/.git/commondir"), "../../shared.git\n").unwrap();
        std::fs::create_dir_all(root.join("shared.git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("other.git")).unwrap();
        std::fs::write(root.join("hook.sh"), "").unwrap();
        std::os::unix::fs::symlink("../../hook.sh", root.join("shared.git/hooks/pre-commit"))
            .unwrap();
        let expected = [
            root.join("hook.sh"),
            root.join("shared.git"),
            root.join("wt/.git"),
        ];
        assert_eq!(sorted(scan_once(&root)), expected);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(sorted(cache.current()), expected);
        assert_eq!(cache.current_if_unchanged(), None, "a file is read");
        std::fs::write(root.join("wt/.git/commondir"), "../../other.git\n").unwrap();
        assert_eq!(
            sorted(cache.current()),
            [root.join("other.git"), root.join("wt/.git")]
        );
    }

    /// A `hooks` symlink to a directory inside the same repository, which no
    /// walk reads, is read for the hooks it links (a breaker's finding);
    /// a link to the workspace root protects what would make the root a
    /// repository, not the root whole (a breaker's finding).
    #[test]
    fn hooks_inside_the_repository_and_a_link_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("k/.git/hooks.d")).unwrap();
        std::fs::create_dir_all(root.join("k/scripts")).unwrap();
        std::os::unix::fs::symlink("hooks.d", root.join("k/.git/hooks")).unwrap();
        std::os::unix::fs::symlink("../../scripts/pc", root.join("k/.git/hooks.d/pre-commit"))
            .unwrap();
        std::fs::create_dir_all(root.join("p")).unwrap();
        std::os::unix::fs::symlink("..", root.join("p/.git")).unwrap();
        let mut expected = vec![
            root.join("k/.git"),
            root.join("k/scripts/pc"),
            root.join("p/.git"),
        ];
        for name in ["HEAD", "config", "commondir", "hooks", "objects", "refs"] {
            expected.push(root.join(name));
        }
        assert_eq!(sorted(scan_once(&root)), sorted(expected));
    }

    /// A gitlink is read as git reads it: after the exact `gitdir: `, to
    /// the end less line ends, spaces included (`s.git ` is another
    /// directory than `s.git`); `gitdir:` without its space is no gitlink
    /// to git.
    #[test]
    fn a_gitlink_is_read_as_git_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["s.git", "s.git ", "t.git", "p", "q"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("p/.git"), "gitdir: ../s.git \r\n").unwrap();
        std::fs::write(root.join("q/.git"), "gitdir:../t.git\n").unwrap();
        assert_eq!(
            sorted(scan_once(&root)),
            [
                root.join("p/.git"),
                root.join("q/.git"),
                root.join("s.git ")
            ]
        );
    }

    /// Calls answered without a walk so far, and directories the last walk
    /// read.
    /// A mount anywhere in the process's namespace is reported to every
    /// watcher (the mount table's notification): the test that mounts
    /// runs alone among those that count walks.
    static MOUNTS: std::sync::RwLock<()> = std::sync::RwLock::new(());

    fn counts(cache: &ProtectedPaths) -> (u64, usize) {
        let l = cache.listings.lock().unwrap();
        (l.answered_unchanged, l.reread)
    }

    /// A watched workspace is not walked again until one of its
    /// directories reports a change; then every kind of change is found:
    /// a `.git` made at any depth, a tree holding one moved in from
    /// outside or within, a directory swapped for a symlink, a `.git`
    /// removed, a gitlink's content changed (no directory changes).
    #[test]
    fn a_watched_workspace_is_walked_again_only_after_a_change() {
        let _no_mounts = MOUNTS
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        abc_tree(&root);
        std::fs::create_dir_all(root.join("sepgd")).unwrap();
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        let cache = ProtectedPaths::new(&root);
        let none: Vec<PathBuf> = Vec::new();
        assert_eq!(cache.current(), none);
        assert_eq!(counts(&cache), (0, 6), "the first call walks");
        assert_eq!(cache.current(), none);
        assert_eq!(cache.current(), none);
        assert_eq!(counts(&cache).0, 2, "nothing changed: no walk");
        // A `.git` two levels down.
        std::fs::create_dir(root.join("a/b/.git")).unwrap();
        assert_eq!(cache.current(), [root.join("a/b/.git")]);
        assert_eq!(counts(&cache).0, 2, "a change: a walk");
        assert_eq!(cache.current(), [root.join("a/b/.git")]);
        assert_eq!(counts(&cache).0, 3);
        // A tree with a `.git` deep inside, moved in from outside.
        std::fs::create_dir_all(outside.path().join("t/u/v/.git")).unwrap();
        std::fs::rename(outside.path().join("t"), root.join("c/t")).unwrap();
        let expected = [root.join("a/b/.git"), root.join("c/t/u/v/.git")];
        assert_eq!(sorted(cache.current()), expected);
        assert_eq!(sorted(cache.current()), expected);
        assert_eq!(counts(&cache).0, 4);
        // Moved within the workspace: found at its new place.
        std::fs::rename(root.join("c/t/u"), root.join("a/u")).unwrap();
        let expected = [root.join("a/b/.git"), root.join("a/u/v/.git")];
        assert_eq!(sorted(cache.current()), expected);
        // A directory of the walk swapped for a symlink to one with a
        // `.git`: not followed, and its old `.git` is gone with it.
        std::fs::rename(root.join("a/b"), outside.path().join("b")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("b"), root.join("a/b")).unwrap();
        assert_eq!(cache.current(), [root.join("a/u/v/.git")]);
        // Removed.
        std::fs::remove_dir_all(root.join("a/u/v/.git")).unwrap();
        assert_eq!(cache.current(), none);
        assert_eq!(cache.current(), none);
        // From an async task: answered without a walk.
        assert_eq!(cache.current_if_unchanged(), Some(none.clone()));
        let answered = counts(&cache).0;
        // A gitlink written, then changed in place: the file is read on
        // every call, walk or not.
        std::fs::write(root.join("c/.git"), "gitdir: ../sepgd\n").unwrap();
        assert_eq!(
            sorted(cache.current()),
            [root.join("c/.git"), root.join("sepgd")]
        );
        assert_eq!(counts(&cache).0, answered, "a new file: a walk");
        std::fs::write(root.join("c/.git"), "gitdir: ../elsewhere\n").unwrap();
        assert_eq!(
            sorted(cache.current()),
            [root.join("c/.git"), root.join("elsewhere")]
        );
        assert_eq!(counts(&cache).0, answered + 1, "a file's content: no walk");
        // A gitlink must be read: not from an async task.
        assert_eq!(cache.current_if_unchanged(), None);
        assert_eq!(counts(&cache).0, answered + 1);
    }

    /// A change reported by a watch makes the next call walk, and that walk
    /// reads again only the directory whose `ctime` moved (a breaker's
    /// finding: every listing was dropped, 521 directories read in full
    /// after any file was made anywhere).
    #[test]
    fn after_a_report_only_the_changed_directory_is_read() {
        let _no_mounts = MOUNTS
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        abc_tree(&root);
        let cache = ProtectedPaths::new(&root);
        {
            let mut l = cache.listings.lock().unwrap();
            l.walk_at(&root, SystemTime::now() + RACY_MARGIN * 2);
            assert_eq!((l.dirs.len(), l.reread), (4, 4));
            assert!(l.armed().is_some());
        }
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(counts(&cache), (1, 4), "answered by the watches");
        std::fs::write(root.join("a/b/file"), "x").unwrap();
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(counts(&cache), (1, 1), "a walk that read a/b only");
    }

    /// The watches are on directories, the cache is found by the root's
    /// path: a directory above the root moved away and another tree put
    /// at the same path (a workspace re-provisioned under its name)
    /// reports nothing to them, and must still be walked (a breaker's
    /// finding with named workspaces).
    #[test]
    fn a_new_directory_at_the_roots_path_is_walked() {
        let _no_mounts = MOUNTS
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let root = base.join("tenant/ws");
        abc_tree(&root);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(counts(&cache).0, 1);
        std::fs::rename(base.join("tenant"), base.join("tenant-old")).unwrap();
        std::fs::create_dir_all(root.join("repo/.git/hooks")).unwrap();
        assert_eq!(cache.current(), [root.join("repo/.git")]);
        assert_eq!(counts(&cache).0, 1, "walked");
    }

    /// A walk the watches cannot prove (here: kept listings read without
    /// a watch) gives the watches back and walks without them; after
    /// [`FIRST_BACKOFF_WALKS`] walks it watches the workspace again, every
    /// directory read anew.
    #[test]
    fn an_unprovable_walk_gives_the_watches_back_for_a_while() {
        let _no_mounts = MOUNTS
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let all = abc_tree(&root);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        keep_listings(&cache, &all);
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        {
            let l = cache.listings.lock().unwrap();
            assert!(matches!(l.watching, Watching::Off { backoff: 64, .. }));
            assert!(l.dirs.values().all(|d| d.wd.is_none()));
        }
        for _ in 0..FIRST_BACKOFF_WALKS - 1 {
            assert_eq!(cache.current(), Vec::<PathBuf>::new());
        }
        assert_eq!(counts(&cache), (0, 0), "walks on kept listings");
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(counts(&cache), (0, 4), "watched again: read anew");
        assert!(matches!(
            cache.listings.lock().unwrap().watching,
            Watching::On(_)
        ));
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(counts(&cache).0, 1);
    }

    /// A filesystem mounted over a watched directory changes none of its
    /// listings (the watch is on the directory beneath): the mount table's
    /// notification makes the next call walk, which sees the new device.
    #[test]
    fn a_mount_over_a_watched_directory_is_walked() {
        let _mounting = MOUNTS
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        use std::ffi::CString;
        struct Unmount(CString);
        impl Drop for Unmount {
            fn drop(&mut self) {
                // SAFETY: a valid path.
                unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        abc_tree(&root);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(cache.current(), Vec::<PathBuf>::new());
        assert_eq!(counts(&cache).0, 1);
        let target = CString::new(root.join("c").as_os_str().as_bytes()).unwrap();
        // SAFETY: valid NUL-terminated strings, no data.
        let rc = unsafe {
            libc::mount(
                c"none".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        assert_eq!(
            rc,
            0,
            "this test mounts a tmpfs and needs root (CAP_SYS_ADMIN), as CI runs it: {}",
            std::io::Error::last_os_error()
        );
        let _unmount = Unmount(target);
        std::fs::create_dir(root.join("c/.git")).unwrap();
        assert_eq!(cache.current(), [root.join("c/.git")]);
        assert_eq!(counts(&cache).0, 1, "the mount made it walk");
    }

    /// A linked worktree of a bare repository (`git -C main.git worktree
    /// add ../wt`): the worktree's git dir and, through its `commondir`,
    /// the bare repository whose hooks and config git runs for it are
    /// protected, on a walk and on a call answered without one; a
    /// `commondir` rewritten in place is followed.
    #[test]
    fn a_worktrees_common_dir_is_protected() {
        let _no_mounts = MOUNTS
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("main.git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("main.git/worktrees/wt")).unwrap();
        std::fs::create_dir_all(root.join("other.git")).unwrap();
        std::fs::write(root.join("main.git/worktrees/wt/commondir"), "../..\n").unwrap();
        std::fs::create_dir_all(root.join("wt")).unwrap();
        std::fs::write(
            root.join("wt/.git"),
            format!("gitdir: {}\n", root.join("main.git/worktrees/wt").display()),
        )
        .unwrap();
        let expected = [
            root.join("main.git"),
            root.join("main.git/worktrees/wt"),
            root.join("wt/.git"),
        ];
        assert_eq!(sorted(scan_once(&root)), expected);
        let cache = ProtectedPaths::new(&root);
        assert_eq!(sorted(cache.current()), expected);
        assert_eq!(sorted(cache.current()), expected);
        assert_eq!(counts(&cache).0, 1);
        std::fs::write(
            root.join("main.git/worktrees/wt/commondir"),
            format!("{}\n", root.join("other.git").display()),
        )
        .unwrap();
        assert_eq!(
            sorted(cache.current()),
            [
                root.join("main.git/worktrees/wt"),
                root.join("other.git"),
                root.join("wt/.git"),
            ]
        );
    }

    #[test]
    fn settled_needs_the_margin() {
        let now = SystemTime::now();
        let secs = |t: SystemTime| {
            let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
            (d.as_secs() as i64, d.subsec_nanos() as i64)
        };
        assert!(!settled(secs(now), now));
        assert!(!settled(secs(now - RACY_MARGIN / 2), now));
        assert!(settled(secs(now - RACY_MARGIN * 2), now));
        assert!(!settled((-1, 0), now));
    }
}
