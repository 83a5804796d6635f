import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApprovalMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_MODE_UNSPECIFIED: _ClassVar[ApprovalMode]
    APPROVAL_MODE_DEFAULT: _ClassVar[ApprovalMode]
    APPROVAL_MODE_AUTO_EDIT: _ClassVar[ApprovalMode]
    APPROVAL_MODE_YOLO: _ClassVar[ApprovalMode]
    APPROVAL_MODE_PLAN: _ClassVar[ApprovalMode]

class ErrorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_TYPE_UNSPECIFIED: _ClassVar[ErrorType]
    ERROR_TYPE_TOOL_NOT_REGISTERED: _ClassVar[ErrorType]
    ERROR_TYPE_INVALID_TOOL_PARAMS: _ClassVar[ErrorType]
    ERROR_TYPE_POLICY_VIOLATION: _ClassVar[ErrorType]
    ERROR_TYPE_FILE_NOT_FOUND: _ClassVar[ErrorType]
    ERROR_TYPE_TARGET_IS_DIRECTORY: _ClassVar[ErrorType]
    ERROR_TYPE_PATH_NOT_IN_WORKSPACE: _ClassVar[ErrorType]
    ERROR_TYPE_FILE_TOO_LARGE: _ClassVar[ErrorType]
    ERROR_TYPE_PERMISSION_DENIED: _ClassVar[ErrorType]
    ERROR_TYPE_NO_SPACE_LEFT: _ClassVar[ErrorType]
    ERROR_TYPE_EDIT_NO_OCCURRENCE_FOUND: _ClassVar[ErrorType]
    ERROR_TYPE_EDIT_EXPECTED_OCCURRENCE_MISMATCH: _ClassVar[ErrorType]
    ERROR_TYPE_EDIT_NO_CHANGE: _ClassVar[ErrorType]
    ERROR_TYPE_ATTEMPT_TO_CREATE_EXISTING_FILE: _ClassVar[ErrorType]
    ERROR_TYPE_SEARCH_PATH_NOT_FOUND: _ClassVar[ErrorType]
    ERROR_TYPE_EXECUTION_TIMEOUT: _ClassVar[ErrorType]
    ERROR_TYPE_SANDBOX_DENIED: _ClassVar[ErrorType]
    ERROR_TYPE_MCP_TOOL_ERROR: _ClassVar[ErrorType]
    ERROR_TYPE_UNHANDLED_EXCEPTION: _ClassVar[ErrorType]
    ERROR_TYPE_PATH_IS_NOT_A_DIRECTORY: _ClassVar[ErrorType]
    ERROR_TYPE_FILE_CHANGED_CONCURRENTLY: _ClassVar[ErrorType]
    ERROR_TYPE_OUTCOME_UNKNOWN: _ClassVar[ErrorType]

class FinalState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINAL_STATE_UNSPECIFIED: _ClassVar[FinalState]
    FINAL_STATE_SUCCESS: _ClassVar[FinalState]
    FINAL_STATE_ERROR: _ClassVar[FinalState]
    FINAL_STATE_CANCELLED: _ClassVar[FinalState]

class ConfirmationOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIRMATION_OUTCOME_UNSPECIFIED: _ClassVar[ConfirmationOutcome]
    CONFIRMATION_OUTCOME_PROCEED_ONCE: _ClassVar[ConfirmationOutcome]
    CONFIRMATION_OUTCOME_PROCEED_ALWAYS: _ClassVar[ConfirmationOutcome]
    CONFIRMATION_OUTCOME_PROCEED_ALWAYS_TOOL: _ClassVar[ConfirmationOutcome]
    CONFIRMATION_OUTCOME_PROCEED_ALWAYS_SERVER: _ClassVar[ConfirmationOutcome]
    CONFIRMATION_OUTCOME_MODIFY_WITH_EDITOR: _ClassVar[ConfirmationOutcome]
    CONFIRMATION_OUTCOME_CANCEL: _ClassVar[ConfirmationOutcome]

class ToolKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_KIND_UNSPECIFIED: _ClassVar[ToolKind]
    TOOL_KIND_READ: _ClassVar[ToolKind]
    TOOL_KIND_EDIT: _ClassVar[ToolKind]
    TOOL_KIND_DELETE: _ClassVar[ToolKind]
    TOOL_KIND_MOVE: _ClassVar[ToolKind]
    TOOL_KIND_SEARCH: _ClassVar[ToolKind]
    TOOL_KIND_EXECUTE: _ClassVar[ToolKind]
    TOOL_KIND_THINK: _ClassVar[ToolKind]
    TOOL_KIND_FETCH: _ClassVar[ToolKind]
    TOOL_KIND_OTHER: _ClassVar[ToolKind]

class McpServerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MCP_SERVER_STATE_UNSPECIFIED: _ClassVar[McpServerState]
    MCP_SERVER_STATE_STARTING: _ClassVar[McpServerState]
    MCP_SERVER_STATE_READY: _ClassVar[McpServerState]
    MCP_SERVER_STATE_FAILED: _ClassVar[McpServerState]

class SandboxLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_LEVEL_UNSPECIFIED: _ClassVar[SandboxLevel]
    SANDBOX_LEVEL_READ_ONLY: _ClassVar[SandboxLevel]
    SANDBOX_LEVEL_WORKSPACE_WRITE: _ClassVar[SandboxLevel]
    SANDBOX_LEVEL_WORKSPACE_WRITE_NETWORK: _ClassVar[SandboxLevel]
    SANDBOX_LEVEL_NONE: _ClassVar[SandboxLevel]
APPROVAL_MODE_UNSPECIFIED: ApprovalMode
APPROVAL_MODE_DEFAULT: ApprovalMode
APPROVAL_MODE_AUTO_EDIT: ApprovalMode
APPROVAL_MODE_YOLO: ApprovalMode
APPROVAL_MODE_PLAN: ApprovalMode
ERROR_TYPE_UNSPECIFIED: ErrorType
ERROR_TYPE_TOOL_NOT_REGISTERED: ErrorType
ERROR_TYPE_INVALID_TOOL_PARAMS: ErrorType
ERROR_TYPE_POLICY_VIOLATION: ErrorType
ERROR_TYPE_FILE_NOT_FOUND: ErrorType
ERROR_TYPE_TARGET_IS_DIRECTORY: ErrorType
ERROR_TYPE_PATH_NOT_IN_WORKSPACE: ErrorType
ERROR_TYPE_FILE_TOO_LARGE: ErrorType
ERROR_TYPE_PERMISSION_DENIED: ErrorType
ERROR_TYPE_NO_SPACE_LEFT: ErrorType
ERROR_TYPE_EDIT_NO_OCCURRENCE_FOUND: ErrorType
ERROR_TYPE_EDIT_EXPECTED_OCCURRENCE_MISMATCH: ErrorType
ERROR_TYPE_EDIT_NO_CHANGE: ErrorType
ERROR_TYPE_ATTEMPT_TO_CREATE_EXISTING_FILE: ErrorType
ERROR_TYPE_SEARCH_PATH_NOT_FOUND: ErrorType
ERROR_TYPE_EXECUTION_TIMEOUT: ErrorType
ERROR_TYPE_SANDBOX_DENIED: ErrorType
ERROR_TYPE_MCP_TOOL_ERROR: ErrorType
ERROR_TYPE_UNHANDLED_EXCEPTION: ErrorType
ERROR_TYPE_PATH_IS_NOT_A_DIRECTORY: ErrorType
ERROR_TYPE_FILE_CHANGED_CONCURRENTLY: ErrorType
ERROR_TYPE_OUTCOME_UNKNOWN: ErrorType
FINAL_STATE_UNSPECIFIED: FinalState
FINAL_STATE_SUCCESS: FinalState
FINAL_STATE_ERROR: FinalState
FINAL_STATE_CANCELLED: FinalState
CONFIRMATION_OUTCOME_UNSPECIFIED: ConfirmationOutcome
CONFIRMATION_OUTCOME_PROCEED_ONCE: ConfirmationOutcome
CONFIRMATION_OUTCOME_PROCEED_ALWAYS: ConfirmationOutcome
CONFIRMATION_OUTCOME_PROCEED_ALWAYS_TOOL: ConfirmationOutcome
CONFIRMATION_OUTCOME_PROCEED_ALWAYS_SERVER: ConfirmationOutcome
CONFIRMATION_OUTCOME_MODIFY_WITH_EDITOR: ConfirmationOutcome
CONFIRMATION_OUTCOME_CANCEL: ConfirmationOutcome
TOOL_KIND_UNSPECIFIED: ToolKind
TOOL_KIND_READ: ToolKind
TOOL_KIND_EDIT: ToolKind
TOOL_KIND_DELETE: ToolKind
TOOL_KIND_MOVE: ToolKind
TOOL_KIND_SEARCH: ToolKind
TOOL_KIND_EXECUTE: ToolKind
TOOL_KIND_THINK: ToolKind
TOOL_KIND_FETCH: ToolKind
TOOL_KIND_OTHER: ToolKind
MCP_SERVER_STATE_UNSPECIFIED: McpServerState
MCP_SERVER_STATE_STARTING: McpServerState
MCP_SERVER_STATE_READY: McpServerState
MCP_SERVER_STATE_FAILED: McpServerState
SANDBOX_LEVEL_UNSPECIFIED: SandboxLevel
SANDBOX_LEVEL_READ_ONLY: SandboxLevel
SANDBOX_LEVEL_WORKSPACE_WRITE: SandboxLevel
SANDBOX_LEVEL_WORKSPACE_WRITE_NETWORK: SandboxLevel
SANDBOX_LEVEL_NONE: SandboxLevel

