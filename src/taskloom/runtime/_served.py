"""Runs served as protocol tasks: the one mapping `taskloom mcp serve` and
`taskloom a2a serve` share.

A served task is a session whose id is the task id, its state read from the
log, so any process on the store answers for it: `working` (a run in flight
anywhere, or due: cut off by a restart, or parked with every call decided),
`input-required` (parked on undecided calls or unanswered questions),
`completed`, `failed`, `cancelled` (a stop asked from any process). A due
run is launched when the state is read, and by a look at the known tasks
every `look_every` seconds; `start` takes up what a restart cut off. A live
run elsewhere keeps the session (`SessionBusy`); a dead one's lease is taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

from ..agent import Agent
from ..backends import SessionMeta
from ..entries import StopRequest
from ..errors import ApprovalConflict, SessionBusy, SessionNotFound
from ..log import SessionLog, pending_inputs
from ..results import PendingCall, PendingInput, RunResult, RunStatus
from ._decisions import resume_decided
from ._runtime import Runtime

if TYPE_CHECKING:
    from ..events import Event

logger = logging.getLogger("taskloom.runtime")

TAKE_UP_LIMIT = 200
"""How many of the agent's newest sessions `ServedRuns.start` looks at."""

CLOSE_WAIT = 5.0
"""Seconds `ServedRuns.close` waits for the runs it cancels."""


class ServedState(Enum):
    """What a served task is doing, as every protocol's task states say it."""

    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class ServedTask:
    """A served task as its log tells it at one read: `result` is the latest
    finished run's; `waiting` (undecided calls) and `questions` (open
    questions) only when `input-required`; times are epoch seconds."""

    id: str
    state: ServedState
    meta: SessionMeta
    result: RunResult | None
    waiting: tuple[PendingCall, ...]
    questions: tuple[PendingInput, ...]
    created_at: float
    updated_at: float


SERVED_KEY = "taskloom.served"
"""The session metadata key of a served task's session: its server goes on
with it once decided (a command deciding it need not)."""


