"""The cancel (`StopSignal.cancel`, `Session.cancel`, deleting a session): it
aborts the model request and the tool calls in flight and ends the run
STOPPED within 2 s, its log whole and its transcript replayable. On memory,
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from barriers import GENEROUS, set_within
from stop_support import (  # noqa: F401 (the fixtures `runtime` and `store`)
    BOUND,
    assert_ends_stopped,
    assert_replayable,
    on_request,
    runtime_fixture,
    slow_model,
    stopped_in,
    store_fixture,
)
from taskloom import (
    Agent,
    ModelRequest,
    RunOptions,
    RunStatus,
    Runtime,
    Session,
    StopSignal,
    SubAgent,
    ToolContext,
    ToolEffect,
    tool,
)
from taskloom.models import FunctionModel, OpenAIChatModel, reply
from taskloom.testing.fake_server import FakeServer

# ---------------------------------------------------------------- the cancel


async def test_a_cancel_aborts_the_model_call_and_discards_its_turn(runtime: Runtime) -> None:
    asked = asyncio.Event()
    model = slow_model(asked, 30.0, "never", "after")
    session = await runtime.create_session(Agent("a", model))
    options = RunOptions()
    result, took = await stopped_in(session.run("go", options=options), asked, options.stop.cancel)

    assert took < BOUND, f"the cancelled run returned after {took:.2f}s"
    assert result.status is RunStatus.STOPPED and result.error == "cancelled"
    entries = await session.entries()
    assert not any(
        e.kind == "message" and e.data["message"]["role"] == "assistant" for e in entries
    )
    assert [m.role for m in await session.transcript()] == ["user"]
    assert_ends_stopped(entries, cancelled=True)
    assert (await session.run("again")).text == "after"


async def test_a_cancel_aborts_an_http_model_call() -> None:
    async with FakeServer() as server:
        server.script(FakeServer.reply("never", delay=30.0), FakeServer.reply("after"))
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")
        session = await Runtime().create_session(Agent("a", model))
        options = RunOptions()
        asked = asyncio.Event()
        run = session.run("go", options=options, emit=on_request(asked))
        result, took = await stopped_in(run, asked, lambda: options.stop.cancel("enough"))
        assert took < BOUND, f"the cancelled run returned after {took:.2f}s"
        assert result.status is RunStatus.STOPPED and result.error == "cancelled: enough"
        assert [m.role for m in await session.transcript()] == ["user"]
        assert (await session.run("again")).text == "after"


def replaying_model(server: FakeServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")


async def assert_replays(session: Session, runtime: Runtime) -> None:
    """The session's next run works, its whole transcript sent to a provider
    adapter as it is."""
    assert_replayable(await session.transcript())
    async with FakeServer() as server:
        server.script(FakeServer.reply("recovered"))
        again = await runtime.open_session(session.id, Agent("a", replaying_model(server)))
        result = await again.run("what happened?")
        assert result.status is RunStatus.COMPLETED and result.text == "recovered"
        sent = server.requests[0].body["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert calls and answered == calls


async def test_a_cancel_aborts_an_async_tool(runtime: Runtime) -> None:
    started = asyncio.Event()
    finished = []

    @tool
    async def wait_long() -> str:
        """Wait a long time."""
        started.set()
        await asyncio.sleep(30)
        finished.append(True)
        return "never"

    model = FunctionModel(lambda r: reply(tool_calls=[("wait_long", {})]))
    session = await runtime.create_session(Agent("a", model, tools=[wait_long]))
    options = RunOptions()
    result, took = await stopped_in(
        session.run("go", options=options), started, options.stop.cancel
    )

    assert took < BOUND, f"the cancelled run returned after {took:.2f}s"
    assert result.status is RunStatus.STOPPED and result.error == "cancelled"
    assert finished == []
    transcript = await session.transcript()
    assert [m.role for m in transcript] == ["user", "assistant", "tool"]
    (answer,) = transcript[2].results
    assert answer.is_error and "cancelled" in answer.content
    assert_ends_stopped(await session.entries(), cancelled=True)
    await assert_replays(session, runtime)


async def test_a_cancel_leaves_a_blocked_sync_tool_behind(runtime: Runtime) -> None:
    release, entered = threading.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    @tool
    def block() -> str:
        """Block until released."""
        loop.call_soon_threadsafe(entered.set)
        release.wait(30)
        return "released"

    model = FunctionModel(lambda r: reply(tool_calls=[("block", {})]))
    session = await runtime.create_session(Agent("a", model, tools=[block]))
    options = RunOptions()
    try:
        run = session.run("go", options=options)
        result, took = await stopped_in(run, entered, options.stop.cancel)
        assert took < BOUND, f"the cancelled run returned after {took:.2f}s"
        assert result.status is RunStatus.STOPPED and result.error == "cancelled"
        (answer,) = (await session.transcript())[2].results
        assert answer.is_error and "cancelled" in answer.content
        assert_ends_stopped(await session.entries(), cancelled=True)
        await assert_replays(session, runtime)
    finally:
        release.set()


async def test_a_cancel_answers_every_call_of_a_concurrent_turn() -> None:
    started = asyncio.Event()

    @tool(effect=ToolEffect.READ_ONLY)
    async def quick(n: int) -> str:
        """Answer at once."""
        return f"quick {n}"

    @tool(effect=ToolEffect.READ_ONLY)
    async def slow(n: int) -> str:
        """Answer late."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    calls = [("quick", {"n": 1}), ("slow", {"n": 2}), ("quick", {"n": 3})]
    model = FunctionModel(lambda r: reply(tool_calls=calls))
    session = await Runtime().create_session(Agent("a", model, tools=[quick, slow]))
    options = RunOptions()
    result, took = await stopped_in(
        session.run("go", options=options), started, options.stop.cancel
    )
    assert took < BOUND and result.status is RunStatus.STOPPED
    results = (await session.transcript())[2].results
    assert [(r.content, r.is_error) for r in results] == [
        ("quick 1", False),
        (results[1].content, True),
        ("quick 3", False),
    ]
    assert "cancelled" in results[1].content


