"""`TemporalWorker`: a Temporal worker running taskloom's activities with a runtime.

Each activity runs the body the procrastinate worker runs for the same job
(`JobBodies`): bring a session up to date from its log, or run a background
child with the fenced `ChildWorker`. So a retried activity (its worker died:
its heartbeat stopped) goes on from the log like a redelivered job: a tool
call the dead worker began is answered "interrupted", never run again; a
session still leased by someone else is retried with backoff (`SessionBusy`),
and a lease taken over ends the attempt for a retry.

What procrastinate keeps in a row per job, here the log and the workflow
keep: a run a job started names the job in its `RunStartedEntry.by` (the
same `RUN_BY` the procrastinate worker sets), so a retried attempt of a
job asking for a run anyway (`RunDemand.ALWAYS`) sees its run was started
and does not start another; a run stopped by a drain returns "drained" to
the workflow, which runs the activity again on another worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .._run_controls import StopSignal
from ..entries import RunStartedEntry
from ..errors import ConfigurationError, StoreNotFound, StoreUnavailable
from ._bodies import JobBodies
from ._engine import Busy, Drained, Lost, Malformed, Mark, logged
from ._temporal import RUNNING_SESSION
from ._temporal_firing import FiringWorkflow
from ._temporal_names import CHILD_ACTIVITY, RUN_ACTIVITY
from ._temporal_schedules import fire_activity
from ._temporal_workflows import ChildWorkflow, SessionWorkflow

if TYPE_CHECKING:
    from ..runtime import Runtime, Session
    from ._temporal import TemporalQueue

logger = logging.getLogger("taskloom.distributed")

CANCEL_BOUND = 10.0
"""Seconds a cancelled run gets to end STOPPED before its activity is torn down."""

UNWIND_BOUND = 5.0
"""Seconds a run torn down (`Task.cancel`) gets to unwind, its session lease
released, before its activity ends anyway."""

CANCEL_REASON = "its Temporal workflow was cancelled"


class _Attempt:
    """The runs one activity attempt started (their stop signals), and the
    cancel asked of it: a run registering after the cancel came is cancelled
    as it registers."""

    __slots__ = ("cancelled", "stops")

    def __init__(self) -> None:
        self.stops: list[StopSignal] = []
        self.cancelled: str | None = None

    def register(self, stop: StopSignal) -> None:
        self.stops.append(stop)
        if self.cancelled is not None:
            stop.cancel(self.cancelled)

    def cancel(self, reason: str) -> None:
        self.cancelled = reason
        for stop in self.stops:
            stop.cancel(reason)


_ATTEMPT: ContextVar[_Attempt | None] = ContextVar("taskloom_activity_attempt", default=None)
"""The current activity attempt (to cancel the runs it started)."""


async def _torn_down(running: asyncio.Future[Any], bound: float) -> None:
    """Give `running` `bound` seconds to end by itself, then cancel it and wait
    up to `UNWIND_BOUND` seconds for it to unwind. A further cancel of the
    caller meanwhile tears the run down at once but still waits for it: a
    run left behind would keep its session lease after its activity ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    torn = False
    while not running.done():
        left = deadline - loop.time()
        if left <= 0:
            if torn:
                logger.warning("a cancelled run did not unwind within %ss", UNWIND_BOUND)
                return
            running.cancel()
            torn = True
            deadline = loop.time() + UNWIND_BOUND
            continue
        try:
            await asyncio.wait([running], timeout=left)
        except asyncio.CancelledError:
            if not torn:
                deadline = loop.time()  # cancelled again: tear the run down now


@dataclass(slots=True)
class ActivityJob:
    """What `JobBodies` reads of a job, for one activity attempt: `id` names the
    job (workflow, run and demand), `attempts` counts the attempts before this
    one (a run after a drain counts one), `worker_id` names this worker;
    `explicit`: the job asks for a run anyway (`RunDemand.ALWAYS`)."""

    id: str
    attempts: int
    worker_id: str
    task_name: str
    session_id: str = ""
    drained: bool = False
    cut: bool = False
    explicit: bool = False


