//! What the built-in file and search tools share: limits, path errors,
//! loading a file's text for an edit, atomic writes and approval diffs.
//!
//! The tools themselves live beside this module: `read` (read_file),
//! `write` (write_file), `edit` (replace), `list` (list_directory), `glob`,
//! `grep` (grep_search); `walk` holds the ignore-aware directory walk and
//! `encoding` the text encodings.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::encoding::{self, Decoded, NotText, TextEncoding};
use super::{BoxFuture, ErrorKind, ToolError, ToolOutcome};
use crate::sandbox::{BeneathError, PathError, Workspace};

/// Bytes of text one tool result may carry. A default gRPC client accepts
/// 4 MiB per message and the same output also appears in BatchCompleted, so
/// one result stays well below it.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// Files larger than this are not edited (`replace`, and the diff of
/// `write_file`): an edit holds the file, its decoded text and the result in
/// memory at once.
pub const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

/// Bytes of a unified diff shown in an approval prompt; longer diffs are cut
/// with a marker (the change itself is not).
pub const MAX_DIFF_BYTES: usize = 512 * 1024;

/// How long the diff algorithm may search for a minimal diff before it
/// settles for a coarser one (the `similar` crate's deadline).
pub const DIFF_TIMEOUT: Duration = Duration::from_secs(2);

/// Maps a path refusal of the workspace to a stable error type.
pub(crate) fn path_error(e: PathError) -> ToolError {
    match e {
        PathError::OutsideWorkspace { .. } => {
            ToolError::new(ErrorKind::PathNotInWorkspace, e.to_string())
        }
        PathError::Empty | PathError::Nul { .. } => ToolError::invalid_params(e.to_string()),
        PathError::RootMoved { .. } => ToolError::new(ErrorKind::UnhandledException, e.to_string()),
        PathError::ServiceFile { .. } => ToolError::new(ErrorKind::PermissionDenied, e.to_string()),
        PathError::Io {
            ref source,
            ref given,
        } => match source.kind() {
            std::io::ErrorKind::PermissionDenied => ToolError::io(source, given),
            // "notes.txt/x": a file used as a directory.
            std::io::ErrorKind::NotADirectory => ToolError::new(
                ErrorKind::FileNotFound,
                format!("{e}. A file in the path is used as a directory; check the path."),
            ),
            _ => ToolError::new(ErrorKind::UnhandledException, e.to_string()),
        },
    }
}

/// Maps a refusal or I/O error of a race-free access beneath the workspace
/// root to a stable error type: a path that leads outside (a symlink or `..`
/// met at the instant of the open) is `path_not_in_workspace`, a symlink
/// swapped in where the call resolved none is `file_changed_concurrently`,
/// I/O errors go through [`ToolError::io`].
pub(crate) fn beneath_error(e: BeneathError, display: &str) -> ToolError {
    match e {
        BeneathError::Outside { .. } => ToolError::new(
            ErrorKind::PathNotInWorkspace,
            format!(
                "{display} leads outside the workspace root (a symlink or '..' on the way, possibly swapped in after the call was checked); nothing was read or written. Use a path inside the workspace."
            ),
        ),
        BeneathError::Symlink { .. } => ToolError::new(
            ErrorKind::FileChangedConcurrently,
            format!(
                "{display} became a symlink after the call was built; nothing was read or written. Send the call again if it is still wanted."
            ),
        ),
        BeneathError::Empty => ToolError::invalid_params(e.to_string()),
        BeneathError::ServiceFile { .. } => {
            ToolError::new(ErrorKind::PermissionDenied, e.to_string())
        }
        BeneathError::Io { source, .. } => match source.kind() {
            // "notes.txt/x": a file used as a directory.
            std::io::ErrorKind::NotADirectory => ToolError::new(
                ErrorKind::FileNotFound,
                format!(
                    "{display}: {source}. A file in the path is used as a directory; check the path."
                ),
            ),
            _ => ToolError::io(&source, display),
        },
    }
}

