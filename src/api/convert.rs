//! Every conversion between generated proto types and domain types, in one
//! place. Requests become domain types with a precise error; events become
//! proto messages.

use std::time::SystemTime;

use prost_types::{ListValue, Struct, Timestamp, Value as PbValue, value::Kind};
use serde_json::{Map, Number, Value};

use super::error::ApiError;
use super::pb;
use crate::policy::ApprovalMode;
use crate::sandbox::{Sandbox, SandboxLevel};
use crate::scheduler::{
    BatchEvent, BatchRequest, CallEnd, CallRequest, CallSummary, CancelRequest, CancelSummary,
    ConfirmRequest, ConfirmationOutcome, Confirmed, FunctionResponse, StateUpdate, WatchRequest,
};
use crate::store::Entry;
use crate::tools::{ConfirmationDetails, Declaration, ErrorKind, Progress, ToolKind};
use crate::workspaces::WorkspaceName;

// === JSON <-> google.protobuf.Struct ===

/// A protobuf `Value` as JSON. Numbers that are whole (protobuf has only
/// doubles) become JSON integers, so `"start_line": 5` checks as an integer.
pub fn value_to_json(v: PbValue) -> Value {
    match v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::NumberValue(n)) => number_to_json(n),
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.into_iter().map(value_to_json).collect()),
        Some(Kind::StructValue(s)) => Value::Object(struct_to_json(s)),
    }
}

fn number_to_json(n: f64) -> Value {
    // 2^53: beyond it a double no longer holds every integer exactly.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if n.fract() == 0.0 && n.abs() <= EXACT {
        Value::Number(Number::from(n as i64))
    } else {
        // JSON has no NaN or infinity: keep them visible as strings, so that
        // a schema error names what was sent rather than a `null`.
        Number::from_f64(n).map_or_else(|| Value::String(n.to_string()), Value::Number)
    }
}

/// A protobuf `Struct` as a JSON object.
pub fn struct_to_json(s: Struct) -> Map<String, Value> {
    s.fields
        .into_iter()
        .map(|(k, v)| (k, value_to_json(v)))
        .collect()
}

/// JSON as a protobuf `Value`.
pub fn json_to_value(v: &Value) -> PbValue {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(json_to_value).collect(),
        }),
        Value::Object(o) => Kind::StructValue(json_to_struct(o)),
    };
    PbValue { kind: Some(kind) }
}

/// A JSON object as a protobuf `Struct`.
pub fn json_to_struct(o: &Map<String, Value>) -> Struct {
    Struct {
        fields: o
            .iter()
            .map(|(k, v)| (k.clone(), json_to_value(v)))
            .collect(),
    }
}

fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

// === requests ===

/// A GetSession's session id, checked as every RPC's.
pub fn get_session_id(r: pb::GetSessionRequest) -> Result<String, ApiError> {
    if r.session_id.is_empty() {
        return Err(ApiError::InvalidArgument(
            "session_id is empty; name the session".into(),
        ));
    }
    if r.session_id.len() > crate::scheduler::validate::MAX_SESSION_ID_BYTES {
        return Err(ApiError::InvalidArgument(format!(
            "session_id is {} bytes; at most {}",
            r.session_id.len(),
            crate::scheduler::validate::MAX_SESSION_ID_BYTES
        )));
    }
    if crate::scheduler::validate::has_nul(&r.session_id) {
        let nul = crate::scheduler::validate::InvalidRequest::NulInId {
            field: "session_id",
        };
        return Err(ApiError::InvalidArgument(nul.to_string()));
    }
    Ok(r.session_id)
}

/// A live session as GetSession answers it.
pub fn session_view(
    session_id: String,
    v: crate::scheduler::SessionView,
    owner: Option<String>,
) -> pb::GetSessionResponse {
    let mode = match v.mode {
        ApprovalMode::Default => pb::ApprovalMode::Default,
        ApprovalMode::AutoEdit => pb::ApprovalMode::AutoEdit,
        ApprovalMode::Yolo => pb::ApprovalMode::Yolo,
        ApprovalMode::Plan => pb::ApprovalMode::Plan,
    };
    pb::GetSessionResponse {
        session_id,
        workspace: v.workspace.map(|w| w.to_string()).unwrap_or_default(),
        approval_mode: mode as i32,
        running_batch_id: v.running_batch.unwrap_or_default(),
        queued_batch_ids: v.queued_batches,
        owner_replica: owner.unwrap_or_default(),
    }
}