class FunctionCall(_message.Message):
    __slots__ = ("id", "name", "args", "wait_for_previous", "client_initiated")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_INITIATED_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    args: _struct_pb2.Struct
    wait_for_previous: bool
    client_initiated: bool
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., wait_for_previous: _Optional[bool] = ..., client_initiated: _Optional[bool] = ...) -> None: ...

class ScheduleCallsRequest(_message.Message):
    __slots__ = ("session_id", "calls", "approval_mode", "interactive", "sandbox_level", "request_id", "disconnect_grace_secs", "workspace")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_MODE_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_LEVEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_GRACE_SECS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    calls: _containers.RepeatedCompositeFieldContainer[FunctionCall]
    approval_mode: ApprovalMode
    interactive: bool
    sandbox_level: SandboxLevel
    request_id: str
    disconnect_grace_secs: int
    workspace: str
    def __init__(self, session_id: _Optional[str] = ..., calls: _Optional[_Iterable[_Union[FunctionCall, _Mapping]]] = ..., approval_mode: _Optional[_Union[ApprovalMode, str]] = ..., interactive: _Optional[bool] = ..., sandbox_level: _Optional[_Union[SandboxLevel, str]] = ..., request_id: _Optional[str] = ..., disconnect_grace_secs: _Optional[int] = ..., workspace: _Optional[str] = ...) -> None: ...

