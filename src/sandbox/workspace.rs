//! The workspace root, path resolution inside it, and race-free file access
//! beneath it.
//!
//! [`Workspace::resolve`] is a guardrail for messages and prompts: it checks a
//! path *now*. The `*_beneath` methods are what file tools should open files
//! with: they go through `cap-std`, which resolves every component relative
//! to a directory fd of the root with openat2 `RESOLVE_BENEATH` (or a
//! component-wise emulation where openat2 is missing), so a symlink or `..`
//! swapped in between a check and the open cannot lead outside the root.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Why a path was refused.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The path (after resolving symlinks and `..`) is outside the root.
    #[error(
        "Path '{given}' resolves outside the workspace root {root}. Use a path inside the workspace."
    )]
    OutsideWorkspace { given: String, root: String },
    #[error("Path is empty")]
    Empty,
    #[error("Path '{given}' contains a NUL byte")]
    Nul { given: String },
    /// The root path no longer names the directory opened at start.
    #[error(
        "The workspace root {root} was moved, replaced or removed after the server started (it no longer names the directory the server opened); nothing was done. Restart toolsched on the workspace."
    )]
    RootMoved { root: String },
    #[error("Cannot resolve '{given}': {source}")]
    Io {
        given: String,
        #[source]
        source: io::Error,
    },
    /// One of the service's own files (see [`Workspace::with_hidden`]).
    #[error(
        "Path '{given}' is one of toolsched's own files (its config, token, policy, TLS key or JWKS file), which no tool reads or writes. Use another path."
    )]
    ServiceFile { given: String },
}

/// Why an access beneath the root failed.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// The path, or a symlink met on the way, leads outside the root.
    #[error("Path '{given}' resolves outside the workspace root. Use a path inside the workspace.")]
    Outside { given: String },
    #[error("Path is empty")]
    Empty,
    /// The file opened is one of the service's own (see
    /// [`Workspace::with_hidden`]).
    #[error(
        "Path '{given}' is one of toolsched's own files (its config, token, policy, TLS key or JWKS file), which no tool reads or writes. Use another path."
    )]
    ServiceFile { given: String },
    /// The last component is a symlink where none may be
    /// ([`Workspace::open_nofollow_beneath`]).
    #[error("Path '{given}' is now a symlink; it was swapped in after the path was checked.")]
    Symlink { given: String },
    /// Any other I/O error (not found, is a directory, permission, …).
    #[error("{given}: {source}")]
    Io {
        given: String,
        #[source]
        source: io::Error,
    },
}

impl BeneathError {
    /// Classifies an I/O error of an access beneath the root (through a
    /// `cap_std::fs::Dir` of it) of the path `given`.
    pub(crate) fn from_io(given: &Path, source: io::Error) -> Self {
        // cap-std reports escapes (openat2's EXDEV, or its own emulation's
        // check) as PermissionDenied with this message.
        if source.kind() == io::ErrorKind::PermissionDenied
            && source.to_string().contains("outside of the filesystem")
        {
            return BeneathError::Outside {
                given: shown(given),
            };
        }
        BeneathError::Io {
            given: shown(given),
            source,
        }
    }

    /// The underlying I/O error, when there is one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            BeneathError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The directory tools work in. The root is canonical (symlinks resolved) so
/// that containment is a component-wise prefix check: `/root-evil` is not
/// inside `/root`.
///
/// The root directory is opened once: every beneath access starts from that
/// fd (no re-open of the root per access), so the workspace is the directory
/// that was at the root path when the server started.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    dir: Arc<cap_std::fs::Dir>,
    /// Device and inode of `dir`: the root path must still name it.
    root_id: (u64, u64),
    blocking_io: bool,
    /// The service's own files (canonical), see [`Workspace::with_hidden`].
    hidden: Arc<[PathBuf]>,
    /// Their devices and inodes: what an open is checked against.
    hidden_ids: Arc<[(u64, u64)]>,
}

