"""The `--app` factory of the scale-out tests' workers (and the tests' own host runtime).

    taskloom worker --app queue_app:make_runtime

Configured by environment variables, so each test shapes its workers:
`TLQ_URL`, `TLQ_SCHEMA` (the PostgreSQL schema), `TLQ_EFFECTS` (the
side-effect file), `TLQ_AGENTS` (agent names to register; default all),
`TLQ_TOOL_SLEEP` (seconds the `touch` tool sleeps after its side effect),
`TLQ_TOOL_GATE` (a file: the `touch` tool then waits until it exists, so a
test decides when a call in flight ends),
`TLQ_LEASE_TTL`, `TLQ_WAKE` (1: wake_on_notice), `TLQ_MAX_WAKEUPS`, `TLQ_RESULTS` (1: print
`RESULT <session> <json>` with the counts and usage of every run's own
`RunResult` as it ends), `TLQ_HANG_AT_END` (1: print `READY end <session>`
and hang before appending any run's end: a run's answer is stored, its end
is not, the point a test kills at), `TLQ_HANG_ENDING` (`before` or `after`:
hang before the store's `append_ending`, the statement writing a run's final
answer with its end, is sent, or once it returned; printing `READY ending
<session> <kinds>` or `READY ended <session> <kinds> <ended>`),
`TLQ_HANG_ENDING_OF` (`child`: only at an ending that carries a background
child's terminal entry).

The `touch` tool prints `TOOL <session> <call id>` (the READY line a test
kills at), appends `<session> <call id>` to the side-effect file, then
sleeps. Models answer from the transcript alone, so a run redelivered to
another worker goes on where the log stops.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from taskloom import Agent, RunResult, Runtime, ToolContext, Usage, tool
from taskloom.backends import Fence
from taskloom.backends.postgres import PostgresBackend, PostgresStore
from taskloom.delegation import Spawner, SubAgent
from taskloom.distributed import WorkQueue
from taskloom.entries import Entry, EntryKind
from taskloom.errors import ProviderError
from taskloom.loop.ports import NO_OBSERVER, RunInfo, RunObserver
from taskloom.models import FunctionModel, ModelRequest, reply

PID = os.getpid()


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def mark(line: str) -> None:
    with open(os.environ["TLQ_EFFECTS"], "a") as f:
        f.write(line + "\n")


def _exists(path: str) -> bool:
    return os.path.exists(path)


@tool
async def touch(ctx: ToolContext) -> str:
    """Leave a mark (a side effect that must happen at most once per call)."""
    say(f"TOOL {ctx.session_id} {ctx.call_id}")
    mark(f"{ctx.session_id} {ctx.call_id}")
    await asyncio.sleep(float(os.environ.get("TLQ_TOOL_SLEEP", "0")))
    gate = os.environ.get("TLQ_TOOL_GATE")
    while gate and not _exists(gate):
        await asyncio.sleep(0.02)  # cancellable, as a tool should be
    return "touched"


def _last(request: ModelRequest) -> Any:
    return request.messages[-1] if request.messages else None


def touch_then_answer(request: ModelRequest) -> Any:
    """Touch once per user turn, then answer with the turn's text and this pid."""
    last = _last(request)
    if last is not None and last.role == "user":
        return reply(tool_calls=[("touch", {})])
    heard = [m.text for m in request.messages if m.role == "user"]
    return reply(f"done by {PID}: {heard[-1] if heard else ''}")


def answer_at_once(request: ModelRequest) -> Any:
    """Answer at once, marking `ASKED <pid>` in the side-effect file (a paid request)."""
    mark(f"ASKED {PID}")
    return reply(f"answered by {PID}")


class EndHangingStore(PostgresStore):
    """A store that hangs before appending a run's end (`TLQ_HANG_AT_END=1`)."""

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        if entry.kind == EntryKind.RUN_FINISHED:
            say(f"READY end {session_id}")
            await asyncio.Event().wait()
        return await super().append(session_id, entry, fence=fence)


def hang_around_ending(store: PostgresStore, where: str, only_child: bool) -> None:
    """Wrap this store's `append_ending` (the instance's, so the runtime still
    takes the one-statement path its class gives) to hang `where` (see the
    module's `TLQ_HANG_ENDING`)."""
    inner = store.append_ending

    async def append_ending(session_id: str, entries: Sequence[Entry], **options: Any) -> Any:
        if only_child and len(entries) < 3:
            return await inner(session_id, entries, **options)
        kinds = ",".join(e.kind for e in entries)
        if where == "before":
            say(f"READY ending {session_id} {kinds}")
            await asyncio.Event().wait()  # until the test kills this worker
        written = await inner(session_id, entries, **options)
        say(f"READY ended {session_id} {kinds} {written is not None and written[2]}")
        await asyncio.Event().wait()
        return written

    store.append_ending = append_ending  # type: ignore[method-assign]


