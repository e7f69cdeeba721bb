"""`taskloom queue status URL`: the work queue's jobs by kind and status, and
its workers with their heartbeats (`--temporal ADDRESS`: the Temporal
queue's workflows by kind and status, and the workers polling its task
queue); and the queue in a `--store` database that a decision hands work to."""

from __future__ import annotations

import asyncio
import shlex
from typing import TYPE_CHECKING

from ..delegation import ChildSpec, DecidedChildren
from ..errors import ConfigurationError, SchemaNotMigrated, StoreError, UsageError
from ..runtime import Runtime
from . import default_store_url
from .common import QueueStatusArgs, Where
from .failures import with_hint

if TYPE_CHECKING:
    from ..distributed import WorkQueue

__all__ = ["QueueIfThere", "queue_hint", "queue_status", "store_queue"]

_STATUSES = ("todo", "doing", "failed", "succeeded", "aborted", "cancelled")


def queue_status(args: QueueStatusArgs) -> int:
    """Print the queue's status; exit code 0."""
    if (args.url is None) == (args.temporal is None):
        raise with_hint(
            UsageError("taskloom queue status takes a PostgreSQL URL or --temporal ADDRESS"),
            "e.g. taskloom queue status postgresql://localhost/agents, or "
            "taskloom queue status --temporal localhost:7233 --task-queue agents",
        )
    mixed = ("--schema" if args.temporal is not None and args.schema is not None else None) or (
        "--namespace/--task-queue"
        if args.temporal is None and (args.namespace is not None or args.task_queue is not None)
        else None
    )
    if mixed is not None:
        raise with_hint(
            UsageError(f"{mixed} does not go with this queue"),
            "--schema is the PostgreSQL queue's; --namespace and --task-queue are Temporal's",
        )
    if args.temporal is not None:
        from .temporal import exit_without_finalizing

        address = args.temporal
        exit_without_finalizing(lambda: asyncio.run(_temporal_status(args, address)), args)
    return asyncio.run(_status(args, args.url or ""))


def queue_hint(exc: StoreError, url: str, schema: str | None) -> StoreError:
    """`exc` with the hint that fixes it: migrate, or check the URL."""
    if isinstance(exc, SchemaNotMigrated):
        words = ["taskloom", "db", "migrate", url] + (["--schema", schema] if schema else [])
        return with_hint(exc, f"create the tables once: {shlex.join(words)}")
    return with_hint(exc, "check the URL, and that PostgreSQL is up and reachable from here")


async def _status(args: QueueStatusArgs, url: str) -> int:
    from ..distributed import WorkQueue

    queue = WorkQueue(url, schema=args.schema, migrate=False)
    try:
        status = await queue.status()
    except StoreError as exc:
        raise queue_hint(exc, url, args.schema) from None
    finally:
        await queue.close()
    known = ["run", "child", "schedule"]
    kinds = known + sorted({kind for kind, _ in status.jobs} - set(known))
    names = {"todo": "queued", "doing": "running"}
    header = f"{'kind':<10}" + "".join(f"{names.get(s, s):>11}" for s in _STATUSES)
    print(header)
    for kind in kinds:
        counts = "".join(f"{status.jobs.get((kind, s), 0):>11}" for s in _STATUSES)
        print(f"{kind:<10}{counts}")
    alive = status.alive
    print(f"\nworkers alive: {len(alive)}")
    for worker_id, age in status.workers:
        state = "alive" if worker_id in alive else "stalled"
        print(f"  worker {worker_id}: last heartbeat {age:.1f}s ago ({state})")
    return 0


_TEMPORAL_STATUSES = (
    "Running",
    "Completed",
    "Failed",
    "Canceled",
    "Terminated",
    "TimedOut",
    "ContinuedAsNew",
)


async def _temporal_status(args: QueueStatusArgs, address: str) -> int:
    from ..distributed import TemporalQueue

    namespace, task_queue = args.namespace or "default", args.task_queue or "taskloom"
    queue = TemporalQueue(address, namespace=namespace, task_queue=task_queue)
    try:
        status = await queue.status()
    except StoreError as exc:
        raise with_hint(
            exc, "check the address and namespace, and that the Temporal server is up"
        ) from None
    finally:
        await queue.close()
    print(f"temporal {address}, namespace {namespace}, task queue {task_queue}")
    statuses = list(_TEMPORAL_STATUSES) + sorted(
        {s for _, s in status.workflows} - set(_TEMPORAL_STATUSES)
    )
    names = {"TimedOut": "timed-out", "ContinuedAsNew": "continued"}
    header = f"{'kind':<10}" + "".join(f"{names.get(s, s.lower()):>11}" for s in statuses)
    print(header)
    for kind in ("run", "child", "schedule"):
        counts = "".join(f"{status.workflows.get((kind, s), 0):>11}" for s in statuses)
        print(f"{kind:<10}{counts}")
    print(f"\nworkers polling: {len(status.pollers)}")
    for poller in status.pollers:
        print(f"  {poller.identity}: last poll {poller.age:.1f}s ago ({', '.join(poller.polls)})")
    return 0


def store_queue(runtime: Runtime, where: Where) -> WorkQueue | None:
    """The work queue in a `--store postgresql://` database, given to
    `DecidedChildren` for children that ran on it; None for other stores,
    with `--app`, or without the distributed extra."""
    if where.app or runtime.queue is not None:
        return None
    url = where.store or default_store_url()
    if not url.startswith(("postgresql://", "postgres://")):
        return None
    try:
        from ..distributed import WorkQueue
    except ImportError:
        return None
    try:
        queue = WorkQueue(url, migrate=False)
    except ConfigurationError:
        return None  # no distributed extra: no queue can exist
    DecidedChildren.of(runtime).use_queue(QueueIfThere(queue))
    return queue


class QueueIfThere:
    """A store's work queue, carrying nothing when its database has no queue tables."""

    def __init__(self, queue: WorkQueue) -> None:
        self._queue = queue

    async def dispatch_child(self, spec: ChildSpec) -> str:
        return await self._queue.dispatch_child(spec)

    async def carries(self, child_id: str) -> bool:
        """Whether the queue ever had a job of the session (False without queue tables)."""
        try:
            return await self._queue.carries(child_id)
        except StoreError:
            return False
