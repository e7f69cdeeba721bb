"""Scale-out: runs, background children and wake-ups on PostgreSQL workers.

`WorkQueue(url)` puts taskloom's jobs on procrastinate (the `distributed`
extra), in the store's database: `Runtime(store=url, queue=WorkQueue(url),
agents=[...])` lets sessions `submit` runs and `wait` for them;
`queue.dispatcher()` runs background children on workers;
`queue.schedule(session_id, every=|cron=, input=)` wakes always-on agents.
`taskloom worker --app module:factory` (or `queue.worker(runtime).run()`)
runs the jobs. procrastinate's locks, queueing locks, retries and stalled
worker detection do the queue's work; the session lease does the fencing.

`TemporalQueue(client_or_address, task_queue=...)` (the `temporal` extra)
puts the same runs and background children on Temporal instead: one
workflow per session, the runs in heartbeating activities retried on another
worker when one dies; `taskloom worker --temporal ADDRESS --app ...` (or
`queue.worker(runtime).run()`) runs them; its `schedule` verbs make
Temporal schedules, and `status()` (`taskloom queue status --temporal`)
counts its workflows. The store stays the truth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._queue import QueueStatus, WorkQueue
    from ._schedules import Schedule
    from ._temporal import TemporalQueue
    from ._temporal_status import TemporalPoller, TemporalStatus
    from ._temporal_worker import TemporalWorker
    from ._worker import QueueWorker

__all__ = [
    "QueueStatus",
    "QueueWorker",
    "Schedule",
    "TemporalPoller",
    "TemporalQueue",
    "TemporalStatus",
    "TemporalWorker",
    "WorkQueue",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "QueueStatus": "._queue",
        "Schedule": "._schedules",
        "TemporalQueue": "._temporal",
        "TemporalPoller": "._temporal_status",
        "TemporalStatus": "._temporal_status",
        "TemporalWorker": "._temporal_worker",
        "WorkQueue": "._queue",
        "QueueWorker": "._worker",
    },
)
