"""`WorkQueue`: taskloom's jobs on procrastinate, in the store's PostgreSQL database.

Three kinds of job: `taskloom.run` (bring a session up to date: a submitted
run, a resume, a wake-up), `taskloom.child` (a background child from its
`ChildSpec`) and `taskloom.tick` (a scheduled wake-up firing). Every job of
one session carries procrastinate's `lock` for that session, so two never run
at once, and the same `queueing_lock`, so a second one coalesces into a job
still waiting; the session lease still fences every write, because a worker
that was only paused can come back. A run wanted even without news is the
exception: it waits under a queueing lock of its own (`RunDemand.ALWAYS`).
Stalled workers are detected by their heartbeat and their jobs retried by a
reaper in every worker (`QueueWorker`).

`Session.wait` listens on one LISTEN connection per queue (`JobListener`),
woken by the status trigger's NOTIFY of the job's lock. A waiter registers
before it looks, and the connection listens before anyone registers, so a
job that ends in between still wakes it; a dropped connection wakes every
waiter and reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._extras import install_command
from ..backends import session_lease_key
from ..delegation import ChildSpec
from ..errors import ConfigurationError
from ..loop import RunOptions
from ..runtime import RunDemand
from ._database import CHILD_TASK, JOBS_CHANNEL, RUN_TASK, TICK_TASK, QueueDatabase
from ._engine import options_to_json
from ._schedules import Schedules

if TYPE_CHECKING:
    from procrastinate import App

    from ..runtime import Runtime
    from ._worker import QueueWorker

logger = logging.getLogger("taskloom.distributed")

_KINDS = {RUN_TASK: "run", CHILD_TASK: "child", TICK_TASK: "schedule"}
"""Job kinds by procrastinate task name, as `taskloom queue status` shows them."""


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


class WorkQueue(Schedules):
    """taskloom's jobs on procrastinate over the PostgreSQL database at `url`.

    `schema` is the PostgreSQL schema of the store's tables (the queue's go
    there too). The queue's tables are created on first use; with
    `migrate=False` they must exist already (`taskloom db migrate URL`).
    Workers heartbeat every `heartbeat` seconds; one silent for
    `stall_timeout` seconds is stalled, and a reaper in each live worker
    puts its jobs back every `reap_every` seconds, so a killed worker's job
    runs again within about `stall_timeout + reap_every` seconds (plus the
    session lease's `lease_ttl` across machines). `runs` and `children` name
    the two procrastinate queues. Opens lazily; `close()` releases it.
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
        self.heartbeat = heartbeat
        self.stall_timeout = stall_timeout
        self.reap_every = reap_every
        self.poll_every = poll_every
        self.runs = runs
        self.children = children
        self.database = QueueDatabase(
            url,
            schema=schema,
            migrate=migrate,
            connect_timeout=connect_timeout,
            pool_size=pool_size,
        )
        self._listener: JobListener | None = None

    def __repr__(self) -> str:
        return f"WorkQueue({self.url!r}, schema={self.schema!r})"

    async def app(self) -> App:
        """The procrastinate app, opened (and the schema checked or migrated) once."""
        return await self.database.app()

    async def apply_migrations(self) -> None:
        """Create or migrate the queue's tables (idempotent, under the store's advisory lock)."""
        await self.database.apply_migrations()

    async def close(self) -> None:
        """Close the queue's connections (idempotent)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        await self.database.close()

    async def submit_run(
        self,
        session_id: str,
        demand: RunDemand,
        *,
        reason: str,
        options: RunOptions | None,
        traceparent: str | None = None,
    ) -> str:
        """Queue a `taskloom.run` job of the session, or join the one waiting; the
        job id. `reason` is for the logs; only limits cross in `options`."""
        args: dict[str, Any] = {
            "session_id": session_id,
            "reason": reason,
            "explicit": demand.value,
            "options": options_to_json(options),
        }
        if traceparent is not None:
            args["traceparent"] = traceparent
        lock = session_lease_key(session_id)
        # A run wanted anyway must not be absorbed by a waiting wake-up, which
        # runs only on news: it waits under a queueing lock of its own.
        queueing_lock = f"explicit:{session_id}" if demand is RunDemand.ALWAYS else lock
        return await self.database.defer(
            RUN_TASK, args, queue=self.runs, lock=lock, queueing_lock=queueing_lock
        )

    async def wake(self, session_id: str) -> str:
        """Queue a wake-up of the session (it runs only if something waits for it)."""
        return await self.submit_run(session_id, RunDemand.IF_NEEDED, reason="wake", options=None)

    async def wait_idle(self, session_id: str, timeout: float | None) -> None:
        """Return once no job of the session is queued or running; `TimeoutError` after
        `timeout` seconds. Woken by the status trigger's NOTIFY, never by polling."""
        db = self.database
        await db.app()
        if self._listener is None:
            self._listener = JobListener(db.url, db.schema, db.connect_kwargs)
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
        async with self.database.connection() as conn:
            cur = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs "
                "WHERE lock = %s AND status IN ('todo', 'doing'))",
                (lock,),
            )
            row = await cur.fetchone()
        return bool(row and row[0])

    async def dispatch(self, spec: ChildSpec) -> None:
        """Queue a background child (returns once the job is stored)."""
        await self.dispatch_child(spec)

    async def dispatch_child(self, spec: ChildSpec) -> str:
        """Queue a background child, or join its job still waiting; the job id."""
        return await self.database.defer(
            CHILD_TASK,
            {"spec": spec.to_dict()},
            queue=self.children,
            lock=session_lease_key(spec.child_session_id),
            queueing_lock=f"child:{spec.child_session_id}",
        )

    async def carries(self, session_id: str) -> bool:
        """Whether a job of this session (a child's, or a run of it) was ever queued
        here, in any status (`taskloom.delegation.ChildQueue`)."""
        async with self.database.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM procrastinate_jobs WHERE lock = %s LIMIT 1",
                (session_lease_key(session_id),),
            )
            return await cur.fetchone() is not None

    def dispatcher(self) -> WorkQueue:
        """A `Dispatcher` that puts background children on this queue (the queue itself)."""
        return self

    async def status(self) -> QueueStatus:
        """Job counts by kind and status, and the registered workers' heartbeats."""
        async with self.database.connection() as conn:
            cur = await conn.execute(
                "SELECT task_name, status::text, count(*) FROM procrastinate_jobs "
                "GROUP BY task_name, status"
            )
            jobs = {(_KINDS.get(t, t), s): int(n) for t, s, n in await cur.fetchall()}
            cur = await conn.execute(
                "SELECT id, EXTRACT(EPOCH FROM now() - last_heartbeat) "
                "FROM procrastinate_workers ORDER BY id"
            )
            workers = tuple((int(w), float(age)) for w, age in await cur.fetchall())
        return QueueStatus(jobs, workers, self.stall_timeout)

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


