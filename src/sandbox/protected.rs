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
//! **Why not the alternatives.** Re-walking after every command that could
//! write costs the full walk again after every shell command (any of them
//! may write), which is the cost this removes; and it would miss a `.git`
//! made outside the server (`git clone` by the user), which today's walk
//! catches. inotify would need a watch per directory (a per-user kernel
//! limit shared with editors and other services), careful handling of queue
//! overflow and of renamed directories (watches follow inodes, not paths),
//! and would still need a full walk as the fallback; the `ctime` check is a
//! pure function of what `statx` returns at the moment of the walk.
//!
//! What stays as before: a `.git` made by a command that runs *concurrently*
//! with another command's start (another session) may be missed by that
//! start, exactly as with a walk in the worker; every later command sees it.

#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
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
    (0x794C_7630, "overlayfs"),
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

    /// Every `.git` (directory or file) beneath the root now, plus,
    /// fail-closed, every directory that could not be listed and every
    /// directory not reached within [`MAX_SCAN_ENTRIES`]. Blocking: one
    /// `statx` per directory whose listing is kept, a full read of the
    /// others; call it off the async runtime.
    pub fn current(&self) -> Vec<PathBuf> {
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
        let found = listings.walk(&self.root);
        tracing::debug!(
            root = %self.root.display(),
            protected = found.len(),
            kept = listings.dirs.len(),
            reread = listings.reread,
            micros = started.elapsed().as_micros() as u64,
            "protected paths"
        );
        found
    }
}

/// Every protected path beneath `root` as [`ProtectedPaths::current`] finds
/// it, without keeping anything (the worker's fallback when the server
/// passed no set).
pub fn scan_once(root: &Path) -> Vec<PathBuf> {
    Listings::default().walk(root)
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
    /// Entries in it (counted against [`MAX_SCAN_ENTRIES`]).
    entries: usize,
    /// Its entry named `.git`, if any.
    git: GitEntry,
    /// Its subdirectories (not symlinks, not `.git`), in listing order, by
    /// full path.
    subdirs: Vec<Arc<OsStr>>,
    /// The last walk that reached it unchanged or read it.
    seen: u64,
}

/// A directory's entry named `.git`. Its type cannot change without the
/// directory's `ctime`, so a kept listing still knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitEntry {
    Absent,
    /// A regular file: a gitlink, whose repository may be elsewhere (see
    /// [`push_git`]).
    Gitlink,
    /// A directory, symlink, FIFO, …
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
        self.check_clock();
        let started = SystemTime::now();
        self.walks += 1;
        let mark = self.walks;
        let mut found = Vec::new();
        let mut queue: VecDeque<Arc<OsStr>> = VecDeque::from([Arc::from(root.as_os_str())]);
        let mut budget = MAX_SCAN_ENTRIES;
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
        while let Some(dir) = queue.pop_front() {
            if budget == 0 {
                found.push(PathBuf::from(&*dir));
                found.extend(queue.drain(..).map(|d| PathBuf::from(&*d)));
                break;
            }
            let rel = beneath_root(root.as_os_str(), &dir);
            if let Some(old) = self.dirs.get_mut(&dir)
                && unchanged(root_fd.as_ref(), rel, &dir, old)
            {
                old.seen = mark;
                budget = budget.saturating_sub(old.entries);
                push_git(&mut found, root, Path::new(&*dir), old.git);
                queue.extend(old.subdirs.iter().cloned());
                continue;
            }
            self.reread += 1;
            match read(Path::new(&*dir), started) {
                Read::Listed { mut listing, keep } => {
                    budget = budget.saturating_sub(listing.entries);
                    push_git(&mut found, root, Path::new(&*dir), listing.git);
                    queue.extend(listing.subdirs.iter().cloned());
                    if keep {
                        listing.seen = mark;
                        self.dirs.insert(dir, listing);
                    }
                }
                Read::Gone => {}
                Read::Unreadable => found.push(PathBuf::from(&*dir)),
            }
        }
        // Directories not reached (removed, moved, changed and not yet
        // settled, beyond the budget) are forgotten.
        self.dirs.retain(|_, listing| listing.seen == mark);
        found
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

/// Protects `dir`'s `.git`, if it has one (`git`), and, when that is a
/// gitlink file (`gitdir: PATH`, as `git init --separate-git-dir` and `git
/// worktree` write), the repository it names when that lies in the workspace outside
/// any `.git` (one inside a `.git`, as submodules' and worktrees' are, is
/// protected with it): writing there is writing the repository (hooks,
/// `config`), as a breaker showed. The file is read on every walk, kept
/// listing or not: its content can change without its directory's `ctime`.
fn push_git(found: &mut Vec<PathBuf>, root: &Path, dir: &Path, git: GitEntry) {
    if git == GitEntry::Absent {
        return;
    }
    let dotgit = dir.join(PROTECTED_NAME);
    if git == GitEntry::Gitlink
        && let Some(target) = gitlink_target(&dotgit)
        && let Ok(rel) = target.strip_prefix(root)
        && !rel.as_os_str().is_empty()
        && !is_protected_path(rel)
    {
        found.push(target);
    }
    found.push(dotgit);
}

/// Most of a gitlink file read: git writes one `gitdir: PATH` line.
const MAX_GITLINK_BYTES: u64 = 4096;

/// The directory a gitlink file names, canonical; `None` when `dotgit` is
/// not a regular file or names nothing that exists. Opened without
/// following a symlink and without blocking (a FIFO named `.git`), and at
/// most 4 KiB read.
fn gitlink_target(dotgit: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dotgit)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_GITLINK_BYTES).read_to_end(&mut text).ok()?;
    let line = text.split(|b| *b == b'\n').next()?;
    let named = line.strip_prefix(b"gitdir:")?.trim_ascii();
    if named.is_empty() {
        return None;
    }
    // Relative to the directory holding the file, as git reads it.
    let target = dotgit.parent()?.join(OsStr::from_bytes(named));
    let target = std::fs::canonicalize(target).ok()?;
    target.is_dir().then_some(target)
}

/// Reads `dir` through an fd opened without following a symlink, so that
/// its identity, `ctime` and listing belong to the same directory.
fn read(dir: &Path, walk_started: SystemTime) -> Read {
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
    let trusted = on_trusted_filesystem(&file);
    let ctime = (meta.ctime(), meta.ctime_nsec());
    let Ok(entries) = cap_std::fs::Dir::from_std_file(file).entries() else {
        return Read::Unreadable;
    };
    let mut listing = Listing {
        dev: meta.dev(),
        ino: meta.ino(),
        ctime,
        entries: 0,
        git: GitEntry::Absent,
        subdirs: Vec::new(),
        seen: 0,
    };
    for entry in entries {
        // An entry that cannot be read leaves the listing incomplete.
        let Ok(entry) = entry else {
            return Read::Unreadable;
        };
        listing.entries += 1;
        let name = entry.file_name();
        if name == ".git" {
            listing.git = if entry.file_type().is_ok_and(|t| t.is_file()) {
                GitEntry::Gitlink
            } else {
                GitEntry::Other
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
    // SAFETY: fstatfs writes into a zeroed local struct through a valid fd.
    let magic = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(file.as_raw_fd(), &mut st) != 0 {
            return false;
        }
        st.f_type as i64
    };
    TRUSTED_FILESYSTEMS.iter().any(|(m, _)| *m == magic)
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
        let later = SystemTime::now() + RACY_MARGIN * 2;
        for d in dirs {
            let Read::Listed { listing, keep } = read(d, later) else {
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
        let Read::Listed { listing, keep } = read(dir.path(), later) else {
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
