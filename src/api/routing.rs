//! The routing header. Behind a proxy that spreads requests over several
//! replicas, a client sends its session id as `x-toolsched-session`
//! metadata and the proxy hashes it, so a session's requests reach one
//! replica (affinity: the fast path; the store keeps it correct anyway).
//! A header naming another session than the body would route the request
//! by the wrong key, so it is refused rather than trusted or ignored.

use tonic::metadata::MetadataMap;

use super::error::ApiError;

/// The metadata key a proxy hashes.
pub const SESSION_HEADER: &str = "x-toolsched-session";

/// Characters of a session id echoed in an error.
const ECHO_CHARS: usize = 32;

fn prefix(s: &str) -> String {
    if s.chars().count() > ECHO_CHARS {
        format!("{}…", s.chars().take(ECHO_CHARS).collect::<String>())
    } else {
        s.to_string()
    }
}

/// The header, when sent, must equal the body's `session_id`.
pub fn check(metadata: &MetadataMap, session_id: &str) -> Result<(), ApiError> {
    let Some(value) = metadata.get(SESSION_HEADER) else {
        return Ok(());
    };
    let header = value.to_str().map_err(|_| {
        ApiError::InvalidArgument(format!(
            "{SESSION_HEADER} metadata is not printable ASCII; send the session_id"
        ))
    })?;
    if header != session_id {
        return Err(ApiError::InvalidArgument(format!(
            "{SESSION_HEADER} metadata '{}' differs from the body's session_id '{}'; send the same session id in both (a proxy routes by the header)",
            prefix(header),
            prefix(session_id)
        )));
    }
    Ok(())
}
