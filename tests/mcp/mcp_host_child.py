"""A host for the host-death test: starts a stdio MCP server that never
answers, then blocks.

    python mcp_host_child.py NOTES

Once the server noted its pid in NOTES (see `silent_server.py`), this
process prints `READY <server pid>` and waits to be SIGKILLed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from taskloom import Runtime
from taskloom.mcp import MCPConnections, MCPServer

NOTES = Path(sys.argv[1])
SILENT = Path(__file__).with_name("silent_server.py")


def noted_pid() -> str:
    try:
        lines = NOTES.read_text().splitlines()
    except FileNotFoundError:
        return ""
    return next((line.split()[1] for line in lines if line.startswith("pid ")), "")


async def main() -> None:
    runtime = Runtime()
    server = MCPServer.stdio(sys.executable, [str(SILENT), str(NOTES)], name="silent")
    listing = asyncio.ensure_future(MCPConnections.of(runtime).tools_for(server))
    while not (pid := noted_pid()):
        await asyncio.sleep(0.01)
    sys.stdout.write(f"READY {pid}\n")
    sys.stdout.flush()
    await asyncio.sleep(3600)  # the handshake never comes; this waits to be killed
    listing.cancel()


asyncio.run(main())
