"""`ServedRuns`, the layer both servers map runs to tasks with: two servers
on one store read a decided task at once, many times over, and its run
resumes once (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, Runtime, ToolEffect, tool
from taskloom.entries import RunStartedEntry
from taskloom.messages import ToolResult
from taskloom.models import FunctionModel, ModelRequest, reply
from taskloom.runtime import ServedRuns, ServedState

pytestmark = pytest.mark.slow

TRIALS = 20

paid: list[int] = []


@tool(effect=ToolEffect.WRITE, needs_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount."""
    paid.append(amount)
    return f"paid {amount}"


def _model(request: ModelRequest) -> Any:
    results = [b.content for b in request.messages[-1].blocks if isinstance(b, ToolResult)]
    if results:
        return reply(f"done: {results[0]}")
    return reply(tool_calls=[("pay", {"amount": 600})])


async def _until(runs: ServedRuns, task_id: str, state: ServedState) -> None:
    for _ in range(400):
        found = await runs.read(task_id)
        assert found is not None
        if found.state is state:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"task {task_id} never became {state}")


async def test_a_decided_task_read_by_two_servers_at_once_resumes_once(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    agent = Agent("payer", FunctionModel(_model), tools=[pay])
    paid.clear()
    resumes: list[int] = []
    async with (
        Runtime(store=open_durable(url, schema), agents=[agent]) as one,
        Runtime(store=open_durable(url, schema), agents=[agent]) as other,
    ):
        first = ServedRuns(one, agent, lambda meta: True)
        second = ServedRuns(other, agent, lambda meta: True)
        for _ in range(TRIALS):
            task_id = await first.create("pay")
            await _until(first, task_id, ServedState.INPUT_REQUIRED)
            session = await one.open_session(task_id, agent)
            [call] = await session.pending()
            await session.approve(call.id)
            await asyncio.gather(*(runs.read(task_id) for runs in [first, second] * 5))
            await _until(second, task_id, ServedState.COMPLETED)
            entries = await one.store.load(task_id)
            resumes.append(sum(e.kind == RunStartedEntry.KIND for e in entries) - 1)
    print(f"trials {TRIALS}: resumes per task {sorted(set(resumes))}, payments {len(paid)}")
    assert resumes == [1] * TRIALS
    assert paid == [600] * TRIALS
