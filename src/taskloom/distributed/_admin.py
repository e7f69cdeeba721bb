"""`QueueAdmin`: what a work queue holds, as `taskloom queue status` shows it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._database import QueueDatabase
from ._tasks import CHILD_TASK, RUN_TASK, TICK_TASK

__all__ = ["QueueAdmin", "QueueStatus"]

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


class QueueAdmin:
    """Looks at the jobs and workers in `database`; a worker silent for
    `stall_timeout` seconds counts as stalled."""

    def __init__(self, database: QueueDatabase, *, stall_timeout: float) -> None:
        self._database = database
        self._stall_timeout = stall_timeout

    async def status(self) -> QueueStatus:
        """Job counts by kind and status, and the registered workers' heartbeats."""
        async with self._database.connection() as conn:
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
        return QueueStatus(jobs, workers, self._stall_timeout)
