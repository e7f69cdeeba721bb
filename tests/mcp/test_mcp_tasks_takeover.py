"""A SIGKILLed MCP task poller is replaced at once: the session's next run, in
a new process on the same machine, polls the task at its first boundary (the
dead holder of the task's lease is known dead), so the result arrives within
seconds of that run's start, not once a lease lapsed; and once (SQLite and
PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid

import pytest
from mcp.client import Client
from tasks_support import REPORT, client_agent, mcp_tasks, news
from test_mcp_tasks_crash import Served, _start_child, served  # noqa: F401 (fixture)
from test_mcp_tasks_serve import Tasks, _until

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Runtime
from taskloom.events import WorkFinished
from taskloom.models import FunctionModel

pytestmark = pytest.mark.slow


async def test_a_sigkilled_poller_is_replaced_at_the_next_runs_first_boundary(
    served: Served,  # noqa: F811 (the fixture)
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    session_id = uuid.uuid4().hex
    # The dead process's registrations keep the service's own lease (30 s):
    # the take-over must not wait for it.
    child = _start_child(served.url, url, schema, session_id, "default")
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("READY Still waiting for the gate."), line
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(15)
        if child.stdout is not None:
            child.stdout.close()

    agent = client_agent(served.url)
    model = agent.model
    assert isinstance(model, FunctionModel)
    async with Runtime(store=open_durable(url, schema)) as runtime:
        [task] = await mcp_tasks(runtime, session_id)
        assert task.status is None
        # The task ends on the server while nobody polls it.
        served.gate.write_text("by the test")
        async with Client(served.url, extensions=[Tasks()]) as client:
            await _until(client, task.task_id, "completed")
        loop = asyncio.get_running_loop()
        finished_at: list[float] = []
        finished = asyncio.Event()

        def seen(event: object) -> None:
            if isinstance(event, WorkFinished):
                finished_at.append(loop.time())
                finished.set()

        runtime.background.emit = seen
        session = await runtime.open_session(session_id, agent)
        began = loop.time()
        runs = 0
        while not finished_at and loop.time() < began + 10:
            await session.run("Any news?")
            runs += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), 0.2)
        assert finished_at, "the task's result never arrived"
        took = finished_at[0] - began
        print(f"\nresult delivered {took:.2f} s after the new run's start ({runs} run(s))")
        await session.run("And now?")
        last = await session.run("Anything else?")
        tasks = await mcp_tasks(runtime, session_id)
        pending = await runtime.background.inbox.pending(session_id)

    assert took < 3.0
    carrying = [r for r in model.requests if REPORT in news(r)]
    assert len(carrying) == 1, [news(r) for r in carrying]
    assert "by the test" in news(carrying[0])
    assert last.text == "Still waiting for the gate."
    assert pending == []
    assert [t.status for t in tasks] == ["done"]
