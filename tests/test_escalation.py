"""A child escalates its approval-gated calls (`on_approval="escalate"`):
they show among the root's pending approvals with the child's origin, and
the decision resumes the child, whose answer arrives once. In process here
(memory, SQLite, PostgreSQL); across processes, with the CLI deciding, in
tests/distributed/test_queue_escalation.py and below."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, ConfigurationError, RunStatus, Runtime, tool
from taskloom.delegation import ChildStatus, DecidedChildren, Spawner, SubAgent, child_status
from taskloom.entries import MessageEntry
from taskloom.models import FunctionModel, ModelRequest, reply

HERE = Path(__file__).parent
transfers: list[int] = []


@tool(needs_approval=True)
async def transfer(amount: int) -> str:
    """Move money (a person approves each transfer)."""
    transfers.append(amount)
    return f"moved {amount}"


def child(request: ModelRequest) -> Any:
    results = [r.content for m in request.messages for r in m.results]
    if not results:
        return reply(tool_calls=[("transfer", {"amount": 70})])
    return reply(f"transfer done: {results[-1]}")


def lead(request: ModelRequest) -> Any:
    texts = "\n".join(m.text for m in request.messages if m.role == "user")
    if "finished. Its report" in texts:
        return reply("report: " + texts.rsplit("Its report:", 1)[1].strip())
    results = [r.content for m in request.messages for r in m.results]
    if results:
        # The delegation's answer, once the child went on (the root's resume).
        answer = json.loads(results[-1]).get("answer")
        return reply(f"report: {answer}" if answer else "waiting for approval")
    return reply(tool_calls=[("treasurer", {"task": "Pay the invoice."})])


def test_gated_tools_need_escalation_in_a_child() -> None:
    with pytest.raises(ConfigurationError, match="on_approval='escalate'"):
        SubAgent("treasurer", "Pays.", FunctionModel(child), tools=[transfer])
    with pytest.raises(ConfigurationError, match="on_approval"):
        SubAgent("t", "Pays.", FunctionModel(child), on_approval="ask")
    Spawner(FunctionModel(child), tools=[transfer], on_approval="escalate")


async def test_an_escalated_call_is_decided_at_the_root_and_resumes_the_child(
    store_url: tuple[str, str],
) -> None:
    """An inline child's escalation parks its root: the child's call is among
    the root's pending approvals (and its run's `pending`), and the decision
    runs the child on, then the root, which gets the child's answer as the
    delegation's result."""
    transfers.clear()
    treasurer = SubAgent(
        "treasurer", "Pays.", FunctionModel(child), tools=[transfer], on_approval="escalate"
    )
    model = FunctionModel(lead)
    async with Runtime(store=open_durable(*store_url)) as runtime:
        root = await runtime.create_session(Agent("lead", model, tools=[treasurer.tool()]))
        first = await root.run("Pay the invoice.")
        assert first.status is RunStatus.AWAITING_APPROVAL
        assert len(model.requests) == 1  # the root did not go on
        [pending] = await root.pending()
        assert first.pending == (pending,)  # the child's call, with its origin
        child_id = pending.session_id
        assert await child_status(runtime, child_id) is ChildStatus.AWAITING_APPROVAL
        assert (pending.name, pending.arguments) == ("transfer", {"amount": 70})
        assert pending.origin.startswith("treasurer#")
        assert transfers == []  # nothing ran unapproved
        await root.approve(pending.id, note="within budget")
        await runtime.background.wait_kept()
        # The decision ran the child on, then the root; resume() returns its result.
        assert transfers == [70]
        final = await root.resume()
        assert (final.status, final.text) == (
            RunStatus.COMPLETED,
            "report: transfer done: moved 70",
        )
        assert transfers == [70]
        assert await child_status(runtime, child_id) is ChildStatus.DONE
        assert await root.pending() == []
        delivered = [
            i
            for e in await root.entries()
            if isinstance(e.payload, MessageEntry)
            for i in e.payload.delivered_ids
        ]
        # The answer came as the delegation's result, never again as a notice.
        assert delivered == []
        assert await runtime.background.inbox.pending(root.id) == []
        assert [s.id for s in await runtime.store.list(parent_id=root.id)] == [child_id]


async def test_a_denied_escalation_resumes_the_child_with_the_denial() -> None:
    transfers.clear()
    treasurer = SubAgent(
        "treasurer", "Pays.", FunctionModel(child), tools=[transfer], on_approval="escalate"
    )
    async with Runtime() as runtime:
        root = await runtime.create_session(
            Agent("lead", FunctionModel(lead), tools=[treasurer.tool()])
        )
        await root.run("Pay the invoice.")
        [pending] = await root.pending()
        await root.deny(pending.id, note="not this month")
        final = await root.resume()
        assert transfers == []
        assert final.status is RunStatus.COMPLETED and "not this month" in final.text


