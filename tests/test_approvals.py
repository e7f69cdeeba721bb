from __future__ import annotations

import pytest

from taskloom import Agent, RunStatus, Runtime, TaskloomError, ToolContext, tool
from taskloom.errors import ApprovalConflict, ApprovalsMissing
from taskloom.events import ApprovalRequested
from taskloom.models import ScriptedModel, reply

sent: list[float] = []


@tool(needs_approval=lambda args: args["total"] > 500)
def send_gift(total: float, ctx: ToolContext) -> str:
    """Send a gift."""
    sent.append(total)
    return f"sent {total}"


@tool
def note(text: str) -> str:
    """Take a note."""
    return "noted"


def gift_agent(*replies: object) -> Agent:
    return Agent("gifts", ScriptedModel(list(replies)), tools=[send_gift, note])  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _clear() -> None:
    sent.clear()


async def test_a_gated_call_parks_the_whole_turn() -> None:
    agent = gift_agent(
        reply(tool_calls=[("note", {"text": "hi"}), ("send_gift", {"total": 900})]), reply("done")
    )
    session = await Runtime().create_session(agent)
    events: list[object] = []
    result = await session.run("send a big gift", emit=events.append)
    assert result.status is RunStatus.AWAITING_APPROVAL
    assert [(p.id, p.name, p.arguments) for p in result.pending] == [
        ("call_2", "send_gift", {"total": 900})
    ]
    assert sent == []  # nothing in the turn ran, not even the ungated note
    assert any(isinstance(e, ApprovalRequested) and e.call_id == "call_2" for e in events)
    assert [e.kind for e in await session.entries()].count("approval_request") == 1


async def test_small_gifts_need_no_approval() -> None:
    result = await gift_agent(reply(tool_calls=[("send_gift", {"total": 10})]), reply("ok")).run(
        "x"
    )
    assert result.status is RunStatus.COMPLETED and sent == [10]


async def test_approve_then_resume_runs_the_turn_and_continues() -> None:
    agent = gift_agent(
        reply(tool_calls=[("note", {"text": "hi"}), ("send_gift", {"total": 900})]),
        reply("gift sent"),
    )
    runtime = Runtime()
    session = await runtime.create_session(agent)
    await session.run("go")
    # another Session object holding only the id decides
    other = await runtime.open_session(session.id, agent)
    await other.approve("call_2", note="ok by finance")
    result = await session.resume()
    assert result.status is RunStatus.COMPLETED and result.text == "gift sent"
    assert sent == [900]
    results = (await session.transcript())[2].results
    assert [(r.content, r.is_error) for r in results] == [("noted", False), ("sent 900.0", False)]


async def test_deny_gives_an_error_result_with_the_note() -> None:
    model_agent = gift_agent(reply(tool_calls=[("send_gift", {"total": 900})]), reply("understood"))
    session = await Runtime().create_session(model_agent)
    await session.run("go")
    await session.deny("call_1", note="too expensive")
    result = await session.resume()
    assert result.text == "understood" and sent == []
    denied = (await session.transcript())[2].results[0]
    assert denied.is_error and "too expensive" in denied.content


async def test_decisions_are_write_once() -> None:
    session = await Runtime().create_session(
        gift_agent(reply(tool_calls=[("send_gift", {"total": 900})]))
    )
    await session.run("go")
    await session.approve("call_1")
    await session.approve("call_1")  # the same decision again is a no-op
    with pytest.raises(ApprovalConflict):
        await session.deny("call_1")
    assert [e.kind for e in await session.entries()].count("approval_decision") == 1
    with pytest.raises(TaskloomError, match="no approval request"):
        await session.approve("call_404")


async def test_resume_with_missing_decisions_lists_them() -> None:
    agent = gift_agent(
        reply(tool_calls=[("send_gift", {"total": 600}), ("send_gift", {"total": 700})])
    )
    session = await Runtime().create_session(agent)
    await session.run("go")
    await session.approve("call_1")
    with pytest.raises(ApprovalsMissing) as info:
        await session.resume()
    assert info.value.call_ids == ["call_2"]
    assert sent == []


async def test_a_new_run_while_parked_is_refused() -> None:
    session = await Runtime().create_session(
        gift_agent(reply(tool_calls=[("send_gift", {"total": 900})]))
    )
    await session.run("go")
    with pytest.raises(TaskloomError, match="awaiting approval"):
        await session.run("something else")


async def test_resume_without_a_parked_turn_is_refused() -> None:
    session = await Runtime().create_session(gift_agent(reply("hello")))
    await session.run("hi")
    with pytest.raises(TaskloomError, match="no turn parked"):
        await session.resume()
    assert [e.kind for e in await session.entries()].count("run_started") == 1
