"""`WorkQueue`: taskloom's jobs on procrastinate, in the store's PostgreSQL database.

Three kinds of job: `taskloom.run` (bring a session up to date: a submitted
run, a resume, a wake-up), `taskloom.child` (a background child from its
`ChildSpec`) and `taskloom.tick` (a scheduled wake-up firing). Every job of
one session carries procrastinate's `lock` for that session, so two never run
at once, and the same `queueing_lock`, so a second one coalesces into a job
still waiting; the session lease still fences every write, because a worker
that was only paused can come back. Stalled workers are detected by their
heartbeat and their jobs retried by a reaper in every worker (`QueueWorker`).

`WorkQueue` is the face users build; each of its roles is a part of its own
on the one `QueueDatabase`: `RunJobs` (the runtime's `RunQueue` port),
`QueueDispatcher` (background children), `Scheduler` (wake-ups), `QueueAdmin`
(status) and `JobTasks` (the tasks, run by the worker serving the queue).
"""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from typing import TYPE_CHECKING

from .._extras import install_command
from ..delegation import ChildSpec
from ..errors import ConfigurationError
from ..loop import RunOptions
from ..runtime import RunDemand, RunQueue
from ._admin import QueueAdmin, QueueStatus
from ._database import QueueDatabase
from ._dispatch import QueueDispatcher
from ._runs import RunJobs
from ._schedules import Schedule, Scheduler
from ._tasks import JobTasks

if TYPE_CHECKING:
    from procrastinate import App

    from ..runtime import Runtime
    from ._worker import QueueWorker

__all__ = ["WorkQueue"]


