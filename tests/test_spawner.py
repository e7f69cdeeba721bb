from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from barriers import Tally, set_within
from taskloom import Agent, ConfigurationError, ModelRequest, RunStatus, Runtime, ToolEffect, tool
from taskloom.backends.memory import MemoryLeases, MemoryStore
from taskloom.delegation import (
    ChildSpec,
    ChildStatus,
    ChildWorker,
    InlineDispatcher,
    Spawner,
    TaskDispatcher,
    WorkerType,
    child_status,
    console_tools,
)
from taskloom.entries import Entry
from taskloom.errors import StaleLeaseError
from taskloom.events import ToolCallFinished
from taskloom.models import FunctionModel, ScriptedModel, reply


@tool(effect=ToolEffect.READ_ONLY)
def fetch(url: str) -> str:
    """Fetch a page."""
    return f"page {url}"


@tool
def write_file(path: str) -> str:
    """Write a file."""
    return f"wrote {path}"


def worker_model(name: str = "small") -> FunctionModel:
    def answer(request: ModelRequest) -> Any:
        return reply(
            f"{request.system or ''}|{request.messages[0].text}|tools={[t.name for t in request.tools]}"
        )

    return FunctionModel(answer, name=name)


def spawn(**args: Any) -> tuple[str, dict[str, Any]]:
    """A call of the spawn tool by its default name."""
    return ("spawn_agent", args)


async def run_lead(
    spawner: Spawner, *calls: tuple[str, dict[str, Any]], runtime: Runtime | None = None
) -> tuple[Any, list[Any]]:
    lead = ScriptedModel([reply(tool_calls=list(calls)), reply("done")])
    rt = runtime or Runtime()
    session = await rt.create_session(Agent("lead", lead, tools=[spawner, *console_tools()]))
    result = await session.run("go")
    return result, next(m for m in lead.requests[1].messages if m.role == "tool").results


async def test_the_model_composes_a_worker() -> None:
    small, big = worker_model("small"), worker_model("big")
    spawner = Spawner(small, tools=[fetch, write_file], models=[big])
    _, results = await run_lead(
        spawner,
        spawn(
            name="reader",
            instructions="Read carefully.",
            task="read the docs",
            tools=["fetch"],
            model=big.spec,
        ),
    )
    answer = json.loads(results[0].content)["answer"]
    assert answer == "Read carefully.|read the docs|tools=['fetch']"
    assert len(big.requests) == 1 and len(small.requests) == 0


async def test_types_give_defaults() -> None:
    spawner = Spawner(
        worker_model(), tools=[fetch], types=[WorkerType("scout", "You scout.", tools=("fetch",))]
    )
    _, results = await run_lead(spawner, spawn(name="s1", task="look", type="scout"))
    assert json.loads(results[0].content)["answer"] == "You scout.|look|tools=['fetch']"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"name": "w", "task": ""}, "'task' is empty"),
        (
            {"name": "w", "task": "t", "tools": ["shell"]},
            "'shell' are not in the pool; allowed: fetch, write_file",
        ),
        (
            {"name": "w", "task": "t", "model": "openai:gpt-5"},
            "model 'openai:gpt-5' is not allowed; allowed: function:small",
        ),
        (
            {"name": "w", "task": "t", "type": "ghost"},
            "unknown worker type 'ghost'; available types: (none defined)",
        ),
        (
            {"name": "w", "task": "t", "mode": "background"},
            "mode 'background' is not available here",
        ),
    ],
)
async def test_policy_violations_are_answered_in_band(args: dict[str, Any], expected: str) -> None:
    result, results = await run_lead(
        Spawner(worker_model(), tools=[fetch, write_file]), spawn(**args)
    )
    assert result.status is RunStatus.COMPLETED
    assert results[0].is_error and expected in results[0].content


