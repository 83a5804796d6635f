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
    let registry = Arc::new(tools::Registry::builtin(workspace)?);
    Ok(scheduler::Scheduler::start(
        config,
        registry,
        policy::Policy,
        shutdown,
    ))
}

/// Like [`build_scheduler`], plus the tools of the MCP servers in
/// `mcp_servers` (name → config). Waits until every server has finished its
/// first connection attempt (each bounded by its `startup_timeout_ms`); a
/// server that fails is logged, its tools are absent, and it is retried with
/// backoff. `shutdown` also stops the servers.
pub async fn build_scheduler_with_mcp(
    workspace: &std::path::Path,
    config: scheduler::SchedulerConfig,
    mcp_servers: &std::collections::BTreeMap<String, tools::mcp::McpServerConfig>,
    shutdown: CancellationToken,
) -> anyhow::Result<(scheduler::Scheduler, tools::mcp::McpManager)> {
    let workspace = Arc::new(
        sandbox::Workspace::new(workspace)
            .map_err(|e| anyhow::anyhow!("workspace {}: {e}", workspace.display()))?,
    );
    let builtin = tools::Registry::builtin(workspace)?;
    let (manager, registry) =
        tools::mcp::McpManager::start(&builtin, mcp_servers, shutdown.clone())?;
    manager.wait_started().await;
    for (name, status) in manager.statuses() {
        if let tools::mcp::McpServerStatus::Failed { reason, .. } = status {
            tracing::error!(server = %name, %reason, "MCP server failed to start; its tools are absent");
        }
    }
    let scheduler = scheduler::Scheduler::start(config, registry, policy::Policy, shutdown);
    Ok((scheduler, manager))
}
