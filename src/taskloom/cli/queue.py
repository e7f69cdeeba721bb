"""`taskloom queue status URL`: the work queue's jobs by kind and status, and
its workers with their heartbeats."""

from __future__ import annotations

import argparse
import asyncio
import shlex

from ..errors import SchemaNotMigrated, StoreError
from .failures import with_hint

__all__ = ["queue_hint", "queue_status"]

_STATUSES = ("todo", "doing", "failed", "succeeded", "aborted", "cancelled")


def queue_status(args: argparse.Namespace) -> int:
    """Print the queue's status; exit code 0."""
    return asyncio.run(_status(args))


def queue_hint(exc: StoreError, url: str, schema: str | None) -> StoreError:
    """`exc` with the hint that fixes it: migrate, or check the URL."""
    if isinstance(exc, SchemaNotMigrated):
        words = ["taskloom", "db", "migrate", url] + (["--schema", schema] if schema else [])
        return with_hint(exc, f"create the tables once: {shlex.join(words)}")
    return with_hint(exc, "check the URL, and that PostgreSQL is up and reachable from here")


async def _status(args: argparse.Namespace) -> int:
    from ..distributed import WorkQueue

    queue = WorkQueue(args.url, schema=args.schema, migrate=False)
    try:
        status = await queue.status()
    except StoreError as exc:
        raise queue_hint(exc, args.url, args.schema) from None
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
