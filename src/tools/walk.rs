//! The directory walk shared by `glob`, `grep_search` and `list_directory`,
//! so that ignore rules apply to all three the same way.
//!
//! It is ripgrep's own walker (`ignore::WalkBuilder`): `.gitignore` files
//! (nested ones, and those of parent directories up to the repository root,
//! which may lie above the workspace root), `.git/info/exclude`, `.ignore`,
//! and the project ignore files [`PROJECT_IGNORE_FILES`]. `.git` itself is
//! never walked. Symlinks are not followed: a link is reported only when
//! its target stays beneath the root, and a link leading outside is left
//! out and counted, so no search reads a file outside the workspace through
//! a link. Three ways to walk, all on every core:
//!
//! - [`walk_parallel`] (`build_parallel`, one thread per core, as `rg`
//!   walks) hands entries to one visitor per thread in no particular order;
//! - [`walk`] collects those and visits them in path order (the order of a
//!   sequential walk sorted by file name), for tools that take every entry;
//! - [`walk_files`] walks sequentially in path order, advanced in turns by
//!   one searching thread per core, each taking the next regular files in
//!   that order, for a search that wants the first matches in path order
//!   and may stop early.
//!
//! The walker works on paths, so a directory swapped for a symlink while it
//! walks could make it read a directory outside. Nothing the walk reports
//! is therefore taken on the walker's word: every directory it enters is
//! opened and listed beneath the root (`openat2` `RESOLVE_BENEATH` through
//! one directory fd of the workspace root held for the whole walk), every
//! other entry is looked up again beneath the root ([`Check::Stat`]) or,
//! for a search that opens the files anyway ([`Check::Open`]), opened
//! beneath the root without following a symlink by [`Found::open`] and
//! checked on the opened fd by the caller: in [`walk_files`], by its name
//! in the fd its directory was listed through (one plain `openat` of one
//! component per file, ~10% cheaper than an `openat2` `RESOLVE_BENEATH` of
//! its path: S5 in BENCHMARKS.md, session 12), else by its path from the
//! root's fd (one `openat2` per file).
//!
//! The walker does not say what it skipped. The listing of each directory
//! it enters (made beneath the root, so no name from outside is counted)
//! minus the entries it yielded are the entries left out by ignore rules;
//! they are counted once the walk is complete.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ignore::{ParallelVisitor, ParallelVisitorBuilder, WalkState};
use tokio_util::sync::CancellationToken;

use crate::sandbox::{BeneathError, Workspace};

/// Project ignore files read in every directory (gitignore syntax) whether
/// or not git is used: ours, and Gemini CLI's so existing projects keep
/// their rules.
pub const PROJECT_IGNORE_FILES: &[&str] = &[".toolschedignore", ".geminiignore"];

/// Entries one walk visits before it stops and says so: a search of `/` of a
/// huge tree must end. Counted in batches of [`CHECK_EVERY`] per thread, so
/// a walk may visit up to `CHECK_EVERY` × threads entries more.
pub const MAX_WALK_ENTRIES: usize = 200_000;

/// Entries a walk thread visits between two looks at the cancellation token
/// and the shared entry count: the token takes a lock, and a counter shared
/// by every thread bounces between cores; 16 entries are well under a
/// millisecond of work.
const CHECK_EVERY: usize = 16;

/// Example names of left-out entries given in a result.
const LEFT_OUT_EXAMPLES: usize = 5;

/// How to walk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalkOptions {
    /// Apply `.gitignore` and `.git/info/exclude` (project ignore files and
    /// `.ignore` always apply).
    pub respect_git_ignore: bool,
    /// 1 = the directory's own entries only.
    pub max_depth: Option<usize>,
}

/// How a walk checks beneath the root the entries that are not directories
/// it enters (those are always opened and listed beneath it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Each entry is looked up again beneath the root (not following it):
    /// `is_dir` / `is_file` describe what is there. For tools that only
    /// name entries.
    Stat,
    /// Regular files (as the directory listing says) are not looked up:
    /// the visitor opens them with [`Found::open`], which opens beneath the
    /// root without following a symlink, and checks the type on the opened
    /// fd. Saves a lookup per file for tools that read every file.
    Open,
}

/// One entry the walk yields (never the walk's root), as [`walk`] visits it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// What to open through the workspace's beneath API: the entry's path,
    /// or a symlink's target inside the workspace.
    pub target: PathBuf,
    /// Path relative to the walk's root with `/` separators.
    pub rel: String,
    /// The entry (or a symlink's target) is a directory.
    pub is_dir: bool,
}

/// One entry as [`walk_parallel`] hands it to a visitor, borrowed from the
/// walker.
pub(crate) struct Found<'a> {
    /// The entry's path as the walker found it (the walk's root joined with
    /// `rel`); entries sort in walk order by it (`Path`'s component order).
    pub path: &'a Path,
    /// Path relative to the walk's root with `/` separators (lossy for
    /// names that are not UTF-8).
    pub rel: Cow<'a, str>,
    /// The entry (or a symlink's target) is a directory.
    pub is_dir: bool,
    /// The entry (or a symlink's target) is a regular file. With
    /// [`Check::Open`] this is what the directory listing said: the type
    /// must be checked on the fd [`Found::open`] gives.
    pub is_file: bool,
    /// A symlink's target inside the workspace, when the entry is a link.
    link_target: Option<&'a Path>,
    /// The entry relative to the workspace root, for opens through `dir`.
    in_ws: &'a Path,
    /// The workspace root's path and its fd, held for the whole walk.
    ws_root: &'a Path,
    dir: &'a cap_std::fs::Dir,
    /// The workspace: what is opened is checked against its hidden files.
    ws: &'a Workspace,
    /// The directory holding the entry, as the walk opened it beneath the
    /// root to list it, when the walk still holds it ([`walk_files`]).
    parent: Option<&'a HeldDir>,
}

impl Found<'_> {
    /// Opens the entry for reading beneath the workspace root. The entry
    /// itself is not followed if it is a symlink now (swapped in since the
    /// listing: [`BeneathError::Symlink`]). A symlink the walk reported is
    /// opened as its target, which must stay beneath the root.
    ///
    /// Where the walk holds the directory it listed the entry in (opened
    /// beneath the root when the walk entered it), the entry's name is
    /// opened in that directory: one plain `openat` of one component, which
    /// cannot leave it. A directory on the way swapped for a link out since
    /// then is not followed: the fd is the directory that was listed.
    /// Otherwise the path is opened through the root's fd (one `openat2`
    /// `RESOLVE_BENEATH`), where a directory on the way swapped for a link
    /// out gives [`BeneathError::Outside`]. A name missing from the held
    /// directory (the walker, which lists by path, may have listed another
    /// directory swapped in there) is looked up that way too, so a swap out
    /// is reported as one.
    ///
    /// Opened `O_NONBLOCK | O_NOCTTY` (a FIFO swapped in does not block the
    /// open); the caller checks the type with `File::metadata` on the fd.
    pub fn open(&self) -> Result<File, BeneathError> {
        if self.link_target.is_none()
            && let Some(parent) = self.parent
            && let Some(name) = single_name(self.path)
        {
            use rustix::fs::{Mode, OFlags};
            let flags = OFlags::RDONLY
                | OFlags::CLOEXEC
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::NOCTTY;
            match rustix::fs::openat(&**parent, name, flags, Mode::empty()) {
                Ok(fd) => return self.ws.refuse_hidden(File::from(fd), self.in_ws),
                Err(rustix::io::Errno::LOOP) => {
                    return Err(BeneathError::Symlink {
                        given: self.in_ws.to_string_lossy().into_owned(),
                    });
                }
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(BeneathError::from_io(self.in_ws, e.into())),
            }
        }
        self.open_from_root()
    }

    /// [`Found::open`] through the workspace root's fd.
    fn open_from_root(&self) -> Result<File, BeneathError> {
        use cap_std::fs::OpenOptionsExt;
        let (given, nofollow) = match self.link_target {
            Some(t) => (t, 0),
            None => (self.in_ws, libc::O_NOFOLLOW),
        };
        let rel = match self.link_target {
            Some(t) => ws_relative(self.ws_root, t),
            None => self.in_ws,
        };
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | nofollow);
        match self.dir.open_with(rel, &opts) {
            Ok(f) => self.ws.refuse_hidden(f.into_std(), given),
            Err(e) if nofollow != 0 && e.raw_os_error() == Some(libc::ELOOP) => {
                Err(BeneathError::Symlink {
                    given: given.to_string_lossy().into_owned(),
                })
            }
            Err(e) => Err(BeneathError::from_io(given, e)),
        }
    }
}

