//! Authentication: a request's credential to the [`Principal`] it acts as
//! (DESIGN §11). Static bearer tokens are configured as SHA-256 hashes, each
//! with its tenant and principal, so the config file (and a Kubernetes
//! Secret holding it) never holds a usable token; the single
//! `--auth-token` is the one-tenant shorthand. The interceptor puts the
//! principal into the request's extensions; handlers read it with
//! [`principal`].
//!
//! What was sent is never repeated in a status or a log line: every refusal
//! is one of the fixed [`AuthError`] messages.
//!
//! Not here: what a principal may do in its tenant (the scheduler
//! namespaces sessions by tenant).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tonic::{Request, Status};

use super::error::{ApiError, AuthError};
use super::jwt::{JwksError, JwtConfig, JwtVerifier};
use crate::tenant::{InvalidName, Principal, TenantId};

/// One configured static token: `[[auth_tokens]]` in the config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticToken {
    /// Lowercase or uppercase hex SHA-256 of the token (64 digits), e.g.
    /// `printf %s "$TOKEN" | sha256sum`.
    pub sha256: String,
    pub tenant: String,
    pub principal: String,
}

/// Why a configured token is unusable (at start-up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenConfigError {
    #[error("sha256 must be 64 hex digits (the SHA-256 of the token), not the token itself")]
    NotAHash,
    #[error(transparent)]
    Name(#[from] InvalidName),
    #[error("the same token hash is configured twice")]
    Duplicate,
    #[error(transparent)]
    Jwks(#[from] JwksError),
}

/// Checks credentials. Without any configured credential every request is
/// [`Principal::single_tenant`].
#[derive(Debug, Clone, Default)]
pub struct Authenticator {
    /// Lowercase hex SHA-256 of a token → who it is.
    tokens: HashMap<String, Principal>,
    /// JWT bearer tokens, when `[jwt]` is configured.
    jwt: Option<Arc<JwtVerifier>>,
}

impl Authenticator {
    /// The authenticator of `tokens`, and of `single` (the `--auth-token`
    /// shorthand: a principal "token" of the default tenant), and of the
    /// JWTs `jwt` verifies (its JWKS file is read here).
    pub fn new(
        single: Option<&str>,
        tokens: &[StaticToken],
        jwt: Option<&JwtConfig>,
    ) -> Result<Self, TokenConfigError> {
        let mut map = HashMap::new();
        if let Some(token) = single {
            map.insert(
                hash_hex(token),
                Principal::new(TenantId::default(), "token")?,
            );
        }
        for token in tokens {
            let hash = token.sha256.to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(TokenConfigError::NotAHash);
            }
            let principal = Principal::new(TenantId::new(&token.tenant)?, &token.principal)?;
            if map.insert(hash, principal).is_some() {
                return Err(TokenConfigError::Duplicate);
            }
        }
        let jwt = jwt.map(JwtVerifier::load).transpose()?.map(Arc::new);
        Ok(Self { tokens: map, jwt })
    }

    /// True when some credential is required.
    pub fn required(&self) -> bool {
        !self.tokens.is_empty() || self.jwt.is_some()
    }

    /// Who `authorization` (the metadata value, if any) authenticates as.
    /// The lookup is by the token's SHA-256: the map is keyed by a digest,
    /// so its timing says nothing about the token's bytes.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, AuthError> {
        if !self.required() {
            return Ok(Principal::single_tenant());
        }
        let token = authorization
            .ok_or(AuthError::Missing)?
            .strip_prefix("Bearer ")
            .ok_or(AuthError::Missing)?;
        if let Some(jwt) = &self.jwt
            && JwtVerifier::looks_like_jwt(token)
        {
            return jwt.verify(token).map_err(AuthError::Jwt);
        }
        self.tokens
            .get(&hash_hex(token))
            .cloned()
            .ok_or(AuthError::Invalid)
    }

    /// The tonic interceptor: authenticates and stores the [`Principal`] in
    /// the request's extensions.
    pub fn interceptor(self) -> impl Fn(Request<()>) -> Result<Request<()>, Status> + Clone {
        move |mut req: Request<()>| {
            let mut values = req.metadata().get_all("authorization").iter();
            let given = values.next().and_then(|v| v.to_str().ok());
            // Two credentials: which one a proxy or the server reads is
            // anybody's guess, so neither is taken.
            let ambiguous = values.next().is_some();
            // mTLS: the client certificate names the caller (the handshake
            // already required one signed by the client CA).
            let from_cert = req
                .extensions()
                .get::<super::tls::TlsConnectInfo>()
                .and_then(|info| info.client.clone());
            let principal = match from_cert {
                Some(Ok(principal)) => principal,
                Some(Err(super::tls::UnmappedCert)) => {
                    return Err(ApiError::from(AuthError::UnmappedCert).into());
                }
                None if ambiguous => {
                    return Err(ApiError::from(AuthError::Ambiguous).into());
                }
                None => self.authenticate(given).map_err(ApiError::from)?,
            };
            req.extensions_mut().insert(principal);
            Ok(req)
        }
    }
}

