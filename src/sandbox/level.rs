//! The sandbox's vocabulary, imported by every other file of `sandbox`
//! and by the config and scheduler: the levels ([`SandboxLevel`]), the
//! per-command resource limits ([`ResourceLimits`]), the operator's
//! settings ([`SandboxConfig`]) and the one-sentence summary of what a level
//! allows ([`allowed_summary`]).
//!
//! Not here: probing the kernel, spawning, confining (the rest of `sandbox`).

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

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

    /// The level [`Self::name`] names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == name)
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
    /// [`super::worker_exe`]).
    pub worker_exe: Option<PathBuf>,
    /// Files or directories that commands may read but never write, even
    /// at a writing level: the service's config file, for one. Every `.git`
    /// in the workspace is protected without being listed (see
    /// [`super::protected`]).
    pub protected_paths: Vec<PathBuf>,
    /// Directories outside the system ones that commands may read and
    /// execute (toolchains under a home directory, for example).
    pub extra_read_paths: Vec<PathBuf>,
    /// Never use a private mount namespace for commands: protected paths
    /// are kept by Landlock alone (the directories on the way to one lose
    /// create, remove and rename) and `/proc` shows every process. Off by
    /// default; for hosts where namespaces misbehave, and for tests of the
    /// fallback.
    pub landlock_only: bool,
}

/// One sentence on what commands may do at `level`, for error messages.
pub fn allowed_summary(level: SandboxLevel) -> &'static str {
    match level {
        SandboxLevel::ReadOnly => {
            "read system directories and the workspace, and write only their private $TMPDIR and /dev/null; no network"
        }
        SandboxLevel::WorkspaceWrite => {
            "read system directories and the workspace, and write the workspace (except every .git, which stays read-only, and the service's config; no entry named .git may be made anywhere, so git init and git clone fail; a directory holding a .git cannot be renamed; where the server reports no mount namespace, nothing may be created, removed or renamed in a directory on the way to a .git), their private $TMPDIR and /dev/null; no network"
        }
        SandboxLevel::WorkspaceWriteNetwork => {
            "read system directories and the workspace, write the workspace (except every .git, which stays read-only, and the service's config; no entry named .git may be made anywhere, so git init and git clone fail; a directory holding a .git cannot be renamed; where the server reports no mount namespace, nothing may be created, removed or renamed in a directory on the way to a .git), their private $TMPDIR and /dev/null, and use the network"
        }
        SandboxLevel::None => "do anything the server's user may do",
    }
}
