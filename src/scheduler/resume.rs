//! What makes a batch outlive its connection, on the scheduler's side: the
//! batch's events as a log entry type (sizes, merging of progress), the
//! digest a request id is checked with, WatchBatch's request and errors,
//! and the disconnect grace's reason.
//!
//! Owns the vocabulary; the log and its retention are in [`crate::store`],
//! the session acts on a detach (`session.rs`), the hub hands out readers.

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::events::{BatchEvent, BatchRequest, CallRequest, StateUpdate, approx_size};
use super::validate::{InvalidRequest, MAX_BATCH_ID_BYTES, MAX_SESSION_ID_BYTES, Shown};
use crate::policy::ApprovalMode;
use crate::store::{CallsDigest, LogEvent, MergeKey, StoreError};
use crate::tools::{ConfirmationDetails, Progress};

/// A WatchBatch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    pub session_id: String,
    pub batch_id: String,
    /// The last sequence the client has seen; 0 reads from the first event.
    pub after_sequence: u64,
}

impl WatchRequest {
    /// Both ids present and within the limits the server issues them at.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        super::validate::required("session_id", &self.session_id, MAX_SESSION_ID_BYTES)?;
        super::validate::required("batch_id", &self.batch_id, MAX_BATCH_ID_BYTES)
    }
}

/// Why a WatchBatch was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WatchError {
    #[error("invalid WatchBatch: {0}")]
    Invalid(#[from] InvalidRequest),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "after_sequence {after} is beyond the last event of batch '{}' ({last})",
        Shown(batch_id)
    )]
    BeyondEnd {
        batch_id: String,
        after: u64,
        last: u64,
    },
    #[error("the scheduler is not running")]
    Unavailable,
}

/// What a Confirm did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Confirmed {
    /// This exact answer had been applied before: nothing changed.
    pub already_applied: bool,
}

/// The reason a batch ends with when nobody re-attached within its grace.
pub fn grace_reason(grace: Duration) -> String {
    format!(
        "the client went away and did not come back within {} s",
        grace.as_secs()
    )
}

/// What a request id is checked against when it comes again: the calls
/// ([`calls_digest`]) and the batch's settings that change what they do
/// (approval mode, sandbox level, workspace, interactive). A retry that
/// asks for another mode or workspace is another batch, refused as a
/// conflict rather than answered with the first one's results.
pub fn batch_digest(request: &BatchRequest) -> CallsDigest {
    let mut hasher = Sha256::new();
    hasher.update(calls_digest(&request.calls));
    let mode = request.approval_mode.map_or("", crate::policy::mode_name);
    field(&mut hasher, mode.as_bytes());
    let level = request
        .sandbox_level
        .map(|l| l.to_string())
        .unwrap_or_default();
    field(&mut hasher, level.as_bytes());
    let workspace = request.workspace.as_ref().map_or("", |w| w.as_str());
    field(&mut hasher, workspace.as_bytes());
    hasher.update([u8::from(request.interactive)]);
    hasher.finalize().into()
}

/// SHA-256 of the calls in a canonical form (object keys sorted, so the
/// order a client's JSON library emits them in does not matter): ids,
/// names, arguments, `wait_for_previous` and `client_initiated`, in request
/// order.
pub fn calls_digest(calls: &[CallRequest]) -> CallsDigest {
    let mut hasher = Sha256::new();
    for call in calls {
        field(&mut hasher, call.id.as_bytes());
        field(&mut hasher, call.name.as_bytes());
        hash_object(&mut hasher, &call.args);
        hasher.update([u8::from(call.wait_for_previous)]);
        // Who initiated it changes how it is approved.
        hasher.update([u8::from(call.client_initiated)]);
    }
    hasher.finalize().into()
}

/// A length-prefixed field: no two different sequences hash the same bytes.
fn field(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

fn hash_object(hasher: &mut Sha256, object: &serde_json::Map<String, serde_json::Value>) {
    let mut keys: Vec<&String> = object.keys().collect();
    keys.sort();
    hasher.update([b'{']);
    hasher.update((keys.len() as u64).to_le_bytes());
    for key in keys {
        field(hasher, key.as_bytes());
        hash_value(hasher, &object[key.as_str()]);
    }
}

fn hash_value(hasher: &mut Sha256, value: &serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Null => hasher.update([b'n']),
        Value::Bool(b) => hasher.update([b'b', u8::from(*b)]),
        Value::Number(n) => {
            hasher.update([b'#']);
            field(hasher, n.to_string().as_bytes());
        }
        Value::String(s) => {
            hasher.update([b's']);
            field(hasher, s.as_bytes());
        }
        Value::Array(items) => {
            hasher.update([b'[']);
            hasher.update((items.len() as u64).to_le_bytes());
            items.iter().for_each(|v| hash_value(hasher, v));
        }
        Value::Object(o) => hash_object(hasher, o),
    }
}

