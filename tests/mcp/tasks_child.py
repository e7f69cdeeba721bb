"""A client process for the MCP task crash tests.

    python tasks_child.py URL STORE_URL SCHEMA SESSION_ID [LEASE]

Runs one turn of a session whose agent calls the served `gated` agent at
URL as an MCP task (it goes to the background at once), prints `READY`
once the run ended with the task polled in the background, and blocks, for
the test to SIGKILL it. Background registrations last LEASE seconds (1 by
default; `default`: the service's own).
"""

from __future__ import annotations

import asyncio
import sys

from tasks_support import client_agent

from taskloom import Runtime
from taskloom.backends import open_backend

URL, STORE, SCHEMA, SESSION_ID = sys.argv[1:5]
LEASE = sys.argv[5] if len(sys.argv) > 5 else "1.0"


async def main() -> None:
    options = {} if SCHEMA == "-" else {"schema": SCHEMA}
    runtime = Runtime(store=open_backend(STORE, **options).store)
    if LEASE != "default":
        runtime.background.lease = float(LEASE)
    session = await runtime.create_session(client_agent(URL), session_id=SESSION_ID)
    result = await session.run("Open the gate, please.")
    print(f"READY {result.text}", flush=True)
    await asyncio.sleep(3600)


asyncio.run(main())
