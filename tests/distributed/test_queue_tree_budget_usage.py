"""A tree budget across processes against misreported usage: 20 background
children on 3 worker processes whose provider reports a negative input
(-1,000,000) or an absurd one (2^70) charge the root's ceiling in
PostgreSQL. Negative usage gives nothing back, so the answers written stay
under the ceiling; 2^70 spends the tree (charged, not a raw OverflowError)
and the children still waiting end `budget_exhausted`."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from queue_support import Workers, host_runtime, worker_env

from pg import PG_DSN, requires_postgres
from taskloom import Budget, RunOptions, RunStatus, Runtime
from taskloom.entries import RunFinishedEntry, SubagentLink

pytestmark = [requires_postgres, pytest.mark.slow]

TRIALS = 2
CHILDREN = 20
CEILING = 20_000  # about half the children's answers fit


@pytest.fixture
async def host(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runtime]:
    monkeypatch.setenv("TLQ_EFFECTS", str(tmp_path / "effects.txt"))
    monkeypatch.setenv("TLQ_FANOUT", str(CHILDREN))
    runtime = host_runtime(PG_DSN, pg_schema)
    yield runtime
    await runtime.close()


@pytest.fixture
def workers(pg_schema: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(worker_env(PG_DSN, pg_schema, tmp_path / "effects.txt"))
    yield started
    started.close()


async def children_ends(host: Runtime, root_id: str) -> dict[str, list[RunFinishedEntry]]:
    links = [
        e.payload.child_session_id
        for e in await host.store.load(root_id)
        if isinstance(e.payload, SubagentLink)
    ]
    assert len(links) == CHILDREN
    deadline = time.monotonic() + 60
    while True:
        ends = {
            c: [
                e.payload
                for e in await host.store.load(c)
                if isinstance(e.payload, RunFinishedEntry)
            ]
            for c in links
        }
        if all(ends.values()) or time.monotonic() > deadline:
            return ends
        await asyncio.sleep(0.1)


async def fan_out(host: Runtime, trial: int) -> tuple[Counter[str], int, int | None]:
    """One root spawning CHILDREN; their end statuses, the output tokens they
    wrote, and what the tree has left once every child ended."""
    root = await host.create_session(host.agent_named("boss"))
    result = await root.run(
        "fan out", options=RunOptions(budget=Budget(tokens=CEILING, max_output_tokens=2000))
    )
    assert result.status in (RunStatus.COMPLETED, RunStatus.BUDGET_EXHAUSTED), result.error
    ends = await children_ends(host, root.id)
    unfinished = [c for c, e in ends.items() if not e]
    assert unfinished == [], f"trial {trial}: children with no end: {unfinished}"
    assert all(len(e) == 1 for e in ends.values())
    statuses = Counter(e[0].status.value for e in ends.values())
    written = result.usage.output_tokens + sum(e[0].usage.output_tokens for e in ends.values())
    left = await host.budgets.left(f"tree-{result.run_id}")
    assert left is not None
    errors = [e[0].error for e in ends.values() if e[0].error and "budget" not in e[0].error]
    assert errors == [], errors
    return statuses, written, left.tokens


async def test_negative_usage_on_workers_gives_nothing_back(
    host: Runtime, workers: Workers
) -> None:
    for _ in range(3):
        workers.start(concurrency=8, TLQ_SPEND_INPUT="-1000000")
    for trial in range(TRIALS):
        statuses, written, left = await fan_out(host, trial)
        print(
            f"trial {trial + 1}: children {dict(statuses)}, {written} output tokens written "
            f"under {CEILING}, {left} left"
        )
        # Every child reported -1,000,000 input: counted as 0, so the answers
        # written alone reach the ceiling and half the children never ask.
        assert written <= CEILING
        assert left is not None and 0 <= left <= CEILING - written
        assert set(statuses) <= {"completed", "budget_exhausted"}
        assert statuses["budget_exhausted"] >= 1


async def test_absurd_usage_on_workers_spends_the_tree(host: Runtime, workers: Workers) -> None:
    for _ in range(3):
        workers.start(concurrency=8, TLQ_SPEND_INPUT=str(2**70))
    for trial in range(TRIALS):
        statuses, _, left = await fan_out(host, trial)
        print(f"trial {trial + 1}: children {dict(statuses)}, {left} tokens left")
        # Charged, not a raw OverflowError: no child failed, the tree is spent.
        assert set(statuses) <= {"completed", "budget_exhausted"}, statuses
        assert statuses["completed"] >= 1 and statuses["budget_exhausted"] >= 1
        assert left is not None and left < 0
