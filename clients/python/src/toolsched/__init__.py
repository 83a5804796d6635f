"""Python client of toolsched, the gRPC service that schedules, approves and
executes an LLM agent's tool calls.

    from toolsched import Client, Call, AwaitingApproval

    with Client("127.0.0.1:50051") as client:
        batch = client.schedule("my-session", [Call("c1", "read_file", {"file_path": "README.md"})])
        for event in batch:
            if isinstance(event, AwaitingApproval):
                client.approve(event)
        print(batch.completed.responses)

``toolsched.aio.AsyncClient`` is the same API for asyncio;
``toolsched.adapters`` converts declarations, tool calls and responses to and
from Gemini, OpenAI and Anthropic shapes.
"""

from . import adapters
from .client import DEFAULT_ADDRESS, Batch, Client
from .types import (
    Answer,
    ApprovalMode,
    AwaitingApproval,
    BatchAccepted,
    BatchCompleted,
    BatchStarted,
    Call,
    CallEvent,
    Cancelled,
    CancelResult,
    CompletedCall,
    EditDetails,
    Error,
    ErrorType,
    Event,
    ExecDetails,
    Executing,
    FinalState,
    FunctionResponse,
    InfoDetails,
    McpDetails,
    Outcome,
    PolicyRule,
    PromptDetails,
    SandboxLevel,
    Scheduled,
    Success,
    Tool,
    ToolKind,
    ToolschedError,
    Validating,
)
from .values import from_struct, to_struct

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADDRESS",
    "Answer",
    "ApprovalMode",
    "AwaitingApproval",
    "Batch",
    "BatchAccepted",
    "BatchCompleted",
    "BatchStarted",
    "Call",
    "CallEvent",
    "CancelResult",
    "Cancelled",
    "Client",
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
    "adapters",
    "from_struct",
    "to_struct",
]
