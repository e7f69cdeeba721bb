"""taskloom's three procrastinate tasks, run by the worker serving the queue.

The app opens before any worker exists (a host only queues jobs), so the
tasks are declared as it opens and hand each job to the `JobBodies` that
`QueueWorker.run` binds while it runs (`JobTasks.serving`), one worker per
queue at a time; a job taken while none is bound fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from procrastinate import App, JobContext

    from ._bodies import JobBodies

__all__ = ["CHILD_TASK", "RUN_TASK", "TICK_TASK", "JobTasks"]

RUN_TASK = "taskloom.run"
"""Bring a session up to date: a submitted run, a resume, a wake-up."""

CHILD_TASK = "taskloom.child"
"""Run a background child from its `ChildSpec`."""

TICK_TASK = "taskloom.tick"
"""Fire a scheduled wake-up."""


class JobTasks:
    """The three tasks on a queue's app, and the worker bodies their jobs run with."""

    def __init__(self) -> None:
        self._bodies: JobBodies | None = None

    def declare(self, app: App) -> None:
        """Declare the three tasks on `app`."""
        # procrastinate is the distributed extra: imported once the queue is used.
        from ._jobs import JobStrategy, logged

        async def run(context: JobContext, /, **args: Any) -> str:
            return await logged(context.job, lambda: self._bound().run_session(context.job, args))

        async def child(context: JobContext, /, **args: Any) -> str:
            return await logged(context.job, lambda: self._bound().run_child(context.job, args))

        async def tick(context: JobContext, /, **args: Any) -> str:
            return await logged(context.job, lambda: self._bound().fire_schedule(args))

        strategy = JobStrategy()
        for name, body in ((RUN_TASK, run), (CHILD_TASK, child), (TICK_TASK, tick)):
            app.task(name=name, pass_context=True, retry=strategy)(body)

    @contextmanager
    def serving(self, bodies: JobBodies) -> Iterator[None]:
        """Run this process's jobs with `bodies` until the block ends; a second
        worker serving the same queue at once is a `RuntimeError`."""
        if self._bodies is not None:
            raise RuntimeError("one WorkQueue serves one worker at a time")
        self._bodies = bodies
        try:
            yield
        finally:
            self._bodies = None

    def _bound(self) -> JobBodies:
        if self._bodies is None:
            raise ConfigurationError("this process runs no taskloom worker for the queue")
        return self._bodies
