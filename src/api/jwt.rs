//! JWT bearer tokens (DESIGN §11): verified with `jsonwebtoken` against the
//! public keys of a JWKS file named in the config (`[jwt]`), RS256 or ES256
//! only; `iss`, `aud`, `exp` are required and checked, `nbf` when present.
//! The tenant and principal come from configured claims.
//!
//! Every refusal is a fixed [`JwtReason`]: neither the token nor a claim's
//! value is repeated in a status or a log line.
//!
//! Not here: static tokens (`super::auth`).

use std::path::{Path, PathBuf};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::tenant::{InvalidName, Principal, TenantId};

/// Default clock skew tolerated on `exp` and `nbf`, in seconds: the
/// issuer's and this server's clocks may differ this much.
pub const DEFAULT_LEEWAY_SECS: u64 = 30;

/// `[jwt]` in the config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// A JSON Web Key Set (`{"keys": [...]}`) of RSA and EC P-256 public
    /// keys; read at start-up.
    pub jwks_file: PathBuf,
    /// The one accepted `iss`.
    pub issuer: String,
    /// The `aud` a token must name (a string or one of an array).
    pub audience: String,
    /// The claim holding the tenant name [default: `tenant`].
    #[serde(default = "default_tenant_claim")]
    pub tenant_claim: String,
    /// The claim holding the principal name [default: `sub`].
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// Clock skew tolerated on `exp`/`nbf`, in seconds [default: 30].
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// The tenants a token may name [default: empty, any the issuer
    /// signs]: every tenant is a metric label and a directory under the
    /// workspaces root, so a server that serves known customers lists them.
    #[serde(default)]
    pub tenants: Vec<String>,
}

fn default_tenant_claim() -> String {
    "tenant".into()
}
fn default_principal_claim() -> String {
    "sub".into()
}
fn default_leeway() -> u64 {
    DEFAULT_LEEWAY_SECS
}

/// Why the JWKS file is unusable (at start-up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    #[error("cannot read jwt.jwks_file {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("jwt.jwks_file {path} is not a JSON Web Key Set: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error(
        "jwt.jwks_file {path}: key {index} is neither RSA (RS256) nor EC P-256 (ES256), the accepted algorithms"
    )]
    Unsupported { path: PathBuf, index: usize },
    #[error("jwt.jwks_file {path}: key {index} is not a valid public key")]
    BadKey { path: PathBuf, index: usize },
    #[error("jwt.tenants: '{name}' is not a valid tenant name")]
    Tenant { name: String },
    #[error("jwt.jwks_file {path} holds no key")]
    Empty { path: PathBuf },
}

/// Why a JWT is refused: the UNAUTHENTICATED reason, fixed text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JwtReason {
    #[error("not a well-formed JWT")]
    Malformed,
    #[error("algorithm not accepted (RS256 or ES256)")]
    Algorithm,
    #[error("signed by an unknown key")]
    UnknownKey,
    #[error("signature does not verify")]
    Signature,
    #[error("expired")]
    Expired,
    #[error("not yet valid (nbf)")]
    NotYetValid,
    #[error("wrong issuer")]
    Issuer,
    #[error("wrong audience")]
    Audience,
    #[error("a required claim (exp, iss, aud) is missing or malformed")]
    MissingClaim,
    #[error("the tenant claim is missing or not a valid tenant name")]
    Tenant,
    #[error("the principal claim is missing or not a valid principal name")]
    Principal,
    #[error("the tenant claim names a tenant this server does not serve (jwt.tenants)")]
    UnknownTenant,
}

