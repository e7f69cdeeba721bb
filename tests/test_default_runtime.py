"""`Agent.run` without a runtime: one in-memory runtime per event loop, whose
one-off sessions are forgotten once their runs and work have ended, and which
is closed when `asyncio.run` ends."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from taskloom import Agent, RunStatus, Runtime, ToolContext, tool
from taskloom.backends import session_lease_key
from taskloom.background import BackgroundService
from taskloom.delegation import SubAgent
from taskloom.errors import SessionNotFound
from taskloom.models import ScriptedModel, reply
from taskloom.runtime import default_runtime


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    yield
    tracemalloc.stop()


def _held_by_backends() -> int:
    """Bytes that taskloom's backends (the stores, leases, registries and
    inboxes) allocated and still hold."""
    gc.collect()
    kept = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, "*/taskloom/backends/*")]
    )
    return sum(stat.size for stat in kept.statistics("filename"))


async def test_runs_of_one_loop_share_its_default_runtime_and_leave_nothing_behind(
    traced: None,
) -> None:
    seen: list[Runtime] = []

    @tool(blocking=False)
    def where(ctx: ToolContext) -> str:
        """Note the runtime this call runs on."""
        seen.append(ctx.runtime)  # type: ignore[arg-type]
        return "noted"

    agent = Agent(
        "a", ScriptedModel([reply(tool_calls=[("where", {})]), reply("ok")] * 55), tools=[where]
    )
    for _ in range(5):  # what a process sets up once is not a run's
        await agent.run("go")
    before = _held_by_backends()
    for _ in range(50):
        result = await agent.run("go")
        assert result.status is RunStatus.COMPLETED
    rt = default_runtime()
    assert len(seen) == 55 and all(r is rt for r in seen)
    assert await rt.store.list() == []
    # A session a run left behind holds a few hundred bytes: fifty, far more.
    assert _held_by_backends() - before < 1_000


async def test_a_run_that_delegated_forgets_its_children_too(traced: None) -> None:
    child = SubAgent("helper", "Helps.", ScriptedModel([reply("helped")] * 22), "Help.")
    turns = [
        reply(tool_calls=[("helper", {"task": "t1"}), ("helper", {"task": "t2"})]),
        reply("done"),
    ]
    lead = Agent("lead", ScriptedModel(turns * 11), tools=[child])
    await lead.run("go")
    before = _held_by_backends()
    for _ in range(10):
        result = await lead.run("go")
        assert result.status is RunStatus.COMPLETED and result.text == "done"
    assert await default_runtime().store.list() == []
    assert _held_by_backends() - before < 1_000


async def test_a_session_is_kept_while_work_it_started_still_runs() -> None:
    release = asyncio.Event()
    started: list[str] = []

    async def work() -> str:
        await release.wait()
        return "finished"

    @tool
    async def launch(ctx: ToolContext) -> str:
        """Start background work."""
        service = BackgroundService.of(ctx.runtime)  # type: ignore[arg-type]
        started.append(await service.start(ctx, "job", "a job", work))
        return "started"

    # The run is reminded of the work once before it may end: "ok" twice.
    model = ScriptedModel([reply(tool_calls=[("launch", {})]), reply("ok"), reply("ok")])
    rt = default_runtime()
    result = await Agent("a", model, tools=[launch]).run("go")
    assert result.status is RunStatus.COMPLETED and started
    sid = result.session_id
    # Its work still runs: nothing is lost under it.
    assert [meta.id for meta in await rt.store.list()] == [sid]
    task = BackgroundService.of(rt).task_for(sid, started[0])
    assert task is not None
    release.set()
    await task
    for _ in range(20):  # the forgetting task runs once the work's task is done
        if not await rt.store.list():
            break
        await asyncio.sleep(0)
    assert await rt.store.list() == []
    with pytest.raises(SessionNotFound):
        await rt.store.load(sid)
    leases: Any = rt.store.leases  # the default runtime's memory leases
    key = session_lease_key(sid)
    assert leases.generation(key) == 0 and await leases.current(key) is None


def test_each_asyncio_run_gets_its_own_default_runtime_closed_at_its_end() -> None:
    closed: list[Runtime] = []

    class Probe:
        def __init__(self, rt: Runtime) -> None:
            self.rt = rt

        async def close(self) -> None:
            closed.append(self.rt)

    async def main() -> Runtime:
        result = await Agent("a", ScriptedModel([reply("hi")])).run("go")
        assert result.text == "hi"
        rt = default_runtime()
        rt.service(Probe, Probe)
        assert rt not in closed
        return rt

    first = asyncio.run(main())
    second = asyncio.run(main())
    assert first is not second
    assert closed == [first, second]


async def test_a_given_runtime_keeps_its_sessions() -> None:
    rt = Runtime()
    result = await Agent("a", ScriptedModel([reply("hi")])).run("go", runtime=rt)
    session = await rt.open_session(result.session_id, Agent("a", ScriptedModel([])))
    assert [m.text for m in await session.transcript()] == ["go", "hi"]


async def test_the_shared_client_keeps_the_connections_of_a_burst_of_runs() -> None:
    # httpx's default keeps 20 idle connections: a second burst of 50
    # concurrent runs would connect 30 times again.
    from taskloom.models import OpenAIChatModel
    from taskloom.testing.fake_server import FakeServer

    async with FakeServer() as server:
        server.script(*[FakeServer.reply("hi") for _ in range(100)])
        model = OpenAIChatModel("gpt-4.1-mini", api_key="k", base_url=server.base_url)
        agent = Agent("a", model)
        for _ in range(2):
            results = await asyncio.gather(*(agent.run("go") for _ in range(50)))
            assert all(r.text == "hi" for r in results)
        assert server.connections <= 50
