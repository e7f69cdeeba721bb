"""Crash tests: real processes killed with SIGKILL mid-run, then the session
is resumed from the store in this process. Nothing committed is lost; no
tool runs twice; a notice delivered but not yet persisted is delivered again.
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
from taskloom import Agent, Runtime, ToolContext, tool
from taskloom.backends import BackgroundNotice
from taskloom.log import INTERRUPTED
from taskloom.models import FunctionModel, reply
from taskloom.tools import IDEMPOTENT_RETRIES

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("crash_child.py")


class Child:
    """A crash_child.py process; kill it at the point it announces."""

    def __init__(
        self, scenario: str, url: str, schema: str, session_id: str, side_effects: Path
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), scenario, url, schema, session_id, str(side_effects)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.committed: list[int] = []

    def wait_for(self, point: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"child exited before {point!r}: {err}")
            if line.startswith("COMMITTED "):
                self.committed.append(int(line.split()[1]))
            if line.strip() == f"READY {point}":
                return
        raise AssertionError(f"child did not reach {point!r}")

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def open_runtime(url: str, schema: str) -> Runtime:
    return Runtime(store=open_durable(url, schema))


@pytest.fixture
async def runtime(store_url: tuple[str, str]) -> AsyncIterator[Runtime]:
    rt = open_runtime(*store_url)
    yield rt
    await rt.close()


ran_here: list[str] = []


@tool
async def charge(amount: int, ctx: ToolContext) -> str:
    """Charge a card."""
    ran_here.append(ctx.call_id)
    return f"charged {amount}"


def recording_model() -> FunctionModel:
    return FunctionModel(lambda request: reply("recovered"), name="crash")


async def crash_at(
    runtime: Runtime, store_url: tuple[str, str], scenario: str, point: str, tmp_path: Path
) -> tuple[str, list[int], list[str]]:
    session = await runtime.create_session(Agent("crashy", recording_model(), tools=[charge]))
    side_effects = tmp_path / "side-effects.txt"
    side_effects.touch()
    child = Child(scenario, *store_url, session.id, side_effects)
    try:
        child.wait_for(point)
    finally:
        child.kill()
    return session.id, child.committed, side_effects.read_text().split()


async def resume_and_check(
    runtime: Runtime, session_id: str, committed: list[int]
) -> tuple[Any, FunctionModel]:
    entries = await runtime.store.load(session_id)
    positions = [e.position for e in entries]
    assert positions == list(range(1, len(positions) + 1))
    assert set(committed) <= set(positions)  # nothing the child saw committed was lost
    model = recording_model()
    session = await runtime.open_session(session_id, Agent("crashy", model, tools=[charge]))
    ran_here.clear()
    result = await session.run("are we done?")
    assert result.text == "recovered"
    assert ran_here == []  # the resumed session never re-ran the tool
    return result, model


async def test_kill_during_the_first_model_request(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    sid, committed, effects = await crash_at(
        runtime, store_url, "first-model", "during-model", tmp_path
    )
    assert effects == []
    _, model = await resume_and_check(runtime, sid, committed)
    # the half-asked turn is simply absent
    assert [m.role for m in model.requests[0].messages] == ["user", "user"]


async def test_kill_during_a_tool(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    sid, committed, effects = await crash_at(
        runtime, store_url, "during-tool", "during-tool", tmp_path
    )
    assert effects == ["call_charge"]
    _, model = await resume_and_check(runtime, sid, committed)
    roles = [m.role for m in model.requests[0].messages]
    assert roles == ["user", "assistant", "tool", "user"]
    result = model.requests[0].messages[2].results[0]
    assert (
        result.tool_call_id == "call_charge" and result.is_error and result.content == INTERRUPTED
    )


async def test_kill_between_the_assistant_turn_and_its_results(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    sid, committed, effects = await crash_at(
        runtime, store_url, "before-results", "before-results", tmp_path
    )
    assert effects == ["call_charge"]  # the tool ran once, its result never reached the log
    _, model = await resume_and_check(runtime, sid, committed)
    assert model.requests[0].messages[2].results[0].content == INTERRUPTED


async def test_kill_during_a_later_model_request(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    sid, committed, effects = await crash_at(
        runtime, store_url, "during-model", "during-model", tmp_path
    )
    assert effects == ["call_charge"]
    _, model = await resume_and_check(runtime, sid, committed)
    results = model.requests[0].messages[2].results
    assert [(r.content, r.is_error) for r in results] == [("charged 5", False)]


async def test_a_notice_delivered_but_not_persisted_is_delivered_again(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    session = await runtime.create_session(Agent("crashy", recording_model()))
    notice = BackgroundNotice(
        "build-1:end", "build-1", "shell", "exit 0: all green", "done", time.time()
    )
    assert await runtime.background.inbox.push(session.id, notice)
    child = Child("notice", *store_url, session.id, tmp_path / "unused.txt")
    try:
        child.wait_for("during-model")  # the notice is in the request the child is waiting on
    finally:
        child.kill()
    assert [n.id for n in await runtime.background.inbox.pending(session.id)] == ["build-1:end"]
    model = recording_model()
    reopened = await runtime.open_session(session.id, Agent("crashy", model))
    await reopened.run("again?")
    delivered = model.requests[0].messages[-1].text
    assert "build-1" in delivered and "all green" in delivered
    # acknowledged now that the answer is persisted: not delivered a third time
    assert await runtime.background.inbox.pending(session.id) == []
    entries = await reopened.entries()
    carried = [e for e in entries if e.kind == "message" and e.data.get("delivered")]
    assert len(carried) == 1 and carried[0].data["delivered"]["ids"] == ["build-1:end"]


@tool(idempotent=True)
async def upsert(amount: int, ctx: ToolContext) -> str:
    """Record a payment keyed by the call's idempotency key."""
    ran_here.append(ctx.idempotency_key)
    return f"upserted {amount}"