/// What a walk left out, for the "N entries were left out" note.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeftOut {
    /// Entries skipped by ignore rules (an ignored directory counts once).
    /// `None` when the walk stopped early and did not count them.
    pub ignored: Option<usize>,
    /// A few of them, relative to the walk's root (directories end in `/`).
    pub examples: Vec<String>,
    /// Symlinks that lead outside the workspace (or nowhere).
    pub outside_links: usize,
    /// Entries that could not be read.
    pub unreadable: usize,
    /// The walk stopped at [`MAX_WALK_ENTRIES`].
    pub hit_walk_limit: bool,
}

impl LeftOut {
    /// A sentence for the result, or an empty string when nothing was left
    /// out. `git_hint` says how the caller may include git-ignored entries.
    pub fn describe(&self, git_hint: &str) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.ignored
            && n > 0
        {
            let eg = if self.examples.is_empty() {
                String::new()
            } else {
                format!(
                    " (e.g. {}{})",
                    self.examples.join(", "),
                    if n > self.examples.len() { ", …" } else { "" }
                )
            };
            parts.push(format!(
                "{n} entr{} left out by ignore rules (.gitignore, {}){eg}{git_hint}",
                if n == 1 { "y was" } else { "ies were" },
                PROJECT_IGNORE_FILES.join(", ")
            ));
        }
        if self.outside_links > 0 {
            parts.push(format!(
                "{} symlink(s) leading outside the workspace (or nowhere) were left out",
                self.outside_links
            ));
        }
        if self.unreadable > 0 {
            parts.push(format!(
                "{} entr{} could not be read",
                self.unreadable,
                if self.unreadable == 1 { "y" } else { "ies" }
            ));
        }
        if self.hit_walk_limit {
            parts.push(format!(
                "the walk stopped after {MAX_WALK_ENTRIES} entries; pass a narrower dir_path to see the rest"
            ));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("{}.", parts.join("; "))
        }
    }

    /// As structured result fields.
    pub fn to_result(&self, result: &mut super::Args) {
        use serde_json::json;
        result.insert("ignored_entries".into(), json!(self.ignored));
        result.insert("outside_symlinks".into(), json!(self.outside_links));
        result.insert("unreadable_entries".into(), json!(self.unreadable));
        result.insert("walk_limit_hit".into(), json!(self.hit_walk_limit));
    }
}

/// What a visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// Do not descend into this directory (no effect on other entries).
    /// The walk is then incomplete: nothing is counted as ignored.
    Skip,
    /// Stop the whole walk (every thread).
    Stop,
}

/// A per-thread visitor of [`walk_parallel`].
pub(crate) trait Visitor: Send {
    /// Called for every entry ignore rules keep, on the thread that found it.
    fn visit(&mut self, entry: &Found<'_>) -> Flow;
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Every entry was visited.
    Complete,
    /// A visitor said [`Flow::Stop`] or [`Flow::Skip`], or the walk hit
    /// [`MAX_WALK_ENTRIES`].
    Partial,
    /// The token was cancelled.
    Cancelled,
}

/// Walks `root` (a canonical directory inside `ws`) on one thread per core
/// and calls a visitor of its thread (each made by `make`) for every entry
/// ignore rules keep, in no particular order. Returns what was left out,
/// how the walk ended and the visitors, to merge their results.
///
/// Stops when a visitor says so or `token` is cancelled (then `ignored` is
/// `None`); every thread looks at the token every [`CHECK_EVERY`] entries,
/// and a visitor that reads files should look between files.
pub(crate) fn walk_parallel<V: Visitor>(
    ws: &Workspace,
    root: &Path,
    opts: WalkOptions,
    check: Check,
    token: &CancellationToken,
    make: &(dyn Fn() -> V + Sync),
) -> (LeftOut, Ended, Vec<V>) {
    let shared = Shared::new(ws, root, opts, check, token);
    let done: Mutex<Vec<ThreadState<V>>> = Mutex::new(Vec::new());
    builder(root, opts, ws.hidden())
        .threads(0)
        .build_parallel()
        .visit(&mut WorkerBuilder {
            shared: &shared,
            done: &done,
            make,
        });
    let states = done.into_inner().unwrap_or_else(|e| e.into_inner());
    finish(root, &shared, states)
}

/// Files a searching thread takes from the walk in one turn: one turn at
/// the walk's lock per batch rather than per file, yet few enough that the
/// threads search files in nearly path order.
const FILE_BATCH: usize = 32;

/// Walks `root` (a canonical directory inside `ws`) in path order (the
/// sequential walker sorted by file name), checking each entry as
/// [`walk_parallel`] does ([`Check::Open`]), on one thread per core, each
/// with its visitor made by `make`: the threads take turns advancing the
/// walk by a batch of [`FILE_BATCH`] regular files, which the thread then
/// visits, in that order. Returns what was left out, how the walk ended
/// and the visitors.
///
/// Files are thus opened in nearly path order on every core: a search that
/// only needs the first matches in path order can say [`Flow::Stop`] as
/// soon as it has them, and no thread takes another batch (the files of
/// batches already taken are still visited). Cancelling `token` stops each
/// thread after the file it is on.
///
/// The walk advances on the searching threads, as `rg`'s walk does, rather
/// than on a walking thread of its own that hands batches over a channel:
/// the walk is a fraction of the searches' work, so a thread of its own
/// mostly waited on a full queue, and every batch cost a wake-up and a
/// context switch on each side (S5 in BENCHMARKS.md, session 10).
pub(crate) fn walk_files<V: Visitor>(
    ws: &Workspace,
    root: &Path,
    opts: WalkOptions,
    token: &CancellationToken,
    make: &(dyn Fn() -> V + Sync),
) -> (LeftOut, Ended, Vec<V>) {
    let shared = Shared::new(ws, root, opts, Check::Open, token);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS));
    let stop = AtomicBool::new(false);
    let done: Mutex<Vec<ThreadState<Queued>>> = Mutex::new(Vec::new());
    let mut walker = builder(root, opts, ws.hidden());
    // Siblings share their parent's path, so comparing whole paths byte-wise
    // orders them by file name, as `sort_by_file_name` would, without taking
    // every name apart again for each comparison (walkdir's `file_name()`
    // parses the path from its end).
    walker.sort_by_file_path(|a, b| a.as_os_str().cmp(b.as_os_str()));
    let mut checker = Worker::new(&shared, &done, Queued(Vec::with_capacity(FILE_BATCH)));
    checker.held = Some(Held(Vec::new()));
    let walk = Mutex::new(InOrder {
        entries: walker.build(),
        checker,
        skip_under: None,
        ended: false,
    });
    let visitors = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let _stop = StopOnPanic {
                        shared: &shared,
                        stop: &stop,
                    };
                    let mut visitor = make();
                    search_files(&shared, &walk, &stop, &mut visitor);
                    visitor
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().ok())
            .collect::<Vec<V>>()
    });
    // The checker hands its state back to `done` when dropped.
    drop(walk);
    let states = std::mem::take(&mut *done.lock().unwrap_or_else(|e| e.into_inner()));
    let (left, ended, _) = finish(root, &shared, states);
    (left, ended, visitors)
}

