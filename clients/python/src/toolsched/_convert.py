"""Generated messages <-> the typed values of ``toolsched.types``: the one
place that knows the wire shapes (used by the sync and the async client)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

import grpc

from . import types as t
from .v1 import toolsched_pb2 as pb
from .values import from_struct, to_struct

E = TypeVar("E", bound=enum.Enum)

_UTC = timezone.utc


def _enum_from_pb(cls: type[E], pb_enum: object, prefix: str, value: int, default: E | None) -> E | None:
    """`value` of the generated enum as a member of `cls` (by name, without
    `prefix`, in lower case); `default` for UNSPECIFIED or a value newer
    than this client."""
    try:
        name = pb_enum.Name(value)  # type: ignore[attr-defined]
    except ValueError:
        return default
    key = name[len(prefix) :].lower()
    try:
        return cls(key)
    except ValueError:
        return default


def _enum_to_pb(pb_enum: Any, prefix: str, member: enum.Enum | str) -> Any:
    """The generated enum value named `member` (``Any``: the generated
    stubs type each enum field by its own wrapper class)."""
    value = member.value if isinstance(member, enum.Enum) else member
    try:
        return pb_enum.Value(prefix + str(value).upper())
    except ValueError:
        raise ValueError(f"unknown {prefix.rstrip('_').lower()} {value!r}") from None


def _time(ts: object) -> datetime:
    # Timestamp.seconds/nanos, without the float rounding of ToDatetime's
    # microsecond path being an issue at this precision.
    return datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=_UTC)  # type: ignore[attr-defined]


# === requests ===


def call_to_pb(call: t.Call | Mapping[str, object]) -> pb.FunctionCall:
    if isinstance(call, t.Call):
        cid, name, args, wait = call.id, call.name, call.args, call.wait_for_previous
    else:
        cid = str(call["id"])
        name = str(call["name"])
        raw = call.get("args") or {}
        if not isinstance(raw, Mapping):
            raise TypeError(f"call {cid!r}: args must be a mapping, not {type(raw).__name__}")
        args = raw
        wait = bool(call.get("wait_for_previous", False))
    return pb.FunctionCall(id=cid, name=name, args=to_struct(args), wait_for_previous=wait)


def schedule_request(
    session: str,
    calls: Iterable[t.Call | Mapping[str, object]],
    approval_mode: t.ApprovalMode | str | None,
    interactive: bool | None,
    sandbox_level: t.SandboxLevel | str | None,
    workspace: str | None = None,
) -> pb.ScheduleCallsRequest:
    req = pb.ScheduleCallsRequest(session_id=session, calls=[call_to_pb(c) for c in calls])
    if approval_mode is not None:
        req.approval_mode = _enum_to_pb(pb.ApprovalMode, "APPROVAL_MODE_", approval_mode)
    if interactive is not None:
        req.interactive = interactive
    if sandbox_level is not None:
        req.sandbox_level = _enum_to_pb(pb.SandboxLevel, "SANDBOX_LEVEL_", sandbox_level)
    if workspace is not None:
        req.workspace = workspace
    return req


def confirm_request(
    prompt: t.AwaitingApproval, outcome: t.Outcome | str, new_content: str | None
) -> pb.ConfirmRequest:
    req = pb.ConfirmRequest(
        session_id=prompt.session_id,
        call_id=prompt.call_id,
        correlation_id=prompt.correlation_id,
        outcome=_enum_to_pb(pb.ConfirmationOutcome, "CONFIRMATION_OUTCOME_", outcome),
    )
    if new_content is not None:
        req.new_content = new_content
    return req


def cancel_request(session: str, batch: str | None, reason: str) -> pb.CancelRequest:
    req = pb.CancelRequest(session_id=session, reason=reason)
    if batch is not None:
        req.batch_id = batch
    return req


# === responses ===


def function_response(r: pb.FunctionResponse) -> t.FunctionResponse:
    return t.FunctionResponse(id=r.id, name=r.name, response=from_struct(r.response))


def _details(a: pb.AwaitingApproval) -> t.PromptDetails | None:
    kind = a.WhichOneof("details")
    if kind == "edit":
        e = a.edit
        return t.EditDetails(e.file_path, e.diff, e.is_new_file, e.new_content)
    if kind == "exec":
        x = a.exec
        return t.ExecDetails(x.command, tuple(x.root_commands), x.dir_path, tuple(x.write_targets))
    if kind == "mcp":
        m = a.mcp
        return t.McpDetails(m.server_name, m.tool_name, from_struct(m.args), m.description)
    if kind == "info":
        return t.InfoDetails(a.info.prompt)
    return None


def _outcome(v: int) -> t.Outcome | None:
    return _enum_from_pb(t.Outcome, pb.ConfirmationOutcome, "CONFIRMATION_OUTCOME_", v, None)


def error_type(v: int) -> t.ErrorType:
    got = _enum_from_pb(t.ErrorType, pb.ErrorType, "ERROR_TYPE_", v, t.ErrorType.UNSPECIFIED)
    assert got is not None
    return got


def _call_update(seq: int, time: datetime, u: pb.ToolCallUpdate, session: str) -> t.Event:
    base = (seq, time, u.call_id, u.tool_name)
    kind = u.WhichOneof("state")
    if kind == "validating":
        return t.Validating(*base, args=from_struct(u.validating.args))
    if kind == "scheduled":
        return t.Scheduled(*base)
    if kind == "awaiting_approval":
        a = u.awaiting_approval
        rule = a.policy_rule if a.HasField("policy_rule") else None
        outcomes = tuple(o for o in (_outcome(v) for v in a.outcomes) if o is not None)
        return t.AwaitingApproval(
            *base,
            session_id=session,
            correlation_id=a.correlation_id,
            details=_details(a),
            outcomes=outcomes,
            deadline=_time(a.deadline) if a.HasField("deadline") else None,
            reason=a.reason,
            policy_rule=t.PolicyRule(rule.file, rule.line, rule.rule, rule.segment) if rule else None,
        )
    if kind == "executing":
        x = u.executing
        return t.Executing(
            *base,
            pid=x.pid if x.HasField("pid") else None,
            output_chunk=x.output_chunk,
            progress=x.progress if x.HasField("progress") else None,
            total=x.total if x.HasField("total") else None,
            percent=x.percent if x.HasField("percent") else None,
            message=x.message,
        )
    if kind == "success":
        s = u.success
        return t.Success(
            *base,
            response=function_response(s.response),
            result=from_struct(s.result),
            duration_ms=s.duration_ms,
            exit_code=s.exit_code if s.HasField("exit_code") else None,
        )
    if kind == "error":
        e = u.error
        return t.Error(*base, error_type=error_type(e.type), message=e.message, response=function_response(e.response))
    if kind == "cancelled":
        c = u.cancelled
        return t.Cancelled(*base, reason=c.reason, response=function_response(c.response))
    raise t.ToolschedError("UNIMPLEMENTED", f"call update of {u.call_id!r} has no state this client knows")


_FINAL = {
    pb.FINAL_STATE_SUCCESS: t.FinalState.SUCCESS,
    pb.FINAL_STATE_ERROR: t.FinalState.ERROR,
    pb.FINAL_STATE_CANCELLED: t.FinalState.CANCELLED,
}


def _completed(seq: int, time: datetime, c: pb.BatchCompleted) -> t.BatchCompleted:
    if len(c.calls) != len(c.responses):
        raise t.ToolschedError(
            "UNIMPLEMENTED",
            f"BatchCompleted has {len(c.responses)} responses but {len(c.calls)} call states; "
            "the server predates BatchCompleted.calls",
        )
    calls = []
    for call, resp in zip(c.calls, c.responses):
        state = _FINAL.get(call.state)
        if state is None:
            raise t.ToolschedError("UNIMPLEMENTED", f"call {call.call_id!r} ended in an unknown state {call.state}")
        calls.append(
            t.CompletedCall(
                call_id=call.call_id,
                tool_name=call.tool_name,
                state=state,
                error_type=error_type(call.error_type) if state is t.FinalState.ERROR else None,
                message=call.message,
                duration_ms=call.duration_ms,
                exit_code=call.exit_code if call.HasField("exit_code") else None,
                response=function_response(resp),
            )
        )
    return t.BatchCompleted(seq, time, c.batch_id, tuple(calls))


def event(msg: pb.ScheduleCallsResponse, session: str) -> t.Event:
    """One stream message as a typed event."""
    seq = msg.sequence
    time = _time(msg.time)
    kind = msg.WhichOneof("event")
    if kind == "call_update":
        return _call_update(seq, time, msg.call_update, session)
    if kind == "batch_accepted":
        a = msg.batch_accepted
        return t.BatchAccepted(seq, time, a.batch_id, a.queued, a.batches_ahead)
    if kind == "batch_started":
        return t.BatchStarted(seq, time, msg.batch_started.batch_id)
    if kind == "batch_completed":
        return _completed(seq, time, msg.batch_completed)
    raise t.ToolschedError("UNIMPLEMENTED", f"stream message {seq} has no event this client knows")


def tool(d: pb.FunctionDeclaration) -> t.Tool:
    kind = _enum_from_pb(t.ToolKind, pb.ToolKind, "TOOL_KIND_", d.kind, t.ToolKind.UNSPECIFIED)
    assert kind is not None
    return t.Tool(d.name, d.description, from_struct(d.parameters), kind, d.parallelizable, d.read_only)


def rpc_error(e: grpc.RpcError) -> t.ToolschedError:
    """A grpc error as a ToolschedError (code name and server message)."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else None
    return t.ToolschedError(code.name if code is not None else "UNKNOWN", details or str(e))


def target(address: str) -> tuple[str, bool]:
    """(host:port, tls) from an address with or without an http(s) scheme."""
    if address.startswith("https://"):
        return address[len("https://") :].rstrip("/"), True
    if address.startswith("http://"):
        return address[len("http://") :].rstrip("/"), False
    return address, False


def metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """Per-RPC metadata: the bearer token, when there is one."""
    return (("authorization", f"Bearer {token}"),) if token else ()
