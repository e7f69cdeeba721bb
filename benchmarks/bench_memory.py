"""Long-term memory (`Backend.memory`) operations per second, per backend.

On memory, SQLite and PostgreSQL, with a corpus of `--items` items (texts
and JSON objects of 8 to 40 words, in 20 namespaces `("user", "u0")` ...
`("user", "u19")`), one writer, warm (the corpus written, then each
operation run `WARMUP` times before it is timed):

- get: an existing item by namespace and key;
- put: a blind overwrite of an existing item (an upsert);
- put if_version: the same, compare-and-set on the version last written;
- list: the first 100 items of one namespace (`--items` / 20 of them);
- search: full-text, two words, the 10 best under `("user",)` (every item).

Each cell runs for `--seconds` and prints operations per second (wall) and
CPU per operation (this process: the client's share; a PostgreSQL server's
work is on its own process). `--quick` is a smoke run: 300 items, 0.3 s a
cell.

    python benchmarks/bench_memory.py [--quick] [--items 2000] [--seconds 1] [--postgres URL]

The output is a list of sections (`SECTIONS`): each an async function of the
parsed arguments returning a `Table`. A new measurement (what memory blocks
add to a round's CPU, as a ratio to a round without memory) is a new
function appended to `SECTIONS`.

PostgreSQL is skipped (and says why) when the server does not answer; its
tables live in a throwaway schema dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskloom.backends import Memories, MemoryBackend, PostgresBackend, SQLiteBackend

NAMESPACES = 20
WARMUP = 50
LIST_PAGE = 100

_WORDS = [
    "coffee",
    "tea",
    "flight",
    "hotel",
    "train",
    "budget",
    "meeting",
    "invoice",
    "deadline",
    "oslo",
    "tromsø",
    "berlin",
    "prefers",
    "avoids",
    "morning",
    "evening",
    "window",
    "aisle",
    "vegetarian",
    "allergy",
    "peanuts",
    "quiet",
    "room",
    "report",
    "weekly",
    "manager",
    "team",
    "project",
    "launch",
    "review",
    "draft",
    "contract",
    "supplier",
    "payment",
    "birthday",
    "reminder",
    "gym",
    "running",
    "swimming",
    "book",
    "film",
    "music",
    "jazz",
    "piano",
    "garden",
]


@dataclass
class Table:
    """A section's output: a title, a note under it, column headers and rows of cells."""

    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""

    def print(self) -> None:
        """Print the table, columns padded to their widest cell."""
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) for i, h in enumerate(self.headers)]
        print(f"\n{self.title}")
        if self.note:
            print(self.note)
        for cells in (self.headers, *self.rows):
            print(
                "  ".join(
                    c.rjust(w) if i else c.ljust(w)
                    for i, (c, w) in enumerate(zip(cells, widths, strict=True))
                )
            )


@dataclass(frozen=True)
class Corpus:
    """The items every backend is given: `(namespace, key, value)`."""

    items: list[tuple[tuple[str, ...], str, Any]]

    @classmethod
    def make(cls, count: int, seed: int = 7) -> Corpus:
        """`count` items, the same for a given `seed`; every third a JSON object."""
        rng = random.Random(seed)
        items: list[tuple[tuple[str, ...], str, Any]] = []
        for i in range(count):
            text = " ".join(rng.choices(_WORDS, k=rng.randint(8, 40)))
            value: Any = {"fact": text, "source": "chat", "turn": i} if i % 3 == 0 else text
            items.append((("user", f"u{i % NAMESPACES}"), f"fact-{i:06}", value))
        return cls(items)


async def _timed(seconds: float, step: Callable[[int], Awaitable[object]]) -> tuple[float, float]:
    """(operations per second, CPU seconds per operation) of `step(i)` run for `seconds`."""
    for i in range(WARMUP):
        await step(i)
    count = 0
    wall, cpu = time.perf_counter(), time.process_time()
    deadline = wall + seconds
    while time.perf_counter() < deadline:
        await step(count)
        count += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return count / wall, cpu / count


