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
//! a link.
//!
//! The walker works on paths, so a directory swapped for a symlink while it
//! walks could make it read a directory outside. Every entry it yields is
//! therefore looked up again beneath the root (`Workspace::*_beneath`,
//! openat2 `RESOLVE_BENEATH`) and left out unless it exists there, and the
//! tools open what the walk reports through the same beneath API.
//!
//! The walker does not say what it skipped, so after a complete walk every
//! directory it entered is listed once more and its entries that the walk did
//! not yield are counted as left out by ignore rules.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use crate::sandbox::{BeneathError, Workspace};

/// Project ignore files read in every directory (gitignore syntax) whether
/// or not git is used: ours, and Gemini CLI's so existing projects keep
/// their rules.
pub const PROJECT_IGNORE_FILES: &[&str] = &[".toolschedignore", ".geminiignore"];

/// Entries one walk visits before it stops and says so: a search of `/` of a
/// huge tree must end.
pub const MAX_WALK_ENTRIES: usize = 200_000;

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

/// One entry the walk yields (never the walk's root).
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// What to open through the workspace's beneath API: the entry's path,
    /// or a symlink's target inside the workspace.
    pub target: PathBuf,
    /// Path relative to the walk's root with `/` separators.
    pub rel: String,
    /// The entry (or a symlink's target) is a directory.
    pub is_dir: bool,
    /// The entry (or a symlink's target) is a regular file (not a FIFO,
    /// socket or device, which would block or never end when read).
    pub is_file: bool,
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

/// Why `visit` stopped a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

/// Walks `root` (a canonical directory inside `ws`) in file-name order and
/// calls `visit` for every entry ignore rules keep; returns what was left
/// out. Stops when `visit` says so or `token` is cancelled (then
/// `ignored` is `None`).
pub(crate) fn walk(
    ws: &Workspace,
    root: &Path,
    opts: WalkOptions,
    token: &CancellationToken,
    mut visit: impl FnMut(Entry) -> Flow,
) -> LeftOut {
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
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| e.file_name() != ".git");
    for name in PROJECT_IGNORE_FILES {
        builder.add_custom_ignore_filename(name);
    }
    let mut left = LeftOut::default();
    let mut kept: HashSet<PathBuf> = HashSet::new();
    let mut entered: Vec<PathBuf> = vec![root.to_path_buf()];
    let mut complete = true;
    for (count, result) in builder.build().enumerate() {
        if token.is_cancelled() {
            complete = false;
            break;
        }
        if count >= MAX_WALK_ENTRIES {
            left.hit_walk_limit = true;
            complete = false;
            break;
        }
        let dent = match result {
            Ok(d) => d,
            Err(e) => {
                // The path of a failed entry is in the error; keep it out of
                // the ignored count.
                if let Some(p) = error_path(&e) {
                    kept.insert(p);
                }
                left.unreadable += 1;
                continue;
            }
        };
        if dent.depth() == 0 {
            continue;
        }
        let path = dent.path().to_path_buf();
        kept.insert(path.clone());
        let rel = relative(root, &path);
        // The walker reads directories by path, so a directory swapped for
        // a symlink out while it walks would make it list names from
        // outside. Each entry is therefore looked up again beneath the root
        // (without following it): only one that exists there is reported,
        // with the type found there.
        let here = match ws.symlink_metadata_beneath(&path) {
            Ok(m) => m,
            Err(BeneathError::Outside { .. }) => {
                left.outside_links += 1;
                continue;
            }
            Err(_) => {
                left.unreadable += 1;
                continue;
            }
        };
        let (target, is_dir, is_file) = if here.file_type().is_symlink() {
            // Only a link whose target resolves inside the workspace is
            // reported, as that target (an absolute link into the
            // workspace is fine, though RESOLVE_BENEATH itself refuses
            // absolute links); a tool opens the target beneath the root.
            let resolved = path.to_str().map(|p| ws.resolve(p));
            match resolved {
                Some(Ok(t)) => match ws.metadata_beneath(&t) {
                    Ok(m) => (t, m.is_dir(), m.is_file()),
                    Err(_) => {
                        left.outside_links += 1;
                        continue;
                    }
                },
                _ => {
                    left.outside_links += 1;
                    continue;
                }
            }
        } else {
            let is_dir = here.is_dir();
            if is_dir && opts.max_depth.is_none_or(|m| dent.depth() < m) {
                entered.push(path.clone());
            }
            (path, is_dir, here.is_file())
        };
        let entry = Entry {
            target,
            rel,
            is_dir,
            is_file,
        };
        if visit(entry) == Flow::Stop {
            complete = false;
            break;
        }
    }
    if complete {
        let mut ignored = 0;
        for dir in &entered {
            // Listed beneath the root, so no name from outside is counted.
            let Ok(read) = ws.open_dir_beneath(dir).and_then(|d| {
                d.entries().map_err(|e| BeneathError::Io {
                    given: dir.to_string_lossy().into_owned(),
                    source: e,
                })
            }) else {
                continue;
            };
            for child in read.flatten() {
                let path = dir.join(child.file_name());
                if child.file_name() == ".git" || kept.contains(&path) {
                    continue;
                }
                ignored += 1;
                if left.examples.len() < LEFT_OUT_EXAMPLES {
                    let mut name = relative(root, &path);
                    if child.file_type().is_ok_and(|t| t.is_dir()) {
                        name.push('/');
                    }
                    left.examples.push(name);
                }
            }
        }
        left.examples.sort();
        left.ignored = Some(ignored);
    }
    left
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
        let opts = WalkOptions {
            respect_git_ignore: true,
            max_depth: None,
        };
        let mut seen = Vec::new();
        let left = walk(&ws, &walk_root, opts, &CancellationToken::new(), |e| {
            seen.push(e.rel);
            Flow::Continue
        });
        assert!(seen.is_empty(), "{seen:?}");
        assert!(left.examples.is_empty(), "{:?}", left.examples);
        assert_eq!(left.ignored, Some(0));
        // .ignore, nested/ and secret.txt, each refused beneath the root.
        assert_eq!(left.outside_links, 3);
    }
}