/// One key of the set.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// Verifies JWTs against the configured keys.
pub struct JwtVerifier {
    keys: Vec<Key>,
    issuer: String,
    audience: String,
    tenant_claim: String,
    principal_claim: String,
    leeway_secs: u64,
    /// `jwt.tenants` (empty: any).
    tenants: Vec<TenantId>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("keys", &self.keys.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// Reads the JWKS file of `config`.
    pub fn load(config: &JwtConfig) -> Result<Self, JwksError> {
        let path = &config.jwks_file;
        let text = std::fs::read_to_string(path).map_err(|e| JwksError::Read {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let keys = parse_jwks(path, &text)?;
        let tenants = config
            .tenants
            .iter()
            .map(|name| TenantId::new(name).map_err(|_| JwksError::Tenant { name: name.clone() }))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            tenants,
            keys,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            tenant_claim: config.tenant_claim.clone(),
            principal_claim: config.principal_claim.clone(),
            leeway_secs: config.leeway_secs,
        })
    }

    /// True when `token` has a JWT's shape (three dot-separated parts): it
    /// is then verified as one, never looked up as a static token.
    pub fn looks_like_jwt(token: &str) -> bool {
        token.split('.').count() == 3
    }

    /// Who `token` authenticates as.
    pub fn verify(&self, token: &str) -> Result<Principal, JwtReason> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| JwtReason::Malformed)?;
        // Only the asymmetric algorithms: a token must never choose HS256
        // with a public key as its "secret" (algorithm confusion).
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(JwtReason::Algorithm);
        }
        let candidates = self.keys.iter().filter(|k| {
            k.alg == header.alg
                && match (&header.kid, &k.kid) {
                    (Some(want), Some(have)) => want == have,
                    (Some(_), None) => false,
                    (None, _) => true,
                }
        });
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = self.leeway_secs;
        let mut reason = JwtReason::UnknownKey;
        for key in candidates {
            match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
                token,
                &key.key,
                &validation,
            ) {
                Ok(data) => return self.principal(&data.claims),
                // Several keys without a kid: try the next.
                Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => {
                    reason = JwtReason::Signature;
                }
                Err(e) => return Err(map_error(e.kind())),
            }
        }
        Err(reason)
    }

    fn principal(
        &self,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Principal, JwtReason> {
        let claim = |name: &str| claims.get(name).and_then(|v| v.as_str());
        let tenant = claim(&self.tenant_claim)
            .ok_or(JwtReason::Tenant)
            .and_then(|t| TenantId::new(t).map_err(|_| JwtReason::Tenant))?;
        if !self.tenants.is_empty() && !self.tenants.contains(&tenant) {
            return Err(JwtReason::UnknownTenant);
        }
        let name = claim(&self.principal_claim).ok_or(JwtReason::Principal)?;
        Principal::new(tenant, name).map_err(|_: InvalidName| JwtReason::Principal)
    }
}

fn map_error(kind: &ErrorKind) -> JwtReason {
    match kind {
        ErrorKind::ExpiredSignature => JwtReason::Expired,
        ErrorKind::ImmatureSignature => JwtReason::NotYetValid,
        ErrorKind::InvalidIssuer => JwtReason::Issuer,
        ErrorKind::InvalidAudience => JwtReason::Audience,
        ErrorKind::InvalidSignature => JwtReason::Signature,
        ErrorKind::InvalidAlgorithm => JwtReason::Algorithm,
        ErrorKind::MissingRequiredClaim(_) | ErrorKind::InvalidClaimFormat(_) => {
            JwtReason::MissingClaim
        }
        _ => JwtReason::Malformed,
    }
}

fn parse_jwks(path: &Path, text: &str) -> Result<Vec<Key>, JwksError> {
    let set: JwkSet = serde_json::from_str(text).map_err(|e| JwksError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if set.keys.is_empty() {
        return Err(JwksError::Empty {
            path: path.to_path_buf(),
        });
    }
    set.keys
        .iter()
        .enumerate()
        .map(|(index, jwk)| {
            let alg = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Algorithm::RS256,
                AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
                    Algorithm::ES256
                }
                _ => {
                    return Err(JwksError::Unsupported {
                        path: path.to_path_buf(),
                        index,
                    });
                }
            };
            // A key that names another algorithm than its type's is refused
            // rather than guessed at.
            if let Some(named) = jwk.common.key_algorithm
                && named.to_string().parse::<Algorithm>().ok() != Some(alg)
            {
                return Err(JwksError::Unsupported {
                    path: path.to_path_buf(),
                    index,
                });
            }
            let key = DecodingKey::from_jwk(jwk).map_err(|_| JwksError::BadKey {
                path: path.to_path_buf(),
                index,
            })?;
            Ok(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                key,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwks_without_usable_keys_is_refused_naming_the_key() {
        let p = Path::new("/j.json");
        assert!(matches!(
            parse_jwks(p, "{\"keys\": []}"),
            Err(JwksError::Empty { .. })
        ));
        assert!(matches!(
            parse_jwks(p, "not json"),
            Err(JwksError::Parse { .. })
        ));
        let oct = r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#;
        assert!(matches!(
            parse_jwks(p, oct),
            Err(JwksError::Unsupported { index: 0, .. })
        ));
    }

    #[test]
    fn only_three_part_tokens_are_taken_for_jwts() {
        assert!(JwtVerifier::looks_like_jwt("a.b.c"));
        assert!(!JwtVerifier::looks_like_jwt("token-of-tenant-a"));
        assert!(!JwtVerifier::looks_like_jwt("a.b"));
    }
}