class ActivityEngine:
    """The Temporal engine's side of `JobBodies` (a `JobEngine`): a job's marks
    kept in the log and the workflow (see the module docstring), runs
    cancelled with their workflow, wake-ups as demands."""

    def __init__(self, queue: TemporalQueue, runtime: Runtime) -> None:
        self._queue = queue
        self._runtime = runtime

    async def marked(self, job: ActivityJob, session: Session) -> Mark | None:
        """Whether an earlier attempt of `job` started its run (its
        `RunStartedEntry` names the job), for a job asking for a run anyway;
        a run a drain cut is told by the workflow (`drained`). Read from the
        session as it was opened: the fold's last run, then the entries held
        since its snapshot; the store's older entries only when the run is
        not among them and a snapshot hides the ones before."""
        if job.drained:
            return (0, True)  # the run a drain cut goes on
        if not job.explicit:
            # Only a job asking for a run anyway reads where its run began:
            # for the others a retry does what the log still needs.
            return None
        needle = f", job {job.id} ("
        log = session.journal.log
        last = log.last_run_started
        if last is None:
            return None  # no run ever started
        for entry in (last, *reversed(log.entries)):
            payload = entry.payload
            if isinstance(payload, RunStartedEntry) and needle in payload.by:
                return (entry.position, False)  # this job started its run already
        if log.base > 0:
            for entry in reversed(await self._runtime.store.load(session.id)):
                payload = entry.payload
                if entry.position > log.base or not isinstance(payload, RunStartedEntry):
                    continue
                if needle in payload.by:
                    return (entry.position, False)
        return None

    async def mark(self, job: ActivityJob, session: Session, *, drained: bool) -> None:
        """The run's own `RunStartedEntry` is the mark; a drain that cut a run
        is told to the workflow by the activity's result."""
        job.cut = drained

    def watch(self, stop: StopSignal) -> None:
        """A cancel of the workflow that came before the run got here applies to it."""
        attempt = _ATTEMPT.get()
        if attempt is not None:
            attempt.register(stop)

    async def wake(self, session_id: str) -> str:
        """Signal-with-start the session's workflow with a wake-up demand."""
        return await self._queue.wake(session_id)


def _failure(exc: BaseException) -> ApplicationError:
    if isinstance(exc, Busy | Lost):
        return ApplicationError(str(exc), type=type(exc).__name__)
    if isinstance(exc, ConfigurationError | Malformed | StoreNotFound):
        return ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True)
    if isinstance(exc, RPCError | StoreUnavailable | OSError):
        # An outage of Temporal or the store, not of the run: a retry goes on
        # from the log (a child reported already is not run or reported again).
        return ApplicationError(f"{type(exc).__name__}: {exc}"[:300], type="Unavailable")
    # As on procrastinate: a run that failed otherwise recorded it in its
    # log, and running it again would not cure it.
    return ApplicationError(f"{type(exc).__name__}: {exc}"[:300], type="Failed", non_retryable=True)


class Activities:
    """The activities of one worker process: each runs its `JobBodies` body while
    heartbeating, and tells Temporal whether a retry can help."""

    def __init__(self, bodies: JobBodies[ActivityEngine], identity: str, beat_every: float) -> None:
        self.bodies = bodies
        self.identity = identity
        self.beat_every = beat_every

    async def _heartbeating(self, job: ActivityJob, body: Callable[[], Awaitable[str]]) -> str:
        async def beat() -> None:
            while True:
                activity.heartbeat()
                await asyncio.sleep(self.beat_every)

        beating = asyncio.ensure_future(beat())
        try:
            return await logged(job, body)  # type: ignore[arg-type]
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    def _job(self, args: dict[str, Any], task: str) -> ActivityJob:
        info = activity.info()
        drained = bool(args.get("drained"))
        attempts = info.attempt - 1 or int(drained)
        job = str(args.get("job") or info.activity_id)
        return ActivityJob(job, attempts, self.identity, task, drained=drained)

    async def _cancellable(self, job: ActivityJob, body: Callable[[], Awaitable[str]]) -> str:
        """`body`, heartbeating; when its workflow is cancelled, its run is
        cancelled (`StopSignal.cancel`: it ends STOPPED, its log whole) within
        `CANCEL_BOUND` seconds, and the activity reports the cancel once the
        run has ended (or was torn down and unwound)."""
        attempt = _Attempt()
        token = _ATTEMPT.set(attempt)
        try:
            running = asyncio.ensure_future(self._heartbeating(job, body))
        finally:
            _ATTEMPT.reset(token)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            if details is not None and details.cancel_requested:
                attempt.cancel(CANCEL_REASON)
                await _torn_down(running, CANCEL_BOUND)
            else:
                # The worker stops, or the attempt was given up: no grace.
                await _torn_down(running, 0.0)
            raise

    @activity.defn(name=RUN_ACTIVITY)
    async def run_session(self, args: dict[str, Any]) -> dict[str, Any]:
        """Bring the session up to date from its log; its status, or that a drain cut it."""
        job = self._job(args, RUN_ACTIVITY)
        job.session_id = str(args.get("session_id"))
        job.explicit = args.get("explicit") is True
        token = RUNNING_SESSION.set(job.session_id)
        try:
            status = await self._cancellable(job, lambda: self.bodies.run_session(job, args))  # type: ignore[arg-type]
        except Drained:
            return {"status": "drained", "again": True, "drained": job.cut}
        except Exception as exc:
            raise _failure(exc) from None
        finally:
            RUNNING_SESSION.reset(token)
        if args.get("search"):
            return {
                "status": status,
                "agent": (await self.bodies.runtime.store.get(job.session_id)).agent,
            }
        return {"status": status}

    @activity.defn(name=CHILD_ACTIVITY)
    async def run_child(self, args: dict[str, Any]) -> dict[str, Any]:
        """Run a background child to its report; its status."""
        job = self._job(args, CHILD_ACTIVITY)
        try:
            status = await self._heartbeating(job, lambda: self.bodies.run_child(job, args))  # type: ignore[arg-type]
        except Exception as exc:
            raise _failure(exc) from None
        return {"status": status, "agent": str(args["spec"].get("name") or "")}