def lead(request: ModelRequest) -> Any:
    """Spawn one background worker for a user turn; answer once its report is in."""
    text = " ".join(m.text for m in request.messages if m.role == "user")
    if "finished. Its report" in text:
        return reply(f"report received by {PID}")
    if any(m.role == "tool" for m in request.messages):
        return reply("waiting for the report")
    spawn = {"name": "helper", "task": "touch once", "tools": ["touch"], "mode": "background"}
    return reply(tool_calls=[("spawn_agent", spawn)])


@tool(needs_approval=True)
async def pay(amount: int, ctx: ToolContext) -> str:
    """Pay an amount (a person approves each payment)."""
    mark(f"PAID {ctx.session_id} {ctx.call_id} {amount}")
    return f"paid {amount}"


def payer(request: ModelRequest) -> Any:
    """Pay 70 (a gated call, escalated to the parent), then say so."""
    results = [r.content for m in request.messages for r in m.results]
    if not results:
        return reply(tool_calls=[("pay", {"amount": 70})])
    return reply(f"done: {results[-1]}")


def treasurer(request: ModelRequest) -> Any:
    """Send a background worker to pay; answer once its report is in."""
    text = " ".join(m.text for m in request.messages if m.role == "user")
    if "finished. Its report" in text:
        return reply("report: " + text.rsplit("Its report:", 1)[1].strip())
    if any(m.role == "tool" for m in request.messages):
        return reply("a worker is paying")
    spawn = {"name": "payer", "task": "pay 70", "tools": ["pay"], "mode": "background"}
    return reply(tool_calls=[("spawn_agent", spawn)])


def spend(request: ModelRequest) -> Any:
    """A child that answers at once, reporting a token per four characters of
    its input and 2,000 output tokens (or its `max_tokens`, if fewer)."""
    chars = sum(len(m.text) for m in request.messages) + len(request.system or "")
    cap = request.settings.max_tokens
    # A provider that misreports its input (negative, or absurd): TLQ_SPEND_INPUT.
    given = os.environ.get("TLQ_SPEND_INPUT")
    reported = chars // 4 if given is None else int(given)
    return reply("spent", usage=Usage(reported, 2000 if cap is None else min(2000, cap)))


def boss(request: ModelRequest) -> Any:
    """Spawn TLQ_FANOUT background children in one turn, then stop talking."""
    if any(m.role == "tool" for m in request.messages):
        return reply("spawned", usage=Usage(10, 5))
    spawn = {"name": "spender", "task": "spend", "mode": "background"}
    count = int(os.environ.get("TLQ_FANOUT", "20"))
    calls = [("spawn_agent", {**spawn, "name": f"spender{i}"}, f"s{i}") for i in range(count)]
    return reply(tool_calls=calls, usage=Usage(10, 5))


_failed_once: set[int] = set()


def tally(request: ModelRequest) -> Any:
    """Touch twice per user turn, the first attempt of it failing with a
    retryable 503 (one transport retry); then answer. Every reply has usage."""
    last = _last(request)
    if last is not None and last.role == "user":
        if len(request.messages) not in _failed_once:
            _failed_once.add(len(request.messages))
            raise ProviderError("overloaded", status=503)
        calls = [("touch", {}, "t1"), ("touch", {}, "t2")]
        return reply(tool_calls=calls, usage=Usage(100, 10))
    return reply("tallied", usage=Usage(50, 5))


def result_line(result: RunResult) -> str:
    """What `RESULT` lines carry of a run's result (also what tests compare with)."""
    return json.dumps(
        {
            "status": result.status.value,
            "text": result.text,
            "rounds": result.rounds,
            "model_requests": result.model_requests,
            "tool_calls": result.tool_calls,
            "transport_retries": result.transport_retries,
            "usage": result.usage.to_dict(),
            "own_usage": result.own_usage.to_dict(),
        },
        sort_keys=True,
    )


class _PrintedWatch:
    """An unobserved run's watch that prints the result the run returns."""

    def __init__(self, info: RunInfo) -> None:
        self._session_id = info.session_id
        self._inner = NO_OBSERVER.run(info)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> _PrintedWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def finished(self, result: RunResult) -> None:
        say(f"RESULT {self._session_id} {result_line(result)}")


