"""Long sessions: does a round, or opening the session, cost more as the log grows?

    python benchmarks/bench_long_session.py [--rounds 5000]

- CPU of a tool round near round `--rounds` as a ratio to one near round 1,
  on the memory, SQLite and PostgreSQL stores (one session, one run; mean
  CPU of 500 rounds at each end, snapshot writes included, collector paused);
- CPU to open the resulting session (about 2 × rounds entries) on SQLite and
  PostgreSQL: from its snapshot, and by full replay (`snapshot_every=0`).

PostgreSQL rows are skipped (with the reason) when the server is unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

from taskloom import Agent, RunOptions, Runtime, ToolEffect, Usage, tool
from taskloom.models import FunctionModel, ModelRequest, reply

PG = os.environ.get("TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
WINDOW = 500
"""Rounds averaged at each end: a multiple of the rounds between two snapshot
writes (250 at the default 500 entries, two entries a round), so both ends
include as many writes whatever the phase."""


@tool(effect=ToolEffect.READ_ONLY)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(rounds: int, stamps: list[float]) -> Agent:
    usage = Usage(10, 5)

    def answer(request: ModelRequest) -> Any:
        stamps.append(time.process_time())
        n = len(stamps)
        if n > rounds:
            return reply("done", usage=usage)
        return reply(tool_calls=[("add", {"a": n, "b": 1}, f"c{n}")], usage=usage)

    return Agent("long", FunctionModel(answer), tools=[add])


async def _long_session(store: Any, rounds: int) -> tuple[float, float, str]:
    """(mean CPU µs of rounds 2..WINDOW+1, of the WINDOW rounds up to `rounds`, session id)."""
    stamps: list[float] = []
    runtime = Runtime(store=store)
    session = await runtime.create_session(_agent(rounds, stamps))
    gc.collect()
    gc.disable()
    try:
        # One run of every round: the default bound on rounds lifted.
        await session.run("go", options=RunOptions(max_rounds=None))
    finally:
        gc.enable()
    per_round = [b - a for a, b in itertools.pairwise(stamps)]
    first = statistics.fmean(per_round[1 : WINDOW + 1]) * 1e6
    last = statistics.fmean(per_round[rounds - WINDOW : rounds]) * 1e6
    return first, last, session.id


async def _open_cpu(store: Any, session_id: str, snapshot_every: int) -> tuple[float, int]:
    """(best CPU ms of 5 opens, entries) with snapshots used or not."""
    best = float("inf")
    position = 0
    for _ in range(5):
        runtime = Runtime(store=store, snapshot_every=snapshot_every)
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            session = await runtime.open_session(session_id, _agent(0, []))
            best = min(best, time.process_time() - start)
        finally:
            gc.enable()
        position = session.journal.log.position
    return best * 1e3, position


async def _measure(name: str, store: Any, rounds: int, rows: list[str], opens: list[str]) -> None:
    first, last, sid = await _long_session(store, rounds)
    rows.append(f"{name:<12} {first:>14.1f} {last:>18.1f} {last / first:>8.2f}x")
    if name != "memory":
        snap, entries = await _open_cpu(store, sid, 500)
        full, _ = await _open_cpu(store, sid, 0)
        opens.append(f"{name:<12} {entries:>8} {snap:>16.1f} {full:>18.1f} {full / snap:>7.1f}x")
    await store.close()


async def main(rounds: int) -> None:
    from taskloom.backends import open_backend
    from taskloom.backends.memory import MemoryStore

    rows: list[str] = []
    opens: list[str] = []
    await _measure("memory", MemoryStore(), rounds, rows, opens)
    with tempfile.TemporaryDirectory() as tmp:
        await _measure(
            "sqlite", open_backend(f"sqlite:///{tmp}/long.db").store, rounds, rows, opens
        )
    try:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            await _measure("postgresql", open_backend(PG, schema=schema).store, rounds, rows, opens)
        finally:
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    except Exception as exc:
        rows.append(f"{'postgresql':<12} skipped: {type(exc).__name__}: {exc}"[:100])
    print(f"CPU per tool round, mean of {WINDOW} rounds (goal: ≤ 1.2x)")
    print(f"{'store':<12} {'near round 1':>14} {f'near round {rounds}':>18} {'ratio':>9}")
    print("-" * 56)
    print("\n".join(rows))
    print()
    print("CPU to open the session, best of 5 (goal: ≤ 30 ms from the snapshot)")
    print(f"{'store':<12} {'entries':>8} {'snapshot, ms':>16} {'full replay, ms':>18} {'saved':>8}")
    print("-" * 66)
    print("\n".join(opens))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5000)
    asyncio.run(main(parser.parse_args().rounds))
