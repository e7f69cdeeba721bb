"""A parent process for the crash tests: hands a task to a remote agent in
the background, then blocks while following it, to be SIGKILLed.

    python remote_parent_child.py STORE_URL SCHEMA SESSION_ID REMOTE_URL TASK [POLL]

Once the parent's run ended and the child's log keeps the remote task's id,
it prints `READY <child session id>` and waits (its follower still following).
POLL is the remote agent's `poll_interval` (`default`: its own). With
`HOLD=deliver:PATH` (or `end:PATH`) in its environment, its follower stops
for good just before it delivers the result's notice (or writes the child's
terminal entry), once PATH is created: a point to be killed at.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from remote_background import parent, receipts, recorded_task_id

from taskloom import Runtime
from taskloom.backends import open_backend
from taskloom.background import BackgroundService, FollowJob
from taskloom.entries import SubagentResult

STORE, SCHEMA, SESSION_ID, REMOTE_URL, TASK = sys.argv[1:6]
POLL = sys.argv[6] if len(sys.argv) > 6 else "0.05"


def hold(where: str, marker: str) -> None:
    """Stop the follower for good at `where`, saying so by creating `marker`."""

    async def stopped() -> None:
        Path(marker).touch()  # noqa: ASYNC240 (a test's marker, once)
        await asyncio.Event().wait()

    if where == "deliver":
        deliver = BackgroundService.deliver

        async def held_deliver(self: Any, *args: Any) -> Any:
            await stopped()
            return await deliver(self, *args)

        BackgroundService.deliver = held_deliver  # type: ignore[method-assign]
    else:
        append = FollowJob.append

        async def held_append(self: Any, payload: Any) -> None:
            if isinstance(payload, SubagentResult):
                await stopped()
            await append(self, payload)

        FollowJob.append = held_append  # type: ignore[method-assign]


async def main() -> None:
    options: dict[str, Any] = {"schema": SCHEMA} if SCHEMA != "-" else {}
    agent = parent(REMOTE_URL, **({} if POLL == "default" else {"poll_interval": float(POLL)}))
    async with Runtime(store=open_backend(STORE, **options).store) as runtime:
        session = await runtime.create_session(agent, session_id=SESSION_ID)
        await session.run(f"delegate: {TASK}")
        [receipt] = receipts(agent.model)  # type: ignore[arg-type]
        await recorded_task_id(runtime, receipt["id"])
        sys.stdout.write(f"READY {receipt['id']}\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)


if os.environ.get("HOLD"):
    hold(*os.environ["HOLD"].split(":", 1))
asyncio.run(main())
