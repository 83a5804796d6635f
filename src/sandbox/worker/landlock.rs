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
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

use super::mounts::MountView;
use super::{WorkerArgs, protected_in};
use crate::sandbox::protected::{on_trusted_filesystem, settled};

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
    /// When the ruleset is prepared to be kept (by the zygote): what it was
    /// built from, to tell later whether it is still what a build would be.
    stamps: Option<&'a mut Stamps>,
}

impl Grants<'_> {
    fn add(&mut self, fd: OwnedFd, access: BitFlags<AccessFs>) -> Result<(), String> {
        (&mut *self.ruleset)
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("Landlock: {e}"))?;
        Ok(())
    }

    /// `path` was opened as `opened` (a grant's root or a device): its
    /// identity is what the rule holds.
    fn saw_root(&mut self, path: &Path, opened: Result<&OwnedFd, ()>) {
        if let Some(s) = self.stamps.as_deref_mut() {
            let stamp = match opened {
                Ok(fd) => identity_of_fd(fd)
                    .map_or(Stamp::Unknown, |(dev, ino, _)| Stamp::Same { dev, ino }),
                Err(()) => Stamp::Absent(lstat_identity(path)),
            };
            s.entries.push((path.to_path_buf(), stamp));
        }
    }

    /// `dir`'s listing decided grants (an entry by entry grant, or which
    /// entries are left out): a change of entries must be seen.
    fn saw_listing(&mut self, dir: &Path, fd: &OwnedFd) {
        if let Some(s) = self.stamps.as_deref_mut() {
            let stamp = match identity_of_fd(fd) {
                Some((dev, ino, ctime)) => {
                    if !(on_trusted_filesystem(fd) && settled(ctime, s.started)) {
                        s.reusable = false;
                    }
                    Stamp::Unchanged { dev, ino, ctime }
                }
                None => {
                    s.reusable = false;
                    Stamp::Unknown
                }
            };
            s.entries.push((dir.to_path_buf(), stamp));
        }
    }
}

/// What a prepared ruleset was built from, checked before each reuse: the
/// rules hold inodes, so a root replaced at its path (a workspace renamed
/// away and made again) or an entry added to, removed from or renamed in a
/// directory granted entry by entry (`/etc` around its secrets: a file
/// renamed over `/etc/shadow` would keep its old grant) makes the kept
/// ruleset stale. A directory's `ctime` changes with every such entry
/// change and cannot be set by a system call (see
/// [`crate::sandbox::protected`], whose rules for coarse timestamps and
/// untrusted filesystems this follows).
#[derive(Debug)]
pub(crate) struct Stamps {
    entries: Vec<(PathBuf, Stamp)>,
    /// When the build started (for the racy-timestamp margin).
    started: SystemTime,
    /// False when a listed directory changed too recently, or lies on a
    /// filesystem whose `ctime` is not the kernel's: use once, keep never.
    pub(crate) reusable: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Stamp {
    /// Could not be opened; the symlink or other entry there then, if any.
    Absent(Option<(u64, u64)>),
    /// A grant's root: the same inode.
    Same { dev: u64, ino: u64 },
    /// A listed directory: the same inode, no entry changed.
    Unchanged {
        dev: u64,
        ino: u64,
        ctime: (i64, i64),
    },
    /// Could not be identified: never reused.
    Unknown,
}

impl Stamps {
    fn new() -> Self {
        Self {
            entries: Vec::new(),
            started: SystemTime::now(),
            reusable: true,
        }
    }

