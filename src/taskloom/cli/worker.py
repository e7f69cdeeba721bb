"""`taskloom worker --app module:factory`: run queued runs, background children
and scheduled wake-ups on this machine.

The factory is the host's own (`cli/common.py`): it returns the `Runtime`
with the agents, tools and models a job may need, and a `WorkQueue` as its
`queue`. SIGTERM or SIGINT drains the worker (no new job; runs in flight stop
at their next boundary and go back in the queue; children in flight finish)
and exits 0; a second signal exits at once, like a crash: the stall reaper of
another worker puts its jobs back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from ..errors import ConfigurationError, StoreError
from .common import Worker, drain_on_signals, load_app
from .failures import with_hint
from .queue import queue_hint

__all__ = ["run_worker"]


def run_worker(args: Worker) -> int:
    """Serve until drained; the exit code."""
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
    )
    logging.getLogger("taskloom.distributed").setLevel(logging.INFO)
    # taskloom logs each job that fails in one line; procrastinate would add
    # a traceback per job. Its worker's own trouble is still shown.
    logging.getLogger("procrastinate.worker").setLevel(logging.CRITICAL)
    logging.getLogger("procrastinate.worker.taskloom").setLevel(logging.WARNING)
    if args.temporal is not None:
        from .temporal import exit_without_finalizing

        # A refusal (a wrong app, missing search attributes) too: temporalio
        # may have started its native threads by then.
        exit_without_finalizing(lambda: asyncio.run(_serve(args)), args)
    return asyncio.run(_serve(args))


def _queues(raw: str | None) -> tuple[str, ...] | None:
    if not raw:
        return None
    names = tuple(q.strip() for q in raw.split(",") if q.strip())
    if not names:
        raise with_hint(
            ConfigurationError("--queues names no queue"), "e.g. --queues runs,children"
        )
    return names


async def _serve(args: Worker) -> int:
    from ..distributed import WorkQueue

    if args.temporal is not None:
        from .temporal import serve_temporal

        return await serve_temporal(args)
    if args.namespace is not None or args.task_queue is not None:
        raise with_hint(
            ConfigurationError("--namespace and --task-queue are Temporal's"),
            "add --temporal ADDRESS, or drop them",
        )
    queues = _queues(args.queues)
    app = str(args.where.app)
    runtime = await load_app(app)
    try:
        queue = runtime.queue
        if not isinstance(queue, WorkQueue):
            raise with_hint(
                ConfigurationError(f"--app {app}: its Runtime has no WorkQueue as its queue"),
                "build it as Runtime(store=url, queue=taskloom.distributed.WorkQueue(url), ...)",
            )
        worker = queue.worker(runtime, concurrency=args.concurrency, queues=queues)
        drain_on_signals(worker.drain)

        def ready(w: object) -> None:
            names = ",".join(worker.queues)
            print(
                f"taskloom worker ready: pid {os.getpid()}, worker {worker.worker_id}, "
                f"queues {names}, concurrency {worker.concurrency}",
                flush=True,
            )

        try:
            await worker.run(ready)
        except StoreError as exc:
            raise queue_hint(exc, queue.url, queue.schema) from None
        print("taskloom worker: stopped", file=sys.stderr, flush=True)
        return 0
    finally:
        await runtime.close()
