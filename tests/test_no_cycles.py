"""A finished run leaves no reference cycles: everything it made is freed by
reference counting, so the garbage collector has nothing to chase and stays
out of the way of the runs that follow (a run that left its session in a
cycle made a full collection every few hundred runs)."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator

import pytest

from taskloom import Agent, Compaction, RunOptions, tool
from taskloom.models import ScriptedModel, reply


@tool(blocking=False)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> list[object]:
    return [reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(3)] + [reply("done")]


@pytest.fixture
async def collector_paused() -> AsyncIterator[None]:
    # One run first: what a process sets up once (lazy imports) is not a run's.
    await agents(1)[0].run("go")
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def agents(n: int, **options: object) -> list[Agent]:
    return [Agent("a", ScriptedModel(script()), tools=[add], **options) for _ in range(n)]  # type: ignore[arg-type]


async def test_runs_leave_nothing_for_the_collector(collector_paused: None) -> None:
    for agent in agents(20):
        assert (await agent.run("go")).text == "done"
    assert gc.collect() == 0


async def test_streamed_runs_and_runs_with_a_compaction_policy_leave_nothing_either(
    collector_paused: None,
) -> None:
    for agent in agents(10, compaction=Compaction()):
        events = [e async for e in agent.stream("go", options=RunOptions(max_rounds=10))]
        assert events
    assert gc.collect() == 0