def test_configuration_mistakes_raise_at_construction() -> None:
    model = worker_model()
    inner = Spawner(model).tool()
    with pytest.raises(ConfigurationError, match="cannot be in its own pool"):
        Spawner(model, tools=[inner])
    with pytest.raises(ConfigurationError, match="two tools named 'fetch'"):
        Spawner(model, tools=[fetch, fetch])

    @tool(needs_approval=True)
    def pay() -> str:
        """Pay."""
        return "paid"

    with pytest.raises(ConfigurationError, match="needs approval"):
        Spawner(model, tools=[pay])
    with pytest.raises(ConfigurationError, match="names tools not in the pool"):
        Spawner(model, tools=[fetch], types=[WorkerType("w", "x", tools=("write_file",))])


async def test_max_children_is_enforced_atomically() -> None:
    gate = asyncio.Event()
    entered = Tally()
    refused = Tally()

    async def slow(request: ModelRequest) -> Any:
        entered.add()
        await gate.wait()
        return reply("finished")

    def on_event(event: Any) -> None:
        if isinstance(event, ToolCallFinished) and event.is_error:
            refused.add()

    spawner = Spawner(FunctionModel(slow), max_children=2)
    lead = ScriptedModel(
        [reply(tool_calls=[spawn(name=f"w{i}", task="t") for i in range(6)]), reply("done")]
    )
    session = await Runtime().create_session(Agent("lead", lead, tools=[spawner]))
    task = asyncio.create_task(session.run("go", emit=on_event))
    # All six spawns are decided while the first two workers still run.
    await entered.reached(2)
    await refused.reached(4)
    assert entered.count == 2  # never more than two live at once
    gate.set()
    await task
    results = lead.requests[1].messages[-1].results
    assert sum(not r.is_error for r in results) == 2
    refused = [r for r in results if r.is_error]
    assert len(refused) == 4 and all("at most 2 workers may be live" in r.content for r in refused)
    # slots free up again once the workers ended
    assert await Runtime().background.registry.list(session.id) == []


