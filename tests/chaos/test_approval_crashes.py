"""Crashes around approvals: nothing run twice, nothing run unapproved.

- A process killed (SIGKILL) while an approved tool runs: resuming later
  gives the call the "interrupted; it may have run" error result and never
  runs the tool again.
- A process that dies right after the first of two approval requests of a
  turn is written: approving what was requested and resuming never runs the
  other gated call without an approval of its own.

The session is picked up "an hour later" (the later runtime's store clock is
an hour ahead), as a restarted service would: a lease the dead process held
has lapsed by then. `SessionBusy` is still retried until a deadline.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from chaos_support import (  # noqa: F401 (durable is a fixture)
    Child,
    durable,
    log_problems,
    messages_of,
    parked_and_approved,
    store_name,
    summary,
)
from session_child import (
    TWO_GATED_CALLS,
    effect_tools,
    open_runtime,
    ran,
    text_model,
    two_gated_calls_model,
)

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, Message, RunResult, RunStatus, Runtime, Session, ToolCall
from taskloom.backends import Fence
from taskloom.backends.memory import MemoryStore
from taskloom.entries import Entry, EntryKind
from taskloom.errors import ApprovalsMissing, SessionBusy, TaskloomError, UsageError
from taskloom.log import INTERRUPTED
from taskloom.results import arguments_digest

KILL_TRIALS = 10
AN_HOUR = 3600.0


def an_hour_later(url: str, schema: str) -> Runtime:
    """A runtime whose store clock runs an hour ahead: leases of the dead have lapsed."""
    return open_runtime(url, schema, clock=lambda: time.time() + AN_HOUR)


async def patiently(session: Session, *, or_run: bool) -> RunResult:
    """`resume()`, retried while another holder's lease is live (bounded).

    With `or_run`, a session whose interrupted turn is no longer considered
    parked (resume refused with `UsageError`) is continued with `run()`.
    """
    deadline = time.monotonic() + 30
    while True:
        try:
            try:
                return await session.resume()
            except ApprovalsMissing:
                raise
            except UsageError:
                if not or_run:
                    raise
                return await session.run("go on")
        except SessionBusy:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


# ---------------------------------------------------------------- killed mid-tool


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_tool_killed_after_its_approval_never_runs_again(
    durable: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    reruns = not_interrupted = broken = 0
    examples: list[str] = []
    async with open_runtime(*durable) as runtime:
        for n in range(KILL_TRIALS):
            side_effects = tmp_path / f"effects-{n}.txt"
            side_effects.touch()
            session_id = await parked_and_approved(runtime, side_effects)
            child = Child("resume-hang", *durable, session_id, str(side_effects))
            try:
                child.expect("READY tool")  # the approved tool is running right now
            finally:
                child.kill()
            assert ran(side_effects) == ["call_pay"]
            model = text_model("recovered")
            async with an_hour_later(*durable) as later:
                agent = Agent("chaos", model, tools=effect_tools(side_effects))
                session = await later.open_session(session_id, agent)
                try:
                    result = await patiently(session, or_run=True)
                except TaskloomError as exc:
                    broken += 1
                    examples.append(f"trial {n}: {type(exc).__name__}: {exc}")
                    continue
                entries = await session.entries()
            if ran(side_effects) != ["call_pay"]:
                reruns += 1
                examples.append(f"trial {n}: side effects {ran(side_effects)}")
            answers = [
                (r.content, r.is_error)
                for m in messages_of(entries)
                for r in m.results
                if r.tool_call_id == "call_pay"
            ]
            if answers != [(INTERRUPTED, True)]:
                not_interrupted += 1
                examples.append(f"trial {n}: call_pay answered {answers}")
            problems = log_problems(entries)
            if result.status is not RunStatus.COMPLETED or problems:
                broken += 1
                examples.append(f"trial {n}: {result.status.value} {problems[:3]}")
    line = summary(
        f"{store_name(durable[0])} kill during an approved tool",
        KILL_TRIALS,
        reruns=reruns,
        not_interrupted=not_interrupted,
        broken=broken,
    )
    assert (reruns, not_interrupted, broken) == (0, 0, 0), (line, examples[:6])


# ---------------------------------------------------------------- died between requests


async def approve_and_resume(session: Session, side_effects: Path) -> list[str]:
    """Approve every call of the parked turn that has a request, resume, and
    repeat until the run completes; what went wrong (empty: nothing).

    Only calls whose `approve()` succeeded may ever have run.
    """
    approved: set[str] = set()
    for _ in range(4):
        turn = [m for m in await session.transcript() if m.role == "assistant"][-1]
        for call in turn.tool_calls:
            if call.id in approved:
                continue
            try:
                await session.approve(call.id)
            except TaskloomError:
                continue  # no approval request for it (yet)
            approved.add(call.id)
        try:
            result: RunResult | None = await patiently(session, or_run=False)
        except ApprovalsMissing:
            result = None  # acceptable: nothing ran; the next attempt decides more
        effects = ran(side_effects)
        unapproved = sorted(set(effects) - approved)
        if unapproved:
            return [f"ran without an approval of its own: {unapproved}"]
        if len(effects) != len(set(effects)):
            return [f"ran twice: {effects}"]
        if result is not None and result.status is not RunStatus.AWAITING_APPROVAL:
            if result.status is not RunStatus.COMPLETED or sorted(effects) != sorted(approved):
                return [f"ended {result.status.value} with {effects} run, {approved} approved"]
            return []
    return [f"wedged: still not done after 4 rounds of approvals ({approved} approved)"]


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_crash_between_two_approval_requests_runs_nothing_unapproved(
    durable: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    unapproved = other = hook_fired = 0
    examples: list[str] = []
    async with open_runtime(*durable) as runtime:
        for n in range(KILL_TRIALS):
            side_effects = tmp_path / f"effects-{n}.txt"
            side_effects.touch()
            session = await runtime.create_session(Agent("chaos", text_model()))
            child = Child("park-and-exit", *durable, session.id, str(side_effects))
            status = child.wait(timeout=60)
            child.close()
            assert status in (0, 137), child.stderr()
            hook_fired += status == 137
            assert ran(side_effects) == []
            async with an_hour_later(*durable) as later:
                agent = Agent("chaos", text_model(), tools=effect_tools(side_effects))
                reopened = await later.open_session(session.id, agent)
                problems = await approve_and_resume(reopened, side_effects)
            if problems:
                if "without an approval" in problems[0]:
                    unapproved += 1
                else:
                    other += 1
                examples.append(f"trial {n}: {problems}")
    line = summary(
        f"{store_name(durable[0])} crash after the first approval request",
        KILL_TRIALS,
        unapproved_runs=unapproved,
        other_failures=other,
    )
    print(f"  the process died mid-turn in {hook_fired} of {KILL_TRIALS} trials")
    assert (unapproved, other) == (0, 0), (line, examples[:6])


class DieAfterFirstApproval:
    """Wraps a store like a process that dies right after the first approval
    entry is written: from then on its appends and loads never return."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.dead = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        if self.dead.is_set():
            await asyncio.Event().wait()
        position = await self._inner.append(session_id, entry, fence=fence)
        if "approval" in entry.kind:
            self.dead.set()
            await asyncio.Event().wait()
        return position

    async def load(self, session_id: str, after: int | None = None) -> list[Entry]:
        if self.dead.is_set():
            await asyncio.Event().wait()
        return await self._inner.load(session_id, after)


