"""Stop and cancel, defined: a graceful stop ends the run at the boundary right
after the answer in flight is committed (its tools do not start); a cancel
aborts the model request and the tool calls in flight and ends the run
STOPPED within 2 s, its log whole. On memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from barriers import GENEROUS, set_within
from pg import PG_DSN, open_durable, requires_postgres
from taskloom import (
    Agent,
    Event,
    Message,
    ModelRequestStarted,
    RunOptions,
    RunResult,
    RunStatus,
    Runtime,
    Session,
    StopSignal,
    SubAgent,
    ToolContext,
    ToolEffect,
    tool,
)
from taskloom.entries import Entry
from taskloom.models import FunctionModel, ModelRequest, OpenAIChatModel, reply
from taskloom.stores import SessionStore
from taskloom.testing.fake_server import FakeServer

BOUND = 2.0
"""Seconds within which a cancelled run returns (the promise under test)."""


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str | SessionStore:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return open_durable(f"sqlite:///{tmp_path / 'taskloom.db'}", "-")
    return open_durable(PG_DSN, request.getfixturevalue("pg_schema"))


@pytest.fixture
async def runtime(store: str | SessionStore) -> AsyncIterator[Runtime]:
    async with Runtime(store=store) as rt:
        yield rt


def slow_model(
    asked: asyncio.Event, seconds: float, *answers: Any, calls: list[ModelRequest] | None = None
) -> FunctionModel:
    """A model whose first answer takes `seconds`; then `answers` in turn."""
    script = list(answers)

    async def answer(request: ModelRequest) -> Any:
        if calls is not None:
            calls.append(request)
        answer = script.pop(0)  # taken even if the request is cut off
        if not asked.is_set():
            asked.set()
            await asyncio.sleep(seconds)
        return answer

    return FunctionModel(answer)


async def stopped_in(
    run: Awaitable[RunResult], started: asyncio.Event, stop: Callable[[], None]
) -> tuple[RunResult, float]:
    """Start `run`, call `stop()` 0.5 s after `started` is set; the result and
    the seconds from the stop to the run's return."""
    task = asyncio.ensure_future(run)
    assert await set_within(started), "the model or tool never started"
    await asyncio.sleep(0.5)
    at = time.monotonic()
    stop()
    async with asyncio.timeout(GENEROUS * 4):
        result = await task
    took = time.monotonic() - at
    print(f"returned {took:.3f}s after the stop, {result.status.value}")
    return result, took


def on_request(asked: asyncio.Event) -> Callable[[Event], None]:
    """An `emit` that sets `asked` once a model request started."""

    def emit(event: Event) -> None:
        if isinstance(event, ModelRequestStarted):
            asked.set()

    return emit


def kinds(entries: list[Entry]) -> list[str]:
    return [e.kind for e in entries]


def assert_ends_stopped(entries: list[Entry], cancelled: bool) -> None:
    """The log's last run ended STOPPED, once, and says whether it was cancelled."""
    finished = [e for e in entries if e.kind == "run_finished"]
    assert finished and finished[-1] is entries[-1], kinds(entries)
    assert finished[-1].data["status"] == "stopped"
    error = finished[-1].data["error"]
    assert (error is not None and error.startswith("cancelled")) is cancelled, error
    assert kinds(entries).count("run_started") == len(finished)


def assert_replayable(messages: list[Message]) -> None:
    """Every tool call has exactly one result, in call order, right after its turn."""
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            answer = messages[i + 1]
            assert answer.role == "tool", f"turn {i} has no results: {messages[i + 1 :]}"
            assert [r.tool_call_id for r in answer.results] == [c.id for c in m.tool_calls]


# ---------------------------------------------------------------- the graceful stop


async def test_a_stop_while_the_model_answers_keeps_the_answer_and_runs_no_tool(
    runtime: Runtime,
) -> None:
    asked, ran = asyncio.Event(), []

    @tool
    def act(what: str) -> str:
        """Act."""
        ran.append(what)
        return "done"

    model = slow_model(asked, 3.0, reply("on it", tool_calls=[("act", {"what": "a"})]), "after")
    session = await runtime.create_session(Agent("a", model, tools=[act]))
    options = RunOptions()
    result, _ = await stopped_in(session.run("go", options=options), asked, options.stop.set)

    assert result.status is RunStatus.STOPPED and result.error is None
    assert ran == []  # the turn's tool never started
    transcript = await session.transcript()
    assert [m.role for m in transcript] == ["user", "assistant", "tool"]
    assert transcript[1].text == "on it"  # the answer is in the log, whole
    (answer,) = transcript[2].results
    assert answer.is_error and answer.content.startswith("not run: the run was stopped")
    entries = await session.entries()
    assert_ends_stopped(entries, cancelled=False)
    assert_replayable(transcript)
    # The next run goes on from there.
    assert (await session.run("again")).text == "after"


async def test_a_stop_request_written_while_the_model_answers_runs_no_tool(
    runtime: Runtime,
) -> None:
    """`request_stop` (what another process sharing the store uses) lands in the
    log while the model answers: the run's commit of the answer reads it."""
    asked, ran = asyncio.Event(), []

    @tool
    def act(what: str) -> str:
        """Act."""
        ran.append(what)
        return "done"

    model = slow_model(asked, 1.0, reply(tool_calls=[("act", {"what": "a"})]))
    session = await runtime.create_session(Agent("a", model, tools=[act]))
    task = asyncio.ensure_future(session.run("go"))
    assert await set_within(asked)
    await session.request_stop("from elsewhere")
    async with asyncio.timeout(GENEROUS):
        result = await task
    assert result.status is RunStatus.STOPPED and ran == []
    transcript = await session.transcript()
    assert [m.role for m in transcript] == ["user", "assistant", "tool"]
    assert transcript[2].results[0].content.startswith("not run: the run was stopped")


