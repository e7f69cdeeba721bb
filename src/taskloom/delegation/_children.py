"""Child agents: creating them, running them, and what their logs say about them.

A child is a session in the parent's store, linked from the parent's log.
Whoever runs it holds the child's lease and writes with its fencing token;
the run ends with exactly one terminal `subagent_result` entry (`done`,
`stopped` or `failed`). Its status is derived from its log and its lease, so
any process can tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .._run_controls import StopSignal
from ..agent import Agent
from ..backends import holder_is_gone, session_lease_key
from ..entries import (
    ApprovalEscalated,
    Entry,
    MessageEntry,
    RunFinishedEntry,
    SubagentDispatched,
    SubagentLink,
    SubagentReport,
    SubagentResult,
    SubagentStartedEntry,
)
from ..errors import ConfigurationError, StaleLeaseError
from ..events import SubagentFinished, SubagentStarted, origin_label
from ..log import SessionLog
from ..loop import DEFAULT_MAX_ROUNDS, RunOptions
from ..loop.ports import to_jsonable
from ..messages import Usage
from ..results import RunResult, RunStatus
from ..runtime import Runtime, Session
from ..tools import ToolContext, ToolOutput

CHILD_LEASE = 30.0
"""Seconds a child's lease lasts without renewal (renewed every third of it)."""

DEFAULT_MAX_ANSWER_CHARS = 50_000
"""The most characters of a delegated agent's answer or question that reach its
parent's model in one piece (`max_answer_chars=` of `SubAgent`, `Spawner` and
`RemoteAgent` changes it); the cut says how to read on with `read_agent`."""


def cap_answer(text: str, limit: int, how: str) -> str:
    """`text` when it has at most `limit` characters (0 or less: no cap), else
    its first `limit` characters and a line saying how many more there are
    and `how` to read them (a clause, e.g. from `read_on`)."""
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... output truncated: {len(text) - limit} more characters; {how} ...]"


def check_answer_cap(owner: str, limit: object, name: str = "max_answer_chars") -> int:
    """`limit` (the option `name` of `owner`), checked: whole characters above 0."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigurationError(
            f"{owner}: {name}={limit!r} must be a whole number of characters above 0"
        )
    return limit


def read_on(child_id: str, offset: int, question: str = "") -> str:
    """How a parent reads a child's report (or, with `question`, the question
    of that id) from character `offset` on, with the console's `read_agent`."""
    which = f", question={question!r}" if question else ""
    return f"read them with read_agent(agent={child_id!r}{which}, offset={offset})"


def report_text(report: Any) -> str:
    """A child's report as the text its parent is shown (JSON unless text)."""
    if isinstance(report, str):
        return report
    return json.dumps(report, ensure_ascii=False, default=str)


def capped_error(error: str, limit: int) -> str:
    """An error about a child, at most `limit` characters of it (errors are
    not kept for reading on: taskloom writes them, and they are short)."""
    return cap_answer(error, limit, "the rest is left out")


class ChildStatus(StrEnum):
    """Where a child is, derived from its log and its lease."""

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    INTERRUPTED = "interrupted"
    DONE = "done"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        """True for done, stopped and failed."""
        return self in (ChildStatus.DONE, ChildStatus.STOPPED, ChildStatus.FAILED)


class LiveChildren:
    """Stop signals of the children running in this process, by child id (what
    `stop_agent` sets); one per runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self.stops: dict[str, StopSignal] = {}

    @classmethod
    def of(cls, runtime: Runtime) -> LiveChildren:
        """The runtime's registry."""
        return runtime.service(cls, cls)

    @contextlib.contextmanager
    def running(self, child_id: str, stop: StopSignal) -> Iterator[None]:
        """Register the child's stop signal for the block."""
        self.stops[child_id] = stop
        try:
            yield
        finally:
            self.stops.pop(child_id, None)


