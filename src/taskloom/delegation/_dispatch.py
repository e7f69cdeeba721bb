"""Background children: the spec, the dispatchers, and the worker that runs them.

The spawn returns a receipt at once; the child runs through a `Dispatcher`.
What crosses it is a `ChildSpec`, plain JSON with no credentials and no
code: the worker rebuilds the child from its host's registries. The worker
takes the child's lease, skips a child that has its terminal entry, runs it,
writes exactly one terminal entry and reports to the parent's inbox under a
notice id derived from the child's, so a redelivered job still yields one
report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Protocol, runtime_checkable

from .._run_controls import RunControls
from ..agent import Agent
from ..backends import BackgroundActivity, BackgroundNotice, Lease, Leases
from ..background import BackgroundService, Detached, FollowJob
from ..entries import Entry, MessageEntry, SubagentResult
from ..errors import ConfigurationError, SessionBusy, StaleLeaseError
from ..events import Event, origin_label
from ..loop import Budget, RunOptions
from ..loop.ports import TreeBudget
from ..messages import Usage
from ..runtime import Runtime, Session
from ._children import (
    CHILD_LEASE,
    DEFAULT_MAX_ANSWER_CHARS,
    ChildOutcome,
    ChildStatus,
    LiveChildren,
    all_decided,
    cap_answer,
    capped_error,
    execute_child,
    read_on,
    report_text,
    summary,
    terminal_entry,
)

logger = logging.getLogger("taskloom")


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """Everything a worker needs to rebuild and run a background child (JSON-safe).

    `traceparent`: the W3C trace context of the spawning tool call, which the
    child's run continues. `budget`: the spawning run's tree budget
    (`TreeBudget.to_dict()`), or None. `on_approval`: `"deny"` or
    `"escalate"` a gated call. `max_answer_chars` caps its report.
    """

    child_session_id: str
    parent_session_id: str
    name: str
    task: str
    instructions: str | None = None
    tools: tuple[str, ...] = ()
    model: str | None = None
    type: str | None = None
    max_rounds: int | None = None
    parent_run_id: str | None = None
    traceparent: str | None = None
    budget: dict[str, Any] | None = None
    on_approval: str = "deny"
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        out = asdict(self)
        out["tools"] = list(self.tools)
        return out

    def to_json(self) -> str:
        """The spec as JSON text (what crosses a queue)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChildSpec:
        """The value `to_dict` described."""
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        fields["tools"] = tuple(fields.get("tools") or ())
        return cls(**fields)

    @classmethod
    def from_json(cls, raw: str | bytes) -> ChildSpec:
        """The spec a `to_json` text describes."""
        return cls.from_dict(json.loads(raw))


def registration(
    child_id: str, name: str, task: str, run_id: str | None, mode: str = "inline"
) -> BackgroundActivity:
    """A child's registration under its parent, while it runs or its report is due."""
    meta = {"name": name, "mode": mode}
    return BackgroundActivity(
        child_id, "subagent", f"{name}: {summary(task, 80)}", time.time(), run_id, meta
    )


def report_notice_id(child_id: str) -> str:
    """The one notice id a child's report is pushed under."""
    return f"subagent:{child_id}"


@runtime_checkable
class Dispatcher(Protocol):
    """Hands a background child's spec to something that will run it."""

    async def dispatch(self, spec: ChildSpec) -> None:
        """Queue the child; return once it is handed over (not when it ends)."""
        ...