    /// Whether every path is still what the ruleset was built from: one
    /// `lstat` each (a few dozen), against the ~600 system calls of a build.
    pub(crate) fn still_hold(&self) -> bool {
        self.reusable
            && self.entries.iter().all(|(path, stamp)| {
                let now = std::fs::symlink_metadata(path).ok();
                match stamp {
                    Stamp::Absent(was) => now.map(|m| (m.dev(), m.ino())) == *was,
                    Stamp::Same { dev, ino } => now.is_some_and(|m| {
                        !m.file_type().is_symlink() && m.dev() == *dev && m.ino() == *ino
                    }),
                    Stamp::Unchanged { dev, ino, ctime } => now.is_some_and(|m| {
                        m.is_dir()
                            && m.dev() == *dev
                            && m.ino() == *ino
                            && (m.ctime(), m.ctime_nsec()) == *ctime
                    }),
                    Stamp::Unknown => false,
                }
            })
    }
}

fn identity_of_fd(fd: &OwnedFd) -> Option<(u64, u64, (i64, i64))> {
    // SAFETY: fstat into a zeroed local through a valid fd (O_PATH fds
    // may be fstat'ed).
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return None;
        }
        st
    };
    Some((st.st_dev, st.st_ino, (st.st_ctime, st.st_ctime_nsec)))
}

