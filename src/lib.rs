//! toolsched: a gRPC service that schedules, approves and executes the tool
//! calls (function calls) of LLM agents, after Gemini CLI's event-driven
//! scheduler.
//!
//! Layers (DESIGN §9): [`api`] is the gRPC face; [`scheduler`] owns sessions,
//! call states, waves, queueing, approval and cancellation; [`policy`]
//! decides allow / deny / ask_user; [`tools`] declares and runs tools;
//! [`sandbox`] keeps them inside the workspace; [`config`] merges settings.
//! [`shell`] (bash command analysis) is a leaf that `policy` and `tools` use.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod config;
pub mod policy;
pub mod sandbox;
pub mod scheduler;
pub mod scratch;
pub mod shell;
pub mod store;
pub mod telemetry;
pub mod tenant;
pub mod text;
pub mod tools;
pub mod workspaces;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Why the scheduler could not be built. Nothing was started.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    #[error(transparent)]
    Registry(#[from] tools::RegistryError),
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("kept output directory: {0}")]
    KeptOutput(std::io::Error),
    #[error(transparent)]
    Workspaces(#[from] workspaces::WorkspacesSetupError),
    #[error("tenants.{tenant}: {source}")]
    TenantPolicy {
        tenant: String,
        source: policy::PolicyError,
    },
}

/// The named workspaces of `config` (a workspaces root), whose built-in
/// tools keep whole shell outputs in `kept` like the server's.
fn named_workspaces(
    config: &scheduler::SchedulerConfig,
    kept: &Option<Arc<tools::kept::OutputKeeper>>,
) -> Result<Option<Arc<workspaces::Workspaces>>, BuildError> {
    let Some(ws) = &config.workspaces else {
        return Ok(None);
    };
    let named = workspaces::Workspaces::new(ws, kept.clone(), config.blocking_file_io)?
        .with_hidden(&config.sandbox.protected_paths);
    tracing::info!(root = %named.root().display(), create = named.creates(), "named workspaces");
    Ok(Some(Arc::new(named)))
}

/// Loads the policy file of each `[[tenants]]` table that names one (and
/// follows it as the server's is followed: on change and SIGHUP), unless
/// the caller already did. A file that does not load stops start-up.
fn tenant_policies(
    config: &mut scheduler::SchedulerConfig,
    shutdown: &CancellationToken,
) -> Result<(), BuildError> {
    for tenant in &config.tenants {
        let Some(path) = &tenant.policy_file else {
            continue;
        };
        if config.tenant_policies.0.contains_key(&tenant.name) {
            continue;
        }
        let (handle, _) = policy::watch_file(path, policy::reload::POLL_INTERVAL, shutdown.clone())
            .map_err(|source| BuildError::TenantPolicy {
                tenant: tenant.name.clone(),
                source,
            })?;
        config.tenant_policies.0.insert(tenant.name.clone(), handle);
    }
    Ok(())
}

/// The keeper of whole shell outputs for `config`; its directory joins the
/// paths no command may read or write.
fn kept_output(
    config: &mut scheduler::SchedulerConfig,
) -> Result<Option<Arc<tools::kept::OutputKeeper>>, BuildError> {
    if config.kept_output.per_call == 0 {
        return Ok(None);
    }
    let keeper = tools::kept::OutputKeeper::new(config.kept_output.clone())
        .map_err(BuildError::KeptOutput)?;
    config
        .sandbox
        .protected_paths
        .push(keeper.dir().to_path_buf());
    Ok(Some(Arc::new(keeper)))
}

/// Builds the scheduler over `workspace` with the built-in tools and the
/// default policy. `shutdown` cancels everything it runs.
pub fn build_scheduler(
    workspace: &Path,
    config: scheduler::SchedulerConfig,
    shutdown: CancellationToken,
) -> Result<scheduler::Scheduler, BuildError> {
    build_scheduler_with_policy(workspace, config, policy::PolicyHandle::default(), shutdown)
}

/// Like [`build_scheduler`], deciding with `policy` (e.g. from
/// [`policy::watch_file`], which follows the operator's policy file).
pub fn build_scheduler_with_policy(
    workspace: &Path,
    mut config: scheduler::SchedulerConfig,
    policy: policy::PolicyHandle,
    shutdown: CancellationToken,
) -> Result<scheduler::Scheduler, BuildError> {
    let kept = kept_output(&mut config)?;
    tenant_policies(&mut config, &shutdown)?;
    compact_logs(&mut config);
    let (workspace, sandbox) = prepare(workspace, &config)?;
    let named = named_workspaces(&config, &kept)?;
    let policy = policy.with_workspace(workspace.root());
    let registry = Arc::new(tools::Registry::builtin_with(workspace, kept)?);
    let metrics = Arc::new(scheduler::Metrics::new()?);
    Ok(scheduler::Scheduler::start_with_workspaces(
        config, sandbox, registry, policy, shutdown, metrics, named,
    ))
}