/// Fixed cost of an event beyond its strings (the entry, the enum, times).
const EVENT_OVERHEAD_BYTES: usize = 96;

impl LogEvent for BatchEvent {
    fn approx_bytes(&self) -> usize {
        EVENT_OVERHEAD_BYTES
            + match self {
                BatchEvent::Accepted { batch_id, .. } | BatchEvent::Started { batch_id } => {
                    batch_id.len()
                }
                BatchEvent::CallUpdate {
                    call_id,
                    tool_name,
                    update,
                } => call_id.len() + tool_name.len() + update_bytes(update),
                BatchEvent::Completed {
                    batch_id,
                    responses,
                    ..
                } => batch_id.len() + responses.iter().map(|r| r.approx_size()).sum::<usize>(),
                BatchEvent::Recorded(bytes) => bytes.len(),
            }
    }

    /// A call's progress report supersedes its previous one; any other
    /// update of the call is not merged across.
    fn merge_key(&self) -> MergeKey<'_> {
        match self {
            BatchEvent::CallUpdate {
                call_id,
                update: StateUpdate::Executing(Some(Progress::Report { .. })),
                ..
            } => MergeKey::Report(call_id),
            BatchEvent::CallUpdate { call_id, .. } => MergeKey::Other(call_id),
            _ => MergeKey::None,
        }
    }
}