class ChildWorker:
    """Runs background children from their specs (any process sharing the store)."""

    def __init__(
        self, runtime: Runtime, *, worker_id: str | None = None, lease: float = CHILD_LEASE
    ) -> None:
        self.runtime = runtime
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:8]}"
        self.lease = lease

    def build_agent(self, spec: ChildSpec) -> Agent:
        """The child agent from the host's registries; a name it lacks is a ConfigurationError."""
        rt = self.runtime
        missing = [t for t in spec.tools if t not in rt.tools]
        if missing:
            raise ConfigurationError(
                f"this worker's runtime has no tool(s) {missing} (pass Runtime(tools=...))"
            )
        if spec.model is None:
            raise ConfigurationError(f"child {spec.child_session_id} has no model in its spec")
        return Agent(
            spec.name,
            rt.resolve_model(spec.model),
            spec.instructions,
            [rt.tools[t] for t in spec.tools],
        )

    async def run(
        self,
        spec: ChildSpec | str | bytes,
        *,
        agent: Agent | None = None,
        wait: bool | float = False,
    ) -> ChildStatus | None:
        """Run the child if no one else holds it and report its end to its
        parent's inbox: its terminal status (AWAITING_APPROVAL when parked on
        escalated calls), or None when another live worker holds its lease
        (after waiting `wait` seconds). `agent` is the child's agent when the
        caller has it; otherwise it is rebuilt from the runtime's registries."""
        if not isinstance(spec, ChildSpec):
            spec = ChildSpec.from_json(spec)
        outcome = await self.take_up(spec, agent=agent, wait=wait, report=True)
        return None if outcome is None else outcome.status

    async def take_up(
        self,
        spec: ChildSpec,
        *,
        agent: Agent | None = None,
        wait: bool | float = False,
        lease: Lease | None = None,
        leave_open: Callable[[], bool] | None = None,
        options: RunOptions | None = None,
        emit: Callable[[Event], None] | None = None,
        origin: str | None = None,
        slot: contextlib.AbstractAsyncContextManager[None] | None = None,
        go_on: bool = True,
        report: bool = False,
    ) -> ChildOutcome | None:
        """Run the child on to its end (or a park on undecided escalated calls):
        its outcome, how it ended before, or None when another live worker
        holds it. `lease`: the child's lease already taken (left to its
        taker). Cancelled, the child ends STOPPED unless `leave_open()`. A
        waiting parent gives its run's `options`, `emit`, `origin` and `slot`.
        With `go_on`, a child decided while it was held runs on. Unreported,
        unless `report`: then a terminal child is reported (`report`), in the
        statement that gives its lease up where the store can write both."""
        rt = self.runtime
        background = BackgroundService.of(rt)
        try:
            agent = agent if agent is not None else self.build_agent(spec)
        except ConfigurationError:
            # An ended child is still reported, whatever this worker can build.
            done = terminal_entry(await rt.store.load(spec.child_session_id))
            if done is None:
                raise
            return self._ended(spec, done)
        tree = None
        if spec.budget is not None:
            # The tree's row is in the database every worker shares.
            tree = TreeBudget(
                rt.budgets, spec.budget["tree"], Budget.from_dict(spec.budget["budget"])
            )

        async def keep_registered() -> None:
            await background.lifecycle.alive(
                spec.parent_session_id, spec.child_session_id, lease=self.lease * 10
            )

        while True:
            reported = False
            # Read only under the lease below (another worker may end the child
            # before it). Children are short as a rule: no snapshot is looked
            # for (`new`), which saves a statement.
            child = Session(rt, spec.child_session_id, agent, new=True)
            run = options or RunOptions.for_child(
                RunControls(tree=tree), max_rounds=spec.max_rounds
            )
            try:
                # Queued children wait here, not on the store's connections.
                async with slot or rt.child_slot():
                    with LiveChildren.of(rt).running(child.id, run.stop):
                        async with child.hold(ttl=self.lease, wait=wait, lease=lease) as held:
                            held.on_lost(partial(run.stop.set, "the child was taken over"))
                            held.on_renewed(keep_registered)
                            # Re-read under the lease: a worker that held it
                            # before may have ended the child meanwhile.
                            entries = await child.entries()
                            done = terminal_entry(entries)
                            if done is None:
                                outcome = await self._execute(
                                    spec,
                                    child,
                                    entries,
                                    run,
                                    leave_open,
                                    emit or background.emit,
                                    origin or origin_label(spec.name, child.id),
                                )
                                if report and lease is None and outcome.status.is_terminal:
                                    # The report and the lease's release: one
                                    # write, so one round trip, where the store
                                    # can (else apart, the release first).
                                    reported = await held.give_up_with(
                                        partial(self._report_releasing, spec, outcome)
                                    )
            except SessionBusy:
                return None  # another live worker holds it
            except StaleLeaseError:
                # Taken over while we stalled: it is theirs to end and report.
                logger.warning(
                    "background child %s of session %s was taken over by another worker",
                    spec.child_session_id,
                    spec.parent_session_id,
                )
                return None
            if done is not None:
                ended = self._ended(spec, done)
                if report:
                    await self.report(spec, ended)
                return ended
            parked = outcome.status is ChildStatus.AWAITING_APPROVAL
            if go_on and parked and await all_decided(rt, child.id):
                # A decision taken while we still held the lease found it
                # busy: with nothing left to decide now, go on here.
                continue
            if outcome.status is ChildStatus.FAILED:
                logger.warning(
                    "background child %s of session %s failed: %s",
                    child.id,
                    spec.parent_session_id,
                    outcome.error,
                )
            if report and outcome.status.is_terminal and not reported:
                await self.report(spec, outcome)
            return outcome

    async def _execute(
        self,
        spec: ChildSpec,
        child: Session,
        entries: list[Entry],
        options: RunOptions,
        leave_open: Callable[[], bool] | None,
        emit: Callable[[Event], None] | None,
        origin: str,
    ) -> ChildOutcome:
        rt = self.runtime
        background = BackgroundService.of(rt)
        has_task = any(isinstance(e.payload, MessageEntry) for e in entries)
        if has_task:
            logger.info(
                "background child %s of session %s was redelivered; continuing it from its log",
                child.id,
                spec.parent_session_id,
            )
        with rt.observer.continue_trace(spec.traceparent):
            return await execute_child(
                child,
                None if has_task else spec.task,
                name=spec.name,
                options=options,
                emit=emit,
                origin=origin,
                escalate_to=spec.parent_session_id if spec.on_approval == "escalate" else None,
                leave_open=leave_open or (lambda: background.closing),
            )

    def _ended(self, spec: ChildSpec, done: SubagentResult) -> ChildOutcome:
        # A previous worker ended it but may have died before reporting; the
        # report is idempotent, so reporting again is safe.
        logger.info(
            "background child %s of session %s was delivered again after it ended; "
            "reporting it again",
            spec.child_session_id,
            spec.parent_session_id,
        )
        return ChildOutcome(
            spec.child_session_id,
            spec.name,
            ChildStatus(done.status),
            done.report,
            done.error,
            done.usage or Usage(),
        )

    async def _report_releasing(
        self, spec: ChildSpec, outcome: ChildOutcome, leases: Leases, lease: Lease
    ) -> bool:
        """`report`, with the child's `lease` given up in the same write; False,
        with nothing written, where the store cannot."""
        lifecycle = BackgroundService.of(self.runtime).lifecycle
        notice = report_notice(spec, outcome)
        wrote = await lifecycle.finish_releasing(spec.parent_session_id, notice, leases, lease)
        return wrote is not None

    async def report(self, spec: ChildSpec, outcome: ChildOutcome) -> None:
        """Put the ended child's report in its parent's inbox (once, however often called)."""
        lifecycle = BackgroundService.of(self.runtime).lifecycle
        await lifecycle.finish(spec.parent_session_id, report_notice(spec, outcome))