/// Threads of a walk at most (the `ignore` crate's own cap).
const MAX_THREADS: usize = 12;

/// A file taken by a searching thread, owned (its path relative to the
/// walk's root is the tail of `path`).
struct FileJob {
    path: PathBuf,
    link_target: Option<PathBuf>,
    /// The directory it was listed in, opened beneath the root.
    dir: Option<HeldDir>,
}

/// A directory the walk entered, as it was opened beneath the root to be
/// listed; shared by the jobs of its files, which are opened in it.
type HeldDir = Arc<OwnedFd>;

/// The walk's visitor in [`walk_files`]: queues the regular files for the
/// thread whose turn it is.
struct Queued(Vec<FileJob>);

impl Visitor for Queued {
    fn visit(&mut self, e: &Found<'_>) -> Flow {
        if e.is_file {
            self.0.push(FileJob {
                path: e.path.to_path_buf(),
                link_target: e.link_target.map(Path::to_path_buf),
                dir: e.parent.cloned(),
            });
        }
        Flow::Continue
    }
}

/// The sorted walk of [`walk_files`], advanced under its lock by the
/// searching thread whose turn it is.
struct InOrder<'s> {
    entries: ignore::Walk,
    /// Checks each entry beneath the root and counts it, as the threads of
    /// [`walk_parallel`] do; queues the regular files.
    checker: Worker<'s, Queued>,
    /// A directory the checker refused: what lies below it is passed over.
    skip_under: Option<PathBuf>,
    ended: bool,
}

impl InOrder<'_> {
    /// The next [`FILE_BATCH`] regular files in path order (fewer at the
    /// end of the walk; none once it ended). A search that said stop ends
    /// the walk here, as incomplete.
    fn next_batch(&mut self, stop: &AtomicBool) -> Vec<FileJob> {
        if stop.load(Ordering::Relaxed) && !self.ended {
            self.checker.shared.partial.store(true, Ordering::Relaxed);
            self.ended = true;
        }
        while !self.ended && self.queued().is_some_and(|q| q.len() < FILE_BATCH) {
            let Some(result) = self.entries.next() else {
                self.ended = true;
                break;
            };
            if let (Some(under), Ok(dent)) = (&self.skip_under, &result) {
                if dent.path().starts_with(under) {
                    continue;
                }
                self.skip_under = None;
            }
            // Only a directory is ever skipped; its path is kept for that.
            let skip = match &result {
                Ok(dent) if dent.depth() > 0 && dent.file_type().is_some_and(|t| t.is_dir()) => {
                    Some(dent.path().to_path_buf())
                }
                _ => None,
            };
            match self.checker.visit(result) {
                WalkState::Continue => {}
                WalkState::Skip => self.skip_under = skip,
                WalkState::Quit => self.ended = true,
            }
        }
        self.queued()
            .map(|q| std::mem::replace(q, Vec::with_capacity(FILE_BATCH)))
            .unwrap_or_default()
    }

    fn queued(&mut self) -> Option<&mut Vec<FileJob>> {
        self.checker.state.as_mut().map(|st| &mut st.visitor.0)
    }
}

/// Should a searching thread panic, the others take no more files and the
/// walk ends as incomplete.
struct StopOnPanic<'a> {
    shared: &'a Shared<'a>,
    stop: &'a AtomicBool,
}

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.stop.store(true, Ordering::Relaxed);
            self.shared.partial.store(true, Ordering::Relaxed);
        }
    }
}

/// A searching thread of [`walk_files`]: takes a batch of files from the
/// walk and visits them, until the walk ends, a search says stop or the
/// token is cancelled.
fn search_files<V: Visitor>(
    shared: &Shared<'_>,
    walk: &Mutex<InOrder<'_>>,
    stop: &AtomicBool,
    visitor: &mut V,
) {
    loop {
        if shared.token.is_cancelled() {
            return;
        }
        let batch = match walk.lock() {
            Ok(mut walk) => walk.next_batch(stop),
            // A thread panicked during its turn: the walk is not resumed.
            Err(_) => return,
        };
        if batch.is_empty() {
            return;
        }
        for job in &batch {
            let in_ws_bytes = tail(&job.path, shared.ws_bytes);
            let found = Found {
                path: &job.path,
                rel: String::from_utf8_lossy(tail(&job.path, shared.root_bytes)),
                is_dir: false,
                is_file: true,
                link_target: job.link_target.as_deref(),
                in_ws: Path::new(OsStr::from_bytes(in_ws_bytes)),
                ws_root: shared.ws.root(),
                dir: shared.dir,
                ws: shared.ws,
                parent: job.dir.as_ref(),
            };
            if visitor.visit(&found) == Flow::Stop {
                stop.store(true, Ordering::Relaxed);
                if shared.token.is_cancelled() {
                    return;
                }
            }
        }
    }
}

/// How the walk ended, and what was left out, from the threads' states.
fn finish<V>(
    root: &Path,
    shared: &Shared<'_>,
    states: Vec<ThreadState<V>>,
) -> (LeftOut, Ended, Vec<V>) {
    let mut left = LeftOut::default();
    if shared.token.is_cancelled() {
        shared.cancelled.store(true, Ordering::Relaxed);
    }
    left.hit_walk_limit = shared.hit_limit.load(Ordering::Relaxed);
    let ended = if shared.cancelled.load(Ordering::Relaxed) {
        Ended::Cancelled
    } else if shared.partial.load(Ordering::Relaxed) || left.hit_walk_limit {
        Ended::Partial
    } else {
        Ended::Complete
    };
    let mut visitors = Vec::with_capacity(states.len());
    let mut kept: Vec<PathBuf> = Vec::new();
    let mut per_dir: HashMap<OsString, usize> = HashMap::new();
    let mut errored: Vec<PathBuf> = Vec::new();
    let mut listed: Vec<(PathBuf, Vec<(OsString, bool)>)> = Vec::new();
    for st in states {
        left.outside_links += st.outside_links;
        left.unreadable += st.unreadable;
        if kept.is_empty() {
            kept = st.kept;
        } else {
            kept.extend(st.kept);
        }
        for (dir, n) in st.per_dir {
            *per_dir.entry(dir).or_default() += n;
        }
        errored.extend(st.errored);
        listed.extend(st.listed);
        visitors.push(st.visitor);
    }
    if ended == Ended::Complete {
        let failed = count_errored(&kept, errored, &mut per_dir);
        kept.extend(failed);
        // The service's own files are not there to the tools: not even as
        // entries left out.
        let hidden = shared.ws.hidden();
        if !hidden.is_empty() {
            for (dir, names) in &mut listed {
                names.retain(|(name, _)| !hidden.iter().any(|h| *h == dir.join(name)));
            }
        }
        count_ignored(root, &kept, &per_dir, &mut listed, &mut left);
    }
    (left, ended, visitors)
}

