"""Semantic memory search per backend: a brute-force scan of N items' stored
vectors, against a full-text search of the same items on the same backend.

    python benchmarks/bench_memory_semantic.py [--items 10000] [--dimensions 384]

The embedder is a stand-in (dense vectors from a hash of the text, as many
dimensions as asked): it costs little, so what is measured is the store's
scan, not a model. Rows: the first semantic search (every item embedded then,
in batches, and its vector stored), a later one (every vector read back), and
a full-text search of the same prefix, with the ratio of the later semantic
search to it. PostgreSQL rows need $TASKLOOM_TEST_POSTGRES or the local server.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import struct
import tempfile
import time
import uuid
from collections.abc import Sequence

from taskloom.backends import Backend, open_backend

PG_DSN = os.environ.get("TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
NAMESPACE = ("user", "u1")


class HashedDense:
    """Dense vectors of `dimensions` floats from a hash of each text: cheap and deterministic."""

    name = "hashed-dense"

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        stream = b"".join(
            hashlib.blake2b(f"{i}:{text}".encode()).digest()
            for i in range(-(-self.dimensions * 2 // 64))
        )
        return [
            v / 32768 for v in struct.unpack(f"<{self.dimensions}h", stream[: 2 * self.dimensions])
        ]


async def _timed(call: object, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def measure(label: str, backend: Backend, items: int, dimensions: int) -> None:
    memory = backend.memory
    assert memory is not None
    plain = memory.with_embedder(None)  # type: ignore[attr-defined]
    for n in range(items):
        await plain.put(
            NAMESPACE, f"k{n:06}", f"note {n} about the weekly backup of database {n % 97}"
        )
    searching = memory.with_embedder(HashedDense(dimensions))  # type: ignore[attr-defined]
    started = time.perf_counter()
    await searching.search(("user",), "when is the backup", mode="semantic")
    first = time.perf_counter() - started
    later = await _timed(lambda: searching.search(("user",), "when is the backup", mode="semantic"))
    text = await _timed(lambda: memory.search(("user",), "when is the backup"))
    print(
        f"{label:10} {items:>7,} {first:>10.2f} s {later:>10.3f} s {text:>10.3f} s {later / text:>8.1f}x"
    )
    await backend.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--dimensions", type=int, default=384)
    args = parser.parse_args()
    print(f"{args.dimensions} dimensions; medians of 3 searches after the first")
    print(
        f"{'backend':10} {'items':>7} {'1st semantic':>12} {'semantic':>12} {'full-text':>12} {'ratio':>9}"
    )
    await measure("memory", open_backend("memory://"), args.items, args.dimensions)
    with tempfile.TemporaryDirectory() as folder:
        await measure(
            "sqlite", open_backend(f"sqlite:///{folder}/m.db"), args.items, args.dimensions
        )
    schema = f"bench_semantic_{uuid.uuid4().hex[:8]}"
    try:
        await measure(
            "postgresql", open_backend(PG_DSN, schema=schema), args.items, args.dimensions
        )
    except Exception as exc:  # no server: the other rows stand
        print(f"postgresql skipped: {type(exc).__name__}: {exc}")
    finally:
        import psycopg

        try:
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        except psycopg.Error:
            pass


if __name__ == "__main__":
    asyncio.run(main())
