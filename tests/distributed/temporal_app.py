"""The `--app` factory of the Temporal engine's test workers (and the tests' host runtime).

    taskloom worker --temporal ADDRESS --app temporal_app:make_runtime

Configured by environment variables: `TLT_STORE` and `TLT_SCHEMA` (a
durable store's URL and schema, `-` for none), `TLT_ADDRESS`,
`TLT_NAMESPACE`, `TLT_TASK_QUEUE` (the Temporal server, namespace and
task queue), `TLT_HEARTBEAT` (the activities' heartbeat timeout),
`TLT_SEARCH` (1: the queue sets search attributes), `TLT_HANG_AFTER_END`
(1: hang once a run's end is stored, see `hang_after_the_end`),
`TLT_HOLD_GET` (1: hold a session's first read until its activity is
cancelled, see `hold_the_first_get`), `TLT_WAKE_FAILS` (1: the first
wake-up fails, see `fail_the_first_wake`), `TLT_HANG_AFTER_STEER` (1: hang
once a steering is stored, see `hang_after_the_steer`),
`TLQ_LEASE_TTL`, `TLQ_WAKE`, `TLQ_AGENTS`, `TLQ_EFFECTS` and
`TLQ_TOOL_SLEEP` as in `queue_app`, whose tools and models these agents use: `bot` touches once
per turn then answers with its pid; `lead` spawns one background child that
touches once, and answers once its report is in; `direct` pays 70 (a call a
person approves), then says so; `looper` takes `LOOPS` rounds in one turn.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from queue_app import lead, pay, payer, say, touch, touch_then_answer
from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from taskloom import Agent, Runtime, tool
from taskloom.backends import SessionStore, open_backend
from taskloom.delegation import Spawner
from taskloom.distributed import TemporalQueue
from taskloom.entries import Entry, EntryKind
from taskloom.models import FunctionModel, ModelRequest, reply

LOOPS = 1000
"""Rounds the `looper` agent's turn takes (`tick` once a round, then the answer)."""


@tool
def tick() -> str:
    """Count a round (no side effect)."""
    return "ticked"


def loop_rounds(request: ModelRequest) -> Any:
    """Call `tick` until it ran `LOOPS - 1` times, then answer: `LOOPS` rounds."""
    ticks = sum(1 for m in request.messages if m.role == "tool")
    if ticks < LOOPS - 1:
        return reply(tool_calls=[("tick", {})])
    return reply(f"looped {ticks + 1} rounds")


def hang_after_the_end(store: SessionStore) -> SessionStore:
    """`store`, hanging once a run's end is appended (`READY ended <session>`):
    the run is over in the log, its job is not (the point a test kills at)."""
    append = store.append

    async def appended(session_id: str, entry: Entry, **options: Any) -> int:
        position = await append(session_id, entry, **options)
        if entry.kind == EntryKind.RUN_FINISHED:
            say(f"READY ended {session_id}")
            await asyncio.Event().wait()
        return position

    store.append = appended  # type: ignore[method-assign]
    # A final answer may land with its run's end in one statement (the
    # instance's method is wrapped, so the store's class still offers it).
    ending = getattr(store, "append_ending", None)
    if ending is not None:

        async def ended(session_id: str, entries: Any, **options: Any) -> Any:
            written = await ending(session_id, entries, **options)
            landed = written is not None and written[2]
            if landed and any(e.kind == EntryKind.RUN_FINISHED for e in entries):
                say(f"READY ended {session_id}")
                await asyncio.Event().wait()
            return written

        store.append_ending = ended  # type: ignore[attr-defined]
    return store


def hang_after_the_steer(store: SessionStore) -> SessionStore:
    """`store`, hanging once a steering is appended (`READY steered <session>`):
    a schedule's input is in the log, its firing's activity has not ended
    (the point a test kills the worker at)."""
    append = store.append

    async def appended(session_id: str, entry: Entry, **options: Any) -> int:
        position = await append(session_id, entry, **options)
        if entry.kind == EntryKind.STEER:
            say(f"READY steered {session_id}")
            await asyncio.Event().wait()
        return position

    store.append = appended  # type: ignore[method-assign]
    return store


