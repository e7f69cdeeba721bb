"""An MCP server for the tests, on the official SDK's `MCPServer` (FastMCP).

    python fixture_server.py stdio [--marker PATH]
    python fixture_server.py http [--marker PATH] [--port N]   # prints "READY <port>", serves

Over HTTP it is served by uvicorn on 127.0.0.1, on a port the OS picks. Its
tools cover what the client must handle: progress, `isError`, annotations,
`list_changed`, images, resources, structured output, a call that hangs
(its cancellation is written to the marker file), a server that exits
mid-call, calls that overlap (a barrier only concurrent calls pass), and
what the server can see of its environment and request headers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel

# A 1x1 PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False)

server = MCPServer("fixture", log_level="WARNING")
marker: Path | None = None
arrived: dict[str, int] = {}
gates: dict[str, asyncio.Event] = {}


def note(line: str) -> None:
    if marker is not None:
        with marker.open("a") as f:
            f.write(line + "\n")


@server.tool(annotations=READ_ONLY)
async def meet(label: str, group: str, size: int) -> str:
    """Wait until `size` calls of `group` arrived (only concurrent calls get through)."""
    gate = gates.setdefault(group, asyncio.Event())
    arrived[group] = arrived.get(group, 0) + 1
    if arrived[group] >= size:
        gate.set()
    try:
        await asyncio.wait_for(gate.wait(), 20)
    except TimeoutError:
        return f"{label}: alone"
    return f"{label}: met {size}"


@server.tool(annotations=READ_ONLY)
async def slow(steps: int, ctx: Context) -> str:
    """Report progress `steps` times, then answer."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    return f"{steps} steps done"


@server.tool(annotations=READ_ONLY)
def fail(reason: str) -> str:
    """Always fails with `reason`."""
    raise ToolError(f"could not: {reason}")


@server.tool(annotations=READ_ONLY)
def whoami() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool(annotations=READ_ONLY)
def look(name: str) -> str:
    """Read something."""
    return f"looked at {name}"


@server.tool(annotations=DESTRUCTIVE)
def delete_thing(name: str) -> str:
    """Delete something."""
    note(f"deleted {name}")
    return f"deleted {name}"


@server.tool(annotations=ADDITIVE)
def add_thing(name: str) -> str:
    """Add something (never destroys anything)."""
    return f"added {name}"


@server.tool()
def unannotated(name: str) -> str:
    """A tool with no annotations at all."""
    return f"plain {name}"


class Forecast(BaseModel):
    city: str
    celsius: int


@server.tool(annotations=READ_ONLY)
def forecast(city: str) -> Forecast:
    """Structured output."""
    return Forecast(city=city, celsius=4)


@server.tool(annotations=READ_ONLY, structured_output=False)
def picture() -> list[object]:
    """An image and a caption."""
    return [Image(data=PIXEL, format="png"), "a single pixel"]


@server.tool(annotations=READ_ONLY, structured_output=False)
def documents() -> list[object]:
    """An embedded resource and a resource link."""
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="file:///notes.txt", text="the notes", mime_type="text/plain"
            ),
        ),
        ResourceLink(
            type="resource_link", uri="file:///big.csv", name="big.csv", mime_type="text/csv"
        ),
        TextContent(type="text", text="two documents"),
    ]


@server.tool(annotations=READ_ONLY)
def shout(size: int) -> str:
    """A long answer."""
    return "A" * size


@server.tool(annotations=READ_ONLY)
async def grow(ctx: Context) -> str:
    """Add the tool `grown` and announce that the tool list changed."""
    server.add_tool(grown, annotations=READ_ONLY)
    await ctx.notify_tools_changed()
    return "grown"


def grown() -> str:
    """A tool that appeared later."""
    return "I am new"


@server.tool(annotations=READ_ONLY)
async def hang(label: str, ctx: Context) -> str:
    """Never answers (it reports progress once it waits); a cancellation is
    written to the marker file."""
    note(f"hang {label} started")
    await ctx.report_progress(0, None, f"{label} is hanging")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        note(f"hang {label} cancelled")
        raise
    return "unreachable"


@server.tool(annotations=READ_ONLY)
def environment(names: list[str]) -> dict[str, str | None]:
    """The values of these environment variables in this server's process."""
    return {name: os.environ.get(name) for name in names}


@server.tool(annotations=READ_ONLY)
def authorization(ctx: Context) -> str:
    """Whether the request carried the Authorization header the test expects."""
    headers = ctx.headers or {}
    expected = os.environ.get("FIXTURE_EXPECT_AUTH", "")
    return "authorized" if expected and headers.get("authorization") == expected else "anonymous"


@server.tool(annotations=READ_ONLY)
def quote_credentials(ctx: Context) -> str:
    """Fails quoting the credentials the request carried, as a careless
    server's error message would."""
    headers = ctx.headers or {}
    raise ToolError(
        f"access denied for Authorization: {headers.get('authorization')}"
        f" and x-api-key {headers.get('x-api-key')}"
    )


@server.tool(annotations=READ_ONLY)
def sleepers() -> list[int]:
    """Start three long sleeps: two in this server's process group (one keeps
    the server's stderr, one does not), and one in a session of its own
    without the server's stderr. Their pids."""
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
    keeps = subprocess.Popen(["sleep", "300"], **quiet)
    apart = subprocess.Popen(["sleep", "300"], stderr=subprocess.DEVNULL, **quiet)
    away = subprocess.Popen(
        ["sleep", "300"], stderr=subprocess.DEVNULL, start_new_session=True, **quiet
    )
    return [keeps.pid, apart.pid, away.pid]


@server.tool(annotations=READ_ONLY)
def die(code: int) -> str:
    """Exit the whole server mid-call."""
    print(f"fixture: exiting with code {code} on request", file=sys.stderr, flush=True)
    os._exit(code)


def main() -> None:
    global marker
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--marker", type=Path)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    marker = args.marker
    if args.transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)  # before READY: a client that connects at once waits in the backlog
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"READY {sock.getsockname()[1]}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
