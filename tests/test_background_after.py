"""`SubAgent(background_after=...)`: a delegation that outlasts it answers
"still running" and goes on in the background; its answer arrives once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from taskloom import Agent, ConfigurationError, Runtime
from taskloom.delegation import SubAgent
from taskloom.entries import MessageEntry
from taskloom.models import FunctionModel, ModelRequest, reply


def lead(request: ModelRequest) -> Any:
    """Delegate once; then wait for the report; then say what it was."""
    heard = "\n".join(m.text for m in request.messages if m.role == "user")
    if "finished. Its report" in heard:
        return reply("the helper said: " + heard.rsplit("Its report:", 1)[1].strip().split("\n")[0])
    if any(m.role == "tool" for m in request.messages):
        return reply("waiting for the helper")
    return reply(tool_calls=[("helper", {"task": "think hard"})])


def slow_child(gate: asyncio.Event) -> FunctionModel:
    async def answer(request: ModelRequest) -> Any:
        await gate.wait()
        return reply("forty-two")

    return FunctionModel(answer, name="deep")


def test_background_after_must_be_a_positive_number() -> None:
    for bad in (0, -1, "5", True):
        with pytest.raises(ConfigurationError, match="background_after"):
            SubAgent("h", "Helps.", FunctionModel(lambda r: reply("x")), background_after=bad)


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
async def test_a_quick_child_answers_inline(url: str, tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path}/q.db" if url == "sqlite" else url
    gate = asyncio.Event()
    gate.set()
    helper = SubAgent("helper", "Helps.", slow_child(gate), background_after=5)
    model = FunctionModel(lead)
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("lead", model, tools=[helper.tool()]))
        await session.run("go")
        result = model.requests[1].messages[-1].results[0]
        assert json.loads(result.content)["answer"] == "forty-two"
        assert await runtime.background.registry.list(session.id) == []
        assert await runtime.background.inbox.pending(session.id) == []


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
async def test_a_slow_child_goes_on_in_the_background_and_reports_once(
    url: str, tmp_path: Any
) -> None:
    store = f"sqlite:///{tmp_path}/s.db" if url == "sqlite" else url
    gate = asyncio.Event()
    helper = SubAgent("helper", "Helps.", slow_child(gate), background_after=0.05)
    model = FunctionModel(lead)
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("lead", model, tools=[helper.tool()]))
        first = await session.run("go")
        assert first.text == "waiting for the helper"
        receipt = json.loads(model.requests[1].messages[-1].results[0].content)
        assert receipt["status"] == "running" and "later round" in receipt["note"]
        # Still running: registered under the parent, nothing in its inbox yet.
        [live] = await runtime.background.registry.list(session.id)
        assert live.id == receipt["id"]
        gate.set()
        async with asyncio.timeout(10):
            while not await runtime.background.inbox.pending(session.id):
                await asyncio.sleep(0.01)
        second = await session.run("any news?")
        assert second.text == "the helper said: forty-two"
        await session.run("and now?")
        entries = await session.entries()
        carried = [
            e for e in entries if isinstance(e.payload, MessageEntry) and e.payload.delivered_ids
        ]
        reports = [i for e in carried for i in e.payload.delivered_ids if receipt["id"] in i]
        assert len(reports) == 1  # delivered once
        assert await runtime.background.registry.list(session.id) == []


async def test_closing_the_runtime_leaves_a_handed_off_child_for_the_next_run(
    tmp_path: Any,
) -> None:
    from taskloom.delegation import ChildStatus, child_status
    from taskloom.entries import SubagentLink, SubagentResult

    async def slow(request: ModelRequest) -> Any:
        await asyncio.sleep(0.3)
        return reply("forty-two")

    url = f"sqlite:///{tmp_path / 't.db'}"
    helper = SubAgent("helper", "Helps.", FunctionModel(slow), background_after=0.05)
    agent = Agent("lead", FunctionModel(lead), tools=[helper.tool()])
    async with Runtime(store=url) as runtime:
        session = await runtime.create_session(agent)
        assert (await session.run("go")).text == "waiting for the helper"
    # Closed with the child running (a one-shot process ends here).
    async with Runtime(store=url) as runtime:
        [link] = [
            e.payload
            for e in await runtime.store.load(session.id)
            if isinstance(e.payload, SubagentLink)
        ]
        child_id = link.child_session_id
        ended = [
            e for e in await runtime.store.load(child_id) if isinstance(e.payload, SubagentResult)
        ]
        assert ended == []  # not ended as stopped: left to be taken up
        assert await child_status(runtime, child_id) is ChildStatus.INTERRUPTED
        reopened = await runtime.open_session(session.id, agent)
        await reopened.run("any news?")  # its first boundary takes the child up
        async with asyncio.timeout(10):
            while not await runtime.background.inbox.pending(session.id):
                await asyncio.sleep(0.02)
        assert (await reopened.run("and now?")).text == "the helper said: forty-two"