impl Workspace {
    /// Opens `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> io::Result<Self> {
        let root = std::fs::canonicalize(root.as_ref())?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("workspace root {} is not a directory", root.display()),
            ));
        }
        let dir = cap_std::fs::Dir::open_ambient_dir(&root, cap_std::ambient_authority())?;
        let meta = rustix::fs::fstat(&dir)?;
        Ok(Self {
            root,
            dir: Arc::new(dir),
            root_id: (meta.st_dev, meta.st_ino),
            blocking_io: false,
            hidden: Arc::from([]),
            hidden_ids: Arc::from([]),
        })
    }

    /// With the service's own files `hidden` (canonical: the config file,
    /// which may hold the auth token, the token file, the policy files,
    /// the TLS key, the JWKS): no tool resolves a path to one
    /// ([`PathError::ServiceFile`]) nor meets one in a walk (`grep_search`,
    /// `glob`), as the sandbox keeps them from commands (a breaker's
    /// finding: `read_file` returned the token, `write_file` emptied the
    /// policy file, in yolo). Directories among them are left out.
    pub fn with_hidden(mut self, hidden: &[PathBuf]) -> Self {
        use std::os::unix::fs::MetadataExt;
        self.hidden = hidden.iter().filter(|p| p.is_file()).cloned().collect();
        self.hidden_ids = self
            .hidden
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| (m.dev(), m.ino()))
            .collect();
        self
    }

    /// `file` (opened for `given`), unless it is one of the service's own
    /// files, by device and inode: a path checked by name could be
    /// reached through a directory swapped for a symlink since, or a hard
    /// link (a breaker's finding: `grep_search` on a directory a command
    /// kept swapping with a link to the config's returned the token).
    pub fn refuse_hidden(
        &self,
        file: std::fs::File,
        given: &Path,
    ) -> Result<std::fs::File, BeneathError> {
        if self.hidden_ids.is_empty() {
            return Ok(file);
        }
        match rustix::fs::fstat(&file) {
            Ok(st) if !self.hidden_ids.contains(&(st.st_dev, st.st_ino)) => Ok(file),
            _ => Err(BeneathError::ServiceFile {
                given: shown(given),
            }),
        }
    }

    /// The service's own files (see [`Self::with_hidden`]).
    pub fn hidden(&self) -> Arc<[PathBuf]> {
        self.hidden.clone()
    }

    /// Whether `path` (canonical) is one of the service's own files.
    pub fn is_hidden(&self, path: &Path) -> bool {
        self.hidden.iter().any(|h| h == path)
    }

    /// With `on`, tools do all their file I/O on the blocking thread pool,
    /// small reads included: for a workspace on a network filesystem, where
    /// an open or a read can stall the async runtime's thread.
    pub fn with_blocking_io(mut self, on: bool) -> Self {
        self.blocking_io = on;
        self
    }

    /// Whether all file I/O goes to the blocking pool (see
    /// [`Workspace::with_blocking_io`]); otherwise small reads run inline.
    pub fn blocking_io(&self) -> bool {
        self.blocking_io
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `given` (absolute, or relative to the root) to an absolute
    /// path inside the root. Symlinks of the existing part are resolved; the
    /// part that does not exist yet is appended by components and may not
    /// contain `..`. A symlink or `..` that leaves the root is refused.
    ///
    /// This is a guardrail in our own code; the kernel-level boundary is the
    /// sandbox's job. Blocking: call it off the async runtime for slow disks.
    pub fn resolve(&self, given: &str) -> Result<PathBuf, PathError> {
        let path = self.resolve_any(given)?;
        if self.is_hidden(&path) {
            return Err(PathError::ServiceFile {
                given: given.to_string(),
            });
        }
        Ok(path)
    }

    /// [`Self::resolve`], the service's own files included.
    fn resolve_any(&self, given: &str) -> Result<PathBuf, PathError> {
        if given.is_empty() {
            return Err(PathError::Empty);
        }
        if given.contains('\0') {
            return Err(PathError::Nul {
                given: given.to_string(),
            });
        }
        // Tools open through the held root fd while commands and listings
        // use the root path: both must name the same directory.
        match rustix::fs::stat(&self.root) {
            Ok(meta) if (meta.st_dev, meta.st_ino) == self.root_id => {}
            _ => {
                return Err(PathError::RootMoved {
                    root: self.root.display().to_string(),
                });
            }
        }
        if let Some(plain) = self.resolve_plain(given) {
            return Ok(plain);
        }
        let joined = self.root.join(given);
        // Walk from the full path up to the deepest ancestor that exists,
        // canonicalize that, then re-append the missing tail.
        let mut existing = joined.as_path();
        let mut tail: Vec<&std::ffi::OsStr> = Vec::new();
        let canonical = loop {
            match std::fs::canonicalize(existing) {
                Ok(c) => break c,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // A dangling symlink must not be written through: it could
                    // point anywhere once created.
                    if existing.symlink_metadata().is_ok() {
                        return Err(self.outside(given));
                    }
                    match (existing.parent(), existing.file_name()) {
                        (Some(parent), Some(name)) => {
                            tail.push(name);
                            existing = parent;
                        }
                        // `..` as the last component, or the filesystem root.
                        _ => return Err(self.outside(given)),
                    }
                }
                Err(source) => {
                    return Err(PathError::Io {
                        given: given.to_string(),
                        source,
                    });
                }
            }
        };
        let mut resolved = canonical;
        for name in tail.iter().rev() {
            match Path::new(name).components().next() {
                Some(Component::Normal(_)) => resolved.push(name),
                _ => return Err(self.outside(given)),
            }
        }
        if resolved.starts_with(&self.root) {
            Ok(resolved)
        } else {
            Err(self.outside(given))
        }
    }

    /// The common case of [`Workspace::resolve`] at a fraction of its cost:
    /// `given` names an existing path by plain components (no `.`, `..` or
    /// trailing `/`) none of which is a symlink. One `lstat` per component
    /// below the canonical root then proves the path canonical, where
    /// `realpath` would `readlink` every component of the whole path, the
    /// root's included, and `resolve` needs it twice per call (build and
    /// check). `None` leaves every other case to the general path.
    fn resolve_plain(&self, given: &str) -> Option<PathBuf> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        // `Path::components` drops a `.` (even a trailing one after a file,
        // which the kernel refuses): leave those to the general path.
        if given.ends_with('/') || given.split('/').any(|c| c == ".") {
            return None;
        }
        let rel = Path::new(given);
        let rel = if rel.is_absolute() {
            rel.strip_prefix(&self.root).ok()?
        } else {
            rel
        };
        let mut plain = PathBuf::new();
        for component in rel.components() {
            let Component::Normal(name) = component else {
                return None;
            };
            plain.push(name);
        }
        if plain.as_os_str().is_empty() {
            return Some(self.root.clone());
        }
        // Opened (as O_PATH, nothing read) only if no component is a
        // symlink: then root + the components is the canonical path.
        rustix::fs::openat2(
            &*self.dir,
            &plain,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        Some(self.root.join(plain))
    }

    /// `abs` relative to the root, for messages and prompts ("." for the root).
    pub fn display(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => abs.to_string_lossy().into_owned(),
        }
    }

    // === race-free access beneath the root ===
    //
    // Threat: a path checked by `resolve` (or approved in a prompt) has a
    // directory component swapped for a symlink to `/etc` before the open;
    // std::fs would follow it. Every method below resolves the path
    // component by component beneath a directory fd of the root (cap-std:
    // openat2 RESOLVE_BENEATH, or its emulation), so the swap is refused at
    // the instant of the open, not at the instant of an earlier check.

    /// The root as a capability directory: every open through it stays
    /// beneath the root, whatever symlinks the path meets.
    pub fn dir(&self) -> &cap_std::fs::Dir {
        &self.dir
    }

    /// `given` relative to the root: an absolute path must lie under the
    /// root lexically (the open then checks it for real); a relative one is
    /// taken as is. `..` is left to the open, which refuses escapes.
    fn relative<'a>(&self, given: &'a Path) -> Result<&'a Path, BeneathError> {
        if given.as_os_str().is_empty() {
            return Err(BeneathError::Empty);
        }
        if given.is_absolute() {
            return given
                .strip_prefix(&self.root)
                .map(|r| {
                    if r.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        r
                    }
                })
                .map_err(|_| BeneathError::Outside {
                    given: shown(given),
                });
        }
        Ok(given)
    }

    /// The root's fd and `given` relative to it.
    fn at<'a>(&self, given: &'a Path) -> Result<(&cap_std::fs::Dir, &'a Path), BeneathError> {
        Ok((&self.dir, self.relative(given)?))
    }

    /// Opens `given` for reading, beneath the root; symlinks are followed
    /// while they stay beneath it.
    ///
    /// The file is opened `O_NONBLOCK | O_NOCTTY`, so a FIFO nobody writes to
    /// does not block the open and a terminal does not become ours; reads of
    /// a regular file are unaffected. Callers check the file's type with
    /// `File::metadata` (the same fd, so no race) before reading.
    pub fn open_beneath(&self, given: impl AsRef<Path>) -> Result<std::fs::File, BeneathError> {
        self.open_read(given.as_ref(), 0)
    }

    /// As [`Workspace::open_beneath`], but the last component must not be a
    /// symlink ([`BeneathError::Symlink`]): for a path that was resolved
    /// (symlinks and all) when a call was built, a link found there now was
    /// swapped in since.
    ///
    /// The no-follow is `O_NOFOLLOW` passed to openat2; where openat2 is
    /// missing (Linux < 5.6, which has no Landlock either) cap-std's
    /// emulation follows a last-component link that stays beneath the root,
    /// so there only the beneath guarantee holds, not this refinement.
    pub fn open_nofollow_beneath(
        &self,
        given: impl AsRef<Path>,
    ) -> Result<std::fs::File, BeneathError> {
        self.open_read(given.as_ref(), libc::O_NOFOLLOW)
    }

    /// Opens `given` for reading only if no component of it is a symlink
    /// (openat2 `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` from the root's fd,
    /// `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`). For a path [`Workspace::resolve`]
    /// returned (canonical), success proves that it still names the place it
    /// named then, in the same syscall as the open: no re-resolution needed.
    /// `None` when it cannot be opened that way (a symlink now, missing,
    /// outside, or no openat2): the caller takes the general path, which says
    /// why.
    pub fn open_exact_beneath(&self, given: &Path) -> Option<std::fs::File> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let rel = self.relative(given).ok()?;
        let fd = rustix::fs::openat2(
            &*self.dir,
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        self.refuse_hidden(std::fs::File::from(fd), given).ok()
    }

    fn open_read(&self, given: &Path, extra: i32) -> Result<std::fs::File, BeneathError> {
        use cap_std::fs::OpenOptionsExt;
        let (dir, rel) = self.at(given)?;
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | extra);
        match dir.open_with(rel, &opts) {
            Ok(f) => self.refuse_hidden(f.into_std(), given),
            Err(e) if extra & libc::O_NOFOLLOW != 0 && e.raw_os_error() == Some(libc::ELOOP) => {
                Err(BeneathError::Symlink {
                    given: shown(given),
                })
            }
            Err(e) => Err(BeneathError::from_io(given, e)),
        }
    }

    /// Opens the directory `given` beneath the root, as a capability: what
    /// is opened through it stays beneath it.
    pub fn open_dir_beneath(
        &self,
        given: impl AsRef<Path>,
    ) -> Result<cap_std::fs::Dir, BeneathError> {
        let given = given.as_ref();
        let (dir, rel) = self.at(given)?;
        dir.open_dir(rel)
            .map_err(|e| BeneathError::from_io(given, e))
    }

    /// Reads the whole file `given`, beneath the root, refusing files larger
    /// than `max_bytes` with [`io::ErrorKind::FileTooLarge`] and anything but
    /// a regular file (a directory with [`io::ErrorKind::IsADirectory`]).
    pub fn read_beneath(
        &self,
        given: impl AsRef<Path>,
        max_bytes: u64,
    ) -> Result<Vec<u8>, BeneathError> {
        use std::io::Read;
        let given = given.as_ref();
        let file = self.open_beneath(given)?;
        let meta = file
            .metadata()
            .map_err(|e| BeneathError::from_io(given, e))?;
        if meta.is_dir() {
            return Err(BeneathError::from_io(
                given,
                io::Error::from(io::ErrorKind::IsADirectory),
            ));
        }
        if !meta.is_file() {
            return Err(BeneathError::from_io(
                given,
                io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        if meta.len() > max_bytes {
            return Err(BeneathError::from_io(
                given,
                io::Error::from(io::ErrorKind::FileTooLarge),
            ));
        }
        let mut buf = Vec::with_capacity(meta.len() as usize);
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| BeneathError::from_io(given, e))?;
        if buf.len() as u64 > max_bytes {
            return Err(BeneathError::from_io(
                given,
                io::Error::from(io::ErrorKind::FileTooLarge),
            ));
        }
        Ok(buf)
    }

    /// Metadata of `given` (symlinks followed while they stay beneath the
    /// root). Nothing is opened for reading, so a FIFO is safe to stat.
    pub fn metadata_beneath(
        &self,
        given: impl AsRef<Path>,
    ) -> Result<cap_std::fs::Metadata, BeneathError> {
        let given = given.as_ref();
        let (dir, rel) = self.at(given)?;
        dir.metadata(rel)
            .map_err(|e| BeneathError::from_io(given, e))
    }

    /// Metadata of `given` itself (a symlink as the last component is not
    /// followed), beneath the root.
    pub fn symlink_metadata_beneath(
        &self,
        given: impl AsRef<Path>,
    ) -> Result<cap_std::fs::Metadata, BeneathError> {
        let given = given.as_ref();
        let (dir, rel) = self.at(given)?;
        dir.symlink_metadata(rel)
            .map_err(|e| BeneathError::from_io(given, e))
    }

    /// The parent directory of `given`, opened beneath the root, and the
    /// last component's name: what an atomic replace works in (temp file,
    /// rename) so that neither can be redirected out of the root, nor
    /// elsewhere inside it. `given` is a path resolved when its call was
    /// built (no symlink in it): the directories on the way are opened
    /// following no symlink ([`BeneathError::Symlink`] for one swapped in
    /// since, [`BeneathError::Outside`] for one that leads out). Else a
    /// command of another session swapping a directory for a symlink into
    /// `.git` could have the write land in `.git/config` (a breaker's
    /// finding; the policy judged the path resolved at build). With
    /// `create`, missing parent directories are created one by one beneath
    /// the root first.
    pub fn parent_beneath(
        &self,
        given: impl AsRef<Path>,
        create: bool,
    ) -> Result<(cap_std::fs::Dir, std::ffi::OsString), BeneathError> {
        let given = given.as_ref();
        let err = |e| BeneathError::from_io(given, e);
        let (root, rel) = self.at(given)?;
        let name = match rel.components().next_back() {
            Some(Component::Normal(name)) => name.to_os_string(),
            _ => {
                return Err(err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "path names no file",
                )));
            }
        };
        let parent = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => match self.open_dir_exact(given, p, create) {
                Some(opened) => opened?,
                // No openat2 (Linux < 5.6, without Landlock too): beneath
                // the root, symlinks inside it followed.
                None => match root.open_dir(p) {
                    Ok(d) => d,
                    Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                        root.create_dir_all(p).map_err(err)?;
                        root.open_dir(p).map_err(err)?
                    }
                    Err(e) => return Err(err(e)),
                },
            },
            _ => root.try_clone().map_err(err)?,
        };
        Ok((parent, name))
    }

    /// The directory `rel` (of `given`) beneath the root, every component
    /// opened without following a symlink; with `create`, the missing ones
    /// made on the way. `None` when the kernel has no `openat2`.
    fn open_dir_exact(
        &self,
        given: &Path,
        rel: &Path,
        create: bool,
    ) -> Option<Result<cap_std::fs::Dir, BeneathError>> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        use rustix::io::Errno;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let dir =
            |fd: std::os::fd::OwnedFd| cap_std::fs::Dir::from_std_file(std::fs::File::from(fd));
        // A symlink met (`O_DIRECTORY` on a last component that is one
        // fails ENOTDIR): one leading out is reported as such (as the
        // beneath open says), a file in the way as itself, any other
        // symlink was swapped in since the path was resolved.
        let swapped = || match self
            .dir
            .open_dir(rel)
            .map_err(|e| BeneathError::from_io(given, e))
        {
            Err(e @ BeneathError::Outside { .. }) => e,
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.raw_os_error() == Some(libc::ENOTDIR)) =>
            {
                e
            }
            _ => BeneathError::Symlink {
                given: shown(given),
            },
        };
        let io = |e: Errno| BeneathError::from_io(given, e.into());
        match rustix::fs::openat2(&*self.dir, rel, flags, Mode::empty(), how) {
            Ok(fd) => return Some(Ok(dir(fd))),
            Err(Errno::NOSYS) => return None,
            Err(Errno::LOOP | Errno::XDEV | Errno::NOTDIR) => return Some(Err(swapped())),
            Err(Errno::NOENT) if create => {}
            Err(e) => return Some(Err(io(e))),
        }
        let mut at = match rustix::io::dup(&*self.dir) {
            Ok(fd) => fd,
            Err(e) => return Some(Err(io(e))),
        };
        for c in rel.components() {
            let Component::Normal(name) = c else {
                return Some(Err(swapped()));
            };
            let mut next = rustix::fs::openat2(&at, name, flags, Mode::empty(), how);
            if matches!(next, Err(Errno::NOENT)) {
                match rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Some(Err(io(e))),
                }
                next = rustix::fs::openat2(&at, name, flags, Mode::empty(), how);
            }
            at = match next {
                Ok(fd) => fd,
                Err(Errno::LOOP | Errno::XDEV | Errno::NOTDIR) => return Some(Err(swapped())),
                Err(e) => return Some(Err(io(e))),
            };
        }
        Some(Ok(dir(at)))
    }

    /// Writes `contents` to `given` atomically, beneath the root: missing
    /// parent directories are created, the data goes to a temporary file in
    /// the same directory which is synced and renamed over the target, so a
    /// reader sees the old or the new content, never a mix. An existing
    /// file's permissions are kept. The target itself is never followed if
    /// it is a symlink: the rename replaces the link.
    pub fn write_atomic_beneath(
        &self,
        given: impl AsRef<Path>,
        contents: &[u8],
    ) -> Result<(), BeneathError> {
        use std::io::Write;
        let given = given.as_ref();
        let err = |e| BeneathError::from_io(given, e);
        let (parent, name) = self.parent_beneath(given, true)?;
        let permissions = match parent.symlink_metadata(&name) {
            Ok(m) if m.is_file() => Some(m.permissions()),
            Ok(m) if m.is_dir() => {
                return Err(err(io::Error::from(io::ErrorKind::IsADirectory)));
            }
            _ => None,
        };
        let tmp_name = temp_name(&name);
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        let result = (|| {
            let mut tmp = parent.open_with(&tmp_name, &opts)?;
            tmp.write_all(contents)?;
            if let Some(p) = permissions {
                tmp.set_permissions(p)?;
            }
            tmp.sync_all()?;
            parent.rename(&tmp_name, &parent, &name)
        })();
        if result.is_err() {
            let _ = parent.remove_file(&tmp_name);
        }
        result.map_err(err)
    }

    fn outside(&self, given: &str) -> PathError {
        PathError::OutsideWorkspace {
            given: given.to_string(),
            root: self.root.display().to_string(),
        }
    }
}