def report_notice(spec: ChildSpec, outcome: ChildOutcome) -> BackgroundNotice:
    """The one notice that reports the ended child to its parent."""
    name, short, limit = spec.name, spec.child_session_id[:8], spec.max_answer_chars
    if outcome.status is ChildStatus.DONE:
        body = cap_answer(report_text(outcome.answer), limit, read_on(spec.child_session_id, limit))
        text = f"background agent {name!r} ({short}) finished. Its report:\n{body}"
    else:
        word = "was stopped" if outcome.status is ChildStatus.STOPPED else "failed"
        text = f"background agent {name!r} ({short}) {word}" + (
            f": {capped_error(outcome.error, limit)}" if outcome.error else ""
        )
    return BackgroundNotice(
        report_notice_id(spec.child_session_id),
        spec.child_session_id,
        "subagent",
        text,
        outcome.status.value,
        time.time(),
        {
            "child_session_id": spec.child_session_id,
            "name": name,
            "result_summary": summary(str(outcome.answer or outcome.error or "")),
            "tokens": outcome.usage.total_tokens,
        },
    )


class FollowedChild:
    """A background child as followed work (`Followed`): run on from its log
    under the follower's lease; its report is the follow's one notice."""

    def __init__(self, worker: ChildWorker, spec: ChildSpec, agent: Agent | None) -> None:
        self.worker = worker
        self.spec = spec
        self.agent = agent

    async def follow(self, job: FollowJob) -> BackgroundNotice:
        """Run the child on under `job.lease`; its report (see `Followed.follow`)."""
        background = self.worker.runtime.background
        try:
            outcome = await self.worker.take_up(
                self.spec,
                agent=self.agent,
                lease=job.lease,
                leave_open=lambda: job.detaching or background.closing,
            )
        except asyncio.CancelledError:
            if job.detaching or background.closing:
                raise
            # Stopped: the run wrote its terminal entry; say so as it says.
            if (current := asyncio.current_task()) is not None:
                current.uncancel()
            outcome = ChildOutcome(
                self.spec.child_session_id, self.spec.name, ChildStatus.STOPPED, error="cancelled"
            )
        if outcome is None or not outcome.status.is_terminal:
            # Taken over (its taker reports it), or parked on calls a
            # person decides (deciding them resumes it).
            raise Detached()
        return report_notice(self.spec, outcome)

    async def cancel(self, record: Mapping[str, Any]) -> None:
        """Nothing: a child nobody runs does nothing until taken up."""


class _WorkerDispatcher:
    """Dispatchers running children in this process with a `ChildWorker` (or one made on `bind`)."""

    def __init__(self, worker: ChildWorker | None = None) -> None:
        self._worker = worker

    def bind(self, runtime: Runtime) -> None:
        """Use `runtime` for children when no worker was given."""
        if self._worker is None:
            self._worker = ChildWorker(runtime)

    @property
    def worker(self) -> ChildWorker:
        """The worker that runs the children."""
        if self._worker is None:
            raise ConfigurationError(
                f"{type(self).__name__} has no worker yet: pass one, or bind(runtime)"
            )
        return self._worker


class InlineDispatcher(_WorkerDispatcher):
    """Runs the child right away in the dispatching task (simple hosts, tests)."""

    async def dispatch(self, spec: ChildSpec) -> None:
        """Hand the child to the worker (see `Dispatcher.dispatch`)."""
        await self.worker.run(spec)


class TaskDispatcher(_WorkerDispatcher):
    """Runs each child in an asyncio task of this process; `close()` cancels them."""

    def __init__(self, worker: ChildWorker | None = None) -> None:
        super().__init__(worker)
        self._tasks: set[asyncio.Task[Any]] = set()

    async def dispatch(self, spec: ChildSpec) -> None:
        """Hand the child to the worker (see `Dispatcher.dispatch`)."""
        task = asyncio.get_running_loop().create_task(self.worker.run(spec))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for every dispatched child to end."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel the children still running (each ends with a terminal entry)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
