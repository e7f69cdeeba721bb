"""What the PostgreSQL backend's database layer costs per statement, against psycopg alone.

One table: CPU per `SELECT 1` sent on an open psycopg `AsyncConnection` in
an asyncio loop (the bare round trip), and per `await db.fetchone("SELECT 1")`
through the backend's `PostgresDatabase` (slot, checkout, bounds, return to
the pool), in alternating blocks in one process, medians of the blocks; the
ratio and the difference are the layer's price. The statements each call
sends are counted too ("(empty)" is a connection check): 1.0 means one
round trip per statement.

    python benchmarks/bench_pg_statement.py [--statements 2000] [--blocks 7] [--postgres URL]
        [--query "SELECT %s::int, %s::text" --params '[1, "x"]']

`--query` and `--params` (a JSON list) send another statement than
`SELECT 1` both ways: one with parameters takes the database's lean path
(libpq under psycopg's cursor), one without goes through the cursor.

CPU is `time.process_time()` (the whole process, loop included); on a
loaded machine compare the two rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

from _statements import count_statements

from taskloom.backends.postgres import PostgresDatabase


async def _cpu_per_call(n: int, call: Callable[[], Awaitable[object]]) -> float:
    """Microseconds of process CPU per `call()`, over `n` calls."""
    start = time.process_time()
    for _ in range(n):
        await call()
    return (time.process_time() - start) / n * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--statements", type=int, default=2000, help="statements per block")
    parser.add_argument("--blocks", type=int, default=7, help="alternating blocks of each")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--query", default="SELECT 1", help="the statement sent both ways")
    parser.add_argument("--params", default="[]", help="its parameters, a JSON list")
    args = parser.parse_args()
    query, params = args.query, tuple(json.loads(args.params))
    import psycopg

    try:
        bare = await psycopg.AsyncConnection.connect(args.postgres, autocommit=True)
    except psycopg.OperationalError as exc:
        print(f"PostgreSQL skipped: {' '.join(str(exc).split())}")
        return
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    db = PostgresDatabase(args.postgres, schema=schema)

    async def through_psycopg() -> object:
        return await (await bare.execute(query, params)).fetchone()

    async def through_database() -> object:
        return await db.fetchone(query, params)

    try:
        await through_database()  # opens the pool and creates the schema
        await _cpu_per_call(200, through_psycopg)  # warm both paths
        await _cpu_per_call(200, through_database)
        figures: dict[str, list[float]] = {"bare": [], "database": []}
        for _ in range(args.blocks):
            figures["bare"].append(await _cpu_per_call(args.statements, through_psycopg))
            figures["database"].append(await _cpu_per_call(args.statements, through_database))
        with count_statements() as counted:
            for _ in range(100):
                await through_database()
    finally:
        await db.close()
        await bare.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await bare.close()
    bare_us = statistics.median(figures["bare"])
    db_us = statistics.median(figures["database"])
    load = os.getloadavg()[0]
    print(
        f"CPU per {query!r} {list(params)}, median of {args.blocks} blocks of {args.statements}; "
        f"load {load:.2f}; statements per call counted over 100 calls"
    )
    rows = [
        ("bare round trip (psycopg AsyncConnection)", f"{bare_us:7.1f} µs", "1.00×", ""),
        (
            "through the backend's database (db.fetchone)",
            f"{db_us:7.1f} µs",
            f"{db_us / bare_us:.2f}×",
            f"{db_us - bare_us:+.1f} µs; {counted.total / 100:.2f} statements/call "
            f"{dict(counted.by_kind)}",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    for name, cpu, ratio, note in rows:
        print(f"{name.ljust(width)}  {cpu}  {ratio:>6}  {note}")


if __name__ == "__main__":
    asyncio.run(main())
