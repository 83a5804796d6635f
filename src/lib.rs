//! toolsched: a gRPC service that schedules, approves and executes the tool
//! calls (function calls) of LLM agents, after Gemini CLI's event-driven
//! scheduler.
//!
//! Layers (DESIGN §9): [`api`] is the gRPC face; [`scheduler`] owns sessions,
//! call states, waves, queueing, approval and cancellation; [`policy`]
//! decides allow / deny / ask_user; [`tools`] declares and runs tools;
//! [`sandbox`] keeps them inside the workspace; [`config`] merges settings.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod config;
pub mod policy;
pub mod sandbox;
pub mod scheduler;
pub mod tools;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Builds the scheduler over `workspace` with the built-in tools and the
/// default policy. `shutdown` cancels everything it runs.
pub fn build_scheduler(
    workspace: &std::path::Path,
    config: scheduler::SchedulerConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<scheduler::Scheduler> {
    build_scheduler_with_policy(workspace, config, policy::PolicyHandle::default(), shutdown)
}

/// Like [`build_scheduler`], deciding with `policy` (e.g. from
/// [`policy::watch_file`], which follows the operator's policy file).
pub fn build_scheduler_with_policy(
    workspace: &std::path::Path,
    config: scheduler::SchedulerConfig,
    policy: policy::PolicyHandle,
    shutdown: CancellationToken,
) -> anyhow::Result<scheduler::Scheduler> {
    let workspace = Arc::new(
        sandbox::Workspace::new(workspace)
            .map_err(|e| anyhow::anyhow!("workspace {}: {e}", workspace.display()))?,
    );
    let policy = policy.with_workspace(workspace.root());
    let registry = Arc::new(tools::Registry::builtin(workspace)?);
    let metrics = Arc::new(scheduler::Metrics::new()?);
    Ok(scheduler::Scheduler::start(
        config, registry, policy, shutdown, metrics,
    ))
}