/// Whether a beneath access failed because the path does not exist.
pub(crate) fn is_not_found(e: &BeneathError) -> bool {
    e.io_error()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
}

/// The path a call was built with, resolved again each time the call is
/// about to touch it.
///
/// Threat: a call built (and approved) for `sub/f.txt` runs later, after an
/// earlier call of the batch (a shell command) or anyone else replaced `sub`
/// with a symlink to `/etc`; opening the path resolved at build time would
/// then follow that link out of the workspace. Resolving again just before
/// use gives a precise `file_changed_concurrently` when the path now leads
/// elsewhere inside; what closes the race is that every open, stat, write
/// and rename then goes through the workspace's beneath API
/// ([`Workspace::open_nofollow_beneath`] and friends), which resolves the
/// path beneath the root's fd at the instant of the access.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    ws: Arc<Workspace>,
    given: String,
    path: PathBuf,
}

impl Target {
    /// Resolves `given` now (at build time).
    pub fn new(ws: &Arc<Workspace>, given: &str) -> Result<Self, ToolError> {
        let path = ws.resolve(given).map_err(path_error)?;
        // Resolution drops a trailing '/': "new/" must not become a file.
        if given.ends_with('/') && !path.is_dir() {
            return Err(ToolError::invalid_params(format!(
                "'{given}' ends with '/', so it names a directory, and there is none there. Give the path of a file."
            )));
        }
        Ok(Self {
            ws: ws.clone(),
            given: given.to_string(),
            path,
        })
    }

    /// The path resolved at build time.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The workspace the path is inside.
    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// Whether the path lies inside a git repository's own directory (see
    /// [`crate::sandbox::protected::inside_git_dir`]), was given through a
    /// `.git` (`.git/hooks/pre-commit`, a symlink to `scripts/pre-commit`,
    /// resolves outside any repository: writing it is writing the hook),
    /// or lies at or beneath where a `.git` link or a symlink inside a
    /// repository leads, as the sandbox keeps it from commands
    /// ([`crate::sandbox::ProtectedPaths::leads_to`]: the hook's
    /// `scripts/pre-commit` by its own name; the repository a dangling
    /// `.git` symlink names, which `write_file` would otherwise create,
    /// `config` included; breakers' findings). The last may walk the
    /// workspace (once; later calls are answered from its watches): off
    /// the runtime's worker where it can be.
    pub fn in_git_dir(&self) -> bool {
        use crate::sandbox::protected::{ProtectedRegistry, is_protected_path};
        // The resolved path too: `sub/alias -> .git` is `sub/.git` (a
        // breaker's finding: such a write was renamed over the gitlink,
        // detaching running commands' read-only mount of it).
        if is_protected_path(Path::new(&self.given)) || self.inside_repository() {
            return true;
        }
        let cache = ProtectedRegistry::shared().get(self.ws.root());
        // Answered from the watches, as nearly always: no hand-off of the
        // runtime's worker (with a `block_in_place` per call, which hands
        // the worker to another thread and finishes the call's step on
        // this one, S4's 10,000 writes held at a prompt took ~3 KiB more
        // each; BENCHMARKS.md, "Sessions 22–23").
        if let Some(hit) = cache.leads_to_if_unchanged(&self.path) {
            return hit;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| cache.leads_to(&self.path))
            }
            _ => cache.leads_to(&self.path),
        }
    }

    /// Whether the path lies inside a repository's own directory (a `.git`
    /// in its resolved path, or a directory laid out as one): there every
    /// command's view is a read-only mount of the directory, new files
    /// included.
    pub fn inside_repository(&self) -> bool {
        let resolved = self.path.strip_prefix(self.ws.root()).unwrap_or(&self.path);
        crate::sandbox::protected::is_protected_path(resolved)
            || crate::sandbox::protected::inside_git_dir(self.ws.root(), &self.path)
    }

    /// Whether a new file here would be made inside an existing protected
    /// directory (a `.git` or a repository's own directory, which every
    /// running command holds as a read-only mount, new files included).
    pub fn made_in_a_protected_directory(&self) -> bool {
        let Some(parent) = self.path.parent() else {
            return false;
        };
        let parent_rel = parent.strip_prefix(self.ws.root()).unwrap_or(parent);
        std::fs::symlink_metadata(parent).is_ok_and(|m| m.is_dir())
            && (crate::sandbox::protected::is_protected_path(parent_rel)
                || crate::sandbox::protected::inside_git_dir(self.ws.root(), &self.path))
    }

    /// Opens the file for reading, beneath the root; the last component
    /// must not be a symlink (the build-time path had them all resolved).
    pub fn open(&self) -> Result<File, BeneathError> {
        self.ws.open_nofollow_beneath(&self.path)
    }

    /// Opens the path for reading only if it still names what the call was
    /// built (and approved) with: one open that follows no symlink proves it
    /// ([`Workspace::open_exact_beneath`]); otherwise [`Target::check`] and
    /// [`Target::open`] say what changed.
    pub fn open_unchanged(&self) -> Result<File, ToolError> {
        if let Some(file) = self.ws.open_exact_beneath(&self.path) {
            return Ok(file);
        }
        self.check()?;
        self.open().map_err(|e| beneath_error(e, &self.display()))
    }

    /// Metadata of the path (symlinks followed beneath the root).
    pub fn metadata(&self) -> Result<cap_std::fs::Metadata, BeneathError> {
        self.ws.metadata_beneath(&self.path)
    }

    /// The path relative to the workspace root, for messages.
    pub fn display(&self) -> String {
        self.ws.display(&self.path)
    }

    /// Resolves the path again; it must still be the one the call was built
    /// (and approved) with: `path_not_in_workspace` when it now leads out,
    /// `file_changed_concurrently` when it now leads elsewhere inside.
    pub fn check(&self) -> Result<(), ToolError> {
        let now = self.ws.resolve(&self.given).map_err(path_error)?;
        if now == self.path {
            Ok(())
        } else {
            Err(ToolError::new(
                ErrorKind::FileChangedConcurrently,
                format!(
                    "'{}' now resolves to {} instead of {} (a symlink or directory changed since the call was built); nothing was done. Send the call again if it is still wanted.",
                    self.given,
                    self.ws.display(&now),
                    self.display()
                ),
            ))
        }
    }
}

