"""A small MCP server (stdio) for toolsched's integration tests, built on
PyPI's `mcp` package (FastMCP).

Tools:
- whoami: the server's pid (read-only; tells whether a restart happened)
- wait: sleeps `seconds` (read-only, so parallelizable: the benchmark's
  "calls that wait")
- progress_steps: progress notifications with messages; later ones leave
  out fields so the client must keep their earlier values
- slow_with_progress: runs for `seconds`, reporting progress every
  `interval` seconds (outlives a short inactivity timeout)
- flood_progress: sends `count` progress notifications as fast as it can
  (the backpressure test)
- silent: sleeps without progress (hits the inactivity timeout)
- block_until_cancelled: blocks until the client cancels the request, then
  writes "cancelled" to `marker` (proof it saw notifications/cancelled)
- exit_mid_call: writes to stderr and exits the process with `code`
- fail: returns an isError result with the given text
- add_tool: registers tool `late_tool` and sends tools/list_changed
- progress_totals: progress whose later totals are 0, absent or negative
- big_result: returns `size` bytes of text (an oversized result)
"""

import asyncio
import os
import sys

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations

mcp = FastMCP("toolsched-py-test")
READ_ONLY = ToolAnnotations(readOnlyHint=True)


@mcp.tool(annotations=READ_ONLY)
def whoami() -> str:
    """The server's process id."""
    return str(os.getpid())


@mcp.tool(annotations=READ_ONLY)
async def wait(seconds: float) -> str:
    """Sleeps `seconds` seconds, then says so."""
    await asyncio.sleep(seconds)
    return f"waited {seconds} s"


@mcp.tool()
async def progress_steps(ctx: Context) -> str:
    """Reports four progress steps; later steps leave out total or message."""
    await ctx.report_progress(1, total=4, message="starting")
    await ctx.report_progress(2)
    await ctx.report_progress(3, message="almost there")
    await ctx.report_progress(4, total=4)
    return "steps done"


@mcp.tool()
async def slow_with_progress(seconds: float, interval: float, ctx: Context) -> str:
    """Runs for `seconds`, reporting progress every `interval` seconds."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    step = 0
    while loop.time() - start < seconds:
        step += 1
        await ctx.report_progress(step, message=f"tick {step}")
        await asyncio.sleep(interval)
    return f"slow done after {step} ticks"


@mcp.tool()
async def flood_progress(count: int, ctx: Context) -> str:
    """Sends `count` progress notifications as fast as it can."""
    for step in range(1, count + 1):
        await ctx.report_progress(step, total=count, message=f"flood {step}")
    return f"flooded {count}"


@mcp.tool()
async def silent(seconds: float, marker: str = "") -> str:
    """Sleeps without reporting progress; records a cancellation in `marker`."""
    try:
        await asyncio.sleep(seconds)
    except BaseException:
        if marker:
            with open(marker, "w") as f:
                f.write("cancelled")
        raise
    return "silent done"


@mcp.tool()
async def block_until_cancelled(marker: str, ctx: Context) -> str:
    """Blocks until cancelled; records the cancellation in `marker`."""
    await ctx.report_progress(0, message="blocking")
    try:
        await asyncio.Event().wait()
    except BaseException:
        # The SDK cancels this task when notifications/cancelled arrives.
        with open(marker, "w") as f:
            f.write("cancelled")
        raise
    return "unreachable"


@mcp.tool()
async def exit_mid_call(code: int, ctx: Context) -> str:
    """Writes to stderr and exits with `code` in the middle of the call."""
    await ctx.report_progress(0, message="about to exit")
    # Let the SDK's writer task put the notification on stdout first.
    await asyncio.sleep(0.2)
    print("fatal: simulated crash in exit_mid_call", file=sys.stderr, flush=True)
    os._exit(code)


@mcp.tool()
async def progress_totals(ctx: Context) -> str:
    """Progress whose later totals are 0, absent or negative."""
    await ctx.report_progress(1, total=0)
    await ctx.report_progress(2, total=8)
    await ctx.report_progress(4, total=0)
    await ctx.report_progress(6)
    await ctx.report_progress(7, total=-1)
    return "totals done"


@mcp.tool()
def big_result(size: int, structured: bool = False) -> str:
    """Returns `size` bytes of text (head 'HEAD', tail 'TAIL')."""
    return "HEAD" + "x" * max(0, size - 8) + "TAIL"


@mcp.tool()
def fail(text: str) -> str:
    """Fails with `text` (an isError result)."""
    raise ValueError(text)


def late_tool() -> str:
    """A tool added at run time."""
    return "late tool ran"


@mcp.tool()
async def add_tool(ctx: Context) -> str:
    """Registers `late_tool` and announces tools/list_changed."""
    mcp.add_tool(late_tool)
    await ctx.session.send_tool_list_changed()
    return "added"


async def main() -> None:
    # FastMCP.run() declares tools.listChanged = false; declare it so that
    # clients act on add_tool's notification.
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.server.stdio import stdio_server

    server = mcp._mcp_server
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    asyncio.run(main())