async def test_the_cli_approves_an_escalated_call_on_sqlite_and_resumes_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'taskloom.db'}"
    effects = tmp_path / "effects.txt"
    monkeypatch.setenv("ESC_URL", url)
    monkeypatch.setenv("ESC_EFFECTS", str(effects))
    import escalation_app

    async with escalation_app.make_runtime() as host:
        root = await host.create_session(host.agent_named("treasurer"))
        assert (await root.run("Pay the invoice.")).text == "a worker is paying"
        async with asyncio.timeout(10):
            while not (pending := await root.pending()):
                await asyncio.sleep(0.02)
        [call] = pending
        assert call.name == "pay" and call.origin.startswith("payer#")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        # Another process decides; with no queue, it resumes the child itself.
        done = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "taskloom",
                "approve",
                root.id,
                call.id,
                "--app",
                "escalation_app:make_runtime",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        [paid] = effects.read_text().splitlines()
        assert paid.startswith(f"PAID {call.session_id} 70 ") and not paid.endswith(
            f" {os.getpid()}"
        )  # ran once, in the deciding process
        assert await child_status(host, call.session_id) is ChildStatus.DONE
        final = await root.run("Done?")
        assert final.text == "report: done: paid 70"


async def test_a_decision_taken_while_the_child_still_holds_its_lease_resumes_it() -> None:
    # An automatic approver decides the moment the call shows; the runner that
    # parked the child releases its lease a database round trip later.
    transfers.clear()
    treasurer = SubAgent(
        "treasurer", "Pays.", FunctionModel(child), tools=[transfer], on_approval="escalate"
    )
    async with Runtime() as runtime:
        leases = runtime.store.leases
        release = leases.release

        async def slow_release(lease: Any) -> Any:
            await asyncio.sleep(0.05)
            return await release(lease)

        leases.release = slow_release  # type: ignore[method-assign]
        root = await runtime.create_session(
            Agent("lead", FunctionModel(lead), tools=[treasurer.tool()])
        )

        async def approver() -> str:
            while not (pending := await root.pending()):
                await asyncio.sleep(0.001)
            await root.approve(pending[0].id)
            return pending[0].session_id

        approving = asyncio.create_task(approver())
        await root.run("Pay the invoice.")
        child_id = await approving
        async with asyncio.timeout(10):
            while (await child_status(runtime, child_id)) is not ChildStatus.DONE:
                await asyncio.sleep(0.01)
        assert transfers == [70]


async def test_a_runtime_offering_no_delegation_resumes_a_decided_child_once_it_registers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process of the app's own that decides with a runtime listing no
    agents, through a session opened with a stand-in agent: the decision is
    recorded either way; the child goes on only where `DecidedChildren`
    serves the runtime (the CLI and the console register it themselves)."""
    url = f"sqlite:///{tmp_path / 'taskloom.db'}"
    effects = tmp_path / "effects.txt"
    monkeypatch.setenv("ESC_URL", url)
    monkeypatch.setenv("ESC_EFFECTS", str(effects))
    import escalation_app

    async def escalated(host: Runtime) -> tuple[str, str, str]:
        root = await host.create_session(host.agent_named("treasurer"))
        await root.run("Pay the invoice.")
        async with asyncio.timeout(10):
            while not (pending := await root.pending()):
                await asyncio.sleep(0.02)
        [call] = pending
        return root.id, call.id, call.session_id

    async def decide(registers: bool, root_id: str, call_id: str) -> None:
        payer = FunctionModel(escalation_app.payer, name="payer")
        async with Runtime(store=url, tools=[escalation_app.pay], models=[payer]) as decider:
            if registers:
                DecidedChildren.of(decider)
            stand_in = Agent("treasurer", FunctionModel(lambda r: reply("-")))
            await (await decider.open_session(root_id, stand_in)).approve(call_id)
            await decider.background.wait_kept()

    async with escalation_app.make_runtime() as host:
        left = await escalated(host)
        resumed = await escalated(host)
        await decide(False, *left[:2])
        await decide(True, *resumed[:2])
        assert await child_status(host, left[2]) is ChildStatus.AWAITING_APPROVAL
        assert await child_status(host, resumed[2]) is ChildStatus.DONE
        [paid] = effects.read_text().splitlines()
        assert paid.startswith(f"PAID {resumed[2]} 70 ")


async def test_a_root_that_delegates_every_round_parks_on_its_first_child() -> None:
    """A root model that delegates again whatever it hears starts one child:
    the first child's escalation parks the root before a second round."""
    transfers.clear()
    treasurer = SubAgent(
        "treasurer", "Pays.", FunctionModel(child), tools=[transfer], on_approval="escalate"
    )
    again = FunctionModel(lambda r: reply(tool_calls=[("treasurer", {"task": "Pay again."})]))
    async with Runtime() as runtime:
        root = await runtime.create_session(Agent("lead", again, tools=[treasurer.tool()]))
        async with asyncio.timeout(5):
            first = await root.run("Pay the invoice.")
        assert first.status is RunStatus.AWAITING_APPROVAL
        assert len(again.requests) == 1
        assert len(await root.pending()) == 1
        assert len(await runtime.store.list(parent_id=root.id)) == 1
        assert transfers == []


async def test_resuming_a_root_before_its_childs_calls_are_decided_parks_it_again() -> None:
    transfers.clear()
    treasurer = SubAgent(
        "treasurer", "Pays.", FunctionModel(child), tools=[transfer], on_approval="escalate"
    )
    async with Runtime() as runtime:
        root = await runtime.create_session(
            Agent("lead", FunctionModel(lead), tools=[treasurer.tool()])
        )
        await root.run("Pay the invoice.")
        [pending] = await root.pending()
        again = await root.resume()
        assert again.status is RunStatus.AWAITING_APPROVAL
        assert await root.pending() == [pending] and transfers == []
        await root.approve(pending.id)
        final = await root.resume()
        assert final.text == "report: transfer done: moved 70" and transfers == [70]
