//! Who makes a request: a principal of a tenant (DESIGN §11). A leaf: the
//! API authenticates a credential to a [`Principal`], and the scheduler
//! namespaces sessions by its [`TenantId`], so that another tenant's
//! session behaves as if it did not exist.
//!
//! Not here: how a credential is checked (`crate::api::auth`).

use std::fmt;
use std::sync::Arc;

/// Longest tenant name, in bytes: it prefixes every session key and is in
/// every log line of the tenant's sessions.
pub const MAX_TENANT_BYTES: usize = 64;
/// Longest principal name, in bytes: a JWT subject or a configured name,
/// in log lines and audit records.
pub const MAX_PRINCIPAL_BYTES: usize = 256;
/// The tenant of the one-tenant setups: no credentials, or the single
/// `--auth-token`.
pub const DEFAULT_TENANT: &str = "default";
/// The principal of a server without credentials (and of library use).
pub const ANONYMOUS: &str = "anonymous";

/// Why a tenant or principal name is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidName {
    #[error("{kind} name is empty")]
    Empty { kind: &'static str },
    #[error("{kind} name is {len} bytes; at most {limit}")]
    TooLong {
        kind: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("{kind} name may hold only letters, digits, '-', '_' and '.'")]
    BadCharacter { kind: &'static str },
    /// A leading `.`: a tenant or workspace name is a path component of the
    /// workspaces root, where `.` and `..` would leave it and `.git` would
    /// become the repository of every sibling directory for the host's git.
    #[error("{kind} name may not begin with '.'")]
    DotName { kind: &'static str },
}

/// A tenant: letters, digits, `-`, `_`, `.` (never `/`, which splits a
/// session key).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(Arc<str>);

impl TenantId {
    /// Checks `name` (1..=[`MAX_TENANT_BYTES`] of letters, digits, `-`,
    /// `_`, `.`).
    pub fn new(name: &str) -> Result<Self, InvalidName> {
        check_name("tenant", name, MAX_TENANT_BYTES)?;
        Ok(Self(name.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The scheduler's key of the client's `session_id` in this tenant:
    /// `<tenant>/<session_id>`. A tenant name holds no `/`, so the first one
    /// splits the key and two tenants' keys never meet, whatever ids their
    /// clients choose.
    pub fn session_key(&self, session_id: &str) -> String {
        format!("{}/{session_id}", self.0)
    }

    /// The client's session id of a key made by [`TenantId::session_key`]
    /// (the key itself when it has no tenant part).
    pub fn client_session_id(key: &str) -> &str {
        key.split_once('/').map_or(key, |(_, id)| id)
    }
}

impl Default for TenantId {
    fn default() -> Self {
        Self(DEFAULT_TENANT.into())
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The authenticated caller: a principal of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: TenantId,
    /// The principal's name within its tenant (a configured name, a JWT
    /// claim or a certificate's subject); for logs and audit, never a key.
    pub name: Arc<str>,
}

impl Principal {
    /// `name` of `tenant`; the name must be 1..=[`MAX_PRINCIPAL_BYTES`]
    /// bytes without control characters (it goes into log lines).
    pub fn new(tenant: TenantId, name: &str) -> Result<Self, InvalidName> {
        if name.is_empty() {
            return Err(InvalidName::Empty { kind: "principal" });
        }
        if name.len() > MAX_PRINCIPAL_BYTES {
            return Err(InvalidName::TooLong {
                kind: "principal",
                len: name.len(),
                limit: MAX_PRINCIPAL_BYTES,
            });
        }
        if name.chars().any(char::is_control) {
            return Err(InvalidName::BadCharacter { kind: "principal" });
        }
        Ok(Self {
            tenant,
            name: name.into(),
        })
    }

    /// The caller of a server without credentials, or with the single
    /// `--auth-token`.
    pub fn single_tenant() -> Self {
        Self {
            tenant: TenantId::default(),
            name: ANONYMOUS.into(),
        }
    }
}

/// One `[[tenants]]` table of the config file: what a tenant may do and
/// how much of the server it may hold (DESIGN §11, issue 18 items 4 and 5).
/// Every field is optional; unset is "as the server allows" (no quota).
/// Tenants that have no table are unlimited within the server's limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(from = "RawTenantConfig")]
pub struct TenantConfig {
    /// The tenant's name (as its credentials name it).
    pub name: String,
    /// Approval modes its sessions may use; asking for another is
    /// PERMISSION_DENIED. Must include the server's `approval_mode` (the
    /// mode of a new session) [default: all].
    pub allowed_modes: Option<Vec<crate::policy::ApprovalMode>>,
    /// The most permissive sandbox level its commands get: its sessions
    /// start at this level when the server's is more permissive, and a
    /// request for more is PERMISSION_DENIED [default: the server's].
    pub max_sandbox_level: Option<crate::sandbox::SandboxLevel>,
    /// The MCP servers whose tools it sees (ListTools, calls); a hidden
    /// tool is an unknown tool [default: all configured].
    pub mcp_servers: Option<Vec<String>>,
    /// Its operator policy file (rules TOML), a tier between the server's
    /// policy file and the session's "always" answers; reloaded like the
    /// server's [default: none].
    pub policy_file: Option<std::path::PathBuf>,
    /// Quotas (keys of the same table); each refusal is RESOURCE_EXHAUSTED
    /// naming it.
    pub quotas: TenantQuotas,
    /// Workspace names or globs (`globset`, e.g. `proj-*`) the tenant may
    /// use under `--workspaces-root`; empty: any. Another name is
    /// PERMISSION_DENIED naming it.
    pub workspaces: Vec<String>,
}

/// The table as written: every key flat, unknown keys refused (serde's
/// `flatten` would let them through).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenantConfig {
    name: String,
    allowed_modes: Option<Vec<crate::policy::ApprovalMode>>,
    max_sandbox_level: Option<crate::sandbox::SandboxLevel>,
    mcp_servers: Option<Vec<String>>,
    policy_file: Option<std::path::PathBuf>,
    max_sessions: Option<usize>,
    max_executing_calls: Option<usize>,
    max_queued_batches: Option<usize>,
    max_shell_commands_per_minute: Option<usize>,
    max_retained_event_bytes: Option<usize>,
    #[serde(default)]
    workspaces: Vec<String>,
}

impl From<RawTenantConfig> for TenantConfig {
    fn from(r: RawTenantConfig) -> Self {
        Self {
            name: r.name,
            allowed_modes: r.allowed_modes,
            max_sandbox_level: r.max_sandbox_level,
            mcp_servers: r.mcp_servers,
            policy_file: r.policy_file,
            quotas: TenantQuotas {
                max_sessions: r.max_sessions,
                max_executing_calls: r.max_executing_calls,
                max_queued_batches: r.max_queued_batches,
                max_shell_commands_per_minute: r.max_shell_commands_per_minute,
                max_retained_event_bytes: r.max_retained_event_bytes,
            },
            workspaces: r.workspaces,
        }
    }
}

/// A tenant's quotas (see the README's quota table). `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantQuotas {
    /// Live sessions: one session holds its mode, rules and retained
    /// batches; at the quota the tenant's least recently used idle session
    /// is forgotten, and when all are busy a new one is refused.
    pub max_sessions: Option<usize>,
    /// Calls executing at once (processes and MCP calls held); a batch
    /// arriving while the tenant is at it is refused.
    pub max_executing_calls: Option<usize>,
    /// Batches waiting behind another batch of their session (each holds
    /// its calls and log until it runs).
    pub max_queued_batches: Option<usize>,
    /// `run_shell_command` calls admitted per minute (sliding window): the
    /// rate of process spawns one tenant can ask of the host.
    pub max_shell_commands_per_minute: Option<usize>,
    /// Estimated bytes of event logs the tenant's batches hold in this
    /// process (running ones and the completed ones kept for WatchBatch and
    /// request-id replay): at admission the events of its oldest completed
    /// batches are dropped to fit (their request ids stay), and a batch is
    /// refused while its running batches alone reach it. The memory a
    /// tenant's history holds.
    pub max_retained_event_bytes: Option<usize>,
}

/// Why a `[[tenants]]` table is unusable (at start-up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantConfigError {
    #[error("tenants: {0}")]
    Name(#[from] InvalidName),
    #[error("tenants: '{name}' is configured twice")]
    Duplicate { name: String },
    #[error(
        "tenants.{name}: allowed_modes does not include the server's approval_mode {mode} (the mode of a new session)"
    )]
    DefaultModeNotAllowed { name: String, mode: &'static str },
    #[error("tenants.{name}: mcp_servers names '{server}', which is not configured")]
    UnknownMcpServer { name: String, server: String },
    #[error("tenants.{name}: {field} must be greater than 0 (leave it out for no quota)")]
    ZeroQuota { name: String, field: &'static str },
}

impl TenantConfig {
    /// Checks the table against the server's settings: a valid name, the
    /// server's default mode allowed, only configured MCP servers, no zero
    /// quota (which would refuse everything: leave the field out instead).
    pub fn check(
        &self,
        default_mode: crate::policy::ApprovalMode,
        mcp_servers: &dyn Fn(&str) -> bool,
    ) -> Result<TenantId, TenantConfigError> {
        let id = TenantId::new(&self.name)?;
        if let Some(modes) = &self.allowed_modes
            && !modes.contains(&default_mode)
        {
            return Err(TenantConfigError::DefaultModeNotAllowed {
                name: self.name.clone(),
                mode: crate::policy::mode_name(default_mode),
            });
        }
        for server in self.mcp_servers.iter().flatten() {
            if !mcp_servers(server) {
                return Err(TenantConfigError::UnknownMcpServer {
                    name: self.name.clone(),
                    server: server.clone(),
                });
            }
        }
        let q = &self.quotas;
        for (field, value) in [
            ("max_sessions", q.max_sessions),
            ("max_executing_calls", q.max_executing_calls),
            ("max_queued_batches", q.max_queued_batches),
            (
                "max_shell_commands_per_minute",
                q.max_shell_commands_per_minute,
            ),
            ("max_retained_event_bytes", q.max_retained_event_bytes),
        ] {
            if value == Some(0) {
                return Err(TenantConfigError::ZeroQuota {
                    name: self.name.clone(),
                    field,
                });
            }
        }
        Ok(id)
    }
}

/// `name` is 1..=`limit` bytes of ASCII letters, digits, `-`, `_`, `.`.
pub fn check_name(kind: &'static str, name: &str, limit: usize) -> Result<(), InvalidName> {
    if name.is_empty() {
        return Err(InvalidName::Empty { kind });
    }
    if name.len() > limit {
        return Err(InvalidName::TooLong {
            kind,
            len: name.len(),
            limit,
        });
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(InvalidName::BadCharacter { kind });
    }
    if name.starts_with('.') {
        return Err(InvalidName::DotName { kind });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_and_session_keys() {
        let a = TenantId::new("acme-1.x_y").unwrap();
        assert_eq!(a.session_key("main"), "acme-1.x_y/main");
        assert_eq!(TenantId::client_session_id("acme-1.x_y/a/b"), "a/b");
        assert_eq!(
            TenantId::new("a/b"),
            Err(InvalidName::BadCharacter { kind: "tenant" })
        );
        assert_eq!(
            TenantId::new(""),
            Err(InvalidName::Empty { kind: "tenant" })
        );
        assert_eq!(
            TenantId::new(&"x".repeat(65)),
            Err(InvalidName::TooLong {
                kind: "tenant",
                len: 65,
                limit: 64
            })
        );
        // Ids that would collide as plain strings do not as keys.
        let b = TenantId::new("a").unwrap();
        assert_ne!(
            b.session_key("b/main"),
            TenantId::new("a.b").unwrap().session_key("main")
        );
        for dotted in ["..", ".", ".git", ".x"] {
            assert_eq!(
                TenantId::new(dotted),
                Err(InvalidName::DotName { kind: "tenant" })
            );
        }
        assert!(TenantId::new("a.git").is_ok());
        assert!(Principal::new(b.clone(), "alice@example.com").is_ok());
        assert_eq!(
            Principal::new(b, "a\nb"),
            Err(InvalidName::BadCharacter { kind: "principal" })
        );
    }
}
