"""A tree budget across processes: 20 background children of one root run
on 3 worker processes all charge the root's ceiling in PostgreSQL; the usage
they actually report never sums past it, and every child ends."""

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

TRIALS = 10
CHILDREN = 20
CEILING = 20_000  # about half the children's answers fit


@pytest.fixture
def workers(pg_schema: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(worker_env(PG_DSN, pg_schema, tmp_path / "effects.txt"))
    yield started
    started.close()


@pytest.fixture
async def host(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runtime]:
    monkeypatch.setenv("TLQ_EFFECTS", str(tmp_path / "effects.txt"))
    monkeypatch.setenv("TLQ_FANOUT", str(CHILDREN))
    runtime = host_runtime(PG_DSN, pg_schema)
    yield runtime
    await runtime.close()


async def children_of(host: Runtime, root_id: str) -> list[str]:
    entries = await host.store.load(root_id)
    return [e.payload.child_session_id for e in entries if isinstance(e.payload, SubagentLink)]


async def ends_of(host: Runtime, session_id: str) -> list[RunFinishedEntry]:
    entries = await host.store.load(session_id)
    return [e.payload for e in entries if isinstance(e.payload, RunFinishedEntry)]


async def test_children_on_three_workers_never_pass_the_tree_ceiling(
    host: Runtime, workers: Workers
) -> None:
    for _ in range(3):
        workers.start(concurrency=8)
    outcomes: Counter[str] = Counter()
    for trial in range(TRIALS):
        root = await host.create_session(host.agent_named("boss"))
        result = await root.run(
            "fan out", options=RunOptions(budget=Budget(tokens=CEILING, max_output_tokens=2000))
        )
        # The root's own last request competes with its children for the rest.
        assert result.status in (RunStatus.COMPLETED, RunStatus.BUDGET_EXHAUSTED), result.error
        children = await children_of(host, root.id)
        assert len(children) == CHILDREN, [
            (e.kind, str(e.data)[:300]) for e in await host.store.load(root.id)
        ]
        deadline = time.monotonic() + 60
        while True:
            ends = {c: await ends_of(host, c) for c in children}
            if all(ends.values()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        unfinished = [c for c, e in ends.items() if not e]
        assert unfinished == [], f"trial {trial}: children with no end: {unfinished}"
        assert all(len(e) == 1 for e in ends.values())  # one run, one end each
        statuses = Counter(e[0].status.value for e in ends.values())
        spent = result.usage.total_tokens + sum(e[0].usage.total_tokens for e in ends.values())
        print(
            f"trial {trial + 1}: {spent} tokens reported under {CEILING}; children {dict(statuses)}"
        )
        assert spent <= CEILING
        assert set(statuses) <= {"completed", "budget_exhausted"}
        assert statuses["completed"] >= 1 and statuses["budget_exhausted"] >= 1
        outcomes.update(statuses)
    print(f"all trials: {dict(outcomes)}")
