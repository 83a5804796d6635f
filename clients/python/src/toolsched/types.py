"""Typed events and values of the toolsched API.

Every message of a ``ScheduleCalls`` stream becomes one frozen dataclass:
``BatchAccepted``, ``BatchStarted``, one class per call state (``Validating``,
``Scheduled``, ``AwaitingApproval``, ``Executing``, ``Success``, ``Error``,
``Cancelled``) and ``BatchCompleted``. Tell them apart with ``isinstance`` or
``match``; each carries only its own state's data, as the server's state
machine does. Enumerations are ``str`` enums whose values are the stable
snake-case names (``ErrorType.FILE_NOT_FOUND == "file_not_found"``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Union

from .values import JSON, JSONObject

__all__ = [
    "Answer",
    "ApprovalMode",
    "AwaitingApproval",
    "BatchAccepted",
    "BatchCompleted",
    "BatchStarted",
    "Call",
    "CallEvent",
    "CancelResult",
    "Cancelled",
    "CompletedCall",
    "EditDetails",
    "Error",
    "ErrorType",
    "Event",
    "ExecDetails",
    "Executing",
    "FinalState",
    "FunctionResponse",
    "InfoDetails",
    "McpDetails",
    "Outcome",
    "PolicyRule",
    "PromptDetails",
    "SandboxLevel",
    "Scheduled",
    "Success",
    "Tool",
    "ToolKind",
    "ToolschedError",
    "Validating",
]


class ApprovalMode(str, enum.Enum):
    """How much runs without asking a person (the proto's ``ApprovalMode``)."""

    DEFAULT = "default"
    AUTO_EDIT = "auto_edit"
    YOLO = "yolo"
    PLAN = "plan"


class SandboxLevel(str, enum.Enum):
    """What commands may do (the proto's ``SandboxLevel``)."""

    READ_ONLY = "read_only"
    WORKSPACE_WRITE = "workspace_write"
    WORKSPACE_WRITE_NETWORK = "workspace_write_network"
    NONE = "none"


class Outcome(str, enum.Enum):
    """An answer to an approval prompt (the proto's ``ConfirmationOutcome``)."""

    PROCEED_ONCE = "proceed_once"
    PROCEED_ALWAYS = "proceed_always"
    PROCEED_ALWAYS_TOOL = "proceed_always_tool"
    PROCEED_ALWAYS_SERVER = "proceed_always_server"
    MODIFY_WITH_EDITOR = "modify_with_editor"
    CANCEL = "cancel"


class ErrorType(str, enum.Enum):
    """Stable error types of a failed call (the proto's ``ErrorType``)."""

    UNSPECIFIED = "unspecified"
    TOOL_NOT_REGISTERED = "tool_not_registered"
    INVALID_TOOL_PARAMS = "invalid_tool_params"
    POLICY_VIOLATION = "policy_violation"
    FILE_NOT_FOUND = "file_not_found"
    TARGET_IS_DIRECTORY = "target_is_directory"
    PATH_NOT_IN_WORKSPACE = "path_not_in_workspace"
    FILE_TOO_LARGE = "file_too_large"
    PERMISSION_DENIED = "permission_denied"
    NO_SPACE_LEFT = "no_space_left"
    EDIT_NO_OCCURRENCE_FOUND = "edit_no_occurrence_found"
    EDIT_EXPECTED_OCCURRENCE_MISMATCH = "edit_expected_occurrence_mismatch"
    EDIT_NO_CHANGE = "edit_no_change"
    ATTEMPT_TO_CREATE_EXISTING_FILE = "attempt_to_create_existing_file"
    SEARCH_PATH_NOT_FOUND = "search_path_not_found"
    EXECUTION_TIMEOUT = "execution_timeout"
    SANDBOX_DENIED = "sandbox_denied"
    MCP_TOOL_ERROR = "mcp_tool_error"
    UNHANDLED_EXCEPTION = "unhandled_exception"
    PATH_IS_NOT_A_DIRECTORY = "path_is_not_a_directory"
    FILE_CHANGED_CONCURRENTLY = "file_changed_concurrently"
    OUTCOME_UNKNOWN = "outcome_unknown"


class FinalState(str, enum.Enum):
    """The terminal state a call ended in."""

    SUCCESS = "success"
    ERROR = "error"
    CANCELLED = "cancelled"


class ToolKind(str, enum.Enum):
    """What a tool does, by Gemini CLI's kinds."""

    UNSPECIFIED = "unspecified"
    READ = "read"
    EDIT = "edit"
    DELETE = "delete"
    MOVE = "move"
    SEARCH = "search"
    EXECUTE = "execute"
    THINK = "think"
    FETCH = "fetch"
    OTHER = "other"


class ToolschedError(Exception):
    """An RPC that the server refused or that failed on the way.

    ``code`` is the gRPC status code name (``"INVALID_ARGUMENT"``,
    ``"NOT_FOUND"``, ``"FAILED_PRECONDITION"``, ``"UNAVAILABLE"``, …) and
    ``message`` the server's message. Expected tool outcomes (a failed
    command, a missing file) are never raised: they are ``Error`` states.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Call:
    """One function call as the model returned it.

    ``id`` must be unique within the batch (use the model's call id so the
    responses map back to it); ``args`` is a JSON object.
    """

    id: str
    name: str
    args: Mapping[str, JSON] = field(default_factory=dict)
    wait_for_previous: bool = False


@dataclass(frozen=True, slots=True)
class FunctionResponse:
    """A function response in Gemini's shape: ``response`` is
    ``{"output": …}`` on success, ``{"error": "…"}`` on error and
    ``{"error": "[Operation Cancelled] …"}`` (with ``"output"`` when there was
    partial output) when cancelled."""

    id: str
    name: str
    response: JSONObject

    @property
    def output(self) -> JSON:
        """The ``output`` member (``None`` when absent)."""
        return self.response.get("output")

    @property
    def error(self) -> str | None:
        """The ``error`` member (``None`` on success)."""
        err = self.response.get("error")
        return err if isinstance(err, str) else None


@dataclass(frozen=True, slots=True)
class Tool:
    """A function declaration from ``ListTools``."""

    name: str
    description: str
    parameters: JSONObject
    """JSON Schema of the arguments (an object schema)."""
    kind: ToolKind
    parallelizable: bool
    read_only: bool


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What a ``cancel`` did."""

    cancelled_calls: int
    cancelled_batches: int


# === events ===


@dataclass(frozen=True, slots=True)
class BatchAccepted:
    """First event of every stream."""

    sequence: int
    time: datetime
    batch_id: str
    queued: bool
    """Another batch of the session runs or waits; this one starts later."""
    batches_ahead: int


@dataclass(frozen=True, slots=True)
class BatchStarted:
    """The batch left the session queue; its calls start."""

    sequence: int
    time: datetime
    batch_id: str


@dataclass(frozen=True, slots=True)
class CallEvent:
    """Base of the per-call state events."""

    sequence: int
    time: datetime
    call_id: str
    tool_name: str


@dataclass(frozen=True, slots=True)
class Validating(CallEvent):
    """Arguments passed the schema check; the policy decides."""

    args: JSONObject


@dataclass(frozen=True, slots=True)
class Scheduled(CallEvent):
    """Approved; waits for its wave to execute."""


@dataclass(frozen=True, slots=True)
class EditDetails:
    """A file edit: the prompt shows the diff."""

    file_path: str
    diff: str
    is_new_file: bool
    new_content: str
    """The proposed content, to edit and send back with ``modify``."""


@dataclass(frozen=True, slots=True)
class ExecDetails:
    """A shell command."""

    command: str
    root_commands: tuple[str, ...]
    dir_path: str
    write_targets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class McpDetails:
    """A tool of an MCP server."""

    server_name: str
    tool_name: str
    args: JSONObject
    description: str


@dataclass(frozen=True, slots=True)
class InfoDetails:
    """Anything else: a text to show."""

    prompt: str


PromptDetails = Union[EditDetails, ExecDetails, McpDetails, InfoDetails]


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """The policy rule that asked."""

    file: str
    line: int
    rule: str
    segment: str


@dataclass(frozen=True, slots=True)
class AwaitingApproval(CallEvent):
    """Waits for an answer: pass this event to ``approve``, ``reject`` or
    ``modify``. It knows its session, call and correlation id."""

    session_id: str
    correlation_id: str
    details: PromptDetails | None
    outcomes: tuple[Outcome, ...]
    """The answers the server accepts for this prompt."""
    deadline: datetime | None
    reason: str
    policy_rule: PolicyRule | None


@dataclass(frozen=True, slots=True)
class Executing(CallEvent):
    """Running; sent on entry and for every progress update."""

    pid: int | None
    output_chunk: str
    progress: float | None
    total: float | None
    percent: float | None
    message: str


@dataclass(frozen=True, slots=True)
class Success(CallEvent):
    """Terminal: the tool ran (a non-zero exit is a Success with its
    ``exit_code``)."""

    response: FunctionResponse
    result: JSONObject
    """Tool-specific structured result."""
    duration_ms: int
    exit_code: int | None
    """``run_shell_command``'s exit code; ``None`` for other tools or a
    command ended by a signal."""


@dataclass(frozen=True, slots=True)
class Error(CallEvent):
    """Terminal: the call failed."""

    error_type: ErrorType
    message: str
    response: FunctionResponse


@dataclass(frozen=True, slots=True)
class Cancelled(CallEvent):
    """Terminal: cancelled (by ``cancel``, a rejection, a confirmation
    timeout, the client going away or server shutdown)."""

    reason: str
    response: FunctionResponse


@dataclass(frozen=True, slots=True)
class CompletedCall:
    """One call of a completed batch: its final state and function
    response."""

    call_id: str
    tool_name: str
    state: FinalState
    error_type: ErrorType | None
    """Set for ``FinalState.ERROR`` only."""
    message: str
    """The error message or the cancellation reason; empty on success."""
    duration_ms: int
    """Execution wall time; 0 when the call never started executing."""
    exit_code: int | None
    response: FunctionResponse

    @property
    def ok(self) -> bool:
        """Whether the call ended in ``SUCCESS``."""
        return self.state is FinalState.SUCCESS


@dataclass(frozen=True, slots=True)
class BatchCompleted:
    """Last event of every stream: every call, in request order."""

    sequence: int
    time: datetime
    batch_id: str
    calls: tuple[CompletedCall, ...]

    @property
    def responses(self) -> list[FunctionResponse]:
        """The function responses in request order, to send to the model
        (see ``toolsched.adapters.responses`` for other providers)."""
        return [c.response for c in self.calls]

    def __getitem__(self, call_id: str) -> CompletedCall:
        """The call with this id."""
        for c in self.calls:
            if c.call_id == call_id:
                return c
        raise KeyError(call_id)


Event = Union[
    BatchAccepted,
    BatchStarted,
    Validating,
    Scheduled,
    AwaitingApproval,
    Executing,
    Success,
    Error,
    Cancelled,
    BatchCompleted,
]
"""Any event of a ``ScheduleCalls`` stream."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a prompt callback (``Client.run``'s ``on_prompt``) decides."""

    outcome: Outcome
    new_content: str | None = None

    @classmethod
    def approve(cls, *, always: bool = False) -> Answer:
        """Run the call (``always``: and allow the same for the session)."""
        return cls(Outcome.PROCEED_ALWAYS if always else Outcome.PROCEED_ONCE)

    @classmethod
    def reject(cls) -> Answer:
        """Do not run it: it ends Cancelled, "User denied execution."."""
        return cls(Outcome.CANCEL)

    @classmethod
    def modify(cls, new_content: str) -> Answer:
        """Run it with this content instead of the proposed one."""
        return cls(Outcome.PROCEED_ONCE, new_content)