fn update_bytes(update: &StateUpdate) -> usize {
    let object = |o: &serde_json::Map<String, serde_json::Value>| {
        o.iter()
            .map(|(k, v)| k.len() + approx_size(v))
            .sum::<usize>()
    };
    match update {
        // Shared with the call (an `Arc`), but kept alive by the log too.
        StateUpdate::Validating { args } => object(args),
        StateUpdate::Scheduled { args } => args.as_deref().map_or(0, object),
        StateUpdate::AwaitingApproval {
            correlation_id,
            details,
            reason,
            ..
        } => {
            correlation_id.len()
                + reason.len()
                + match details {
                    ConfirmationDetails::Edit {
                        file_path,
                        diff,
                        new_content,
                        ..
                    } => file_path.len() + diff.len() + new_content.len(),
                    ConfirmationDetails::Exec {
                        command,
                        root_commands,
                        dir_path,
                        write_targets,
                    } => {
                        command.len()
                            + dir_path.len()
                            + root_commands.iter().map(String::len).sum::<usize>()
                            + write_targets.iter().map(String::len).sum::<usize>()
                    }
                    ConfirmationDetails::Mcp {
                        server_name,
                        tool_name,
                        args,
                        description,
                    } => server_name.len() + tool_name.len() + description.len() + object(args),
                    ConfirmationDetails::Info { prompt } => prompt.len(),
                }
        }
        StateUpdate::Executing(p) => match p {
            None | Some(Progress::Started { .. }) => 0,
            Some(Progress::Output(chunk)) => chunk.len(),
            Some(Progress::Report { message, .. }) => message.len(),
        },
        StateUpdate::Success {
            response, result, ..
        } => response.approx_size() + object(result),
        StateUpdate::Error {
            message, response, ..
        } => message.len() + response.approx_size(),
        StateUpdate::Cancelled { reason, response } => reason.len() + response.approx_size(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn call(id: &str, args: serde_json::Value) -> CallRequest {
        CallRequest {
            id: id.into(),
            name: "run_shell_command".into(),
            args: Arc::new(args.as_object().cloned().unwrap_or_default()),
            wait_for_previous: false,
            client_initiated: false,
        }
    }

    #[test]
    fn a_batch_digest_covers_the_settings_that_change_what_runs() {
        let request = BatchRequest {
            session_id: "s".into(),
            calls: vec![call("a", json!({"command": "ls"}))],
            approval_mode: None,
            interactive: true,
            sandbox_level: None,
            trace_parent: Default::default(),
            request_id: Some("r-1".into()),
            disconnect_grace: None,
            outcome_unknown: Vec::new(),
            workspace: Some(crate::workspaces::WorkspaceName::new("a").unwrap()),
            principal: "alice".into(),
            ended: Vec::new(),
            answered: Default::default(),
            settings: None,
        };
        let base = batch_digest(&request);
        // Who asks, the grace and the trace do not change what runs.
        let same = BatchRequest {
            principal: "bob".into(),
            disconnect_grace: Some(Duration::from_secs(9)),
            ..request.clone()
        };
        assert_eq!(batch_digest(&same), base);
        for other in [
            BatchRequest {
                workspace: Some(crate::workspaces::WorkspaceName::new("b").unwrap()),
                ..request.clone()
            },
            BatchRequest {
                workspace: None,
                ..request.clone()
            },
            BatchRequest {
                approval_mode: Some(ApprovalMode::Yolo),
                ..request.clone()
            },
            BatchRequest {
                sandbox_level: Some(crate::sandbox::SandboxLevel::ReadOnly),
                ..request.clone()
            },
            BatchRequest {
                interactive: false,
                ..request.clone()
            },
            BatchRequest {
                calls: vec![call("a", json!({"command": "rm"}))],
                ..request.clone()
            },
        ] {
            assert_ne!(batch_digest(&other), base, "{other:?}");
        }
    }

    #[test]
    fn a_recorded_request_reads_back_as_it_was_sent() {
        let mut waits = call("b", json!({"command": "echo x >> log", "timeout": 5}));
        waits.wait_for_previous = true;
        waits.client_initiated = true;
        let request = BatchRequest {
            session_id: "s".into(),
            calls: vec![
                call("a", json!({"command": "ls", "n": [1, 2.5, null]})),
                waits,
            ],
            approval_mode: Some(ApprovalMode::AutoEdit),
            interactive: false,
            sandbox_level: Some(crate::sandbox::SandboxLevel::WorkspaceWriteNetwork),
            trace_parent: Default::default(),
            request_id: Some("r-1".into()),
            disconnect_grace: Some(Duration::from_secs(30)),
            outcome_unknown: Vec::new(),
            workspace: Some(crate::workspaces::WorkspaceName::new("main").unwrap()),
            principal: "alice".into(),
            ended: Vec::new(),
            answered: Default::default(),
            settings: None,
        };
        let back = decode_request(&encode_request(&request)).expect("decodes");
        assert_eq!(back, request);
        let bare = BatchRequest {
            approval_mode: None,
            sandbox_level: None,
            request_id: None,
            disconnect_grace: None,
            workspace: None,
            ..request
        };
        assert_eq!(
            decode_request(&encode_request(&bare)).expect("decodes"),
            bare
        );
        let err = decode_request(b"{").unwrap_err().to_string();
        assert!(
            err.starts_with("the recorded request of the batch cannot be read: "),
            "{err}"
        );
    }

    #[test]
    fn the_digest_ignores_key_order_and_sees_every_other_difference() {
        let a = calls_digest(&[call("c", json!({"command": "ls", "dir_path": "."}))]);
        let b = calls_digest(&[call("c", json!({"dir_path": ".", "command": "ls"}))]);
        assert_eq!(a, b);
        let other_value = calls_digest(&[call("c", json!({"command": "rm", "dir_path": "."}))]);
        let other_id = calls_digest(&[call("d", json!({"command": "ls", "dir_path": "."}))]);
        let mut waits = call("c", json!({"command": "ls", "dir_path": "."}));
        waits.wait_for_previous = true;
        let other_wait = calls_digest(&[waits]);
        let mut by_client = call("c", json!({"command": "ls", "dir_path": "."}));
        by_client.client_initiated = true;
        assert_ne!(a, calls_digest(&[by_client]));
        assert_ne!(a, other_value);
        assert_ne!(a, other_id);
        assert_ne!(a, other_wait);
        // Field boundaries count: "ab"+"c" is not "a"+"bc".
        let split1 = calls_digest(&[CallRequest {
            name: "bc".into(),
            ..call("a", json!({}))
        }]);
        let split2 = calls_digest(&[CallRequest {
            name: "c".into(),
            ..call("ab", json!({}))
        }]);
        assert_ne!(split1, split2);
    }

    fn progress(call_id: &str, p: Progress) -> BatchEvent {
        BatchEvent::CallUpdate {
            call_id: call_id.into(),
            tool_name: "mcp_x_y".into(),
            update: StateUpdate::Executing(Some(p)),
        }
    }

    fn report(n: f64) -> Progress {
        Progress::Report {
            progress: Some(n),
            total: None,
            percent: None,
            message: String::new(),
        }
    }

    #[test]
    fn reports_are_keyed_by_call_and_other_updates_block_merging() {
        assert_eq!(
            progress("c", report(1.0)).merge_key(),
            MergeKey::Report("c")
        );
        assert_eq!(
            progress("c", Progress::Output("x".into())).merge_key(),
            MergeKey::Other("c")
        );
        let started = BatchEvent::Started {
            batch_id: "b".into(),
        };
        assert_eq!(started.merge_key(), MergeKey::None);
    }

    #[test]
    fn an_event_counts_its_output() {
        let small = progress("c", Progress::Output(String::new())).approx_bytes();
        let big = progress("c", Progress::Output("x".repeat(10_000))).approx_bytes();
        assert_eq!(big - small, 10_000);
    }

    #[test]
    fn the_grace_reason_names_the_grace() {
        assert_eq!(
            grace_reason(Duration::from_secs(30)),
            "the client went away and did not come back within 30 s"
        );
    }
}

/// A batch's request as a durable store keeps it (JSON), so that a replica
/// taking the batch over runs the same calls. The trace parent is not kept
/// (the batch's new span starts a trace of its own).
pub(crate) fn encode_request(request: &BatchRequest) -> Vec<u8> {
    let calls: Vec<serde_json::Value> = request
        .calls
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id,
                "name": c.name,
                "args": &*c.args,
                "wait_for_previous": c.wait_for_previous,
                "client_initiated": c.client_initiated,
            })
        })
        .collect();
    let mode = request.approval_mode.map(|m| match m {
        ApprovalMode::Default => "default",
        ApprovalMode::AutoEdit => "auto_edit",
        ApprovalMode::Yolo => "yolo",
        ApprovalMode::Plan => "plan",
    });
    serde_json::json!({
        "session_id": request.session_id,
        "calls": calls,
        "approval_mode": mode,
        "interactive": request.interactive,
        "sandbox_level": request.sandbox_level.map(|l| l.name()),
        "request_id": request.request_id,
        "disconnect_grace_secs": request.disconnect_grace.map(|g| g.as_secs_f64()),
        "workspace": request.workspace.as_ref().map(|w| w.as_str()),
        "principal": &*request.principal,
    })
    .to_string()
    .into_bytes()
}

