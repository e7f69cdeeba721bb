"""The soak: three worker processes, 60 background children and 20 queued runs,
five SIGKILLs of a worker caught mid-tool (each replaced), and exact counts at the end."""

from __future__ import annotations

import asyncio
import queue
import random
import time
from pathlib import Path

import psycopg
import pytest
from queue_support import (
    WorkerProc,
    Workers,
    host_runtime,
    interrupted,
    log_problems,
    marks,
    tool_results,
)
from queue_support import worker_env as make_env

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus, Runtime
from taskloom.backends import BackgroundActivity
from taskloom.delegation import ChildSpec
from taskloom.distributed import WorkQueue
from taskloom.entries import RunFinishedEntry, SubagentDispatched, SubagentResult
from taskloom.log import INTERRUPTED

pytestmark = [requires_postgres, pytest.mark.slow]

PARENTS = 20
CHILDREN_EACH = 3
KILLS = 5


async def dispatch_children(host: Runtime, parent_id: str) -> list[str]:
    """Background children of `parent_id`, as the spawn tool leaves them, on the queue."""
    queue = host.queue
    assert isinstance(queue, WorkQueue)
    dispatcher = queue.dispatcher()
    ids = []
    for n in range(CHILDREN_EACH):
        child = await host.create_session(host.agent_named("bot"), parent_id=parent_id)
        spec = ChildSpec(
            child.id,
            parent_id,
            f"helper{n}",
            "touch once",
            tools=("touch",),
            model="function:child",
        )
        await child.journal.record(SubagentDispatched(spec.to_dict()))
        activity = BackgroundActivity(child.id, "subagent", f"helper{n}", time.time())
        assert await host.background.registry.add(parent_id, activity, 600)
        await dispatcher.dispatch(spec)
        ids.append(child.id)
    return ids


def next_tool_line(workers: list[WorkerProc], timeout: float = 30) -> WorkerProc:
    """The worker that prints the next `TOOL` line (a call in flight: the READY point)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in workers:
            try:
                line = worker.lines.get_nowait()
            except queue.Empty:
                continue
            if line is not None and line.startswith("TOOL "):
                return worker
        time.sleep(0.01)
    raise AssertionError("no tool call started within the timeout")


async def test_sixty_children_and_twenty_runs_survive_five_sigkills(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.txt"
    monkeypatch.setenv("TLQ_EFFECTS", str(effects))
    env = make_env(PG_DSN, pg_schema, effects, TLQ_TOOL_SLEEP="1.0")
    pool = Workers(env)
    host = host_runtime(PG_DSN, pg_schema)
    try:
        alive = [pool.start(concurrency=2) for _ in range(3)]
        parents = [await host.create_session(host.agent_named("bot")) for _ in range(PARENTS)]
        children: dict[str, list[str]] = {}
        for parent in parents:
            children[parent.id] = await dispatch_children(host, parent.id)
            await parent.submit(f"work for {parent.id[:6]}")
        rng = random.Random(12)
        for _ in range(KILLS):
            # Kill the worker a tool call just started on, or another at random.
            victim = next_tool_line(alive)
            if rng.random() < 0.3:
                victim = rng.choice(alive)
            victim.kill()
            alive.remove(victim)
            alive.append(pool.start(concurrency=2))
        everyone = [c for ids in children.values() for c in ids] + [p.id for p in parents]
        queue_ = host.queue
        assert isinstance(queue_, WorkQueue)
        await asyncio.gather(*(queue_.wait_idle(sid, 120) for sid in everyone))
        await check(host, parents, children, effects, pg_schema)
    finally:
        pool.close()
        await host.close()


async def check(
    host: Runtime, parents: list, children: dict[str, list[str]], effects: Path, schema: str
) -> None:
    all_calls: dict[str, list[str]] = {}
    problems: list[str] = []
    cut_off = 0
    terminal = 0
    for parent in parents:
        entries = await host.store.load(parent.id)
        ends = [e.payload.status for e in entries if isinstance(e.payload, RunFinishedEntry)]
        assert ends == [RunStatus.COMPLETED], ends  # exactly one run, completed
        problems += log_problems(entries)
        all_calls.update(tool_results(entries))
        cut_off += len(interrupted(entries))
        for child_id in children[parent.id]:
            child_entries = await host.store.load(child_id)
            results = [e.payload for e in child_entries if isinstance(e.payload, SubagentResult)]
            assert [r.status for r in results] == ["done"], results
            terminal += len(results)
            problems += log_problems(child_entries)
            all_calls.update(tool_results(child_entries))
            cut_off += len(interrupted(child_entries))
    assert problems == []
    with psycopg.connect(PG_DSN) as conn:
        reports = conn.execute(
            f'SELECT session_id, id FROM "{schema}".taskloom_background_notices'
        ).fetchall()
        jobs = dict(
            conn.execute(
                f'SELECT status::text, count(*) FROM "{schema}".procrastinate_jobs GROUP BY 1'
            ).fetchall()
        )
    expected = {(p.id, f"subagent:{c}") for p in parents for c in children[p.id]}
    assert len(reports) == len(expected) == PARENTS * CHILDREN_EACH
    assert set(reports) == expected  # one report per child, in its parent's inbox
    assert set(jobs) <= {"succeeded", "aborted"}, jobs  # nothing queued, running or failed
    done = marks(effects)
    assert len(done) == len(set(done))  # no call ran twice
    marked = {line.split()[1] for line in done}
    for call_id, texts in all_calls.items():
        assert texts in (["touched"], [INTERRUPTED]), (call_id, texts)
        if texts == ["touched"]:
            assert call_id in marked  # a result says it ran: it did
    print(
        f"soak: {PARENTS} runs completed, {terminal} children terminal, {len(reports)} reports, "
        f"{len(done)} side effects, {cut_off} calls cut off and answered interrupted, "
        f"jobs {jobs}"
    )
    assert terminal == PARENTS * CHILDREN_EACH
    assert cut_off >= 1
