"""The blocking client (``toolsched.Client``); ``toolsched.aio`` has the same
API with ``async``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType

import grpc
import grpc.experimental

from . import _convert as conv
from . import types as t
from .v1 import toolsched_pb2 as pb
from .v1 import toolsched_pb2_grpc as pb_grpc

__all__ = ["Batch", "Client", "DEFAULT_ADDRESS", "channel_options"]

DEFAULT_ADDRESS = "127.0.0.1:50051"
"""Where ``toolsched serve`` listens by default."""


def channel_options(extra: Sequence[tuple[str, object]] = ()) -> list[tuple[str, object]]:
    """The channel options the clients use, then `extra`.

    Single-threaded unary-stream calls: a ``ScheduleCalls`` stream is read on
    the calling thread instead of being handed over from grpc's polling
    thread message by message, which is most of a short batch's client cost
    (see ``bench.py``).
    """
    return [(grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1), *extra]


class Batch(Iterator[t.Event]):
    """An open ``ScheduleCalls`` stream.

    Iterate it for the typed events, in order; the last one is
    ``BatchCompleted``, also kept in ``completed``. ``result()`` reads to the
    end and returns it. ``close()`` (or leaving a ``with`` block early) drops
    the stream, which cancels the batch on the server.
    """

    def __init__(self, call: grpc.Call, session: str) -> None:
        self._call = call
        self._it: Iterator[pb.ScheduleCallsResponse] = iter(call)
        self.session_id = session
        self.batch_id: str | None = None
        """Set by the first event (``BatchAccepted``)."""
        self.completed: t.BatchCompleted | None = None
        """Set by the last event."""

    def __iter__(self) -> Batch:
        return self

    def __next__(self) -> t.Event:
        if self.completed is not None:
            raise StopIteration
        try:
            msg = next(self._it)
        except StopIteration:
            raise t.ToolschedError("INTERNAL", "the stream ended without BatchCompleted") from None
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e
        ev = conv.event(msg, self.session_id)
        if isinstance(ev, t.BatchAccepted):
            self.batch_id = ev.batch_id
        elif isinstance(ev, t.BatchCompleted):
            self.completed = ev
        return ev

    def result(self) -> t.BatchCompleted:
        """Reads the remaining events; returns ``BatchCompleted``. (Prompts
        must be answered meanwhile, from another thread, or the batch waits
        for them: see ``Client.run`` for a loop that answers them.)"""
        for _ in self:
            pass
        assert self.completed is not None
        return self.completed

    def close(self) -> None:
        """Drops the stream; a batch not yet completed is cancelled."""
        self._call.cancel()

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.completed is None:
            self.close()


class Client:
    """A blocking client of one toolsched server.

    ``address`` is ``host:port`` (``http://`` or ``https://`` in front picks
    plain or TLS); ``token`` is sent as ``authorization: Bearer <token>``.
    Pass ``credentials`` for TLS with your own roots or a client certificate,
    or a ready ``channel``. Use it as a context manager, or ``close()`` it.
    Methods raise ``ToolschedError`` when the server refuses a request.
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, object]] = (),
        channel: grpc.Channel | None = None,
    ) -> None:
        if channel is None:
            host, tls = conv.target(address)
            opts = channel_options(options)
            if credentials is not None or tls:
                channel = grpc.secure_channel(host, credentials or grpc.ssl_channel_credentials(), options=opts)
            else:
                channel = grpc.insecure_channel(host, options=opts)
        self._channel = channel
        self._stub = pb_grpc.ToolSchedulerStub(channel)
        self._metadata = conv.metadata(token)

    # === batches ===

    def schedule(
        self,
        session: str,
        calls: Iterable[t.Call | Mapping[str, object]],
        *,
        approval_mode: t.ApprovalMode | str | None = None,
        interactive: bool | None = None,
        sandbox_level: t.SandboxLevel | str | None = None,
        workspace: str | None = None,
        timeout: float | None = None,
    ) -> Batch:
        """Sends one batch of function calls (``Call`` or ``{"id", "name",
        "args"}`` mappings, in the model's order) and returns its open
        stream. ``approval_mode`` and ``sandbox_level`` switch the session
        first; ``interactive=False`` makes a call that would ask end in
        ``Error(policy_violation)``; ``workspace`` names the session's
        workspace on a server with ``--workspaces-root`` (required on the
        session's first batch there); ``timeout`` (seconds) bounds the whole
        stream."""
        req = conv.schedule_request(session, calls, approval_mode, interactive, sandbox_level, workspace)
        call = self._stub.ScheduleCalls(req, metadata=self._metadata, timeout=timeout)
        return Batch(call, session)

    def run(
        self,
        session: str,
        calls: Iterable[t.Call | Mapping[str, object]],
        *,
        on_prompt: Callable[[t.AwaitingApproval], t.Answer] | None = None,
        on_event: Callable[[t.Event], None] | None = None,
        approval_mode: t.ApprovalMode | str | None = None,
        sandbox_level: t.SandboxLevel | str | None = None,
        workspace: str | None = None,
        timeout: float | None = None,
    ) -> t.BatchCompleted:
        """Runs a batch to completion: every event goes to ``on_event``,
        every prompt to ``on_prompt``, whose ``Answer`` is sent at once.
        Without ``on_prompt`` the batch is non-interactive (nobody can
        answer, so a call that would ask ends in ``Error``)."""
        with self.schedule(
            session,
            calls,
            approval_mode=approval_mode,
            interactive=None if on_prompt is not None else False,
            sandbox_level=sandbox_level,
            workspace=workspace,
            timeout=timeout,
        ) as batch:
            for ev in batch:
                if on_event is not None:
                    on_event(ev)
                if isinstance(ev, t.AwaitingApproval) and on_prompt is not None:
                    answer = on_prompt(ev)
                    self.confirm(ev, answer.outcome, answer.new_content)
            assert batch.completed is not None
            return batch.completed

    # === prompts ===

    def confirm(self, prompt: t.AwaitingApproval, outcome: t.Outcome | str, new_content: str | None = None) -> None:
        """Answers ``prompt`` with any offered outcome."""
        try:
            self._stub.Confirm(conv.confirm_request(prompt, outcome, new_content), metadata=self._metadata)
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e

    def approve(self, prompt: t.AwaitingApproval, *, always: bool = False) -> None:
        """Runs the call; ``always`` also allows the same for the rest of the
        session (shell by root command, file tools by path)."""
        self.confirm(prompt, t.Outcome.PROCEED_ALWAYS if always else t.Outcome.PROCEED_ONCE)

    def reject(self, prompt: t.AwaitingApproval) -> None:
        """Does not run it: the call ends Cancelled ("User denied
        execution.") and the calls queued behind it in the batch too."""
        self.confirm(prompt, t.Outcome.CANCEL)

    def modify(self, prompt: t.AwaitingApproval, new_content: str, *, reprompt: bool = False) -> None:
        """Replaces an edit's proposed content (write_file's content,
        replace's new_string) and runs it, or with ``reprompt`` shows the
        modified diff in a new prompt first."""
        outcome = t.Outcome.MODIFY_WITH_EDITOR if reprompt else t.Outcome.PROCEED_ONCE
        self.confirm(prompt, outcome, new_content)

    # === the rest ===

    def cancel(self, session: str, batch: str | None = None, *, reason: str = "") -> t.CancelResult:
        """Cancels the session's queued batches and non-terminal calls (or
        one batch's), stopping running tools."""
        try:
            r = self._stub.Cancel(conv.cancel_request(session, batch, reason), metadata=self._metadata)
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e
        return t.CancelResult(r.cancelled_calls, r.cancelled_batches)

    def list_tools(self) -> list[t.Tool]:
        """The function declarations for the model's request (see
        ``toolsched.adapters.declarations``)."""
        try:
            r = self._stub.ListTools(pb.ListToolsRequest(), metadata=self._metadata)
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e
        return [conv.tool(d) for d in r.tools]

    def server_info(self) -> pb.GetServerInfoResponse:
        """Version, sandbox, MCP servers and the replica id (``replica_id``, with
        a durable store), as the generated message."""
        try:
            return self._stub.GetServerInfo(pb.GetServerInfoRequest(), metadata=self._metadata)  # type: ignore[no-any-return]
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e

    def close(self) -> None:
        """Closes the channel (open streams end)."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
