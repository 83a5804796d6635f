//! What each tenant may do and how much of the server it holds (DESIGN §11,
//! issue 18 items 4 and 5): its allowed approval modes, its most permissive
//! sandbox level, the MCP servers it sees, its policy tier, and its quotas.
//!
//! Quotas are counted per tenant, each tenant in its own [`TenantState`]
//! (atomics, a semaphore, a small mutex around its own window of shell
//! commands), so one tenant at its quota never holds anything another
//! tenant waits on. Where each is checked:
//! - `max_sessions`, `max_queued_batches`, `max_shell_commands_per_minute`,
//!   `max_executing_calls`: at admission of a batch (the hub), refusing the
//!   ScheduleCalls with RESOURCE_EXHAUSTED naming the quota and the use;
//! - `max_retained_event_bytes`: after the store claimed the batch's request
//!   id (a replayed request id holds nothing new), by the store, which
//!   drops the tenant's oldest completed batches to fit
//!   (`crate::store::Store::make_room`);
//! - `max_executing_calls` also bounds execution itself: a call of a batch
//!   admitted while the tenant was under its quota, that reaches Executing
//!   when the tenant's other calls took every slot meanwhile, waits for a
//!   slot of its own tenant (never another's) before its tool starts.
//!
//! Not here: who the tenant is (`crate::api::auth`), the config table
//! (`crate::tenant::TenantConfig`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::policy::{ApprovalMode, PolicyHandle};
use crate::sandbox::SandboxLevel;
use crate::tenant::{TenantConfig, TenantId};

/// The window of `max_shell_commands_per_minute`.
const SHELL_WINDOW: Duration = Duration::from_secs(60);

/// The tool whose calls `max_shell_commands_per_minute` counts.
pub(crate) const SHELL_TOOL: &str = "run_shell_command";

/// The operator policy file of each tenant that has one, loaded (and
/// followed) by the caller: `crate::policy::watch_file` in `main`.
#[derive(Clone, Default)]
pub struct TenantPolicies(pub BTreeMap<String, PolicyHandle>);

impl std::fmt::Debug for TenantPolicies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// Every configured tenant's rules and counters; immutable once built (the
/// counters inside are atomics).
#[derive(Default)]
pub(crate) struct TenantTable {
    by_name: HashMap<TenantId, Arc<TenantState>>,
}

impl TenantTable {
    /// The table of `configs` (already checked by the settings), each
    /// tenant's policy file layered over `server_policy`.
    pub fn new(
        configs: &[TenantConfig],
        policies: &TenantPolicies,
        server_policy: &PolicyHandle,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> Self {
        let by_name = configs
            .iter()
            .filter_map(|config| {
                let id = TenantId::new(&config.name).ok()?;
                let policy = policies
                    .0
                    .get(&config.name)
                    .map(|tenant| server_policy.layered(tenant, shutdown.clone()));
                Some((id, Arc::new(TenantState::new(config.clone(), policy))))
            })
            .collect();
        Self { by_name }
    }

    /// The rules of `tenant`, `None` when it has no `[[tenants]]` table
    /// (unlimited within the server's limits).
    pub fn get(&self, tenant: &TenantId) -> Option<&Arc<TenantState>> {
        self.by_name.get(tenant)
    }

    /// The rules of the tenant of a session key `<tenant>/<id>`.
    pub fn of_key(&self, key: &str) -> Option<&Arc<TenantState>> {
        let (tenant, _) = key.split_once('/')?;
        self.by_name.get(&TenantId::new(tenant).ok()?)
    }
}

/// One tenant's rules and the use it makes of the server now.
pub(crate) struct TenantState {
    pub config: TenantConfig,
    /// The server's policy with this tenant's file as a tier over it.
    pub policy: Option<PolicyHandle>,
    /// Live sessions (the hub alone changes it).
    sessions: AtomicUsize,
    /// Batches waiting in a session's queue (see [`QueuedSlot`]).
    queued: AtomicUsize,
    /// One permit per call allowed to execute at once.
    executing: Option<Arc<Semaphore>>,
    /// When its admitted shell commands were admitted, oldest first; at
    /// most `max_shell_commands_per_minute` entries.
    shell: Mutex<VecDeque<Instant>>,
}

/// Why a tenant may not do what a batch asks: PERMISSION_DENIED or
/// RESOURCE_EXHAUSTED (see `crate::scheduler::ScheduleError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantRefusal {
    #[error("tenant {tenant} may not use approval mode {mode} (allowed: {allowed})")]
    ModeNotAllowed {
        tenant: String,
        mode: &'static str,
        allowed: String,
    },
    #[error(
        "sandbox level {requested} is more permissive than tenant {tenant}'s max_sandbox_level {max}"
    )]
    SandboxLevel {
        tenant: String,
        requested: SandboxLevel,
        max: SandboxLevel,
    },
    /// A quota is reached; `used` says how much the tenant holds.
    #[error("tenant {tenant}: {quota} {limit} reached ({used})")]
    Quota {
        tenant: String,
        quota: &'static str,
        limit: usize,
        used: String,
    },
}

