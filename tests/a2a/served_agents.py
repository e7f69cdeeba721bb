"""Agents the A2A tests serve (scripted: no model needed)."""

from __future__ import annotations

import asyncio
from typing import Any

from taskloom import Agent, ToolEffect, tool
from taskloom.messages import ToolResult
from taskloom.models import FunctionModel, ModelRequest, reply


def _echo(request: ModelRequest) -> Any:
    task = request.messages[-1].text
    if task == "fail":
        raise RuntimeError("the model is down")
    return reply(f"you said: {task}")


@tool(effect=ToolEffect.WRITE, needs_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def _tool_results(request: ModelRequest) -> list[str]:
    return [b.content for b in request.messages[-1].blocks if isinstance(b, ToolResult)]


def _payer(request: ModelRequest) -> Any:
    results = _tool_results(request)
    if not results:
        return reply(tool_calls=[("pay", {"amount": 600})])
    return reply(f"done: {results[0]}")


@tool(effect=ToolEffect.READ_ONLY)
async def wait_forever() -> str:
    """Wait until cancelled."""
    await asyncio.Event().wait()
    return "never"


def _waiter(request: ModelRequest) -> Any:
    if not _tool_results(request):
        return reply("starting", tool_calls=[("wait_forever", {})])
    return reply("woke up")


def echo() -> Agent:
    """A factory: an agent that echoes in plain text."""
    return Agent("echo", FunctionModel(_echo), description="Echoes what it is told.")


def payer() -> Agent:
    """An agent whose one tool needs approval."""
    return Agent("payer", FunctionModel(_payer), tools=[pay], description="Pays bills.")


def waiter() -> Agent:
    """An agent whose tool never returns on its own."""
    return Agent("waiter", FunctionModel(_waiter), tools=[wait_forever])
