"""Scale-out: runs, background children and wake-ups on PostgreSQL workers.

`WorkQueue(url)` puts taskloom's jobs on procrastinate (the `distributed`
extra), in the store's database: `Runtime(store=url, queue=WorkQueue(url),
agents=[...])` lets sessions `submit` runs and `wait` for them;
`queue.dispatcher()` runs background children on workers;
`queue.schedule(session_id, every=|cron=, input=)` wakes always-on agents.
`taskloom worker --app module:factory` (or `queue.worker(runtime).run()`)
runs the jobs. procrastinate's locks, queueing locks, retries and stalled
worker detection do the queue's work; the session lease does the fencing.

A `WorkQueue` is its parts, one per role, each over the one
`QueueDatabase` (`queue.database`): `RunJobs` (`queue.run_jobs`: runs
submitted and waited for), `QueueDispatcher` (`queue.child_jobs`:
background children), `Scheduler` (`queue.scheduler`: wake-ups),
`QueueAdmin` (`queue.admin`: status) and `JobTasks` (`queue.tasks`: the
job kinds, and the one worker serving them in this process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._admin import QueueAdmin, QueueStatus
    from ._database import QueueDatabase
    from ._dispatch import QueueDispatcher
    from ._queue import WorkQueue
    from ._runs import RunJobs
    from ._schedules import Schedule, Scheduler
    from ._tasks import JobTasks
    from ._worker import QueueWorker

__all__ = [
    "JobTasks",
    "QueueAdmin",
    "QueueDatabase",
    "QueueDispatcher",
    "QueueStatus",
    "QueueWorker",
    "RunJobs",
    "Schedule",
    "Scheduler",
    "WorkQueue",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "JobTasks": "._tasks",
        "QueueAdmin": "._admin",
        "QueueDatabase": "._database",
        "QueueDispatcher": "._dispatch",
        "QueueStatus": "._admin",
        "RunJobs": "._runs",
        "Schedule": "._schedules",
        "Scheduler": "._schedules",
        "WorkQueue": "._queue",
        "QueueWorker": "._worker",
    },
)
