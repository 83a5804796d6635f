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
    let workspace = Arc::new(sandbox::Workspace::new(workspace).map_err(|e| {
        anyhow::anyhow!("workspace {}: {e}", workspace.display())
    })?);
    let sandbox = &config.sandbox;
    sandbox.check()?;
    let probe = &sandbox.probe;
    tracing::info!(
        level = %sandbox.config.level,
        landlock_abi = probe.landlock_abi,
        seccomp = probe.seccomp,
        user_namespaces = probe.user_namespaces,
        process_limit = probe.process_limit.name(),
        enforced = sandbox.enforced(),
        "sandbox probed"
    );
    for missing in &probe.missing {
        tracing::warn!(
            level = %sandbox.config.level,
            %missing,
            "sandbox level NOT fully enforced (started because weaker was explicitly allowed)"
        );
    }
    for gap in &probe.gaps {
        tracing::warn!(%gap, "sandbox gap");
    }
    let registry = Arc::new(tools::Registry::builtin(workspace)?);
    Ok(scheduler::Scheduler::start(
        config,
        registry,
        policy::Policy,
        shutdown,
    ))
}
