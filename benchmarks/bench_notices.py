"""Background notices: inbox throughput and the cost of an idle round boundary.

For each backend (memory, SQLite, PostgreSQL when reachable):

- pushed/s: `NoticeInbox.push` calls per second, one at a time;
- delivered/s: notices taken through `pending()` + `ack()` per second, in
  rounds of 10 (as a run would see a burst of completions);
- idle round_start: the cost of `RunNotices.round_start()` at a boundary
  with nothing pending, in µs, on a session whose inbox holds 1,000
  acknowledged notices (the history a long session accumulates).

Run: `python benchmarks/bench_notices.py` (about ten seconds).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from taskloom.backends import (
    ActivityRegistry,
    BackgroundNotice,
    NoticeInbox,
    PostgresBackend,
    SQLiteBackend,
)
from taskloom.backends.memory import MemoryActivityRegistry, MemoryNoticeInbox
from taskloom.background import RunNotices

PG_DSN = "host=127.0.0.1 port=5432 dbname=test user=postgres"
BATCH = 10
HISTORY = 1_000


@dataclass
class Backend:
    name: str
    registry: ActivityRegistry
    inbox: NoticeInbox
    notices: int  # how many to push and deliver
    idle_calls: int  # how many idle round_start calls to time


@dataclass
class Row:
    name: str
    pushed_per_s: float
    delivered_per_s: float
    idle_round_us: float


def _notice(i: int) -> BackgroundNotice:
    return BackgroundNotice(f"n{i}", f"a{i}", "shell", f"exit 0 after {i} lines of output")


async def _throughput(inbox: NoticeInbox, count: int) -> tuple[float, float]:
    session = f"bench-{uuid.uuid4().hex[:8]}"
    await inbox.pending(session)  # connect and create tables outside the timing
    push_time = deliver_time = 0.0
    for start in range(0, count, BATCH):
        t0 = time.perf_counter()
        for i in range(start, start + BATCH):
            await inbox.push(session, _notice(i))
        t1 = time.perf_counter()
        pending = await inbox.pending(session)
        await inbox.ack(session, [n.id for n in pending])
        t2 = time.perf_counter()
        assert len(pending) == BATCH
        push_time += t1 - t0
        deliver_time += t2 - t1
    await inbox.clear(session)
    return count / push_time, count / deliver_time


async def _idle_round(backend: Backend) -> float:
    session = f"bench-{uuid.uuid4().hex[:8]}"
    for i in range(HISTORY):
        await backend.inbox.push(session, _notice(i))
    await backend.inbox.ack(session, [f"n{i}" for i in range(HISTORY)])
    notices = RunNotices(backend.registry, backend.inbox, session)
    await notices.round_start()  # the first boundary also lists running work
    t0 = time.perf_counter()
    for _ in range(backend.idle_calls):
        if await notices.round_start() is not None:
            raise AssertionError("an idle boundary delivered something")
    elapsed = time.perf_counter() - t0
    await backend.inbox.clear(session)
    return elapsed / backend.idle_calls * 1e6


async def _measure(backend: Backend) -> Row:
    pushed, delivered = await _throughput(backend.inbox, backend.notices)
    return Row(backend.name, pushed, delivered, await _idle_round(backend))


@asynccontextmanager
async def _memory() -> AsyncIterator[Backend]:
    yield Backend("memory", MemoryActivityRegistry(), MemoryNoticeInbox(), 50_000, 50_000)


@asynccontextmanager
async def _sqlite() -> AsyncIterator[Backend]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        backend = SQLiteBackend(path)
        try:
            yield Backend("SQLite", backend.registry, backend.inbox, 5_000, 10_000)
        finally:
            await backend.close()


@asynccontextmanager
async def _postgres() -> AsyncIterator[Backend | None]:
    try:
        import psycopg
        from psycopg import sql

        probe = await psycopg.AsyncConnection.connect(PG_DSN, connect_timeout=3)
        await probe.close()
    except Exception as exc:  # no driver or no server: report and go on
        print(f"PostgreSQL skipped: {exc}")
        yield None
        return
    schema = f"taskloom_bench_{uuid.uuid4().hex[:8]}"
    backend = PostgresBackend(PG_DSN, schema=schema)
    try:
        yield Backend("PostgreSQL", backend.registry, backend.inbox, 5_000, 5_000)
    finally:
        await backend.close()
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )


async def main() -> None:
    rows: list[Row] = []
    backends: list[Callable[[], AbstractAsyncContextManager[Backend | None]]] = [
        _memory,
        _sqlite,
        _postgres,
    ]
    for open_backend in backends:
        async with open_backend() as backend:
            if backend is not None:
                rows.append(await _measure(backend))
    print(f"{'backend':<12}{'pushed/s':>12}{'delivered/s':>14}{'idle round_start':>20}")
    for row in rows:
        print(
            f"{row.name:<12}{row.pushed_per_s:>12,.0f}{row.delivered_per_s:>14,.0f}"
            f"{row.idle_round_us:>17,.1f} µs"
        )


if __name__ == "__main__":
    asyncio.run(main())
