"""The asyncio client (``toolsched.aio.AsyncClient``, on ``grpc.aio``): the
same methods as ``toolsched.Client``, as coroutines, and batches as async
iterators."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Union

import grpc
import grpc.aio

from . import _convert as conv
from . import types as t
from .client import DEFAULT_ADDRESS
from .v1 import toolsched_pb2 as pb
from .v1 import toolsched_pb2_grpc as pb_grpc

__all__ = ["AsyncBatch", "AsyncClient"]

PromptCallback = Callable[[t.AwaitingApproval], Union[t.Answer, Awaitable[t.Answer]]]


class AsyncBatch(AsyncIterator[t.Event]):
    """An open ``ScheduleCalls`` stream: ``async for`` its typed events;
    ``await result()`` reads to ``BatchCompleted``; ``cancel()`` (or leaving
    an ``async with`` block early, or cancelling the task reading it) drops
    the stream, which cancels the batch on the server."""

    def __init__(self, call: grpc.aio.UnaryStreamCall, session: str) -> None:
        self._call = call
        self.session_id = session
        self.batch_id: str | None = None
        self.completed: t.BatchCompleted | None = None

    def __aiter__(self) -> AsyncBatch:
        return self

    async def __anext__(self) -> t.Event:
        if self.completed is not None:
            raise StopAsyncIteration
        try:
            msg = await self._call.read()
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e
        if msg is grpc.aio.EOF:
            raise t.ToolschedError("INTERNAL", "the stream ended without BatchCompleted")
        ev = conv.event(msg, self.session_id)
        if isinstance(ev, t.BatchAccepted):
            self.batch_id = ev.batch_id
        elif isinstance(ev, t.BatchCompleted):
            self.completed = ev
        return ev

    async def result(self) -> t.BatchCompleted:
        """Reads the remaining events; returns ``BatchCompleted``."""
        async for _ in self:
            pass
        assert self.completed is not None
        return self.completed

    def cancel(self) -> None:
        """Drops the stream; a batch not yet completed is cancelled."""
        self._call.cancel()

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.completed is None:
            self.cancel()


class AsyncClient:
    """An asyncio client of one toolsched server; see ``toolsched.Client``
    for the arguments. Create it inside a running event loop;
    ``await close()`` or use ``async with``."""

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, object]] = (),
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        if channel is None:
            host, tls = conv.target(address)
            if credentials is not None or tls:
                channel = grpc.aio.secure_channel(
                    host, credentials or grpc.ssl_channel_credentials(), options=list(options)
                )
            else:
                channel = grpc.aio.insecure_channel(host, options=list(options))
        self._channel = channel
        self._stub = pb_grpc.ToolSchedulerStub(channel)
        self._metadata = conv.metadata(token)

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
    ) -> AsyncBatch:
        """Sends one batch; returns its open stream (see ``Client.schedule``)."""
        req = conv.schedule_request(session, calls, approval_mode, interactive, sandbox_level, workspace)
        call = self._stub.ScheduleCalls(req, metadata=self._metadata, timeout=timeout)
        return AsyncBatch(call, session)

    async def run(
        self,
        session: str,
        calls: Iterable[t.Call | Mapping[str, object]],
        *,
        on_prompt: PromptCallback | None = None,
        on_event: Callable[[t.Event], object] | None = None,
        approval_mode: t.ApprovalMode | str | None = None,
        sandbox_level: t.SandboxLevel | str | None = None,
        workspace: str | None = None,
        timeout: float | None = None,
    ) -> t.BatchCompleted:
        """Runs a batch to completion (see ``Client.run``); ``on_prompt``
        and ``on_event`` may be coroutine functions."""
        async with self.schedule(
            session,
            calls,
            approval_mode=approval_mode,
            interactive=None if on_prompt is not None else False,
            sandbox_level=sandbox_level,
            workspace=workspace,
            timeout=timeout,
        ) as batch:
            async for ev in batch:
                if on_event is not None:
                    r = on_event(ev)
                    if inspect.isawaitable(r):
                        await r
                if isinstance(ev, t.AwaitingApproval) and on_prompt is not None:
                    answer = on_prompt(ev)
                    if inspect.isawaitable(answer):
                        answer = await answer
                    await self.confirm(ev, answer.outcome, answer.new_content)
            assert batch.completed is not None
            return batch.completed

    async def confirm(
        self, prompt: t.AwaitingApproval, outcome: t.Outcome | str, new_content: str | None = None
    ) -> None:
        """Answers ``prompt`` with any offered outcome."""
        try:
            await self._stub.Confirm(conv.confirm_request(prompt, outcome, new_content), metadata=self._metadata)
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e

    async def approve(self, prompt: t.AwaitingApproval, *, always: bool = False) -> None:
        """See ``Client.approve``."""
        await self.confirm(prompt, t.Outcome.PROCEED_ALWAYS if always else t.Outcome.PROCEED_ONCE)

    async def reject(self, prompt: t.AwaitingApproval) -> None:
        """See ``Client.reject``."""
        await self.confirm(prompt, t.Outcome.CANCEL)

    async def modify(self, prompt: t.AwaitingApproval, new_content: str, *, reprompt: bool = False) -> None:
        """See ``Client.modify``."""
        await self.confirm(prompt, t.Outcome.MODIFY_WITH_EDITOR if reprompt else t.Outcome.PROCEED_ONCE, new_content)

    async def cancel(self, session: str, batch: str | None = None, *, reason: str = "") -> t.CancelResult:
        """See ``Client.cancel``."""
        try:
            r = await self._stub.Cancel(conv.cancel_request(session, batch, reason), metadata=self._metadata)
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e
        return t.CancelResult(r.cancelled_calls, r.cancelled_batches)

    async def list_tools(self) -> list[t.Tool]:
        """See ``Client.list_tools``."""
        try:
            r = await self._stub.ListTools(pb.ListToolsRequest(), metadata=self._metadata)
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e
        return [conv.tool(d) for d in r.tools]

    async def server_info(self) -> pb.GetServerInfoResponse:
        """See ``Client.server_info``."""
        try:
            return await self._stub.GetServerInfo(pb.GetServerInfoRequest(), metadata=self._metadata)  # type: ignore[no-any-return]
        except grpc.RpcError as e:
            raise conv.rpc_error(e) from e

    async def close(self) -> None:
        """Closes the channel."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
