"""Sequential read_file calls per second through the toolsched Python client.

Each call is one batch of one read_file, sent after the previous one's
BatchCompleted (what an agent loop does with a model's single tool call).
Measured in one run, against one server, on the same file:

- ``raw grpcio``: the generated stub with a default channel, iterating the
  stream (what a frontend writes without this library);
- ``Client (sync)``: ``Client.schedule(...).result()``, typed events;
- ``Client, threaded stream``: the same without the single-threaded
  unary-stream channel option, to show what the option buys;
- ``AsyncClient``: ``await AsyncClient.schedule(...).result()`` on grpc.aio;
- ``MCP Python SDK`` (with ``--mcp``): ``ClientSession.call_tool("read_text_file")``
  against ``@modelcontextprotocol/server-filesystem`` over stdio.

Client CPU per call is this process's CPU time (all its threads) divided by
the calls. Start a server, or let the script start one (``--binary``):

    python clients/python/bench.py --binary target/release/toolsched [--mcp] [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

import toolsched
from toolsched import Call
from toolsched.aio import AsyncClient
from toolsched.v1 import toolsched_pb2 as pb
from toolsched.v1 import toolsched_pb2_grpc as pb_grpc

FILE_NAME = "bench.txt"
FILE_TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(64))  # ~3.5 KiB


def start_server(binary: str, workspace: Path) -> tuple[subprocess.Popen[str], str]:
    """Starts the server on a free port; returns it and its address, read
    from its "toolsched serving" log line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSCHED_")}
    env["RUST_LOG"] = "warn,toolsched=info"
    proc = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", "--workspace", str(workspace), "--log-format", "json"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        try:
            fields = json.loads(line)  # --log-format json: fields at the top level
        except json.JSONDecodeError:
            continue
        if fields.get("message") == "toolsched serving":
            # Keep draining its log so that it never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
            return proc, fields["listen"]
    raise SystemExit(f"the server exited ({proc.wait()}) before serving")


def measure(name: str, calls: int, warmup: int, one: Callable[[int], None]) -> dict[str, float | str]:
    for i in range(warmup):
        one(i)
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(calls):
        one(i)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"name": name, "calls_per_s": calls / wall, "client_cpu_ms_per_call": 1000 * cpu / calls}


def measure_async(name: str, calls: int, warmup: int, make: Callable[[], Awaitable[Callable[[int], Awaitable[None]]]]) -> dict[str, float | str]:
    async def run() -> dict[str, float | str]:
        one = await make()
        for i in range(warmup):
            await one(i)
        cpu0, t0 = time.process_time(), time.perf_counter()
        for i in range(calls):
            await one(i)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        return {"name": name, "calls_per_s": calls / wall, "client_cpu_ms_per_call": 1000 * cpu / calls}

    return asyncio.run(run())


def check_read(output: object) -> None:
    if output != FILE_TEXT:
        raise SystemExit(f"read_file returned something else: {str(output)[:80]!r}")


def bench_raw(address: str, calls: int, warmup: int) -> dict[str, float | str]:
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.ToolSchedulerStub(channel)
    args = toolsched.to_struct({"file_path": FILE_NAME})

    def one(i: int) -> None:
        req = pb.ScheduleCallsRequest(session_id="bench-raw", calls=[pb.FunctionCall(id=f"c{i}", name="read_file", args=args)])
        last = None
        for msg in stub.ScheduleCalls(req):
            last = msg
        assert last is not None and last.WhichOneof("event") == "batch_completed"

    try:
        return measure("raw grpcio (default channel)", calls, warmup, one)
    finally:
        channel.close()


def bench_sync(address: str, calls: int, warmup: int, *, threaded: bool) -> dict[str, float | str]:
    channel = grpc.insecure_channel(address) if threaded else None
    client = toolsched.Client(address, channel=channel)
    session = "bench-sync-threaded" if threaded else "bench-sync"

    def one(i: int) -> None:
        done = client.schedule(session, [Call(f"c{i}", "read_file", {"file_path": FILE_NAME})]).result()
        if i == 0:
            check_read(done.calls[0].response.output)

    try:
        name = "Client (sync), threaded stream" if threaded else "Client (sync)"
        return measure(name, calls, warmup, one)
    finally:
        client.close()


