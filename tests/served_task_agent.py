"""The agent the served-task tests serve with `taskloom a2a serve` and
`taskloom mcp serve` (scripted: no model needed).

A task starting with "pay" asks to pay 600 (a call that needs approval),
then reports the result; any other task is one slow model call: the model
prints `MODEL IN FLIGHT` on stdout (the tests' proof the call is in
progress), waits until the file named by $TASKLOOM_TEST_GATE exists, and
answers `answer: <task>`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from taskloom import Agent, ToolEffect, tool
from taskloom.messages import ToolResult
from taskloom.models import FunctionModel, ModelRequest, reply

IN_FLIGHT = "MODEL IN FLIGHT"


@tool(effect=ToolEffect.WRITE, needs_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


async def _model(request: ModelRequest) -> Any:
    last = request.messages[-1]
    results = [b.content for b in last.blocks if isinstance(b, ToolResult)]
    if results:
        return reply(f"done: {results[0]}")
    task = next(m.text for m in request.messages if m.role == "user")
    if task.startswith("pay"):
        return reply(tool_calls=[("pay", {"amount": 600})])
    print(IN_FLIGHT, flush=True)
    gate = Path(os.environ["TASKLOOM_TEST_GATE"])
    while not await asyncio.to_thread(gate.exists):
        await asyncio.sleep(0.02)
    return reply(f"answer: {task}")


def clerk() -> Agent:
    """A factory: the agent the served-task tests serve."""
    return Agent(
        "clerk", FunctionModel(_model), tools=[pay], description="Pays, or answers slowly."
    )
