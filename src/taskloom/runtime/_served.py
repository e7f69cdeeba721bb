"""Runs served as protocol tasks: the one mapping `taskloom mcp serve` and
`taskloom a2a serve` share.

A served task is a session whose id is the task id. Its state is read from
the session's log, never from this process's memory, so any process on the
store answers for it and a server restarted on the store takes it up:

- `working`: a run is in flight (here or in another process), or due: a run
  cut off by a restart is run on from its log, and a parked run whose calls
  were all decided (through the protocol, `taskloom approve`, the console or
  code, in any process) is resumed;
- `input-required`: the run is parked on calls nobody decided yet, or its
  work asked a person a question nobody answered (`pending_inputs`);
- `completed`, `failed`: how the latest run ended;
- `cancelled`: the run stopped, or a stop was asked for the task (`cancel`,
  `Session.request_stop`, from any process): nothing runs it on after that,
  and a run of it in flight here is cancelled within a look.

A due run is launched when the state is read (`read`), and by a cheap look
at the tasks this process knows every `look_every` seconds, so a decision
made elsewhere resumes the run even when nobody asks; `start` takes up, at
a server's start, the recent tasks a restart cut off. A process runs at most
one run of a task at a time; another process's live run keeps the session
(`SessionBusy`), a dead one's lease is taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from ..agent import Agent
from ..backends import SessionMeta
from ..entries import StopRequest
from ..errors import ApprovalConflict, SessionBusy, SessionNotFound
from ..events import Event
from ..log import SessionLog, pending_inputs
from ..results import PendingCall, PendingInput, RunResult, RunStatus
from ._decisions import resume_decided
from ._runtime import Runtime

__all__ = ["ServedRuns", "ServedState", "ServedTask"]

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

    @property
    def is_final(self) -> bool:
        """Whether the task is over: nothing will run it on."""
        return self in (ServedState.COMPLETED, ServedState.FAILED, ServedState.CANCELLED)


@dataclass(frozen=True, slots=True)
class ServedTask:
    """A served task as its session's log tells it at one read.

    `result` is the latest finished run's (None while the first run goes
    on); `waiting` are the parked calls nobody decided and `questions` the
    open questions of its work, both only when `input-required`;
    `created_at` and `updated_at` are epoch seconds.
    """

    id: str
    state: ServedState
    meta: SessionMeta
    result: RunResult | None
    waiting: tuple[PendingCall, ...]
    questions: tuple[PendingInput, ...]
    created_at: float
    updated_at: float


SERVED_KEY = "taskloom.served"
"""The session metadata key that marks a served task's session: its server
goes on with it once it is decided (a command deciding it need not)."""


class ServedRuns:
    """The served tasks of one agent on one runtime (see the module docstring).

    `owns(meta)` says which sessions of the store are this server's tasks
    (the store may hold the host's other sessions); `on_event(task_id,
    event)` sees every event of the runs this process launches.
    """

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
        # Tasks this process knows that are not over: the look reads them.
        self._known: set[str] = set()
        self._looking: asyncio.Task[None] | None = None
        self._chores: set[asyncio.Task[None]] = set()
        # How far this process read each known task's log: the look reads a
        # task again only when it grew, and a stop request past it cancels
        # the task's run here.
        self._seen: dict[str, int] = {}
        self._started = False
        self._closed = False

    # ------------------------------------------------------------ runs

    async def create(
        self, input: str, *, task_id: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> str:
        """A new task: a session (with `task_id` as its id, if given) running
        the agent on `input` in the background; returns its id. `follow` it
        at once (before awaiting anything else) to see every event.

        The input is in the log before the id is returned (as steering, the
        run's first turn): a server killed before the run began runs the
        task on after its restart."""
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
        """The events of the task's run in flight here, from now until it ends
        (none when no run is in flight here)."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        if task_id in self._runs:
            self._followers.setdefault(task_id, []).append(queue)
        else:
            queue.put_nowait(None)
        return _drain(queue)

    def _launch(self, task_id: str) -> None:
        """Run what the task's log says is due (its first turn too) in the
        background of this process, unless a run of it is in flight here."""
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
            # The session's lease first, then the log: read under the lease,
            # what is due cannot change under this process's feet (another
            # process's run may have ended between the read that launched this
            # and now, and must not be run again).
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

    async def steer(self, task_id: str, text: str) -> None:
        """Fold `text` into the task's run at its next round boundary."""
        await self.runtime.steer(task_id, text)

    async def cancel(self, task_id: str, reason: str = "cancelled") -> None:
        """Cancel the task: it reads `cancelled` from now on, in every process.

        The stop request is the durable record every process reads; the run
        in flight here is cancelled (`Runtime.cancel_runs`: its model request
        and tools in flight aborted, its end recorded, its lease released)
        and waited for, within 2 s. A run in another process is
        cancelled by that process's look when it serves the task too, else
        it stops at its next boundary. Cancelling a cancelled task changes
        nothing."""
        if not _cancelled(SessionLog.folded(await self.runtime.store.load(task_id))):
            await self.runtime.request_stop(task_id, reason)
        self._known.discard(task_id)
        # The run's own cancel: it aborts its model request and tools in
        # flight and records its end (STOPPED) before it returns. Cancelling
        # the job after it is the backstop for a run that has not begun.
        await self.runtime.cancel_runs(task_id, reason)
        job = self._stop_here(task_id)
        if job is not None:
            await asyncio.wait([job], timeout=2)

    def _stop_here(self, task_id: str) -> asyncio.Task[None] | None:
        """Cancel the task's run in flight in this process (the hard stop: its
        turn in flight discarded, its lease released); the job, if any."""
        job = self._runs.get(task_id)
        if job is not None:
            job.cancel()
        return job

    # ------------------------------------------------------------ reading

    async def read(self, task_id: str, *, take_up: bool = True) -> ServedTask | None:
        """The task (None if the store has no such task of this server),
        launching the run its log says is due (unless not `take_up`)."""
        if take_up:
            self._start_soon()
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
            state = _ended(result.status)
            if state is ServedState.INPUT_REQUIRED:
                waiting = tuple(log.undecided_calls())
                questions = tuple(pending_inputs(entries))
        if state.is_final:
            self._known.discard(task_id)
            self._seen.pop(task_id, None)
        elif take_up:
            self._known.add(task_id)
            self._seen[task_id] = log.position
            self._look_on()
        created = meta.created_at or (entries[0].created_at if entries else 0.0)
        updated = entries[-1].created_at if entries else created
        return ServedTask(task_id, state, meta, result, waiting, questions, created, updated)

    # ------------------------------------------------------------ taking up

    async def start(self) -> None:
        """Take up this server's recent tasks a restart cut off (the newest
        `TAKE_UP_LIMIT` sessions of the agent): each is read, which runs on
        or resumes what is due."""
        self._started = True
        for meta in await self.runtime.store.list(agent=self.agent.name, limit=TAKE_UP_LIMIT):
            if self.owns(meta):
                with contextlib.suppress(SessionNotFound):
                    await self.read(meta.id)

    def _start_soon(self) -> None:
        # A server that was not started explicitly (an app mounted in a
        # host's server) takes its tasks up at its first read.
        if not self._started and not self._closed:
            self._started = True
            self._chore(self.start())

    def _chore(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._chores.add(task)

        def done(_: object) -> None:
            self._chores.discard(task)
            if not task.cancelled() and task.exception() is not None:
                logger.warning("taking up served tasks failed", exc_info=task.exception())

        task.add_done_callback(done)

    def _look_on(self) -> None:
        if self._closed:
            return
        if self._looking is None or self._looking.done():
            self._looking = asyncio.get_running_loop().create_task(self._look())

    async def _look(self) -> None:
        # A decision or a cancel written by another process (the CLI, the
        # console, another replica) has no way to tell this one: look at the
        # tasks this process knows, now and then, reading one whole only
        # when its log grew.
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
        # Bounded: a server shutting down must not wait on a run that does
        # not wind down (its task is run on after the restart all the same).
        _, pending = await asyncio.wait(jobs, timeout=CLOSE_WAIT)
        if pending:
            logger.warning("%d served runs did not stop within %ss", len(pending), CLOSE_WAIT)


_Due = Literal["run on", "resume"]


def _due(log: SessionLog) -> _Due | None:
    """What a run of the task must do now: "run on" (its run was cut off),
    "resume" (every parked call is decided), or None."""
    if _cancelled(log):
        return None
    if log.run_open:
        # Alive elsewhere or not: `_run` takes the lease to find out (a dead
        # holder is taken over, a live one answers `SessionBusy`).
        return "run on"
    if log.last_finished is None:
        # A new task, or one cut off before its run began: its input (steering).
        return "run on" if log.messages or log.pending else None
    if log.pending_calls() and not log.undecided_calls():
        return "resume"
    return None


def _cancelled(log: SessionLog) -> bool:
    """Whether a stop was asked for the task. A served task is one piece of
    work (its first turn; later messages steer it), so any stop request in
    its log, from any process and at any point, ends it for good: one
    written before its run began too."""
    return log.stop_position > 0


def _ended(status: RunStatus) -> ServedState:
    match status:
        case RunStatus.COMPLETED:
            return ServedState.COMPLETED
        case RunStatus.AWAITING_APPROVAL:
            return ServedState.INPUT_REQUIRED
        case RunStatus.STOPPED:
            return ServedState.CANCELLED
        case _:
            return ServedState.FAILED


async def _drain(queue: asyncio.Queue[Event | None]) -> AsyncIterator[Event]:
    while (event := await queue.get()) is not None:
        yield event