def child_slot(runtime: Runtime, ctx: ToolContext) -> contextlib.AbstractAsyncContextManager[None]:
    """A place among `runtime`'s running children, held for the block. A
    delegation from inside a child takes none: its parent holds one already,
    and waiting on grandchildren for places held by parents would deadlock."""
    if ctx.origin:
        return contextlib.nullcontext()
    return runtime.child_slot()


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child ended, as its parent sees it."""

    child_id: str
    name: str
    status: ChildStatus
    answer: Any = None
    error: str | None = None
    usage: Usage = Usage()

    def to_tool_output(self, limit: int = DEFAULT_MAX_ANSWER_CHARS) -> ToolOutput:
        """The delegation tool's result: `{"answer": ..., "tokens": ...}` or an error;
        an answer longer than `limit` is cut there (as text), saying how to read on."""
        answer = self.answer
        if answer is not None:
            text = report_text(answer)
            if limit > 0 and len(text) > limit:
                answer = cap_answer(text, limit, read_on(self.child_id, limit))
        if self.status is ChildStatus.DONE:
            return ToolOutput(
                json.dumps(
                    {"answer": answer, "tokens": self.usage.total_tokens},
                    ensure_ascii=False,
                    default=str,
                )
            )
        what = "was stopped" if self.status is ChildStatus.STOPPED else "failed"
        text = f"agent {self.name!r} ({self.child_id[:8]}) {what}"
        if self.error:
            text += f": {capped_error(self.error, limit)}"
        if answer:
            text += f"\nIts last answer: {answer}"
        return ToolOutput(text, is_error=True)


def summary(text: str, limit: int = 200) -> str:
    """The text on one line, cut to `limit` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def artifact(child_id: str, role: str, status: str, task: str, result: str = "") -> dict[str, Any]:
    """The delegation record kept in the parent's log."""
    return {
        "kind": "delegation",
        "agent_id": child_id,
        "role": role,
        "status": status,
        "task_summary": summary(task),
        "result_summary": summary(result),
    }


async def create_child(
    runtime: Runtime,
    ctx: ToolContext,
    agent: Agent,
    *,
    name: str,
    task: str,
    mode: str,
    role: str,
    spec: Mapping[str, Any] | None = None,
    session_id: str | None = None,
) -> Session:
    """A fresh child session in the parent's store, linked from the parent's log."""
    child = await runtime.create_session(
        agent,
        session_id=session_id,
        parent_id=ctx.session_id,
        metadata={
            "name": name,
            "role": role,
            "task": summary(task, 500),
            "mode": mode,
            "parent_call_id": ctx.call_id,
        },
    )
    link = SubagentLink(
        child.id,
        name,
        role,
        agent.name,
        task,
        mode,
        ctx.call_id,
        artifact(child.id, role, "queued" if mode == "background" else "running", task),
        {"parent": ctx.session_id, "child": child.id},
    )
    await ctx.record(Entry.of(link, ctx.run_id))
    if spec is not None:
        await child.journal.record(SubagentDispatched(dict(spec)))
    return child


async def all_decided(runtime: Runtime, child_id: str) -> bool:
    """Whether the child is parked and every call it waits on is decided."""
    log = SessionLog.folded(await runtime.store.load(child_id))
    return bool(log.parked()) and not log.undecided_calls()


async def linked_child(runtime: Runtime, ctx: ToolContext) -> str | None:
    """The child an earlier run of this very call started, if any (the parent resumed
    a turn parked on it), to take up rather than start another."""
    # From the turn's assistant message on: the link is written after it.
    for e in await runtime.store.load(ctx.session_id, after=ctx.turn):
        if isinstance(payload := e.payload, SubagentLink) and payload.call_id == ctx.call_id:
            return payload.child_session_id
    return None


async def hold_turn(runtime: Runtime, ctx: ToolContext, child_id: str, name: str) -> None:
    """Park the parent's turn on this delegation, whose child waits on escalated
    calls (among the parent's `pending()`); the parent's resume runs it again."""
    calls = tuple(c.id for c in SessionLog.folded(await runtime.store.load(child_id)).parked())
    held = ApprovalEscalated(child_id, name, calls, ctx.call_id, ctx.turn)
    await ctx.record(Entry.of(held, ctx.run_id))


def terminal_entry(entries: list[Entry]) -> SubagentResult | None:
    """The child's terminal entry, if it has one (the first one counts)."""
    for e in entries:
        if isinstance(payload := e.payload, SubagentResult):
            return payload
    return None


def kept_answer(entries: list[Entry]) -> str | None:
    """The whole answer (or question) of a remote agent that its delegation cut for
    the parent: its child session's first assistant message, if kept."""
    for e in entries:
        if isinstance(payload := e.payload, MessageEntry) and payload.message.role == "assistant":
            return payload.message.text
    return None


