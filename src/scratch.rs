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
//! Not here: what lives inside (`sandbox::zygote` for the anchor,
//! `tools::kept` for outputs, `sandbox::process` for a command's tmp).

use std::fs::{File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, RenameFlags};

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
    /// Makes a directory of `kind` in [`std::env::temp_dir`].
    pub fn create(kind: Kind) -> io::Result<Self> {
        Self::create_in(&std::env::temp_dir(), kind)
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
            match rustix::fs::renameat_with(
                rustix::fs::CWD,
                new.path(),
                rustix::fs::CWD,
                &path,
                RenameFlags::NOREPLACE,
            ) {
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

/// Removes `path` and its contents; already gone counts as removed.
fn remove_all(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Opens the directory `path` itself (never through a symlink) for its lock.
fn open_dir(path: &Path) -> io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
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

/// Removes the directories of every [`Kind`] in [`std::env::temp_dir`]
/// that this user owns and no live process holds locked (see the module's
/// documentation). Symlinks and other users' entries are left alone.
pub fn sweep_stale() -> Swept {
    sweep_stale_in(&std::env::temp_dir())
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
        // Not a directory, or a symlink (NOFOLLOW): not one of ours.
        let Ok(dir) = open_dir(&path) else { continue };
        if !dir.metadata().is_ok_and(|m| m.uid() == me) {
            continue;
        }
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

    #[test]
    fn a_held_directory_is_kept_and_a_released_one_swept() {
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
