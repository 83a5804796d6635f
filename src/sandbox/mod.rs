//! Where tools may act, and the kernel-enforced boundary around what they run.
//!
//! [`Workspace`] resolves every path a tool is given inside the workspace root
//! and opens files beneath it race-free (openat2 `RESOLVE_BENEATH` through
//! `cap-std`). [`process`] runs shell commands through a **worker**: this
//! binary re-executed as `toolsched sandbox-exec` ([`worker`]), which puts the
//! command in its own session, becomes its child subreaper, joins a pids
//! cgroup where one is delegated, and in the forked command process drops
//! capabilities, sets `no_new_privs`, resource limits, a parent-death signal,
//! Landlock and seccomp before it `exec`s bash. [`probe`] finds out at
//! start-up what the kernel can enforce, so the service refuses to start
//! rather than run a level it cannot keep. [`protected`] keeps the set of
//! paths commands may never write (every `.git`) between commands, so that
//! the worker does not walk the workspace for it each time.
//!
//! The server process itself is never confined: it needs the network and its
//! own files. Its file tools rely on [`Workspace`]'s beneath-the-root opens.
//!
//! Not here: deciding whether a command may run (`policy`).

pub mod probe;
pub mod process;
pub mod protected;
pub mod worker;
mod workspace;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

pub use probe::{ProbeReport, ProcessLimitKind};
pub use process::{OutputLimits, ProcessOutcome, ProcessSpec, run_process};
pub use protected::ProtectedPaths;
pub use worker::WorkerArgs;
pub use workspace::{BeneathError, PathError, Workspace, temp_name};

/// How much a command may do. Chosen by the operator (config, flag
/// `--sandbox-level`, env `TOOLSCHED_SANDBOX_LEVEL`); `none` only when set
/// explicitly.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum SandboxLevel {
    /// Read system directories and the workspace; write only a private tmp
    /// and `/dev/null`; no network.
    ReadOnly,
    /// As `read_only`, and write the workspace except protected paths (every
    /// `.git` at any depth, the service's config). No network.
    #[default]
    WorkspaceWrite,
    /// As `workspace_write`, with network sockets (TCP/UDP) allowed.
    WorkspaceWriteNetwork,
    /// No Landlock, no seccomp: for a pod or VM that is already the boundary.
    /// Process control (session, limits, timeout, kill) still applies.
    None,
}

impl SandboxLevel {
    /// Every level, strictest first.
    pub const ALL: [SandboxLevel; 4] = [
        SandboxLevel::ReadOnly,
        SandboxLevel::WorkspaceWrite,
        SandboxLevel::WorkspaceWriteNetwork,
        SandboxLevel::None,
    ];

    /// Whether this level allows no more than `other` does (a session may
    /// choose such a level under a server configured with `other`).
    pub fn at_most(self, other: SandboxLevel) -> bool {
        let rank = |l: SandboxLevel| Self::ALL.iter().position(|x| *x == l).unwrap_or(0);
        rank(self) <= rank(other)
    }

    /// The snake_case name used in config, flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            SandboxLevel::ReadOnly => "read_only",
            SandboxLevel::WorkspaceWrite => "workspace_write",
            SandboxLevel::WorkspaceWriteNetwork => "workspace_write_network",
            SandboxLevel::None => "none",
        }
    }

    /// Whether Landlock and seccomp are applied at this level.
    pub fn is_confined(self) -> bool {
        self != SandboxLevel::None
    }

    /// Whether the command may write the workspace.
    pub fn writes_workspace(self) -> bool {
        matches!(
            self,
            SandboxLevel::WorkspaceWrite | SandboxLevel::WorkspaceWriteNetwork
        )
    }

    /// Whether the command may open network sockets.
    pub fn allows_network(self) -> bool {
        matches!(
            self,
            SandboxLevel::WorkspaceWriteNetwork | SandboxLevel::None
        )
    }
}

impl fmt::Display for SandboxLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Resource limits of every command (setrlimit in the worker, before exec).
/// Each is a named config field (`sandbox_<name>`) with the default below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// RLIMIT_CPU in seconds: a busy loop cannot outlive this even when the
    /// wall-clock timeout is long.
    pub cpu_secs: u64,
    /// RLIMIT_AS in bytes: one command cannot exhaust the server's memory.
    pub address_space_bytes: u64,
    /// RLIMIT_FSIZE in bytes: the largest file a command may write (it gets
    /// SIGXFSZ beyond), so it cannot fill the disk with one file.
    pub file_size_bytes: u64,
    /// Processes (and threads) of one command: RLIMIT_NPROC, and `pids.max`
    /// of its cgroup where one is delegated (RLIMIT_NPROC does not bind
    /// uid 0). Bounds fork bombs.
    pub processes: u64,
    /// RLIMIT_NOFILE: open files per process.
    pub open_files: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            // Matches the default execution timeout: CPU time cannot exceed it.
            cpu_secs: 300,
            // Room for compilers and language runtimes that reserve address
            // space generously, far below what would take the host down.
            address_space_bytes: 8 << 30,
            // Build artefacts fit; a runaway `yes > file` stops at 4 GiB.
            file_size_bytes: 4 << 30,
            // A parallel build fits; a fork bomb stops here.
            processes: 512,
            // Typical distribution default hard limit for a user session.
            open_files: 4096,
        }
    }
}