impl TenantState {
    fn new(config: TenantConfig, policy: Option<PolicyHandle>) -> Self {
        let executing = config
            .quotas
            .max_executing_calls
            .map(|n| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS))));
        Self {
            config,
            policy,
            sessions: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            executing,
            shell: Mutex::new(VecDeque::new()),
        }
    }

    fn name(&self) -> String {
        self.config.name.clone()
    }

    /// Whether its sessions may use `mode`.
    pub fn allows_mode(&self, mode: ApprovalMode) -> bool {
        self.config
            .allowed_modes
            .as_ref()
            .is_none_or(|m| m.contains(&mode))
    }

    /// Whether its sessions see the tools of MCP server `server`.
    pub fn sees_mcp_server(&self, server: &str) -> bool {
        self.config
            .mcp_servers
            .as_ref()
            .is_none_or(|s| s.iter().any(|n| n == server))
    }

    /// Refuses a request for `mode` or `level` the tenant may not use.
    pub fn check_request(
        &self,
        mode: Option<ApprovalMode>,
        level: Option<SandboxLevel>,
    ) -> Result<(), TenantRefusal> {
        if let Some(mode) = mode
            && !self.allows_mode(mode)
        {
            let allowed = self
                .config
                .allowed_modes
                .iter()
                .flatten()
                .map(|m| crate::policy::mode_name(*m))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(TenantRefusal::ModeNotAllowed {
                tenant: self.name(),
                mode: crate::policy::mode_name(mode),
                allowed,
            });
        }
        if let (Some(requested), Some(max)) = (level, self.config.max_sandbox_level)
            && !requested.at_most(max)
        {
            return Err(TenantRefusal::SandboxLevel {
                tenant: self.name(),
                requested,
                max,
            });
        }
        Ok(())
    }

    fn quota(&self, quota: &'static str, limit: usize, used: String) -> TenantRefusal {
        TenantRefusal::Quota {
            tenant: self.name(),
            quota,
            limit,
            used,
        }
    }

    /// Live sessions now.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::Relaxed)
    }

    /// Whether a new session would be over `max_sessions` (the hub then
    /// forgets one of the tenant's idle sessions, or refuses).
    pub fn at_session_quota(&self) -> Option<usize> {
        let limit = self.config.quotas.max_sessions?;
        (self.sessions() >= limit).then_some(limit)
    }

    /// The refusal of a new session at `max_sessions`.
    pub fn session_refusal(&self, limit: usize) -> TenantRefusal {
        self.quota(
            "max_sessions",
            limit,
            format!("{} live, each busy", self.sessions()),
        )
    }

    pub fn session_opened(&self) {
        self.sessions.fetch_add(1, Ordering::Relaxed);
    }

    pub fn session_closed(&self) {
        let _ = self
            .sessions
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Calls executing now.
    pub fn executing(&self) -> usize {
        match (&self.executing, self.config.quotas.max_executing_calls) {
            (Some(s), Some(limit)) => limit.saturating_sub(s.available_permits()),
            _ => 0,
        }
    }

    /// The admission checks of a batch of `calls`, `queued` behind another
    /// batch of its session: the executing and queued quotas and the shell
    /// rate. Nothing is counted here ([`TenantState::admitted`] counts once
    /// every check of the batch passed), so a batch refused by any later
    /// check counts nothing. Returns the shell commands it asks.
    pub fn check_admission(
        &self,
        calls: &[super::CallRequest],
        queued: bool,
    ) -> Result<usize, TenantRefusal> {
        let q = self.config.quotas;
        if let Some(limit) = q.max_executing_calls {
            let used = self.executing();
            if used >= limit {
                return Err(self.quota("max_executing_calls", limit, format!("{used} executing")));
            }
        }
        if queued && let Some(limit) = q.max_queued_batches {
            let used = self.queued.load(Ordering::Relaxed);
            if used >= limit {
                return Err(self.quota("max_queued_batches", limit, format!("{used} queued")));
            }
        }
        let asked = calls.iter().filter(|c| c.name == SHELL_TOOL).count();
        if let Some(limit) = q.max_shell_commands_per_minute
            && asked > 0
        {
            let recent = self.shell_window(Instant::now()).len();
            if asked > limit {
                return Err(self.quota(
                    "max_shell_commands_per_minute",
                    limit,
                    format!("this batch alone asks {asked}"),
                ));
            }
            if recent + asked > limit {
                return Err(self.quota(
                    "max_shell_commands_per_minute",
                    limit,
                    format!("{recent} in the last minute, this batch asks {asked}"),
                ));
            }
        }
        Ok(asked)
    }

    /// Counts a batch that passed every check ([`TenantState::check_admission`]
    /// gave `shell` commands): its shell commands enter the window, and a
    /// queued batch takes the queue slot it holds while it waits. Admission
    /// runs on the hub's one task, so nothing counts between the check and
    /// this.
    pub fn admitted(self: &Arc<Self>, shell: usize, queued: bool) -> Option<QueuedSlot> {
        if self.config.quotas.max_shell_commands_per_minute.is_some() && shell > 0 {
            let now = Instant::now();
            self.shell_window(now)
                .extend(std::iter::repeat_n(now, shell));
        }
        queued.then(|| {
            self.queued.fetch_add(1, Ordering::Relaxed);
            QueuedSlot(self.clone())
        })
    }

    /// The window of admitted shell commands, those older than a minute
    /// gone.
    fn shell_window(&self, now: Instant) -> std::sync::MutexGuard<'_, VecDeque<Instant>> {
        // Poisoned only if a panic happened while held: the window is still
        // a valid list of instants.
        let mut window = self.shell.lock().unwrap_or_else(|e| e.into_inner());
        while window
            .front()
            .is_some_and(|t| now.duration_since(*t) >= SHELL_WINDOW)
        {
            window.pop_front();
        }
        window
    }

    /// The refusal of a batch at `max_retained_event_bytes`: what its
    /// batches hold that could not be dropped.
    pub fn retained_refusal(&self, limit: usize, held: crate::store::RetainedUse) -> TenantRefusal {
        self.quota("max_retained_event_bytes", limit, held.to_string())
    }

    /// The tenant's execution slots, when it has `max_executing_calls`.
    pub fn execution_slots(&self) -> Option<Arc<Semaphore>> {
        self.executing.clone()
    }
}