async def test_a_tool_that_cancels_its_own_run_ends_it_at_once() -> None:
    @tool
    async def give_up(ctx: ToolContext) -> str:
        """Cancel the run, then wait."""
        ctx.stop.cancel("gave up")
        await asyncio.sleep(30)
        return "never"

    model = FunctionModel(lambda r: reply(tool_calls=[("give_up", {})]))
    session = await Runtime().create_session(Agent("a", model, tools=[give_up]))
    async with asyncio.timeout(BOUND):
        result = await session.run("go")
    assert result.status is RunStatus.STOPPED and result.error == "cancelled: gave up"
    assert_replayable(await session.transcript())


async def test_a_cancel_before_the_run_starts_nothing() -> None:
    asked: list[ModelRequest] = []
    model = FunctionModel(lambda r: asked.append(r) or reply("never"))
    options = RunOptions()
    options.stop.cancel()
    result = await Agent("a", model).run("go", options=options)
    assert result.status is RunStatus.STOPPED and result.error == "cancelled"
    assert asked == []


# ---------------------------------------------------------------- cancelling a session


@pytest.mark.parametrize("how", ["cancel_runs", "listeners.delete", "forget_session"])
async def test_cancelling_or_deleting_a_session_cancels_its_run_in_flight(
    runtime: Runtime, how: str
) -> None:
    asked = asyncio.Event()
    session = await runtime.create_session(Agent("a", slow_model(asked, 30.0, "never")))
    task = asyncio.ensure_future(session.run("go"))
    assert await set_within(asked)
    await asyncio.sleep(0.5)
    at = time.monotonic()
    if how == "cancel_runs":
        assert await runtime.cancel_runs(session.id, "no longer wanted") == 1
    elif how == "listeners.delete":
        await runtime.background.listeners.delete(session.id)
    else:
        await runtime.forget_session(session.id)
    async with asyncio.timeout(GENEROUS):
        result = await task
    took = time.monotonic() - at
    assert took < BOUND, f"the run ended {took:.2f}s after its session was cancelled"
    assert result.status is RunStatus.STOPPED
    reason = "no longer wanted" if how == "cancel_runs" else "the session was deleted"
    assert result.error == f"cancelled: {reason}"
    if how != "forget_session":
        assert_ends_stopped(await session.entries(), cancelled=True)
    assert await runtime.cancel_runs(session.id) == 0  # nothing runs any more


# ---------------------------------------------------------------- inline children


