//! Where tools may act, and the kernel-enforced boundary around what they run.
//!
//! [`Workspace`] resolves every path a tool is given inside the workspace root
//! and opens files beneath it race-free (openat2 `RESOLVE_BENEATH` through
//! `cap-std`). [`process`] runs shell commands through a **worker**: this
//! binary re-executed as `toolsched sandbox-exec` ([`worker`]), which puts the
//! command in its own session, becomes its child subreaper, joins a pids
//! cgroup where one is delegated, and in the command process drops
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
//! This file is the assembly: it declares the modules, re-exports what the
//! rest of the crate uses, and holds [`Sandbox`] (the configured sandbox and
//! its probe, shared by every command). The vocabulary every file imports
//! (levels, limits, settings) is in [`level`].
//!
//! Not here: deciding whether a command may run (`policy`).

mod cgroup;
mod level;
pub mod probe;
pub mod process;
pub mod protected;
pub mod worker;
mod workspace;
pub mod zygote;

use std::path::PathBuf;
use std::sync::Arc;

pub use level::{ResourceLimits, SandboxConfig, SandboxLevel, allowed_summary};
pub use probe::{ProbeReport, ProcessLimitKind};
pub use process::{OutputLimits, ProcessOutcome, ProcessSpec, Spill, run_process};
pub use protected::ProtectedPaths;
pub use worker::WorkerArgs;
pub use workspace::{BeneathError, PathError, Workspace, is_temp_name, temp_name};

/// The configured sandbox and what the kernel enforces of it, probed once.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub config: SandboxConfig,
    pub probe: ProbeReport,
    /// The protected paths of each workspace commands ran in, kept between
    /// commands; shared with the sandboxes made by [`Sandbox::at_level`].
    protected: Arc<protected::ProtectedRegistry>,
    /// The pre-started worker every command of this sandbox (and of those
    /// made by [`Sandbox::at_level`]) is forked from.
    zygote: Arc<zygote::Zygote>,
    /// Commands' private tmps left clean, for the next command of the same
    /// workspace (shared like `zygote`).
    tmps: Arc<crate::scratch::TmpPool>,
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
        let mut probe = probe::probe(config.level);
        if config.landlock_only {
            // What the worker will do, not what the kernel could.
            probe.mount_namespace = false;
            probe.proc_hidden = false;
            probe = probe.at_level(config.level);
        }
        let zygote = Arc::new(zygote::Zygote::new(
            worker_exe(config.worker_exe.as_deref()),
            probe.proc_hidden,
        ));
        Self {
            config,
            probe,
            protected: protected::ProtectedRegistry::shared(),
            zygote,
            tmps: Arc::default(),
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
            zygote: self.zygote.clone(),
            tmps: self.tmps.clone(),
        }
    }

    /// The zygote commands are forked from.
    pub fn zygote(&self) -> &zygote::Zygote {
        &self.zygote
    }

    /// Commands' private tmps, kept clean between commands.
    pub fn tmps(&self) -> &Arc<crate::scratch::TmpPool> {
        &self.tmps
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

/// Shared handle, as held by the scheduler config and execution contexts.
pub type SharedSandbox = Arc<Sandbox>;