/// Walks `root` (a canonical directory inside `ws`), then calls `visit` for
/// every entry ignore rules keep in path order (that of a sequential walk
/// sorted by file name), each looked up again beneath the root
/// ([`Check::Stat`]); returns what was left out. Stops when `visit` says
/// so or `token` is cancelled (then `ignored` is `None`); [`Flow::Skip`]
/// leaves out what lies below the directory just visited.
pub(crate) fn walk(
    ws: &Workspace,
    root: &Path,
    opts: WalkOptions,
    token: &CancellationToken,
    mut visit: impl FnMut(Entry) -> Flow,
) -> LeftOut {
    /// Collects one thread's entries with their sort key.
    struct Collect(Vec<(PathBuf, Entry)>);
    impl Visitor for Collect {
        fn visit(&mut self, e: &Found<'_>) -> Flow {
            let entry = Entry {
                target: e.link_target.unwrap_or(e.path).to_path_buf(),
                rel: e.rel.clone().into_owned(),
                is_dir: e.is_dir,
            };
            self.0.push((e.path.to_path_buf(), entry));
            Flow::Continue
        }
    }
    let (mut left, ended, parts) =
        walk_parallel(ws, root, opts, Check::Stat, token, &|| Collect(Vec::new()));
    let mut all: Vec<(PathBuf, Entry)> = parts.into_iter().flat_map(|c| c.0).collect();
    all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if ended == Ended::Cancelled {
        return left;
    }
    let mut skip_under: Option<PathBuf> = None;
    for (path, entry) in all {
        if skip_under.as_ref().is_some_and(|s| path.starts_with(s)) {
            continue;
        }
        match visit(entry) {
            Flow::Continue => {}
            Flow::Skip => {
                left.ignored = None;
                left.examples.clear();
                skip_under = Some(path);
            }
            Flow::Stop => {
                left.ignored = None;
                left.examples.clear();
                break;
            }
        }
    }
    left
}

/// The walker with the ignore rules every walk uses; the service's own
/// files (`hidden`, see `Workspace::with_hidden`) are never yielded.
fn builder(
    root: &Path,
    opts: WalkOptions,
    hidden: std::sync::Arc<[std::path::PathBuf]>,
) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .hidden(false)
        .parents(true)
        .ignore(true)
        .git_ignore(opts.respect_git_ignore)
        .git_exclude(opts.respect_git_ignore)
        // The server's user's global gitignore is not the project's rule.
        .git_global(false)
        .require_git(true)
        .follow_links(false)
        .max_depth(opts.max_depth)
        .filter_entry(move |e| e.file_name() != ".git" && !hidden.iter().any(|h| h == e.path()));
    for name in PROJECT_IGNORE_FILES {
        builder.add_custom_ignore_filename(name);
    }
    builder
}

/// What every walk thread shares.
struct Shared<'a> {
    ws: &'a Workspace,
    /// The workspace root's fd (opened once, when the server started): every
    /// lookup and open goes through it beneath the root.
    dir: &'a cap_std::fs::Dir,
    /// Bytes of the walk's root path (entries' paths start with it).
    root_bytes: usize,
    /// Bytes of the workspace root path.
    ws_bytes: usize,
    opts: WalkOptions,
    check: Check,
    token: &'a CancellationToken,
    /// Entries visited, in batches of [`CHECK_EVERY`].
    count: AtomicUsize,
    /// A visitor stopped or skipped, or the limit was hit.
    partial: AtomicBool,
    hit_limit: AtomicBool,
    cancelled: AtomicBool,
}

impl<'a> Shared<'a> {
    fn new(
        ws: &'a Workspace,
        root: &Path,
        opts: WalkOptions,
        check: Check,
        token: &'a CancellationToken,
    ) -> Self {
        Self {
            ws,
            dir: ws.dir(),
            root_bytes: root.as_os_str().as_bytes().len(),
            ws_bytes: ws.root().as_os_str().as_bytes().len(),
            opts,
            check,
            token,
            count: AtomicUsize::new(0),
            partial: AtomicBool::new(false),
            hit_limit: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
        }
    }
}

/// One thread's results, handed back when its worker is dropped.
struct ThreadState<V> {
    visitor: V,
    outside_links: usize,
    unreadable: usize,
    /// Every entry the walker yielded, for the ignored count.
    kept: Vec<PathBuf>,
    /// How many of them each directory holds (by its path).
    per_dir: HashMap<OsString, usize>,
    /// Paths of entries the walker failed on (or failed to read an ignore
    /// file of): kept too, unless yielded as well.
    errored: Vec<PathBuf>,
    /// Each entered directory and its listing beneath the root (name, is a
    /// directory), `.git` left out.
    listed: Vec<(PathBuf, Vec<(OsString, bool)>)>,
}

impl<V> ThreadState<V> {
    /// Records an entry the walker yielded.
    fn keep(&mut self, path: PathBuf) {
        let (parent, _) = split_name(&path);
        match self.per_dir.get_mut(OsStr::from_bytes(parent)) {
            Some(n) => *n += 1,
            None => {
                self.per_dir
                    .insert(OsStr::from_bytes(parent).to_os_string(), 1);
            }
        }
        self.kept.push(path);
    }
}

/// A path's parent and name as bytes (split at the last `/`; walker paths
/// have no trailing one).
fn split_name(path: &Path) -> (&[u8], &[u8]) {
    let b = path.as_os_str().as_bytes();
    match b.iter().rposition(|&c| c == b'/') {
        Some(i) => (&b[..i.max(1)], &b[i + 1..]),
        None => (&[], b),
    }
}

/// The last component of `path` when it is a plain name that an `openat`
/// in its directory cannot take anywhere else (not empty, `.` or `..`).
fn single_name(path: &Path) -> Option<&OsStr> {
    let (_, name) = split_name(path);
    (!name.is_empty() && name != b"." && name != b"..").then(|| OsStr::from_bytes(name))
}

struct WorkerBuilder<'s, V> {
    shared: &'s Shared<'s>,
    done: &'s Mutex<Vec<ThreadState<V>>>,
    make: &'s (dyn Fn() -> V + Sync),
}

impl<'s, V: Visitor + 's> ParallelVisitorBuilder<'s> for WorkerBuilder<'s, V> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Worker::new(self.shared, self.done, (self.make)()))
    }
}

struct Worker<'s, V> {
    shared: &'s Shared<'s>,
    done: &'s Mutex<Vec<ThreadState<V>>>,
    /// Always `Some` until dropped.
    state: Option<ThreadState<V>>,
    since_check: usize,
    /// The directories a sequential walk is in, when it keeps them.
    held: Option<Held>,
    /// The buffer directories are listed into.
    dirents: Vec<std::mem::MaybeUninit<u8>>,
}

/// Bytes of a directory listing read per `getdents64`: a hundred entries or
/// so of a source tree at once.
const DIRENT_BUF_BYTES: usize = 16 * 1024;

/// The directories entered on the way to a sequential walk's current entry
/// (depth, path, the fd each was listed through). Only [`walk_files`] keeps
/// them: its walk yields entries depth first in path order, so the
/// directory holding an entry is the last one entered above it, and its
/// files are opened in it ([`Found::open`]).
struct Held(Vec<(usize, PathBuf, HeldDir)>);

