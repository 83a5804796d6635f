//! What every client request must satisfy before the scheduler acts on it:
//! required fields present, every client string within its named limit.
//! Checked once, by the [`super::Scheduler`] handle (the one gate every
//! caller, gRPC or library, goes through), before anything is queued,
//! copied or changed.
//!
//! Why each bound exists: a client string is copied into events, into every
//! cancelled call's response and into error messages, so an unbounded one
//! multiplies (a 3 MB Cancel reason became 128 copies and a 384 MB
//! message). Error messages repeat at most [`ECHO_PREFIX_BYTES`] of what the
//! client sent. Not here: the tool arguments (each tool's JSON Schema and
//! the request size limit bound them).

use super::events::{BatchRequest, CancelRequest, ConfirmRequest};

/// Longest accepted session id, in bytes: it keys the session map and is in
/// every log line and error about the session.
pub const MAX_SESSION_ID_BYTES: usize = 128;
/// Longest accepted call id, in bytes: it is in every event of the call and
/// in its function response.
pub const MAX_CALL_ID_BYTES: usize = 256;
/// Longest accepted tool name, in bytes: names are echoed in several places
/// of every event, and MCP wire names are at most 64.
pub const MAX_TOOL_NAME_BYTES: usize = 256;
/// Longest accepted correlation id, in bytes: the server issues UUIDs (36
/// bytes); anything longer cannot be one of them.
pub const MAX_CORRELATION_ID_BYTES: usize = 128;
/// Longest accepted batch id, in bytes: the server issues UUIDs (36 bytes).
pub const MAX_BATCH_ID_BYTES: usize = 128;
/// Longest accepted Cancel reason, in bytes: it is copied into every
/// cancelled call's state and function response and into BatchCompleted
/// (up to 128 calls each).
pub const MAX_CANCEL_REASON_BYTES: usize = 1024;
/// Largest accepted `Confirm.new_content`, in bytes: the size of file
/// content a call's arguments carry under the default request limit; the
/// events that show it are bounded separately.
pub const MAX_NEW_CONTENT_BYTES: usize = 4 * 1024 * 1024;
pub use crate::text::{ECHO_PREFIX_BYTES, Shown};

/// Why a batch was refused (INVALID_ARGUMENT). Nothing started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBatch {
    #[error("session_id is empty; name the session (any client-chosen id)")]
    EmptySessionId,
    #[error("session_id is {len} bytes; at most {limit}")]
    SessionIdTooLong { len: usize, limit: usize },
    #[error("calls is empty; send at least one function call")]
    NoCalls,
    #[error("calls[{index}].id is empty; every call needs an id")]
    EmptyCallId { index: usize },
    #[error("calls[{index}].id is {len} bytes; at most {limit}")]
    CallIdTooLong {
        index: usize,
        len: usize,
        limit: usize,
    },
    #[error("calls[{index}].name is {len} bytes; tool names are at most {limit}")]
    ToolNameTooLong {
        index: usize,
        len: usize,
        limit: usize,
    },
    #[error("request_id is {len} bytes; at most {limit}")]
    RequestIdTooLong { len: usize, limit: usize },
    #[error("{field} contains a NUL byte; ids are text without NUL")]
    NulInId { field: String },
    #[error(
        "calls[{index}].id '{}' is a duplicate of calls[{first}].id; call ids must be unique within a batch",
        Shown(id)
    )]
    DuplicateCallId {
        index: usize,
        first: usize,
        id: String,
    },
}