class WatchBatchRequest(_message.Message):
    __slots__ = ("session_id", "batch_id", "after_sequence")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    batch_id: str
    after_sequence: int
    def __init__(self, session_id: _Optional[str] = ..., batch_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class ScheduleCallsResponse(_message.Message):
    __slots__ = ("sequence", "time", "batch_accepted", "batch_started", "call_update", "batch_completed")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    BATCH_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    BATCH_STARTED_FIELD_NUMBER: _ClassVar[int]
    CALL_UPDATE_FIELD_NUMBER: _ClassVar[int]
    BATCH_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    time: _timestamp_pb2.Timestamp
    batch_accepted: BatchAccepted
    batch_started: BatchStarted
    call_update: ToolCallUpdate
    batch_completed: BatchCompleted
    def __init__(self, sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., batch_accepted: _Optional[_Union[BatchAccepted, _Mapping]] = ..., batch_started: _Optional[_Union[BatchStarted, _Mapping]] = ..., call_update: _Optional[_Union[ToolCallUpdate, _Mapping]] = ..., batch_completed: _Optional[_Union[BatchCompleted, _Mapping]] = ...) -> None: ...

class BatchAccepted(_message.Message):
    __slots__ = ("batch_id", "queued", "batches_ahead", "replayed")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_AHEAD_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    queued: bool
    batches_ahead: int
    replayed: bool
    def __init__(self, batch_id: _Optional[str] = ..., queued: _Optional[bool] = ..., batches_ahead: _Optional[int] = ..., replayed: _Optional[bool] = ...) -> None: ...

class BatchStarted(_message.Message):
    __slots__ = ("batch_id",)
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    def __init__(self, batch_id: _Optional[str] = ...) -> None: ...

class ToolCallUpdate(_message.Message):
    __slots__ = ("call_id", "tool_name", "validating", "scheduled", "awaiting_approval", "executing", "success", "error", "cancelled")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    VALIDATING_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    AWAITING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    EXECUTING_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool_name: str
    validating: Validating
    scheduled: Scheduled
    awaiting_approval: AwaitingApproval
    executing: Executing
    success: Success
    error: Error
    cancelled: Cancelled
    def __init__(self, call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., validating: _Optional[_Union[Validating, _Mapping]] = ..., scheduled: _Optional[_Union[Scheduled, _Mapping]] = ..., awaiting_approval: _Optional[_Union[AwaitingApproval, _Mapping]] = ..., executing: _Optional[_Union[Executing, _Mapping]] = ..., success: _Optional[_Union[Success, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., cancelled: _Optional[_Union[Cancelled, _Mapping]] = ...) -> None: ...

class Validating(_message.Message):
    __slots__ = ("args",)
    ARGS_FIELD_NUMBER: _ClassVar[int]
    args: _struct_pb2.Struct
    def __init__(self, args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Scheduled(_message.Message):
    __slots__ = ("args",)
    ARGS_FIELD_NUMBER: _ClassVar[int]
    args: _struct_pb2.Struct
    def __init__(self, args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class AwaitingApproval(_message.Message):
    __slots__ = ("correlation_id", "edit", "exec", "mcp", "info", "outcomes", "deadline", "reason", "policy_rule")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    EDIT_FIELD_NUMBER: _ClassVar[int]
    EXEC_FIELD_NUMBER: _ClassVar[int]
    MCP_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    POLICY_RULE_FIELD_NUMBER: _ClassVar[int]
    correlation_id: str
    edit: EditConfirmation
    exec: ExecConfirmation
    mcp: McpConfirmation
    info: InfoConfirmation
    outcomes: _containers.RepeatedScalarFieldContainer[ConfirmationOutcome]
    deadline: _timestamp_pb2.Timestamp
    reason: str
    policy_rule: PolicyRuleRef
    def __init__(self, correlation_id: _Optional[str] = ..., edit: _Optional[_Union[EditConfirmation, _Mapping]] = ..., exec: _Optional[_Union[ExecConfirmation, _Mapping]] = ..., mcp: _Optional[_Union[McpConfirmation, _Mapping]] = ..., info: _Optional[_Union[InfoConfirmation, _Mapping]] = ..., outcomes: _Optional[_Iterable[_Union[ConfirmationOutcome, str]]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., policy_rule: _Optional[_Union[PolicyRuleRef, _Mapping]] = ...) -> None: ...

class PolicyRuleRef(_message.Message):
    __slots__ = ("file", "line", "rule", "segment")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    rule: str
    segment: str
    def __init__(self, file: _Optional[str] = ..., line: _Optional[int] = ..., rule: _Optional[str] = ..., segment: _Optional[str] = ...) -> None: ...

class EditConfirmation(_message.Message):
    __slots__ = ("file_path", "diff", "is_new_file", "new_content")
    FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    IS_NEW_FILE_FIELD_NUMBER: _ClassVar[int]
    NEW_CONTENT_FIELD_NUMBER: _ClassVar[int]
    file_path: str
    diff: str
    is_new_file: bool
    new_content: str
    def __init__(self, file_path: _Optional[str] = ..., diff: _Optional[str] = ..., is_new_file: _Optional[bool] = ..., new_content: _Optional[str] = ...) -> None: ...

class ExecConfirmation(_message.Message):
    __slots__ = ("command", "root_commands", "dir_path", "write_targets")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ROOT_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    DIR_PATH_FIELD_NUMBER: _ClassVar[int]
    WRITE_TARGETS_FIELD_NUMBER: _ClassVar[int]
    command: str
    root_commands: _containers.RepeatedScalarFieldContainer[str]
    dir_path: str
    write_targets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, command: _Optional[str] = ..., root_commands: _Optional[_Iterable[str]] = ..., dir_path: _Optional[str] = ..., write_targets: _Optional[_Iterable[str]] = ...) -> None: ...

class McpConfirmation(_message.Message):
    __slots__ = ("server_name", "tool_name", "args", "description")
    SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    server_name: str
    tool_name: str
    args: _struct_pb2.Struct
    description: str
    def __init__(self, server_name: _Optional[str] = ..., tool_name: _Optional[str] = ..., args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., description: _Optional[str] = ...) -> None: ...

class InfoConfirmation(_message.Message):
    __slots__ = ("prompt",)
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    def __init__(self, prompt: _Optional[str] = ...) -> None: ...

class Executing(_message.Message):
    __slots__ = ("pid", "output_chunk", "progress", "total", "percent", "message")
    PID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CHUNK_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    pid: int
    output_chunk: str
    progress: float
    total: float
    percent: float
    message: str
    def __init__(self, pid: _Optional[int] = ..., output_chunk: _Optional[str] = ..., progress: _Optional[float] = ..., total: _Optional[float] = ..., percent: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class Success(_message.Message):
    __slots__ = ("response", "result", "duration_ms", "exit_code")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    response: FunctionResponse
    result: _struct_pb2.Struct
    duration_ms: int
    exit_code: int
    def __init__(self, response: _Optional[_Union[FunctionResponse, _Mapping]] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., duration_ms: _Optional[int] = ..., exit_code: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("type", "message", "response")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    type: ErrorType
    message: str
    response: FunctionResponse
    def __init__(self, type: _Optional[_Union[ErrorType, str]] = ..., message: _Optional[str] = ..., response: _Optional[_Union[FunctionResponse, _Mapping]] = ...) -> None: ...

class Cancelled(_message.Message):
    __slots__ = ("reason", "response")
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    response: FunctionResponse
    def __init__(self, reason: _Optional[str] = ..., response: _Optional[_Union[FunctionResponse, _Mapping]] = ...) -> None: ...

class BatchCompleted(_message.Message):
    __slots__ = ("batch_id", "responses", "calls")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    responses: _containers.RepeatedCompositeFieldContainer[FunctionResponse]
    calls: _containers.RepeatedCompositeFieldContainer[CompletedCall]
    def __init__(self, batch_id: _Optional[str] = ..., responses: _Optional[_Iterable[_Union[FunctionResponse, _Mapping]]] = ..., calls: _Optional[_Iterable[_Union[CompletedCall, _Mapping]]] = ...) -> None: ...

class CompletedCall(_message.Message):
    __slots__ = ("call_id", "tool_name", "state", "error_type", "message", "duration_ms", "exit_code")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool_name: str
    state: FinalState
    error_type: ErrorType
    message: str
    duration_ms: int
    exit_code: int
    def __init__(self, call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., state: _Optional[_Union[FinalState, str]] = ..., error_type: _Optional[_Union[ErrorType, str]] = ..., message: _Optional[str] = ..., duration_ms: _Optional[int] = ..., exit_code: _Optional[int] = ...) -> None: ...

class FunctionResponse(_message.Message):
    __slots__ = ("id", "name", "response")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    response: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., response: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ConfirmRequest(_message.Message):
    __slots__ = ("session_id", "call_id", "correlation_id", "outcome", "new_content")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    NEW_CONTENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    call_id: str
    correlation_id: str
    outcome: ConfirmationOutcome
    new_content: str
    def __init__(self, session_id: _Optional[str] = ..., call_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., outcome: _Optional[_Union[ConfirmationOutcome, str]] = ..., new_content: _Optional[str] = ...) -> None: ...

class ConfirmResponse(_message.Message):
    __slots__ = ("already_applied",)
    ALREADY_APPLIED_FIELD_NUMBER: _ClassVar[int]
    already_applied: bool
    def __init__(self, already_applied: _Optional[bool] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("session_id", "batch_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    batch_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., batch_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("cancelled_calls", "cancelled_batches")
    CANCELLED_CALLS_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    cancelled_calls: int
    cancelled_batches: int
    def __init__(self, cancelled_calls: _Optional[int] = ..., cancelled_batches: _Optional[int] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[FunctionDeclaration]
    def __init__(self, tools: _Optional[_Iterable[_Union[FunctionDeclaration, _Mapping]]] = ...) -> None: ...

class FunctionDeclaration(_message.Message):
    __slots__ = ("name", "description", "parameters", "kind", "parallelizable", "read_only")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARALLELIZABLE_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: _struct_pb2.Struct
    kind: ToolKind
    parallelizable: bool
    read_only: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., kind: _Optional[_Union[ToolKind, str]] = ..., parallelizable: _Optional[bool] = ..., read_only: _Optional[bool] = ...) -> None: ...

class ListWorkspacesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkspacesResponse(_message.Message):
    __slots__ = ("workspaces", "truncated")
    WORKSPACES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    workspaces: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    def __init__(self, workspaces: _Optional[_Iterable[str]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session_id", "workspace", "approval_mode", "running_batch_id", "queued_batch_ids", "owner_replica")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_MODE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUED_BATCH_IDS_FIELD_NUMBER: _ClassVar[int]
    OWNER_REPLICA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    workspace: str
    approval_mode: ApprovalMode
    running_batch_id: str
    queued_batch_ids: _containers.RepeatedScalarFieldContainer[str]
    owner_replica: str
    def __init__(self, session_id: _Optional[str] = ..., workspace: _Optional[str] = ..., approval_mode: _Optional[_Union[ApprovalMode, str]] = ..., running_batch_id: _Optional[str] = ..., queued_batch_ids: _Optional[_Iterable[str]] = ..., owner_replica: _Optional[str] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("version", "sandbox", "mcp_servers", "workspaces", "replica_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACES_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    version: str
    sandbox: SandboxInfo
    mcp_servers: _containers.RepeatedCompositeFieldContainer[McpServerInfo]
    workspaces: WorkspacesInfo
    replica_id: str
    def __init__(self, version: _Optional[str] = ..., sandbox: _Optional[_Union[SandboxInfo, _Mapping]] = ..., mcp_servers: _Optional[_Iterable[_Union[McpServerInfo, _Mapping]]] = ..., workspaces: _Optional[_Union[WorkspacesInfo, _Mapping]] = ..., replica_id: _Optional[str] = ...) -> None: ...

class WorkspacesInfo(_message.Message):
    __slots__ = ("named", "create")
    NAMED_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    named: bool
    create: bool
    def __init__(self, named: _Optional[bool] = ..., create: _Optional[bool] = ...) -> None: ...

class McpServerInfo(_message.Message):
    __slots__ = ("name", "state", "tools", "restarts", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: McpServerState
    tools: int
    restarts: int
    reason: str
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[McpServerState, str]] = ..., tools: _Optional[int] = ..., restarts: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class SandboxInfo(_message.Message):
    __slots__ = ("level", "enforced", "landlock_abi", "seccomp", "user_namespaces", "process_limit", "missing", "gaps", "cpu_secs", "address_space_bytes", "file_size_bytes", "max_processes", "open_files")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    ENFORCED_FIELD_NUMBER: _ClassVar[int]
    LANDLOCK_ABI_FIELD_NUMBER: _ClassVar[int]
    SECCOMP_FIELD_NUMBER: _ClassVar[int]
    USER_NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    GAPS_FIELD_NUMBER: _ClassVar[int]
    CPU_SECS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_SPACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    OPEN_FILES_FIELD_NUMBER: _ClassVar[int]
    level: SandboxLevel
    enforced: bool
    landlock_abi: int
    seccomp: bool
    user_namespaces: bool
    process_limit: str
    missing: _containers.RepeatedScalarFieldContainer[str]
    gaps: _containers.RepeatedScalarFieldContainer[str]
    cpu_secs: int
    address_space_bytes: int
    file_size_bytes: int
    max_processes: int
    open_files: int
    def __init__(self, level: _Optional[_Union[SandboxLevel, str]] = ..., enforced: _Optional[bool] = ..., landlock_abi: _Optional[int] = ..., seccomp: _Optional[bool] = ..., user_namespaces: _Optional[bool] = ..., process_limit: _Optional[str] = ..., missing: _Optional[_Iterable[str]] = ..., gaps: _Optional[_Iterable[str]] = ..., cpu_secs: _Optional[int] = ..., address_space_bytes: _Optional[int] = ..., file_size_bytes: _Optional[int] = ..., max_processes: _Optional[int] = ..., open_files: _Optional[int] = ...) -> None: ...
