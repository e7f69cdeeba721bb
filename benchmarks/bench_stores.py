"""Session store throughput: memory, SQLite and PostgreSQL, side by side.

Prints one table: appends per second with one writer, with 8 concurrent
writers (asyncio tasks) on 8 sessions and on one shared session, and whole
loads per second of a 100-entry session. Each cell runs for `--seconds`
(default 1.5); the whole run stays under a minute. Numbers only, no
assertions: compare rows within one run on one machine.

    python benchmarks/bench_stores.py [--seconds 1.5] [--postgres URL]

PostgreSQL is skipped (and says why) when the server does not answer; its
tables live in a throwaway schema dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from taskloom.backends import PostgresBackend, SessionMeta, SessionStore, SQLiteBackend
from taskloom.backends.memory import MemoryStore
from taskloom.entries import Entry, EntryKind

WRITERS = 8
LOAD_ENTRIES = 100

# Roughly one assistant turn with a tool call: ~0.5 KiB of JSON.
PAYLOAD: dict[str, Any] = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "Let me look that up for you. " * 6},
        {"type": "tool_call", "id": "call_0123456789", "name": "search", "arguments": {"q": "x"}},
    ],
    "usage": {"input_tokens": 1234, "output_tokens": 56, "cache_read_tokens": 0},
    "stop_reason": "tool_use",
}


async def _rate(seconds: float, workers: int, step: Callable[[int], Awaitable[object]]) -> float:
    """Operations per second of `workers` tasks each calling `step(worker)` until time is up."""
    deadline = time.perf_counter() + seconds
    counts = [0] * workers

    async def work(worker: int) -> None:
        while time.perf_counter() < deadline:
            await step(worker)
            counts[worker] += 1

    start = time.perf_counter()
    await asyncio.gather(*(work(w) for w in range(workers)))
    return sum(counts) / (time.perf_counter() - start)


async def _measure(store: SessionStore, seconds: float) -> list[float]:
    run = uuid.uuid4().hex[:8]
    ids = [f"bench-{run}-{w}" for w in range(WRITERS)]
    for sid in ids:
        await store.create(SessionMeta(sid, "bench"))
    entry = Entry(EntryKind.MESSAGE, PAYLOAD, run_id=run)

    async def append_own(worker: int) -> object:
        return await store.append(ids[worker], entry)

    async def append_shared(worker: int) -> object:
        return await store.append(ids[0], entry)

    single = await _rate(seconds, 1, append_own)
    separate = await _rate(seconds, WRITERS, append_own)
    shared = await _rate(seconds, WRITERS, append_shared)

    loaded = f"bench-{run}-load"
    await store.create(SessionMeta(loaded, "bench"))
    for _ in range(LOAD_ENTRIES):
        await store.append(loaded, entry)

    async def load(worker: int) -> object:
        return await store.load(loaded)

    loads = await _rate(seconds, 1, load)
    return [single, separate, shared, loads]


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _postgres_problem(url: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="duration of each cell")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    args = parser.parse_args()

    rows: list[tuple[str, list[float] | str]] = []
    rows.append(("memory", await _measure(MemoryStore(), args.seconds)))

    with tempfile.TemporaryDirectory() as tmp:
        for synchronous in ("FULL", "NORMAL"):
            sqlite = SQLiteBackend(Path(tmp) / f"{synchronous}.db", synchronous=synchronous).store
            try:
                rows.append((f"sqlite ({synchronous})", await _measure(sqlite, args.seconds)))
            finally:
                await sqlite.close()

    problem = await asyncio.to_thread(_postgres_problem, args.postgres)
    if problem is not None:
        rows.append(("postgresql", f"skipped: {problem}"))
    else:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        postgres = PostgresBackend(args.postgres, schema=schema, max_size=WRITERS).store
        try:
            rows.append(("postgresql", await _measure(postgres, args.seconds)))
        finally:
            await postgres.close()
            await asyncio.to_thread(_drop_schema, args.postgres, schema)

    headers = (
        "backend",
        "append 1 writer",
        f"{WRITERS} writers, {WRITERS} sessions",
        f"{WRITERS} writers, 1 session",
        f"loads/s ({LOAD_ENTRIES} entries)",
    )
    widths = [max(16, len(h)) for h in headers]
    print(f"entries/s unless noted; {args.seconds:g} s per cell; payload ~0.5 KiB JSON")
    print(
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    )
    for name, values in rows:
        if isinstance(values, str):
            print(f"{name.ljust(widths[0])}  {values}")
            continue
        cells = [f"{v:,.0f}".rjust(w) for v, w in zip(values, widths[1:], strict=True)]
        print("  ".join([name.ljust(widths[0]), *cells]))


if __name__ == "__main__":
    asyncio.run(main())
