"""1,000 children in one turn on every store: does each end once, and what it holds.

    python benchmarks/bench_fanout.py [--children N] [--trials K] [--stores memory,sqlite,postgresql]

A parent whose scripted model asks a `SubAgent` tool N times in one turn;
each child is a one-round scripted run. Per store and trial it prints the
wall and CPU time, CPU per child, how many children failed, whether every
child has exactly one terminal entry and the parent exactly one report per
child, the statements the process sent and on PostgreSQL its round trips
(each child is a run of one round; without the pool's connection checks in
brackets: see `_statements.py`), and on PostgreSQL the most
connections the process held at once (sampled from `pg_stat_activity`
every 10 ms by a separate connection) against its pool size. The memory
store's row is the baseline the ratios are taken against.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
import uuid

from taskloom import Agent, RunOptions, Runtime, SubAgent, Usage
from taskloom.entries import SubagentReport, SubagentResult
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply

sys.path.insert(0, os.path.dirname(__file__))
from _statements import count_statements

from taskloom.backends import PostgresBackend

PG = os.environ.get("TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


class ConnectionSampler(threading.Thread):
    """Samples how many connections carry `application_name` until stopped."""

    def __init__(self, app: str) -> None:
        super().__init__(daemon=True)
        self.app = app
        self.peak = 0
        self._done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(PG, autocommit=True) as conn:
            while not self._done.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    (self.app,),
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)
                time.sleep(0.01)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


async def fan_out(store: object, n: int) -> dict[str, object]:
    def child(request: ModelRequest) -> object:
        return reply("done", usage=Usage(5, 1))

    sub = SubAgent("worker", "Works.", FunctionModel(child))
    lead = ScriptedModel(
        [reply(tool_calls=[("worker", {"task": f"t{i}"}) for i in range(n)]), reply("all done")]
    )
    async with Runtime(store=store) as runtime:  # type: ignore[arg-type]
        session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
        cpu, wall = time.process_time(), time.perf_counter()
        with count_statements() as statements:
            result = await session.run("go", options=RunOptions(max_rounds=3))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        failed = sum(1 for r in lead.requests[1].messages[-1].results if r.is_error)
        entries = await session.entries()
        reports: dict[str, int] = {}
        for e in entries:
            if isinstance(e.payload, SubagentReport):
                reports[e.payload.child_session_id] = reports.get(e.payload.child_session_id, 0) + 1
        terminals_ok = 0
        for child_id in reports:
            ends = [e for e in await runtime.store.load(child_id) if e.kind == SubagentResult.KIND]
            terminals_ok += len(ends) == 1
        return {
            "status": result.status.value,
            "wall": wall,
            "cpu": cpu,
            "failed": failed,
            "once": len(reports) == n
            and all(v == 1 for v in reports.values())
            and terminals_ok == n,
            "statements": statements.total,
            "round_trips": statements.round_trips,
            "checks": statements.checks,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--stores", default="memory,sqlite,postgresql")
    args = parser.parse_args()
    rows = []
    base_cpu = None
    for name in args.stores.split(","):
        for trial in range(args.trials):
            peak = pool = None
            with tempfile.TemporaryDirectory() as tmp:
                if name == "memory":
                    store: object = "memory://"
                elif name == "sqlite":
                    store = f"sqlite:///{tmp}/fan.db"
                else:
                    import psycopg

                    schema = f"fan_{uuid.uuid4().hex[:8]}"
                    app = f"taskloom-{schema}"
                    with psycopg.connect(PG, autocommit=True) as conn:
                        conn.execute(f'CREATE SCHEMA "{schema}"')
                    sep = "&" if "?" in PG else "?"
                    store = PostgresBackend(f"{PG}{sep}application_name={app}", schema=schema).store
                    pool = store.database.max_size
                    sampler = ConnectionSampler(app)
                    sampler.start()
                try:
                    out = asyncio.run(fan_out(store, args.children))
                finally:
                    if name == "postgresql":
                        peak = sampler.stop()
                        with psycopg.connect(PG, autocommit=True) as conn:
                            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            per_child = out["cpu"] / args.children * 1e3  # type: ignore[operator]
            if name == "memory" and base_cpu is None:
                base_cpu = per_child
            rows.append(
                (
                    name,
                    trial + 1,
                    out["status"],
                    f"{out['wall']:.2f}",
                    f"{per_child:.2f}",
                    f"{per_child / base_cpu:.1f}x" if base_cpu else "-",
                    out["failed"],
                    "yes" if out["once"] else "NO",
                    f"{out['statements'] / args.children:.1f}",  # type: ignore[operator]
                    "-"
                    if name != "postgresql"
                    else f"{out['round_trips'] / args.children:.1f}"  # type: ignore[operator]
                    f" ({(out['round_trips'] - out['checks']) / args.children:.1f})",  # type: ignore[operator]
                    "-" if peak is None else f"{peak} / {pool}",
                )
            )
            print(*rows[-1], sep="\t", flush=True)
    head = (
        "store",
        "trial",
        "status",
        "wall s",
        "CPU ms/child",
        "vs memory",
        "failed",
        "one terminal+report each",
        "statements/child",
        "round trips/child (without checks)",
        "peak conns / pool",
    )
    print()
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for row in rows:
        print(" | ".join(str(c) for c in row))


if __name__ == "__main__":
    main()
