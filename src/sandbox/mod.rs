//! Where tools may act and how their processes are run.
//!
//! [`Workspace`] resolves every path a tool is given inside the workspace root,
//! by components after resolving symlinks. [`process`] runs shell commands in
//! their own process group with stdin closed, a scrubbed environment, an
//! execution timeout, bounded output and a group kill on cancel.
//!
//! Not here: deciding whether a command may run (`policy`).

pub mod process;
mod workspace;

pub use process::{OutputLimits, ProcessOutcome, ProcessSpec, run_process};
pub use workspace::{PathError, Workspace};
