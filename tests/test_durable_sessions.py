"""Sessions in a durable store, driven from other processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, ModelRequest, ReasoningOptions, RunStatus, Runtime, ToolContext, tool
from taskloom.models import FunctionModel, ScriptedModel, reply
from taskloom.runtime import SessionModel

OTHER_PROCESS = """
import asyncio, sys
from taskloom import Agent, Runtime
from taskloom.backends import open_backend

async def main(url, schema, session_id, action, *args):
    options = {"schema": schema} if schema != "-" else {}
    async with Runtime(store=open_backend(url, **options).store) as runtime:
        session = await runtime.open_session(session_id, Agent("x", "scripted:unused"))
        try:
            if action == "steer":
                await session.steer(args[0])
            elif action == "approve":
                await session.approve(args[0], note="from another process")
            elif action == "deny":
                await session.deny(args[0], note="from another process")
        except Exception as exc:
            print(type(exc).__name__, exc)
            sys.exit(3)

asyncio.run(main(*sys.argv[1:]))
"""


def other_process(url: str, schema: str, session_id: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", OTHER_PROCESS, url, schema, session_id, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def runtime_for(url: str, schema: str, **kw: Any) -> Runtime:
    return Runtime(store=open_durable(url, schema), **kw)


async def test_a_steer_from_another_process_reaches_the_running_run(
    store_url: tuple[str, str],
) -> None:
    steered = asyncio.Event()
    box: list[Any] = []

    @tool
    async def long_task(ctx: ToolContext) -> str:
        """Work while someone steers."""
        proc = other_process(*store_url, ctx.session_id, "steer", "use metric units")
        await asyncio.to_thread(proc.communicate)
        box.append(proc.returncode)
        steered.set()
        return "done working"

    model = ScriptedModel([reply(tool_calls=[("long_task", {})]), reply("metric it is")])
    async with runtime_for(*store_url) as runtime:
        session = await runtime.create_session(Agent("a", model, tools=[long_task]))
        await session.run("go")
    assert box == [0]
    assert model.requests[1].messages[-1].text == "use metric units"


async def test_approve_from_another_process_then_resume(store_url: tuple[str, str]) -> None:
    sent: list[float] = []

    @tool(needs_approval=True)
    def pay(amount: float) -> str:
        """Pay."""
        sent.append(amount)
        return f"paid {amount}"

    async with runtime_for(*store_url) as runtime:
        first = Agent(
            "payer", ScriptedModel([reply(tool_calls=[("pay", {"amount": 42})])]), tools=[pay]
        )
        session = await runtime.create_session(first)
        parked = await session.run("pay 42")
        assert parked.status is RunStatus.AWAITING_APPROVAL
        call_id = parked.pending[0].id
    proc = other_process(*store_url, session.id, "approve", call_id)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    # a third process (here: a fresh runtime) resumes with only the session id
    async with runtime_for(*store_url) as later:
        reopened = await later.open_session(
            session.id, Agent("payer", ScriptedModel([reply("paid")]), tools=[pay])
        )
        result = await reopened.resume()
    assert result.status is RunStatus.COMPLETED and sent == [42]


async def test_racing_decisions_from_two_processes_agree_on_one(store_url: tuple[str, str]) -> None:
    @tool(needs_approval=True)
    def wire(amount: float) -> str:
        """Wire money."""
        return "wired"

    async with runtime_for(*store_url) as runtime:
        session = await runtime.create_session(
            Agent("w", ScriptedModel([reply(tool_calls=[("wire", {"amount": 1})])]), tools=[wire])
        )
        call_id = (await session.run("wire 1")).pending[0].id
    approver = other_process(*store_url, session.id, "approve", call_id)
    denier = other_process(*store_url, session.id, "deny", call_id)
    outcomes = [p.communicate(timeout=60) and p.returncode for p in (approver, denier)]
    assert sorted(outcomes) == [0, 3]  # one decided, the other was told of the conflict
    async with runtime_for(*store_url) as runtime:
        reopened = await runtime.open_session(
            session.id, Agent("w", ScriptedModel([]), tools=[wire])
        )
        decisions = [e for e in await reopened.entries() if e.kind == "approval_decision"]
        first = decisions[0].data["approved"]
        assert reopened.journal.log.decision(call_id).approved is first  # the first in the log wins
        loser = "deny" if first else "approve"
        assert outcomes[["approve", "deny"].index(loser)] == 3


async def test_model_and_reasoning_choices_survive_reopening(store_url: tuple[str, str]) -> None:
    small = FunctionModel(lambda r: reply("small"), name="small")
    big = FunctionModel(lambda r: reply("big"), name="big")
    models = {small.spec: small, big.spec: big}
    async with runtime_for(*store_url, models=models) as runtime:
        session = await runtime.create_session(Agent("a", small))
        await session.set_model(big)
        await session.set_reasoning(ReasoningOptions(effort="high", budget_tokens=2048))
    async with runtime_for(*store_url, models=models) as runtime:
        reopened = await runtime.open_session(session.id, Agent("a", small))
        assert SessionModel(runtime, reopened.agent, reopened.journal).model is big
        result = await reopened.run("hi")
        assert result.text == "big"
        request: ModelRequest = big.requests[-1]
        assert request.settings.reasoning == ReasoningOptions(effort="high", budget_tokens=2048)
