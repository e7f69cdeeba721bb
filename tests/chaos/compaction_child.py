"""A process that runs a long session and blocks in the summarizer call
(prints `READY summarizing <results so far>`), to be SIGKILLed there."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from session_child import open_runtime

from taskloom import Agent, Compaction, ModelSettings, tool
from taskloom.loop import SUMMARY_PROMPT
from taskloom.models import FunctionModel, ModelRequest, reply

WINDOW = 2000


@tool
def fetch(n: int) -> str:
    """Fetch page n."""
    return "x" * 800


def agent(model: FunctionModel) -> Agent:
    """The agent both processes run (the same definition, another model)."""
    return Agent(
        "reader",
        model,
        tools=[fetch],
        settings=ModelSettings(context_window=WINDOW),
        compaction=Compaction(keep_recent=4),
    )


async def main(url: str, schema: str, session_id: str) -> None:
    asked = [0]

    async def answer(request: ModelRequest) -> Any:
        if request.system == SUMMARY_PROMPT:
            results = sum(len(m.results) for m in request.messages)
            print(f"READY summarizing {results}", flush=True)
            await asyncio.Event().wait()  # killed here
        asked[0] += 1
        return reply(tool_calls=[("fetch", {"n": asked[0]})])

    async with open_runtime(url, schema) as runtime:
        session = await runtime.create_session(agent(FunctionModel(answer)), session_id=session_id)
        await session.run("read everything")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