/// Runs blocking file work off the async runtime.
pub(crate) fn blocking<F>(f: F) -> BoxFuture<ToolOutcome>
where
    F: FnOnce() -> ToolOutcome + Send + 'static,
{
    Box::pin(async move {
        tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
            ToolError::new(
                ErrorKind::UnhandledException,
                format!("tool task failed: {e}"),
            )
            .into()
        })
    })
}

/// `target_is_directory` for a tool that works on files.
pub(crate) fn is_directory(display: &str, tool: &str) -> ToolError {
    ToolError::new(
        ErrorKind::TargetIsDirectory,
        format!(
            "{display} is a directory, but {tool} works on files. Use list_directory to see its entries."
        ),
    )
}

/// `path_is_not_a_directory` for a tool that works on directories.
pub(crate) fn not_a_directory(display: &str) -> ToolError {
    ToolError::new(
        ErrorKind::PathIsNotADirectory,
        format!(
            "{display} is a file, not a directory. Use read_file to read it, or pass its parent directory."
        ),
    )
}

/// `invalid_tool_params` for a FIFO, socket or device: opening a FIFO would
/// block the tool until some other process writes to it.
pub(crate) fn not_regular(display: &str, tool: &str) -> ToolError {
    ToolError::invalid_params(format!(
        "{display} is not a regular file (it is a FIFO, socket or device); {tool} only works on regular files."
    ))
}