/// Held by a batch while it waits in its session's queue; gives the slot
/// back however the batch leaves the queue (started, cancelled, dropped).
pub(crate) struct QueuedSlot(Arc<TenantState>);

impl Drop for QueuedSlot {
    fn drop(&mut self) {
        let _ = self
            .0
            .queued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// A call's execution slot of its tenant, held until its tool stopped.
pub(crate) type ExecutionSlot = OwnedSemaphorePermit;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::TenantQuotas;

    /// Admission as the hub does it: every check, then the counting.
    fn admit(
        t: &Arc<TenantState>,
        calls: &[super::super::CallRequest],
        queued: bool,
    ) -> Result<Option<QueuedSlot>, TenantRefusal> {
        let shell = t.check_admission(calls, queued)?;
        Ok(t.admitted(shell, queued))
    }

    fn call(name: &str) -> super::super::CallRequest {
        super::super::CallRequest {
            id: "c".into(),
            name: name.into(),
            args: Default::default(),
            wait_for_previous: false,
            client_initiated: false,
        }
    }

    fn tenant(quotas: TenantQuotas) -> Arc<TenantState> {
        Arc::new(TenantState::new(
            TenantConfig {
                name: "a".into(),
                allowed_modes: Some(vec![ApprovalMode::Default]),
                max_sandbox_level: Some(SandboxLevel::ReadOnly),
                quotas,
                ..TenantConfig::default()
            },
            None,
        ))
    }

    #[test]
    fn modes_and_levels_outside_the_tenant_are_refused_naming_them() {
        let t = tenant(TenantQuotas::default());
        assert_eq!(t.check_request(Some(ApprovalMode::Default), None), Ok(()));
        assert_eq!(
            t.check_request(Some(ApprovalMode::Yolo), None)
                .unwrap_err()
                .to_string(),
            "tenant a may not use approval mode yolo (allowed: default)"
        );
        assert_eq!(
            t.check_request(None, Some(SandboxLevel::WorkspaceWrite))
                .unwrap_err()
                .to_string(),
            "sandbox level workspace_write is more permissive than tenant a's max_sandbox_level read_only"
        );
        assert_eq!(t.check_request(None, Some(SandboxLevel::ReadOnly)), Ok(()));
    }

    #[test]
    fn quotas_count_per_tenant_and_name_the_use() {
        let t = tenant(TenantQuotas {
            max_executing_calls: Some(1),
            max_queued_batches: Some(1),
            max_shell_commands_per_minute: Some(2),
            ..TenantQuotas::default()
        });
        let shell = [call(SHELL_TOOL), call("read_file")];
        assert!(admit(&t, &shell, false).unwrap().is_none());
        let slot = admit(&t, &shell, true).unwrap().expect("queued slot");
        assert_eq!(
            admit(&t, &[call("read_file")], true)
                .err()
                .unwrap()
                .to_string(),
            "tenant a: max_queued_batches 1 reached (1 queued)"
        );
        drop(slot);
        assert_eq!(
            admit(&t, &shell, false).err().unwrap().to_string(),
            "tenant a: max_shell_commands_per_minute 2 reached (2 in the last minute, this batch asks 1)"
        );
        // Not a shell command: not counted against the rate.
        assert!(admit(&t, &[call("read_file")], true).is_ok());
        let permit = t.execution_slots().unwrap().try_acquire_owned().unwrap();
        assert_eq!(t.executing(), 1);
        assert_eq!(
            admit(&t, &[call("read_file")], false)
                .err()
                .unwrap()
                .to_string(),
            "tenant a: max_executing_calls 1 reached (1 executing)"
        );
        drop(permit);
        assert_eq!(t.executing(), 0);
    }
}
