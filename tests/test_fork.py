"""Forking a session at any entry: the copy resumes, the original is untouched."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from pg import open_durable, pg_schema, requires_postgres  # noqa: F401 (fixture)
from taskloom import Agent, Message, RunStatus, Runtime, SubAgent, ToolEffect, tool
from taskloom.entries import Entry, EntryKind
from taskloom.errors import UsageError
from taskloom.log import INTERRUPTED, SessionLog
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply
from taskloom.runtime import FORKED_FROM


@tool(effect=ToolEffect.READ_ONLY)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(needs_approval=True)
def pay(amount: float) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def researcher() -> SubAgent:
    return SubAgent(
        "researcher",
        "Researches one topic.",
        ScriptedModel([reply("tides are tidal")]),
        "You research.",
    )


def lead(model: Any) -> Agent[Any, Any]:
    return Agent("lead", model, "Lead.", tools=[add, pay, researcher().tool()])


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)])
def make_runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Runtime]:
    if request.param == "memory":
        runtime = Runtime()
        return lambda: runtime
    if request.param == "sqlite":
        url, schema = f"sqlite:///{tmp_path / 'fork.db'}", "-"
    else:
        from pg import PG_DSN

        url, schema = PG_DSN, request.getfixturevalue("pg_schema")
    return lambda: Runtime(store=open_durable(url, schema))


@pytest.fixture
async def runtime(make_runtime: Callable[[], Runtime]) -> AsyncIterator[Runtime]:
    async with make_runtime() as rt:
        yield rt


async def recorded_session(runtime: Runtime) -> Any:
    """A session of three runs: tool rounds, a delegation, an approval, a steer."""
    model = ScriptedModel(
        [
            reply("adding", tool_calls=[("add", {"a": 1, "b": 2})]),
            reply("asking", tool_calls=[("researcher", {"task": "tides"})]),
            reply("three, and tides are tidal"),
            reply("paying", tool_calls=[("pay", {"amount": 10.0})]),
            reply("paid"),
            reply(tool_calls=[("add", {"a": 2, "b": 2}), ("add", {"a": 3, "b": 3})]),
            reply("and one more", tool_calls=[("add", {"a": 5, "b": 5})]),
            reply("four, six and ten"),
        ]
    )
    session = await runtime.create_session(lead(model), metadata={"system": "Lead."})
    assert (await session.run("add and research")).status is RunStatus.COMPLETED
    parked = await session.run("pay ten")
    assert parked.status is RunStatus.AWAITING_APPROVAL
    await session.approve(parked.pending[0].id)
    assert (await session.resume()).status is RunStatus.COMPLETED
    await session.steer("be brief")
    assert (await session.run("more sums")).status is RunStatus.COMPLETED
    return session


def assert_replayable(messages: list[Message]) -> None:
    """Every tool call has exactly one result, in call order, right after its turn."""
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            answer = messages[i + 1]
            assert answer.role == "tool", f"turn {i} has no results: {messages[i + 1 :]}"
            assert [r.tool_call_id for r in answer.results] == [c.id for c in m.tool_calls]
        if m.role == "tool":
            before = messages[i - 1]
            assert before.role == "assistant"
            assert {r.tool_call_id for r in m.results} == {c.id for c in before.tool_calls}


def shape(entries: list[Entry]) -> list[tuple[Any, ...]]:
    return [(e.kind, dict(e.data), e.run_id, e.position) for e in entries]


async def test_a_fork_at_every_entry_of_a_tree_runs_on(runtime: Runtime) -> None:
    original = await recorded_session(runtime)
    entries = await original.entries()
    assert EntryKind.SUBAGENT in {e.kind for e in entries}
    before = shape(entries)
    for cut in range(1, len(entries) + 1):
        fork = await original.fork(at=cut, agent=lead(ScriptedModel([reply("ok")])))
        assert shape((await fork.entries())[:-1]) == before[:cut]
        assert await fork.pending() == []
        result = await fork.run("go on")
        if result.status is RunStatus.AWAITING_APPROVAL:
            for call in result.pending:
                await fork.approve(call.id)
            result = await fork.resume()
        assert result.status is RunStatus.COMPLETED, (cut, result)
        assert result.text == "ok"
        messages = await fork.transcript()
        assert_replayable(messages)
        assert Message.user("go on") in messages
        # Forked children are the original's: reading the tree still works.
        await fork.transcript(include_children=True)
    assert shape(await original.entries()) == before


@tool(effect=ToolEffect.READ_ONLY, idempotent=True)
def look(item: str) -> str:
    """Look an item up (safe to run twice)."""
    return f"{item} is on the shelf"


@tool(effect=ToolEffect.WRITE)
def note(text: str) -> str:
    """Write a note (runs alone, not idempotent)."""
    return f"noted {text}"


def clerk(model: Any) -> Agent[Any, Any]:
    return Agent("clerk", model, "Clerk.", tools=[add, look, note, pay])


async def clerk_session(runtime: Runtime) -> Any:
    """Three runs: a parallel batch, a turn run in steps, an approved payment,
    a steer, and at the end a turn parked on a payment nobody decided."""
    model = ScriptedModel(
        [
            reply("looking", tool_calls=[("look", {"item": "tea"}), ("add", {"a": 1, "b": 2})]),
            reply(
                tool_calls=[
                    ("note", {"text": "tea"}),
                    ("look", {"item": "cake"}),
                    ("add", {"a": 2, "b": 2}),
                ]
            ),
            reply("tea and cake"),
            reply("paying", tool_calls=[("pay", {"amount": 10.0}), ("add", {"a": 3, "b": 3})]),
            reply("paid"),
            reply(tool_calls=[("pay", {"amount": 5.0}), ("look", {"item": "milk"})]),
        ]
    )
    session = await runtime.create_session(clerk(model))
    assert (await session.run("tea?")).status is RunStatus.COMPLETED
    parked = await session.run("pay ten")
    await session.approve(parked.pending[0].id)
    assert (await session.resume()).status is RunStatus.COMPLETED
    await session.steer("be brief")
    assert (await session.run("pay five")).status is RunStatus.AWAITING_APPROVAL
    return session


def answers() -> ScriptedModel:
    return ScriptedModel([reply("ok")] * 3)


async def test_a_fork_at_every_cut_is_its_origin_and_runs_on_as_a_resume_would(
    runtime: Runtime,
) -> None:
    original = await clerk_session(runtime)
    entries = await original.entries()
    kinds = {e.kind for e in entries}
    assert {EntryKind.APPROVAL_REQUEST, EntryKind.CALLS_STARTED, EntryKind.STEER} <= kinds
    before = shape(entries)
    seen = {"parked": 0, "cut off": 0, "at rest": 0}
    for cut in range(1, len(entries) + 1):
        fork = await original.fork(at=cut, agent=clerk(answers()))
        # Nothing made up: the origin's history, then the link to it.
        origin = SessionLog.folded(entries[:cut])
        assert list(await fork.transcript()) == list(origin.messages), cut
        assert await fork.pending() == [], cut
        forked = await fork.entries()
        assert shape(forked[:cut]) == before[:cut], cut
        assert [shape([e])[0][:2] for e in forked[cut:]] == [
            (EntryKind.FORK_LINK, {"session_id": original.id, "position": cut})
        ]
        # The origin cut off right there, then run on: what the fork's first
        # run must do with what the cut left open.
        crashed = await runtime.create_session(clerk(answers()))
        for entry in entries[:cut]:
            await runtime.store.append(crashed.id, entry)
        crashed = await runtime.open_session(crashed.id, clerk(answers()))
        result = await fork.run(None)
        if origin.parked():
            seen["parked"] += 1
            # The payment is asked about again, in the fork; nothing ran.
            gated = [c.id for c in origin.parked() if c.name == "pay"]
            assert result.status is RunStatus.AWAITING_APPROVAL, (cut, result)
            assert [p.id for p in result.pending] == gated
            assert [c.id for c in await fork.pending()] == gated
            assert await fork.transcript() == origin.messages
            for call_id in gated:
                await fork.approve(call_id)
            for call in await crashed.pending():
                await crashed.approve(call.id)
            result, expected = await fork.resume(), await crashed.resume()
        else:
            seen["cut off" if origin.cut_off() else "at rest"] += 1
            expected = await crashed.run(None)
        assert (result.status, result.text) == (expected.status, expected.text), cut
        assert await fork.transcript() == await crashed.transcript(), cut
    assert seen["parked"] >= 4 and seen["cut off"] >= 4, seen
    assert shape(await original.entries()) == before


async def test_a_fork_of_a_parked_turn_asks_again_and_keeps_the_input(runtime: Runtime) -> None:
    model = ScriptedModel([reply(tool_calls=[("pay", {"amount": 5.0}), ("add", {"a": 1, "b": 1})])])
    session = await runtime.create_session(lead(model))
    parked = await session.run("pay and add")
    assert parked.status is RunStatus.AWAITING_APPROVAL
    await session.deny(parked.pending[0].id, note="too much")
    fork = await session.fork(agent=lead(ScriptedModel([reply("not paid then")])))
    # The origin's request and its denial stay with the origin.
    assert await fork.pending() == []
    asked = await fork.run("never mind")
    assert asked.status is RunStatus.AWAITING_APPROVAL
    assert [p.id for p in asked.pending] == [parked.pending[0].id]
    assert [m.role for m in await fork.transcript()] == ["user", "assistant"]
    await fork.deny(parked.pending[0].id, note="no")
    result = await fork.resume()
    assert result.status is RunStatus.COMPLETED
    messages = await fork.transcript()
    assert [(r.tool_name, r.content) for r in messages[2].results] == [
        ("pay", "The user denied this tool call; it was not run. Note from the user: no"),
        ("add", "2"),
    ]
    assert messages[3] == Message.user("never mind")  # kept, after the turn's results
    assert messages[4].text == "not paid then"
    # The original still waits, with its own decision.
    await session.journal.sync()
    decision = session.journal.log.decision(parked.pending[0].id)
    assert decision is not None and decision.note == "too much"


async def test_fork_by_round_lets_the_model_answer_that_round_again(runtime: Runtime) -> None:
    original = await recorded_session(runtime)
    fork = await original.fork(
        round=3, agent=lead(ScriptedModel([reply("a different third answer")]))
    )
    messages = await fork.transcript()
    assert messages[-1].role == "tool"  # the delegation's result, round 2's end
    result = await fork.run(None)
    assert result.text == "a different third answer"
    by_message = await original.fork(at=(await original.transcript())[0])
    assert [e.kind for e in await by_message.entries()] == [
        EntryKind.RUN_STARTED,
        EntryKind.MESSAGE,
        EntryKind.FORK_LINK,
    ]


async def test_fork_refuses_cuts_the_log_does_not_have(runtime: Runtime) -> None:
    original = await recorded_session(runtime)
    last = len(await original.entries())
    with pytest.raises(UsageError, match="cannot fork at"):
        await original.fork(at=last + 1)
    with pytest.raises(UsageError, match="no round 99"):
        await original.fork(round=99)
    with pytest.raises(UsageError, match="does not hold"):
        await original.fork(at=Message.user("never said"))


@pytest.mark.parametrize("at", [1.5, True, False, "3", 0, -1])
async def test_fork_refuses_a_position_that_is_not_one(runtime: Runtime, at: Any) -> None:
    original = await recorded_session(runtime)
    before = {m.id for m in await runtime.store.list()}
    with pytest.raises(UsageError, match=r"fork at= takes .* whole number of at least 1"):
        await original.fork(at=at)
    with pytest.raises(UsageError, match=r"fork round= takes .* whole number of at least 1"):
        await original.fork(round=at)
    assert {m.id for m in await runtime.store.list()} == before


async def test_a_fork_can_live_in_another_store(runtime: Runtime) -> None:
    original = await recorded_session(runtime)
    async with Runtime() as elsewhere:
        fork = await original.fork(
            at=10, runtime=elsewhere, agent=lead(ScriptedModel([reply("ok")]))
        )
        assert fork.runtime is elsewhere
        assert shape((await fork.entries())[:10]) == shape((await original.entries())[:10])
        assert (await fork.run("go")).status is RunStatus.COMPLETED


def test_the_cli_prints_the_fork_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from taskloom.backends import open_backend
    from taskloom.cli import main

    store = f"sqlite:///{tmp_path / 'cli.db'}"

    async def record() -> str:
        async with Runtime(store=store) as runtime:
            return str((await recorded_session(runtime)).id)

    original = asyncio.run(record())
    assert main(["sessions", "fork", original, "--at", "7", "--store", store]) == 0
    fork_id = capsys.readouterr().out.strip()
    assert main(["sessions", "fork", original, "--round", "3", "--store", store]) == 0
    by_round = capsys.readouterr().out.strip()

    async def read() -> tuple[Any, ...]:
        opened = open_backend(store).store
        try:
            return (
                await opened.get(fork_id),
                await opened.load(fork_id),
                await opened.load(original),
                await opened.get(by_round),
            )
        finally:
            await opened.close()  # type: ignore[attr-defined]

    meta, forked, entries, round_meta = asyncio.run(read())
    assert meta.metadata[FORKED_FROM] == {"session_id": original, "position": 7}
    assert shape(forked[:7]) == shape(entries[:7])
    assert round_meta.metadata[FORKED_FROM]["session_id"] == original
    assert main(["sessions", "fork", original, "--at", "999", "--store", store]) == 2
    assert "cannot fork at 999" in capsys.readouterr().err
    # The CLI's numbers meet the API's rule, with the API's words.
    for option in ("--at", "--round"):
        for bad in ("0", "-1"):
            assert main(["sessions", "fork", original, option, bad, "--store", store]) == 2
            assert "whole number of at least 1" in capsys.readouterr().err, (option, bad)
        for bad in ("1.5", "3x", "true"):
            with pytest.raises(SystemExit) as refused:
                main(["sessions", "fork", original, option, bad, "--store", store])
            assert refused.value.code == 2
            assert "invalid int value" in capsys.readouterr().err


async def test_a_fork_that_fails_midway_leaves_no_session(runtime: Runtime) -> None:
    from taskloom.runtime import fork_session

    original = await recorded_session(runtime)
    target = runtime.store
    before = {m.id for m in await target.list()}

    class Failing:
        """The runtime's store, failing the fifth append of the copy."""

        def __init__(self) -> None:
            self.appends = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(target, name)

        async def append(self, session_id: str, entry: Entry, **kw: Any) -> int:
            self.appends += 1
            if self.appends == 5:
                raise OSError("disk full")
            return await target.append(session_id, entry, **kw)

    with pytest.raises(OSError, match="disk full"):
        await fork_session(target, original.id, 10, into=Failing())  # type: ignore[arg-type]
    assert {m.id for m in await target.list()} == before