impl Held {
    /// The directory holding `path` (at `depth`), once those the walk has
    /// left are dropped; `None` when it was not entered (not listed).
    fn parent_of(&mut self, depth: usize, path: &Path) -> Option<&HeldDir> {
        while self.0.last().is_some_and(|(d, _, _)| *d >= depth) {
            self.0.pop();
        }
        let (d, dir, fd) = self.0.last()?;
        (*d + 1 == depth && split_name(path).0 == dir.as_os_str().as_bytes()).then_some(fd)
    }
}

impl<'s, V> Worker<'s, V> {
    /// A walk thread's checker around `visitor`; its state goes to `done`
    /// when it is dropped.
    fn new(shared: &'s Shared<'s>, done: &'s Mutex<Vec<ThreadState<V>>>, visitor: V) -> Self {
        Worker {
            shared,
            done,
            state: Some(ThreadState {
                visitor,
                outside_links: 0,
                unreadable: 0,
                kept: Vec::new(),
                per_dir: HashMap::new(),
                errored: Vec::new(),
                listed: Vec::new(),
            }),
            since_check: 0,
            held: None,
            dirents: Vec::new(),
        }
    }
}

impl<V> Drop for Worker<'_, V> {
    fn drop(&mut self) {
        if let Some(st) = self.state.take() {
            self.done.lock().unwrap_or_else(|e| e.into_inner()).push(st);
        }
    }
}

/// Bytes of `path` after `prefix_len` bytes and the separator after them.
fn tail(path: &Path, prefix_len: usize) -> &[u8] {
    let b = path.as_os_str().as_bytes();
    let t = b.get(prefix_len..).unwrap_or(&[]);
    t.strip_prefix(b"/").unwrap_or(t)
}

/// `abs` relative to the workspace root `ws_root`, `.` for the root itself.
fn ws_relative<'a>(ws_root: &Path, abs: &'a Path) -> &'a Path {
    let t = tail(abs, ws_root.as_os_str().as_bytes().len());
    if t.is_empty() {
        Path::new(".")
    } else {
        Path::new(OsStr::from_bytes(t))
    }
}

/// What a look beneath the root found for an entry.
enum Looked {
    Here {
        link_target: Option<PathBuf>,
        is_dir: bool,
        is_file: bool,
    },
    Outside,
    Unreadable,
}

impl<V: Visitor> Worker<'_, V> {
    /// Looks `path` (`in_ws` beneath the root) up again without following
    /// it; a symlink is reported as its target when that resolves inside
    /// the workspace.
    fn look(&self, path: &Path, in_ws: &Path) -> Looked {
        let sh = self.shared;
        let here = match sh.dir.symlink_metadata(in_ws) {
            Ok(m) => m,
            Err(e) => {
                return match BeneathError::from_io(in_ws, e) {
                    BeneathError::Outside { .. } => Looked::Outside,
                    _ => Looked::Unreadable,
                };
            }
        };
        if !here.file_type().is_symlink() {
            return Looked::Here {
                link_target: None,
                is_dir: here.is_dir(),
                is_file: here.is_file(),
            };
        }
        // Only a link whose target resolves inside the workspace is
        // reported, as that target (an absolute link into the workspace is
        // fine, though RESOLVE_BENEATH itself refuses absolute links); a
        // tool opens the target beneath the root.
        let Some(Ok(t)) = path.to_str().map(|p| sh.ws.resolve(p)) else {
            return Looked::Outside;
        };
        match sh.dir.metadata(ws_relative(sh.ws.root(), &t)) {
            Ok(m) => Looked::Here {
                is_dir: m.is_dir(),
                is_file: m.is_file(),
                link_target: Some(t),
            },
            Err(_) => Looked::Outside,
        }
    }

    /// Opens the directory `in_ws` beneath the root (a symlink is followed
    /// while it stays beneath it) and lists it through that fd, `.git` left
    /// out; returns the fd too.
    fn list(&mut self, in_ws: &Path) -> Result<(OwnedFd, Vec<(OsString, bool)>), BeneathError> {
        use cap_std::fs::OpenOptionsExt;
        use rustix::fs::{AtFlags, FileType, RawDir};
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.read(true).custom_flags(libc::O_DIRECTORY);
        let dir = OwnedFd::from(
            self.shared
                .dir
                .open_with(in_ws, &opts)
                .map_err(|e| BeneathError::from_io(in_ws, e))?
                .into_std(),
        );
        if self.dirents.len() < DIRENT_BUF_BYTES {
            self.dirents = vec![std::mem::MaybeUninit::uninit(); DIRENT_BUF_BYTES];
        }
        let mut names = Vec::new();
        let mut read = RawDir::new(&dir, &mut self.dirents);
        // A failed `getdents64` ends the listing (as cap-std's `read_dir`
        // yields nothing after an error): what was read is counted.
        while let Some(Ok(child)) = read.next() {
            let name = child.file_name().to_bytes();
            if name == b"." || name == b".." || name == b".git" {
                continue;
            }
            let is_dir = match child.file_type() {
                FileType::Directory => true,
                // The file system does not say: look (not following it).
                FileType::Unknown => {
                    rustix::fs::statat(&dir, child.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
                }
                _ => false,
            };
            names.push((OsStr::from_bytes(name).to_os_string(), is_dir));
        }
        Ok((dir, names))
    }

    /// Every `CHECK_EVERY` entries: the token and the entry limit.
    fn checkpoint(&mut self) -> Option<WalkState> {
        self.since_check += 1;
        if self.since_check < CHECK_EVERY {
            return None;
        }
        let sh = self.shared;
        let n = sh.count.fetch_add(self.since_check, Ordering::Relaxed) + self.since_check;
        self.since_check = 0;
        if sh.token.is_cancelled() {
            sh.cancelled.store(true, Ordering::Relaxed);
            return Some(WalkState::Quit);
        }
        if n > MAX_WALK_ENTRIES {
            sh.hit_limit.store(true, Ordering::Relaxed);
            return Some(WalkState::Quit);
        }
        None
    }
}