/// Metadata of an existing regular file, beneath the workspace root;
/// `None` when it does not exist.
pub(crate) fn file_metadata(
    target: &Target,
    tool: &str,
) -> Result<Option<cap_std::fs::Metadata>, ToolError> {
    let display = target.display();
    match target.metadata() {
        Ok(m) if m.is_dir() => Err(is_directory(&display, tool)),
        Ok(m) if !m.is_file() => Err(not_regular(&display, tool)),
        Ok(m) => Ok(Some(m)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(beneath_error(e, &display)),
    }
}

/// An existing text file loaded for an edit.
#[derive(Debug, Clone)]
pub(crate) struct FileText {
    /// The bytes on disk, to check before writing that nobody changed them.
    pub bytes: Vec<u8>,
    pub decoded: Decoded,
}

impl FileText {
    /// Whether most line breaks are `\r\n`.
    pub fn crlf(&self) -> bool {
        let text = &self.decoded.text;
        let crlf = text.matches("\r\n").count();
        crlf > 0 && crlf * 2 >= text.matches('\n').count()
    }
}

/// Loads the file of `target` for an edit by `tool`, opened beneath the
/// workspace root: `None` when it does not exist, an error when it is a
/// directory, too large, binary or undecodable. Type and size are checked
/// on the opened fd, so they describe the very file that is read.
pub(crate) fn load_text(target: &Target, tool: &str) -> Result<Option<FileText>, ToolError> {
    let display = &target.display();
    let file = match target.open() {
        Ok(f) => f,
        Err(e) if is_not_found(&e) => return Ok(None),
        Err(e) => return Err(beneath_error(e, display)),
    };
    let io = |e: std::io::Error| ToolError::io(&e, display);
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(is_directory(display, tool));
    }
    if !meta.is_file() {
        return Err(not_regular(display, tool));
    }
    if meta.len() > MAX_EDIT_BYTES {
        return Err(ToolError::new(
            ErrorKind::FileTooLarge,
            format!(
                "{display} is {} bytes, over the {MAX_EDIT_BYTES}-byte limit for edits by {tool}. Edit it with run_shell_command (e.g. sed) instead.",
                meta.len()
            ),
        ));
    }
    let bytes = read_capped(&file, MAX_EDIT_BYTES).map_err(io)?;
    match encoding::decode(&bytes) {
        Ok(decoded) => {
            // A legacy encoding must give back the same bytes, or an edit
            // would change bytes it did not touch.
            if decoded.encoding.encode(&decoded.text).ok().as_deref() != Some(&bytes[..]) {
                return Err(ToolError::new(
                    ErrorKind::UnhandledException,
                    format!(
                        "{display} is {} but does not round-trip byte-exactly through it, so {tool} will not edit it. Edit it with run_shell_command instead.",
                        decoded.encoding.name()
                    ),
                ));
            }
            Ok(Some(FileText { bytes, decoded }))
        }
        Err(not_text) => {
            let what = match not_text {
                NotText::Binary => "a binary file".to_string(),
                NotText::Media(mime) => format!("a binary file ({mime})"),
                NotText::Undecodable { reason } => format!("not text ({reason})"),
            };
            Err(ToolError::new(
                ErrorKind::InvalidToolParams,
                format!(
                    "{display} is {what}, {} bytes; {tool} only edits text files.",
                    bytes.len()
                ),
            ))
        }
    }
}

/// `text` encoded as `encoding`, or `invalid_tool_params` naming the
/// character the file's encoding cannot hold and the argument it came from.
pub(crate) fn encode_for(
    text: &str,
    encoding: TextEncoding,
    display: &str,
    field: &str,
) -> Result<Vec<u8>, ToolError> {
    encoding.encode(text).map_err(|e| {
        ToolError::invalid_params(format!(
            "argument '{field}': {e}, the encoding of {display}. Write that character another way (e.g. an escape the file's language understands) or convert the file to UTF-8 first."
        ))
    })
}