fn lstat_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
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
    grants.saw_listing(dir, &dirfd);
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
/// `tmp`: the directory granted as the private tmp (the command's own, or
/// the anchor its tmp is bound beneath, see [`super::mounts`]). `stamps`:
/// filled when the ruleset is prepared to be kept ([`prepare_shared`]).
pub(super) fn fs_rules(
    args: &WorkerArgs,
    protected: Option<&[PathBuf]>,
    mounts: MountView,
    tmp: &Path,
    ruleset: &mut RulesetCreated,
    stamps: Option<&mut Stamps>,
) -> Result<(), String> {
    let read = AccessFs::from_read(TARGET_ABI);
    // Regular files, directories and symlinks are made by the worker on
    // the command's behalf, never by the kernel for it: no `.git` may be
    // created (see [`super::entries`]).
    let all = AccessFs::from_all(TARGET_ABI)
        & !(AccessFs::MakeReg | AccessFs::MakeDir | AccessFs::MakeSym);
    let grants = &mut Grants { ruleset, stamps };
    let none = BTreeSet::new();
    let config_protected: BTreeSet<PathBuf> = args.protect.iter().cloned().collect();
    let add_tree = |grants: &mut Grants<'_>, path: &Path, access, excluded: &BTreeSet<PathBuf>| {
        match open_nofollow(None, path, true) {
            Ok(fd) => {
                grants.saw_root(path, Ok(&fd));
                grant_except(grants, fd, path, access, excluded)
            }
            // Missing system directories are normal (no /lib32 here).
            Err(_) => {
                grants.saw_root(path, Err(()));
                Ok(())
            }
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
    let ssh = Path::new("/etc/ssh");
    match open_nofollow(None, ssh, true) {
        Ok(fd) => {
            // Its listing decides what is left out, so it is stamped like
            // a directory granted entry by entry.
            grants.saw_listing(ssh, &fd);
            if let Ok(entries) = cap_std::fs::Dir::from_std_file(File::from(fd)).entries() {
                // Host private keys; their `.pub` halves stay readable.
                etc_excluded.extend(entries.flatten().map(|e| ssh.join(e.file_name())).filter(
                    |p| {
                        let n = p
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        n.starts_with("ssh_host_") && !n.ends_with(".pub")
                    },
                ));
            }
        }
        Err(_) => grants.saw_root(ssh, Err(())),
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
        let opened = open_nofollow(None, Path::new(dev), false);
        grants.saw_root(Path::new(dev), opened.as_ref().map_err(|_| ()));
        if let Ok(fd) = opened {
            grants.add(fd, AccessFs::ReadFile.into())?;
        }
    }
    let null = open_nofollow(None, Path::new("/dev/null"), false)
        .map_err(|e| format!("open /dev/null: {e}"))?;
    grants.saw_root(Path::new("/dev/null"), Ok(&null));
    grants.add(
        null,
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
    )?;
    let ws = open_nofollow(None, &args.workspace, true)
        .map_err(|e| format!("open workspace {}: {e}", args.workspace.display()))?;
    grants.saw_root(&args.workspace, Ok(&ws));
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
    let tmp_fd = open_nofollow(None, tmp, true)
        .map_err(|e| format!("open private tmp {}: {e}", tmp.display()))?;
    grants.saw_root(tmp, Ok(&tmp_fd));
    grants.add(tmp_fd, all)
}

/// A ruleset prepared once (by the zygote) for every command with the same
/// options, and what it was built from.
pub(crate) struct Shared {
    /// The ruleset's fd; a worker applies it with `landlock_restrict_self`.
    pub(crate) fd: OwnedFd,
    pub(crate) stamps: Stamps,
}

/// The ruleset of `args` for a command whose protected paths are read-only
/// mounts and whose private tmp is bound beneath `anchor` (see
/// [`super::mounts`]): nothing in it is the command's own, so it serves
/// every such command with the same options. `None` when the kernel has no
/// Landlock (the worker then reports that itself).
pub(crate) fn prepare_shared(args: &WorkerArgs, anchor: &Path) -> Result<Option<Shared>, String> {
    let mut ruleset = landlock_ruleset(args)?;
    let mut stamps = Stamps::new();
    let mounts = MountView {
        protected_read_only: true,
        ..MountView::default()
    };
    fs_rules(args, None, mounts, anchor, &mut ruleset, Some(&mut stamps))?;
    let fd: Option<OwnedFd> = ruleset.into();
    Ok(fd.map(|fd| Shared { fd, stamps }))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory listed for a grant (one of its entries is left out),
    /// stamped as a build long after its last change would stamp it.
    fn stamped(root: &Path, excluded: &BTreeSet<PathBuf>) -> Stamps {
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(TARGET_ABI))
            .unwrap()
            .create()
            .unwrap();
        let mut stamps = Stamps {
            started: SystemTime::now() + crate::sandbox::protected::RACY_MARGIN * 2,
            ..Stamps::new()
        };
        let mut grants = Grants {
            ruleset: &mut ruleset,
            stamps: Some(&mut stamps),
        };
        let fd = open_nofollow(None, root, true).unwrap();
        grants.saw_root(root, Ok(&fd));
        grant_except(
            &mut grants,
            fd,
            root,
            AccessFs::from_read(TARGET_ABI),
            excluded,
        )
        .unwrap();
        let missing = root.join("not-yet");
        grants.saw_root(&missing, Err(()));
        stamps
    }

    #[test]
    fn stamps_see_entry_changes_replaced_roots_and_new_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("plain"), "x").unwrap();
        let excluded: BTreeSet<PathBuf> = [root.join("secret")].into_iter().collect();

        let stamps = stamped(&root, &excluded);
        assert!(stamps.reusable);
        assert!(stamps.still_hold(), "nothing changed");
        // A file renamed over the left-out name would keep its old grant.
        std::fs::rename(root.join("plain"), root.join("secret")).unwrap();
        assert!(
            !stamps.still_hold(),
            "an entry renamed in a listed directory"
        );

        let stamps = stamped(&root, &excluded);
        std::fs::rename(&root, dir.path().join("r-old")).unwrap();
        std::fs::create_dir(&root).unwrap();
        assert!(!stamps.still_hold(), "the root replaced at its path");

        let stamps = stamped(&root, &excluded);
        std::fs::create_dir(root.join("not-yet")).unwrap();
        assert!(!stamps.still_hold(), "a path absent at the build appeared");

        // Built right after a change: used once, never kept.
        let mut fresh = Stamps::new();
        let fd = open_nofollow(None, &root, true).unwrap();
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(TARGET_ABI))
            .unwrap()
            .create()
            .unwrap();
        Grants {
            ruleset: &mut ruleset,
            stamps: Some(&mut fresh),
        }
        .saw_listing(&root, &fd);
        assert!(!fresh.reusable);
        assert!(!fresh.still_hold());
    }

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