async def child_status(runtime: Runtime, child_id: str) -> ChildStatus:
    """The child's status from its log and its lease."""
    entries = await runtime.store.load(child_id)
    end = terminal_entry(entries)
    if end is not None:
        return ChildStatus(end.status)
    started = any(isinstance(e.payload, SubagentStartedEntry) for e in entries)
    if not started:
        return ChildStatus.QUEUED
    held = await runtime.store.leases.current(session_lease_key(child_id))
    # A killed runner's lease outlives it until it lapses: known dead, it runs nothing.
    if held is not None and not holder_is_gone(held.holder):
        return ChildStatus.RUNNING
    parked = SessionLog.folded(entries).parked()
    return ChildStatus.AWAITING_APPROVAL if parked else ChildStatus.INTERRUPTED


def _outcome_of(
    child: Session, name: str, result: RunResult
) -> tuple[ChildStatus, Any, str | None]:
    if result.status is RunStatus.COMPLETED:
        if child.agent.output_type is None:
            return ChildStatus.DONE, result.text, None
        # A pydantic model, a dataclass, ...: the report is stored as JSON.
        return ChildStatus.DONE, to_jsonable(result.output), None
    if result.status is RunStatus.STOPPED:
        return ChildStatus.STOPPED, result.text or None, None
    reason = result.error or {
        RunStatus.BUDGET_EXHAUSTED: "its budget ran out",
        RunStatus.DEADLINE: "the deadline passed",
        RunStatus.AWAITING_APPROVAL: "it needed approval, which is not available inside a child",
    }.get(result.status, result.status.value)
    return ChildStatus.FAILED, result.text or None, reason


async def execute_child(
    child: Session,
    task: str | None,
    *,
    name: str,
    options: RunOptions,
    emit: Any,
    origin: str,
    escalate_to: str | None = None,
    leave_open: Callable[[], bool] | None = None,
) -> ChildOutcome:
    """Run the child (fenced by whoever holds its lease) and write its one terminal
    entry; `task` None continues it from its log. A gated call is denied in band
    (the child fails), or with `escalate_to` (the parent's id) escalated there,
    the child parked until decided. Cancelled, it ends STOPPED unless
    `leave_open()` says its runtime closes (the parent's next run takes it up).
    """
    parked: list[Any] = []
    if task is None:
        await child.journal.sync()
        parked = child.journal.log.parked()
        if any(child.journal.log.decision(c.id) is None for c in parked):
            return ChildOutcome(child.id, name, ChildStatus.AWAITING_APPROVAL)
    journal = child.journal
    if parked:
        await journal.record(SubagentStartedEntry(name))
    else:
        # Written with the run's first entries (one round trip): nothing
        # waits on it alone, and a child that never got to write them has
        # not started.
        journal.stage(SubagentStartedEntry(name))
    # A text answer's end: the terminal entry is written with the run's end
    # entry, in one write (what `_outcome_of` makes of that very result).
    ended: list[SubagentResult] = []

    def terminal(finished: RunFinishedEntry) -> SubagentResult | None:
        if finished.status is not RunStatus.COMPLETED or child.agent.output_type is not None:
            return None
        # Noted before the write: whether it landed is the log's to say.
        ended.append(SubagentResult(ChildStatus.DONE.value, finished.text, None, finished.usage))
        return ended[0]

    # Made for a write that then left the run's end out (its final answer
    # landed alone): not written, so not noted.
    journal.follow(RunFinishedEntry.KIND, terminal, ended.clear)
    try:
        if parked:
            result = await child.resume(options=options, emit=emit, origin=origin)
        else:
            result = await child.run(task, options=options, emit=emit, origin=origin)
        if result.status is RunStatus.AWAITING_APPROVAL and escalate_to is not None:
            calls = tuple(c.id for c in result.pending)
            await child.runtime.store.append(
                escalate_to, Entry.of(ApprovalEscalated(child.id, name, calls))
            )
            return ChildOutcome(child.id, name, ChildStatus.AWAITING_APPROVAL, usage=result.usage)
        if result.status is RunStatus.AWAITING_APPROVAL:
            for call in result.pending:
                await child.deny(call.id, note="approval is not available inside a child agent")
            # Commit the denials so the child's transcript stays replayable,
            # then end: the stop signal makes the resumed run stop at once.
            stopped = RunOptions(stop=StopSignal())
            stopped.stop.set()
            await child.resume(options=stopped)
            result = RunResult(RunStatus.AWAITING_APPROVAL, usage=result.usage, text=result.text)
        status, answer, error = _outcome_of(child, name, result)
        usage = result.usage
    except asyncio.CancelledError:
        journal.unfollow()
        if ended:
            raise  # its one terminal entry is written
        if leave_open is not None and leave_open():
            raise  # the process winds down: the child is taken up later, not ended
        # The parent was cancelled: the child still gets its one terminal entry.
        with contextlib.suppress(Exception):
            cancelled = SubagentResult(ChildStatus.STOPPED.value, None, "cancelled")
            await asyncio.shield(child.journal.record(cancelled))
        raise
    except StaleLeaseError:
        raise
    except Exception as exc:
        status, answer, error, usage = (
            ChildStatus.FAILED,
            None,
            f"{type(exc).__name__}: {exc}",
            Usage(),
        )
        if ended:
            # Raised at or after the write of the run's end with the terminal
            # entry: if it landed, the child ended as it says.
            journal.unfollow()
            done = terminal_entry(await journal.entries())
            if done is not None:
                return ChildOutcome(
                    child.id,
                    name,
                    ChildStatus(done.status),
                    done.report,
                    done.error,
                    done.usage or Usage(),
                )
            ended.clear()
    journal.unfollow()
    if ended:
        # Written with the run's end (the run returned after writing it).
        done = ended[0]
        return ChildOutcome(
            child.id, name, ChildStatus.DONE, done.report, None, done.usage or Usage()
        )
    await journal.record(SubagentResult(status.value, answer, error, usage))
    return ChildOutcome(child.id, name, status, answer, error, usage)