class JobListener:
    """Wakes `Session.wait`s by job lock (see the module docstring)."""

    def __init__(self, url: str, schema: str | None, connect_kwargs: dict[str, Any]) -> None:
        self._url = url
        self._schema = schema or ""
        self._kwargs = connect_kwargs
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listening: asyncio.Event | None = None

    async def start(self) -> None:
        """Listen (once); returns when the LISTEN is in effect."""
        if self._task is None or self._task.done():
            self._listening = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._listen(self._listening))
        assert self._listening is not None
        listening = asyncio.ensure_future(self._listening.wait())
        await asyncio.wait([listening, self._task], return_when=asyncio.FIRST_COMPLETED)
        if not listening.done():
            listening.cancel()
            self._task.result()  # raises why it could not listen

    @contextlib.contextmanager
    def waiting(self, lock: str) -> Iterator[asyncio.Event]:
        """An event set whenever a job holding `lock` changes status."""
        event = asyncio.Event()
        self._waiters.setdefault(lock, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(lock, set())
            waiters.discard(event)
            if not waiters:
                self._waiters.pop(lock, None)

    async def _listen(self, listening: asyncio.Event) -> None:
        import psycopg

        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, **self._kwargs
                )
                async with conn:
                    await conn.execute(f"LISTEN {JOBS_CHANNEL}")
                    listening.set()
                    async for note in conn.notifies():
                        self._wake(note.payload)
            except psycopg.OperationalError:
                if not listening.is_set():
                    raise
                logger.warning("the queue's LISTEN connection dropped; reconnecting")
            for waiters in self._waiters.values():
                for event in waiters:
                    event.set()
            await asyncio.sleep(0.5)

    def _wake(self, payload: str) -> None:
        try:
            what = json.loads(payload)
        except ValueError:
            return
        if what.get("schema") != self._schema:
            return
        for event in self._waiters.get(what.get("lock"), ()):
            event.set()

    async def close(self) -> None:
        """Stop listening."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
