"""A process for the background-child crash test: a parent whose spawn tool
hands a child to a `TaskDispatcher` (mode "background"; the child's model
never answers here). It prints `SPAWNED <child>` once the parent's run ended
and the child is in its model request, then waits to be SIGKILLed.

    python spawned_child.py STORE_URL SCHEMA SESSION_ID
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from taskloom import Agent, Runtime
from taskloom.backends import open_backend
from taskloom.delegation import Spawner, TaskDispatcher
from taskloom.entries import SubagentLink
from taskloom.models import FunctionModel, ModelRequest, reply

asking = asyncio.Event()


def lead(request: ModelRequest) -> Any:
    """Spawn once; then wait for the report; then say what it was."""
    heard = "\n".join(m.text for m in request.messages if m.role == "user")
    if "finished. Its report" in heard:
        return reply("the worker said: " + heard.rsplit("Its report:", 1)[1].split()[0])
    if any(m.role == "tool" for m in request.messages):
        return reply("waiting for the worker")
    return reply(
        tool_calls=[("spawn_agent", {"name": "bg", "task": "think", "mode": "background"})]
    )


async def never(request: ModelRequest) -> Any:
    asking.set()
    await asyncio.Event().wait()


def build(child_model: FunctionModel) -> Agent:
    spawner = Spawner(child_model, dispatcher=TaskDispatcher())
    return Agent("lead", FunctionModel(lead, name="lead"), tools=[spawner])


async def main(url: str, schema: str, session_id: str) -> None:
    options: dict[str, Any] = {"schema": schema} if schema != "-" else {}
    runtime = Runtime(store=open_backend(url, **options).store)
    session = await runtime.open_session(session_id, build(FunctionModel(never, name="deep")))
    await session.run("go")
    await asyncio.wait_for(asking.wait(), 30)
    [link] = [e.payload for e in await session.entries() if isinstance(e.payload, SubagentLink)]
    print(f"SPAWNED {link.child_session_id}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
