"""The `--app` factory of the escalation tests (and the tests' host): a
treasurer whose background payer escalates its gated `pay` call, and a
cashier whose inline payer (a `SubAgent`) does, parking the cashier.

    taskloom approve ROOT CALL --app escalation_app:make_runtime

`ESC_URL` names the store, `ESC_EFFECTS` the file each payment is marked in.
"""

from __future__ import annotations

import os
from typing import Any

from taskloom import Agent, Runtime, ToolContext, tool
from taskloom.delegation import Spawner, SubAgent, TaskDispatcher
from taskloom.models import FunctionModel, ModelRequest, reply


@tool(needs_approval=True)
async def pay(amount: int, ctx: ToolContext) -> str:
    """Pay an amount (a person approves each payment)."""
    with open(os.environ["ESC_EFFECTS"], "a") as f:  # noqa: ASYNC230 (a test's mark)
        f.write(f"PAID {ctx.session_id} {amount} {os.getpid()}\n")
    return f"paid {amount}"


def payer(request: ModelRequest) -> Any:
    results = [r.content for m in request.messages for r in m.results]
    if not results:
        return reply(tool_calls=[("pay", {"amount": 70})])
    return reply(f"done: {results[-1]}")


def treasurer(request: ModelRequest) -> Any:
    text = " ".join(m.text for m in request.messages if m.role == "user")
    if "finished. Its report" in text:
        return reply("report: " + text.rsplit("Its report:", 1)[1].strip())
    if any(m.role == "tool" for m in request.messages):
        return reply("a worker is paying")
    spawn = {"name": "payer", "task": "pay 70", "tools": ["pay"], "mode": "background"}
    return reply(tool_calls=[("spawn_agent", spawn)])


def cashier(request: ModelRequest) -> Any:
    results = [r.content for m in request.messages for r in m.results]
    if results:
        return reply(f"cashier: {results[-1]}")
    return reply(tool_calls=[("payer", {"task": "pay 70"})])


def make_runtime() -> Runtime:
    """The runtime of the host and of the CLI that decides."""
    paying = FunctionModel(payer, name="payer")
    payers = Spawner(paying, tools=[pay], dispatcher=TaskDispatcher(), on_approval="escalate")
    lead = Agent("treasurer", FunctionModel(treasurer, name="treasurer"), tools=[payers.tool()])
    inline = SubAgent("payer", "Pays.", paying, tools=[pay], on_approval="escalate")
    desk = Agent("cashier", FunctionModel(cashier, name="cashier"), tools=[inline.tool()])
    return Runtime(store=os.environ["ESC_URL"], agents=[lead, desk], tools=[pay], models=[paying])
