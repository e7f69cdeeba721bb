"""`QueueDatabase`: a work queue's PostgreSQL database: the procrastinate app
(with the fenced job manager and the three tasks), the pool beside it, the
connection options that put unqualified names in the store's schema, and
the queue's migrations. It opens lazily, once, in the event loop that first
uses it; `close()` releases it and a later use opens it again.

The queue's tables are procrastinate's schema plus taskloom's own, applied
like every taskloom table (`PostgresDatabase.require`, component `"queue"`)
on first use or by `taskloom db migrate URL`; with a schema the migration and
every queue connection set the search path (procrastinate's objects are
unqualified). taskloom adds a trigger that NOTIFYs `taskloom_jobs` when a
job ends, leaving `todo` and `doing` (`Session.wait`), the log position where each job
started its run and whether a drain cut it, and the scheduled wake-ups.

procrastinate finds a job's code by its task name on the app, which opens
before any worker exists (a host only queues jobs). So the tasks are
declared as it opens and hand each job to the `JobBodies` that
`QueueWorker.run` binds while it runs (`serving`), one worker per queue at a
time; a job taken while none is bound fails.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..backends.postgres import Migration, PostgresDatabase, quote_ident
from ..errors import ConfigurationError, SchemaNotMigrated, StoreUnavailable, UsageError

if TYPE_CHECKING:
    from procrastinate import App, JobContext
    from psycopg_pool import AsyncConnectionPool

    from ._bodies import JobBodies
    from ._worker import QueueEngine

RUN_TASK = "taskloom.run"
"""Bring a session up to date: a submitted run, a resume, a wake-up."""

CHILD_TASK = "taskloom.child"
"""Run a background child from its `ChildSpec`."""

TICK_TASK = "taskloom.tick"
"""Fire a scheduled wake-up."""

JOBS_CHANNEL = "taskloom_jobs"
"""The channel a job's end is announced on (payload: schema, lock, status)."""

KNOWN_PROCRASTINATE_MIGRATION = "03.04.00_50_post_add_retry_failed_job_procedure.sql"
"""The last migration of procrastinate's schema that migration 1 was written for
(a procrastinate past it needs a new migration here)."""


def search_path(schema: str | None, url: str = "") -> str | None:
    """The libpq `options` that put a connection's unqualified names in `schema`
    (after any `options` the URL itself gives, which they must not drop)."""
    if schema is None:
        return None
    given = conninfo_to_dict(url).get("options") if url else None
    # libpq splits options at spaces unless a backslash escapes them.
    quoted = quote_ident(schema).replace("\\", "\\\\").replace(" ", "\\ ")
    ours = f"-c search_path={quoted}"
    return f"{given} {ours}" if given else ours


def _escaped(sql: str) -> str:
    # Migration statements are str.format-ed with table names.
    return sql.replace("{", "{{").replace("}", "}}")


@functools.cache
def _procrastinate_schema() -> str:
    from procrastinate.schema import SchemaManager

    latest = max(p.name for p in Path(SchemaManager.get_migrations_path()).glob("[0-9]*.sql"))
    if latest != KNOWN_PROCRASTINATE_MIGRATION:
        raise ConfigurationError(
            f"the installed procrastinate's schema goes up to migration {latest}, but this "
            f"taskloom knows it up to {KNOWN_PROCRASTINATE_MIGRATION}: install the "
            "procrastinate version the distributed extra pins, or upgrade taskloom"
        )
    return SchemaManager.get_schema()


def queue_migrations(schema: str | None) -> tuple[Migration, ...]:
    """The queue's migrations for a database whose taskloom tables live in `schema`."""
    literal = (schema or "").replace("'", "''")
    setpath = (f"SET LOCAL search_path TO {_escaped(quote_ident(schema))}",) if schema else ()
    return (
        (
            *setpath,
            _escaped(_procrastinate_schema()),
            _escaped(
                f"""CREATE FUNCTION taskloom_notify_job_status() RETURNS trigger
                LANGUAGE plpgsql AS $$
                BEGIN
                    PERFORM pg_notify('{JOBS_CHANNEL}', json_build_object(
                        'schema', '{literal}', 'lock', NEW.lock, 'status', NEW.status
                    )::text);
                    RETURN NEW;
                END;
                $$"""
            ),
            """CREATE TRIGGER taskloom_job_status AFTER UPDATE OF status ON procrastinate_jobs
            FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
            EXECUTE FUNCTION taskloom_notify_job_status()""",
            """CREATE TABLE {queue_runs} (
                job_id bigint PRIMARY KEY,
                session_id text NOT NULL,
                position bigint NOT NULL,
                drained boolean NOT NULL DEFAULT false
            )""",
            """CREATE TABLE {queue_schedules} (
                id text PRIMARY KEY,
                session_id text NOT NULL,
                every_seconds double precision,
                cron text,
                input text,
                next_at timestamptz NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now()
            )""",
            "CREATE INDEX taskloom_queue_schedules_session ON {queue_schedules} (session_id)",
        ),
        (
            *setpath,
            # Announced only when a job leaves `todo` and `doing` (its end):
            # that is all a waiter looks for, and a NOTIFY in a transaction
            # costs its commit and wakes every listening backend, the
            # workers' included, on every fetch of every job.
            "DROP TRIGGER taskloom_job_status ON procrastinate_jobs",
            """CREATE TRIGGER taskloom_job_status AFTER UPDATE OF status ON procrastinate_jobs
            FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                AND NEW.status NOT IN ('todo', 'doing'))
            EXECUTE FUNCTION taskloom_notify_job_status()""",
        ),
    )


