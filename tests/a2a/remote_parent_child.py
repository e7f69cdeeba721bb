"""A parent process for the crash tests: hands a task to a remote agent in
the background, then blocks while following it, to be SIGKILLed.

    python remote_parent_child.py STORE_URL SCHEMA SESSION_ID REMOTE_URL TASK [POLL]

Once the parent's run ended and the child's log keeps the remote task's id,
it prints `READY <child session id>` and waits (its follower still following).
POLL is the remote agent's `poll_interval` (`default`: its own).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from remote_background import parent, receipts, recorded_task_id

from taskloom import Runtime
from taskloom.stores import open_store

STORE, SCHEMA, SESSION_ID, REMOTE_URL, TASK = sys.argv[1:6]
POLL = sys.argv[6] if len(sys.argv) > 6 else "0.05"


async def main() -> None:
    options: dict[str, Any] = {"schema": SCHEMA} if SCHEMA != "-" else {}
    agent = parent(REMOTE_URL, **({} if POLL == "default" else {"poll_interval": float(POLL)}))
    async with Runtime(store=open_store(STORE, **options)) as runtime:
        session = await runtime.create_session(agent, session_id=SESSION_ID)
        await session.run(f"delegate: {TASK}")
        [receipt] = receipts(agent.model)  # type: ignore[arg-type]
        await recorded_task_id(runtime, receipt["id"])
        sys.stdout.write(f"READY {receipt['id']}\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)


asyncio.run(main())