fn approval_mode(raw: i32) -> Result<Option<ApprovalMode>, ApiError> {
    match pb::ApprovalMode::try_from(raw) {
        Ok(pb::ApprovalMode::Unspecified) => Ok(None),
        Ok(pb::ApprovalMode::Default) => Ok(Some(ApprovalMode::Default)),
        Ok(pb::ApprovalMode::AutoEdit) => Ok(Some(ApprovalMode::AutoEdit)),
        Ok(pb::ApprovalMode::Yolo) => Ok(Some(ApprovalMode::Yolo)),
        Ok(pb::ApprovalMode::Plan) => Ok(Some(ApprovalMode::Plan)),
        Err(_) => Err(ApiError::InvalidArgument(format!(
            "approval_mode {raw} is not a known ApprovalMode"
        ))),
    }
}

impl TryFrom<pb::ScheduleCallsRequest> for BatchRequest {
    type Error = ApiError;

    fn try_from(r: pb::ScheduleCallsRequest) -> Result<Self, ApiError> {
        let approval_mode = approval_mode(r.approval_mode)?;
        let calls = r
            .calls
            .into_iter()
            .map(|c| CallRequest {
                id: c.id,
                name: c.name,
                args: std::sync::Arc::new(c.args.map(struct_to_json).unwrap_or_default()),
                wait_for_previous: c.wait_for_previous,
                client_initiated: c.client_initiated,
            })
            .collect();
        let sandbox_level = match pb::SandboxLevel::try_from(r.sandbox_level) {
            Ok(pb::SandboxLevel::Unspecified) => None,
            Ok(pb::SandboxLevel::ReadOnly) => Some(SandboxLevel::ReadOnly),
            Ok(pb::SandboxLevel::WorkspaceWrite) => Some(SandboxLevel::WorkspaceWrite),
            Ok(pb::SandboxLevel::WorkspaceWriteNetwork) => {
                Some(SandboxLevel::WorkspaceWriteNetwork)
            }
            Ok(pb::SandboxLevel::None) => Some(SandboxLevel::None),
            Err(_) => {
                return Err(ApiError::InvalidArgument(format!(
                    "sandbox_level {} is not a known SandboxLevel",
                    r.sandbox_level
                )));
            }
        };
        // Checked by the scheduler's one gate (`BatchRequest::validate`).
        Ok(BatchRequest {
            session_id: r.session_id,
            calls,
            approval_mode,
            interactive: r.interactive.unwrap_or(true),
            sandbox_level,
            trace_parent: Default::default(),
            request_id: Some(r.request_id).filter(|id| !id.is_empty()),
            disconnect_grace: r
                .disconnect_grace_secs
                .map(|secs| std::time::Duration::from_secs(secs.into())),
            outcome_unknown: Vec::new(),
            workspace: match r.workspace.as_str() {
                "" => None,
                name => Some(WorkspaceName::new(name).map_err(|e| {
                    ApiError::InvalidArgument(format!(
                        "workspace '{}': {e}",
                        crate::workspaces::shown(name)
                    ))
                })?),
            },
            // The handler names the authenticated caller.
            principal: crate::tenant::ANONYMOUS.into(),
            ended: Vec::new(),
            answered: Default::default(),
            settings: None,
        })
    }
}

