"""Agents `taskloom mcp serve` serves in the tests (scripted: no model needed)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from taskloom import Agent, ToolContext, ToolEffect, tool
from taskloom.models import FunctionModel, ModelRequest, reply


class Plan(BaseModel):
    city: str
    days: int


@tool(effect=ToolEffect.READ_ONLY)
async def research(topic: str, ctx: ToolContext) -> str:
    """Research a topic, reporting progress."""
    ctx.progress(f"reading about {topic}")
    ctx.progress(f"summarising {topic}")
    return f"notes on {topic}"


def _plans(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if last.role == "user":
        return reply(tool_calls=[("research", {"topic": last.text})])
    return reply('{"city": "Tromsø", "days": 3}')


def _echo(request: ModelRequest) -> Any:
    task = request.messages[-1].text
    if task == "fail":
        raise RuntimeError("the model is down")
    return reply(f"you said: {task}")


planner = Agent(
    "planner",
    FunctionModel(_plans),
    tools=[research],
    output_type=Plan,
    description="Plans a trip to a city.",
)


def echo() -> Agent:
    """A factory: an agent that answers in plain text."""
    return Agent("echo", FunctionModel(_echo))


not_an_agent = 42


@tool(effect=ToolEffect.READ_ONLY)
async def wait_for_gate(ctx: ToolContext) -> str:
    """Wait until the file named by $TASKLOOM_TEST_GATE exists."""
    import asyncio
    import os
    from pathlib import Path

    gate = Path(os.environ["TASKLOOM_TEST_GATE"])
    ctx.progress("waiting for the gate")
    while not await asyncio.to_thread(gate.exists):
        if ctx.stop.is_set:
            return "stopped before the gate opened"
        await asyncio.sleep(0.05)
    opened = await asyncio.to_thread(gate.read_text)
    return f"the gate opened: {opened.strip()}"


def _gated(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if last.role == "user":
        return reply(tool_calls=[("wait_for_gate", {})])
    return reply(f"report: {last.results[0].content}")


gated = Agent(
    "gated", FunctionModel(_gated), tools=[wait_for_gate], description="Waits for a gate."
)


@tool(needs_approval=True)
async def launch(target: str) -> str:
    """Launch at a target (a person approves each launch)."""
    return f"launched at {target}"


def _guarded(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if last.role == "user":
        return reply(tool_calls=[("launch", {"target": last.text})])
    return reply(f"report: {last.results[0].content}")


guarded = Agent(
    "guarded",
    FunctionModel(_guarded),
    tools=[launch],
    description="Launches, once a person approved.",
)
