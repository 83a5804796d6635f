//! The workspace root and path resolution inside it.

use std::io;
use std::path::{Component, Path, PathBuf};

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
    #[error("Cannot resolve '{given}': {source}")]
    Io {
        given: String,
        #[source]
        source: io::Error,
    },
}

/// The directory tools work in. The root is canonical (symlinks resolved) so
/// that containment is a component-wise prefix check: `/root-evil` is not
/// inside `/root`.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
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
        Ok(Self { root })
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
        if given.is_empty() {
            return Err(PathError::Empty);
        }
        if given.contains('\0') {
            return Err(PathError::Nul {
                given: given.to_string(),
            });
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

    /// `abs` relative to the root, for messages and prompts ("." for the root).
    pub fn display(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => abs.to_string_lossy().into_owned(),
        }
    }

    fn outside(&self, given: &str) -> PathError {
        PathError::OutsideWorkspace {
            given: given.to_string(),
            root: self.root.display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