async def test_kill_during_an_idempotent_tool_runs_it_again_with_the_same_key(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    sid, _, effects = await crash_at(runtime, store_url, "idempotent", "during-tool", tmp_path)
    assert len(effects) == 1  # the child ran it once, then died inside it
    model = recording_model()
    session = await runtime.open_session(sid, Agent("crashy", model, tools=[upsert]))
    ran_here.clear()
    result = await session.run("are we done?")
    assert result.status.value == "completed"
    # Run again, once, with the key the first run had.
    assert ran_here == effects
    messages = model.requests[0].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user"]
    answered = messages[2].results[0]
    assert (answered.tool_call_id, answered.content, answered.is_error) == (
        "call_upsert",
        "upserted 5",
        False,
    )


async def test_an_idempotent_call_that_keeps_crashing_is_given_up_on(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    sid, _, _ = await crash_at(runtime, store_url, "idempotent", "during-tool", tmp_path)
    side_effects = tmp_path / "side-effects.txt"
    for attempt in range(IDEMPOTENT_RETRIES):
        # Each new process runs the cut-off call again, and dies in it again.
        child = Child("idempotent", *store_url, sid, side_effects)
        try:
            child.wait_for("during-tool")
        finally:
            child.kill()
        print(f"retry {attempt + 1}: killed inside the call again")
    keys = side_effects.read_text().split()
    assert len(keys) == 1 + IDEMPOTENT_RETRIES and len(set(keys)) == 1
    model = recording_model()
    session = await runtime.open_session(sid, Agent("crashy", model, tools=[upsert]))
    ran_here.clear()
    await session.run("are we done?")
    assert ran_here == []  # retried enough: answered "interrupted" like any call
    answered = model.requests[0].messages[2].results[0]
    assert answered.content == INTERRUPTED and answered.is_error


@tool(name="upsert", idempotent=True, needs_approval=True)
async def gated_upsert(amount: int, ctx: ToolContext) -> str:
    """Record a payment keyed by the call's idempotency key, once approved."""
    ran_here.append(ctx.idempotency_key)
    return f"upserted {amount}"


async def test_an_approved_idempotent_call_is_retried_as_often_as_any(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path
) -> None:
    # Parked for approval here, approved, then each child process runs the
    # call (the first by resuming the parked turn, the others as cut off)
    # and dies in it: as many runs as an ungated call's 1 + IDEMPOTENT_RETRIES.
    calls = [("upsert", {"amount": 5}, "call_upsert")]
    model = FunctionModel(lambda r: reply(tool_calls=calls) if len(r.messages) == 1 else reply("x"))
    session = await runtime.create_session(Agent("crashy", model, tools=[gated_upsert]))
    assert (await session.run("pay 5")).status.value == "awaiting_approval"
    await session.approve("call_upsert")
    side_effects = tmp_path / "side-effects.txt"
    for attempt in range(1 + IDEMPOTENT_RETRIES):
        child = Child("approved", *store_url, session.id, side_effects)
        try:
            child.wait_for("during-tool")
        finally:
            child.kill()
        print(f"run {attempt + 1}: killed inside the approved call")
    keys = side_effects.read_text().split()
    assert len(keys) == 1 + IDEMPOTENT_RETRIES and len(set(keys)) == 1
    final = recording_model()
    reopened = await runtime.open_session(session.id, Agent("crashy", final, tools=[gated_upsert]))
    ran_here.clear()
    await reopened.run()
    assert ran_here == []  # retried enough: answered "interrupted" like any call
    answered = final.requests[0].messages[2].results[0]
    assert answered.content == INTERRUPTED and answered.is_error