impl<V: Visitor> ParallelVisitor for Worker<'_, V> {
    fn visit(&mut self, result: Result<ignore::DirEntry, ignore::Error>) -> WalkState {
        if let Some(quit) = self.checkpoint() {
            return quit;
        }
        let sh = self.shared;
        let dent = match result {
            Ok(d) => d,
            Err(e) => {
                if let Some(st) = self.state.as_mut() {
                    // The path of a failed entry is in the error; keep it
                    // out of the ignored count.
                    if let Some(p) = error_path(&e) {
                        st.errored.push(p);
                    }
                    st.unreadable += 1;
                }
                return WalkState::Continue;
            }
        };
        let depth = dent.depth();
        let enter = sh.opts.max_depth.is_none_or(|m| depth < m);
        let ft = dent.file_type();
        let path = dent.path();
        let in_ws_bytes = tail(path, sh.ws_bytes);
        let in_ws = if in_ws_bytes.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(in_ws_bytes))
        };
        let is_real_dir = ft.is_some_and(|t| t.is_dir());
        if depth == 0 {
            // The walk's root: listed beneath the root for the ignored
            // count. If it moved out since the call checked it, the listing
            // fails and each entry the walker finds there is refused below.
            if is_real_dir
                && enter
                && let Ok((fd, names)) = self.list(in_ws)
                && let Some(st) = self.state.as_mut()
            {
                st.listed.push((path.to_path_buf(), names));
                if let Some(held) = self.held.as_mut() {
                    held.0.clear();
                    held.0.push((0, path.to_path_buf(), Arc::new(fd)));
                }
            }
            return WalkState::Continue;
        }
        let rel = String::from_utf8_lossy(tail(path, sh.root_bytes));
        let parent = self
            .held
            .as_mut()
            .and_then(|h| h.parent_of(depth, path).cloned());
        let mut listing = None;
        let looked = if is_real_dir && enter {
            // Entered: opened and listed beneath the root, which also checks
            // it is still a directory beneath it.
            match self.list(in_ws) {
                Ok((fd, names)) => {
                    listing = Some(names);
                    if let Some(held) = self.held.as_mut() {
                        held.0.push((depth, path.to_path_buf(), Arc::new(fd)));
                    }
                    Looked::Here {
                        link_target: None,
                        is_dir: true,
                        is_file: false,
                    }
                }
                Err(BeneathError::Outside { .. }) => Looked::Outside,
                Err(_) => Looked::Unreadable,
            }
        } else if sh.check == Check::Open && ft.is_some_and(|t| t.is_file()) {
            // Opened by the visitor, beneath the root, not following it.
            Looked::Here {
                link_target: None,
                is_dir: false,
                is_file: true,
            }
        } else {
            self.look(path, in_ws)
        };
        let Some(st) = self.state.as_mut() else {
            return WalkState::Quit;
        };
        let (link_target, is_dir, is_file) = match looked {
            Looked::Here {
                link_target,
                is_dir,
                is_file,
            } => (link_target, is_dir, is_file),
            Looked::Outside => {
                st.outside_links += 1;
                st.keep(dent.into_path());
                return if is_real_dir {
                    // Not listed beneath the root: nothing below it is
                    // walked (the walker would read it through the link).
                    WalkState::Skip
                } else {
                    WalkState::Continue
                };
            }
            Looked::Unreadable => {
                st.unreadable += 1;
                st.keep(dent.into_path());
                return if is_real_dir {
                    WalkState::Skip
                } else {
                    WalkState::Continue
                };
            }
        };
        let found = Found {
            path,
            rel,
            is_dir,
            is_file,
            link_target: link_target.as_deref(),
            in_ws,
            ws_root: sh.ws.root(),
            dir: sh.dir,
            ws: sh.ws,
            parent: parent.as_ref(),
        };
        let flow = st.visitor.visit(&found);
        drop(found);
        if let Some(names) = listing
            && flow == Flow::Continue
        {
            st.listed.push((path.to_path_buf(), names));
        }
        st.keep(dent.into_path());
        match flow {
            Flow::Continue => WalkState::Continue,
            Flow::Skip => {
                sh.partial.store(true, Ordering::Relaxed);
                WalkState::Skip
            }
            Flow::Stop => {
                sh.partial.store(true, Ordering::Relaxed);
                WalkState::Quit
            }
        }
    }
}

/// The entries the walker failed on that it did not also yield (a
/// directory it could not read was yielded first), added to `per_dir`:
/// they are not ignored.
fn count_errored(
    kept: &[PathBuf],
    errored: Vec<PathBuf>,
    per_dir: &mut HashMap<OsString, usize>,
) -> Vec<PathBuf> {
    if errored.is_empty() {
        return errored;
    }
    let mut errored: HashSet<PathBuf> = errored.into_iter().collect();
    for p in kept {
        errored.remove(p);
    }
    for p in &errored {
        let (parent, _) = split_name(p);
        *per_dir
            .entry(OsStr::from_bytes(parent).to_os_string())
            .or_default() += 1;
    }
    errored.into_iter().collect()
}

/// The entries of the listed directories that the walk did not yield:
/// their number (each directory's listing minus the entries yielded in it)
/// and the first few names (in walk order of the directories, listing
/// order within one, then sorted).
fn count_ignored(
    root: &Path,
    kept: &[PathBuf],
    per_dir: &HashMap<OsString, usize>,
    listed: &mut [(PathBuf, Vec<(OsString, bool)>)],
    left: &mut LeftOut,
) {
    listed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut ignored = 0;
    for (dir, names) in listed.iter() {
        let yielded = per_dir.get(dir.as_os_str()).copied().unwrap_or(0);
        let missing = names.len().saturating_sub(yielded);
        if missing == 0 {
            continue;
        }
        ignored += missing;
        if left.examples.len() >= LEFT_OUT_EXAMPLES {
            continue;
        }
        // Names only for the few directories examples come from.
        let dir_bytes = dir.as_os_str().as_bytes();
        let here: HashSet<&[u8]> = kept
            .iter()
            .filter_map(|p| {
                let (parent, name) = split_name(p);
                (parent == dir_bytes).then_some(name)
            })
            .collect();
        for (name, is_dir) in names {
            if left.examples.len() >= LEFT_OUT_EXAMPLES {
                break;
            }
            if here.contains(name.as_bytes()) {
                continue;
            }
            let mut shown = relative(root, &dir.join(name));
            if *is_dir {
                shown.push('/');
            }
            left.examples.push(shown);
        }
    }
    left.examples.sort();
    left.ignored = Some(ignored);
}

fn error_path(e: &ignore::Error) -> Option<PathBuf> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path.clone()),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        _ => None,
    }
}

