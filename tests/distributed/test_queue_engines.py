"""The queue's behaviours, written once against the user verbs, on both engines.

Every test runs on procrastinate (`WorkQueue`, PostgreSQL) and on Temporal
(`TemporalQueue`, the real dev server, with a SQLite and a PostgreSQL store),
with real `taskloom worker` processes (see `engines`): a submitted run
completes on a worker and `wait` returns its result; submits made before any
worker coalesce into one run; a background child runs on a worker and
reports to its parent once; an approval decided by the CLI in another process
resumes the parked run on a worker; steering reaches a queued session and a
run in flight on a worker; a stop request stops a run in flight on a worker;
a run whose agent the worker lacks fails in the log and the session goes on;
SIGTERM drains the run in flight to another worker; a worker SIGKILLed
mid-tool leaves the run to the other, the tool run at most once; background
children fanned out on two workers never spend past their tree's budget.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from engines import Engine, engine, engine_case  # noqa: F401 (fixtures)
from queue_support import interrupted, log_problems, marks, messages_of, tool_results, until

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import Budget, RunOptions, RunStatus, Runtime
from taskloom.entries import Entry, RunFinishedEntry, RunStartedEntry, SubagentLink
from temporal_server import temporal_server  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow]


def started(entries: list[Entry]) -> int:
    return sum(isinstance(e.payload, RunStartedEntry) for e in entries)


def finished(entries: list[Entry]) -> list[RunFinishedEntry]:
    return [e.payload for e in entries if isinstance(e.payload, RunFinishedEntry)]


def effects_of(engine: Engine) -> Path:  # noqa: F811
    return Path(engine.env["TLQ_EFFECTS"])


def ran_by(text: str) -> int:
    """The pid in a `bot`'s answer (`done by <pid>: <turn>`)."""
    return int(text.split()[2].rstrip(":"))


async def test_a_submitted_run_completes_on_a_worker_and_wait_returns_its_result(
    engine: Engine,  # noqa: F811
) -> None:
    host = engine.host()
    pids = {engine.start().pid, engine.start().pid}
    sessions = [await host.create_session(host.agent_named("bot")) for _ in range(4)]
    for s in sessions:
        await s.submit(f"hi {s.id[:6]}")
    results = await asyncio.gather(*(s.wait(timeout=60) for s in sessions))
    for s, result in zip(sessions, results, strict=True):
        assert result.status is RunStatus.COMPLETED, result
        assert ran_by(result.text) in pids
        assert result.text.endswith(f": hi {s.id[:6]}")
        assert (result.tool_calls, result.rounds) == (1, 2)
        entries = await s.entries()
        assert started(entries) == 1 and log_problems(entries) == []
        assert result.run_id and all(e.run_id in (None, result.run_id) for e in entries)
    assert len(marks(effects_of(engine))) == len(sessions)  # one touch per run
    # The session's next turn is a new run, also waited for.
    await sessions[0].submit("once more")
    again = await sessions[0].wait(timeout=60)
    assert again.status is RunStatus.COMPLETED and again.text.endswith(": once more")
    assert again.run_id != results[0].run_id


async def test_submits_before_any_worker_coalesce_into_one_run(
    engine: Engine,  # noqa: F811
) -> None:
    host = engine.host()
    session = await host.create_session(host.agent_named("bot"))
    first = await session.submit("hello")
    second = await session.submit("and more")
    assert first == second  # the second joined the first
    if engine.job_names_session:
        assert first == engine.job_id(session.id)
    worker = engine.start()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {worker.pid}: hello\n\nand more"
    entries = await session.entries()
    assert started(entries) == 1
    assert log_problems(entries) == []


async def _reported(runtime: Runtime, parent_id: str) -> bool:
    entries = await runtime.store.load(parent_id)
    return any(
        "report received" in (m.text or "") for m in messages_of(entries) if m.role == "assistant"
    )


