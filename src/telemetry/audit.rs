//! The audit trail: one structured INFO line per call decision ("call
//! decided") and per terminal state ("call ended"), under the target
//! [`TARGET`], whether traces are exported or not. With `--log-format json`
//! every field is a top-level key of the line. A call's state transitions are
//! logged at DEBUG ("call state"), with its session.
//!
//! What a line holds of the call's arguments: the shell command (at most
//! [`MAX_COMMAND_CHARS`]), the file or directory path of file tools, and for
//! every other tool a SHA-256 digest of the arguments (key-sorted JSON), so
//! that a line never carries file contents yet identical calls can be told
//! apart.
//!
//! Not here: the span (the parent module) and metrics.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::scheduler::events::CallRequest;

/// The `tracing` target of audit lines (`RUST_LOG=toolsched::audit=info`
/// keeps them while silencing the rest).
pub const TARGET: &str = "toolsched::audit";

/// Longest shell command kept on a line, in characters: a one-line command
/// is whole; a script pasted into a command is not copied into every log.
pub const MAX_COMMAND_CHARS: usize = 256;

/// Longest path kept on a line, in characters.
pub const MAX_PATH_CHARS: usize = 256;

/// What the audit lines of one call share.
pub(super) struct CallAudit {
    tenant: Arc<str>,
    /// Who asked for the batch.
    principal: Arc<str>,
    /// The session's workspace (`""`: the server's one).
    workspace: Arc<str>,
    session: Arc<str>,
    batch: Arc<str>,
    call_id: String,
    tool: String,
    /// `run_shell_command`'s command, truncated.
    command: Option<String>,
    /// `file_path` or `dir_path` of a file tool, truncated.
    path: Option<String>,
    /// `sha256:<hex>` of the arguments, when there is no command.
    args_digest: Option<String>,
    trace_id: Option<String>,
    created: Instant,
}

/// An audit event at `$level` naming the call (tenant, principal,
/// workspace, session, batch, call id, tool, in this order), then the
/// event's own fields and message.
macro_rules! call_event {
    ($level:ident, $call:expr, $($rest:tt)*) => {
        tracing::$level!(
            target: TARGET,
            tenant = &*$call.tenant,
            principal = &*$call.principal,
            workspace = &*$call.workspace,
            session = &*$call.session,
            batch = &*$call.batch,
            call_id = $call.call_id.as_str(),
            tool = $call.tool.as_str(),
            $($rest)*
        )
    };
}

impl CallAudit {
    pub(super) fn new(
        tenant: Arc<str>,
        principal: Arc<str>,
        workspace: Arc<str>,
        session: Arc<str>,
        batch: Arc<str>,
        call: &CallRequest,
        trace_id: Option<String>,
    ) -> Self {
        let text = |key: &str, max: usize| {
            call.args
                .get(key)
                .and_then(Value::as_str)
                .map(|s| truncate(s, max))
        };
        let command = match call.name.as_str() {
            "run_shell_command" => text("command", MAX_COMMAND_CHARS),
            _ => None,
        };
        let path = text("file_path", MAX_PATH_CHARS).or_else(|| text("dir_path", MAX_PATH_CHARS));
        // Only a kept line needs the digest (`RUST_LOG` may silence the trail).
        let args_digest = (command.is_none()
            && tracing::enabled!(target: TARGET, tracing::Level::INFO))
        .then(|| digest(&call.args));
        Self {
            tenant,
            principal,
            workspace,
            session,
            batch,
            call_id: call.id.clone(),
            tool: call.name.clone(),
            command,
            path,
            args_digest,
            trace_id,
            created: Instant::now(),
        }
    }

    /// A transition, at DEBUG.
    pub(super) fn state(&self, state: &'static str) {
        call_event!(
            debug,
            self,
            state,
            trace_id = self.trace_id.as_deref(),
            "call state"
        );
    }

