"""`taskloom worker --temporal ADDRESS --app module:factory`: run queued runs and
background children as a Temporal worker on this machine.

The factory's `Runtime` has a `TemporalQueue` as its queue (its workflows,
its background children's dispatcher and its wake-ups go through it); the
command line says where that queue must point (`--temporal`, and
`--namespace` and `--task-queue` when given), so a worker never serves a
server or task queue other than the one its app's hosts submit to. SIGTERM
or SIGINT drains the worker (runs in flight stop at their next boundary and
go on on another worker; children in flight finish) and exits 0; a second
signal exits at once, like a crash: Temporal retries its activities on
another worker once their heartbeat times out.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from ..errors import ConfigurationError
from .common import Command, Worker, drain_on_signals, load_app
from .failures import with_hint

__all__ = ["exit_without_finalizing", "serve_temporal"]


def exit_without_finalizing(run: Callable[[], int], command: Command) -> NoReturn:
    """End the process with `run()`'s exit code (an error reported as every
    command reports one, 130 for an interrupt), without finalizing the
    interpreter: temporalio's native runtime keeps threads of its own that
    may call into a finalizing interpreter and abort it ("PyGILState_Release
    ... must be current", SIGABRT) after a clean end. Whatever was to be
    printed is printed and flushed first."""
    from .failures import report

    try:
        code = run()
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:
        code = report(exc, command, False)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def serve_temporal(args: Worker) -> int:
    """Serve the app's TemporalQueue until drained; the exit code."""
    from ..distributed import TemporalQueue

    if args.queues:
        raise with_hint(
            ConfigurationError("--queues is the procrastinate worker's"),
            "a Temporal worker polls one task queue: --task-queue NAME",
        )
    app = str(args.where.app)
    runtime = await load_app(app)
    try:
        queue = runtime.queue
        if not isinstance(queue, TemporalQueue):
            raise with_hint(
                ConfigurationError(f"--app {app}: its Runtime has no TemporalQueue as its queue"),
                "build it as Runtime(store=..., queue=taskloom.distributed.TemporalQueue(address), ...)",
            )
        wanted = {
            "address": args.temporal,
            "namespace": args.namespace or queue.namespace,
            "task queue": args.task_queue or queue.task_queue,
        }
        has = {
            "address": queue.address,
            "namespace": queue.namespace,
            "task queue": queue.task_queue,
        }
        differ = [k for k in wanted if wanted[k] != has[k]]
        if differ:
            raise with_hint(
                ConfigurationError(
                    f"--app {app}: its TemporalQueue's {differ[0]} is {has[differ[0]]!r}, "
                    f"the command line says {wanted[differ[0]]!r}"
                ),
                "point the worker where the app's hosts submit (or build the app's queue from the same settings)",
            )
        worker = queue.worker(runtime, concurrency=args.concurrency)
        drain_on_signals(worker.drain)

        def ready(w: object) -> None:
            print(
                f"taskloom worker ready: pid {os.getpid()}, temporal {queue.address}, "
                f"namespace {queue.namespace}, task queue {queue.task_queue}, "
                f"concurrency {worker.concurrency}",
                flush=True,
            )

        await worker.run(ready)
        print("taskloom worker: stopped", file=sys.stderr, flush=True)
        return 0
    finally:
        await runtime.close()