async def run_inline(
    runtime: Runtime,
    ctx: ToolContext,
    child: Session,
    task: str,
    *,
    name: str,
    role: str,
    max_rounds: int | None = DEFAULT_MAX_ROUNDS,
    also_renew: Callable[[], Awaitable[Any]] | None = None,
) -> ChildOutcome:
    """Run a child to its end inside the calling tool, events tagged with its origin."""
    origin = origin_label(name, child.id, ctx.origin)
    options = RunOptions.for_child(ctx.controls, max_rounds=max_rounds)
    child_started(ctx, child.id, name, task)
    with LiveChildren.of(runtime).running(child.id, options.stop):
        # A fresh child: its lease is free, so no wait.
        async with child.hold() as held:
            held.on_lost(lambda: options.stop.set("the child was taken over"))
            if also_renew is not None:
                held.on_renewed(also_renew)
            outcome = await execute_child(
                child, task, name=name, options=options, emit=ctx.emit, origin=origin
            )
    await report_inline(ctx, outcome, role=role, task=task)
    return outcome


def child_started(ctx: ToolContext, child_id: str, name: str, task: str) -> None:
    """Tell the parent's subscribers an inline child started."""
    ctx.emit(
        SubagentStarted(
            origin=ctx.origin,
            session_id=ctx.session_id,
            child_session_id=child_id,
            name=name,
            task=task,
            mode="inline",
        )
    )


async def report_inline(ctx: ToolContext, outcome: ChildOutcome, *, role: str, task: str) -> None:
    """Record an inline child's end in the parent's log and tell its subscribers."""
    result_text = str(outcome.answer or outcome.error or "")
    report = SubagentReport(
        outcome.child_id,
        outcome.status.value,
        artifact(outcome.child_id, role, outcome.status.value, task, result_text),
        {"parent": ctx.session_id, "child": outcome.child_id},
    )
    await ctx.record(Entry.of(report, ctx.run_id))
    ctx.emit(
        SubagentFinished(
            origin=ctx.origin,
            session_id=ctx.session_id,
            child_session_id=outcome.child_id,
            name=outcome.name,
            status=outcome.status.value,
            summary=summary(result_text, 120),
        )
    )


async def report_moved(ctx: ToolContext, child_id: str, *, role: str, task: str) -> None:
    """Record in the parent's log that the call answered while its inline child
    runs on: a `running` report, so the child reads as moved to the background."""
    report = SubagentReport(
        child_id,
        ChildStatus.RUNNING.value,
        artifact(child_id, role, ChildStatus.RUNNING.value, task),
        {"parent": ctx.session_id, "child": child_id},
    )
    await ctx.record(Entry.of(report, ctx.run_id))