/// Up to `max + 1` bytes of `file` from where it is (one more than `max`
/// tells the caller the file grew past it).
fn read_capped(file: &File, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The bytes of the file of `target` now (`None` when absent), read beneath
/// the workspace root, for the concurrent-change check of a write; at most
/// [`MAX_EDIT_BYTES`] + 1 of them (the expected content is never longer).
pub(crate) fn read_existing(target: &Target, tool: &str) -> Result<Option<Vec<u8>>, ToolError> {
    let display = target.display();
    match target.open() {
        Ok(f) => check_regular(&f, &display, tool)
            .and_then(|_| read_capped(&f, MAX_EDIT_BYTES).map_err(|e| ToolError::io(&e, &display)))
            .map(Some),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(beneath_error(e, &display)),
    }
}

/// The metadata of an opened file, which must be a regular file.
fn check_regular(file: &File, display: &str, tool: &str) -> Result<std::fs::Metadata, ToolError> {
    let meta = file.metadata().map_err(|e| ToolError::io(&e, display))?;
    if meta.is_dir() {
        Err(is_directory(display, tool))
    } else if !meta.is_file() {
        Err(not_regular(display, tool))
    } else {
        Ok(meta)
    }
}

/// The file `name` in `parent`, opened without following a symlink (one
/// there now was swapped in: the call resolved the path without it).
fn open_in(parent: &cap_std::fs::Dir, name: &OsStr) -> std::io::Result<Option<File>> {
    use cap_std::fs::OpenOptionsExt;
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    match parent.open_with(name, &opts) {
        Ok(f) => Ok(Some(f.into_std())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to the file of `target` atomically: a temp file in the
/// same directory, flushed, given the target's permissions and owner (0644
/// for a new file), then renamed over the target, so readers and a crash
/// see the old or the new file, never half of one. Creates missing parent
/// directories.
///
/// Everything happens beneath the workspace root: the parent directory is
/// opened once through the beneath API and the temp file, the last check
/// and the rename all go through that directory fd, so a directory of the
/// path swapped for a symlink at any moment cannot redirect the write out
/// of the workspace (`path_not_in_workspace`), and a symlink swapped in as
/// the file itself is refused (`file_changed_concurrently`), never written
/// through.
///
/// `expected` is the content the edit was computed from: when the file on
/// disk no longer has it, nothing is written and the error says so (another
/// writer got there first). Returns whether the file was created.
///
/// `in_place`: a protected path (a person approved the write, see
/// [`Target::in_git_dir`]) that exists is rewritten in place, not replaced:
/// a confined command holds it as a read-only mount of the file itself,
/// and a rename over a mount point detaches that mount in every other
/// namespace, leaving the new file writable to commands already running (a
/// breaker's finding: a running command's loop appended to an approved
/// hook the moment it was written). Readers may then see it half written.
pub(crate) fn atomic_write(
    target: &Target,
    tool: &str,
    bytes: &[u8],
    expected: Option<&[u8]>,
    in_place: bool,
) -> Result<bool, ToolError> {
    let display = &target.display();
    let io = |e: std::io::Error| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            beneath_error(
                BeneathError::Symlink {
                    given: display.clone(),
                },
                display,
            )
        } else {
            ToolError::io(&e, display)
        }
    };
    // Before any directory of the path is made.
    if in_place
        && std::fs::symlink_metadata(target.path()).is_err()
        && !target.made_in_a_protected_directory()
    {
        // Protected only because a link leads here (a dangling hook or
        // config link, a repository a `.git` symlink names), or a new
        // `.git` (or a file in one not there yet): no read-only mount
        // exists in the commands already running for what did not exist
        // when they started, so they could write the new file (breakers'
        // findings).
        return Err(ToolError::new(
            ErrorKind::PermissionDenied,
            format!(
                "{display} does not exist, and it would be a new part of a repository (a new .git, a file in one not there yet, or where a link in a repository leads: a hook, a config or a repository git would use); a file a tool made here could be changed by commands already running. Nothing was written. Create it outside toolsched, with no command running, if it is wanted."
            ),
        ));
    }
    let (parent, name) = target
        .workspace()
        .parent_beneath(target.path(), true)
        .map_err(|e| beneath_error(e, display))?;
    let existing = match open_in(&parent, &name).map_err(io)? {
        Some(f) => Some(check_regular(&f, display, tool)?),
        None => None,
    };
    if in_place && let Some(meta) = &existing {
        write_in_place(target, &parent, &name, meta, bytes, expected, tool)?;
        return Ok(false);
    }
    let tmp_name = crate::sandbox::temp_name(&name);
    let write_tmp = || -> Result<(), ToolError> {
        // The content is written where no command can reach it: an unnamed
        // file (`O_TMPFILE`), else a named one, made with no permission
        // bits either way, and given its name (the sandbox lets no command
        // make, move or change a file of that name) only once written. Its
        // mode and owner are set through this fd after the rename, when
        // the name is the target's (a breaker's finding: a command of
        // another session opened the temp file of an approved write to a
        // hook a `.git` symlink leads to, in a directory it may write, and
        // wrote its own hook through that fd after the call succeeded).
        let (mut tmp, named) = make_temp(&parent, &tmp_name).map_err(io)?;
        tmp.write_all(bytes)
            .and_then(|()| tmp.sync_all())
            .map_err(io)?;
        // Last check before the rename, through the same directory fd: the
        // file must still be what the edit was computed from (a concurrent
        // writer's change is not overwritten).
        let current = match open_in(&parent, &name).map_err(io)? {
            Some(f) => {
                check_regular(&f, display, tool)?;
                Some(read_capped(&f, MAX_EDIT_BYTES).map_err(io)?)
            }
            None => None,
        };
        if current.as_deref() != expected {
            return Err(ToolError::new(
                ErrorKind::FileChangedConcurrently,
                format!(
                    "{display} changed on disk while the edit was being written; nothing was written. Read it again and redo the edit."
                ),
            ));
        }
        if !named {
            rustix::fs::linkat(
                rustix::fs::CWD,
                format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&tmp)),
                &parent,
                &tmp_name,
                rustix::fs::AtFlags::SYMLINK_FOLLOW,
            )
            .map_err(|e| io(e.into()))?;
        }
        parent.rename(&tmp_name, &parent, &name).map_err(io)?;
        let perms = match &existing {
            Some(m) => m.permissions(),
            // A new file gets the usual 0644.
            None => {
                use std::os::unix::fs::PermissionsExt;
                std::fs::Permissions::from_mode(0o644)
            }
        };
        tmp.set_permissions(perms).map_err(io)?;
        if let Some(m) = &existing {
            // Keep the owner too where we may (as root); otherwise the file
            // simply becomes ours, as any editor's save would make it.
            use std::os::unix::fs::MetadataExt;
            let _ = std::os::unix::fs::fchown(&tmp, Some(m.uid()), Some(m.gid()));
        }
        Ok(())
    };
    if let Err(e) = write_tmp() {
        let _ = parent.remove_file(&tmp_name);
        return Err(e);
    }
    // The rename is durable only once the directory is flushed (through a
    // descriptor that can be synced: the parent's is `O_PATH`).
    if let Ok(dir) = rustix::fs::openat(
        &parent,
        ".",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        let _ = rustix::fs::fsync(&dir);
    }
    Ok(existing.is_none())
}

