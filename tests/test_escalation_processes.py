"""Escalated approvals decided by `taskloom approve` in other processes, on
SQLite and PostgreSQL: a command that cannot run the child's tools (`--store`
only) says so and exits non-zero, and the parent's next run takes the child
up (its payment made once, its report delivered once); two commands deciding
the same call at once agree (the same decision twice is a no-op, opposite
ones one `ApprovalConflict`); a deleted child's calls are simply not pending;
a root parked on its inline child's call goes on with the decision taken
with `--app` (the child's call run once, then the root, however many
commands decide at once).
The work-queue case (a worker's child handed back to the queue) is in
tests/distributed/test_queue_escalation.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import RunStatus, Runtime, Session
from taskloom.delegation import ChildStatus, child_status
from taskloom.entries import MessageEntry
from taskloom.results import PendingCall

HERE = Path(__file__).parent
SRC = HERE.parent / "src"

pytestmark = pytest.mark.slow


@pytest.fixture
async def host(
    store_url: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runtime]:
    """escalation_app's runtime on the test's store (a private schema on PostgreSQL)."""
    url, schema = store_url
    if schema != "-":
        # The app names its store by URL alone: the schema comes with the connection.
        monkeypatch.setenv("PGOPTIONS", f"-c search_path={schema}")
    monkeypatch.setenv("ESC_URL", url)
    monkeypatch.setenv("ESC_EFFECTS", str(tmp_path / "effects.txt"))
    import escalation_app

    runtime = escalation_app.make_runtime()
    yield runtime
    await runtime.close()


def _env() -> dict[str, str]:
    path = [str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), "TERM": "dumb"}


def _approve(root: str, call: str, *where: str, deny: bool = False) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "taskloom", "approve", root, call, *where]
    return subprocess.Popen(
        [*command, *(["--deny"] if deny else [])],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = await asyncio.to_thread(proc.communicate, timeout=90)
    return proc.returncode, out, err


async def _escalated(host: Runtime) -> tuple[Session[Any, Any], PendingCall]:
    root = await host.create_session(host.agent_named("treasurer"))
    assert (await root.run("Pay the invoice.")).text == "a worker is paying"
    async with asyncio.timeout(20):
        while not (pending := await root.pending()):
            await asyncio.sleep(0.02)
    [call] = pending
    assert call.name == "pay" and call.origin.startswith("payer#")
    return root, call


def _payments(host: Runtime, child_id: str) -> list[str]:
    path = Path(os.environ["ESC_EFFECTS"])
    lines = path.read_text().splitlines() if path.exists() else []
    return [line for line in lines if line.startswith(f"PAID {child_id} ")]


async def _delivered(root: Session[Any, Any]) -> list[str]:
    return [
        i
        for e in await root.entries()
        if isinstance(e.payload, MessageEntry)
        for i in e.payload.delivered_ids
    ]


async def test_a_decision_from_a_process_without_the_tools_leaves_the_child_to_the_next_run(
    host: Runtime, store_url: tuple[str, str]
) -> None:
    root, call = await _escalated(host)
    code, out, err = await _finished(_approve(root.id, call.id, "--store", store_url[0]))
    print(f"exit {code}\n{out}{err}")
    # Recorded, but the child did not go on: the command says so, and who will.
    assert code == 1, err
    assert "did not go on" in out and "['pay']" in out
    assert f"next run of session {root.id}" in out
    assert await child_status(host, call.session_id) is ChildStatus.AWAITING_APPROVAL
    assert await root.pending() == []
    assert _payments(host, call.session_id) == []
    # The parent's next run (here, a process with the tools) takes the child up.
    async with asyncio.timeout(30):
        while not (await root.run("Done?")).text.startswith("report:"):
            await asyncio.sleep(0.05)
    assert len(_payments(host, call.session_id)) == 1
    assert await _delivered(root) == [f"subagent:{call.session_id}"]
    assert await child_status(host, call.session_id) is ChildStatus.DONE


TRIALS = 20


async def test_two_processes_deciding_the_same_escalated_call_agree(
    host: Runtime, store_url: tuple[str, str]
) -> None:
    app = ("--app", "escalation_app:make_runtime")
    same_failed = 0
    paid_twice = 0
    for _ in range(TRIALS):
        root, call = await _escalated(host)
        both = [_approve(root.id, call.id, *app), _approve(root.id, call.id, *app)]
        results = [await _finished(p) for p in both]
        same_failed += sum(code != 0 for code, _, _ in results)
        for code, _, err in results:
            assert code == 0, err
        async with asyncio.timeout(20):
            while await child_status(host, call.session_id) is not ChildStatus.DONE:
                await asyncio.sleep(0.02)
        paid_twice += len(_payments(host, call.session_id)) != 1
    opposite_wins = opposite_conflicts = 0
    for _ in range(TRIALS):
        root, call = await _escalated(host)
        both = [
            _approve(root.id, call.id, *app),
            _approve(root.id, call.id, *app, deny=True),
        ]
        results = [await _finished(p) for p in both]
        wins = [r for r in results if r[0] == 0]
        lost = [r for r in results if r[0] != 0]
        opposite_wins += len(wins)
        opposite_conflicts += sum(
            code == 2 and "was already" in err and "the first decision stands" in err
            for code, _, err in lost
        )
        assert len(wins) == 1 and len(lost) == 1, results
    print(
        f"identical decisions: {TRIALS} trials, {same_failed} non-zero exits, "
        f"{paid_twice} children not paid exactly once; opposite decisions: "
        f"{TRIALS} trials, {opposite_wins} won, {opposite_conflicts} ApprovalConflict"
    )
    assert same_failed == 0 and paid_twice == 0
    assert opposite_wins == TRIALS and opposite_conflicts == TRIALS


async def test_a_deleted_escalating_child_leaves_nothing_pending(
    host: Runtime, store_url: tuple[str, str]
) -> None:
    root, call = await _escalated(host)
    await host.store.delete(call.session_id)
    assert await root.pending() == []
    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "taskloom", "sessions", "show", root.id, "--store", store_url[0]],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "a worker is paying" in shown.stdout and "awaiting approval" not in shown.stdout


async def test_an_inline_escalation_parks_the_root_until_the_cli_decides_and_resumes(
    host: Runtime, store_url: tuple[str, str]
) -> None:
    app = ("--app", "escalation_app:make_runtime")
    started = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "taskloom", "run", *app, "--agent", "cashier", "Pay it."],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    print(f"run: exit {started.returncode}\n{started.stdout}{started.stderr}")
    # Parked, with the way on printed: see the child's calls, decide, resume.
    assert started.returncode == 1, started.stderr
    assert "awaiting approval of calls a child agent escalated" in started.stdout
    [root_meta] = [m for m in await host.store.list() if m.agent == "cashier"]
    root = await host.open_session(root_meta.id, host.agent_named("cashier"))
    assert f"taskloom sessions show {root.id}" in started.stdout
    [call] = await root.pending()
    assert call.name == "pay" and call.origin.startswith("payer#")
    assert len(await host.store.list(parent_id=root.id)) == 1  # the root took no second round
    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "taskloom", "sessions", "show", root.id, "--store", store_url[0]],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"waiting on {call.session_id[:8]}" in shown.stdout
    assert f"escalated by payer {call.session_id[:8]}" in shown.stdout
    code, out, err = await _finished(_approve(root.id, call.id, "--store", store_url[0]))
    print(f"approve: exit {code}\n{out}{err}")
    assert code == 0, err
    assert f"taskloom resume {root.id}" in out
    assert _payments(host, call.session_id) == []  # the root's resume runs the child on
    resume = [sys.executable, "-m", "taskloom", "resume", root.id]
    done = await asyncio.to_thread(
        subprocess.run,
        [*resume, "--app", "escalation_app:make_runtime"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    print(f"resume: exit {done.returncode}\n{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stderr
    assert len(_payments(host, call.session_id)) == 1
    assert await child_status(host, call.session_id) is ChildStatus.DONE
    await root.journal.sync()
    final = root.journal.log.finished_result(root.id)
    assert final is not None and final.status is RunStatus.COMPLETED
    said = final.text.removeprefix("cashier: ")
    assert json.loads(said)["answer"] == "done: paid 70"  # the child's answer, as the call's result


async def _parked_on_inline_child(host: Runtime) -> tuple[Session[Any, Any], PendingCall]:
    root = await host.create_session(host.agent_named("cashier"))
    first = await root.run("Pay it.")
    assert first.status is RunStatus.AWAITING_APPROVAL
    [call] = first.pending  # the child's call, as pending() lists it
    assert call.name == "pay" and call.origin.startswith("payer#")
    assert await root.pending() == [call]
    return root, call


async def _completed_once(host: Runtime, root: Session[Any, Any], call: PendingCall) -> None:
    """The child paid once and ended; the root completed on its answer, got
    as the delegation's result, never again as a notice."""
    assert len(_payments(host, call.session_id)) == 1
    assert await child_status(host, call.session_id) is ChildStatus.DONE
    await root.journal.sync()
    final = root.journal.log.finished_result(root.id)
    assert final is not None and final.status is RunStatus.COMPLETED
    assert json.loads(final.text.removeprefix("cashier: "))["answer"] == "done: paid 70"
    assert await _delivered(root) == []
    assert await host.background.inbox.pending(root.id) == []


async def test_a_decision_with_the_app_runs_the_parked_child_on_then_the_root(
    host: Runtime, store_url: tuple[str, str]
) -> None:
    root, call = await _parked_on_inline_child(host)
    code, out, err = await _finished(
        _approve(root.id, call.id, "--app", "escalation_app:make_runtime")
    )
    print(f"approve: exit {code}\n{out}{err}")
    assert code == 0, err
    assert f"went on, then session {root.id}: completed" in out
    await _completed_once(host, root, call)


async def test_two_processes_deciding_a_parked_roots_child_call_run_it_on_once(
    host: Runtime, store_url: tuple[str, str]
) -> None:
    app = ("--app", "escalation_app:make_runtime")
    trials, failed, wrong = 5, 0, 0
    for _ in range(trials):
        root, call = await _parked_on_inline_child(host)
        both = [_approve(root.id, call.id, *app), _approve(root.id, call.id, *app)]
        results = [await _finished(p) for p in both]
        failed += sum(code != 0 for code, _, _ in results)
        try:
            await _completed_once(host, root, call)
        except AssertionError:
            wrong += 1
            print(results)
    print(f"{trials} trials: {failed} non-zero exits, {wrong} not run on exactly once")
    assert failed == 0 and wrong == 0