async def test_a_background_child_runs_on_a_worker_and_reports_to_its_parent_once(
    engine: Engine,  # noqa: F811
) -> None:
    host = engine.host()
    pids = {engine.start(TLQ_WAKE="1").pid, engine.start(TLQ_WAKE="1").pid}
    parent = await host.create_session(host.agent_named("lead"))
    await parent.submit("get help")
    await until(lambda: _reported(host, parent.id))
    result = await parent.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text.startswith("report received by")
    assert int(result.text.split()[-1]) in pids  # the parent's last run was on a worker too
    (child,) = await host.store.list(parent_id=parent.id)
    child_entries = await host.store.load(child.id)
    assert [e.kind for e in child_entries].count("subagent_result") == 1
    assert [m.split()[0] for m in marks(effects_of(engine))] == [child.id]  # it ran, once
    parent_entries = await parent.entries()
    delivered = [str(e.data.get("delivered")) for e in parent_entries if e.kind == "message"]
    reports = [d for d in delivered if "finished. Its report" in d]
    assert len(reports) == 1 and child.id in reports[0]  # exactly one report reached it
    assert log_problems(parent_entries) == [] and log_problems(child_entries) == []


async def test_an_approval_decided_by_the_cli_in_another_process_resumes_the_run_on_a_worker(
    engine: Engine,  # noqa: F811
) -> None:
    host = engine.host()
    worker = engine.start()
    session = await host.create_session(host.agent_named("direct"))
    await session.submit("Pay it.")
    parked = await session.wait(timeout=60)
    assert parked.status is RunStatus.AWAITING_APPROVAL, parked
    [call] = parked.pending
    assert not [m for m in marks(effects_of(engine)) if m.startswith("PAID")]
    done = await engine.cli("approve", session.id, call.id)
    assert done.returncode == 0, done.stderr
    final = await session.wait(timeout=60)
    assert final.status is RunStatus.COMPLETED, final
    assert final.text == "done: paid 70"
    paid = [m for m in marks(effects_of(engine)) if m.startswith(f"PAID {session.id} ")]
    assert paid == [f"PAID {session.id} {call.id} 70"]  # approved once, paid once
    entries = await session.entries()
    assert log_problems(entries) == []
    resumed = [e.payload for e in entries if isinstance(e.payload, RunStartedEntry)][-1]
    assert resumed.resume and engine.names_worker(resumed.by, worker)  # the worker resumed it


async def test_steering_reaches_a_queued_session(engine: Engine) -> None:  # noqa: F811
    host = engine.host()
    session = await host.create_session(host.agent_named("bot"))
    await session.submit("first")
    await session.steer("and also this")  # no lease needed: the run has not begun
    worker = engine.start()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {worker.pid}: first\n\nand also this"
    entries = await session.entries()
    assert started(entries) == 1 and log_problems(entries) == []


async def test_steering_reaches_a_run_in_flight_on_a_worker(engine: Engine) -> None:  # noqa: F811
    host = engine.host()
    gate = effects_of(engine).parent / "gate"
    worker = engine.start(TLQ_TOOL_GATE=str(gate))
    session = await host.create_session(host.agent_named("bot"))
    await session.submit("first")
    worker.expect(f"TOOL {session.id}")
    await session.steer("and then this")  # written while the worker's run holds the lease
    gate.touch()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {worker.pid}: and then this"
    entries = await session.entries()
    assert started(entries) == 1  # the same run took it at its next boundary
    assert result.tool_calls == 2  # a touch for each user turn
    assert log_problems(entries) == []


async def test_a_stop_request_stops_a_run_in_flight_on_a_worker(
    engine: Engine,  # noqa: F811
) -> None:
    host = engine.host()
    gate = effects_of(engine).parent / "gate"
    worker = engine.start(TLQ_TOOL_GATE=str(gate))
    session = await host.create_session(host.agent_named("bot"))
    await session.submit("stop me")
    worker.expect(f"TOOL {session.id}")
    await session.request_stop("enough")
    gate.touch()  # the tool ends; the run stops at its next boundary
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.STOPPED, result
    entries = await session.entries()
    assert [f.status for f in finished(entries)] == [RunStatus.STOPPED]
    assert list(tool_results(entries).values()) == [["touched"]]  # no model request after it
    assert log_problems(entries) == []
    # Later runs are not stopped by it.
    await session.submit("go on")
    later = await session.wait(timeout=60)
    assert later.status is RunStatus.COMPLETED and later.text.endswith(": go on")


async def test_a_run_whose_agent_the_worker_lacks_fails_in_the_log_and_the_session_goes_on(
    engine: Engine,  # noqa: F811
) -> None:
    host = engine.host()
    session = await host.create_session(host.agent_named("bot"))
    wrong = engine.start(TLQ_AGENTS="lead")
    await session.submit("are you there?")
    failed = await session.wait(timeout=60)  # a failure for good, not retried
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and "no agent named 'bot'" in failed.error
    wrong.close()
    right = engine.start()
    await session.submit()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {right.pid}: are you there?"  # the input was kept


