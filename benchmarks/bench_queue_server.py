"""Where PostgreSQL's CPU per queued child goes, by statement kind.

    python benchmarks/bench_queue_server.py [--children 300] [--workers 2] [--concurrency 8]

The children of `bench_queue.py` (its runtime, its worker processes, one
parent's background children queued by the host), with every statement the
host and the workers send on the lean path or through a psycopg cursor
timed on the server: the on-CPU time of the PostgreSQL backend serving its
connection (`/proc/<backend pid>/schedstat`, nanoseconds), read just before
the statement is sent and just after its answer came. One connection runs
one statement at a time, so each backend's time between the two readings
is that statement's (what a backend does after its answer, before it waits
again, goes to the next statement on that connection). Printed: statements
per child, server µs per statement and per child, and the client's wall
time per statement, by kind; beside them the CPU of every backend serving
the benchmark from /proc/<pid>/stat (clock ticks: coarse). The server must
run on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import bench_queue as bq

_STATS: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
"""Kind -> [statements, server ns, client wall ns]."""


def _kind(query: Any) -> str:
    text = re.sub(r'"bench_[0-9a-f]+"\.', "", query if isinstance(query, str) else str(query))
    words = text.split()
    return " ".join(words[:5]) if words else "(empty)"


def _on_cpu(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except OSError:
        return 0


def _timed(kind: str, pid: int, began: int, wall: int) -> None:
    s = _STATS[kind]
    s[0] += 1
    s[1] += _on_cpu(pid) - began
    s[2] += time.perf_counter_ns() - wall


def _patch() -> None:
    """Time every statement of this process on the server (see the module docstring)."""
    from psycopg import AsyncCursor

    import taskloom.distributed._jobs as jobs
    from taskloom.backends.postgres import _lean

    lean = _lean.statement

    async def statement(conn: Any, query: Any, params: Any, result: int) -> Any:
        pid = conn.info.backend_pid
        began, wall = _on_cpu(pid), time.perf_counter_ns()
        try:
            return await lean(conn, query, params, result)
        finally:
            _timed(_kind(query), pid, began, wall)

    # The job manager bound the lean path's statement as it imported it.
    setattr(_lean, "statement", statement)  # noqa: B010
    setattr(jobs, "one_statement", statement)  # noqa: B010
    execute = AsyncCursor.execute

    async def cursor_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        pid = self.connection.info.backend_pid
        began, wall = _on_cpu(pid), time.perf_counter_ns()
        try:
            return await execute(self, query, params, **kw)
        finally:
            _timed("(cursor) " + _kind(query), pid, began, wall)

    AsyncCursor.execute = cursor_execute  # type: ignore[method-assign]


class _Worker(bq.Worker):
    def __init__(self, url: str, schema: str, concurrency: int) -> None:
        cmd = [sys.executable, __file__, "--serve", schema, "--url", url]
        self.proc = subprocess.Popen(
            [*cmd, "--concurrency", str(concurrency)], stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.cpu = 0.0
        threading.Thread(target=self._read, daemon=True).start()

    def timed(self) -> dict[str, list[int]]:
        """The statements timed since the last call, by kind."""
        self.proc.send_signal(signal.SIGWINCH)
        return dict(json.loads(self.wait_for("SERVER ")))


async def _serve(url: str, schema: str, concurrency: int) -> None:
    _patch()

    def report() -> None:
        print("SERVER " + json.dumps(dict(_STATS)), flush=True)
        _STATS.clear()

    asyncio.get_running_loop().add_signal_handler(signal.SIGWINCH, report)
    await bq.serve(url, schema, concurrency, False)


async def main(url: str, count: int, workers: int, concurrency: int) -> None:
    tag = f"bench_queue_server_{uuid.uuid4().hex[:8]}"
    url = bq.tagged(url, tag)
    _patch()
    with bq.Schema(url) as schema:
        runtime = bq.build(url, schema, fast=False)
        await runtime.queue.app()
        procs = [_Worker(url, schema, concurrency) for _ in range(workers)]
        try:
            for w in procs:
                w.wait_for("READY")
                w.timed()  # from here on
            before: list[dict[int, float] | None] = []
            load = os.getloadavg()[0]
            await bq.children(
                runtime, count, queueing=lambda: before.append(bq.server_cpu(url, tag))
            )
            await bq.wait_done(url, schema, "taskloom.child", count)
            after = bq.server_cpu(url, tag) or {}
            # The host's statements since the sessions were made: its queueing.
            every: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
            for kind, got in _STATS.items():
                if not kind.startswith(("INSERT INTO taskloom_sessions", "(cursor)")):
                    every["host: " + kind] = got
            for w in procs:
                for kind, got in w.timed().items():
                    for i in range(3):
                        every[kind][i] += got[i]
        finally:
            bq.stop(list[bq.Worker](procs))
            await runtime.close()
    base = before[0] or {}
    ticks = sum(t - base.get(pid, 0.0) for pid, t in after.items())
    timed = sum(v[1] for v in every.values())
    print(
        f"{count} children, {workers} workers (x{concurrency} jobs each), load (1 min) {load:.1f}\n"
        f"PostgreSQL CPU / child: {timed / count / 1e6:.2f} ms timed by statement, "
        f"{ticks / count * 1e3:.2f} ms by its backends' clock ticks\n"
    )
    print("| per child | server µs / statement | server µs / child | wall µs / statement | kind |")
    print("|---|---|---|---|---|")
    for kind, (n, ns, wall) in sorted(every.items(), key=lambda kv: -kv[1][1]):
        if ns / count < 5_000:  # under 5 µs a child: start-up
            continue
        print(
            f"| {n / count:.2f} | {ns / max(n, 1) / 1e3:.0f} | {ns / count / 1e3:.0f} "
            f"| {wall / max(n, 1) / 1e3:.0f} | `{kind[:70]}` |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=bq.URL)
    parser.add_argument("--children", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.url, args.serve, args.concurrency))
    else:
        asyncio.run(main(args.url, args.children, args.workers, args.concurrency))