/// Why a Confirm or Cancel was refused (INVALID_ARGUMENT). Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequest {
    #[error("{field} is empty")]
    Empty { field: &'static str },
    #[error("{field} is {len} bytes; at most {limit}")]
    TooLong {
        field: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("{field} contains a NUL byte; ids are text without NUL")]
    NulInId { field: &'static str },
}

/// Whether an id holds a NUL byte. Ids are keys of the durable store's text
/// columns, which refuse NUL: one such id would fail the statement it is
/// in, and statements carry many sessions' batches at once.
pub fn has_nul(id: &str) -> bool {
    id.as_bytes().contains(&0)
}

/// `value` is a non-empty id of at most `limit` bytes, without NUL.
pub(super) fn required(
    field: &'static str,
    value: &str,
    limit: usize,
) -> Result<(), InvalidRequest> {
    if value.is_empty() {
        return Err(InvalidRequest::Empty { field });
    }
    bounded(field, value, limit)?;
    if has_nul(value) {
        return Err(InvalidRequest::NulInId { field });
    }
    Ok(())
}

/// `value` is at most `limit` bytes.
fn bounded(field: &'static str, value: &str, limit: usize) -> Result<(), InvalidRequest> {
    if value.len() > limit {
        return Err(InvalidRequest::TooLong {
            field,
            len: value.len(),
            limit,
        });
    }
    Ok(())
}

impl BatchRequest {
    /// Checks what must hold before anything starts: a session id, at least
    /// one call, non-empty unique call ids, every string within its limit.
    pub fn validate(&self) -> Result<(), InvalidBatch> {
        if self.session_id.trim().is_empty() {
            return Err(InvalidBatch::EmptySessionId);
        }
        if self.session_id.len() > MAX_SESSION_ID_BYTES {
            return Err(InvalidBatch::SessionIdTooLong {
                len: self.session_id.len(),
                limit: MAX_SESSION_ID_BYTES,
            });
        }
        if self.calls.is_empty() {
            return Err(InvalidBatch::NoCalls);
        }
        if let Some(request_id) = &self.request_id
            && request_id.len() > crate::store::MAX_REQUEST_ID_BYTES
        {
            return Err(InvalidBatch::RequestIdTooLong {
                len: request_id.len(),
                limit: crate::store::MAX_REQUEST_ID_BYTES,
            });
        }
        for (field, id) in [
            ("session_id", Some(&self.session_id)),
            ("request_id", self.request_id.as_ref()),
        ] {
            if id.is_some_and(|id| has_nul(id)) {
                return Err(InvalidBatch::NulInId {
                    field: field.into(),
                });
            }
        }
        let mut seen = std::collections::HashMap::new();
        for (index, call) in self.calls.iter().enumerate() {
            if call.id.is_empty() {
                return Err(InvalidBatch::EmptyCallId { index });
            }
            if call.id.len() > MAX_CALL_ID_BYTES {
                return Err(InvalidBatch::CallIdTooLong {
                    index,
                    len: call.id.len(),
                    limit: MAX_CALL_ID_BYTES,
                });
            }
            if has_nul(&call.id) {
                return Err(InvalidBatch::NulInId {
                    field: format!("calls[{index}].id"),
                });
            }
            if call.name.len() > MAX_TOOL_NAME_BYTES {
                return Err(InvalidBatch::ToolNameTooLong {
                    index,
                    len: call.name.len(),
                    limit: MAX_TOOL_NAME_BYTES,
                });
            }
            if let Some(&first) = seen.get(call.id.as_str()) {
                return Err(InvalidBatch::DuplicateCallId {
                    index,
                    first,
                    id: call.id.clone(),
                });
            }
            seen.insert(call.id.as_str(), index);
        }
        Ok(())
    }
}

impl ConfirmRequest {
    /// Every id present and within its limit, `new_content` within its.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        required("session_id", &self.session_id, MAX_SESSION_ID_BYTES)?;
        required("call_id", &self.call_id, MAX_CALL_ID_BYTES)?;
        required(
            "correlation_id",
            &self.correlation_id,
            MAX_CORRELATION_ID_BYTES,
        )?;
        if let Some(content) = &self.new_content {
            bounded("new_content", content, MAX_NEW_CONTENT_BYTES)?;
        }
        Ok(())
    }
}

impl CancelRequest {
    /// The session id present, batch id and reason within their limits.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        required("session_id", &self.session_id, MAX_SESSION_ID_BYTES)?;
        if let Some(batch_id) = &self.batch_id {
            bounded("batch_id", batch_id, MAX_BATCH_ID_BYTES)?;
            if has_nul(batch_id) {
                return Err(InvalidRequest::NulInId { field: "batch_id" });
            }
        }
        bounded("reason", &self.reason, MAX_CANCEL_REASON_BYTES)
    }
}
