//! Landlock rulesets prepared once in the zygote and applied by every
//! worker it forks with the same options (issue 17 item 3): building one is
//! ~600 system calls (`/etc` is granted entry by entry around its secrets),
//! most of what a confined `true` cost.
//!
//! **Why a kept ruleset grants nothing a fresh one would not.**
//! - *Nothing in it is a command's own.* It is prepared only for commands
//!   whose private tmp the worker binds beneath a fixed anchor (see
//!   [`super::mounts::enter`]): the rule is on the anchor, and each command
//!   sees its own tmp there, in its own mount namespace. The workspace is
//!   granted whole, as every command whose protected paths are read-only
//!   mounts has it; those mounts are made per command from the server's
//!   current set, so a `.git` made after the ruleset was prepared is still
//!   read-only. A worker whose mounts are not what the ruleset assumes
//!   builds its own, as before.
//! - *The key is every option the grants depend on*: level, workspace,
//!   `--protect`, `--read`, the anchor ([`Key`]). A new workspace or a
//!   changed protected set is another key.
//! - *The rules hold inodes, and paths change.* Each ruleset keeps
//!   [`Stamps`] of what it was built from (each root's identity, each
//!   listed directory's identity and `ctime`), checked before every use;
//!   one that no longer holds is built again.
//! - *A ruleset fd can still take rules*, which would reach every later
//!   command: it stays in the zygote (which runs no command code) and at a
//!   fixed fd of the worker, which closes it after the fork; the command
//!   process closes it on `exec`, and its seccomp filter refuses
//!   `pidfd_getfd`.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use super::WorkerArgs;
use super::landlock::{Shared, prepare_shared};
use crate::sandbox::SandboxLevel;
use crate::sandbox::protected::ClockWatch;

/// Rulesets kept at once; past it the least recently used is dropped (and
/// built again when next needed). Each holds an fd and pins the inodes it
/// grants (the kernel frees a deleted workspace only when its ruleset
/// goes), so the bound is the number of workspaces (× levels) in recent
/// use, not every workspace a server ever saw.
pub const MAX_PREPARED_RULESETS: usize = 64;

/// Everything a prepared ruleset's grants depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    level: SandboxLevel,
    workspace: PathBuf,
    protect: Vec<PathBuf>,
    read: Vec<PathBuf>,
    anchor: PathBuf,
}

struct Entry {
    key: Key,
    shared: Shared,
    last_used: u64,
    /// Names this ruleset for as long as it is kept: a spare worker
    /// confines its next command ahead with the ruleset of this id (see
    /// `super::confine::Ahead`), and keeps it only when the command's
    /// lookup answers the same id.
    id: u64,
}

/// The zygote's prepared rulesets.
#[derive(Default)]
pub struct RulesetCache {
    entries: Vec<Entry>,
    clock: ClockWatch,
    /// Lookups so far: the recency of each entry.
    uses: u64,
    /// Rulesets kept so far: the next entry's id.
    kept: u64,
}

impl RulesetCache {
    /// A copy of the ruleset for a command with `args`, prepared now if
    /// there is no valid one. `None` when none applies (no anchor, not
    /// confined, Landlock alone) or it could not be built: the worker then
    /// builds its own, and reports a failure itself.
    pub fn get(&mut self, args: &WorkerArgs) -> Option<OwnedFd> {
        self.get_kept(args).map(|(fd, _)| fd)
    }