OPERATIONS = ("get", "put", "put if_version", f"list {LIST_PAGE}", "search")
"""The operations timed, in the order `_steps` gives them."""


def _steps(memory: Memories, corpus: Corpus) -> list[Callable[[int], Awaitable[object]]]:
    """Each of `OPERATIONS`, as a step of its own index."""
    rng = random.Random(11)
    picks = [rng.randrange(len(corpus.items)) for _ in range(4096)]
    versions: dict[int, int] = {}

    def item(i: int) -> tuple[tuple[str, ...], str, Any]:
        return corpus.items[picks[i % len(picks)]]

    async def get(i: int) -> object:
        namespace, key, _ = item(i)
        return await memory.get(namespace, key)

    async def put(i: int) -> object:
        return await memory.put(*item(i))

    async def put_if_version(i: int) -> object:
        at = picks[i % len(picks)]
        namespace, key, value = corpus.items[at]
        if at not in versions:
            found = await memory.get(namespace, key)
            versions[at] = found.version if found else 0
        written = await memory.put(namespace, key, value, if_version=versions[at])
        versions[at] = written.version
        return written

    async def list_page(i: int) -> object:
        return await memory.list(("user", f"u{i % NAMESPACES}"), limit=LIST_PAGE)

    async def search(i: int) -> object:
        query = f"{_WORDS[i % len(_WORDS)]} {_WORDS[(i * 7 + 3) % len(_WORDS)]}"
        return await memory.search(("user",), query, limit=10)

    return [get, put, put_if_version, list_page, search]


async def _fill(memory: Memories, corpus: Corpus) -> float:
    """Write the corpus; seconds it took."""
    start = time.perf_counter()
    for namespace, key, value in corpus.items:
        await memory.put(namespace, key, value)
    return time.perf_counter() - start


async def _row(name: str, memory: Memories, corpus: Corpus, seconds: float) -> list[str]:
    filled = await _fill(memory, corpus)
    cells = [name, f"{len(corpus.items) / filled:,.0f}"]
    for step in _steps(memory, corpus):
        rate, cpu = await _timed(seconds, step)
        cells.append(f"{rate:,.0f} / {cpu * 1e6:,.0f}")
    return cells


def _postgres_problem(url: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def memory_operations(args: argparse.Namespace) -> Table:
    """Operations per second and CPU per operation of each `Memories` call, per backend."""
    corpus = Corpus.make(args.items)
    table = Table(
        f"memory operations, {args.items:,} items, warm, one writer",
        ["backend", "fill (puts/s)", *OPERATIONS],
        note=f"each cell: operations/s (wall) / µs CPU per operation (this process); "
        f"{args.seconds:g} s a cell",
    )
    memory = MemoryBackend().memory
    assert memory is not None
    table.rows.append(await _row("memory", memory, corpus, args.seconds))
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SQLiteBackend(Path(tmp) / "memory.db")
        try:
            table.rows.append(await _row("sqlite", sqlite.memory, corpus, args.seconds))
        finally:
            await sqlite.close()
    problem = await asyncio.to_thread(_postgres_problem, args.postgres)
    if problem is not None:
        table.note += f"\npostgresql skipped: {problem}"
        return table
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    postgres = PostgresBackend(args.postgres, schema=schema)
    try:
        table.rows.append(await _row("postgresql", postgres.memory, corpus, args.seconds))
    finally:
        await postgres.close()
        await asyncio.to_thread(_drop_schema, args.postgres, schema)
    return table


SECTIONS: list[Callable[[argparse.Namespace], Awaitable[Table]]] = [memory_operations]
"""What the benchmark prints, in order: each an async function of the parsed
arguments returning its `Table`."""


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 items, 0.3 s a cell")
    parser.add_argument("--items", type=int, default=2000, help="items in the corpus")
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of each cell")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    args = parser.parse_args()
    if args.quick:
        args.items, args.seconds = 300, 0.3
    return args


async def main() -> None:
    """Run every section of `SECTIONS` and print its table."""
    args = _arguments()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for section in SECTIONS:
        (await section(args)).print()


if __name__ == "__main__":
    asyncio.run(main())
