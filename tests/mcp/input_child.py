"""A client process for the MCP input crash test.

    python input_child.py URL STORE_URL SCHEMA SESSION_ID

Runs one turn of a session whose agent calls `greet` on the asking server
at URL as an MCP task, waits until the task's question is parked in the
log, prints `ASKED <input id>`, and blocks, for the test to SIGKILL it.
"""

from __future__ import annotations

import asyncio
import sys

from input_app import greeter, open_test_store

from taskloom import Runtime

URL, STORE, SCHEMA, SESSION_ID = sys.argv[1:5]


async def main() -> None:
    runtime = Runtime(store=open_test_store(STORE, SCHEMA))
    runtime.background.lease = 1.0
    session = await runtime.create_session(greeter(URL), session_id=SESSION_ID)
    await session.run("Greet someone, please.")
    while not (asked := await session.pending_input()):
        await asyncio.sleep(0.05)
    print(f"ASKED {asked[0].id}", flush=True)
    await asyncio.sleep(3600)


asyncio.run(main())