async def test_a_stop_while_the_final_answer_comes_ends_stopped_not_completed() -> None:
    asked = asyncio.Event()
    session = await Runtime().create_session(Agent("a", slow_model(asked, 3.0, "the answer")))
    options = RunOptions()
    result, _ = await stopped_in(session.run("go", options=options), asked, options.stop.set)
    assert result.status is RunStatus.STOPPED
    assert result.text == "the answer"
    assert [m.role for m in await session.transcript()] == ["user", "assistant"]


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_stop_during_an_http_model_call_keeps_its_answer(streamed: bool) -> None:
    ran: list[str] = []

    @tool
    def act(what: str) -> str:
        """Act."""
        ran.append(what)
        return "done"

    async with FakeServer() as server:
        server.script(FakeServer.reply("on it", tool_calls=[("act", {"what": "a"})], delay=3.0))
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")
        session = await Runtime().create_session(Agent("a", model, tools=[act]))
        options = RunOptions()
        asked = asyncio.Event()

        async def run() -> RunResult:
            if not streamed:
                return await session.run("go", options=options, emit=on_request(asked))
            stream = session.stream("go", options=options)
            async for event in stream:
                on_request(asked)(event)
            assert stream.result is not None
            return stream.result

        result, _ = await stopped_in(run(), asked, options.stop.set)
        assert len(server.requests) == 1

    assert result.status is RunStatus.STOPPED
    assert ran == []
    transcript = await session.transcript()
    assert [m.role for m in transcript] == ["user", "assistant", "tool"]
    assert transcript[1].text == "on it" and transcript[1].tool_calls[0].name == "act"


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


@pytest.mark.parametrize("how", ["session.cancel", "listeners.delete", "forget_session"])
async def test_cancelling_or_deleting_a_session_cancels_its_run_in_flight(
    runtime: Runtime, how: str
) -> None:
    asked = asyncio.Event()
    session = await runtime.create_session(Agent("a", slow_model(asked, 30.0, "never")))
    task = asyncio.ensure_future(session.run("go"))
    assert await set_within(asked)
    await asyncio.sleep(0.5)
    at = time.monotonic()
    if how == "session.cancel":
        assert await session.cancel("no longer wanted") == 1
    elif how == "listeners.delete":
        await runtime.background.listeners.delete(session.id)
    else:
        await runtime.forget_session(session.id)
    async with asyncio.timeout(GENEROUS):
        result = await task
    took = time.monotonic() - at
    assert took < BOUND, f"the run ended {took:.2f}s after its session was cancelled"
    assert result.status is RunStatus.STOPPED
    reason = "no longer wanted" if how == "session.cancel" else "the session was deleted"
    assert result.error == f"cancelled: {reason}"
    if how != "forget_session":
        assert_ends_stopped(await session.entries(), cancelled=True)
    assert await session.cancel() == 0  # nothing runs any more


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


# ---------------------------------------------------------------- a cancel at any instant


@pytest.mark.parametrize("how", ["cancel", "set"])
async def test_a_stop_or_cancel_at_any_instant_leaves_the_log_whole(
    runtime: Runtime, how: str
) -> None:
    """Trials stopping or cancelling a run of quick rounds at random instants:
    wherever it lands (model request, tools, commits, boundary), the run
    returns STOPPED (at once for a cancel), every call has its one result in
    order, the run's end is recorded once, and the next run goes on."""
    import random

    rng = random.Random(36)

    @tool(effect=ToolEffect.READ_ONLY)
    async def look(n: int) -> str:
        """Look."""
        await asyncio.sleep(rng.random() * 0.004)
        return f"seen {n}"

    @tool
    def note(n: int) -> str:
        """Note (a sync tool)."""
        time.sleep(rng.random() * 0.002)
        return f"noted {n}"

    async def answer(request: ModelRequest) -> Any:
        await asyncio.sleep(rng.random() * 0.004)
        if request.messages[-1].role == "user" and request.messages[-1].text == "again":
            return reply("fine")
        n = len(request.messages)
        return reply(tool_calls=[("look", {"n": n}), ("look", {"n": n + 1}), ("note", {"n": n})])

    landed: dict[str, int] = {}
    trials = 25
    for _ in range(trials):
        session = await runtime.create_session(
            Agent("a", FunctionModel(answer), tools=[look, note])
        )
        options = RunOptions()
        task = asyncio.ensure_future(session.run("go", options=options))
        await asyncio.sleep(rng.random() * 0.05)
        at = time.monotonic()
        getattr(options.stop, how)()
        async with asyncio.timeout(GENEROUS):
            result = await task
        assert time.monotonic() - at < BOUND
        assert result.status is RunStatus.STOPPED
        assert result.error == ("cancelled" if how == "cancel" else None)
        transcript = await session.transcript()
        assert_replayable(transcript)
        entries = await session.entries()
        assert_ends_stopped(entries, cancelled=how == "cancel")
        last = transcript[-1]
        cut = last.role == "tool" and any(r.content.startswith("not ") for r in last.results)
        where = "in a tool round" if cut else f"after a {last.role} message"
        landed[where] = landed.get(where, 0) + 1
        assert (await session.run("again")).text == "fine"
    print(f"{trials} {how}s landed: {landed}")


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
