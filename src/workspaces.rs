//! Named workspaces under a workspaces root (DESIGN §11, issue 18 item 1).
//!
//! With `--workspaces-root DIR`, a session names its workspace and works in
//! `DIR/<tenant>/<name>` for its whole life. Everything that belongs to "the
//! workspace" hangs off one [`OpenWorkspace`]: the beneath-the-root fd
//! ([`Workspace`]), and the built-in tools built over it (path resolution,
//! protected paths, ignore rules, and the root a shell command's Landlock
//! grants and private mounts name). The session holds its
//! `Arc<OpenWorkspace>` and overlays those built-ins on the shared registry
//! (MCP tools stay shared), so every call of the session resolves against
//! its own workspace: the class "a tool acts on the server's workspace" is
//! fixed once, not per tool.
//!
//! Owns: [`WorkspaceName`] (validated once at the API edge), the tenant's
//! allowed names ([`TenantConfig::workspaces`], globs), opening (and, with
//! `--create-workspaces`, creating) a workspace, a bounded cache of open
//! ones keyed by (tenant, name), and listing a tenant's workspaces.
//!
//! Not here: which session uses which workspace (the hub and the session
//! actor), the kernel boundary itself (`sandbox::worker`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::sandbox::Workspace;
use crate::tenant::{InvalidName, TenantConfig, TenantId, check_name};
use crate::tools::kept::OutputKeeper;
use crate::tools::{Registry, RegistryError};

/// Longest workspace name, in bytes: it is a directory name and appears in
/// log lines and audit records.
pub const MAX_WORKSPACE_NAME_BYTES: usize = 128;
/// Workspaces kept open at once (an fd and the built-in tools each); the
/// least recently used one past this is closed (sessions using it keep
/// theirs).
pub const DEFAULT_MAX_OPEN_WORKSPACES: usize = 1024;
/// Names one `ListWorkspaces` returns at most (the reply is marked
/// truncated beyond): a reply must fit a gRPC message.
pub const MAX_LISTED_WORKSPACES: usize = 10_000;
/// Characters of a refused name that are echoed back in an error.
const SHOWN_NAME_CHARS: usize = 64;

/// A workspace's name: 1..=[`MAX_WORKSPACE_NAME_BYTES`] of ASCII letters,
/// digits, `-`, `_`, `.`, and not `.` or `..` (it is one path component).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkspaceName(Arc<str>);

impl WorkspaceName {
    pub fn new(name: &str) -> Result<Self, InvalidName> {
        check_name("workspace", name, MAX_WORKSPACE_NAME_BYTES)?;
        Ok(Self(name.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for WorkspaceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A short, safe prefix of a name a client sent, for error messages.
pub fn shown(name: &str) -> String {
    let mut out: String = name
        .chars()
        .take(SHOWN_NAME_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if name.chars().count() > SHOWN_NAME_CHARS {
        out.push('…');
    }
    out
}

/// How named workspaces are served (`SchedulerConfig::workspaces`).
#[derive(Debug, Clone)]
pub struct WorkspacesConfig {
    /// `--workspaces-root`: workspaces are `root/<tenant>/<name>`.
    pub root: PathBuf,
    /// `--create-workspaces`: a missing workspace is created empty (0700)
    /// instead of refused.
    pub create: bool,
    /// Open workspaces cached at once (see [`DEFAULT_MAX_OPEN_WORKSPACES`]).
    pub max_open: usize,
    /// `[[tenants]]`: per tenant, the workspace names it may use.
    pub tenants: Vec<TenantConfig>,
}

impl WorkspacesConfig {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            create: false,
            max_open: DEFAULT_MAX_OPEN_WORKSPACES,
            tenants: Vec::new(),
        }
    }
}

/// Why a session cannot use a workspace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    /// FAILED_PRECONDITION: the server has a workspaces root and the
    /// session's first batch named no workspace.
    #[error(
        "this server serves named workspaces (--workspaces-root): set ScheduleCallsRequest.workspace on the session's first batch"
    )]
    Required,
    /// INVALID_ARGUMENT: a name on a server with one workspace.
    #[error(
        "workspace '{}' named, but this server has a single workspace (no --workspaces-root); leave workspace empty",
        shown(given)
    )]
    NotServed { given: String },
    /// PERMISSION_DENIED: the tenant's `workspaces` globs do not match.
    #[error(
        "tenant {tenant} may not use workspace '{name}' (see the tenant's `workspaces` in the config)"
    )]
    NotAllowed { tenant: String, name: String },
    /// NOT_FOUND: no such directory and no `--create-workspaces`.
    #[error(
        "workspace '{name}' does not exist for tenant {tenant} (the server creates none without --create-workspaces)"
    )]
    Missing { tenant: String, name: String },
    /// FAILED_PRECONDITION: the session already works in another one.
    #[error(
        "session works in workspace '{session_workspace}' for its whole life; this batch named '{}'",
        shown(requested)
    )]
    Mismatch {
        session_workspace: String,
        requested: String,
    },
    /// UNAVAILABLE: the directory exists but cannot be used (not a plain
    /// directory, a symlink on the way, an I/O error). Details are logged.
    #[error("workspace '{name}' cannot be opened; the server logged why")]
    Unusable { name: String },
}

