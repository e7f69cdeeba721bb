"""Regression tests for the structural defects: model identity, deferred
pushes from anywhere, typed entries, wake-up failures, one writer per session
inside one process, unique call ids."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

import taskloom
from barriers import GENEROUS, set_within
from store_signals import SignalingStore
from taskloom import (
    Agent,
    DeferredItem,
    RunStatus,
    Runtime,
    SessionBusy,
    ToolContext,
    UsageError,
    tool,
)
from taskloom.backends import session_lease_key
from taskloom.backends.memory import MemoryStore
from taskloom.entries import (
    ApprovalDecision,
    ApprovalRequests,
    CallsStarted,
    Entry,
    EntryKind,
    MessageEntry,
    ModelChange,
    RequestedCall,
    RunFinishedEntry,
    SubagentLink,
    SubagentResult,
)
from taskloom.messages import Message, Usage
from taskloom.models import FunctionModel, ScriptedModel, reply
from taskloom.testing.clock import FakeClock

# ---------------------------------------------------------------- model identity


async def test_set_model_keeps_the_instance_even_when_specs_are_equal() -> None:
    a = ScriptedModel(["from a", "from a again"])
    b = ScriptedModel(["from b"])
    assert a.spec == b.spec  # the collision the registry used to have
    runtime = Runtime()
    session = await runtime.create_session(Agent("m", model=a))
    assert (await session.run("one")).text == "from a"
    await session.set_model(b)
    assert (await session.run("two")).text == "from b"
    assert len(a.requests) == 1 and len(b.requests) == 1


async def test_a_strategy_switch_to_an_instance_with_the_same_spec_is_honoured() -> None:
    from taskloom.loop import Continue, RoundAdjustment, RoundContext, RoundDecision

    second = ScriptedModel(["second says done"])

    class Switch:
        async def on_round(self, ctx: RoundContext) -> RoundDecision:
            if ctx.rounds_completed == 1:
                return Continue(RoundAdjustment(model=second))
            return RoundDecision.proceed()

    @tool(effect=taskloom.ToolEffect.READ_ONLY)
    def ping() -> str:
        """Ping."""
        return "pong"

    first = ScriptedModel([reply(tool_calls=[("ping", {})])])
    result = await Agent("s", first, tools=[ping]).run(
        "go", options=taskloom.RunOptions(strategy=Switch())
    )
    assert result.text == "second says done" and len(second.requests) == 1


# ---------------------------------------------------------------- deferred items


async def _deferred_session() -> tuple[Runtime, Any, list[Any]]:
    handles: list[Any] = []

    @tool
    async def start(ctx: ToolContext) -> str:
        """Start something that answers later."""
        handles.append(ctx.deferred())
        return "started"

    model = ScriptedModel([reply(tool_calls=[("start", {})]), "ok", "got it"])
    runtime = Runtime()
    session = await runtime.create_session(Agent("d", model, tools=[start]))
    await session.run("begin")
    return runtime, session, handles


async def test_push_nowait_delivers_from_another_thread() -> None:
    _runtime, session, handles = await _deferred_session()
    done = threading.Event()
    futures: list[Any] = []

    def from_thread() -> None:
        futures.append(handles[0].push_nowait(DeferredItem.context("thread result")))
        done.set()

    thread = threading.Thread(target=from_thread)
    thread.start()
    # Waited for off the loop: the loop stays free to run what the thread schedules.
    assert await asyncio.to_thread(done.wait, GENEROUS)
    thread.join()
    position = await asyncio.wrap_future(futures[0])
    entries = await session.entries()
    assert entries[position - 1].kind == EntryKind.DEFERRED
    await session.run("and now?")
    assert any("thread result" in m.text for m in await session.transcript() if m.role == "user")


async def test_an_unawaited_push_still_delivers() -> None:
    _runtime, session, handles = await _deferred_session()
    pending = handles[0].push("written without await")
    await asyncio.sleep(0)
    await pending  # the write started on its own; awaiting only reads the position
    kinds = [e.kind for e in await session.entries()]
    assert kinds[-1] == EntryKind.DEFERRED


async def test_push_nowait_without_a_loop_says_how_to_bind() -> None:
    from taskloom import Deferred

    handle = Deferred("s")
    with pytest.raises(RuntimeError, match="bind"):
        handle.push_nowait("x")


# ---------------------------------------------------------------- typed entries


@pytest.mark.parametrize(
    "payload",
    [
        MessageEntry(Message.user("hi"), "notice", ("n1",), (3, 4)),
        ModelChange(model="openai:x", model_changed=True),
        ModelChange(reasoning={"effort": "low"}, reasoning_changed=True),
        ApprovalRequests(7, (RequestedCall("c1", "wire", {"amount": 1}, "h"),)),
        ApprovalDecision("c1", True, "h", 7, "ok"),
        CallsStarted(7, ("c1", "c2")),
        RunFinishedEntry(RunStatus.FAILED, "boom", Usage(1, 2), 3, 4, {"x": 1}),
        RunFinishedEntry(
            RunStatus.COMPLETED, None, Usage(9, 2), 2, 3, None, None, 4, 1, Usage(5, 1), '{"a": 1}'
        ),
        SubagentLink("child", "researcher", "worker", "r", "task", "inline", "c9", {}, {}),
        SubagentResult("done", {"a": 1}, None, Usage(5, 6)),
    ],
)
def test_every_payload_round_trips_through_its_entry(payload: Any) -> None:
    entry = Entry.of(payload, "run-1")
    assert entry.kind == payload.KIND and entry.run_id == "run-1"
    assert Entry.from_dict(entry.to_dict()).payload == payload


def test_0_1_approval_requests_read_as_one_call_each() -> None:
    old = Entry(
        EntryKind.APPROVAL_REQUEST, {"call_id": "c", "name": "t", "arguments": {}, "hash": "h"}
    )
    payload = old.payload
    assert isinstance(payload, ApprovalRequests)
    assert payload.turn == 0 and [c.call_id for c in payload.calls] == ["c"]


def test_deferred_item_kinds_render_themselves() -> None:
    assert DeferredItem.context("plain").render() == "plain"
    assert "from kid" in DeferredItem.delegation_result("ans", {"agent_id": "kid"}).render()
    assert "finished with status done" in DeferredItem.subagent_finished("k", "done").render()
    unknown = DeferredItem.from_dict({"kind": "custom", "data": {"v": 1}})
    assert unknown.render() == "[custom] {'v': 1}"


async def test_a_failed_run_records_failed_status_not_a_bare_string() -> None:
    def boom(request: Any) -> Any:
        raise KeyError("model exploded")

    runtime = Runtime()
    session = await runtime.create_session(Agent("f", FunctionModel(boom)))
    with pytest.raises(KeyError):
        await session.run("go")
    finished = [e.payload for e in await session.entries() if e.kind == EntryKind.RUN_FINISHED]
    assert isinstance(finished[-1], RunFinishedEntry)
    assert finished[-1].status is RunStatus.FAILED and "model exploded" in (
        finished[-1].error or ""
    )
    assert (await session.entries())[-1].data["status"] == "failed"


# ---------------------------------------------------------------- one writer, in process


async def test_a_second_session_object_on_a_running_session_is_busy() -> None:
    release = asyncio.Event()
    asked = asyncio.Event()
    order: list[str] = []

    async def slow(request: Any) -> Any:
        turn = request.messages[-1].text
        order.append(f"asked {turn}")
        asked.set()
        await release.wait()
        order.append(f"answered {turn}")
        return reply("done")

    store = SignalingStore()
    runtime = Runtime(store=store)
    first = await runtime.create_session(Agent("w", FunctionModel(slow)))
    second = await runtime.open_session(first.id, Agent("w", FunctionModel(slow)))
    attempts = store.leases.attempts[session_lease_key(first.id)]
    running = asyncio.create_task(first.run("one"))
    assert await set_within(asked)  # the first run holds the lease, inside its model request
    with pytest.raises(SessionBusy) as busy:
        await second.run("two")
    assert busy.value.session_id == first.id
    tried = attempts.count
    waiting = asyncio.create_task(second.run("two", wait=True))
    await attempts.reached(tried + 2)  # refused twice, it is still trying: it waits
    assert not waiting.done()
    release.set()
    assert (await running).status is RunStatus.COMPLETED
    assert (await waiting).status is RunStatus.COMPLETED
    assert order == ["asked one", "answered one", "asked two", "answered two"]  # one at a time


async def test_a_stale_writer_is_refused_after_a_takeover() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    runtime = Runtime(store=store, lease_ttl=30)
    entered = asyncio.Event()
    release = asyncio.Event()

    @tool
    async def hang() -> str:
        """Hang until released."""
        entered.set()
        await release.wait()
        return "late"

    model = ScriptedModel([reply(tool_calls=[("hang", {})]), "never"])
    session = await runtime.create_session(Agent("h", model, tools=[hang]))
    stale = asyncio.create_task(session.run("go"))
    await entered.wait()
    clock.advance(60)  # its lease lapsed (a paused process)
    other = await runtime.open_session(session.id, Agent("h", ScriptedModel(["fresh"])))
    assert (await other.run("again")).text == "fresh"
    release.set()
    with pytest.raises(taskloom.errors.StaleLeaseError):
        await stale
    texts = [m.text for m in await other.transcript()]
    assert "late" not in " ".join(texts)  # the stale writer appended nothing after the takeover


async def test_resume_with_nothing_parked_is_a_usage_error() -> None:
    session = await Runtime().create_session(Agent("u", ScriptedModel(["x"])))
    with pytest.raises(UsageError, match="no turn parked"):
        await session.resume()


# ---------------------------------------------------------------- call ids


@tool
def echo(tag: str) -> str:
    """Say the tag back."""
    return tag


async def test_reused_call_ids_get_unique_ones() -> None:
    # Some OpenAI-compatible servers number calls per turn (`call_0` every
    # turn), and providers cap ids at 40 characters.
    long = "c" * 40
    model = ScriptedModel(
        [
            reply(tool_calls=[("echo", {"tag": "a"}, "call_0"), ("echo", {"tag": "b"}, "call_0")]),
            reply(tool_calls=[("echo", {"tag": "c"}, "call_0"), ("echo", {"tag": "d"}, "x")]),
            reply(tool_calls=[("echo", {"tag": "e"}, "call_0_2")]),
            reply(tool_calls=[("echo", {"tag": "f"}, long)]),
            reply(tool_calls=[("echo", {"tag": "g"}, long)]),
            reply(tool_calls=[("echo", {"tag": "h"}, "fresh")]),
            reply("done"),
        ]
    )
    session = await Runtime().create_session(Agent("ids", model, tools=[echo]))
    assert (await session.run("go")).status is RunStatus.COMPLETED
    transcript = await session.transcript()
    calls = [c for m in transcript for c in m.tool_calls]
    ids = [c.id for c in calls]
    assert len(set(ids)) == len(ids) == 8 and all(len(i) <= 40 for i in ids)
    # Only a clashing id changes.
    tags = {c.arguments["tag"]: c.id for c in calls}
    assert (tags["a"], tags["d"], tags["f"], tags["h"]) == ("call_0", "x", long, "fresh")
    # Each result answers its own call, under the id the log keeps, and the
    # model is sent that same history.
    results = {r.tool_call_id: r.content for m in transcript for r in m.results}
    assert results == {call_id: tag for tag, call_id in tags.items()}
    sent = [c.id for m in model.requests[-1].messages for c in m.tool_calls]
    assert sent == ids


# ---------------------------------------------------------------- wake-ups


class _SetOnMessage(logging.Handler):
    """Sets `event` when a record whose message contains `text` is logged."""

    def __init__(self, text: str, event: asyncio.Event) -> None:
        super().__init__(logging.WARNING)
        self.text = text
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


async def test_a_failing_wake_up_is_logged_and_recorded(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def model_fn(request: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            return reply("first answer")
        raise taskloom.ProviderError("provider down", status=500, retryable=False)

    runtime = Runtime(wake_on_notice=True)
    session = await runtime.create_session(Agent("w", FunctionModel(model_fn)))
    await session.run("hello")
    background = runtime.background

    async def work() -> str:
        return "finished"

    logged = asyncio.Event()
    watcher = _SetOnMessage("wake-up run", logged)
    logging.getLogger("taskloom").addHandler(watcher)
    try:
        with caplog.at_level(logging.WARNING, logger="taskloom"):
            await background.spawn(session.id, "job", "a job", work)
            assert await set_within(logged)
    finally:
        logging.getLogger("taskloom").removeHandler(watcher)
    assert any("wake-up run" in r.message for r in caplog.records)
    finished = [e.payload for e in await session.entries() if e.kind == EntryKind.RUN_FINISHED]
    assert isinstance(finished[-1], RunFinishedEntry)
    assert finished[-1].status is RunStatus.FAILED and "provider down" in (finished[-1].error or "")
    await runtime.close()


async def test_work_stopped_before_it_started_still_gets_its_notice() -> None:
    runtime = Runtime()
    background = runtime.background
    started = False

    async def work() -> str:
        nonlocal started
        started = True
        return "ran"

    aid = await background.spawn("s-1", "job", "a job", work)
    assert await background.stop("s-1", aid)
    assert not started
    notices = await background.inbox.pending("s-1")
    assert [(n.activity_id, n.status, n.text) for n in notices] == [
        (aid, "stopped", "stopped before it started")
    ]
    await runtime.close()
