"""A client process for the MCP task crash tests.

    python tasks_child.py URL STORE_URL SCHEMA SESSION_ID

Runs one turn of a session whose agent calls the served `gated` agent at
URL as an MCP task (it goes to the background at once), prints `READY`
once the run ended with the task polled in the background, and blocks, for
the test to SIGKILL it.
"""

from __future__ import annotations

import asyncio
import sys

from tasks_support import client_agent

from taskloom import Runtime
from taskloom.stores import open_store

URL, STORE, SCHEMA, SESSION_ID = sys.argv[1:5]


async def main() -> None:
    options = {} if SCHEMA == "-" else {"schema": SCHEMA}
    runtime = Runtime(store=open_store(STORE, **options))
    runtime.background.lease = 1.0
    session = await runtime.create_session(client_agent(URL), session_id=SESSION_ID)
    result = await session.run("Open the gate, please.")
    print(f"READY {result.text}", flush=True)
    await asyncio.sleep(3600)


asyncio.run(main())
