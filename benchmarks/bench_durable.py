"""What a durable store adds per tool round, as a ratio to the memory store.

    python benchmarks/bench_durable.py [--quick] [--no-fsync-wait]
    python benchmarks/bench_durable.py --instructions   (needs valgrind)

Two tables, on the memory, SQLite and PostgreSQL stores:

- per run: the same scripted runs (3 tool rounds and a final round each); CPU
  of this process and wall time per round, statements and round trips per round;
- steady state: one long session, one run of tool rounds; CPU per tool round
  in windows of 100 rounds (the first window, warming up, left out; median,
  min-max), statements and round trips per round over the measured windows.
  In the same command, the bare baseline: CPU of one `SELECT 1` on an open
  psycopg `AsyncConnection` in an asyncio loop (as the backend runs). It
  prints the PostgreSQL round against "memory round + 3 bare round trips",
  and SQLite against 2.5x memory;
- the replay: the statements a steady PostgreSQL round sends (recorded in a
  run of their own, outside the measured windows), sent again with the same
  parameters on a bare psycopg `AsyncConnection` in this loop, into a copy
  of the session: what those statements cost any client, so "PostgreSQL
  round - (memory round + replay)" is taskloom's own cost of going durable;
- SQLite's floor: the two entry appends a steady SQLite round runs
  (recorded in a run of their own), run again on a bare `sqlite3`
  connection to that file (WAL, `synchronous=NORMAL`, a passive checkpoint
  every 256 statements, as the backend has it) where a memory round appends:
  what a round's two commits cost SQLite itself, so "SQLite round / that
  floor" is taskloom's own layer; and beside it the least two commits a
  round can make (BEGIN IMMEDIATE, one 200-byte row into an INTEGER PRIMARY
  KEY table, COMMIT), where a round makes its two: what any schema costs.

`--instructions` counts instructions instead of timing (cachegrind, user
space, exact whatever else the machine runs): a steady tool round on each
store, a bare `SELECT 1` and a bare durable commit, each the difference of
two processes doing different numbers of them, and the PostgreSQL and SQLite
rounds against the same yardsticks in instructions. It also prints, timed,
the voluntary context switches per round: where a process blocks for a
commit and wakes with cold caches, CPU time per instruction rises, and that
is where the timed and the counted ratios part.

`--no-fsync-wait` runs everything with `synchronous_commit=off` (through
`PGOPTIONS`), so commits do not wait for the disk: the CPU a process spends
waking after each commit's wait shows as the difference between the two.

Round trips are waits for the server (see `_statements.py`); "(empty)" is the
pool's connection check, counted apart. PostgreSQL rows are skipped (with the
reason) when the server is unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import os
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from taskloom import Agent, RunOptions, Runtime, ToolEffect, Usage, tool
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply

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


async def per_round(store: object, runs: int) -> tuple[float, float, float, float, float]:
    """(CPU µs, wall µs, statements, round trips, checks) per round over `runs` runs."""
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
            statements.round_trips / rounds,
            statements.checks / rounds,
        )


WINDOW = 100
"""Rounds per measured window."""


def _long_agent(rounds: int, stamps: list[float], at: Callable[[int], None]) -> Agent:
    usage = Usage(10, 5)

    def answer(request: ModelRequest) -> Any:
        stamps.append(time.process_time())
        n = len(stamps)
        at(n)
        if n > rounds:
            return reply("done", usage=usage)
        return reply(tool_calls=[("add", {"a": n, "b": 1}, f"c{n}")], usage=usage)

    return Agent("long", FunctionModel(answer), tools=[add])


class Steady:
    """One long session's tool rounds: CPU µs per round by window, and what
    the measured windows sent per round."""

    def __init__(self, windows: list[float], per_round: tuple[float, float, float]) -> None:
        self.windows = windows
        self.median = statistics.median(windows)
        self.statements, self.trips, self.checks = per_round

    @property
    def spread(self) -> str:
        return f"{min(self.windows):.0f}-{max(self.windows):.0f}"


async def steady(store: object, windows: int) -> Steady:
    """CPU per tool round in one long session, `windows` windows of `WINDOW`
    rounds after one of warming up: the model is asked once per round, so the
    CPU stamps it takes at each request bound each window exactly."""
    rounds = (windows + 1) * WINDOW
    stamps: list[float] = []
    counting = count_statements()
    found: list[Any] = []

    def at(n: int) -> None:
        # Counted from the first measured window's first request to the last's end.
        if n == WINDOW + 1:
            found.append(counting.__enter__())
        elif n == rounds + 1:
            counting.__exit__(None, None, None)

    async with Runtime(store=store) as runtime:  # type: ignore[arg-type]
        session = await runtime.create_session(_long_agent(rounds, stamps, at))
        gc.collect()
        await session.run("go", options=RunOptions(max_rounds=None))
    cpu = [(stamps[i + WINDOW] - stamps[i]) / WINDOW * 1e6 for i in range(WINDOW, rounds, WINDOW)]
    measured = rounds - WINDOW
    sent = found[0]
    return Steady(cpu, (sent.total / measured, sent.round_trips / measured, sent.checks / measured))


async def bare_round_trip(url: str, n: int) -> float:
    """CPU µs of one `SELECT 1` on an open psycopg `AsyncConnection` (autocommit),
    in this asyncio loop: the floor a PostgreSQL round trip costs here."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(200):
            await conn.execute("SELECT 1")
        gc.collect()
        cpu = time.process_time()
        for _ in range(n):
            await conn.execute("SELECT 1")
        return (time.process_time() - cpu) / n * 1e6


