//! The Landlock grants of each level: read the system directories (`/etc`
//! around its secrets), the command's own `/proc` view and the workspace;
//! write the workspace piecewise around the protected paths, the private
//! tmp and `/dev/null`; and, without network, no TCP at all.
//!
//! Not here: system calls Landlock does not govern ([`super::seccomp`]).

#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::fs::File;
use std::ops::Bound;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::mounts::MountView;
use super::{WorkerArgs, protected_in};

/// Landlock ABI whose access rights we ask for (best effort below it; the
/// start-up probe refuses kernels below [`super::probe::MIN_LANDLOCK_ABI`]).
/// Newer rights are added after being tested on a kernel that has them.
const TARGET_ABI: ABI = ABI::V6;
/// System directories commands may read and execute, when they exist.
const SYSTEM_READ_DIRS: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/nix/store",
];

/// Under `/etc`, what is never readable: password hashes, sudo rules,
/// private keys. `/etc` is granted entry by entry around these.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssl/private",
    "krb5.keytab",
    "security/opasswd",
];

/// Device files commands may read; `/dev/null` may also be written.
const READ_DEVICES: &[&str] = &["/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// The Landlock ruleset being built: each grant (an fd opened without
/// following symlinks, and rights) is added as soon as it is found and its
/// fd closed, so the worker holds a handful of fds whatever the number of
/// grants (a repository root with thousands of entries would otherwise run
/// into the inherited RLIMIT_NOFILE).
struct Grants<'a> {
    ruleset: &'a mut RulesetCreated,
}

impl Grants<'_> {
    fn add(&mut self, fd: OwnedFd, access: BitFlags<AccessFs>) -> Result<(), String> {
        (&mut *self.ruleset)
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("Landlock: {e}"))?;
        Ok(())
    }
}

/// Whether `set` holds `dir` or a path beneath it. Paths order component
/// by component, so everything beneath `dir` follows it contiguously: the
/// first element not below `dir` answers.
pub(super) fn any_at_or_beneath(set: &BTreeSet<PathBuf>, dir: &Path) -> bool {
    set.range::<Path, _>((Bound::Included(dir), Bound::Unbounded))
        .next()
        .is_some_and(|p| p.starts_with(dir))
}