/// `path` relative to `root`, `/`-separated.
pub(crate) fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Joins a directory shown relative to the workspace (`.` for the root) and
/// an entry relative to it.
pub(crate) fn join_display(dir: &str, rel: &str) -> String {
    if dir == "." {
        rel.to_string()
    } else {
        format!("{dir}/{rel}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> WalkOptions {
        WalkOptions {
            respect_git_ignore: true,
            max_depth: None,
        }
    }

    /// The walk's directory (checked inside when the call was built) has a
    /// component swapped for a symlink out before the walk: the path-based
    /// walker reads the directory outside, but no entry of it is reported
    /// or named as left out, because each is looked up again beneath the
    /// root.
    #[test]
    fn a_walk_through_a_component_swapped_for_a_link_out_reports_nothing_from_outside() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::write(root.join("sub/deeper/inside.txt"), "in").unwrap();
        let outside = parent.path().join("outside");
        std::fs::create_dir_all(outside.join("deeper/nested")).unwrap();
        std::fs::write(outside.join("deeper/secret.txt"), "s").unwrap();
        std::fs::write(outside.join("deeper/.ignore"), "ignored.txt\n").unwrap();
        std::fs::write(outside.join("deeper/ignored.txt"), "s").unwrap();
        let ws = Workspace::new(&root).unwrap();
        let walk_root = ws.resolve("sub/deeper").unwrap();
        std::fs::rename(root.join("sub"), root.join("sub-old")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
        // The walker alone would list the outside directory.
        assert!(walk_root.join("secret.txt").exists());
        let mut seen = Vec::new();
        let left = walk(&ws, &walk_root, opts(), &CancellationToken::new(), |e| {
            seen.push(e.rel);
            Flow::Continue
        });
        assert!(seen.is_empty(), "{seen:?}");
        assert!(left.examples.is_empty(), "{:?}", left.examples);
        assert_eq!(left.ignored, Some(0));
        // .ignore, nested/ and secret.txt, each refused beneath the root.
        assert_eq!(left.outside_links, 3);
        // A search that opens the files refuses each at the open.
        struct Opens(Vec<String>);
        impl Visitor for Opens {
            fn visit(&mut self, e: &Found<'_>) -> Flow {
                if e.is_file {
                    match e.open() {
                        Ok(_) => self.0.push(format!("read {}", e.rel)),
                        Err(BeneathError::Outside { .. }) => {
                            self.0.push(format!("refused {}", e.rel))
                        }
                        Err(other) => self.0.push(format!("{}: {other}", e.rel)),
                    }
                }
                Flow::Continue
            }
        }
        let (left, ended, parts) = walk_parallel(
            &ws,
            &walk_root,
            opts(),
            Check::Open,
            &CancellationToken::new(),
            &|| Opens(Vec::new()),
        );
        let mut opened: Vec<String> = parts.into_iter().flat_map(|o| o.0).collect();
        opened.sort();
        assert_eq!(opened, ["refused .ignore", "refused secret.txt"]);
        assert_eq!(ended, Ended::Complete);
        assert_eq!(left.ignored, Some(0));
        // nested/ is a directory: refused when listed beneath the root.
        assert_eq!(left.outside_links, 1);
    }

    /// A file swapped for a symlink (to a file inside or outside) after the
    /// walk listed it is refused by the open: never read through.
    #[test]
    fn a_file_swapped_for_a_symlink_after_the_listing_is_not_opened() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("d/a.txt"), "a").unwrap();
        std::fs::write(root.join("d/b.txt"), "b").unwrap();
        std::fs::write(root.join("inside.txt"), "inside").unwrap();
        std::fs::write(parent.path().join("secret"), "secret").unwrap();
        let ws = Workspace::new(&root).unwrap();
        struct Swap<'a> {
            root: &'a Path,
            secret: &'a Path,
            seen: Vec<String>,
        }
        impl Visitor for Swap<'_> {
            fn visit(&mut self, e: &Found<'_>) -> Flow {
                if e.rel == "d/a.txt" || e.rel == "d/b.txt" {
                    let target = if e.rel == "d/a.txt" {
                        self.secret.to_path_buf()
                    } else {
                        self.root.join("inside.txt")
                    };
                    std::fs::remove_file(e.path).unwrap();
                    std::os::unix::fs::symlink(target, e.path).unwrap();
                    let got = match e.open() {
                        Ok(mut f) => {
                            let mut s = String::new();
                            std::io::Read::read_to_string(&mut f, &mut s).unwrap();
                            format!("read {s}")
                        }
                        Err(BeneathError::Symlink { .. }) => "refused: symlink".into(),
                        Err(other) => format!("{other}"),
                    };
                    self.seen.push(format!("{}: {got}", e.rel));
                }
                Flow::Continue
            }
        }
        let root_path = ws.root().to_path_buf();
        let secret = parent.path().join("secret");
        let make = || Swap {
            root: &root_path,
            secret: &secret,
            seen: Vec::new(),
        };
        let token = CancellationToken::new();
        let (_, _, parts) = walk_parallel(&ws, ws.root(), opts(), Check::Open, &token, &make);
        let mut seen: Vec<String> = parts.into_iter().flat_map(|s| s.seen).collect();
        seen.sort();
        assert_eq!(
            seen,
            ["d/a.txt: refused: symlink", "d/b.txt: refused: symlink"]
        );
        // The same through the searching threads of walk_files.
        for name in ["a.txt", "b.txt"] {
            std::fs::remove_file(root.join("d").join(name)).unwrap();
            std::fs::write(root.join("d").join(name), "x").unwrap();
        }
        let (_, _, parts) = walk_files(&ws, ws.root(), opts(), &token, &make);
        let mut seen: Vec<String> = parts.into_iter().flat_map(|s| s.seen).collect();
        seen.sort();
        assert_eq!(
            seen,
            ["d/a.txt: refused: symlink", "d/b.txt: refused: symlink"]
        );
    }

    /// `walk_files` opens a file in the directory it listed it in: a
    /// directory swapped for a symlink out after it was listed is not
    /// followed (the files opened are those of the directory listed, now
    /// moved), and nothing outside is read.
    #[test]
    fn walk_files_opens_in_the_directory_listed_not_one_swapped_in_since() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("d/a.txt"), "in-a").unwrap();
        std::fs::write(root.join("d/b.txt"), "in-b").unwrap();
        let outside = parent.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("a.txt"), "secret-a").unwrap();
        std::fs::write(outside.join("b.txt"), "secret-b").unwrap();
        let ws = Workspace::new(&root).unwrap();
        struct Swap<'a> {
            root: &'a Path,
            outside: &'a Path,
            seen: Vec<String>,
        }
        impl Visitor for Swap<'_> {
            fn visit(&mut self, e: &Found<'_>) -> Flow {
                if e.rel == "d/a.txt" {
                    std::fs::rename(self.root.join("d"), self.root.join("d-old")).unwrap();
                    std::os::unix::fs::symlink(self.outside, self.root.join("d")).unwrap();
                }
                let got = match e.open() {
                    Ok(mut f) => {
                        let mut s = String::new();
                        std::io::Read::read_to_string(&mut f, &mut s).unwrap();
                        format!("read {s}")
                    }
                    Err(other) => format!("{other}"),
                };
                self.seen.push(format!("{}: {got}", e.rel));
                Flow::Continue
            }
        }
        let root_path = ws.root().to_path_buf();
        let (_, ended, parts) =
            walk_files(&ws, ws.root(), opts(), &CancellationToken::new(), &|| {
                Swap {
                    root: &root_path,
                    outside: &outside,
                    seen: Vec::new(),
                }
            });
        assert_eq!(ended, Ended::Complete);
        let mut seen: Vec<String> = parts.into_iter().flat_map(|s| s.seen).collect();
        seen.sort();
        assert_eq!(seen, ["d/a.txt: read in-a", "d/b.txt: read in-b"]);
    }

    /// A name the walker found that is not in the directory held for it
    /// (the walker lists by path, so it may have listed another directory
    /// swapped in there) is opened from the root, where a swap out is
    /// refused as one.
    #[test]
    fn a_name_missing_from_the_held_directory_is_opened_from_the_root() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir_all(root.join("d")).unwrap();
        let outside = parent.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("only-outside.txt"), "secret").unwrap();
        let ws = Workspace::new(&root).unwrap();
        let held: HeldDir = Arc::new(OwnedFd::from(
            std::fs::File::open(ws.root().join("d")).unwrap(),
        ));
        std::fs::rename(root.join("d"), root.join("d-old")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        let path = ws.root().join("d/only-outside.txt");
        let found = Found {
            path: &path,
            rel: Cow::Borrowed("d/only-outside.txt"),
            is_dir: false,
            is_file: true,
            link_target: None,
            in_ws: Path::new("d/only-outside.txt"),
            ws_root: ws.root(),
            dir: ws.dir(),
            ws: &ws,
            parent: Some(&held),
        };
        assert!(
            matches!(found.open(), Err(BeneathError::Outside { .. })),
            "opened through the link out"
        );
    }

    /// What a sequential walk sorted by file name (the walker on one
    /// thread) yields, and what std::fs lists in the directories it enters
    /// that it did not yield: the reference the parallel walk must match.
    fn sequential(root: &Path) -> (Vec<String>, usize, Vec<String>) {
        let mut yielded = Vec::new();
        let mut kept = HashSet::new();
        let mut entered = vec![root.to_path_buf()];
        for dent in builder(root, opts(), std::sync::Arc::from([]))
            .sort_by_file_name(|a, b| a.cmp(b))
            .build()
        {
            let dent = dent.unwrap();
            if dent.depth() == 0 {
                continue;
            }
            let path = dent.path().to_path_buf();
            kept.insert(path.clone());
            if dent.path_is_symlink()
                && !std::fs::canonicalize(&path).is_ok_and(|t| t.starts_with(root))
            {
                continue;
            }
            if dent.file_type().is_some_and(|t| t.is_dir()) {
                entered.push(path.clone());
            }
            yielded.push(relative(root, &path));
        }
        let mut ignored = 0;
        let mut examples = Vec::new();
        for dir in &entered {
            for child in std::fs::read_dir(dir).unwrap() {
                let child = child.unwrap();
                let path = child.path();
                if child.file_name() == ".git" || kept.contains(&path) {
                    continue;
                }
                ignored += 1;
                if examples.len() < LEFT_OUT_EXAMPLES {
                    let mut name = relative(root, &path);
                    if child.file_type().unwrap().is_dir() {
                        name.push('/');
                    }
                    examples.push(name);
                }
            }
        }
        examples.sort();
        (yielded, ignored, examples)
    }

    /// A tree with .gitignore files at several levels, a project ignore
    /// file, `.git`, binary files, names whose path order differs from
    /// byte order (`a/`, `a-b/`, `a.b`), a link inside and one leading
    /// out: the parallel walk visits the same entries in the same order,
    /// and counts and names the same ignored entries, run after run.
    #[test]
    fn the_parallel_walk_matches_a_sequential_sorted_walk() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        let put = |rel: &str, content: &[u8]| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        };
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        put(".gitignore", b"target/\n*.log\n");
        put(".toolschedignore", b"private/\n");
        for d in 0..12 {
            for f in 0..15 {
                put(&format!("src/m{d}/f{f}.rs"), b"fn main() {}\n");
            }
            put(&format!("src/m{d}/blob.bin"), b"\x00\x01\x02");
            put(&format!("src/m{d}/run.log"), b"log\n");
            put(&format!("src/m{d}/deep/er/x.rs"), b"x\n");
        }
        put("src/m3/.gitignore", b"*.gen.rs\nf1*.rs\n");
        put("src/m3/out.gen.rs", b"gen\n");
        put("target/debug/build.rs", b"b\n");
        put("private/notes.txt", b"n\n");
        put("a/x.txt", b"a\n");
        put("a-b/x.txt", b"a-b\n");
        put("a.b", b"a.b\n");
        std::os::unix::fs::symlink("a.b", root.join("link-in")).unwrap();
        std::os::unix::fs::symlink(parent.path(), root.join("link-out")).unwrap();
        let ws = Workspace::new(&root).unwrap();
        let (want, want_ignored, want_examples) = sequential(ws.root());
        assert!(want.len() > 200, "{}", want.len());
        // 12 run.log, target/, private/, out.gen.rs and f1, f10..f14 in m3.
        assert_eq!(want_ignored, 12 + 2 + 1 + 6);
        for _ in 0..5 {
            let mut got = Vec::new();
            let left = walk(&ws, ws.root(), opts(), &CancellationToken::new(), |e| {
                got.push(e.rel);
                Flow::Continue
            });
            assert_eq!(got, want);
            assert_eq!(left.ignored, Some(want_ignored));
            assert_eq!(left.examples, want_examples);
            assert_eq!(left.outside_links, 1);
            assert_eq!(left.unreadable, 0);
        }
        // walk_files hands out the regular files (and the link to one) in
        // path order, and counts the same.
        struct Files(Vec<String>);
        impl Visitor for Files {
            fn visit(&mut self, e: &Found<'_>) -> Flow {
                assert!(e.is_file);
                self.0.push(e.rel.to_string());
                Flow::Continue
            }
        }
        let files: Vec<&String> = want
            .iter()
            .filter(|rel| ws.root().join(rel).is_file())
            .collect();
        assert!(files.len() > 200);
        for _ in 0..5 {
            let token = CancellationToken::new();
            let (left, ended, parts) =
                walk_files(&ws, ws.root(), opts(), &token, &|| Files(Vec::new()));
            assert_eq!(ended, Ended::Complete);
            let mut got: Vec<PathBuf> = Vec::new();
            for part in parts {
                let mine: Vec<PathBuf> = part.0.iter().map(PathBuf::from).collect();
                // Each thread gets its files in path order.
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "{mine:?}");
                got.extend(mine);
            }
            got.sort();
            let got: Vec<String> = got.iter().map(|p| relative(Path::new(""), p)).collect();
            assert_eq!(got.iter().collect::<Vec<_>>(), files);
            assert_eq!(left.ignored, Some(want_ignored));
            assert_eq!(left.examples, want_examples);
            assert_eq!(left.outside_links, 1);
        }
    }

    /// A visitor cancels the token mid-walk: every thread stops within a
    /// few entries, the walk says Cancelled and counts nothing as ignored.
    #[test]
    fn cancellation_mid_walk_stops_every_thread() {
        let dir = tempfile::tempdir().unwrap();
        for d in 0..40 {
            let sub = dir.path().join(format!("d{d}"));
            std::fs::create_dir(&sub).unwrap();
            for f in 0..50 {
                std::fs::write(sub.join(format!("f{f}")), "x").unwrap();
            }
        }
        let ws = Workspace::new(dir.path()).unwrap();
        let token = CancellationToken::new();
        let visited = AtomicUsize::new(0);
        struct Cancel<'a> {
            token: &'a CancellationToken,
            visited: &'a AtomicUsize,
        }
        impl Visitor for Cancel<'_> {
            fn visit(&mut self, _: &Found<'_>) -> Flow {
                if self.visited.fetch_add(1, Ordering::Relaxed) == 100 {
                    self.token.cancel();
                }
                Flow::Continue
            }
        }
        let (left, ended, _) =
            walk_parallel(&ws, ws.root(), opts(), Check::Open, &token, &|| Cancel {
                token: &token,
                visited: &visited,
            });
        assert_eq!(ended, Ended::Cancelled);
        assert_eq!(left.ignored, None);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(12));
        let visited = visited.load(Ordering::Relaxed);
        assert!(
            visited <= 101 + threads * CHECK_EVERY,
            "{visited} of 2040 entries visited"
        );
    }

    /// A searching thread says stop at its first file: no thread takes
    /// another batch, whatever the scheduling, so at most the batches in
    /// the threads' hands (one each) are visited, all of each.
    #[test]
    fn walk_files_stops_handing_out_files_when_a_search_says_stop() {
        let dir = tempfile::tempdir().unwrap();
        for d in 0..40 {
            let sub = dir.path().join(format!("d{d:02}"));
            std::fs::create_dir(&sub).unwrap();
            for f in 0..50 {
                std::fs::write(sub.join(format!("f{f:02}")), "x").unwrap();
            }
        }
        let ws = Workspace::new(dir.path()).unwrap();
        let visited = AtomicUsize::new(0);
        struct First<'a>(&'a AtomicUsize);
        impl Visitor for First<'_> {
            fn visit(&mut self, _: &Found<'_>) -> Flow {
                self.0.fetch_add(1, Ordering::Relaxed);
                Flow::Stop
            }
        }
        let token = CancellationToken::new();
        let (left, ended, _) = walk_files(&ws, ws.root(), opts(), &token, &|| First(&visited));
        assert_eq!(ended, Ended::Partial);
        assert_eq!(left.ignored, None);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS));
        let visited = visited.load(Ordering::Relaxed);
        assert!(
            visited <= threads * FILE_BATCH && visited < 2000,
            "{visited} of 2000 files visited"
        );
        assert_eq!(visited % FILE_BATCH, 0, "whole batches: {visited}");
    }
}
