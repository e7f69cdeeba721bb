"""A process for the hand-off crash test: a parent whose subagent call
outlasts `background_after` (the child's model never answers here), so the
child goes on in the background of this process; it prints `HANDED <child>`
once the parent's run ended and the child is in its model request, then
waits to be SIGKILLed.

    python handoff_child.py STORE_URL SCHEMA SESSION_ID
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from taskloom import Agent, Runtime
from taskloom.backends import open_backend
from taskloom.delegation import SubAgent
from taskloom.entries import SubagentLink
from taskloom.models import FunctionModel, ModelRequest, reply

asking = asyncio.Event()


def lead(request: ModelRequest) -> Any:
    """Delegate once; then wait for the report; then say what it was."""
    heard = "\n".join(m.text for m in request.messages if m.role == "user")
    if "finished. Its report" in heard:
        return reply("the helper said: " + heard.rsplit("Its report:", 1)[1].strip())
    if any(m.role == "tool" for m in request.messages):
        return reply("waiting for the helper")
    return reply(tool_calls=[("helper", {"task": "think hard"})])


async def never(request: ModelRequest) -> Any:
    asking.set()
    await asyncio.Event().wait()


def build(child_model: FunctionModel) -> Agent:
    helper = SubAgent("helper", "Thinks hard.", child_model, background_after=0.2)
    return Agent("lead", FunctionModel(lead, name="lead"), tools=[helper.tool()])


async def main(url: str, schema: str, session_id: str) -> None:
    options: dict[str, Any] = {"schema": schema} if schema != "-" else {}
    runtime = Runtime(store=open_backend(url, **options).store)
    session = await runtime.open_session(session_id, build(FunctionModel(never, name="deep")))
    result = await session.run("go")
    await asyncio.wait_for(asking.wait(), 30)
    [link] = [e.payload for e in await session.entries() if isinstance(e.payload, SubagentLink)]
    print(f"HANDED {link.child_session_id} {result.text}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
