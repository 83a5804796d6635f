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
    /// `.` and `..`: a tenant or workspace name is a path component of the
    /// workspaces root, and these would leave it.
    #[error("{kind} name may not be '.' or '..'")]
    DotName { kind: &'static str },
}

/// A `[[tenants]]` table of the config file: what one tenant may do.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// The tenant's name (as its credentials map to).
    pub name: String,
    /// Workspace names or globs (`globset`, e.g. `proj-*`) the tenant may
    /// use under `--workspaces-root`; empty: any. Another name is
    /// PERMISSION_DENIED naming it.
    #[serde(default)]
    pub workspaces: Vec<String>,
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
            name: "anonymous".into(),
        }
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
    if name == "." || name == ".." {
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
        assert_eq!(
            TenantId::new(".."),
            Err(InvalidName::DotName { kind: "tenant" })
        );
        assert!(Principal::new(b.clone(), "alice@example.com").is_ok());
        assert_eq!(
            Principal::new(b, "a\nb"),
            Err(InvalidName::BadCharacter { kind: "principal" })
        );
    }
}