async def test_sigterm_drains_the_run_in_flight_which_completes_on_another_worker(
    engine: Engine,  # noqa: F811
) -> None:
    host = engine.host()
    session = await host.create_session(host.agent_named("bot"))
    first = engine.start(TLQ_TOOL_SLEEP="1.5")
    await session.submit("long job")
    first.expect(f"TOOL {session.id}")
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0, first.stderr()[-3000:]
    entries = await session.entries()
    assert [f.status for f in finished(entries)] == [RunStatus.STOPPED]
    second = engine.start()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {second.pid}: long job"
    entries = await session.entries()
    assert log_problems(entries) == []
    assert list(tool_results(entries).values()) == [["touched"]]  # ran once, to its end
    assert len(marks(effects_of(engine))) == 1


async def test_a_worker_sigkilled_mid_tool_the_run_completes_on_the_other_tool_at_most_once(
    engine: Engine,  # noqa: F811
) -> None:
    host = engine.host()
    effects = effects_of(engine)
    session = await host.create_session(host.agent_named("bot"))
    doomed = engine.start(TLQ_TOOL_SLEEP="600")
    await session.submit("survive this")
    doomed.expect(f"TOOL {session.id}")

    async def touched() -> bool:  # the tool prints before it leaves its mark
        return any(m.startswith(session.id) for m in marks(effects))

    await until(touched)
    other = engine.start()  # idle until the killed worker's run comes back
    doomed.kill()
    result = await session.wait(timeout=90)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"done by {other.pid}: survive this"
    entries = await session.entries()
    assert log_problems(entries) == []
    ran = [m for m in marks(effects) if m.startswith(session.id)]
    assert len(ran) == 1  # the tool ran once, on the killed worker
    cut = interrupted(entries)
    assert cut == [ran[0].split()[1]]  # its call was answered "interrupted", not run again
    assert list(tool_results(entries)) == cut


CHILDREN = 16
CEILING = 16_000  # about half the children's answers fit
TRIALS = 3


async def _ends(host: Runtime, children: list[str]) -> dict[str, list[RunFinishedEntry]]:
    """Each child's run ends, once every child has one (60 s at most)."""
    deadline = time.monotonic() + 60
    while True:
        ends = {c: finished(await host.store.load(c)) for c in children}
        if all(ends.values()) or time.monotonic() > deadline:
            return ends
        await asyncio.sleep(0.1)


async def test_children_fanned_out_on_two_workers_never_pass_the_tree_ceiling(
    engine: Engine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One root's background children on two worker processes all charge the
    root's ceiling in the store; the usage they report never sums past it, and
    those refused end `budget_exhausted`, as on procrastinate since the start."""
    monkeypatch.setenv("TLQ_FANOUT", str(CHILDREN))
    host = engine.host()
    for _ in range(2):
        engine.start(concurrency=8, TLQ_FANOUT=str(CHILDREN))
    outcomes: Counter[str] = Counter()
    for trial in range(TRIALS):
        root = await host.create_session(host.agent_named("boss"))
        budget = Budget(tokens=CEILING, max_output_tokens=2000)
        result = await root.run("fan out", options=RunOptions(budget=budget))
        # The root's own last request competes with its children for the rest.
        assert result.status in (RunStatus.COMPLETED, RunStatus.BUDGET_EXHAUSTED), result.error
        entries = await host.store.load(root.id)
        children = [
            e.payload.child_session_id for e in entries if isinstance(e.payload, SubagentLink)
        ]
        assert len(children) == CHILDREN
        ends = await _ends(host, children)
        assert [c for c, e in ends.items() if not e] == [], f"trial {trial}: children with no end"
        assert all(len(e) == 1 for e in ends.values())  # one run, one end each
        statuses = Counter(e[0].status.value for e in ends.values())
        spent = result.usage.total_tokens + sum(e[0].usage.total_tokens for e in ends.values())
        print(
            f"{engine.name}/{engine.store} trial {trial + 1}: {spent} tokens reported "
            f"under {CEILING}; children {dict(statuses)}"
        )
        assert spent <= CEILING
        assert set(statuses) <= {"completed", "budget_exhausted"}
        assert statuses["completed"] >= 1 and statuses["budget_exhausted"] >= 1
        outcomes.update(statuses)
    print(f"{engine.name}/{engine.store} all trials: {dict(outcomes)}")