fn outcome(raw: i32) -> Result<ConfirmationOutcome, ApiError> {
    use pb::ConfirmationOutcome as P;
    match P::try_from(raw) {
        Ok(P::ProceedOnce) => Ok(ConfirmationOutcome::ProceedOnce),
        Ok(P::ProceedAlways) => Ok(ConfirmationOutcome::ProceedAlways),
        Ok(P::ProceedAlwaysTool) => Ok(ConfirmationOutcome::ProceedAlwaysTool),
        Ok(P::ProceedAlwaysServer) => Ok(ConfirmationOutcome::ProceedAlwaysServer),
        Ok(P::ModifyWithEditor) => Ok(ConfirmationOutcome::ModifyWithEditor),
        Ok(P::Cancel) => Ok(ConfirmationOutcome::Cancel),
        Ok(P::Unspecified) => Err(ApiError::InvalidArgument(
            "outcome is unset; send one of the outcomes the prompt offered".into(),
        )),
        Err(_) => Err(ApiError::InvalidArgument(format!(
            "outcome {raw} is not a known ConfirmationOutcome"
        ))),
    }
}

fn outcome_to_pb(o: ConfirmationOutcome) -> pb::ConfirmationOutcome {
    use pb::ConfirmationOutcome as P;
    match o {
        ConfirmationOutcome::ProceedOnce => P::ProceedOnce,
        ConfirmationOutcome::ProceedAlways => P::ProceedAlways,
        ConfirmationOutcome::ProceedAlwaysTool => P::ProceedAlwaysTool,
        ConfirmationOutcome::ProceedAlwaysServer => P::ProceedAlwaysServer,
        ConfirmationOutcome::ModifyWithEditor => P::ModifyWithEditor,
        ConfirmationOutcome::Cancel => P::Cancel,
    }
}

impl TryFrom<pb::ConfirmRequest> for ConfirmRequest {
    type Error = ApiError;

    fn try_from(r: pb::ConfirmRequest) -> Result<Self, ApiError> {
        Ok(ConfirmRequest {
            // Presence and lengths: `ConfirmRequest::validate`.
            session_id: r.session_id,
            call_id: r.call_id,
            correlation_id: r.correlation_id,
            outcome: outcome(r.outcome)?,
            new_content: r.new_content,
            // The handler names the authenticated caller.
            principal: crate::tenant::ANONYMOUS.into(),
        })
    }
}

impl TryFrom<pb::WatchBatchRequest> for WatchRequest {
    type Error = ApiError;

    fn try_from(r: pb::WatchBatchRequest) -> Result<Self, ApiError> {
        Ok(WatchRequest {
            // Presence and lengths: `WatchRequest::validate`.
            session_id: r.session_id,
            batch_id: r.batch_id,
            after_sequence: r.after_sequence,
        })
    }
}

impl From<Confirmed> for pb::ConfirmResponse {
    fn from(c: Confirmed) -> Self {
        pb::ConfirmResponse {
            already_applied: c.already_applied,
        }
    }
}

impl TryFrom<pb::CancelRequest> for CancelRequest {
    type Error = ApiError;

    fn try_from(r: pb::CancelRequest) -> Result<Self, ApiError> {
        Ok(CancelRequest {
            // Presence and lengths: `CancelRequest::validate`.
            session_id: r.session_id,
            batch_id: r.batch_id.filter(|b| !b.is_empty()),
            reason: r.reason,
        })
    }
}

impl From<CancelSummary> for pb::CancelResponse {
    fn from(s: CancelSummary) -> Self {
        pb::CancelResponse {
            cancelled_calls: s.cancelled_calls,
            cancelled_batches: s.cancelled_batches,
        }
    }
}

// === events ===

impl From<&FunctionResponse> for pb::FunctionResponse {
    fn from(r: &FunctionResponse) -> Self {
        pb::FunctionResponse {
            id: r.id.clone(),
            name: r.name.clone(),
            response: Some(json_to_struct(&r.response)),
        }
    }
}

