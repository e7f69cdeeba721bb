"""The graceful stop (`StopSignal.set`, `request_stop`): a stop that comes while
the model answers ends the run at the boundary right after the answer is
committed, its tool calls answered as not run; and trials of a stop or a
cancel at any instant of a run. On memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
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
    RunResult,
    RunStatus,
    Runtime,
    ToolEffect,
    tool,
)
from taskloom.models import FunctionModel, OpenAIChatModel, reply
from taskloom.testing.fake_server import FakeServer

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