    /// The policy's decision for the call (`allow`, `deny`, `ask_user`) and
    /// the rule behind it.
    pub(super) fn decided(&self, decision: &'static str, rule: Option<&str>) {
        call_event!(
            info,
            self,
            command = self.command.as_deref(),
            path = self.path.as_deref(),
            args_digest = self.args_digest.as_deref(),
            decision,
            rule,
            trace_id = self.trace_id.as_deref(),
            "call decided"
        );
    }

    /// The call's tenant (a metric label).
    pub(super) fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The terminal state, with everything that led to it: `approved_by`
    /// is the principal whose Confirm answered its prompt. `duration_ms`
    /// runs from the call's creation (batch start) to its end.
    pub(super) fn ended(
        &self,
        state: &'static str,
        decision: Option<&'static str>,
        rule: Option<&str>,
        approval: Option<&'static str>,
        approved_by: Option<&str>,
        error_type: Option<&'static str>,
    ) {
        call_event!(
            info,
            self,
            command = self.command.as_deref(),
            path = self.path.as_deref(),
            args_digest = self.args_digest.as_deref(),
            decision,
            rule,
            approval,
            approved_by,
            state,
            error_type,
            duration_ms = self.created.elapsed().as_secs_f64() * 1000.0,
            trace_id = self.trace_id.as_deref(),
            "call ended"
        );
    }
}

/// At most `max` characters of `s`, with `…` when cut.
fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

/// `sha256:<hex>` of the arguments as JSON with keys sorted at every level
/// (the map keeps the request's order; the digest must not depend on it),
/// serialized straight into the hash: nothing of the arguments is copied.
fn digest(args: &serde_json::Map<String, Value>) -> String {
    let mut hasher = HashWriter(Sha256::new());
    // Writing to a hash cannot fail, nor can serializing a `Value`.
    let _ = serde_json::to_writer(&mut hasher, &Sorted::Object(args));
    // Two digits a byte from a table: `write!("{b:02x}")` for each of the
    // 32 bytes was half of this function's instructions.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity("sha256:".len() + 64);
    hex.push_str("sha256:");
    for b in hasher.0.finalize() {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    hex
}

/// A JSON value serialized with the keys of every object sorted.
enum Sorted<'a> {
    Object(&'a serde_json::Map<String, Value>),
    Value(&'a Value),
}

impl serde::Serialize for Sorted<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let map = match *self {
            Self::Object(map) | Self::Value(Value::Object(map)) => map,
            Self::Value(Value::Array(items)) => {
                return s.collect_seq(items.iter().map(Sorted::Value));
            }
            Self::Value(other) => return other.serialize(s),
        };
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_unstable_by_key(|&(k, _)| k);
        let mut out = s.serialize_map(Some(entries.len()))?;
        for (k, v) in entries {
            out.serialize_entry(k, &Sorted::Value(v))?;
        }
        out.end()
    }
}

/// Feeds what is written to a hash.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn commands_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("ls -la", 256), "ls -la");
        let long = "é".repeat(300);
        let cut = truncate(&long, MAX_COMMAND_CHARS);
        assert_eq!(cut.chars().count(), MAX_COMMAND_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn the_digest_does_not_depend_on_key_order() {
        let a = json!({"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": "s"}});
        let b = json!({"a": {"x": "s", "y": [1, {"p": 3, "q": 2}]}, "b": 1});
        let (Value::Object(a), Value::Object(b)) = (a, b) else {
            unreachable!()
        };
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(digest(&a).len(), "sha256:".len() + 64);
        // The bytes hashed: compact JSON, keys sorted at every level.
        let canonical = r#"{"a":{"x":"s","y":[1,{"p":3,"q":2}]},"b":1}"#;
        let hex: String = Sha256::digest(canonical.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest(&a), format!("sha256:{hex}"));
        let empty = serde_json::Map::new();
        // sha256("{}")
        assert_eq!(
            digest(&empty),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