async def test_a_fork_at_a_message_object_finds_that_very_message(runtime: Runtime) -> None:
    session = await runtime.create_session(
        Agent("a", ScriptedModel([reply("same"), reply("same")]))
    )
    await session.run("hi")
    await session.run("hi")
    first = session.journal.log.messages[1]
    assert first.text == "same" and session.journal.log.messages[3] == first  # equal, not the same
    fork = await session.fork(first)
    await fork.journal.sync()
    assert [m.text for m in fork.journal.log.messages] == ["hi", "same"]
    second = await session.fork(session.journal.log.messages[3])
    await second.journal.sync()
    assert [m.text for m in second.journal.log.messages] == ["hi", "same", "hi", "same"]


async def test_a_fork_of_a_turn_held_on_a_childs_escalation_leaves_the_child_alone(
    runtime: Runtime,
) -> None:
    paid: list[float] = []

    @tool(needs_approval=True)
    def transfer(amount: float) -> str:
        """Move money."""
        paid.append(amount)
        return f"moved {amount}"

    def child(request: ModelRequest) -> Any:
        if any(m.results for m in request.messages):
            return reply("moved")
        return reply(tool_calls=[("transfer", {"amount": 70.0})])

    def boss(request: ModelRequest) -> Any:
        results = [r.content for m in request.messages for r in m.results]
        return (
            reply(f"got: {results[-1]}")
            if results
            else reply(tool_calls=[("payer", {"task": "pay"})])
        )

    payer = SubAgent(
        "payer", "Pays.", FunctionModel(child), tools=[transfer], on_approval="escalate"
    )
    agent = Agent("boss", FunctionModel(boss), tools=[payer.tool()])
    root = await runtime.create_session(agent)
    assert (await root.run("pay")).status is RunStatus.AWAITING_APPROVAL
    [escalated] = await root.pending()
    child_entries = shape(await runtime.store.load(escalated.session_id))
    fork = await root.fork()
    assert await fork.pending() == []
    result = await fork.run(None)
    # The delegation was cut off where the fork was made: answered as a crash
    # answers it, its child (the origin's) neither resumed nor written.
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"got: {INTERRUPTED}"
    assert shape(await runtime.store.load(escalated.session_id)) == child_entries
    assert paid == []
    assert [c.id for c in await root.pending()] == [escalated.id]