/// Like [`build_scheduler_with_policy`], plus the tools of the MCP servers in
/// `mcp_servers` (name → config). Waits until every server has finished its
/// first connection attempt (each bounded by its `startup_timeout_ms`); a
/// server that fails is logged, its tools are absent, and it is retried with
/// backoff. `shutdown` also stops the servers.
pub async fn build_scheduler_with_mcp(
    workspace: &Path,
    mut config: scheduler::SchedulerConfig,
    policy: policy::PolicyHandle,
    mcp_servers: &std::collections::BTreeMap<String, tools::mcp::McpServerConfig>,
    shutdown: CancellationToken,
) -> Result<(scheduler::Scheduler, tools::mcp::McpManager), BuildError> {
    let kept = kept_output(&mut config)?;
    tenant_policies(&mut config, &shutdown)?;
    compact_logs(&mut config);
    let (workspace, sandbox) = prepare(workspace, &config)?;
    let named = named_workspaces(&config, &kept)?;
    let policy = policy.with_workspace(workspace.root());
    let builtin = tools::Registry::builtin_with(workspace, kept)?;
    let (manager, registry) =
        tools::mcp::McpManager::start(&builtin, mcp_servers, shutdown.clone())?;
    manager.wait_started().await;
    for (name, status) in manager.statuses() {
        if let tools::mcp::McpServerStatus::Failed { reason, .. } = status {
            tracing::error!(server = %name, %reason, "MCP server failed to start; its tools are absent");
        }
    }
    let metrics = Arc::new(scheduler::Metrics::new()?);
    let scheduler = scheduler::Scheduler::start_with_workspaces(
        config, sandbox, registry, policy, shutdown, metrics, named,
    )
    .with_mcp(manager.clone());
    Ok((scheduler, manager))
}

/// Retained logs of the memory store are compacted to the API's wire form
/// (what a stream sends), unless the caller chose another codec.
fn compact_logs(config: &mut scheduler::SchedulerConfig) {
    if config.log_codec.is_none() {
        config.log_codec = Some(scheduler::LogCodec(Arc::new(api::WireCodec)));
    }
}

/// Walks the workspace's protected paths once, on a thread of its own, so
/// that the first write's policy and the first command find them answered
/// from the watches. Without it the first `write_file` walked through
/// `block_in_place`, and that one hand-off of a runtime worker left every
/// later session a little larger (S4: 1.29 against 1.11 of the floor per
/// held stream; BENCHMARKS.md, "Sessions 22–23").
fn warm_protected_paths(sandbox: &sandbox::Sandbox, root: &Path) {
    let cache = sandbox.protected_paths(root);
    let spawned = std::thread::Builder::new()
        .name("toolsched-walk".into())
        .spawn(move || drop(cache.current()));
    if let Err(e) = spawned {
        // The first write or command walks instead.
        tracing::debug!(error = %e, "could not walk the protected paths ahead");
    }
}

/// Opens the workspace, probes the kernel once for the configured sandbox
/// and checks that its level can be enforced (refusing to start otherwise,
/// unless a weaker level was explicitly allowed), logging what it found.
fn prepare(
    root: &Path,
    config: &scheduler::SchedulerConfig,
) -> Result<(Arc<sandbox::Workspace>, sandbox::SharedSandbox), BuildError> {
    let workspace = sandbox::Workspace::new(root)
        .map(|w| {
            Arc::new(
                w.with_blocking_io(config.blocking_file_io)
                    .with_hidden(&config.sandbox.protected_paths),
            )
        })
        .map_err(|source| BuildError::Workspace {
            path: root.to_path_buf(),
            source,
        })?;
    let sandbox = Arc::new(sandbox::Sandbox::new(config.sandbox.clone()));
    sandbox.check()?;
    warm_protected_paths(&sandbox, workspace.root());
    let probe = &sandbox.probe;
    tracing::info!(
        sandbox_level = %sandbox.config.level,
        landlock_abi = probe.landlock_abi,
        seccomp = probe.seccomp,
        user_namespaces = probe.user_namespaces,
        mount_namespace = probe.mount_namespace,
        proc_hidden = probe.proc_hidden,
        process_limit = probe.process_limit.name(),
        enforced = sandbox.enforced(),
        "sandbox probed"
    );
    for missing in &probe.missing {
        tracing::warn!(
            sandbox_level = %sandbox.config.level,
            %missing,
            "sandbox level NOT fully enforced (started because weaker was explicitly allowed)"
        );
    }
    for gap in &probe.gaps {
        tracing::warn!(%gap, "sandbox gap");
    }
    Ok((workspace, sandbox))
}