def _switches() -> tuple[float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw


async def bare_commits(url: str, n: int) -> tuple[float, float, float]:
    """On an open psycopg `AsyncConnection` (autocommit), in this asyncio
    loop: CPU µs and voluntary context switches per `SELECT 1`, and CPU µs
    per durable commit (a one-row INSERT of a round-sized text that waits for
    the WAL flush, as each of a round's two commits does). A `SELECT 1`
    answers before the client gets to wait for it; a commit that waits for
    the disk blocks the process and wakes it with cold caches, which the
    client pays in CPU whatever sends the statement."""
    import psycopg

    table = f"bench_commit_{uuid.uuid4().hex[:8]}"
    body = "x" * 600
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"CREATE TEMP TABLE {table} (id bigserial PRIMARY KEY, body text)")

        async def each(query: str, params: tuple[str, ...] | None) -> tuple[float, float]:
            for _ in range(100):
                await conn.execute(query, params)
            gc.collect()
            cpu, switches = _switches()
            for _ in range(n):
                await conn.execute(query, params)
            after, switched = _switches()
            return (after - cpu) / n * 1e6, (switched - switches) / n

        select, select_switches = await each("SELECT 1", None)
        commit, _ = await each(f"INSERT INTO {table} (body) VALUES (%s)", (body,))
    return select, select_switches, commit