class PrintResults:
    """Observes nothing but the end of each run (`TLQ_RESULTS=1`)."""

    def run(self, info: RunInfo) -> Any:
        return _PrintedWatch(info)

    def current_traceparent(self) -> str | None:
        return None

    def continue_trace(self, traceparent: str | None) -> Any:
        return NO_OBSERVER.continue_trace(traceparent)

    def queued(self, operation: str, session_id: str) -> Any:
        return NO_OBSERVER.queued(operation, session_id)


def cashier(request: ModelRequest) -> Any:
    """Have an inline payer pay (its escalation parks this run); say its answer."""
    results = [r.content for m in request.messages for r in m.results]
    if results:
        return reply(f"cashier: {results[-1]}")
    return reply(tool_calls=[("payer", {"task": "pay 70"})])


def build(
    url: str,
    schema: str,
    *,
    agents: str | None = None,
    lease_ttl: float = 30.0,
    wake: bool = False,
    observer: RunObserver | None = None,
    hang_at_end: bool = False,
    hang_ending: str | None = None,
    hang_ending_of_child: bool = False,
    max_wakeups: int | None = None,
) -> Runtime:
    """The runtime a worker (or the test's host) uses."""
    queue = WorkQueue(
        url, schema=schema, heartbeat=0.5, stall_timeout=2.0, reap_every=0.5, poll_every=0.2
    )
    child = FunctionModel(touch_then_answer, name="child")
    spender = FunctionModel(spend, name="spender")
    spawner = Spawner(child, tools=[touch], dispatcher=queue.dispatcher(), max_children=8)
    fanout = Spawner(spender, dispatcher=queue.dispatcher(), max_children=64)
    paying = FunctionModel(payer, name="payer")
    payers = Spawner(paying, tools=[pay], dispatcher=queue.dispatcher(), on_approval="escalate")
    inline = SubAgent("payer", "Pays.", paying, tools=[pay], on_approval="escalate")
    everyone = [
        Agent("cashier", FunctionModel(cashier, name="cashier"), tools=[inline.tool()]),
        Agent("bot", FunctionModel(touch_then_answer, name="bot"), tools=[touch]),
        Agent("lead", FunctionModel(lead, name="lead"), tools=[spawner.tool()]),
        Agent("boss", FunctionModel(boss, name="boss"), tools=[fanout.tool()]),
        Agent("treasurer", FunctionModel(treasurer, name="treasurer"), tools=[payers.tool()]),
        Agent("tally", FunctionModel(tally, name="tally"), tools=[touch]),
        Agent("answerer", FunctionModel(answer_at_once, name="answerer")),
        Agent("direct", FunctionModel(payer, name="direct"), tools=[pay]),
    ]
    wanted = None if agents is None else set(filter(None, agents.split(",")))
    backend = PostgresBackend(url, schema=schema, max_size=4)
    store = EndHangingStore(backend.database) if hang_at_end else backend.store
    store.backend = backend  # the runtime finds the backend's other parts through it
    if hang_ending is not None:
        hang_around_ending(store, hang_ending, hang_ending_of_child)
    return Runtime(
        store=store,
        queue=queue,
        agents=[a for a in everyone if wanted is None or a.name in wanted],
        tools=[touch, pay],
        models=[child, spender, paying],
        lease_ttl=lease_ttl,
        wake_on_notice=wake,
        observer=observer,
        **({} if max_wakeups is None else {"max_wakeups": max_wakeups}),
    )


def make_runtime() -> Runtime:
    """The factory `taskloom worker --app queue_app:make_runtime` calls."""
    env = os.environ
    return build(
        env["TLQ_URL"],
        env["TLQ_SCHEMA"],
        agents=env.get("TLQ_AGENTS"),
        lease_ttl=float(env.get("TLQ_LEASE_TTL", "30")),
        wake=env.get("TLQ_WAKE") == "1",
        observer=PrintResults() if env.get("TLQ_RESULTS") == "1" else None,
        hang_at_end=env.get("TLQ_HANG_AT_END") == "1",
        hang_ending=env.get("TLQ_HANG_ENDING"),
        hang_ending_of_child=env.get("TLQ_HANG_ENDING_OF") == "child",
        max_wakeups=int(env["TLQ_MAX_WAKEUPS"]) if "TLQ_MAX_WAKEUPS" in env else None,
    )