fn error_type(kind: ErrorKind) -> pb::ErrorType {
    use pb::ErrorType as P;
    match kind {
        ErrorKind::ToolNotRegistered => P::ToolNotRegistered,
        ErrorKind::InvalidToolParams => P::InvalidToolParams,
        ErrorKind::PolicyViolation => P::PolicyViolation,
        ErrorKind::FileNotFound => P::FileNotFound,
        ErrorKind::TargetIsDirectory => P::TargetIsDirectory,
        ErrorKind::PathNotInWorkspace => P::PathNotInWorkspace,
        ErrorKind::FileTooLarge => P::FileTooLarge,
        ErrorKind::PermissionDenied => P::PermissionDenied,
        ErrorKind::NoSpaceLeft => P::NoSpaceLeft,
        ErrorKind::EditNoOccurrenceFound => P::EditNoOccurrenceFound,
        ErrorKind::EditExpectedOccurrenceMismatch => P::EditExpectedOccurrenceMismatch,
        ErrorKind::EditNoChange => P::EditNoChange,
        ErrorKind::AttemptToCreateExistingFile => P::AttemptToCreateExistingFile,
        ErrorKind::SearchPathNotFound => P::SearchPathNotFound,
        ErrorKind::ExecutionTimeout => P::ExecutionTimeout,
        ErrorKind::SandboxDenied => P::SandboxDenied,
        ErrorKind::McpToolError => P::McpToolError,
        ErrorKind::UnhandledException => P::UnhandledException,
        ErrorKind::PathIsNotADirectory => P::PathIsNotADirectory,
        ErrorKind::FileChangedConcurrently => P::FileChangedConcurrently,
        ErrorKind::OutcomeUnknown => P::OutcomeUnknown,
    }
}

fn details(d: ConfirmationDetails) -> pb::awaiting_approval::Details {
    use pb::awaiting_approval::Details;
    match d {
        ConfirmationDetails::Edit {
            file_path,
            diff,
            is_new_file,
            new_content,
        } => Details::Edit(pb::EditConfirmation {
            file_path,
            diff,
            is_new_file,
            new_content,
        }),
        ConfirmationDetails::Exec {
            command,
            root_commands,
            dir_path,
            write_targets,
        } => Details::Exec(pb::ExecConfirmation {
            command,
            root_commands,
            dir_path,
            write_targets,
        }),
        ConfirmationDetails::Mcp {
            server_name,
            tool_name,
            args,
            description,
        } => Details::Mcp(pb::McpConfirmation {
            server_name,
            tool_name,
            args: Some(json_to_struct(&args)),
            description,
        }),
        ConfirmationDetails::Info { prompt } => Details::Info(pb::InfoConfirmation { prompt }),
    }
}

/// A call's state as a message, from the logged update (every reader of
/// the log converts the shared entry; nothing of it is copied but what the
/// message holds).
fn state(update: &StateUpdate) -> pb::tool_call_update::State {
    use pb::tool_call_update::State;
    match update {
        StateUpdate::Validating { args } => State::Validating(pb::Validating {
            args: Some(json_to_struct(args)),
        }),
        StateUpdate::Scheduled { args } => State::Scheduled(pb::Scheduled {
            args: args.as_deref().map(json_to_struct),
        }),
        StateUpdate::AwaitingApproval {
            correlation_id,
            details: d,
            outcomes,
            deadline,
            reason,
            policy_rule,
        } => State::AwaitingApproval(pb::AwaitingApproval {
            correlation_id: correlation_id.clone(),
            details: Some(details(d.clone())),
            outcomes: outcomes.iter().map(|o| outcome_to_pb(*o) as i32).collect(),
            deadline: deadline.map(timestamp),
            reason: reason.clone(),
            policy_rule: policy_rule.as_deref().map(|s| pb::PolicyRuleRef {
                line: s.line.map_or(0, |l| u32::try_from(l).unwrap_or(u32::MAX)),
                file: s.file.clone(),
                rule: s.rule.clone(),
                segment: s.segment.clone().unwrap_or_default(),
            }),
        }),
        StateUpdate::Executing(p) => State::Executing(executing(p.as_ref())),
        StateUpdate::Success {
            response,
            result,
            duration,
        } => State::Success(pb::Success {
            response: Some(response.into()),
            exit_code: crate::scheduler::events::exit_code(result),
            result: Some(json_to_struct(result)),
            duration_ms: millis(*duration),
        }),
        StateUpdate::Error {
            kind,
            message,
            response,
        } => State::Error(pb::Error {
            r#type: error_type(*kind) as i32,
            message: message.clone(),
            response: Some(response.into()),
        }),
        StateUpdate::Cancelled { reason, response } => State::Cancelled(pb::Cancelled {
            reason: reason.clone(),
            response: Some(response.into()),
        }),
    }
}