/// One open workspace: its root fd and the built-in tools over it.
pub struct OpenWorkspace {
    pub tenant: TenantId,
    pub name: WorkspaceName,
    pub workspace: Arc<Workspace>,
    /// The built-in tools over `workspace` only (no MCP tools): overlaid on
    /// the shared registry by the session (see [`Registry::overlaid`]).
    pub builtin: Arc<Registry>,
}

impl std::fmt::Debug for OpenWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenWorkspace")
            .field("tenant", &self.tenant)
            .field("name", &self.name)
            .field("root", &self.workspace.root())
            .finish()
    }
}

/// Open workspaces by (tenant, name), with a use counter for LRU eviction.
type Cache = HashMap<(TenantId, WorkspaceName), Cached>;

struct Cached {
    open: Arc<OpenWorkspace>,
    last_used: u64,
}

/// The workspaces root: opens, creates, caches and lists workspaces.
/// Shared by the scheduler handle (which opens a workspace before the
/// batch reaches the hub, off the hub's task) and read by `ListWorkspaces`.
pub struct Workspaces {
    /// Canonical root.
    root: PathBuf,
    create: bool,
    max_open: usize,
    /// Allowed names per tenant; a tenant absent here may use any name.
    allowed: HashMap<String, globset::GlobSet>,
    kept: Option<Arc<OutputKeeper>>,
    blocking_io: bool,
    /// The service's own files, hidden from the tools of every workspace
    /// (see [`Workspace::with_hidden`]).
    hidden: Vec<PathBuf>,
    /// A lookup cache, locked only for map operations (never across I/O):
    /// two first opens of one workspace at once both open it and one wins.
    cache: Mutex<(u64, Cache)>,
}

/// Why the workspaces root cannot be served (start-up).
#[derive(Debug, thiserror::Error)]
pub enum WorkspacesSetupError {
    #[error("workspaces root {path}: {source}")]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tenant {tenant}: workspace pattern '{pattern}': {reason}")]
    Glob {
        tenant: String,
        pattern: String,
        reason: String,
    },
    #[error("tenant {0} is configured twice in [[tenants]]")]
    DuplicateTenant(String),
}

