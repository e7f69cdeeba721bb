"""What a durable store adds per tool round, as a ratio to the memory store.

    python benchmarks/bench_durable.py [--quick]

The same scripted runs (3 tool rounds and a final round each) on the memory,
SQLite and PostgreSQL stores; CPU of this process and wall time per round.
PostgreSQL rows are skipped (with the reason) when the server is unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
import uuid

from taskloom import Agent, Runtime, ToolEffect, Usage, tool
from taskloom.models import ScriptedModel, reply

sys.path.insert(0, os.path.dirname(__file__))
from _statements import count_statements

PG = os.environ.get("TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@tool(effect=ToolEffect.READ_ONLY)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> list[object]:
    u = Usage(10, 5)
    return [reply(tool_calls=[("add", {"a": i, "b": 1})], usage=u) for i in range(3)] + [
        reply("done", usage=u)
    ]


async def per_round(store: object, runs: int) -> tuple[float, float, float]:
    """(CPU µs, wall µs, statements) per round over `runs` runs."""
    async with Runtime(store=store) as runtime:  # type: ignore[arg-type]
        warm = await runtime.create_session(Agent("w", ScriptedModel(script()), tools=[add]))
        await warm.run("warm up")
        agents = [Agent("b", ScriptedModel(script()), tools=[add]) for _ in range(runs)]
        gc.collect()
        cpu, wall = time.process_time(), time.perf_counter()
        with count_statements() as statements:
            for agent in agents:
                session = await runtime.create_session(agent)
                await session.run("go")
        rounds = runs * 4
        return (
            (time.process_time() - cpu) / rounds * 1e6,
            (time.perf_counter() - wall) / rounds * 1e6,
            statements.total / rounds,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    runs = 50 if parser.parse_args().quick else 300
    rows: list[tuple[str, str, str, str, str]] = []
    memory = asyncio.run(per_round("memory://", runs * 4))
    rows.append(("memory", f"{memory[0]:.0f}", f"{memory[1]:.0f}", "0", "1.00x / 1.00x"))
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = asyncio.run(per_round(f"sqlite:///{tmp}/bench.db", runs))
    rows.append(
        (
            "sqlite",
            f"{sqlite[0]:.0f}",
            f"{sqlite[1]:.0f}",
            f"{sqlite[2]:.1f}",
            f"{sqlite[0] / memory[0]:.1f}x / {sqlite[1] / memory[1]:.1f}x",
        )
    )
    try:
        from taskloom.backends import PostgresBackend

        schema = f"bench_{uuid.uuid4().hex[:8]}"
        import psycopg

        with psycopg.connect(PG, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            pg = asyncio.run(per_round(PostgresBackend(PG, schema=schema).store, runs))
            rows.append(
                (
                    "postgresql",
                    f"{pg[0]:.0f}",
                    f"{pg[1]:.0f}",
                    f"{pg[2]:.1f}",
                    f"{pg[0] / memory[0]:.1f}x / {pg[1] / memory[1]:.1f}x",
                )
            )
        finally:
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    except Exception as exc:
        rows.append(("postgresql", "-", "-", "-", f"skipped: {type(exc).__name__}"))
    print(
        f"{'store':<12} {'CPU µs/round':>13} {'wall µs/round':>14} {'statements/round':>17}"
        "  ratio to memory (CPU / wall)"
    )
    print("-" * 90)
    for name, cpu, wall, statements, ratio in rows:
        print(f"{name:<12} {cpu:>13} {wall:>14} {statements:>17}  {ratio}")


if __name__ == "__main__":
    main()
