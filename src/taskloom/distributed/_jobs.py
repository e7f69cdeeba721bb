"""How a job ends: only by the worker that still owns it, and retried only on purpose.

procrastinate finishes or retries a job by id, whatever its state: a worker
cut off past the stall timeout would mark someone else's work done, or drop
a retry nobody ran. So a job ends only while still `doing` under the worker
that fetched it, under a row lock, and the reaper retries only what it saw
stalled. A retry colliding with a queued sibling under the same queueing
lock (procrastinate #1446) ends the job instead: the sibling does the same
work.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Iterable
from typing import Any

import psycopg
from procrastinate import exceptions, jobs, manager, retry, sql
from procrastinate.sync_psycopg_connector import wrap_exceptions
from psycopg.types.json import Jsonb

from ..backends.postgres import ALL_ROWS, ONE_ROW, one_statement
from ._engine import Busy, Drained, Lost

logger = logging.getLogger("taskloom.distributed")

_OWNED = """SELECT id FROM procrastinate_jobs
    WHERE id = %(job_id)s AND status = 'doing'
      AND worker_id IS NOT DISTINCT FROM %(worker_id)s
    FOR UPDATE"""

_FINISH = f"""SELECT procrastinate_finish_job_v1(owned.id, %(status)s, %(delete_job)s)
    FROM ({_OWNED}) AS owned"""

_RETRY = f"""SELECT procrastinate_retry_job_v2(owned.id, %(retry_at)s, %(priority)s, %(queue)s,
    %(lock)s) FROM ({_OWNED}) AS owned"""

# procrastinate's own statement (`sql.queries["defer_jobs"]`) takes the jobs as
# one array of its composite type, which psycopg sends as text: every quote
# of every job's JSON arguments escaped by a regular expression, 150 µs of a
# host's CPU for one child's job. The same function here, given the jobs'
# fields as binary arrays and zipped back into that type on the server, in
# the order given (procrastinate returns the ids in that order).
_DEFER = """SELECT unnest(procrastinate_defer_jobs_v1(ARRAY(
    SELECT ROW(j.queue_name, j.task_name, j.priority, j.lock, j.queueing_lock, j.args,
               j.scheduled_at)::procrastinate_job_to_defer_v1
    FROM unnest(%(queues)b::varchar[], %(tasks)b::varchar[], %(priorities)b::int[],
                %(locks)b::text[], %(queueing_locks)b::text[], %(args)b::jsonb[],
                %(scheduled)b::timestamptz[])
         WITH ORDINALITY AS j(queue_name, task_name, priority, lock, queueing_lock, args,
                              scheduled_at, n)
    ORDER BY j.n))) AS id"""
_TODO = jobs.Status.TODO.value
_FETCH = sql.queries["fetch_job"]
_JOB_COLUMNS = (
    "id",
    "status",
    "task_name",
    "priority",
    "lock",
    "queueing_lock",
    "args",
    "scheduled_at",
    "queue_name",
    "attempts",
    "worker_id",
)
"""The columns `_FETCH` returns, in its order (checked as the module loads)."""

if _FETCH.split("FROM")[0].split("SELECT")[1].replace(",", " ").split() != list(_JOB_COLUMNS):
    raise ImportError("procrastinate's fetch_job query is not the one taskloom reads")
# The composite's fields go by position in `ROW(...)`: a version of procrastinate
# that changed them would name a new type (`_v2`) in its own statement.
if " ".join(sql.queries["defer_jobs"].split()) != (
    "SELECT unnest( procrastinate_defer_jobs_v1( %(jobs)s::procrastinate_job_to_defer_v1[] ) ) AS id;"
):
    raise ImportError("procrastinate's defer_jobs query is not the one taskloom sends")

_ATTEMPTS = 6
"""How often ending a job is tried when the database does not answer (backoff up to ~30 s)."""


class JobStrategy(retry.BaseRetryStrategy):
    """Retries what taskloom asks to retry, nothing else (a run or child that
    failed otherwise recorded it in its log; running it again would not cure it)."""

    def get_retry_decision(
        self, *, exception: BaseException, job: jobs.Job
    ) -> retry.RetryDecision | None:
        """When to retry `job` after `exception` (None: do not)."""
        if isinstance(exception, Busy):
            delay = min(0.25 * 2 ** min(exception.attempt, 6), 10.0)
            return retry.RetryDecision(retry_in={"seconds": delay})
        if isinstance(exception, Drained | Lost | asyncio.CancelledError):
            return retry.RetryDecision(retry_in={"seconds": 0})
        return None


class FencedJobManager(manager.JobManager):
    """procrastinate's job manager, with finish and retry fenced by ownership,
    and a fetch that a dropped connection does not turn into a stopped worker;
    its queueing, fetch and end are sent on the store's lean statement path."""

    async def fetch_job(self, queues: Iterable[str] | None, worker_id: int) -> jobs.Job | None:
        """The next job, marked `doing` under this worker; None when there is none,
        or when the connection failed (the worker fetches again at its next poll
        or notification; the fetch itself is not repeated, since it may have
        reached the server)."""
        try:
            row = await self._statement(
                _FETCH,
                {"queues": None if queues is None else list(queues), "worker_id": worker_id},
                ONE_ROW,
            )
        except exceptions.ConnectorException as exc:
            # The queue's pool checks a connection only after it sat idle a
            # while (`CHECK_AFTER_IDLE`): one dropped just before is found
            # here, and must not end the worker's fetching.
            if not isinstance(exc.__cause__, psycopg.OperationalError):
                raise
            logger.warning("fetching a job failed (%s); trying again at the next poll", exc)
            return None
        # The function returns one row, all NULL when no job is waiting.
        if row is None or row[0] is None:
            return None
        return jobs.Job.from_row(dict(zip(_JOB_COLUMNS, row, strict=True)))

    async def _statement(self, query: str, params: dict[str, Any], result: int) -> Any:
        # The fetch and the end of every job: one statement each on the
        # queue's pool, through the store's lean path (libpq under psycopg's
        # own dumping, loading and errors) rather than procrastinate's
        # cursor, dict rows and JSON wrapping, which cost about twice as
        # much CPU per statement. Errors are procrastinate's, as its
        # connector raises them.
        with wrap_exceptions():
            async with self.connector.pool.connection() as conn:  # type: ignore[attr-defined]
                return await one_statement(conn, query, params, result)

    async def batch_defer_jobs_async(
        self, jobs: list[jobs.Job], connection: Any | None = None
    ) -> list[jobs.Job]:
        """Queue `jobs` in one statement (as procrastinate does, on the lean
        path: a host queues one per child); `AlreadyEnqueued` when a job's
        queueing lock is taken. With `connection`, procrastinate's own path,
        in that connection's transaction."""
        if connection is not None:
            return await super().batch_defer_jobs_async(jobs, connection)
        wanted = {
            "queues": [job.queue for job in jobs],
            "tasks": [job.task_name for job in jobs],
            "priorities": [job.priority for job in jobs],
            "locks": [job.lock for job in jobs],
            "queueing_locks": [job.queueing_lock for job in jobs],
            # Dumped as jsonb, as procrastinate's connector wraps it.
            "args": [Jsonb(job.task_kwargs) for job in jobs],
            "scheduled": [job.scheduled_at for job in jobs],
        }
        try:
            rows = await self._statement(_DEFER, wanted, ALL_ROWS)
        except exceptions.UniqueViolation as exc:
            self._raise_already_enqueued(exc=exc, queueing_lock=exc.queueing_lock)
        return [job.evolve(id=row[0], status=_TODO) for job, row in zip(jobs, rows, strict=True)]

    async def finish_job(self, job: jobs.Job, status: jobs.Status, delete_job: bool) -> None:
        """Finish `job` if it is still ours (see the module docstring)."""
        assert job.id is not None
        params = {
            "job_id": job.id,
            "worker_id": job.worker_id,
            "status": status.value,
            "delete_job": delete_job,
        }
        if not await self._owned_call(_FINISH, params):
            logger.info("job %s is no longer this worker's: its end is left to its owner", job.id)

    async def retry_job(
        self,
        job: jobs.Job,
        retry_at: datetime.datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
    ) -> None:
        """Put `job` back in the queue if it is still `doing` as it was read."""
        assert job.id is not None
        params = {
            "job_id": job.id,
            "worker_id": job.worker_id,
            "retry_at": retry_at or datetime.datetime.now(datetime.UTC),
            "priority": priority,
            "queue": queue,
            "lock": lock,
        }
        try:
            retried = await self._owned_call(_RETRY, params)
        except exceptions.UniqueViolation:
            logger.info("job %s has a queued sibling that does its work: ended", job.id)
            await self.finish_job(job, jobs.Status.ABORTED, False)
            return
        if not retried:
            logger.info("job %s is no longer doing under this worker: not retried", job.id)

    async def _owned_call(self, query: str, params: dict[str, Any]) -> bool:
        delay = 0.5
        for attempt in range(_ATTEMPTS):
            try:
                return bool(await self._statement(query, params, ALL_ROWS))
            except exceptions.UniqueViolation:
                raise
            except exceptions.ConnectorException:
                # Left `doing` under a live worker, a job would never be
                # reaped: keep trying while the database comes back.
                if attempt == _ATTEMPTS - 1:
                    raise
                logger.warning("ending job %s failed; trying again", params["job_id"])
                await asyncio.sleep(delay)
                delay *= 2
        return False