@contextlib.contextmanager
def recorded_statements() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The (query, parameters) of every fenced append psycopg's
    `AsyncConnection.execute` (or taskloom's lean single-statement path,
    which passes it by) is given meanwhile, in order."""
    import psycopg

    from taskloom.backends.postgres import _lean

    found: list[tuple[str, dict[str, Any]]] = []
    execute = psycopg.AsyncConnection.execute
    statement = _lean.statement

    def record(query: Any, params: Any) -> None:
        if isinstance(query, str) and query.split()[:1] == ["WITH"] and isinstance(params, dict):
            found.append((query, dict(params)))

    async def recording(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        record(query, params)
        return await execute(self, query, params, **kwargs)

    async def lean(conn: Any, query: Any, params: Any, result: int) -> Any:
        # (A fenced append always has its parameters, so the lean path takes
        # it rather than handing it to the cursor, which would record it again.)
        record(query, params)
        return await statement(conn, query, params, result)

    psycopg.AsyncConnection.execute = recording  # type: ignore[method-assign]
    _lean.statement = lean  # type: ignore[assignment]
    try:
        yield found
    finally:
        psycopg.AsyncConnection.execute = execute  # type: ignore[method-assign]
        _lean.statement = statement


async def replay(url: str, schema: str, statements: list[tuple[str, dict[str, Any]]]) -> float:
    """CPU µs per round of sending `statements` (a steady round's, two a
    round) again on a bare autocommit `AsyncConnection`, into a fresh copy of
    their session (its lease kept as it was), best of three passes."""
    import psycopg

    sessions = f'"{schema}".taskloom_sessions'
    entries = f'"{schema}".taskloom_entries'
    source = statements[0][1]["sid"]
    rounds = len(statements) / 2
    best = float("inf")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(3):
            copy = f"replay-{uuid.uuid4().hex[:10]}"
            await conn.execute(
                f"INSERT INTO {sessions} (id, agent, parent_id, created_at, metadata)"
                f" SELECT %s, agent, parent_id, created_at, metadata FROM {sessions}"
                " WHERE id = %s",
                (copy, source),
            )
            gc.collect()
            cpu = time.process_time()
            for query, params in statements:
                params["sid"] = copy
                await (await conn.execute(query, params)).fetchone()
            best = min(best, (time.process_time() - cpu) / rounds * 1e6)
            cursor = await conn.execute(
                f"SELECT count(*) FROM {entries} WHERE session_id = %s", (copy,)
            )
            (placed,) = await cursor.fetchone() or (0,)
            # A statement whose fence no longer held would insert nothing and cost less.
            assert placed == len(statements), f"replay placed {placed} of {len(statements)}"
    return best


async def interleaved(
    url: str,
    schema: str,
    statements: list[tuple[str, dict[str, Any]]],
    windows: int,
    select_1: bool = False,
) -> Steady:
    """Steady rounds on the memory store that also send, at each fenced
    append, the next of `statements` on a bare autocommit `AsyncConnection`
    (into a copy of their session): the memory round plus exactly the
    statements a PostgreSQL round sends, where it sends them, with no
    database layer of taskloom's between. With `select_1`, a `SELECT 1`
    each time instead: the bare round trip, where a round would send it."""
    import itertools

    import psycopg

    from taskloom.backends import MemoryBackend

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    copy = f"interleaved-{uuid.uuid4().hex[:10]}"
    sessions = f'"{schema}".taskloom_sessions'
    await conn.execute(
        f"INSERT INTO {sessions} (id, agent, parent_id, created_at, metadata)"
        f" SELECT %s, agent, parent_id, created_at, metadata FROM {sessions} WHERE id = %s",
        (copy, statements[0][1]["sid"]),
    )
    upcoming = itertools.cycle(statements)
    memory = MemoryBackend().store

    class Replaying(type(memory)):  # type: ignore[misc]
        async def append(self, session_id: str, entry: Any, *, fence: Any = None) -> int:
            position: int = await super().append(session_id, entry, fence=fence)
            if fence is not None and select_1:
                await conn.execute("SELECT 1")
            elif fence is not None:
                query, params = next(upcoming)
                params["sid"] = copy
                await (await conn.execute(query, params)).fetchone()
            return position

    try:
        return await steady(Replaying(), windows)
    finally:
        await conn.close()


async def recorded_round(store: object) -> list[tuple[str, dict[str, Any]]]:
    """The statements of `WINDOW` steady rounds, recorded after `WINDOW` rounds of warming up."""
    with recorded_statements() as found:
        await steady(store, 1)
    return found[-2 * WINDOW :]


class _Recorder:
    """A `sqlite3.Connection` that notes each statement it is asked to run."""

    def __init__(self, conn: sqlite3.Connection, found: list[tuple[str, Any]]) -> None:
        self._conn = conn
        self._found = found

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._found.append((sql, params))
        return self._conn.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def recorded_sqlite_round(path: str) -> list[tuple[str, Any]]:
    """The entry appends (SQL, parameters) of `WINDOW` steady SQLite rounds,
    recorded after `WINDOW` rounds of warming up, in the file at `path`."""
    from taskloom.backends.sqlite import SQLiteDatabase

    found: list[tuple[str, Any]] = []
    run = SQLiteDatabase.run

    async def recording(self: Any, fn: Any, **kwargs: Any) -> Any:
        return await run(self, lambda conn: fn(_Recorder(conn, found)), **kwargs)

    SQLiteDatabase.run = recording  # type: ignore[method-assign]
    try:
        await steady(f"sqlite:///{path}", 1)
    finally:
        SQLiteDatabase.run = run  # type: ignore[method-assign]
    appends = [(q, p) for q, p in found if q.split()[:3] == ["INSERT", "INTO", "taskloom_entries"]]
    return appends[-2 * WINDOW :]


async def sqlite_floor(path: str, statements: list[tuple[str, Any]], windows: int) -> Steady:
    """Steady rounds on the memory store that also run, at each fenced
    append, the next of `statements` (a steady SQLite round's) on a bare
    `sqlite3` connection to `path` (the file they were recorded in, its
    session and lease as they were), set up as the backend sets up its own,
    with a passive checkpoint every 256 statements as the backend does: the
    memory round plus what SQLite itself costs for a round's two commits,
    with no layer of taskloom's between. A statement that names the position
    its entry is expected at (the eighth parameter) is given the next one."""
    from taskloom.backends import MemoryBackend

    conn = sqlite3.connect(path, isolation_level=None, cached_statements=256)
    for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON"):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    session = statements[0][1][0]
    (last,) = conn.execute(
        "SELECT MAX(position) FROM taskloom_entries WHERE session_id = ?", (session,)
    ).fetchone()
    upcoming = itertools.cycle(statements)
    memory = MemoryBackend().store
    sent = [0, last]

    class Bare(type(memory)):  # type: ignore[misc]
        async def append(self, session_id: str, entry: Any, *, fence: Any = None) -> int:
            position: int = await super().append(session_id, entry, fence=fence)
            if fence is not None:
                query, params = next(upcoming)
                sent[1] += 1
                if len(params) == 8:
                    params = (*params[:7], sent[1])
                conn.execute(query, params).fetchone()
                sent[0] += 1
                if sent[0] % 256 == 0:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            return position

    try:
        found = await steady(Bare(), windows)
        (placed,) = conn.execute(
            "SELECT MAX(position) FROM taskloom_entries WHERE session_id = ?", (session,)
        ).fetchone()
        # A statement refused (a fence or position that no longer held) would cost less.
        assert placed == sent[1], f"the floor placed {placed - last} of {sent[0]}"
        return found
    finally:
        conn.close()


async def minimal_floor(path: str, windows: int) -> Steady:
    """Steady rounds on the memory store that also make, at each fenced
    append, a minimal durable commit on a bare `sqlite3` connection to a
    fresh file at `path` (set up as the backend sets up its own: WAL,
    `synchronous=NORMAL`, a passive checkpoint every 256 commits): BEGIN
    IMMEDIATE, one 200-byte row into an INTEGER PRIMARY KEY table, COMMIT.
    The memory round plus the least two commits a round can make, whatever
    their statements and schema."""
    from taskloom.backends import MemoryBackend

    conn = sqlite3.connect(path, isolation_level=None, cached_statements=256)
    for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "wal_autocheckpoint = 0"):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute("CREATE TABLE minimal (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    body = "x" * 200
    memory = MemoryBackend().store
    sent = [0]

    class Minimal(type(memory)):  # type: ignore[misc]
        async def append(self, session_id: str, entry: Any, *, fence: Any = None) -> int:
            position: int = await super().append(session_id, entry, fence=fence)
            if fence is not None:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO minimal (body) VALUES (?)", (body,))
                conn.execute("COMMIT")
                sent[0] += 1
                if sent[0] % 256 == 0:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            return position

    try:
        return await steady(Minimal(), windows)
    finally:
        conn.close()


def _trips(trips: float, checks: float) -> str:
    return f"{trips:.1f} ({trips - checks:.1f})"


COUNTED = {"round": (150, 450), "select1": (300, 1500), "commit": (300, 1500)}
"""Units each cachegrind process does: a fewer and a more, per kind."""


async def _count_child(kind: str, store: str, n: int) -> None:
    """The work an `--instructions` process measures: `n` steady tool rounds on
    `store`, or `n` bare `SELECT 1`s / durable commits on PostgreSQL."""
    import taskloom.loop._run as run_module

    # Under valgrind a round takes ~50x longer, so the loop's 50 ms window of
    # a fresh boundary would lapse and add log reads a normal run never makes.
    run_module.FRESH_BOUNDARY = 5.0
    if kind == "round":
        async with Runtime(store=_open_store(store)) as runtime:  # type: ignore[arg-type]
            session = await runtime.create_session(_long_agent(n, [], lambda _: None))
            await session.run("go", options=RunOptions(max_rounds=None))
        return
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as conn:
        if kind == "select1":
            query, params = "SELECT 1", None
        else:
            table = f"bench_commit_{uuid.uuid4().hex[:8]}"
            await conn.execute(f"CREATE TEMP TABLE {table} (id bigserial PRIMARY KEY, body text)")
            query, params = f"INSERT INTO {table} (body) VALUES (%s)", ("x" * 600,)
        for _ in range(n):
            await conn.execute(query, params)


def _open_store(url: str) -> object:
    if url.startswith("postgresql:"):
        from taskloom.backends import PostgresBackend

        schema = os.environ["BENCH_SCHEMA"]
        return PostgresBackend(url, schema=schema).store
    return url


def _instructions(kind: str, store: str) -> float:
    """Instructions (user space) per unit of `kind` on `store`: cachegrind of a
    process doing many less one doing few, divided by the difference."""
    import subprocess

    few, many = COUNTED[kind]
    totals = []
    for n in (few, many):
        out = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                "--cachegrind-out-file=/dev/null",
                sys.executable,
                __file__,
                "--count",
                kind,
                store,
                str(n),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
        )
        refs = [line for line in out.stderr.splitlines() if "I" in line and "refs:" in line]
        totals.append(int(refs[-1].split()[-1].replace(",", "")))
    return (totals[1] - totals[0]) / (many - few)


def _switches_per_round(store: object, rounds: int = 600) -> float:
    """Voluntary context switches of this process per steady tool round: how
    often a round blocks waiting for its store."""
    marks: list[int] = []

    def at(n: int) -> None:
        if n in (100, rounds):
            marks.append(resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw)

    async def go() -> None:
        async with Runtime(store=store) as runtime:  # type: ignore[arg-type]
            session = await runtime.create_session(_long_agent(rounds, [], at))
            await session.run("go", options=RunOptions(max_rounds=None))

    asyncio.run(go())
    return (marks[1] - marks[0]) / (rounds - 100)


def instructions() -> None:
    """The `--instructions` table."""
    import shutil

    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on PATH")
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    os.environ["BENCH_SCHEMA"] = schema
    rows: dict[str, float] = {}
    switches: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows["memory"] = _instructions("round", "memory://")
        switches["memory"] = _switches_per_round("memory://")
        rows["sqlite"] = _instructions("round", f"sqlite:///{tmp}/counted.db")
        switches["sqlite"] = _switches_per_round(f"sqlite:///{tmp}/switches.db")
    try:
        with psycopg.connect(PG, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.OperationalError as exc:
        print(f"PostgreSQL skipped: {exc}")
    else:
        try:
            rows["postgresql"] = _instructions("round", PG)
            switches["postgresql"] = _switches_per_round(_open_store(PG))
            rows["SELECT 1"] = _instructions("select1", PG)
            rows["durable commit"] = _instructions("commit", PG)
        finally:
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    memory = rows["memory"]
    print("Instructions (user space, cachegrind) per steady tool round, and per bare statement:")
    print(f"{'':<16} {'instructions':>13}  {'ratio to memory':>15}  voluntary switches / round")
    print("-" * 80)
    for name, count in rows.items():
        ratio = f"{count / memory:.2f}x" if name in switches else ""
        blocked = f"{switches[name]:.2f}" if name in switches else ""
        print(f"{name:<16} {count:>13,.0f}  {ratio:>15}  {blocked}")
    print()
    if "sqlite" in rows:
        sqlite = rows["sqlite"]
        print(
            f"SQLite round vs 2.5 x memory in instructions: {sqlite / memory:.2f}x memory,"
            f" {'met' if sqlite <= 2.5 * memory else 'NOT met'}"
        )
    if "postgresql" in rows:
        pg, select = rows["postgresql"], rows["SELECT 1"]
        floor = memory + 3 * select
        print(
            f"PostgreSQL round {pg:,.0f} vs memory + 3 bare round trips {floor:,.0f}"
            f" in instructions: {pg / floor:.2f}x, {'met' if pg <= floor else 'NOT met'}"
            f" (taskloom's own above memory: {(pg - memory) / select:.2f} SELECT 1s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-fsync-wait", action="store_true")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--count", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        kind, store, n = args.count
        asyncio.run(_count_child(kind, store, int(n)))
        return
    if args.instructions:
        instructions()
        return
    quick = args.quick
    if args.no_fsync_wait:
        os.environ["PGOPTIONS"] = (
            os.environ.get("PGOPTIONS", "") + " -c synchronous_commit=off"
        ).strip()
    runs, windows = (50, 4) if quick else (300, 10)
    rows: list[tuple[str, ...]] = []
    long: list[tuple[str, Steady | str]] = []
    memory = asyncio.run(per_round("memory://", runs * 4))
    rows.append(("memory", f"{memory[0]:.0f}", f"{memory[1]:.0f}", "0", "-", "1.00x / 1.00x"))
    long.append(("memory", asyncio.run(steady("memory://", windows))))
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = asyncio.run(per_round(f"sqlite:///{tmp}/bench.db", runs))
        long.append(("sqlite", asyncio.run(steady(f"sqlite:///{tmp}/long.db", windows))))
        recorded = asyncio.run(recorded_sqlite_round(f"{tmp}/floor.db"))
        sqlite_bare = asyncio.run(sqlite_floor(f"{tmp}/floor.db", recorded, windows))
        sqlite_minimal = asyncio.run(minimal_floor(f"{tmp}/minimal.db", windows))
    rows.append(
        (
            "sqlite",
            f"{sqlite[0]:.0f}",
            f"{sqlite[1]:.0f}",
            f"{sqlite[2]:.1f}",
            "-",
            f"{sqlite[0] / memory[0]:.1f}x / {sqlite[1] / memory[1]:.1f}x",
        )
    )
    bare: float | None = None
    replayed: float | None = None
    floor_round: Steady | None = None
    select_round: Steady | None = None
    commits: tuple[float, float, float] | None = None
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
                    _trips(pg[3], pg[4]),
                    f"{pg[0] / memory[0]:.1f}x / {pg[1] / memory[1]:.1f}x",
                )
            )
            long.append(
                (
                    "postgresql",
                    asyncio.run(steady(PostgresBackend(PG, schema=schema).store, windows)),
                )
            )
            bare = asyncio.run(bare_round_trip(PG, 2000 if quick else 10000))
            commits = asyncio.run(bare_commits(PG, 500 if quick else 2000))
            statements = asyncio.run(recorded_round(PostgresBackend(PG, schema=schema).store))
            replayed = asyncio.run(replay(PG, schema, statements))
            floor_round = asyncio.run(interleaved(PG, schema, statements, windows))
            select_round = asyncio.run(interleaved(PG, schema, statements, windows, True))
        finally:
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    except Exception as exc:
        rows.append(("postgresql", "-", "-", "-", "-", f"skipped: {type(exc).__name__}"))
        long.append(("postgresql", f"skipped: {type(exc).__name__}: {exc}"))
    print("Per run (3 tool rounds and a final round each):")
    print(
        f"{'store':<12} {'CPU µs/round':>13} {'wall µs/round':>14} {'statements/round':>17}"
        f" {'round trips/round':>18}  ratio to memory (CPU / wall)"
    )
    print("-" * 100)
    for name, cpu, wall, statements, trips, ratio in rows:
        print(f"{name:<12} {cpu:>13} {wall:>14} {statements:>17} {trips:>18}  {ratio}")
    print()
    print(f"Steady state (one long session, tool rounds, {windows} windows of {WINDOW} rounds):")
    print(
        f"{'store':<12} {'CPU µs/round':>13} {'min-max':>11} {'statements/round':>17}"
        f" {'round trips/round':>18}  ratio to memory"
    )
    print("-" * 100)
    base = long[0][1]
    assert isinstance(base, Steady)
    for name, found in long:
        if isinstance(found, str):
            print(f"{name:<12} {found}")
            continue
        trips = "-" if name != "postgresql" else _trips(found.trips, found.checks)
        print(
            f"{name:<12} {found.median:>13.0f} {found.spread:>11} {found.statements:>17.1f}"
            f" {trips:>18}  {found.median / base.median:.2f}x"
        )
    print('round trips: all (without the pool\'s connection checks, "(empty)")')
    print()
    for name, found in long:
        if name == "sqlite" and isinstance(found, Steady):
            verdict = "met" if found.median <= 2.5 * base.median else "NOT met"
            print(
                f"SQLite round {found.median:.0f} µs vs 2.5 x memory {2.5 * base.median:.0f} µs:"
                f" {found.median / base.median:.2f}x, {verdict}"
            )
            print(
                f"memory round + the round's own two statements on a bare sqlite3 connection"
                f" where a round sends them: {sqlite_bare.median:.0f} µs ({sqlite_bare.spread}),"
                f" {sqlite_bare.median / base.median:.2f}x memory; SQLite round vs it:"
                f" {found.median / sqlite_bare.median:.2f}x"
            )
            print(
                f"memory round + two minimal commits (BEGIN IMMEDIATE, one 200-byte row,"
                f" COMMIT) on a bare sqlite3 connection where a round sends its statements:"
                f" {sqlite_minimal.median:.0f} µs ({sqlite_minimal.spread}),"
                f" {sqlite_minimal.median / base.median:.2f}x memory; SQLite round vs it:"
                f" {found.median / sqlite_minimal.median:.2f}x"
            )
        if name == "postgresql" and isinstance(found, Steady) and bare is not None:
            floor = base.median + 3 * bare
            verdict = "met" if found.median <= floor else "NOT met"
            print(
                f"bare round trip (SELECT 1, psycopg AsyncConnection): {bare:.0f} µs CPU;"
                f" PostgreSQL round {found.median:.0f} µs vs memory + 3 bare"
                f" {floor:.0f} µs: {found.median / floor:.2f}x, {verdict}"
            )
        if name == "postgresql" and isinstance(found, Steady) and commits is not None:
            select, switches, commit = commits
            floor = base.median + 2 * commit
            print(
                f"bare durable commit (one-row INSERT waiting for the WAL flush): {commit:.0f} µs"
                f" CPU, against {select:.0f} µs for SELECT 1 ({switches:.2f} voluntary context"
                f" switches a SELECT 1); memory + 2 durable commits {floor:.0f} µs, PostgreSQL"
                f" round vs it: {found.median / floor:.2f}x"
            )
        if name == "postgresql" and isinstance(found, Steady) and replayed is not None:
            floor = base.median + replayed
            print(
                f"the round's own statements on a bare connection: {replayed:.0f} µs CPU a round"
                f" ({replayed / 2:.0f} µs each); PostgreSQL round vs memory + those"
                f" {floor:.0f} µs: {found.median / floor:.2f}x (taskloom's own cost of"
                f" going durable: {found.median - floor:.0f} µs a round)"
            )
        if name == "postgresql" and isinstance(found, Steady) and floor_round is not None:
            print(
                f"memory round + those statements where a round sends them (bare connection):"
                f" {floor_round.median:.0f} µs ({floor_round.spread}); PostgreSQL round vs it:"
                f" {found.median / floor_round.median:.2f}x"
            )
        if name == "postgresql" and isinstance(found, Steady) and select_round is not None:
            print(
                f"memory round + 2 x SELECT 1 where a round sends its statements:"
                f" {select_round.median:.0f} µs ({select_round.spread}), that is"
                f" {(select_round.median - base.median) / 2:.0f} µs per round trip"
                f" where the bare loop's costs {bare or 0:.0f} µs"
            )


if __name__ == "__main__":
    main()