async def test_dying_right_after_the_first_approval_entry_runs_nothing_unapproved(
    tmp_path: Path,
) -> None:
    side_effects = tmp_path / "effects.txt"
    side_effects.touch()
    skew = [0.0]  # the store's clock; an hour is added once the process "died"
    inner = MemoryStore(clock=lambda: time.time() + skew[0])
    dying = DieAfterFirstApproval(inner)
    doomed = Runtime(store=dying)  # type: ignore[arg-type]
    agent = Agent("chaos", two_gated_calls_model(), tools=effect_tools(side_effects))
    session = await doomed.create_session(agent)
    run = asyncio.create_task(session.run("pay 1 and refund 2"))
    died = asyncio.create_task(dying.dead.wait())
    await asyncio.wait({run, died}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    # The dead run does nothing more: a write it tries while unwinding never
    # returns, so it is cancelled again until it is gone.
    for _ in range(5):
        run.cancel()
        died.cancel()
        if len((await asyncio.wait({run, died}, timeout=1))[0]) == 2:
            break
    assert run.done()
    skew[0] = AN_HOUR
    later = Runtime(store=inner)
    reopened = await later.open_session(
        session.id, Agent("chaos", text_model(), tools=effect_tools(side_effects))
    )
    assert await approve_and_resume(reopened, side_effects) == []


async def test_a_log_with_one_of_two_approval_requests_runs_nothing_unapproved(
    tmp_path: Path,
) -> None:
    """The log a process leaves when it dies after the first request entry."""
    side_effects = tmp_path / "effects.txt"
    side_effects.touch()
    store = MemoryStore()
    runtime = Runtime(store=store)
    agent = Agent("chaos", text_model(), tools=effect_tools(side_effects))
    session = await runtime.create_session(agent)
    calls = [ToolCall(call_id, name, dict(args)) for name, args, call_id in TWO_GATED_CALLS]
    first = calls[0]
    for entry in (
        Entry(EntryKind.RUN_STARTED, {"agent": "chaos", "resume": False}, "crashed"),
        Entry(EntryKind.MESSAGE, {"message": Message.user("pay and refund").to_dict()}, "crashed"),
        Entry(
            EntryKind.MESSAGE,
            {"message": Message.assistant(tool_calls=calls).to_dict()},
            "crashed",
        ),
        Entry(
            EntryKind.APPROVAL_REQUEST,
            {
                "call_id": first.id,
                "name": first.name,
                "arguments": first.arguments,
                "hash": arguments_digest(first.arguments),
            },
            "crashed",
        ),
    ):
        await store.append(session.id, entry)
    reopened = await runtime.open_session(session.id, agent)
    assert await approve_and_resume(reopened, side_effects) == []