class ServedRuns:
    """The served tasks of one agent on one runtime: `owns(meta)` says which
    sessions are this server's; `on_event` sees the events of runs run here."""

    def __init__(
        self,
        runtime: Runtime,
        agent: Agent[Any, Any],
        owns: Callable[[SessionMeta], bool],
        *,
        on_event: Callable[[str, Event], None] | None = None,
        look_every: float = 1.0,
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.owns = owns
        self.on_event = on_event
        self.look_every = look_every
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._followers: dict[str, list[asyncio.Queue[Event | None]]] = {}
        self._known: set[str] = set()  # not over: the look reads them
        self._looking: asyncio.Task[None] | None = None
        self._chores: set[asyncio.Task[None]] = set()
        # How far each known task's log was read: the look reads it again
        # only when it grew.
        self._seen: dict[str, int] = {}
        self._started = False
        self._closed = False

    async def create(
        self, input: str, *, task_id: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> str:
        """A new task (id `task_id`, if given) running the agent on `input` in
        the background, the input in its log before its id is returned."""
        session = await self.runtime.create_session(
            self.agent, session_id=task_id, metadata={**(metadata or {}), SERVED_KEY: True}
        )
        await self.runtime.steer(session.id, input)
        self._launch(session.id)
        return session.id

    def running(self, task_id: str) -> bool:
        """Whether a run of the task is in flight in this process."""
        return task_id in self._runs

    def follow(self, task_id: str) -> AsyncIterator[Event]:
        """The events of the task's run in flight here, from now until it ends."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        if task_id in self._runs:
            self._followers.setdefault(task_id, []).append(queue)
        else:
            queue.put_nowait(None)
        return _drain(queue)

    def _launch(self, task_id: str) -> None:
        """Run what the task's log says is due, unless a run of it is in flight here."""
        if task_id in self._runs or self._closed:
            return
        job = asyncio.get_running_loop().create_task(self._run(task_id))
        self._runs[task_id] = job
        self._known.add(task_id)
        self._look_on()

        def ended(_: object) -> None:
            self._runs.pop(task_id, None)
            for queue in self._followers.pop(task_id, []):
                queue.put_nowait(None)

        job.add_done_callback(ended)

    async def _run(self, task_id: str) -> None:
        def emit(event: Event) -> None:
            for queue in self._followers.get(task_id, ()):
                queue.put_nowait(event)
            if self.on_event is not None:
                self.on_event(task_id, event)

        try:
            session = await self.runtime.open_session(task_id, self.agent)
            # The lease first, then the log: what is due cannot change under
            # the lease (another process's run may have ended meanwhile).
            async with session.hold():
                await session.journal.sync()
                due = _due(session.journal.log)
                if due == "run on":
                    await session.run(None, emit=emit)
                elif due == "resume":
                    await resume_decided(session, emit=emit)
        except SessionBusy:
            pass  # a live run of another process has it
        except Exception:
            # The run recorded how it ended in the session's log; readers read it there.
            logger.warning("the run of served task %s failed", task_id, exc_info=True)

    async def decide(
        self, task: ServedTask, decisions: Mapping[str, tuple[bool, str | None]]
    ) -> None:
        """Approve or deny the task's waiting calls `decisions` names (call id:
        (approved, note)); a call decided first elsewhere keeps that decision."""
        waiting = {c.id for c in task.waiting}
        session = await self.runtime.open_session(task.id, self.agent)
        for call_id, (approved, note) in decisions.items():
            if call_id in waiting:
                decide = session.approve if approved else session.deny
                with contextlib.suppress(ApprovalConflict):
                    await decide(call_id, note=note)

    async def cancel(self, task_id: str, reason: str = "cancelled") -> None:
        """Cancel the task: it reads `cancelled` from now on, in every process.
        A run of it here is cancelled and waited for, within 2 s; one elsewhere
        by that process's look, else at its next boundary."""
        if not _cancelled(SessionLog.folded(await self.runtime.store.load(task_id))):
            await self.runtime.request_stop(task_id, reason)
        self._known.discard(task_id)
        # The run's own cancel records its end; cancelling the job is the
        # backstop for a run that has not begun.
        await self.runtime.cancel_runs(task_id, reason)
        job = self._stop_here(task_id)
        if job is not None:
            await asyncio.wait([job], timeout=2)

    def _stop_here(self, task_id: str) -> asyncio.Task[None] | None:
        job = self._runs.get(task_id)
        if job is not None:
            job.cancel()
        return job

    async def read(self, task_id: str, *, take_up: bool = True) -> ServedTask | None:
        """The task (None if the store has no such task of this server),
        launching the run its log says is due (unless not `take_up`)."""
        if take_up and not (self._started or self._closed):
            # Not started explicitly (an app mounted in a host's server): at its first read.
            self._started = True
            chore = asyncio.get_running_loop().create_task(self.start())
            self._chores.add(chore)
            chore.add_done_callback(self._chore_done)
        try:
            meta = await self.runtime.store.get(task_id)
        except SessionNotFound:
            return None
        if meta is None or not self.owns(meta):
            return None
        entries = await self.runtime.store.load(task_id)
        log = SessionLog.folded(entries)
        result = log.finished_result(task_id, self.agent)
        waiting: tuple[PendingCall, ...] = ()
        questions: tuple[PendingInput, ...] = ()
        due = _due(log)
        if _cancelled(log):
            state = ServedState.CANCELLED
            self._stop_here(task_id)  # cancelled through another process: not on here
        elif due is not None or log.run_open or task_id in self._runs:
            if due is not None and take_up:
                self._launch(task_id)
            questions = tuple(pending_inputs(entries))
            state = ServedState.INPUT_REQUIRED if questions else ServedState.WORKING
        elif result is None:
            state = ServedState.FAILED  # no input was ever written: nothing to run
        else:
            state = _ENDED.get(result.status, ServedState.FAILED)
            if state is ServedState.INPUT_REQUIRED:
                waiting = tuple(log.undecided_calls())
                questions = tuple(pending_inputs(entries))
        if state in _FINAL:
            self._known.discard(task_id)
            self._seen.pop(task_id, None)
        elif take_up:
            self._known.add(task_id)
            self._seen[task_id] = log.position
            self._look_on()
        created = meta.created_at or (entries[0].created_at if entries else 0.0)
        updated = entries[-1].created_at if entries else created
        return ServedTask(task_id, state, meta, result, waiting, questions, created, updated)

    async def start(self) -> None:
        """Take up this server's recent tasks (the newest `TAKE_UP_LIMIT`
        sessions of the agent) by reading each: what is due runs."""
        self._started = True
        for meta in await self.runtime.store.list(agent=self.agent.name, limit=TAKE_UP_LIMIT):
            if self.owns(meta):
                with contextlib.suppress(SessionNotFound):
                    await self.read(meta.id)

    def _chore_done(self, task: asyncio.Task[None]) -> None:
        self._chores.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("taking up served tasks failed", exc_info=task.exception())

    def _look_on(self) -> None:
        if self._closed:
            return
        if self._looking is None or self._looking.done():
            self._looking = asyncio.get_running_loop().create_task(self._look())

    async def _look(self) -> None:
        # A decision or a cancel written by another process cannot tell this
        # one: look at the known tasks now and then.
        while self._known:
            await asyncio.sleep(self.look_every)
            for task_id in list(self._known):
                try:
                    await self._look_at(task_id)
                except Exception:
                    logger.warning("reading served task %s failed", task_id, exc_info=True)
                    self._known.discard(task_id)

    async def _look_at(self, task_id: str) -> None:
        seen = self._seen.get(task_id)
        if seen is None:
            await self.read(task_id)
            return
        news = await self.runtime.store.load(task_id, after=seen)
        if task_id in self._runs:
            # The run here writes most of the news: only a stop request matters.
            if news:
                self._seen[task_id] = news[-1].position
            if any(e.kind == StopRequest.KIND for e in news):
                self._stop_here(task_id)
        elif news:
            await self.read(task_id)

    async def close(self) -> None:
        """Stop the runs of this process (their tasks go on after a restart)."""
        self._closed = True
        jobs = [*self._runs.values(), *self._chores]
        if self._looking is not None:
            jobs.append(self._looking)
        for job in jobs:
            job.cancel()
        if not jobs:
            return
        # Bounded: the task of a run that does not wind down runs on after a restart.
        _, pending = await asyncio.wait(jobs, timeout=CLOSE_WAIT)
        if pending:
            logger.warning("%d served runs did not stop within %ss", len(pending), CLOSE_WAIT)


_Due = Literal["run on", "resume"]


def _due(log: SessionLog) -> _Due | None:
    """What a run of the task must do now: "run on" (cut off), "resume" (every
    parked call decided), or None."""
    if _cancelled(log):
        return None
    if log.run_open:
        # Alive elsewhere or not: `_run` takes the lease to find out.
        return "run on"
    if log.last_finished is None:
        # A new task, or one cut off before its run began: its input (steering).
        return "run on" if log.messages or log.pending else None
    if log.pending_calls() and not log.undecided_calls():
        return "resume"
    return None


def _cancelled(log: SessionLog) -> bool:
    """Whether a stop was asked for the task (any, at any point: it is one piece of work)."""
    return log.stop_position > 0


_ENDED = {
    RunStatus.COMPLETED: ServedState.COMPLETED,
    RunStatus.AWAITING_APPROVAL: ServedState.INPUT_REQUIRED,
    RunStatus.STOPPED: ServedState.CANCELLED,
}
"""A finished run's task state by its status (any other: failed)."""

_FINAL = (ServedState.COMPLETED, ServedState.FAILED, ServedState.CANCELLED)
"""The states after which nothing runs the task on."""


async def _drain(queue: asyncio.Queue[Event | None]) -> AsyncIterator[Event]:
    while (event := await queue.get()) is not None:
        yield event
