"""The asyncio client (grpc.aio) against the real server: the same events
and answers as the blocking one."""

from __future__ import annotations

import asyncio
import os

import pytest

import toolsched
from toolsched import Answer, AwaitingApproval, Call, Cancelled, Executing, FinalState, Success, ToolschedError
from toolsched.aio import AsyncClient


def kinds(events):
    return [type(e).__name__ for e in events]


def test_a_read_yields_the_typed_events(server, session):
    server.path("async.txt").write_text("from asyncio\n")

    async def main():
        async with AsyncClient(server.address) as client:
            batch = client.schedule(session, [Call("r", "read_file", {"file_path": "async.txt"})])
            events = [e async for e in batch]
            return batch, events

    batch, events = asyncio.run(main())
    assert kinds(events) == [
        "BatchAccepted",
        "BatchStarted",
        "Validating",
        "Scheduled",
        "Executing",
        "Success",
        "BatchCompleted",
    ]
    assert [e.sequence for e in events] == list(range(1, 8))
    assert isinstance(events[5], Success) and events[5].response.output == "from asyncio\n"
    assert events[-1] is batch.completed and batch.completed["r"].state is FinalState.SUCCESS


def test_prompts_answered_by_an_async_callback(server, session):
    seen: list[AwaitingApproval] = []

    async def policy(prompt: AwaitingApproval) -> Answer:
        seen.append(prompt)
        await asyncio.sleep(0)  # a real frontend would ask a person here
        return Answer.approve() if prompt.call_id == "ok" else Answer.reject()

    async def main():
        async with AsyncClient(server.address) as client:
            first = await client.run(
                session, [Call("ok", "write_file", {"file_path": "async_ok.txt", "content": "1\n"})], on_prompt=policy
            )
            second = await client.run(
                session, [Call("no", "write_file", {"file_path": "async_no.txt", "content": "2\n"})], on_prompt=policy
            )
            return first, second

    first, second = asyncio.run(main())
    assert [p.call_id for p in seen] == ["ok", "no"]
    assert first["ok"].state is FinalState.SUCCESS
    assert server.path("async_ok.txt").read_text() == "1\n"
    assert (second["no"].state, second["no"].message) == (FinalState.CANCELLED, "User denied execution.")
    assert not server.path("async_no.txt").exists()


def test_cancel_stops_a_running_command(server, session):
    async def main():
        async with AsyncClient(server.address) as client:
            batch = client.schedule(
                session, [Call("x", "run_shell_command", {"command": "sleep 60"})], approval_mode="yolo"
            )
            pid = None
            async for ev in batch:
                if isinstance(ev, Executing) and ev.pid is not None:
                    pid = ev.pid
                    break
            result = await client.cancel(session, reason="stop it")
            rest = [e async for e in batch]
            return pid, result, rest, batch.completed

    pid, result, rest, done = asyncio.run(main())
    assert pid is not None
    assert (result.cancelled_calls, result.cancelled_batches) == (1, 1)
    assert kinds(rest)[-2:] == ["Cancelled", "BatchCompleted"]
    assert isinstance(rest[-2], Cancelled) and rest[-2].reason == "stop it"
    assert (done["x"].state, done["x"].message) == (FinalState.CANCELLED, "stop it")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_errors_are_raised_with_their_status_code(server):
    async def main():
        async with AsyncClient(server.address) as client:
            await client.schedule("", [Call("a", "read_file", {"file_path": "x"})]).result()

    with pytest.raises(ToolschedError) as err:
        asyncio.run(main())
    assert err.value.code == "INVALID_ARGUMENT"


def test_dropping_the_stream_cancels_the_batch(server, session):
    async def main():
        async with AsyncClient(server.address) as client:
            async with client.schedule(
                session, [Call("x", "run_shell_command", {"command": "sleep 60"})], approval_mode="yolo"
            ) as batch:
                async for ev in batch:
                    if isinstance(ev, Executing) and ev.pid is not None:
                        pid = ev.pid
                        break
            # The next batch of the session starts only once the first has
            # ended: it completes, and the command is gone by then.
            done = await client.schedule(session, [Call("g", "glob", {"pattern": "*.txt"})]).result()
            return pid, done

    pid, done = asyncio.run(main())
    assert done["g"].state is FinalState.SUCCESS
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