async def test_console_tools_find_read_steer_and_stop() -> None:
    gate = asyncio.Event()
    working = asyncio.Event()

    async def slow(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            working.set()
            await gate.wait()
            return reply(tool_calls=[("fetch", {"url": "x"})])
        return reply("final: " + request.messages[-1].text)

    runtime = Runtime()
    spawner = Spawner(FunctionModel(slow), tools=[fetch], dispatcher=TaskDispatcher())
    tools = {t.name: t for t in console_tools(wait_timeout=5, poll_interval=0.01)}

    lead_replies: list[Any] = [
        reply(tool_calls=[spawn(name="bg", task="work", tools=["fetch"], mode="background")])
    ]
    lead = ScriptedModel([*lead_replies, reply("spawned"), reply("still waiting, fine")])
    session = await runtime.create_session(Agent("lead", lead, tools=[spawner, *tools.values()]))
    tools = dict(session.tools)  # as the runtime offers them: bound to it
    result = await session.run("go")
    receipt = json.loads(lead.requests[1].messages[-1].results[0].content)
    assert receipt["status"] == "queued" and receipt["name"] == "bg"
    child_id = receipt["id"]
    assert result.status is RunStatus.COMPLETED

    from taskloom.tools import ToolContext as Ctx

    ctx = Ctx(
        run_id="r",
        session_id=session.id,
        call_id="c",
        agent=session.agent,
        runtime=runtime,
        controls=__import__("taskloom").RunOptions().bind(),
        emit=lambda e: None,
        record=session.journal.append,
    )
    assert await set_within(working)  # the worker runs, waiting on its model
    listing = (await tools["list_agents"].call({}, ctx)).content
    assert child_id[:8] in listing and "bg" in listing and "[running]" in listing
    by_prefix = await tools["steer_agent"].call({"agent": child_id[:10], "text": "hurry up"}, ctx)
    assert not by_prefix.is_error
    gate.set()
    read = (await tools["read_agent"].call({"agent": "bg", "wait": True}, ctx)).content
    # the steer was folded in at the child's next boundary, after its tool round
    assert "done" in read and "user: hurry up" in read and "REPORT: final: hurry up" in read
    # steering reached the child's log
    child_entries = await runtime.store.load(child_id)
    assert any(e.kind == "steer" and e.data["text"] == "hurry up" for e in child_entries)
    stopped = (await tools["stop_agent"].call({"agent": "bg"}, ctx)).content
    assert "already ended: done" in stopped
    missing = await tools["read_agent"].call({"agent": "nobody"}, ctx)
    assert missing.is_error and "your agents: bg" in missing.content
    await spawner.dispatcher.drain()  # type: ignore[union-attr]


async def test_a_background_child_reports_at_the_parents_next_boundary() -> None:
    runtime = Runtime()
    worker = ChildWorker(runtime)
    dispatcher = TaskDispatcher(worker)
    spawner = Spawner(worker_model(), tools=[fetch], dispatcher=dispatcher)

    async def lead_answer(request: ModelRequest) -> Any:
        n = len(request.messages)
        if n == 1:
            return reply(tool_calls=[spawn(name="bg", task="background work", mode="background")])
        if n == 3:
            await dispatcher.drain()  # the child finishes while the parent thinks
            return reply(tool_calls=[("fetch", {"url": "meanwhile"})])
        return reply("saw: " + " / ".join(m.text for m in request.messages if m.role == "user"))

    session = await runtime.create_session(
        Agent("lead", FunctionModel(lead_answer), tools=[spawner, fetch])
    )
    result = await session.run("go")
    assert "background agent 'bg'" in result.text and "finished" in result.text
    assert "background work" in result.text
    # acknowledged: a later run does not see it again
    assert await runtime.background.inbox.pending(session.id) == []


async def test_the_parent_is_reminded_of_a_running_background_child() -> None:
    gate = asyncio.Event()

    async def child(request: ModelRequest) -> Any:
        await gate.wait()
        return reply("child done")

    runtime = Runtime()
    dispatcher = TaskDispatcher(ChildWorker(runtime))
    spawner = Spawner(FunctionModel(child), dispatcher=dispatcher)
    seen: list[str] = []

    async def lead_answer(request: ModelRequest) -> Any:
        seen.append(request.messages[-1].text if request.messages[-1].role == "user" else "")
        if len(request.messages) == 1:
            return reply(tool_calls=[spawn(name="bg", task="slow", mode="background")])
        if len(seen) == 2:
            return reply("I think I'm done")
        if len(seen) == 3:
            gate.set()
            await dispatcher.drain()
            return reply("waiting")
        return reply("final")

    session = await runtime.create_session(
        Agent("lead", FunctionModel(lead_answer), tools=[spawner])
    )
    result = await session.run("go")
    assert "still running" in seen[2]  # the reminder kept the run going
    assert "child done" in seen[3]  # then the report arrived
    assert result.text == "final"


async def test_dispatchers_bind_to_the_spawning_runtime() -> None:
    dispatcher = InlineDispatcher()  # no worker: it gets one on the runtime that spawns
    spawner = Spawner(worker_model(), tools=[fetch], dispatcher=dispatcher)
    runtime = Runtime()
    result, results = await run_lead(
        spawner, spawn(name="bg", task="t", mode="background"), runtime=runtime
    )
    assert result.ok
    child_id = json.loads(results[0].content)["id"]
    assert dispatcher.worker.runtime is runtime
    assert await child_status(runtime, child_id) is ChildStatus.DONE


async def test_exactly_one_report_even_when_delivered_twice() -> None:
    runtime = Runtime()
    worker = ChildWorker(runtime)
    spawner = Spawner(worker_model(), dispatcher=InlineDispatcher(worker))
    result, results = await run_lead(
        spawner, spawn(name="bg", task="t", mode="background"), runtime=runtime
    )
    child_id = json.loads(results[0].content)["id"]
    parent_id = result.session_id
    spec = ChildSpec.from_dict((await runtime.store.load(child_id))[0].data["spec"])
    assert await worker.run(spec) is ChildStatus.DONE  # a redelivery: skips, does not rerun
    assert await ChildWorker(runtime).run(spec.to_json()) is ChildStatus.DONE
    kinds = [e.kind for e in await runtime.store.load(child_id)]
    assert kinds.count("subagent_result") == 1 and kinds.count("subagent_started") == 1
    # one notice in all (it was delivered and acked by the parent's run already)
    pending = await runtime.background.inbox.pending(parent_id)
    assert pending == []


async def test_a_stale_worker_cannot_append() -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    runtime = Runtime(store=store)
    agent = Agent("c", ScriptedModel([]))
    child = await runtime.create_session(agent)
    leases: MemoryLeases = store.leases
    first = await leases.acquire(f"child:{child.id}", "w1", 30)
    assert first is not None
    await store.append(child.id, Entry("subagent_started"), fence=first.fence)
    now[0] += 31  # w1 stalls past its lease
    second = await leases.acquire(f"child:{child.id}", "w2", 30)
    assert second is not None and second.generation == first.generation + 1
    with pytest.raises(StaleLeaseError):
        await store.append(
            child.id, Entry("subagent_result", {"status": "done"}), fence=first.fence
        )
    await store.append(child.id, Entry("subagent_result", {"status": "done"}), fence=second.fence)
    assert [e.kind for e in await store.load(child.id)] == ["subagent_started", "subagent_result"]


async def test_child_status_is_derived_from_log_and_lease() -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    runtime = Runtime(store=store)
    child = await runtime.create_session(Agent("c", ScriptedModel([])))
    await store.append(child.id, Entry("subagent_dispatched", {"spec": {}}))
    assert await child_status(runtime, child.id) is ChildStatus.QUEUED
    lease = await store.leases.acquire(f"session:{child.id}", "w", 30)
    await store.append(child.id, Entry("subagent_started"), fence=lease.fence)  # type: ignore[union-attr]
    assert await child_status(runtime, child.id) is ChildStatus.RUNNING
    now[0] += 60  # the worker died: its lease lapsed
    assert await child_status(runtime, child.id) is ChildStatus.INTERRUPTED
    await store.append(child.id, Entry("subagent_result", {"status": "failed", "error": "x"}))
    assert await child_status(runtime, child.id) is ChildStatus.FAILED


async def test_a_worker_redelivered_after_a_crash_continues_from_the_log() -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    runtime = Runtime(store=store)
    calls: list[int] = []

    def answer(request: ModelRequest) -> Any:
        calls.append(len(request.messages))
        return reply("recovered answer")

    model = FunctionModel(answer)
    runtime.register_model(model)
    parent = await runtime.create_session(Agent("lead", ScriptedModel([])))
    child = await runtime.create_session(Agent("bg", model), parent_id=parent.id)
    spec = ChildSpec(child.id, parent.id, "bg", "the task", model=model.spec)
    # a first worker started the child, wrote the task, then died
    dead = await store.leases.acquire(f"session:{child.id}", "dead", 30)
    await store.append(child.id, Entry("subagent_started"), fence=dead.fence)  # type: ignore[union-attr]
    from taskloom import Message

    await store.append(
        child.id,
        Entry("message", {"message": Message.user("the task").to_dict()}),
        fence=dead.fence,
    )  # type: ignore[union-attr]
    assert await ChildWorker(runtime).run(spec) is None  # its lease is still live: skip
    now[0] += 31
    assert await ChildWorker(runtime).run(spec) is ChildStatus.DONE
    assert calls == [1]  # continued from the log: the task was not appended twice
    notices = await runtime.background.inbox.pending(parent.id)
    assert len(notices) == 1 and "recovered answer" in notices[0].text
