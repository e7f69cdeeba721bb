"""A background-child worker process for crash tests.

    python worker_child.py STORE_URL SCHEMA SPEC_JSON SIDE_EFFECTS_FILE

Runs `ChildWorker.run(spec)`. The child's model asks for one tool call, then
announces `READY thinking` and thinks until its stdin closes (the test says
when), which is where a test SIGKILLs or SIGSTOPs this process. Prints
`RESULT <status>`.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from taskloom import Runtime, tool
from taskloom.backends import open_backend
from taskloom.delegation import ChildWorker
from taskloom.models import FunctionModel, ModelRequest, reply

URL, SCHEMA, SPEC, SIDE_EFFECTS = sys.argv[1:5]


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@tool
def note(text: str) -> str:
    """Write a note (a side effect)."""
    with open(SIDE_EFFECTS, "a") as f:
        f.write(text + "\n")
    return "noted"


async def think(request: ModelRequest) -> Any:
    if len(request.messages) == 1:
        return reply(tool_calls=[("note", {"text": "from the first worker"})])
    say("READY thinking")
    # Off the loop, so the lease keeps being renewed while the test decides.
    await asyncio.to_thread(sys.stdin.read)
    return reply("answer from the first worker")


async def main() -> None:
    options: dict[str, Any] = {"schema": SCHEMA} if SCHEMA != "-" else {}
    model = FunctionModel(think, name="slowpoke")
    runtime = Runtime(
        store=open_backend(URL, **options).store, tools={"note": note}, models={model.spec: model}
    )
    try:
        status = await ChildWorker(runtime, worker_id="first").run(SPEC)
        say(f"RESULT {status.value if status else 'none'}")
    finally:
        await runtime.close()


asyncio.run(main())