def bench_async(address: str, calls: int, warmup: int) -> dict[str, float | str]:
    holder: list[AsyncClient] = []

    async def make() -> Callable[[int], Awaitable[None]]:
        client = AsyncClient(address)
        holder.append(client)

        async def one(i: int) -> None:
            done = await client.schedule("bench-async", [Call(f"c{i}", "read_file", {"file_path": FILE_NAME})]).result()
            if i == 0:
                check_read(done.calls[0].response.output)

        return one

    return measure_async("AsyncClient (grpc.aio)", calls, warmup, make)


def bench_mcp(workspace: Path, server_cmd: list[str], calls: int, warmup: int) -> dict[str, float | str]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    path = str(workspace / FILE_NAME)
    result: dict[str, float | str] = {}

    async def run() -> None:
        params = StdioServerParameters(command=server_cmd[0], args=[*server_cmd[1:], str(workspace)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

            async def one(i: int) -> None:
                r = await session.call_tool("read_text_file", {"path": path})
                if i == 0 and (r.isError or r.content[0].text != FILE_TEXT):  # type: ignore[union-attr]
                    raise SystemExit(f"read_text_file returned something else: {r}")

            for i in range(warmup):
                await one(i)
            cpu0, t0 = time.process_time(), time.perf_counter()
            for i in range(calls):
                await one(i)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            result.update(
                name="MCP Python SDK + server-filesystem",
                calls_per_s=calls / wall,
                client_cpu_ms_per_call=1000 * cpu / calls,
            )

    asyncio.run(run())
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", help="a running server (its workspace must hold bench.txt: see --workspace)")
    ap.add_argument("--binary", help="start this toolsched binary instead")
    ap.add_argument("--workspace", type=Path, help="the server's workspace (default: a temporary one)")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every client in turn; the median is shown")
    ap.add_argument("--mcp", action="store_true", help="also measure the MCP Python SDK against server-filesystem")
    ap.add_argument(
        "--mcp-server",
        default=None,
        help="command of @modelcontextprotocol/server-filesystem (default: node_modules/.bin/mcp-server-filesystem "
        "found upwards from here, else `npx -y @modelcontextprotocol/server-filesystem`)",
    )
    args = ap.parse_args()

    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="toolsched-bench-"))
    (workspace / FILE_NAME).write_text(FILE_TEXT)
    proc = None
    address = args.address
    if address is None:
        if not args.binary:
            raise SystemExit("pass --address of a running server or --binary to start one")
        proc, address = start_server(args.binary, workspace)
    mcp_cmd: list[str] | None = None
    if args.mcp:
        mcp_cmd = args.mcp_server.split() if args.mcp_server else None
        if mcp_cmd is None:
            for d in [Path(__file__).resolve().parent, *Path(__file__).resolve().parents]:
                exe = d / "node_modules" / ".bin" / "mcp-server-filesystem"
                if exe.exists():
                    mcp_cmd = [str(exe)]
                    break
        if mcp_cmd is None:
            mcp_cmd = [shutil.which("npx") or "npx", "-y", "@modelcontextprotocol/server-filesystem"]
    runs: dict[str, list[dict[str, float | str]]] = {}
    try:
        # Every client in turn, round after round: a noisy machine slows
        # them alike instead of whichever happened to run during a spike.
        for _ in range(args.rounds):
            round_rows = [
                bench_raw(address, args.calls, args.warmup),
                bench_sync(address, args.calls, args.warmup, threaded=False),
                bench_sync(address, args.calls, args.warmup, threaded=True),
                bench_async(address, args.calls, args.warmup),
            ]
            if mcp_cmd is not None:
                round_rows.append(bench_mcp(workspace, mcp_cmd, args.calls, args.warmup))
            for r in round_rows:
                runs.setdefault(str(r["name"]), []).append(r)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    rows = [
        {
            "name": name,
            "calls_per_s": statistics.median(float(r["calls_per_s"]) for r in rs),
            "client_cpu_ms_per_call": statistics.median(float(r["client_cpu_ms_per_call"]) for r in rs),
            "all": " ".join(f"{float(r['calls_per_s']):.0f}" for r in rs),
        }
        for name, rs in runs.items()
    ]
    print(
        f"{args.calls} sequential read_file calls of a {len(FILE_TEXT)}-byte file per client and round, "
        f"after {args.warmup} warm-up calls; median of {args.rounds} rounds"
    )
    print(f"{'client':40} {'calls/s':>9} {'client CPU ms/call':>19}  calls/s by round")
    for r in rows:
        print(f"{r['name']:40} {r['calls_per_s']:9.0f} {r['client_cpu_ms_per_call']:19.3f}  {r['all']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
