"""A turn run in several steps records each step before it starts, so a crash
tells the calls that never started from those that may have run (the real
kills are in test_crash_endings.py); a turn of one step records nothing."""

from __future__ import annotations

import json

from taskloom import Agent, Runtime, ToolEffect, tool
from taskloom.entries import CallsStarted, Entry, MessageEntry
from taskloom.log import INTERRUPTED, NOT_STARTED, SessionLog
from taskloom.messages import Message, ToolCall
from taskloom.models import ScriptedModel, reply


@tool
async def write(n: int) -> str:
    """Write something."""
    return f"wrote {n}"


@tool(effect=ToolEffect.READ_ONLY)
async def read(n: int) -> str:
    """Read something."""
    return f"read {n}"


async def steps_of(calls: list[tuple[str, dict[str, int], str]]) -> list[tuple[str, ...]]:
    model = ScriptedModel([reply(tool_calls=calls), reply("done")])
    session = await Runtime().create_session(Agent("bot", model, tools=[write, read]))
    await session.run("go")
    return [
        p.call_ids
        for e in await session.entries()
        if isinstance(p := e.payload, CallsStarted) and p.step
    ]


async def test_only_a_turn_of_several_steps_records_them() -> None:
    two_writes = [("write", {"n": 1}, "w1"), ("write", {"n": 2}, "w2")]
    assert await steps_of(two_writes) == [("w1",), ("w2",)]
    reads_then_write = [
        ("read", {"n": 1}, "r1"),
        ("read", {"n": 2}, "r2"),
        ("write", {"n": 3}, "w"),
    ]
    assert await steps_of(reads_then_write) == [("r1", "r2"), ("w",)]
    # One step: no extra write (the common turn costs what it did).
    assert await steps_of([("write", {"n": 1}, "w1")]) == []
    assert await steps_of([("read", {"n": 1}, "r1"), ("read", {"n": 2}, "r2")]) == []


def test_a_call_no_step_names_never_started_and_a_snapshot_keeps_it() -> None:
    calls = [ToolCall("w1", "write", {"n": 1}), ToolCall("w2", "write", {"n": 2})]
    entries = [
        Entry.of(MessageEntry(Message.user("go"))).placed(1),
        Entry.of(MessageEntry(Message.assistant(tool_calls=calls))).placed(2),
        Entry.of(CallsStarted(2, ("w1",), step=True)).placed(3),
    ]
    log = SessionLog.folded(entries)
    assert [r.content for r in log.cut_off_results().results] == [INTERRUPTED, NOT_STARTED]
    assert log.started == {}  # a step is no start counted against retries
    state = json.loads(json.dumps(log.snapshot_state()))
    restored = SessionLog()
    restored.restore(3, state, [], list(log.positions), sorted(log.call_ids))
    assert restored.never_started(calls[1]) and not restored.never_started(calls[0])
    # A snapshot written before step records were: nothing is known not to have run.
    del state["stepped"]
    older = SessionLog()
    older.restore(3, state, [], list(log.positions), sorted(log.call_ids))
    assert not older.in_steps