class WorkQueue(RunQueue):
    """taskloom's jobs on procrastinate over the PostgreSQL database at `url`.

    `schema` is the PostgreSQL schema of the store's tables (the queue's go
    there too). The queue's tables are created on first use under the
    store's advisory lock; with `migrate=False` they must exist already
    (`taskloom db migrate URL`) and a database without them is refused.
    Workers heartbeat every `heartbeat` seconds; one silent for
    `stall_timeout` seconds is stalled, and a reaper running every
    `reap_every` seconds in each live worker puts its jobs back in the queue.
    So a killed worker's job runs again within about `stall_timeout +
    reap_every` seconds (plus the session lease's `lease_ttl` when the dead
    worker was on another machine). `runs` and `children` name the two
    procrastinate queues.

    Its parts share one `database`: `run_jobs` (runs and wake-ups),
    `child_jobs` (background children), `scheduler` (scheduled wake-ups),
    `admin` (status) and `tasks` (what a worker of this queue runs); its
    methods hand each call to its part. Open lazily in the event loop that
    first uses it; `close()` releases it.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        migrate: bool = True,
        connect_timeout: float = 10.0,
        heartbeat: float = 5.0,
        stall_timeout: float = 20.0,
        reap_every: float = 5.0,
        poll_every: float = 1.0,
        runs: str = "runs",
        children: str = "children",
        pool_size: int = 4,
    ) -> None:
        if importlib.util.find_spec("procrastinate") is None:
            raise ConfigurationError(
                "WorkQueue needs the distributed extra (no module named 'procrastinate'): "
                + install_command("distributed")
            )
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigurationError(f"WorkQueue needs a postgresql:// URL, not {url!r}")
        if not 0 < heartbeat < stall_timeout:
            raise ConfigurationError("WorkQueue needs 0 < heartbeat < stall_timeout")
        self.heartbeat = heartbeat
        self.stall_timeout = stall_timeout
        self.reap_every = reap_every
        self.poll_every = poll_every
        self.runs = runs
        self.children = children
        self.tasks = JobTasks()
        self.database = QueueDatabase(
            url,
            tasks=self.tasks,
            schema=schema,
            migrate=migrate,
            connect_timeout=connect_timeout,
            pool_size=pool_size,
        )
        self.run_jobs = RunJobs(self.database, queue=runs)
        self.child_jobs = QueueDispatcher(self.database, queue=children)
        self.scheduler = Scheduler(self.database, self.run_jobs, queue=runs)
        self.admin = QueueAdmin(self.database, stall_timeout=stall_timeout)

    def __repr__(self) -> str:
        return f"WorkQueue({self.url!r}, schema={self.schema!r})"

    @property
    def url(self) -> str:
        """The database's URL."""
        return self.database.url

    @property
    def schema(self) -> str | None:
        """The PostgreSQL schema of the store's and the queue's tables (None: the default)."""
        return self.database.schema

    @property
    def migrate(self) -> bool:
        """Whether first use creates or migrates the queue's tables."""
        return self.database.migrate

    @property
    def connect_timeout(self) -> float:
        """Seconds connecting to the database may take."""
        return self.database.connect_timeout

    # ------------------------------------------------------------ database

    async def app(self) -> App:
        """The procrastinate app, opened (and the schema checked or migrated) once."""
        return await self.database.app()

    async def apply_migrations(self) -> None:
        """Create or migrate the queue's tables (idempotent; the store's advisory lock
        serialises processes doing it at once)."""
        await self.database.apply_migrations()

    async def close(self) -> None:
        """Close the queue's connections (idempotent)."""
        await self.run_jobs.close()
        await self.database.close()

    # ------------------------------------------------------------ runs

    async def submit_run(
        self,
        session_id: str,
        demand: RunDemand,
        *,
        reason: str,
        options: RunOptions | None,
        traceparent: str | None = None,
    ) -> str:
        """Queue a `taskloom.run` job of the session (see `RunQueue.submit_run`)."""
        return await self.run_jobs.submit(
            session_id, demand, reason=reason, options=options, traceparent=traceparent
        )

    async def wake(self, session_id: str) -> str:
        """Queue a wake-up of the session (it runs only if something waits for it)."""
        return await self.run_jobs.wake(session_id)

    async def wait_idle(self, session_id: str, timeout: float | None) -> None:
        """Return once no job of the session is queued or running; `TimeoutError` after
        `timeout` seconds. Woken by the status trigger's NOTIFY, never by polling."""
        await self.run_jobs.wait_idle(session_id, timeout)

    # ------------------------------------------------------------ children

    async def dispatch_child(self, spec: ChildSpec) -> str:
        """Queue a background child; a second dispatch of a queued child joins it."""
        return await self.child_jobs.dispatch_child(spec)

    async def carries(self, session_id: str) -> bool:
        """Whether a job of this session (a background child's, or a run of
        it) was ever queued here: its workers run it on
        (`taskloom.delegation.ChildQueue`)."""
        return await self.child_jobs.carries(session_id)

    def dispatcher(self) -> QueueDispatcher:
        """A `Dispatcher` that puts background children on this queue."""
        return self.child_jobs

    # ------------------------------------------------------------ schedules

    async def schedule(
        self,
        session_id: str,
        *,
        every: timedelta | None = None,
        cron: str | None = None,
        input: str | None = None,
    ) -> Schedule:
        """Wake the session every `every`, or on `cron`; `input` is written as
        steering each time (without it, the session runs on what it has)."""
        return await self.scheduler.schedule(session_id, every=every, cron=cron, input=input)

    async def schedules(self, session_id: str | None = None) -> list[Schedule]:
        """The scheduled wake-ups, of one session or all, by next firing time."""
        return await self.scheduler.schedules(session_id)

    async def cancel_schedule(self, schedule_id: str) -> bool:
        """Stop a scheduled wake-up; False if there was none with that id."""
        return await self.scheduler.cancel(schedule_id)

    # ------------------------------------------------------------ admin

    async def status(self) -> QueueStatus:
        """Job counts by kind and status, and the registered workers' heartbeats."""
        return await self.admin.status()

    def worker(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 1,
        queues: tuple[str, ...] | None = None,
    ) -> QueueWorker:
        """A worker running this queue's jobs with `runtime`'s agents, tools and models
        (`await worker.run()`; `worker.drain()` stops it gracefully)."""
        # The worker's modules import procrastinate (the distributed extra) as
        # they load; this module must not, so that a missing extra is told.
        from ._worker import QueueWorker

        return QueueWorker(self, runtime, concurrency=concurrency, queues=queues)
