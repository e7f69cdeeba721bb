"""`WorkQueue`: taskloom's jobs on procrastinate, in the store's PostgreSQL database.

Three kinds of job: `taskloom.run` (bring a session up to date: a submitted
run, a resume, a wake-up), `taskloom.child` (a background child from its
`ChildSpec`) and `taskloom.tick` (a scheduled wake-up firing). Every job of
one session carries procrastinate's `lock` for that session, so two never run
at once, and the same `queueing_lock`, so a second one coalesces into a job
still waiting; the session lease still fences every write, because a worker
that was only paused can come back. Stalled workers are detected by their
heartbeat and their jobs retried by a reaper in every worker (`QueueWorker`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .._extras import install_command
from ..delegation import ChildSpec
from ..errors import ConfigurationError, StoreUnavailable, UsageError
from ..loop import RunOptions
from ..models import RetryPolicy
from ..runtime import RunQueue, session_lease_key
from ._listen import JobListener
from ._schema import queue_migrations, search_path

if TYPE_CHECKING:
    from procrastinate import App
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

    from ..runtime import Runtime
    from ._worker import QueueWorker

__all__ = ["QueueDispatcher", "QueueStatus", "Schedule", "WorkQueue"]

RUN_TASK = "taskloom.run"
CHILD_TASK = "taskloom.child"
TICK_TASK = "taskloom.tick"
KINDS = {RUN_TASK: "run", CHILD_TASK: "child", TICK_TASK: "schedule"}
"""Job kinds by procrastinate task name, as `taskloom queue status` shows them."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A scheduled wake-up of a session: every `every`, or on `cron` (with seconds
    as an optional sixth field); `input` is written as steering when it fires."""

    id: str
    session_id: str
    every: timedelta | None
    cron: str | None
    input: str | None
    next_at: datetime


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """What the queue holds: job counts by (kind, status), and the workers with
    the seconds since their last heartbeat (alive when under `stall_timeout`)."""

    jobs: Mapping[tuple[str, str], int]
    workers: tuple[tuple[int, float], ...]
    stall_timeout: float

    @property
    def alive(self) -> tuple[int, ...]:
        """Ids of the workers whose heartbeat is recent enough."""
        return tuple(w for w, age in self.workers if age < self.stall_timeout)


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

    Open lazily in the event loop that first uses it; `close()` releases it.
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
        self.url = url
        self.schema = schema
        self.migrate = migrate
        self.connect_timeout = connect_timeout
        self.heartbeat = heartbeat
        self.stall_timeout = stall_timeout
        self.reap_every = reap_every
        self.poll_every = poll_every
        self.runs = runs
        self.children = children
        self._pool_size = pool_size
        self._options = search_path(schema, url)
        self._app: App | None = None
        self._pool: AsyncConnectionPool[Any] | None = None
        self._opening = asyncio.Lock()
        self._listener: JobListener | None = None
        self._bodies: Any = None  # the job bodies of the worker serving this queue (`_tasks`)

    def __repr__(self) -> str:
        return f"WorkQueue({self.url!r}, schema={self.schema!r})"

    # ------------------------------------------------------------ opening

    def _connect_kwargs(self) -> dict[str, Any]:
        return {"options": self._options} if self._options else {}

    async def app(self) -> App:
        """The procrastinate app, opened (and the schema checked or migrated) once."""
        if self._app is not None:
            return self._app
        async with self._opening:
            if self._app is None:
                await self._probe()
                if self.migrate:
                    await self.apply_migrations()
                else:
                    await self._check_migrated()
                self._app = await self._open_app()
        return self._app

    async def _probe(self) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(self.url)
        where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}"
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=max(1, round(self.connect_timeout))
            )
        except psycopg.OperationalError as exc:
            cause = " ".join(str(exc).split())
            raise StoreUnavailable(
                f"the work queue's database at {where} cannot be reached: {cause}"
            ) from None
        await conn.close()

    async def apply_migrations(self) -> None:
        """Create or migrate the queue's tables (idempotent; the store's advisory lock
        serialises processes doing it at once)."""
        from ..backends.postgres import PostgresDatabase

        db = PostgresDatabase(self.url, schema=self.schema, min_size=1, max_size=1)
        db.require("queue", queue_migrations(self.schema))
        try:
            async with db.connection():
                pass
        finally:
            await db.close()

    async def _check_migrated(self) -> None:
        import psycopg

        from ..backends.postgres import quote_ident
        from ..errors import SchemaNotMigrated

        versions = (quote_ident(self.schema) + "." if self.schema else "") + (
            "taskloom_schema_version"
        )
        wanted = len(queue_migrations(self.schema))
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            try:
                cur = await conn.execute(
                    f"SELECT version FROM {versions} WHERE component = 'queue'"
                )
                row = await cur.fetchone()
            except psycopg.errors.UndefinedTable:
                row = None
        if row is None or int(row[0]) < wanted:
            where = f" (schema {self.schema})" if self.schema else ""
            raise SchemaNotMigrated(
                f"the work queue's tables are missing or out of date in {self.url}{where}: "
                f"run `taskloom db migrate {self.url}"
                + (f" --schema {self.schema}`" if self.schema else "`")
            )

    async def _open_app(self) -> App:
        from procrastinate import App, PsycopgConnector
        from psycopg_pool import AsyncConnectionPool

        from ._jobs import FencedJobManager
        from ._tasks import register_tasks

        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.url,
            min_size=1,
            max_size=self._pool_size,
            kwargs=self._connect_kwargs(),
            open=False,
            check=AsyncConnectionPool.check_connection,
            name="taskloom-queue",
        )
        await pool.open(wait=True, timeout=self.connect_timeout)
        app = App(connector=PsycopgConnector())
        app.job_manager = FencedJobManager(app.connector)
        register_tasks(app, self)
        await app.open_async(pool=pool)
        self._pool = pool
        return app

    async def close(self) -> None:
        """Close the queue's connections (idempotent)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        app, self._app = self._app, None
        pool, self._pool = self._pool, None
        if app is not None:
            await app.close_async()
        if pool is not None:
            await pool.close()

    # ------------------------------------------------------------ jobs

    async def submit_run(
        self,
        session_id: str,
        *,
        reason: str,
        explicit: bool,
        options: RunOptions | None,
        traceparent: str | None = None,
    ) -> str:
        """Queue a `taskloom.run` job of the session (see `RunQueue.submit_run`)."""
        args: dict[str, Any] = {
            "session_id": session_id,
            "reason": reason,
            "explicit": explicit,
            "options": options_to_json(options),
        }
        if traceparent is not None:
            # The submitter's trace: the worker's run continues it.
            args["traceparent"] = traceparent
        lock = session_lease_key(session_id)
        # An explicit run must not be absorbed by a waiting wake-up, which runs
        # only on news: it waits under a queueing lock of its own.
        queueing_lock = f"explicit:{session_id}" if explicit else lock
        return await self._defer(RUN_TASK, args, lock, queueing_lock=queueing_lock)

    async def wake(self, session_id: str) -> str:
        """Queue a wake-up of the session (it runs only if something waits for it)."""
        args = {"session_id": session_id, "reason": "wake", "explicit": False, "options": None}
        return await self._defer(RUN_TASK, args, session_lease_key(session_id))

    async def dispatch_child(self, spec: ChildSpec) -> str:
        """Queue a background child; a second dispatch of a queued child joins it."""
        lock = session_lease_key(spec.child_session_id)
        return await self._defer(
            CHILD_TASK,
            {"spec": spec.to_dict()},
            lock,
            queueing_lock=f"child:{spec.child_session_id}",
        )

    def dispatcher(self) -> QueueDispatcher:
        """A `Dispatcher` that puts background children on this queue."""
        return QueueDispatcher(self)

    async def _defer(
        self,
        task: str,
        args: dict[str, Any],
        lock: str | None,
        *,
        queueing_lock: str | None = None,
        at: datetime | None = None,
        connection: AsyncConnection[Any] | None = None,
    ) -> str:
        from procrastinate import exceptions

        app = await self.app()
        queue = self.children if task == CHILD_TASK else self.runs
        queueing_lock = lock if queueing_lock is None else queueing_lock
        for _ in range(10):
            deferrer = app.configure_task(
                task,
                lock=lock,
                queueing_lock=queueing_lock,
                queue=queue,
                schedule_at=at,
                connection=connection,
            )
            try:
                if connection is None:
                    return str(await deferrer.defer_async(**args))
                # A savepoint: a coalesced defer must not abort the caller's transaction.
                async with connection.transaction():
                    return str(await deferrer.defer_async(**args))
            except exceptions.AlreadyEnqueued:
                # Coalesce into the waiting job, unless a worker took it meanwhile.
                waiting = await app.job_manager.list_jobs_async(
                    queueing_lock=queueing_lock, status="todo"
                )
                for job in waiting:
                    return str(job.id)
        raise UsageError(f"could not queue {task} under {queueing_lock}: it kept being taken")

    async def wait_idle(self, session_id: str, timeout: float | None) -> None:
        """Return once no job of the session is queued or running; `TimeoutError` after
        `timeout` seconds. Woken by the status trigger's NOTIFY, never by polling."""
        await self.app()
        if self._listener is None:
            self._listener = JobListener(self.url, self.schema, self._connect_kwargs())
        await self._listener.start()
        lock = session_lease_key(session_id)
        try:
            async with asyncio.timeout(timeout):
                with self._listener.waiting(lock) as changed:
                    while await self._has_job(lock):
                        await changed.wait()
                        changed.clear()
        except TimeoutError:
            raise TimeoutError(f"session {session_id} still has a job after {timeout}s") from None

    async def _has_job(self, lock: str) -> bool:
        assert self._pool is not None
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs "
                "WHERE lock = %s AND status IN ('todo', 'doing'))",
                (lock,),
            )
            row = await cur.fetchone()
        return bool(row and row[0])

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
        from ._schedules import first_time

        if (every is None) == (cron is None):
            raise UsageError("schedule() takes one of every= or cron=")
        if every is not None and every.total_seconds() <= 0:
            raise UsageError("schedule(every=...) must be positive")
        first = first_time(every, cron, datetime.now(UTC))
        await self.app()
        schedule = Schedule(uuid.uuid4().hex, session_id, every, cron, input, first)
        assert self._pool is not None
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO taskloom_queue_schedules "
                "(id, session_id, every_seconds, cron, input, next_at) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    schedule.id,
                    session_id,
                    every.total_seconds() if every is not None else None,
                    cron,
                    input,
                    first,
                ),
            )
            await self._defer_tick(schedule.id, first, conn)
        return schedule

    async def _defer_tick(self, schedule_id: str, at: datetime, conn: AsyncConnection[Any]) -> None:
        await self._defer(
            TICK_TASK,
            {"schedule_id": schedule_id, "due": at.timestamp()},
            None,
            queueing_lock=f"schedule:{schedule_id}",
            at=at,
            connection=conn,
        )

    async def schedules(self, session_id: str | None = None) -> list[Schedule]:
        """The scheduled wake-ups, of one session or all, by next firing time."""
        from ._schedules import schedule_of

        await self.app()
        assert self._pool is not None
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, session_id, every_seconds, cron, input, next_at "
                "FROM taskloom_queue_schedules WHERE %(sid)s::text IS NULL OR session_id = %(sid)s "
                "ORDER BY next_at, id",
                {"sid": session_id},
            )
            return [schedule_of(row) for row in await cur.fetchall()]

    async def cancel_schedule(self, schedule_id: str) -> bool:
        """Stop a scheduled wake-up; False if there was none with that id."""
        app = await self.app()
        assert self._pool is not None
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM taskloom_queue_schedules WHERE id = %s RETURNING id", (schedule_id,)
            )
            gone = await cur.fetchone() is not None
        # A firing already queued finds no schedule and does nothing; cancel it anyway.
        for job in await app.job_manager.list_jobs_async(
            queueing_lock=f"schedule:{schedule_id}", status="todo"
        ):
            assert job.id is not None
            await app.job_manager.cancel_job_by_id_async(job.id)
        return gone

    # ------------------------------------------------------------ status

    async def status(self) -> QueueStatus:
        """Job counts by kind and status, and the registered workers' heartbeats."""
        await self.app()
        assert self._pool is not None
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT task_name, status::text, count(*) FROM procrastinate_jobs "
                "GROUP BY task_name, status"
            )
            jobs = {(KINDS.get(t, t), s): int(n) for t, s, n in await cur.fetchall()}
            cur = await conn.execute(
                "SELECT id, EXTRACT(EPOCH FROM now() - last_heartbeat) "
                "FROM procrastinate_workers ORDER BY id"
            )
            workers = tuple((int(w), float(age)) for w, age in await cur.fetchall())
        return QueueStatus(jobs, workers, self.stall_timeout)

    # ------------------------------------------------------------ workers

    def worker(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 1,
        queues: tuple[str, ...] | None = None,
    ) -> QueueWorker:
        """A worker running this queue's jobs with `runtime`'s agents, tools and models
        (`await worker.run()`; `worker.drain()` stops it gracefully)."""
        from ._worker import QueueWorker

        return QueueWorker(self, runtime, concurrency=concurrency, queues=queues)