/// `given` for an error message.
fn shown(given: &Path) -> String {
    given.to_string_lossy().into_owned()
}

/// A fresh name for the temporary file an atomic replace of `name` writes
/// first: hidden, unique, and recognisable if a crash leaves it behind
/// ([`is_temp_name`]). At most [`TEMP_NAME_KEEPS`] bytes of `name` are in
/// it, so that any name that fits a directory has a temp name that fits.
pub fn temp_name(name: &std::ffi::OsStr) -> String {
    let name = name.to_string_lossy();
    let mut keep = name.len().min(TEMP_NAME_KEEPS);
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!(
        ".{}{TEMP_MARK}{}.tmp",
        &name[..keep],
        uuid::Uuid::new_v4().simple()
    )
}

/// Bytes of a file's name a [`temp_name`] keeps (NAME_MAX is 255; the
/// rest of a temp name is 48).
const TEMP_NAME_KEEPS: usize = 160;

/// What marks a [`temp_name`].
const TEMP_MARK: &str = ".toolsched-";

/// Whether `name` is shaped as a [`temp_name`]: the sandbox lets no command
/// make, move or change one (a file tool's content waits there, before it
/// is renamed over a file a command may not write; a breaker's finding).
pub fn is_temp_name(name: &[u8]) -> bool {
    name.starts_with(b".")
        && name.ends_with(b".tmp")
        && name
            .windows(TEMP_MARK.len())
            .any(|w| w == TEMP_MARK.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_fit_and_are_recognised() {
        let long = "é".repeat(127);
        for name in ["f.txt", long.as_str()] {
            let t = temp_name(std::ffi::OsStr::new(name));
            assert!(t.len() <= 255, "{}", t.len());
            assert!(is_temp_name(t.as_bytes()), "{t}");
        }
        for other in [
            "a.tmp",
            ".toolsched-x",
            ".a.toolsched-1",
            "a.toolsched-1.tmp",
        ] {
            assert!(!is_temp_name(other.as_bytes()), "{other}");
        }
    }

    #[test]
    fn a_moved_or_replaced_root_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), "x").unwrap();
        let ws = Workspace::new(&root).unwrap();
        assert!(ws.resolve("a.txt").is_ok());
        std::fs::rename(&root, dir.path().join("moved")).unwrap();
        assert!(matches!(
            ws.resolve("a.txt"),
            Err(PathError::RootMoved { .. })
        ));
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), "y").unwrap();
        assert!(matches!(
            ws.resolve("a.txt"),
            Err(PathError::RootMoved { .. })
        ));
    }

    #[test]
    fn plain_fast_path_agrees_with_realpath() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f.txt"), "x").unwrap();
        std::os::unix::fs::symlink("a/b", root.join("link")).unwrap();
        let ws = Workspace::new(&root).unwrap();
        let canonical = ws.root().to_path_buf();
        let abs = canonical.join("a/b/f.txt");
        for given in ["a/b/f.txt", "a/b", "a", abs.to_str().unwrap(), "link/f.txt"] {
            assert_eq!(
                ws.resolve(given).unwrap(),
                std::fs::canonicalize(root.join(given)).unwrap(),
                "{given}"
            );
        }
        // Only plain, symlink-free components take the fast path.
        assert_eq!(ws.resolve_plain("a/b/f.txt"), Some(abs.clone()));
        assert_eq!(ws.resolve_plain("link/f.txt"), None);
        assert_eq!(ws.resolve_plain("a/./b"), None);
        assert_eq!(ws.resolve_plain("./a"), None);
        assert_eq!(ws.resolve("a/./b").unwrap(), canonical.join("a/b"));
        // A `.` after a file is not a directory, as the kernel says.
        assert!(ws.resolve("a/b/f.txt/.").is_err());
        assert_eq!(ws.resolve_plain("a/../a"), None);
        assert_eq!(ws.resolve_plain("a/b/f.txt/"), None);
        assert_eq!(ws.resolve_plain("a/new.txt"), None);
        // The open that proves a resolved path unchanged follows no symlink.
        assert!(ws.open_exact_beneath(&abs).is_some());
        assert!(ws.open_exact_beneath(Path::new("link/f.txt")).is_none());
        assert!(ws.open_exact_beneath(Path::new("a/missing")).is_none());
        assert!(
            ws.open_exact_beneath(Path::new("../ws/a/b/f.txt"))
                .is_none()
        );
        // A trailing slash on a file is still an error, as realpath says.
        assert!(ws.resolve("a/b/f.txt/").is_err());
        assert_eq!(
            ws.resolve("a/new.txt").unwrap(),
            canonical.join("a/new.txt")
        );
    }

    #[test]
    fn sibling_with_root_prefix_is_outside() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("root");
        let evil = parent.path().join("root-evil");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&evil).unwrap();
        let ws = Workspace::new(&root).unwrap();
        assert!(matches!(
            ws.resolve(evil.join("x").to_str().unwrap()),
            Err(PathError::OutsideWorkspace { .. })
        ));
        assert!(matches!(
            ws.resolve("../root-evil/x"),
            Err(PathError::OutsideWorkspace { .. })
        ));
        assert_eq!(
            ws.resolve("a/b.txt").unwrap(),
            ws.root().join("a").join("b.txt")
        );
    }

    #[test]
    fn beneath_refuses_symlinks_out_and_dotdot() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(parent.path().join("secret"), "s").unwrap();
        std::fs::write(root.join("in.txt"), "hello").unwrap();
        std::os::unix::fs::symlink(parent.path().join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("in.txt", root.join("ok-link")).unwrap();
        let ws = Workspace::new(&root).unwrap();
        assert_eq!(ws.read_beneath("in.txt", 100).unwrap(), b"hello");
        assert_eq!(ws.read_beneath("ok-link", 100).unwrap(), b"hello");
        let abs = ws.root().join("in.txt");
        assert_eq!(
            ws.read_beneath(abs.to_str().unwrap(), 100).unwrap(),
            b"hello"
        );
        for bad in ["out", "../secret", "/etc/passwd"] {
            assert!(
                matches!(ws.read_beneath(bad, 100), Err(BeneathError::Outside { .. })),
                "{bad}"
            );
        }
        assert!(matches!(ws.write_atomic_beneath("out", b"x"), Ok(())));
        // The link was replaced, not written through.
        assert_eq!(
            std::fs::read_to_string(parent.path().join("secret")).unwrap(),
            "s"
        );
        assert!(matches!(
            ws.write_atomic_beneath("../escape", b"x"),
            Err(BeneathError::Outside { .. })
        ));
        assert!(!parent.path().join("escape").exists());
        let big = ws.read_beneath("in.txt", 2).unwrap_err();
        assert_eq!(
            big.io_error().map(io::Error::kind),
            Some(io::ErrorKind::FileTooLarge)
        );
    }

    #[test]
    fn write_atomic_creates_parents_and_keeps_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        ws.write_atomic_beneath("a/b/c.txt", b"one").unwrap();
        assert_eq!(std::fs::read(dir.path().join("a/b/c.txt")).unwrap(), b"one");
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        ws.write_atomic_beneath("run.sh", b"new").unwrap();
        assert_eq!(std::fs::read(&script).unwrap(), b"new");
        assert_eq!(
            std::fs::metadata(&script).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("toolsched"))
            .collect();
        assert!(leftovers.is_empty());
    }

    /// A directory swapped for a symlink after a check: the open still
    /// refuses it, because resolution happens beneath the root's fd.
    #[test]
    fn swapped_in_symlink_after_check_is_refused() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), "inside").unwrap();
        std::fs::create_dir(parent.path().join("outside")).unwrap();
        std::fs::write(parent.path().join("outside/f"), "outside").unwrap();
        let ws = Workspace::new(&root).unwrap();
        // The guardrail check passes now…
        assert!(ws.resolve("sub/f").is_ok());
        // …then the directory is swapped for a link out.
        std::fs::rename(root.join("sub"), root.join("sub-old")).unwrap();
        std::os::unix::fs::symlink(parent.path().join("outside"), root.join("sub")).unwrap();
        assert!(matches!(
            ws.read_beneath("sub/f", 100),
            Err(BeneathError::Outside { .. })
        ));
        let w = ws.write_atomic_beneath("sub/f", b"pwned");
        assert!(matches!(w, Err(BeneathError::Outside { .. })), "{w:?}");
        assert_eq!(
            std::fs::read_to_string(parent.path().join("outside/f")).unwrap(),
            "outside"
        );
    }

    /// A directory of a resolved path swapped for a symlink that stays
    /// inside the root (into `.git`): the write is refused, not redirected
    /// (a breaker's finding: a command of another session swapping `d` for
    /// `d -> .git` had `write_file d/config` write `.git/config`); so is a
    /// missing directory that appears as such a symlink before it is made.
    #[test]
    fn a_write_is_not_redirected_by_a_symlink_swapped_in_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(root.join("d")).unwrap();
        let ws = Workspace::new(root).unwrap();
        let checked = ws.resolve("d/config").unwrap();
        let new = ws.resolve("nd/sub/config").unwrap();
        std::fs::rename(root.join("d"), root.join("d-old")).unwrap();
        std::os::unix::fs::symlink(".git", root.join("d")).unwrap();
        std::os::unix::fs::symlink(".git", root.join("nd")).unwrap();
        for (path, what) in [(&checked, "existing"), (&new, "created")] {
            let w = ws.write_atomic_beneath(path, b"[core]\n\tfsmonitor = evil\n");
            assert!(
                matches!(w, Err(BeneathError::Symlink { .. })),
                "{what}: {w:?}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!root.join(".git/sub").exists());
        // Unchanged paths are written, missing directories made.
        std::fs::remove_file(root.join("d")).unwrap();
        std::fs::rename(root.join("d-old"), root.join("d")).unwrap();
        ws.write_atomic_beneath(&checked, b"x").unwrap();
        ws.write_atomic_beneath(ws.resolve("a/b/c").unwrap(), b"y")
            .unwrap();
        assert_eq!(std::fs::read_to_string(root.join("a/b/c")).unwrap(), "y");
    }

    /// Every beneath entry point, after the check passed and a directory of
    /// the path was swapped for a link out: std::fs follows the link (that
    /// is the race), the beneath API refuses it and nothing outside is read
    /// or written.
    #[test]
    fn every_beneath_access_refuses_a_component_swapped_after_the_check() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::write(root.join("sub/f"), "inside").unwrap();
        let outside = parent.path().join("outside");
        std::fs::create_dir_all(outside.join("deeper")).unwrap();
        std::fs::write(outside.join("f"), "outside").unwrap();
        let ws = Workspace::new(&root).unwrap();
        let checked = ws.resolve("sub/f").unwrap();
        assert_eq!(checked, ws.root().join("sub/f"));
        std::fs::rename(root.join("sub"), root.join("sub-old")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
        // std::fs, given the path that was checked, reads outside now.
        assert_eq!(std::fs::read_to_string(&checked).unwrap(), "outside");
        let outside_err = |r: Result<(), BeneathError>, what: &str| {
            assert!(
                matches!(r, Err(BeneathError::Outside { .. })),
                "{what}: {r:?}"
            );
        };
        outside_err(ws.open_beneath(&checked).map(drop), "open");
        outside_err(
            ws.open_nofollow_beneath(&checked).map(drop),
            "open_nofollow",
        );
        outside_err(ws.read_beneath(&checked, 100).map(drop), "read");
        outside_err(ws.metadata_beneath(&checked).map(drop), "metadata");
        outside_err(
            ws.symlink_metadata_beneath(&checked).map(drop),
            "symlink_metadata",
        );
        outside_err(ws.open_dir_beneath("sub/deeper").map(drop), "open_dir");
        outside_err(ws.parent_beneath(&checked, true).map(drop), "parent");
        outside_err(
            ws.parent_beneath("sub/new/g", true).map(drop),
            "parent+create",
        );
        outside_err(ws.write_atomic_beneath(&checked, b"pwned"), "write");
        assert_eq!(
            std::fs::read_to_string(outside.join("f")).unwrap(),
            "outside"
        );
        let mut names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["deeper", "f"]);
    }

    /// A file swapped for a symlink (even one inside the root) is refused
    /// by the no-follow open; a FIFO does not block the open.
    #[test]
    fn nofollow_refuses_a_last_component_link_and_fifos_do_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        std::fs::write(dir.path().join("real"), "r").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
        assert!(matches!(
            ws.open_nofollow_beneath("link"),
            Err(BeneathError::Symlink { .. })
        ));
        assert!(ws.open_beneath("link").is_ok());
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let f = ws.open_beneath("fifo").unwrap();
        assert!(!f.metadata().unwrap().is_file());
        let err = ws.read_beneath("fifo", 10).unwrap_err();
        assert_eq!(
            err.io_error().map(io::Error::kind),
            Some(io::ErrorKind::InvalidInput)
        );
    }

    #[test]
    fn symlink_out_is_refused_and_dangling_link_too() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(parent.path(), root.join("up")).unwrap();
        std::os::unix::fs::symlink(parent.path().join("nope"), root.join("dangling")).unwrap();
        let ws = Workspace::new(&root).unwrap();
        assert!(ws.resolve("up/secret").is_err());
        assert!(ws.resolve("dangling").is_err());
        assert!(ws.resolve("new/../../x").is_err());
    }
}