/// An Executing update: the call started (`None`) or one progress report.
fn executing(p: Option<&Progress>) -> pb::Executing {
    let mut e = pb::Executing::default();
    match p {
        None => {}
        Some(Progress::Started { pid }) => e.pid = Some(*pid),
        Some(Progress::Output(chunk)) => e.output_chunk = chunk.clone(),
        Some(Progress::Report {
            progress,
            total,
            percent,
            message,
        }) => {
            e.progress = *progress;
            e.total = *total;
            e.percent = *percent;
            e.message = message.clone();
        }
    }
    e
}

/// Whole milliseconds of `d` (saturating: no call runs for 584 million years).
fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<&CallSummary> for pb::CompletedCall {
    fn from(c: &CallSummary) -> Self {
        let (state, error_type, message, exit_code) = match &c.end {
            CallEnd::Success { exit_code } => (
                pb::FinalState::Success,
                pb::ErrorType::Unspecified,
                String::new(),
                *exit_code,
            ),
            CallEnd::Error { kind, message } => (
                pb::FinalState::Error,
                error_type(*kind),
                message.clone(),
                None,
            ),
            CallEnd::Cancelled { reason } => (
                pb::FinalState::Cancelled,
                pb::ErrorType::Unspecified,
                reason.clone(),
                None,
            ),
        };
        Self {
            call_id: c.call_id.clone(),
            tool_name: c.tool_name.clone(),
            state: state as i32,
            error_type: error_type as i32,
            message,
            duration_ms: millis(c.duration),
            exit_code,
        }
    }
}

/// An event of a batch as the `sequence`-th message of its stream.
fn event_to_pb(event: &BatchEvent, at: SystemTime, sequence: u64) -> pb::ScheduleCallsResponse {
    use pb::schedule_calls_response::Event as E;
    let event = match event {
        BatchEvent::Recorded(bytes) => return recorded(bytes),
        BatchEvent::Accepted {
            batch_id,
            queued,
            batches_ahead,
        } => E::BatchAccepted(pb::BatchAccepted {
            batch_id: batch_id.clone(),
            queued: *queued,
            batches_ahead: *batches_ahead,
            replayed: false,
        }),
        BatchEvent::Started { batch_id } => E::BatchStarted(pb::BatchStarted {
            batch_id: batch_id.clone(),
        }),
        BatchEvent::CallUpdate {
            call_id,
            tool_name,
            update,
        } => E::CallUpdate(pb::ToolCallUpdate {
            call_id: call_id.clone(),
            tool_name: tool_name.clone(),
            state: Some(state(update)),
        }),
        BatchEvent::Completed {
            batch_id,
            responses,
            calls,
        } => E::BatchCompleted(pb::BatchCompleted {
            batch_id: batch_id.clone(),
            responses: responses.iter().map(Into::into).collect(),
            calls: calls.iter().map(Into::into).collect(),
        }),
    };
    pb::ScheduleCallsResponse {
        sequence,
        time: Some(timestamp(at)),
        event: Some(event),
    }
}

/// A message as [`WireCodec`] recorded it (its own sequence and time).
fn recorded(bytes: &[u8]) -> pb::ScheduleCallsResponse {
    use prost::Message;
    pb::ScheduleCallsResponse::decode(bytes).unwrap_or_else(|e| {
        // Written by this codec: only a damaged row gets here.
        tracing::error!(error = %e, "a recorded event does not decode");
        pb::ScheduleCallsResponse::default()
    })
}

/// Events in a durable store, in their wire form: the message a stream
/// sent, read back as it was sent (a watcher of a batch run by another
/// process or before a restart gets the same bytes).
pub struct WireCodec;

impl crate::store::EventCodec<BatchEvent> for WireCodec {
    fn encode(&self, entry: &Entry<BatchEvent>) -> Vec<u8> {
        use prost::Message;
        entry_to_pb(entry, false).encode_to_vec()
    }

    fn decode(&self, bytes: bytes::Bytes) -> BatchEvent {
        BatchEvent::Recorded(bytes)
    }
}