/// Rewrites the existing file `name` in `parent` (the one whose metadata is
/// `meta`) with `bytes`, when it still holds `expected` (see
/// [`atomic_write`]'s `in_place`).
fn write_in_place(
    target: &Target,
    parent: &cap_std::fs::Dir,
    name: &OsStr,
    meta: &std::fs::Metadata,
    bytes: &[u8],
    expected: Option<&[u8]>,
    tool: &str,
) -> Result<(), ToolError> {
    use cap_std::fs::OpenOptionsExt;
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    let display = &target.display();
    let io = |e: std::io::Error| ToolError::io(&e, display);
    let changed = || {
        ToolError::new(
            ErrorKind::FileChangedConcurrently,
            format!(
                "{display} changed on disk while the edit was being written; nothing was written. Read it again and redo the edit."
            ),
        )
    };
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = match parent.open_with(name, &opts) {
        Ok(f) => f.into_std(),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(changed()),
        Err(e) => return Err(io(e)),
    };
    let mut file = target
        .workspace()
        .refuse_hidden(file, target.path())
        .map_err(|e| beneath_error(e, display))?;
    let now = check_regular(&file, display, tool)?;
    if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
        return Err(changed());
    }
    let current = read_capped(&file, MAX_EDIT_BYTES).map_err(io)?;
    if Some(current.as_slice()) != expected {
        return Err(changed());
    }
    // The space first: a write cut short (a full disk) would leave a
    // prefix of the content, one no person approved, where git runs it (a
    // breaker's finding). Where the filesystem cannot reserve it, the old
    // content is written back on failure.
    match rustix::fs::fallocate(
        &file,
        rustix::fs::FallocateFlags::empty(),
        0,
        bytes.len() as u64,
    ) {
        Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) => {}
        Err(e) => return Err(io(e.into())),
    }
    let write = |file: &mut File, data: &[u8]| {
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(data))
            .and_then(|()| file.set_len(data.len() as u64))
            .and_then(|()| file.sync_all())
    };
    if let Err(e) = write(&mut file, bytes) {
        if let Err(restore) = write(&mut file, &current) {
            tracing::error!(path = %target.display(), error = %restore, "a protected file could not be restored after a failed write");
        }
        return Err(io(e));
    }
    Ok(())
}

