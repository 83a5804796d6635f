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
        let args_digest = command.is_none().then(|| digest(&call.args));
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
        tracing::debug!(
            target: TARGET,
            tenant = %self.tenant,
            principal = %self.principal,
            workspace = %self.workspace,
            session = %self.session,
            batch = %self.batch,
            call_id = %self.call_id,
            tool = %self.tool,
            state,
            trace_id = self.trace_id.as_deref(),
            "call state"
        );
    }

    /// The policy's decision for the call (`allow`, `deny`, `ask_user`) and
    /// the rule behind it.
    pub(super) fn decided(&self, decision: &'static str, rule: Option<&str>) {
        tracing::info!(
            target: TARGET,
            tenant = %self.tenant,
            principal = %self.principal,
            workspace = %self.workspace,
            session = %self.session,
            batch = %self.batch,
            call_id = %self.call_id,
            tool = %self.tool,
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
        tracing::info!(
            target: TARGET,
            tenant = %self.tenant,
            principal = %self.principal,
            workspace = %self.workspace,
            session = %self.session,
            batch = %self.batch,
            call_id = %self.call_id,
            tool = %self.tool,
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
/// (the map keeps the request's order; the digest must not depend on it).
fn digest(args: &serde_json::Map<String, Value>) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let canonical = sorted(&Value::Object(args.clone())).to_string();
    let hash = Sha256::digest(canonical.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
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
        let empty = serde_json::Map::new();
        // sha256("{}")
        assert_eq!(
            digest(&empty),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
