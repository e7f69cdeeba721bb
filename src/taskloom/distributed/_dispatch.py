"""`QueueDispatcher`: background children as `taskloom.child` jobs, for any worker."""

from __future__ import annotations

from ..backends import session_lease_key
from ..delegation import ChildSpec
from ._database import QueueDatabase
from ._tasks import CHILD_TASK

__all__ = ["QueueDispatcher"]


class QueueDispatcher:
    """A `Dispatcher` putting background children on the procrastinate queue
    `queue` of `database`: any worker runs them with the fenced `ChildWorker`."""

    def __init__(self, database: QueueDatabase, *, queue: str) -> None:
        self._database = database
        self._queue = queue

    async def dispatch(self, spec: ChildSpec) -> None:
        """Queue the child (returns once the job is stored)."""
        await self.dispatch_child(spec)

    async def dispatch_child(self, spec: ChildSpec) -> str:
        """Queue the child, or join its job still waiting; the job id."""
        return await self._database.defer(
            CHILD_TASK,
            {"spec": spec.to_dict()},
            queue=self._queue,
            lock=session_lease_key(spec.child_session_id),
            queueing_lock=f"child:{spec.child_session_id}",
        )

    async def carries(self, session_id: str) -> bool:
        """Whether a job of this session (a child's, or a run of it) was ever
        queued here, in any status: every job of a session takes its lock."""
        async with self._database.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM procrastinate_jobs WHERE lock = %s LIMIT 1",
                (session_lease_key(session_id),),
            )
            return await cur.fetchone() is not None