/// Why a recorded request could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("the recorded request of the batch cannot be read: {0}")]
pub struct RecordedRequestError(String);

/// The request [`encode_request`] recorded.
pub(crate) fn decode_request(bytes: &[u8]) -> Result<BatchRequest, RecordedRequestError> {
    #[derive(serde::Deserialize)]
    struct Call {
        id: String,
        name: String,
        args: crate::tools::Args,
        wait_for_previous: bool,
        client_initiated: bool,
    }
    #[derive(serde::Deserialize)]
    struct Recorded {
        session_id: String,
        calls: Vec<Call>,
        approval_mode: Option<String>,
        interactive: bool,
        sandbox_level: Option<String>,
        request_id: Option<String>,
        disconnect_grace_secs: Option<f64>,
        #[serde(default)]
        workspace: Option<String>,
        /// Absent in what an older replica recorded.
        #[serde(default)]
        principal: Option<String>,
    }
    let r: Recorded =
        serde_json::from_slice(bytes).map_err(|e| RecordedRequestError(e.to_string()))?;
    let approval_mode = r
        .approval_mode
        .map(|m| m.parse::<ApprovalMode>())
        .transpose()
        .map_err(RecordedRequestError)?;
    let sandbox_level = match r.sandbox_level {
        None => None,
        Some(name) => Some(
            crate::sandbox::SandboxLevel::from_name(&name)
                .ok_or_else(|| RecordedRequestError(format!("unknown sandbox level '{name}'")))?,
        ),
    };
    Ok(BatchRequest {
        session_id: r.session_id,
        calls: r
            .calls
            .into_iter()
            .map(|c| CallRequest {
                id: c.id,
                name: c.name,
                args: std::sync::Arc::new(c.args),
                wait_for_previous: c.wait_for_previous,
                client_initiated: c.client_initiated,
            })
            .collect(),
        approval_mode,
        interactive: r.interactive,
        sandbox_level,
        trace_parent: Default::default(),
        request_id: r.request_id,
        disconnect_grace: r
            .disconnect_grace_secs
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64),
        outcome_unknown: Vec::new(),
        workspace: r
            .workspace
            .map(|w| crate::workspaces::WorkspaceName::new(&w))
            .transpose()
            .map_err(|e| RecordedRequestError(e.to_string()))?,
        principal: r
            .principal
            .as_deref()
            .unwrap_or(crate::tenant::ANONYMOUS)
            .into(),
        ended: Vec::new(),
        answered: Default::default(),
        settings: None,
    })
}
