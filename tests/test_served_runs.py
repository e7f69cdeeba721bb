"""`ServedRuns`, the layer both servers map runs to tasks with, as two
servers on one store (SQLite and PostgreSQL): both read a decided task at
once, many times over, and its run resumes once; one cancels a task the
other runs, and the run there is cancelled within 2 s."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
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
        one.service(ServedRuns, lambda _: first)  # closed with its runtime, as a server's
        other.service(ServedRuns, lambda _: second)
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


async def _in_flight(request: ModelRequest) -> Any:
    await asyncio.Event().wait()  # a model call that never answers by itself


async def test_a_cancel_through_another_server_cancels_the_run_within_2s(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    agent = Agent("waiter", FunctionModel(_in_flight))
    took: list[float] = []
    async with (
        Runtime(store=open_durable(url, schema), agents=[agent]) as one,
        Runtime(store=open_durable(url, schema), agents=[agent]) as other,
    ):
        running = ServedRuns(one, agent, lambda meta: True, look_every=0.2)
        cancelling = ServedRuns(other, agent, lambda meta: True)
        one.service(ServedRuns, lambda _: running)  # closed with its runtime, as a server's
        other.service(ServedRuns, lambda _: cancelling)
        for _ in range(5):
            task_id = await running.create("wait")
            await _until(cancelling, task_id, ServedState.WORKING)  # read by the other only
            began = time.monotonic()
            await cancelling.cancel(task_id)
            found = await cancelling.read(task_id)
            assert found is not None and found.state is ServedState.CANCELLED
            while running.running(task_id):
                assert time.monotonic() - began < 2, "the run here was not cancelled"
                await asyncio.sleep(0.02)
            took.append(time.monotonic() - began)
            found = await running.read(task_id)
            assert found is not None and found.state is ServedState.CANCELLED
    print(f"runs cancelled through the other server in {max(took):.2f}s at most")


async def test_a_run_cut_off_is_run_on_at_the_first_read_of_its_task(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    gate, asked = asyncio.Event(), asyncio.Event()

    async def model(request: ModelRequest) -> Any:
        asked.set()
        await gate.wait()
        return reply("answered")

    agent = Agent("waiter", FunctionModel(model))
    async with Runtime(store=open_durable(url, schema), agents=[agent]) as old:
        served = ServedRuns(old, agent, lambda meta: True)
        task_id = await served.create("wait")
        await asked.wait()
        await served.close()  # the server goes away: its run is cut off mid model call
    gate.set()
    async with Runtime(store=open_durable(url, schema), agents=[agent]) as new:
        again = ServedRuns(new, agent, lambda meta: True)
        new.service(ServedRuns, lambda _: again)
        await _until(again, task_id, ServedState.COMPLETED)
        found = await again.read(task_id)
    assert found is not None and found.result is not None
    assert found.result.text == "answered"


async def test_a_served_task_decided_from_the_command_line_is_gone_on_with_by_its_server(
    tmp_path: Path,
) -> None:
    # `taskloom approve` with only `--store` names no resume to run: the
    # task's server sees the decision and goes on with it.
    from cli_process import taskloom_cli

    url = f"sqlite:///{tmp_path / 'served.db'}"
    agent = Agent("payer", FunctionModel(_model), tools=[pay])
    paid.clear()
    async with Runtime(store=url, agents=[agent]) as runtime:
        runs = ServedRuns(runtime, agent, lambda meta: True, look_every=0.05)
        runtime.service(ServedRuns, lambda _: runs)
        task_id = await runs.create("pay")
        await _until(runs, task_id, ServedState.INPUT_REQUIRED)
        [call] = await (await runtime.open_session(task_id, agent)).pending()
        decided = await asyncio.to_thread(
            taskloom_cli, "approve", task_id, call.id, "--store", url, home=tmp_path
        )
        assert decided.returncode == 0, decided.stderr
        assert "is a served task: its server goes on with it" in decided.stdout
        assert "taskloom resume" not in decided.stdout
        await _until(runs, task_id, ServedState.COMPLETED)
    assert paid == [600]