def hold_the_first_get(store: SessionStore) -> SessionStore:
    """`store`, whose first `get` of each session in an activity prints `READY
    get <session>` and returns only once the activity is cancelled (30 s at
    most): a cancel that comes before the run began (the point a test
    cancels at)."""
    get = store.get
    held: set[str] = set()

    async def holding(session_id: str) -> Any:
        if session_id not in held:
            held.add(session_id)
            say(f"READY get {session_id}")
            for _ in range(1500):
                if activity.is_cancelled():
                    break
                await asyncio.sleep(0.02)
        return await get(session_id)

    store.get = holding  # type: ignore[method-assign]
    return store


def fail_the_first_wake(queue: TemporalQueue) -> TemporalQueue:
    """`queue`, whose first wake-up of a session fails as an outage of the
    Temporal server does (`RPCError` UNAVAILABLE), printing `WAKE FAILED
    <session>`; the ones after it go through."""
    wake = queue.wake
    failed: list[str] = []

    async def waking(session_id: str) -> str:
        if not failed:
            failed.append(session_id)
            say(f"WAKE FAILED {session_id}")
            raise RPCError("the server is unavailable", RPCStatusCode.UNAVAILABLE, b"")
        return await wake(session_id)

    queue.wake = waking  # type: ignore[method-assign]
    return queue


def build(
    store: str,
    schema: str,
    *,
    address: str,
    namespace: str,
    task_queue: str,
    heartbeat: float = 2.0,
    lease_ttl: float = 3.0,
    wake: bool = False,
    agents: str | None = None,
    hang_after_end: bool = False,
    hold_get: bool = False,
    fail_wake: bool = False,
    jobs_per_workflow: int = 200,
    search_attributes: bool = False,
    hang_after_steer: bool = False,
) -> Runtime:
    """The runtime a worker (or the test's host) uses."""
    queue = TemporalQueue(
        address,
        namespace=namespace,
        task_queue=task_queue,
        heartbeat_timeout=heartbeat,
        jobs_per_workflow=jobs_per_workflow,
        search_attributes=search_attributes,
    )
    if fail_wake:
        fail_the_first_wake(queue)
    child = FunctionModel(touch_then_answer, name="child")
    spawner = Spawner(child, tools=[touch], dispatcher=queue.dispatcher(), max_children=8)
    options = {} if schema == "-" else {"schema": schema}
    everyone = [
        Agent("bot", FunctionModel(touch_then_answer, name="bot"), tools=[touch]),
        Agent("lead", FunctionModel(lead, name="lead"), tools=[spawner.tool()]),
        Agent("direct", FunctionModel(payer, name="direct"), tools=[pay]),
        Agent("looper", FunctionModel(loop_rounds, name="looper"), tools=[tick]),
    ]
    wanted = None if agents is None else set(agents.split(","))
    opened = open_backend(store, **options).store
    if hold_get:
        opened = hold_the_first_get(opened)
    if hang_after_steer:
        opened = hang_after_the_steer(opened)
    return Runtime(
        store=hang_after_the_end(opened) if hang_after_end else opened,
        queue=queue,
        agents=[a for a in everyone if wanted is None or a.name in wanted],
        tools=[touch, pay],
        models=[child],
        lease_ttl=lease_ttl,
        wake_on_notice=wake,
    )


def make_runtime() -> Runtime:
    """The factory `taskloom worker --temporal ... --app temporal_app:make_runtime` calls."""
    env = os.environ
    return build(
        env["TLT_STORE"],
        env["TLT_SCHEMA"],
        address=env["TLT_ADDRESS"],
        namespace=env["TLT_NAMESPACE"],
        task_queue=env["TLT_TASK_QUEUE"],
        heartbeat=float(env.get("TLT_HEARTBEAT", "2")),
        lease_ttl=float(env.get("TLQ_LEASE_TTL", "3")),
        wake=env.get("TLQ_WAKE") == "1",
        agents=env.get("TLQ_AGENTS"),
        hang_after_end=env.get("TLT_HANG_AFTER_END") == "1",
        hold_get=env.get("TLT_HOLD_GET") == "1",
        fail_wake=env.get("TLT_WAKE_FAILS") == "1",
        search_attributes=env.get("TLT_SEARCH") == "1",
        hang_after_steer=env.get("TLT_HANG_AFTER_STEER") == "1",
    )