@pytest.mark.parametrize("children", [1, 2])
async def test_cancelling_a_parent_cancels_its_inline_children_in_flight(
    runtime: Runtime, children: int
) -> None:
    asked, asking = asyncio.Event(), []

    async def thinking(request: ModelRequest) -> Any:
        asking.append(request)
        if len(asking) == children:
            asked.set()
        await asyncio.sleep(30)
        return reply("never")

    sub = SubAgent("helper", "Helps.", FunctionModel(thinking))
    calls = [("helper", {"task": f"help {n}"}) for n in range(children)]
    lead = FunctionModel(lambda r: reply(tool_calls=calls))
    session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
    options = RunOptions()
    result, took = await stopped_in(session.run("go", options=options), asked, options.stop.cancel)

    assert took < BOUND, f"the cancelled parent returned after {took:.2f}s"
    assert result.status is RunStatus.STOPPED and result.error == "cancelled"
    entries = await session.entries()
    assert_ends_stopped(entries, cancelled=True)
    answers = (await session.transcript())[2].results
    assert len(answers) == children and all(a.is_error for a in answers)
    child_ids = [e.data["child_session_id"] for e in entries if e.kind == "subagent"]
    assert len(child_ids) == children
    for child_id in child_ids:
        child = await runtime.store.load(child_id)
        terminal = [e for e in child if e.kind == "subagent_result"]
        assert [e.data["status"] for e in terminal] == ["stopped"]
        assert_ends_stopped([e for e in child if e.kind != "subagent_result"], cancelled=True)
        assert not any(
            e.kind == "message" and e.data["message"]["role"] == "assistant" for e in child
        )


async def test_cancelling_a_child_alone_leaves_its_parent_running() -> None:
    asked = asyncio.Event()
    sub = SubAgent("helper", "Helps.", slow_model(asked, 30.0, "never"))
    turns = iter([reply(tool_calls=[("helper", {"task": "help"})]), reply("went on")])
    lead = FunctionModel(lambda r: next(turns))
    runtime = Runtime()
    session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
    task = asyncio.ensure_future(session.run("go"))
    assert await set_within(asked)
    child_id = next(e for e in await session.entries() if e.kind == "subagent").data[
        "child_session_id"
    ]
    assert await runtime.cancel_runs(child_id, "not needed") == 1
    async with asyncio.timeout(GENEROUS):
        result = await task
    assert result.status is RunStatus.COMPLETED and result.text == "went on"


@pytest.mark.parametrize("where", ["model", "tool"])
async def test_a_cancel_under_a_deadline_ends_stopped_not_at_the_deadline(where: str) -> None:
    started = asyncio.Event()

    @tool
    async def wait_long() -> str:
        """Wait a long time."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    async def answer(request: ModelRequest) -> Any:
        if where == "model":
            started.set()
            await asyncio.sleep(30)
        return reply(tool_calls=[("wait_long", {})])

    session = await Runtime().create_session(Agent("a", FunctionModel(answer), tools=[wait_long]))
    options = RunOptions(deadline=60)
    result, took = await stopped_in(
        session.run("go", options=options), started, options.stop.cancel
    )
    assert took < BOUND and result.status is RunStatus.STOPPED and result.error == "cancelled"
    assert_replayable(await session.transcript())
    assert_ends_stopped(await session.entries(), cancelled=True)


def test_a_cancel_after_a_stop_says_why_it_was_cancelled() -> None:
    parent = StopSignal()
    child = StopSignal(parent=parent)
    parent.set("wrapping up")
    assert child.is_set and not child.is_cancelled and child.cancel_reason is None
    parent.cancel("the user left")
    parent.cancel("again")  # the first cancel's reason stays
    assert child.is_cancelled and child.cancel_reason == "cancelled: the user left"
    assert parent.reason == "the user left"
    other = StopSignal()
    other.set("wrapping up")
    other.cancel()  # no reason of its own: the stop's stays
    assert other.cancel_reason == "cancelled: wrapping up"


async def test_a_sync_tool_may_cancel_its_own_run_from_its_thread() -> None:
    @tool
    def give_up(ctx: ToolContext) -> str:
        """Cancel the run from the tool's thread, then keep busy."""
        ctx.stop.cancel("gave up")
        time.sleep(0.2)
        return "done anyway"

    @tool
    async def wait_long() -> str:
        """Wait a long time."""
        await asyncio.sleep(30)
        return "never"

    model = FunctionModel(lambda r: reply(tool_calls=[("give_up", {}), ("wait_long", {})]))
    session = await Runtime().create_session(Agent("a", model, tools=[give_up, wait_long]))
    async with asyncio.timeout(BOUND):
        result = await session.run("go")
    assert result.status is RunStatus.STOPPED and result.error == "cancelled: gave up"
    results = (await session.transcript())[2].results
    # The tool's thread was left behind (its answer never awaited); the call
    # after it never started.
    assert [(r.content, r.is_error) for r in results] == [
        ("not finished: the run was cancelled; it may have partly run", True),
        ("not run: the run was cancelled", True),
    ]