class QueueDispatcher:
    """A `Dispatcher` putting background children on a `WorkQueue`: any worker
    runs them with the fenced `ChildWorker`."""

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue

    async def dispatch(self, spec: ChildSpec) -> None:
        """Queue the child (returns once the job is stored)."""
        await self.queue.dispatch_child(spec)


_LIMITS = ("max_rounds", "max_model_requests", "max_tool_calls", "token_budget")


def options_to_json(options: RunOptions | None) -> dict[str, Any] | None:
    """The limits of `options` as JSON; what cannot cross a queue is refused."""
    if options is None:
        return None
    if options.strategy is not None or options.parent is not None:
        raise UsageError(
            "a queued run takes limits only (rounds, requests, tool calls, tokens, deadline): "
            "a strategy or a parent run cannot cross to a worker"
        )
    if options.retry != RetryPolicy():
        raise UsageError("a queued run uses its worker's retry policy; leave RunOptions.retry")
    out: dict[str, Any] = {k: getattr(options, k) for k in _LIMITS}
    deadline = options.deadline
    out["deadline"] = deadline.isoformat() if isinstance(deadline, datetime) else deadline
    return out


def options_from_json(data: object) -> RunOptions:
    """The `RunOptions` `options_to_json` described (ValueError for anything else)."""
    if data is None:
        return RunOptions()
    if not isinstance(data, dict):
        raise ValueError(f"options must be an object, not {type(data).__name__}")
    limits: dict[str, Any] = {}
    for key in _LIMITS:
        value = data.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"options.{key} must be an integer")
        limits[key] = value
    raw = data.get("deadline")
    deadline: float | datetime | None
    if raw is None or (isinstance(raw, int | float) and not isinstance(raw, bool)):
        deadline = raw
    elif isinstance(raw, str):
        deadline = datetime.fromisoformat(raw)
    else:
        raise ValueError("options.deadline must be seconds or an ISO date")
    return RunOptions(deadline=deadline, **limits)