class TemporalWorker:
    """Runs `queue`'s workflows and activities with `runtime` until drained,
    `concurrency` activities at once."""

    def __init__(self, queue: TemporalQueue, runtime: Runtime, *, concurrency: int = 1) -> None:
        if concurrency < 1:
            raise ValueError("a worker needs concurrency >= 1")
        self.queue = queue
        self.runtime = runtime
        self.concurrency = concurrency
        self.identity = f"{os.getpid()}@{socket.gethostname()}"
        self.bodies = JobBodies(ActivityEngine(queue, runtime), runtime)
        self._worker: Worker | None = None
        self._shutdown: asyncio.Future[None] | None = None
        self._stop = asyncio.Event()

    @property
    def task_queue(self) -> str:
        """The task queue this worker polls."""
        return self.queue.task_queue

    async def run(self, on_ready: Callable[[TemporalWorker], None] | None = None) -> None:
        """Run until `drain()` and the activities in flight have ended; `on_ready(self)`
        is called once the worker is connected and built (it polls from then on)."""
        client = await self.queue.client()
        if self.queue.search_attributes:
            await self.queue.check_search_attributes()
        activities = Activities(self.bodies, self.identity, self.queue.heartbeat_timeout / 3)
        worker = Worker(
            client,
            task_queue=self.queue.task_queue,
            workflows=[SessionWorkflow, ChildWorkflow, FiringWorkflow],
            activities=[
                activities.run_session,
                activities.run_child,
                fire_activity(self.queue, self.runtime.store, self.queue.heartbeat_timeout / 3),
            ],
            max_concurrent_activities=self.concurrency,
            identity=self.identity,
            # A workflow's next task waits for the worker that ran its last
            # one (its sticky queue) this long before any worker takes it:
            # no longer than a dead worker's activity waits to be retried.
            sticky_queue_schedule_to_start_timeout=timedelta(
                seconds=min(self.queue.heartbeat_timeout, 10.0)
            ),
            # Children in flight run to their end; runs stop at their next
            # boundary and come back "drained".
            graceful_shutdown_timeout=timedelta(hours=1),
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules("taskloom")
            ),
        )
        self._worker = worker
        running = asyncio.ensure_future(worker.run())
        try:
            if self._stop.is_set():
                await worker.shutdown()
            elif on_ready is not None:
                on_ready(self)
            await running
        finally:
            if not running.done():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

    def drain(self) -> None:
        """Stop taking work; runs in flight stop at their next boundary and go on on
        another worker, children in flight run to their end; `run()` then returns."""
        self._stop.set()
        self.bodies.drain()
        if self._worker is not None and self._shutdown is None:
            self._shutdown = asyncio.ensure_future(self._worker.shutdown())