/// A temp file for [`atomic_write`] in `parent`, writable through the
/// returned fd only: unnamed (`O_TMPFILE`) where the filesystem can make
/// one (false), else `name`, made exclusively (true); no permission bits.
fn make_temp(parent: &cap_std::fs::Dir, name: &str) -> std::io::Result<(File, bool)> {
    use rustix::fs::{Mode, OFlags};
    match rustix::fs::openat(
        parent,
        ".",
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => return Ok((File::from(fd), false)),
        // No `O_TMPFILE` here (the filesystem, or a kernel before 3.11).
        Err(
            rustix::io::Errno::OPNOTSUPP
            | rustix::io::Errno::ISDIR
            | rustix::io::Errno::INVAL
            | rustix::io::Errno::NOENT,
        ) => {}
        Err(e) => return Err(e.into()),
    }
    use cap_std::fs::OpenOptionsExt;
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.write(true).create_new(true).mode(0o000);
    Ok((parent.open_with(name, &opts)?.into_std(), true))
}

/// A unified diff of `old` against `new` for an approval prompt, with the
/// path in the headers; cut at [`MAX_DIFF_BYTES`] with a marker.
pub(crate) fn unified_diff(display: &str, old: &str, new: &str, is_new_file: bool) -> String {
    let diff = similar::TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old, new);
    let from = if is_new_file {
        "/dev/null".to_string()
    } else {
        format!("a/{display}")
    };
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(&from, &format!("b/{display}"))
        .to_string();
    if text.len() > MAX_DIFF_BYTES {
        let total = text.len();
        let mut cut = MAX_DIFF_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!(
            "\n... [diff cut: showing {cut} of {total} bytes]\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_keeps_permissions_and_refuses_a_changed_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ws = Arc::new(Workspace::new(dir.path()).unwrap());
        let path = ws.root().join("f.sh");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o751)).unwrap();
        let target = Target::new(&ws, "f.sh").unwrap();
        let created = atomic_write(&target, "t", b"new", Some(b"old"), false).unwrap();
        assert!(!created);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o751);
        let err = atomic_write(&target, "t", b"newer", Some(b"old"), false).unwrap_err();
        assert_eq!(err.kind, ErrorKind::FileChangedConcurrently);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // No temp file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.sh"]);
        // A new file with the longest name a directory takes (its temp
        // name keeps only part of it), made 0644.
        let long = "n".repeat(255);
        let target = Target::new(&ws, &long).unwrap();
        assert!(atomic_write(&target, "t", b"x", None, false).unwrap());
        let mode = std::fs::metadata(ws.root().join(&long))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o644);
    }

    /// The race the beneath API closes: a call's target passed its checks
    /// (built, and `check` at execution), then a directory of its path is
    /// swapped for a symlink out. Every access the tools make after `check`
    /// goes through these functions, and each refuses with
    /// `path_not_in_workspace`, while std::fs on the checked path would
    /// have followed the link.
    #[test]
    fn accesses_after_the_check_refuse_a_directory_swapped_for_a_link_out() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f.txt"), "inside\n").unwrap();
        let outside = parent.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("f.txt"), "outside\n").unwrap();
        let ws = Arc::new(Workspace::new(&root).unwrap());
        let file = Target::new(&ws, "sub/f.txt").unwrap();
        let new = Target::new(&ws, "sub/new.txt").unwrap();
        let dir = Target::new(&ws, "sub").unwrap();
        file.check().unwrap();
        new.check().unwrap();
        std::fs::rename(root.join("sub"), root.join("sub-old")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
        assert_eq!(
            std::fs::read_to_string(file.path()).unwrap(),
            "outside\n",
            "std::fs follows the swapped-in link"
        );
        let kinds = [
            (
                "open",
                file.open().map(drop).map_err(|e| beneath_error(e, "f")),
            ),
            ("metadata", file_metadata(&file, "t").map(drop)),
            ("load_text", load_text(&file, "t").map(drop)),
            ("read_existing", read_existing(&file, "t").map(drop)),
            (
                "atomic_write",
                atomic_write(&file, "t", b"pwned", Some(b"outside\n"), false).map(drop),
            ),
            (
                "atomic_write new",
                atomic_write(&new, "t", b"pwned", None, false).map(drop),
            ),
            (
                "dir metadata",
                dir.metadata().map(drop).map_err(|e| beneath_error(e, "d")),
            ),
        ];
        for (what, r) in kinds {
            let e = r.expect_err(what);
            assert_eq!(
                e.kind,
                ErrorKind::PathNotInWorkspace,
                "{what}: {}",
                e.message
            );
        }
        assert_eq!(
            std::fs::read_to_string(outside.join("f.txt")).unwrap(),
            "outside\n"
        );
        let names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.txt"]);
    }

    /// The file itself swapped for a symlink (to a file outside) after the
    /// call resolved it: nothing is read through it or written through it.
    #[test]
    fn a_file_swapped_for_a_symlink_is_neither_read_nor_written_through() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("f.txt"), "inside\n").unwrap();
        let secret = parent.path().join("secret");
        std::fs::write(&secret, "outside\n").unwrap();
        let ws = Arc::new(Workspace::new(&root).unwrap());
        let file = Target::new(&ws, "f.txt").unwrap();
        std::fs::remove_file(root.join("f.txt")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("f.txt")).unwrap();
        let e = load_text(&file, "t").unwrap_err();
        assert_eq!(e.kind, ErrorKind::FileChangedConcurrently, "{}", e.message);
        let e = atomic_write(&file, "t", b"pwned", Some(b"inside\n"), false).unwrap_err();
        assert_eq!(e.kind, ErrorKind::FileChangedConcurrently, "{}", e.message);
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "outside\n");
        assert!(
            root.join("f.txt")
                .symlink_metadata()
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let names: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.txt"], "no temp file left behind");
    }

    #[test]
    fn io_errors_map_to_stable_types() {
        use std::io::{Error, ErrorKind as Io};
        let cases = [
            (Io::NotFound, ErrorKind::FileNotFound),
            (Io::PermissionDenied, ErrorKind::PermissionDenied),
            (Io::StorageFull, ErrorKind::NoSpaceLeft),
            (Io::IsADirectory, ErrorKind::TargetIsDirectory),
        ];
        for (io, kind) in cases {
            assert_eq!(ToolError::io(&Error::from(io), "x").kind, kind);
        }
    }
}