/// The sandbox settings of the service.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    /// The level every command runs at.
    pub level: SandboxLevel,
    /// Start (and run commands best-effort) even when the kernel cannot
    /// enforce `level`. Off by default: the service refuses to start instead.
    /// What is missing is logged and reported by GetServerInfo either way.
    pub allow_weaker: bool,
    pub limits: ResourceLimits,
    /// The binary re-executed as the worker; `None` finds it (see
    /// [`worker_exe`]).
    pub worker_exe: Option<PathBuf>,
    /// Files or directories that commands may read but never write, even
    /// at a writing level: the service's config file, for one. Every `.git`
    /// in the workspace is protected without being listed (see
    /// [`protected`]).
    pub protected_paths: Vec<PathBuf>,
    /// Directories outside the system ones that commands may read and
    /// execute (toolchains under a home directory, for example).
    pub extra_read_paths: Vec<PathBuf>,
}

/// The configured sandbox and what the kernel enforces of it, probed once.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub config: SandboxConfig,
    pub probe: ProbeReport,
    /// The protected paths of each workspace commands ran in, kept between
    /// commands; shared with the sandboxes made by [`Sandbox::at_level`].
    protected: Arc<protected::ProtectedRegistry>,
}

/// Why the service must not start with the configured sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "sandbox level {level} cannot be enforced on this kernel: missing {missing}. Fix the host (see the README's Sandbox section), choose another level with --sandbox-level, or start anyway with --sandbox-allow-weaker (commands then run with only what the kernel enforces)"
    )]
    Unenforceable {
        level: SandboxLevel,
        missing: String,
    },
    #[error("cannot find the worker binary {path}: set sandbox_worker_exe to the toolsched binary")]
    NoWorker { path: String },
}

impl Sandbox {
    /// Probes the kernel for `config`. Never fails: [`Sandbox::check`] says
    /// whether the result is good enough to start.
    pub fn new(config: SandboxConfig) -> Self {
        let probe = probe::probe(config.level);
        Self {
            config,
            probe,
            protected: Arc::default(),
        }
    }

    /// The same sandbox at another `level`, judged from this one's probe
    /// (the kernel is not probed again), sharing what this one keeps
    /// between commands (the protected paths of each workspace).
    pub fn at_level(&self, level: SandboxLevel) -> Self {
        let config = SandboxConfig {
            level,
            ..self.config.clone()
        };
        Self {
            probe: self.probe.at_level(level),
            config,
            protected: self.protected.clone(),
        }
    }

    /// The protected paths of the workspace at `root` (canonical), kept
    /// between the commands of every sandbox sharing this one's cache.
    pub fn protected_paths(&self, root: &std::path::Path) -> Arc<ProtectedPaths> {
        self.protected.get(root)
    }

    /// Ok when the configured level is enforced in full, or when the operator
    /// allowed a weaker one (the caller logs what is missing).
    pub fn check(&self) -> Result<(), SandboxError> {
        let exe = worker_exe(self.config.worker_exe.as_deref());
        if !exe.is_file() {
            return Err(SandboxError::NoWorker {
                path: exe.display().to_string(),
            });
        }
        if self.probe.missing.is_empty() || self.config.allow_weaker {
            return Ok(());
        }
        Err(SandboxError::Unenforceable {
            level: self.config.level,
            missing: self.probe.missing.join(", "),
        })
    }

    /// Whether commands run with everything the configured level asks for.
    pub fn enforced(&self) -> bool {
        self.probe.missing.is_empty()
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new(SandboxConfig::default())
    }
}

/// The worker binary: `configured`, else this executable when it is the
/// toolsched binary, else a `toolsched` next to it or one directory up
/// (where Cargo puts the binary relative to test executables in `deps/`).
pub fn worker_exe(configured: Option<&std::path::Path>) -> PathBuf {
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    let Ok(me) = std::env::current_exe() else {
        return PathBuf::from("toolsched");
    };
    if me.file_stem().is_some_and(|s| s == "toolsched") {
        return me;
    }
    let dir = me
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    for candidate in [dir.join("toolsched"), dir.join("..").join("toolsched")] {
        if candidate.is_file() {
            return candidate;
        }
    }
    dir.join("toolsched")
}

/// One sentence on what commands may do at `level`, for error messages.
pub fn allowed_summary(level: SandboxLevel) -> &'static str {
    match level {
        SandboxLevel::ReadOnly => {
            "read system directories and the workspace, and write only their private $TMPDIR and /dev/null; no network"
        }
        SandboxLevel::WorkspaceWrite => {
            "read system directories and the workspace, and write the workspace (except .git directories and the service's config; and no file may be created, removed or renamed directly in a directory that holds a .git, such as a repository's root, because Landlock cannot exempt one entry: existing files there stay writable, subdirectories are free), their private $TMPDIR and /dev/null; no network"
        }
        SandboxLevel::WorkspaceWriteNetwork => {
            "read system directories and the workspace, write the workspace (except .git directories and the service's config; and no file may be created, removed or renamed directly in a directory that holds a .git, such as a repository's root, because Landlock cannot exempt one entry: existing files there stay writable, subdirectories are free), their private $TMPDIR and /dev/null, and use the network"
        }
        SandboxLevel::None => "do anything the server's user may do",
    }
}

/// Shared handle, as held by the scheduler config and execution contexts.
pub type SharedSandbox = Arc<Sandbox>;
