"""Background children under failure, with real worker processes.

A worker SIGKILLed mid-child: its lease lapses, a redelivery runs the child
again from its log, the parent gets exactly one report. A worker SIGSTOPped
past its lease and resumed after another took over cannot append.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, Runtime, tool
from taskloom.backends import BackgroundActivity, session_lease_key
from taskloom.delegation import ChildSpec, ChildStatus, ChildWorker, child_status
from taskloom.entries import Entry
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("worker_child.py")


@tool
def note(text: str) -> str:
    """Write a note."""
    return "noted"


def runtime_at(
    url: str, schema: str, skew: float = 0.0, model: FunctionModel | None = None
) -> Runtime:
    """A runtime whose lease clock runs `skew` seconds ahead (to see leases lapse without sleeping)."""
    store = open_durable(url, schema, clock=lambda: time.time() + skew)
    models = {model.spec: model} if model is not None else {}
    return Runtime(store=store, tools={"note": note}, models=models)


@pytest.fixture
async def runtime(store_url: tuple[str, str]) -> AsyncIterator[Runtime]:
    rt = runtime_at(*store_url)
    yield rt
    await rt.close()


async def dispatched_child(runtime: Runtime) -> tuple[str, ChildSpec]:
    """A parent and a queued background child, as the spawn tool leaves them."""
    parent = await runtime.create_session(Agent("lead", ScriptedModel([])))
    child = await runtime.create_session(Agent("bg", "function:slowpoke"), parent_id=parent.id)
    spec = ChildSpec(
        child.id,
        parent.id,
        "bg",
        "write a note then answer",
        tools=("note",),
        model="function:slowpoke",
    )
    await runtime.store.append(child.id, Entry("subagent_dispatched", {"spec": spec.to_dict()}))
    activity = BackgroundActivity(child.id, "subagent", "bg", time.time())
    assert await runtime.background.registry.add(parent.id, activity, 300)
    return parent.id, spec


def start_worker(
    store_url: tuple[str, str], spec: ChildSpec, side_effects: Path
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *store_url, spec.to_json(), str(side_effects)],
        stdin=subprocess.PIPE,  # the worker thinks until the test closes it (`finish`)
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(proc: subprocess.Popen[str], line: str, timeout: float = 30) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = proc.stdout.readline()
        if not got:
            raise AssertionError(
                f"worker exited before {line!r}: {proc.stderr.read() if proc.stderr else ''}"
            )
        if got.strip() == line:
            return
    raise AssertionError(f"worker never printed {line!r}")


def finish(proc: subprocess.Popen[str]) -> str:
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out + err


def second_worker_model() -> FunctionModel:
    def answer(request: ModelRequest) -> Any:
        return reply("answer from the second worker")

    return FunctionModel(answer, name="slowpoke")


async def test_a_killed_worker_is_redelivered_and_reports_once(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    parent_id, spec = await dispatched_child(runtime)
    effects = tmp_path / "effects.txt"
    proc = start_worker(store_url, spec, effects)
    try:
        wait_for(proc, "READY thinking")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        finish(proc)
    assert effects.read_text().split("\n")[0] == "from the first worker"
    # Its lease has not lapsed yet; its holder, known dead, runs nothing.
    assert await runtime.store.leases.current(session_lease_key(spec.child_session_id))
    assert await child_status(runtime, spec.child_session_id) is ChildStatus.INTERRUPTED

    later = runtime_at(*store_url, skew=120, model=second_worker_model())
    try:
        assert await child_status(later, spec.child_session_id) is ChildStatus.INTERRUPTED
        assert await ChildWorker(later).run(spec) is ChildStatus.DONE
        assert (
            await ChildWorker(later).run(spec) is ChildStatus.DONE
        )  # delivered once more: no second report
        entries = await later.store.load(spec.child_session_id)
        kinds = [e.kind for e in entries]
        assert kinds.count("subagent_started") == 2 and kinds.count("subagent_result") == 1
        # continued from the log: the task and the first worker's tool round are kept
        messages = [e.data["message"]["role"] for e in entries if e.kind == "message"]
        assert messages[:3] == ["user", "assistant", "tool"] and messages.count("user") == 1
        assert entries[-1].data["report"] == "answer from the second worker"
        notices = await later.background.inbox.pending(parent_id)
        assert [n.id for n in notices] == [f"subagent:{spec.child_session_id}"]
        assert "answer from the second worker" in notices[0].text
        assert await later.background.registry.list(parent_id) == []
    finally:
        await later.close()


async def test_a_stale_worker_cannot_append_after_a_takeover(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    parent_id, spec = await dispatched_child(runtime)
    proc = start_worker(store_url, spec, tmp_path / "effects.txt")
    try:
        wait_for(proc, "READY thinking")
        os.kill(proc.pid, signal.SIGSTOP)  # the worker stalls past its lease
        later = runtime_at(*store_url, skew=120, model=second_worker_model())
        try:
            assert await ChildWorker(later).run(spec) is ChildStatus.DONE
            before = await later.store.load(spec.child_session_id)
        finally:
            await later.close()
        os.kill(proc.pid, signal.SIGCONT)  # it wakes up and tries to go on
        output = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "RESULT none" in output  # its writes were refused; it gave up
    after = await runtime.store.load(spec.child_session_id)
    assert after == before  # not one entry from the stale worker
    assert [e.kind for e in after].count("subagent_result") == 1
    assert "answer from the first worker" not in str([e.data for e in after])
    assert len(await runtime.background.inbox.pending(parent_id)) == 1