/// The principal the interceptor authenticated (the single-tenant one when
/// the service was built without the interceptor, as in library use).
pub fn principal<T>(request: &Request<T>) -> Principal {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .unwrap_or_else(Principal::single_tenant)
}

/// Lowercase hex SHA-256 of `token`.
pub fn hash_hex(token: &str) -> String {
    use std::fmt::Write;
    Sha256::digest(token.as_bytes())
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(secret: &str, tenant: &str, principal: &str) -> StaticToken {
        StaticToken {
            sha256: hash_hex(secret).to_uppercase(),
            tenant: tenant.into(),
            principal: principal.into(),
        }
    }

    /// Two `authorization` values are refused, whichever comes first.
    #[test]
    fn two_authorization_values_are_unauthenticated() {
        let auth = Authenticator::new(None, &[token("a-secret", "acme", "alice")], None).unwrap();
        let check = auth.interceptor();
        let mut req = Request::new(());
        req.metadata_mut()
            .append("authorization", "Bearer a-secret".parse().unwrap());
        assert!(check(req).is_ok());
        for second in ["Bearer a-secret", "Bearer other"] {
            let mut req = Request::new(());
            req.metadata_mut()
                .append("authorization", "Bearer a-secret".parse().unwrap());
            req.metadata_mut()
                .append("authorization", second.parse().unwrap());
            let status = check(req).unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unauthenticated);
            assert_eq!(
                status.message(),
                "more than one 'authorization' metadata value"
            );
        }
    }

    #[test]
    fn tokens_map_to_their_tenant_and_principal() {
        // printf %s abc | sha256sum
        assert_eq!(
            hash_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let auth = Authenticator::new(
            Some("single"),
            &[
                token("a-secret", "acme", "alice"),
                token("b-secret", "beta", "bob"),
            ],
            None,
        )
        .unwrap();
        let who = auth.authenticate(Some("Bearer a-secret")).unwrap();
        assert_eq!((who.tenant.as_str(), &*who.name), ("acme", "alice"));
        let who = auth.authenticate(Some("Bearer b-secret")).unwrap();
        assert_eq!((who.tenant.as_str(), &*who.name), ("beta", "bob"));
        let who = auth.authenticate(Some("Bearer single")).unwrap();
        assert_eq!((who.tenant.as_str(), &*who.name), ("default", "token"));
        assert_eq!(
            auth.authenticate(Some("Bearer nope")),
            Err(AuthError::Invalid)
        );
        assert_eq!(auth.authenticate(Some("a-secret")), Err(AuthError::Missing));
        assert_eq!(auth.authenticate(None), Err(AuthError::Missing));

        let open = Authenticator::new(None, &[], None).unwrap();
        assert_eq!(open.authenticate(None), Ok(Principal::single_tenant()));
    }

    #[test]
    fn bad_token_configs_are_refused() {
        let mut plain = token("x", "acme", "alice");
        plain.sha256 = "x".into();
        assert_eq!(
            Authenticator::new(None, &[plain], None).unwrap_err(),
            TokenConfigError::NotAHash
        );
        assert_eq!(
            Authenticator::new(None, &[token("x", "a/b", "alice")], None).unwrap_err(),
            TokenConfigError::Name(InvalidName::BadCharacter { kind: "tenant" })
        );
        assert_eq!(
            Authenticator::new(None, &[token("x", "a", "p"), token("x", "b", "q")], None)
                .unwrap_err(),
            TokenConfigError::Duplicate
        );
    }
}