CHECK_AFTER_IDLE = 0.5
"""Seconds a pooled queue connection may sit unused and still be handed out
unchecked (HikariCP's rule): one used that recently was alive then, and a
check would cost a round trip on every job fetched, deferred or finished."""

_returned_at: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
    weakref.WeakKeyDictionary()
)


async def _autocommit(conn: psycopg.AsyncConnection[Any]) -> None:
    # Every queue statement is one procrastinate function call or one row:
    # atomic alone, so no BEGIN and COMMIT around each (two statements more).
    # Callers needing more open `conn.transaction()`.
    await conn.set_autocommit(True)


async def _returned(conn: psycopg.AsyncConnection[Any]) -> None:
    _returned_at[conn] = time.monotonic()


async def _check_if_idle(conn: psycopg.AsyncConnection[Any]) -> None:
    from psycopg_pool import AsyncConnectionPool

    at = _returned_at.get(conn)
    if at is None or time.monotonic() - at >= CHECK_AFTER_IDLE:
        await AsyncConnectionPool.check_connection(conn)


_DEFER_ATTEMPTS = 10
"""How often a coalescing defer looks for the waiting job it joins before giving up."""


class QueueDatabase:
    """The work queue's database at `url`, with the queue's tables in `schema`
    (created or migrated as it opens with `migrate`, else required)."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        migrate: bool = True,
        connect_timeout: float = 10.0,
        pool_size: int = 4,
    ) -> None:
        self.url = url
        self.schema = schema
        self.migrate = migrate
        self.connect_timeout = connect_timeout
        self._bodies: JobBodies[QueueEngine] | None = None
        self._pool_size = pool_size
        self._options = search_path(schema, url)
        self._app: App | None = None
        self._pool: AsyncConnectionPool[Any] | None = None
        self._opening = asyncio.Lock()

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """What every connection to the queue passes psycopg beside the URL."""
        return {"options": self._options} if self._options else {}

    async def app(self) -> App:
        """The procrastinate app, opened (and the tables checked or migrated) once."""
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

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection (opening the database first)."""
        await self.app()
        assert self._pool is not None
        async with self._pool.connection() as conn:
            yield conn

    async def defer(
        self,
        task: str,
        args: Mapping[str, Any],
        *,
        queue: str,
        lock: str | None,
        queueing_lock: str,
        at: datetime | None = None,
        connection: psycopg.AsyncConnection[Any] | None = None,
    ) -> str:
        """Queue a job of `task` on `queue`, or join the one waiting under
        `queueing_lock`; its id. With `connection`, inside its transaction."""
        from procrastinate import exceptions

        app = await self.app()
        for _ in range(_DEFER_ATTEMPTS):
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

    async def apply_migrations(self) -> None:
        """Create or migrate the queue's tables (idempotent, under the store's advisory lock)."""
        db = PostgresDatabase(self.url, schema=self.schema, min_size=1, max_size=1)
        db.require("queue", queue_migrations(self.schema))
        try:
            async with db.connection():
                pass
        finally:
            await db.close()

    async def close(self) -> None:
        """Close the app and its pool (idempotent)."""
        app, self._app = self._app, None
        pool, self._pool = self._pool, None
        if app is not None:
            await app.close_async()
        if pool is not None:
            await pool.close()

    async def _probe(self) -> None:
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

    async def _check_migrated(self) -> None:
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
        # procrastinate is the distributed extra: imported once the queue is used.
        from procrastinate import App, PsycopgConnector
        from psycopg_pool import AsyncConnectionPool

        from ._jobs import FencedJobManager

        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.url,
            min_size=1,
            max_size=self._pool_size,
            kwargs=self.connect_kwargs,
            open=False,
            configure=_autocommit,
            check=_check_if_idle,
            reset=_returned,
            name="taskloom-queue",
        )
        await pool.open(wait=True, timeout=self.connect_timeout)
        app = App(connector=PsycopgConnector())
        app.job_manager = FencedJobManager(app.connector)
        self._declare(app)
        await app.open_async(pool=pool)
        self._pool = pool
        return app

    def _declare(self, app: App) -> None:
        from ._engine import logged
        from ._jobs import JobStrategy

        async def run(context: JobContext, /, **args: Any) -> str:
            return await logged(context.job, lambda: self._bound().run_session(context.job, args))

        async def child(context: JobContext, /, **args: Any) -> str:
            return await logged(context.job, lambda: self._bound().run_child(context.job, args))

        async def tick(context: JobContext, /, **args: Any) -> str:
            return await logged(context.job, lambda: self._bound().engine.fire_schedule(args))

        strategy = JobStrategy()
        for name, body in ((RUN_TASK, run), (CHILD_TASK, child), (TICK_TASK, tick)):
            app.task(name=name, pass_context=True, retry=strategy)(body)

    @contextmanager
    def serving(self, bodies: JobBodies[QueueEngine]) -> Iterator[None]:
        """Run this process's jobs with `bodies` until the block ends; a second
        worker serving the same queue at once is a `RuntimeError`."""
        if self._bodies is not None:
            raise RuntimeError("one WorkQueue serves one worker at a time")
        self._bodies = bodies
        try:
            yield
        finally:
            self._bodies = None

    def _bound(self) -> JobBodies[QueueEngine]:
        if self._bodies is None:
            raise ConfigurationError("this process runs no taskloom worker for the queue")
        return self._bodies
