"""The reminder about work still running suggests only what the agent's tools can do."""

from __future__ import annotations

import asyncio
from typing import Any

from taskloom import Agent, Runtime, Tool, ToolContext, background_tools, tool
from taskloom.models import ModelRequest, ScriptedModel, reply


def never_ending_job(finish: asyncio.Event) -> Tool:
    @tool
    async def start_job(ctx: ToolContext) -> str:
        """Start a job that answers later."""

        async def work() -> str:
            await finish.wait()
            return "job result"

        return f"started {await ctx.start_background('job', 'a long job', work)}"

    return start_job


def reminder(request: ModelRequest) -> str:
    return request.messages[-1].text


async def remind(tools: list[Any]) -> str:
    finish = asyncio.Event()
    model = ScriptedModel(
        [reply(tool_calls=[("start_job", {})]), reply("done"), reply("done anyway")]
    )
    async with Runtime() as runtime:
        session = await runtime.create_session(
            Agent("a", model, tools=[never_ending_job(finish), *tools])
        )
        await session.run("go")
        finish.set()
    return reminder(model.requests[2])


async def test_an_agent_without_the_background_tools_is_not_told_to_wait_or_check() -> None:
    text = await remind([])
    assert "is still running" in text
    assert "wait" not in text and "status" not in text
    assert text.endswith("Its result arrives as a notice in a later turn.")


async def test_an_agent_with_the_background_tools_is_told_which_to_use() -> None:
    text = await remind(background_tools())
    assert "You may wait for it (background_wait) or check its status (background_status)" in text