    /// [`Self::get`], with the kept entry's id (`None`: a ruleset built
    /// for this command alone, which nothing else may assume).
    pub fn get_kept(&mut self, args: &WorkerArgs) -> Option<(OwnedFd, Option<u64>)> {
        let anchor = args.tmp_at.clone()?;
        if !args.level.is_confined() || args.landlock_only {
            return None;
        }
        if self.clock.stepped_back() {
            // Equal `ctime`s prove nothing across a step back.
            self.entries.clear();
        }
        let key = Key {
            level: args.level,
            workspace: args.workspace.clone(),
            protect: args.protect.clone(),
            read: args.read.clone(),
            anchor,
        };
        self.uses += 1;
        if let Some(at) = self.entries.iter().position(|e| e.key == key) {
            if self.entries[at].shared.stamps.still_hold() {
                let e = &mut self.entries[at];
                e.last_used = self.uses;
                return e.shared.fd.try_clone().ok().map(|fd| (fd, Some(e.id)));
            }
            self.entries.swap_remove(at);
        }
        let shared = match prepare_shared(args, &key.anchor) {
            Ok(Some(s)) => s,
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(error = %e, "could not prepare a Landlock ruleset");
                return None;
            }
        };
        let Ok(copy) = shared.fd.try_clone() else {
            return None;
        };
        if shared.stamps.reusable {
            if self.entries.len() >= MAX_PREPARED_RULESETS
                && let Some(lru) = self
                    .entries
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(i, _)| i)
            {
                self.entries.swap_remove(lru);
            }
            self.kept += 1;
            let id = self.kept;
            self.entries.push(Entry {
                key,
                shared,
                last_used: self.uses,
                id,
            });
            return Some((copy, Some(id)));
        }
        Some((copy, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(workspace: &std::path::Path, anchor: &std::path::Path) -> WorkerArgs {
        WorkerArgs {
            level: SandboxLevel::WorkspaceWrite,
            workspace: workspace.to_path_buf(),
            tmp: anchor.join("unused"),
            tmp_at: Some(anchor.to_path_buf()),
            cpu_secs: 1,
            address_space_bytes: 1 << 30,
            file_size_bytes: 1 << 20,
            processes: 8,
            open_files: 64,
            kill_grace_ms: 1,
            protect: vec![],
            read: vec![],
            cgroup: None,
            best_effort: false,
            protected_fd: None,
            landlock_only: false,
            report_token: None,
            command: vec!["true".into()],
        }
    }

    /// A temp dir with an anchor and two workspaces, `a` and `b`, in it.
    fn anchor_and_workspaces() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let anchor = dir.path().join("anchor");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for d in [&anchor, &a, &b] {
            std::fs::create_dir(d).unwrap();
        }
        (dir, anchor, a, b)
    }

    /// The id `get_kept` answers for `args`.
    fn id_of(cache: &mut RulesetCache, args: &WorkerArgs) -> Option<u64> {
        cache.get_kept(args).expect("a ruleset").1
    }

    #[test]
    fn a_kept_ruleset_keeps_its_id_until_it_is_built_again() {
        let (dir, anchor, a, b) = anchor_and_workspaces();
        let mut cache = RulesetCache::default();
        let first = id_of(&mut cache, &args(&a, &anchor)).expect("kept");
        // The same options: the same ruleset, so a process confined ahead
        // with it fits.
        assert_eq!(id_of(&mut cache, &args(&a, &anchor)), Some(first));
        // Other options: another ruleset.
        let mut read_only = args(&a, &anchor);
        read_only.level = SandboxLevel::ReadOnly;
        let other = id_of(&mut cache, &read_only).expect("kept");
        assert_ne!(other, first);
        assert_ne!(id_of(&mut cache, &args(&b, &anchor)), Some(first));
        // The workspace replaced at its path: built again, under a new id
        // (a process confined ahead with the old one no longer fits).
        std::fs::rename(&a, dir.path().join("a-moved")).unwrap();
        std::fs::create_dir(&a).unwrap();
        let again = id_of(&mut cache, &args(&a, &anchor)).expect("kept");
        assert!(again != first && again != other, "{again}");
        assert_eq!(id_of(&mut cache, &args(&a, &anchor)), Some(again));
    }

    fn workspaces_of(cache: &RulesetCache) -> Vec<PathBuf> {
        cache
            .entries
            .iter()
            .map(|e| e.key.workspace.clone())
            .collect()
    }

    #[test]
    fn rulesets_are_kept_per_key_rebuilt_when_stale_and_bounded() {
        let (dir, anchor, a, b) = anchor_and_workspaces();
        let mut cache = RulesetCache::default();
        assert!(cache.get(&args(&a, &anchor)).is_some());
        assert_eq!(
            workspaces_of(&cache),
            std::slice::from_ref(&a),
            "kept (nothing listed changed lately)"
        );
        let first_use = cache.entries[0].last_used;
        assert!(cache.get(&args(&a, &anchor)).is_some());
        assert_eq!(
            workspaces_of(&cache),
            std::slice::from_ref(&a),
            "reused, not built again"
        );
        assert!(cache.entries[0].last_used > first_use);
        // Another workspace, or other protected files: another key.
        assert!(cache.get(&args(&b, &anchor)).is_some());
        let mut protecting = args(&a, &anchor);
        protecting.protect = vec![dir.path().join("config.toml")];
        assert!(cache.get(&protecting).is_some());
        assert_eq!(cache.entries.len(), 3);
        // A workspace replaced at its path: its old ruleset holds the old
        // inode, so it is built again for the new one.
        let old = cache.entries[0].shared.stamps.still_hold();
        assert!(old);
        std::fs::rename(&a, dir.path().join("a-moved")).unwrap();
        std::fs::create_dir(&a).unwrap();
        assert!(!cache.entries[0].shared.stamps.still_hold());
        assert!(cache.get(&args(&a, &anchor)).is_some());
        assert_eq!(cache.entries.len(), 3);
        // The one for `a` with other protected files is stale too, and is
        // built again on its next use.
        let stale: Vec<bool> = cache
            .entries
            .iter()
            .map(|e| !e.shared.stamps.still_hold())
            .collect();
        assert_eq!(stale.iter().filter(|s| **s).count(), 1);
        assert!(cache.get(&protecting).is_some());
        assert_eq!(cache.entries.len(), 3);
        assert!(cache.entries.iter().all(|e| e.shared.stamps.still_hold()));
        // Bounded: the least recently used goes.
        for i in 0..MAX_PREPARED_RULESETS {
            let w = dir.path().join(format!("w{i}"));
            std::fs::create_dir(&w).unwrap();
            assert!(cache.get(&args(&w, &anchor)).is_some());
        }
        assert_eq!(cache.entries.len(), MAX_PREPARED_RULESETS);
        assert!(
            !workspaces_of(&cache).contains(&b),
            "b was used least recently"
        );
        // Not confined, or no anchor: nothing applies.
        let mut none = args(&b, &anchor);
        none.level = SandboxLevel::None;
        assert!(cache.get(&none).is_none());
        let mut unanchored = args(&b, &anchor);
        unanchored.tmp_at = None;
        assert!(cache.get(&unanchored).is_none());
    }
}