fn open_nofollow(
    dirfd: Option<&OwnedFd>,
    path: &Path,
    directory: bool,
) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut flags = libc::O_CLOEXEC | libc::O_NOFOLLOW;
    flags |= if directory {
        libc::O_RDONLY | libc::O_DIRECTORY
    } else {
        libc::O_PATH
    };
    let base = dirfd.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a valid NUL-terminated path and flags; the fd is owned below.
    let fd = unsafe { libc::openat(base, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Grants `access` on `dir` except on `excluded` paths beneath it: a
/// directory on the way to an excluded path gets no grant of its own, its
/// other children get one each (files: only the file rights of `access`).
/// Symlinks never get a grant.
fn grant_except(
    grants: &mut Grants<'_>,
    dirfd: OwnedFd,
    dir: &Path,
    access: BitFlags<AccessFs>,
    excluded: &BTreeSet<PathBuf>,
) -> Result<(), String> {
    if excluded.contains(dir) {
        return Ok(());
    }
    if !any_at_or_beneath(excluded, dir) {
        return grants.add(dirfd, access);
    }
    // On the way to an excluded path: listing stays allowed (a directory
    // right, it reads no file's content), nothing else is granted here.
    let listing_right = access & AccessFs::ReadDir;
    if !listing_right.is_empty() {
        grants.add(
            dirfd.try_clone().map_err(|e| format!("dup: {e}"))?,
            listing_right,
        )?;
    }
    let listing = File::from(
        open_nofollow(Some(&dirfd), Path::new("."), true)
            .map_err(|e| format!("open {}: {e}", dir.display()))?,
    );
    let entries = cap_std::fs::Dir::from_std_file(listing)
        .entries()
        .map_err(|e| format!("list {}: {e}", dir.display()))?;
    let file_access = access & AccessFs::from_file(TARGET_ABI);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let path = dir.join(&name);
        let Ok(ft) = entry.file_type() else { continue };
        if ft.is_dir() {
            // Gone or swapped for a symlink since listing: no grant.
            if let Ok(fd) = open_nofollow(Some(&dirfd), Path::new(&name), true) {
                grant_except(grants, fd, &path, access, excluded)?;
            }
        } else if !ft.is_symlink()
            && !excluded.contains(&path)
            && let Ok(fd) = open_nofollow(Some(&dirfd), Path::new(&name), false)
        {
            grants.add(fd, file_access)?;
        }
    }
    Ok(())
}

/// The filesystem grants for `args.level` (step 2 of the module doc),
/// added to `ruleset` as they are found. `protected`: the workspace's
/// protected paths from the server; `None` walks the workspace for them.
/// When `mounts` made them read-only mounts, the workspace is granted
/// whole (around the service's own files only): the mounts keep them.
pub(super) fn fs_rules(
    args: &WorkerArgs,
    protected: Option<&[PathBuf]>,
    mounts: MountView,
    ruleset: &mut RulesetCreated,
) -> Result<(), String> {
    let read = AccessFs::from_read(TARGET_ABI);
    // Regular files, directories and symlinks are made by the worker on
    // the command's behalf, never by the kernel for it: no `.git` may be
    // created (see [`super::entries`]).
    let all = AccessFs::from_all(TARGET_ABI)
        & !(AccessFs::MakeReg | AccessFs::MakeDir | AccessFs::MakeSym);
    let grants = &mut Grants { ruleset };
    let none = BTreeSet::new();
    let config_protected: BTreeSet<PathBuf> = args.protect.iter().cloned().collect();
    let add_tree = |grants: &mut Grants<'_>, path: &Path, access, excluded: &BTreeSet<PathBuf>| {
        match open_nofollow(None, path, true) {
            Ok(fd) => grant_except(grants, fd, path, access, excluded),
            // Missing system directories are normal (no /lib32 here).
            Err(_) => Ok(()),
        }
    };
    // The service's own files (config, policy; they may hold the auth
    // token) are left out of every read grant, wherever they live.
    for dir in SYSTEM_READ_DIRS {
        add_tree(grants, Path::new(dir), read, &config_protected)?;
    }
    for dir in &args.read {
        add_tree(grants, dir, read, &config_protected)?;
    }
    let mut etc_excluded: BTreeSet<PathBuf> = ETC_SECRETS
        .iter()
        .map(|s| Path::new("/etc").join(s))
        .collect();
    if let Ok(ssh) = std::fs::read_dir("/etc/ssh") {
        // Host private keys; their `.pub` halves stay readable.
        etc_excluded.extend(ssh.flatten().map(|e| e.path()).filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n.starts_with("ssh_host_") && !n.ends_with(".pub")
        }));
    }
    etc_excluded.extend(args.protect.iter().cloned());
    add_tree(grants, Path::new("/etc"), read, &etc_excluded)?;
    // Resolver config is often a symlink into /run.
    for dir in ["/run/systemd/resolve", "/run/resolvconf"] {
        add_tree(grants, Path::new(dir), read, &config_protected)?;
    }
    // /proc: the command's own view (ps, /proc/self/fd for `<(…)`); other
    // processes' secrets (environ, mem, fds) stay behind Landlock's ptrace
    // check: a confined process cannot ptrace-access one outside its domain.
    add_tree(
        grants,
        Path::new("/proc"),
        AccessFs::ReadFile | AccessFs::ReadDir,
        &none,
    )?;
    for dev in READ_DEVICES {
        if let Ok(fd) = open_nofollow(None, Path::new(dev), false) {
            grants.add(fd, AccessFs::ReadFile.into())?;
        }
    }
    let null = open_nofollow(None, Path::new("/dev/null"), false)
        .map_err(|e| format!("open /dev/null: {e}"))?;
    grants.add(
        null,
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
    )?;
    let ws = open_nofollow(None, &args.workspace, true)
        .map_err(|e| format!("open workspace {}: {e}", args.workspace.display()))?;
    if args.level.writes_workspace() {
        let mut protected: BTreeSet<PathBuf> = match protected {
            _ if mounts.protected_read_only => BTreeSet::new(),
            Some(p) => p.iter().cloned().collect(),
            None => protected_in(&args.workspace).into_iter().collect(),
        };
        protected.extend(args.protect.iter().cloned());
        let ws_read = ws.try_clone().map_err(|e| format!("dup: {e}"))?;
        grant_except(grants, ws_read, &args.workspace, read, &config_protected)?;
        grant_except(grants, ws, &args.workspace, all, &protected)?;
    } else {
        grant_except(grants, ws, &args.workspace, read, &config_protected)?;
    }
    let tmp = open_nofollow(None, &args.tmp, true)
        .map_err(|e| format!("open private tmp {}: {e}", args.tmp.display()))?;
    grants.add(tmp, all)
}

/// The Landlock ruleset of `args.level`, created (nothing enforced yet).
pub(super) fn landlock_ruleset(args: &WorkerArgs) -> Result<RulesetCreated, String> {
    let err = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(err)?
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(err)?;
    if !args.level.allows_network() {
        // Handled with no rule: no TCP bind or connect at all. seccomp
        // already refuses non-UNIX sockets; this holds if it were bypassed.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET_ABI))
            .map_err(err)?;
    }
    ruleset.create().map_err(err)
}

/// Enforces `ruleset` on this process from now on.
pub(super) fn apply_landlock(args: &WorkerArgs, ruleset: RulesetCreated) -> Result<(), String> {
    let status = ruleset
        .restrict_self()
        .map_err(|e| format!("Landlock: {e}"))?;
    if !status.no_new_privs {
        return Err("no_new_privs could not be set".into());
    }
    if status.ruleset == RulesetStatus::NotEnforced && !args.best_effort {
        return Err("Landlock is not enforced by this kernel".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beneath_finds_descendants_in_the_ordered_set() {
        let set: BTreeSet<PathBuf> = ["/w/a/.git", "/w/ab", "/w/b/c/d", "/w/b.c"]
            .into_iter()
            .map(PathBuf::from)
            .collect();
        for (dir, expected) in [
            ("/w", true),
            ("/w/a", true),
            ("/w/a/.git", true),
            ("/w/ab", true),
            ("/w/b", true),
            ("/w/b/c", true),
            ("/w/b/c/d/e", false),
            ("/w/a/src", false),
            ("/w/aa", false),
            ("/w/c", false),
            ("/x", false),
        ] {
            assert_eq!(any_at_or_beneath(&set, Path::new(dir)), expected, "{dir}");
        }
    }
}