/// A logged event as a stream message. On a stream that re-attached by a
/// repeated request id (`replayed`), its BatchAccepted says so.
pub fn entry_to_pb(entry: &Entry<BatchEvent>, replayed: bool) -> pb::ScheduleCallsResponse {
    let mut message = event_to_pb(&entry.event, entry.at, entry.sequence);
    if replayed
        && let Some(pb::schedule_calls_response::Event::BatchAccepted(accepted)) =
            &mut message.event
    {
        accepted.replayed = true;
    }
    message
}

fn kind_to_pb(kind: ToolKind) -> pb::ToolKind {
    match kind {
        ToolKind::Read => pb::ToolKind::Read,
        ToolKind::Edit => pb::ToolKind::Edit,
        ToolKind::Delete => pb::ToolKind::Delete,
        ToolKind::Move => pb::ToolKind::Move,
        ToolKind::Search => pb::ToolKind::Search,
        ToolKind::Execute => pb::ToolKind::Execute,
        ToolKind::Think => pb::ToolKind::Think,
        ToolKind::Fetch => pb::ToolKind::Fetch,
        ToolKind::Other => pb::ToolKind::Other,
    }
}

impl From<&Declaration> for pb::FunctionDeclaration {
    fn from(d: &Declaration) -> Self {
        let parameters = match &d.parameters {
            Value::Object(o) => Some(json_to_struct(o)),
            _ => None,
        };
        pb::FunctionDeclaration {
            name: d.name.clone(),
            description: d.description.clone(),
            parameters,
            kind: kind_to_pb(d.kind) as i32,
            parallelizable: d.parallelizable,
            read_only: d.read_only,
        }
    }
}

// === server info ===

impl From<SandboxLevel> for pb::SandboxLevel {
    fn from(l: SandboxLevel) -> Self {
        match l {
            SandboxLevel::ReadOnly => pb::SandboxLevel::ReadOnly,
            SandboxLevel::WorkspaceWrite => pb::SandboxLevel::WorkspaceWrite,
            SandboxLevel::WorkspaceWriteNetwork => pb::SandboxLevel::WorkspaceWriteNetwork,
            SandboxLevel::None => pb::SandboxLevel::None,
        }
    }
}

impl From<&Sandbox> for pb::SandboxInfo {
    fn from(s: &Sandbox) -> Self {
        let limits = s.config.limits;
        pb::SandboxInfo {
            level: pb::SandboxLevel::from(s.config.level) as i32,
            enforced: s.enforced(),
            landlock_abi: u32::try_from(s.probe.landlock_abi).unwrap_or(0),
            seccomp: s.probe.seccomp,
            user_namespaces: s.probe.user_namespaces,
            process_limit: s.probe.process_limit.name().to_string(),
            missing: s.probe.missing.clone(),
            gaps: s.probe.gaps.clone(),
            cpu_secs: limits.cpu_secs,
            address_space_bytes: limits.address_space_bytes,
            file_size_bytes: limits.file_size_bytes,
            max_processes: limits.processes,
            open_files: limits.open_files,
        }
    }
}

/// One MCP server's status for `GetServerInfo`.
pub fn mcp_server_info(
    (name, status): (String, crate::tools::mcp::McpServerStatus),
) -> pb::McpServerInfo {
    use crate::tools::mcp::McpServerStatus as S;
    let (state, tools, restarts, reason) = match status {
        S::Starting => (pb::McpServerState::Starting, 0, 0, String::new()),
        S::Ready { tools, restarts } => (
            pb::McpServerState::Ready,
            tools as u32,
            restarts,
            String::new(),
        ),
        S::Failed { reason, restarts } => (pb::McpServerState::Failed, 0, restarts, reason),
    };
    pb::McpServerInfo {
        name,
        state: state as i32,
        tools,
        restarts,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_become_integers() {
        assert_eq!(number_to_json(5.0), serde_json::json!(5));
        assert_eq!(number_to_json(2.5), serde_json::json!(2.5));
        assert_eq!(number_to_json(f64::NAN), Value::String("NaN".into()));
        assert_eq!(number_to_json(f64::INFINITY), Value::String("inf".into()));
    }
}
