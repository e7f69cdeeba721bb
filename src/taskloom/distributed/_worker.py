"""`QueueWorker`: a procrastinate worker running taskloom's jobs, with its keeper.

procrastinate leaves a stalled worker's jobs `doing` until someone retries
them (its #740) and stops a worker whose heartbeat fails once. So the
keeper, a plain asyncio task beside the worker (a procrastinate task could
stall in turn: #1408), beats for this worker through database hiccups and
during a drain, and every `reap_every` seconds puts stalled workers' jobs
back in the queue through the fenced job manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from procrastinate.worker import Worker

from ._bodies import JobBodies, job_field
from ._engine import Malformed, Mark

if TYPE_CHECKING:
    from procrastinate import App, jobs

    from .._run_controls import StopSignal
    from ..runtime import Runtime, Session
    from ._queue import WorkQueue

logger = logging.getLogger("taskloom.distributed")


class QueueEngine:
    """The procrastinate engine's side of `JobBodies` (a `JobEngine`): a job's
    marks in the queue's `taskloom_queue_runs` table, wake-ups as jobs, and
    the scheduled wake-ups' `taskloom.tick` jobs."""

    def __init__(self, queue: WorkQueue, runtime: Runtime) -> None:
        self.queue = queue
        self.runtime = runtime

    async def marked(self, job: jobs.Job, session: Session) -> Mark | None:
        """The mark an earlier attempt of `job` wrote (one row by the job's id)."""
        async with self.queue.database.connection() as conn:
            cur = await conn.execute(
                "SELECT position, drained FROM taskloom_queue_runs WHERE job_id = %s", (job.id,)
            )
            row = await cur.fetchone()
        return None if row is None else (int(row[0]), bool(row[1]))

    async def mark(self, job: jobs.Job, session: Session, *, drained: bool) -> None:
        """Where the job's run starts (its redelivery does not start it again), or
        that a drain cut it (its redelivery goes on with it)."""
        async with self.queue.database.connection() as conn:
            await conn.execute(
                "INSERT INTO taskloom_queue_runs (job_id, session_id, position, drained) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (job_id) DO UPDATE "
                "SET position = EXCLUDED.position, drained = EXCLUDED.drained",
                (job.id, session.id, session.journal.log.position, drained),
            )

    def watch(self, stop: StopSignal) -> None:
        """Nothing: procrastinate cancels no run from outside (a drain stops them)."""

    async def wake(self, session_id: str) -> str:
        """Queue a wake-up job for the session."""
        return await self.queue.wake(session_id)

    async def fire_schedule(self, args: dict[str, Any]) -> str:
        """Fire a scheduled wake-up (see `Schedules.fire`)."""
        schedule_id = job_field(args, "schedule_id", str, "tick")
        due = args.get("due")
        if not isinstance(due, int | float) or isinstance(due, bool):
            raise Malformed(f"malformed tick job: 'due' must be a number, got {due!r}")
        return await self.queue.fire(self.runtime.store, schedule_id, float(due))


class QueueWorker:
    """Runs `queue`'s jobs with `runtime` until drained, `concurrency` at once;
    `queues` limits it to some procrastinate queues (default: runs and children)."""

    def __init__(
        self,
        queue: WorkQueue,
        runtime: Runtime,
        *,
        concurrency: int = 1,
        queues: tuple[str, ...] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("a worker needs concurrency >= 1")
        self.queue = queue
        self.runtime = runtime
        self.concurrency = concurrency
        self.queues = queues or (queue.runs, queue.children)
        self.bodies = JobBodies(QueueEngine(queue, runtime), runtime)
        self.worker_id: int | None = None
        self._worker: Worker | None = None
        self._stop = asyncio.Event()

    async def run(self, on_ready: Callable[[QueueWorker], None] | None = None) -> None:
        """Run jobs until `drain()` and the jobs in flight have ended; `on_ready(self)`
        is called once the worker is registered (`worker_id` set) and taking jobs."""
        app = await self.queue.database.app()
        with self.queue.database.serving(self.bodies):
            await self._serve(app, on_ready)

    async def _serve(self, app: App, on_ready: Callable[[QueueWorker], None] | None) -> None:
        worker = Worker(
            app,
            queues=list(self.queues),
            name="taskloom",
            concurrency=self.concurrency,
            fetch_job_polling_interval=self.queue.poll_every,
            shutdown_graceful_timeout=None,
            install_signal_handlers=False,
            # The keeper beats instead (see the module docstring).
            update_heartbeat_interval=10**9,
            stalled_worker_timeout=self.queue.stall_timeout,
        )
        self._worker = worker
        running = asyncio.ensure_future(worker.run())  # type: ignore[no-untyped-call]
        keeper = asyncio.ensure_future(self._keep(app, worker))
        try:
            while worker.worker_id is None and not running.done():
                await asyncio.sleep(0.01)
            self.worker_id = worker.worker_id
            if self._stop.is_set():
                # Drained before procrastinate's run() began, which clears stop requests.
                worker.stop()  # type: ignore[no-untyped-call]
            elif not running.done() and on_ready is not None:
                on_ready(self)
            await running
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            if not running.done():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

    def drain(self) -> None:
        """Stop taking jobs; runs in flight stop at their next boundary and go back in
        the queue, children in flight run to their end; `run()` then returns."""
        self._stop.set()
        self.bodies.drain()
        if self._worker is not None:
            self._worker.stop()  # type: ignore[no-untyped-call]

    async def _keep(self, app: App, worker: Worker) -> None:
        queue = self.queue
        manager = app.job_manager
        loop = asyncio.get_running_loop()
        next_reap = loop.time() + queue.reap_every
        while True:
            await asyncio.sleep(min(queue.heartbeat, queue.reap_every))
            worker_id = worker.worker_id
            try:
                if worker_id is not None:
                    await manager.update_heartbeat(worker_id)
                if loop.time() >= next_reap and not self._stop.is_set():
                    next_reap = loop.time() + queue.reap_every
                    await self._reap(app)
            except Exception as exc:
                # The next beat tries again: a worker is stalled only after
                # `stall_timeout` without one. A dropped connection is an
                # event of the network, told in one line; anything else may
                # be a fault, told with its traceback.
                cause = exc.__cause__ or exc
                if isinstance(cause, psycopg.OperationalError):
                    logger.warning(
                        "worker keeper: the database did not answer (%s); the next beat tries again",
                        str(cause).strip().splitlines()[0]
                        if str(cause).strip()
                        else type(cause).__name__,
                    )
                else:
                    logger.warning("worker keeper: the database did not answer", exc_info=True)

    async def _reap(self, app: App) -> None:
        manager = app.job_manager
        stalled = await manager.get_stalled_jobs(seconds_since_heartbeat=self.queue.stall_timeout)
        for job in stalled:
            logger.info("job %s (%s) stalled with its worker: queued again", job.id, job.task_name)
            await manager.retry_job(job)
        await manager.prune_stalled_workers(self.queue.stall_timeout)