impl Workspaces {
    /// The root of `config` (an existing directory), serving built-in tools
    /// that keep whole shell outputs in `kept`.
    pub fn new(
        config: &WorkspacesConfig,
        kept: Option<Arc<OutputKeeper>>,
        blocking_io: bool,
    ) -> Result<Self, WorkspacesSetupError> {
        let root_err = |source| WorkspacesSetupError::Root {
            path: config.root.clone(),
            source,
        };
        let root = std::fs::canonicalize(&config.root).map_err(root_err)?;
        if !root.is_dir() {
            return Err(root_err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "not a directory",
            )));
        }
        let mut allowed = HashMap::new();
        for tenant in &config.tenants {
            if tenant.workspaces.is_empty() {
                continue;
            }
            let mut set = globset::GlobSetBuilder::new();
            for pattern in &tenant.workspaces {
                let glob = globset::GlobBuilder::new(pattern)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| WorkspacesSetupError::Glob {
                        tenant: tenant.name.clone(),
                        pattern: pattern.clone(),
                        reason: e.kind().to_string(),
                    })?;
                set.add(glob);
            }
            let set = set.build().map_err(|e| WorkspacesSetupError::Glob {
                tenant: tenant.name.clone(),
                pattern: tenant.workspaces.join(", "),
                reason: e.to_string(),
            })?;
            if allowed.insert(tenant.name.clone(), set).is_some() {
                return Err(WorkspacesSetupError::DuplicateTenant(tenant.name.clone()));
            }
        }
        Ok(Self {
            root,
            create: config.create,
            max_open: config.max_open.max(1),
            allowed,
            kept,
            blocking_io,
            hidden: Vec::new(),
            cache: Mutex::new((0, HashMap::new())),
        })
    }

    /// With the service's own files hidden from every workspace's tools
    /// (see [`Workspace::with_hidden`]).
    pub fn with_hidden(mut self, hidden: &[PathBuf]) -> Self {
        self.hidden = hidden.to_vec();
        self
    }

    /// The canonical workspaces root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether missing workspaces are created.
    pub fn creates(&self) -> bool {
        self.create
    }

    /// Whether `tenant` may use `name`.
    pub fn allows(&self, tenant: &TenantId, name: &WorkspaceName) -> bool {
        self.allowed
            .get(tenant.as_str())
            .is_none_or(|set| set.is_match(name.as_str()))
    }

    /// `tenant`'s workspace `name`, opened (or created) and cached.
    /// Blocking (a directory open, maybe a mkdir): call it off the async
    /// runtime.
    pub fn open(
        &self,
        tenant: &TenantId,
        name: &WorkspaceName,
    ) -> Result<Arc<OpenWorkspace>, WorkspaceError> {
        if !self.allows(tenant, name) {
            return Err(WorkspaceError::NotAllowed {
                tenant: tenant.to_string(),
                name: name.to_string(),
            });
        }
        let key = (tenant.clone(), name.clone());
        {
            let mut guard = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            let (tick, map) = &mut *guard;
            *tick += 1;
            if let Some(c) = map.get_mut(&key) {
                c.last_used = *tick;
                return Ok(c.open.clone());
            }
        }
        let open = Arc::new(self.open_uncached(tenant, name)?);
        let mut guard = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let (tick, map) = &mut *guard;
        *tick += 1;
        if map.len() >= self.max_open && !map.contains_key(&key) {
            // One scan, only at the cap: the least recently used goes.
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, c)| c.last_used)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        let entry = map.entry(key).or_insert(Cached {
            open,
            last_used: *tick,
        });
        Ok(entry.open.clone())
    }

    fn open_uncached(
        &self,
        tenant: &TenantId,
        name: &WorkspaceName,
    ) -> Result<OpenWorkspace, WorkspaceError> {
        let unusable = |why: &dyn std::fmt::Display| {
            tracing::warn!(%tenant, workspace = %name, reason = %why, "workspace cannot be opened");
            WorkspaceError::Unusable {
                name: name.to_string(),
            }
        };
        // Both are single path components (checked names, never `.`/`..`).
        let tenant_dir = self.root.join(tenant.as_str());
        let path = tenant_dir.join(name.as_str());
        if self.create {
            use std::os::unix::fs::DirBuilderExt;
            for dir in [&tenant_dir, &path] {
                match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                    Ok(()) => {
                        tracing::info!(%tenant, workspace = %name, path = %dir.display(), "created")
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(unusable(&e)),
                }
            }
        }
        let workspace = match Workspace::new(&path) {
            Ok(w) => w
                .with_blocking_io(self.blocking_io)
                .with_hidden(&self.hidden),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(WorkspaceError::Missing {
                    tenant: tenant.to_string(),
                    name: name.to_string(),
                });
            }
            Err(e) => return Err(unusable(&e)),
        };
        // A symlink at `<tenant>` or `<name>` would make this session work
        // in someone else's directory: the canonical root must be exactly
        // the expected path.
        if workspace.root() != path {
            return Err(unusable(&format!(
                "{} resolves to {} (a symlink on the way)",
                path.display(),
                workspace.root().display()
            )));
        }
        let workspace = Arc::new(workspace);
        let builtin = Registry::builtin_with(workspace.clone(), self.kept.clone())
            .map_err(|e: RegistryError| unusable(&e))?;
        Ok(OpenWorkspace {
            tenant: tenant.clone(),
            name: name.clone(),
            workspace,
            builtin: Arc::new(builtin),
        })
    }

    /// `tenant`'s workspaces: the directories under `root/<tenant>` with
    /// valid names the tenant may use, sorted, at most
    /// [`MAX_LISTED_WORKSPACES`] (the bool: more were left off). Blocking.
    pub fn list(&self, tenant: &TenantId) -> std::io::Result<(Vec<WorkspaceName>, bool)> {
        let dir = self.root.join(tenant.as_str());
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), false)),
            Err(e) => return Err(e),
        };
        let mut names = BTreeMap::new();
        let mut truncated = false;
        for entry in entries {
            let entry = entry?;
            // A symlink is not a workspace (opening it is refused too).
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let Some(Ok(name)) = entry.file_name().to_str().map(WorkspaceName::new) else {
                continue;
            };
            if !self.allows(tenant, &name) {
                continue;
            }
            names.insert(name, ());
            if names.len() > MAX_LISTED_WORKSPACES {
                names.pop_last();
                truncated = true;
            }
        }
        Ok((names.into_keys().collect(), truncated))
    }
}

impl std::fmt::Debug for Workspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspaces")
            .field("root", &self.root)
            .field("create", &self.create)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_safe_path_component() {
        assert!(WorkspaceName::new("main").is_ok());
        assert!(WorkspaceName::new("a-b_c.1").is_ok());
        // `.git` would be the repository of every sibling workspace.
        for bad in [
            "", ".", "..", ".git", ".GIT", ".hidden", "...", "a/b", "a b", "é",
        ] {
            assert!(WorkspaceName::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(WorkspaceName::new(&"x".repeat(129)).is_err());
        assert_eq!(shown(&"y".repeat(100)).chars().count(), 65);
    }

    #[test]
    fn tenant_globs_limit_names_and_an_absent_tenant_may_use_any() {
        let root = tempfile::tempdir().unwrap();
        let mut config = WorkspacesConfig::new(root.path());
        config.tenants.push(TenantConfig {
            name: "acme".into(),
            workspaces: vec!["proj-*".into(), "main".into()],
            ..Default::default()
        });
        let ws = Workspaces::new(&config, None, false).unwrap();
        let acme = TenantId::new("acme").unwrap();
        let other = TenantId::new("beta").unwrap();
        let n = |s| WorkspaceName::new(s).unwrap();
        assert!(ws.allows(&acme, &n("proj-1")));
        assert!(ws.allows(&acme, &n("main")));
        assert!(!ws.allows(&acme, &n("secret")));
        assert!(ws.allows(&other, &n("secret")));
        assert_eq!(
            ws.open(&acme, &n("secret")).unwrap_err(),
            WorkspaceError::NotAllowed {
                tenant: "acme".into(),
                name: "secret".into()
            }
        );
    }

    #[test]
    fn the_cache_is_bounded_and_a_symlinked_workspace_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let mut config = WorkspacesConfig::new(root.path());
        config.create = true;
        config.max_open = 2;
        let ws = Workspaces::new(&config, None, false).unwrap();
        let t = TenantId::new("t").unwrap();
        let n = |s| WorkspaceName::new(s).unwrap();
        let a = ws.open(&t, &n("a")).unwrap();
        assert!(Arc::ptr_eq(&a, &ws.open(&t, &n("a")).unwrap()));
        ws.open(&t, &n("b")).unwrap();
        ws.open(&t, &n("c")).unwrap();
        assert_eq!(ws.cache.lock().unwrap().1.len(), 2);
        // `a` was evicted: a new open, same directory.
        let again = ws.open(&t, &n("a")).unwrap();
        assert!(!Arc::ptr_eq(&a, &again));
        assert_eq!(a.workspace.root(), again.workspace.root());

        std::os::unix::fs::symlink(root.path().join("t/a"), root.path().join("t/link")).unwrap();
        assert_eq!(
            ws.open(&t, &n("link")).unwrap_err(),
            WorkspaceError::Unusable {
                name: "link".into()
            }
        );
        let (names, truncated) = ws.list(&t).unwrap();
        let names: Vec<_> = names.iter().map(|n| n.as_str().to_string()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(!truncated);
    }
}
