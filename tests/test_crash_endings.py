"""Crash tests at the edges of a turn: a process SIGKILLed between a run's final
answer and its end (the run is ended on resume without asking the model
again), and one killed while the first of two calls that each run alone was
running (the second, which never started, is told so, or run if idempotent).
Real processes (crash_child.py), SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, RunStatus, ToolContext, tool
from taskloom.entries import CallsStarted, RunFinishedEntry
from taskloom.log import INTERRUPTED, NOT_STARTED
from taskloom.models import FunctionModel, ModelRequest, reply
from test_crash import Child, open_runtime

pytestmark = pytest.mark.slow

ran_here: list[str] = []


@tool
async def charge(amount: int, ctx: ToolContext) -> str:
    """Charge a card."""
    ran_here.append(ctx.call_id)
    return f"charged {amount}"


@tool(idempotent=True)
async def upsert(amount: int, ctx: ToolContext) -> str:
    """Record a payment keyed by the call's idempotency key."""
    ran_here.append(ctx.call_id)
    return f"upserted {amount}"


def answering_model() -> FunctionModel:
    return FunctionModel(lambda request: reply("recovered"), name="crash")


def kill_at(store_url: tuple[str, str], scenario: str, session_id: str, effects: Path) -> None:
    child = Child(scenario, *store_url, session_id, effects)
    try:
        child.wait_for("before-end" if scenario == "before-end" else "during-tool")
    finally:
        child.kill()


async def test_a_run_killed_after_its_final_answer_is_ended_without_asking_again(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    runtime = open_runtime(*store_url)
    try:
        session = await runtime.create_session(Agent("crashy", answering_model()))
        effects = tmp_path / "effects.txt"
        effects.touch()
        kill_at(store_url, "before-end", session.id, effects)
        assert effects.read_text().split() == ["call_charge"]
        model = answering_model()
        ran_here.clear()
        reopened = await runtime.open_session(session.id, Agent("crashy", model, tools=[charge]))
        result = await reopened.run(None)  # what a worker or a host does to run a session on
        entries = await reopened.entries()
        answers = [m.text for m in await reopened.transcript() if m.role == "assistant" and m.text]
        ends = [e.payload for e in entries if isinstance(e.payload, RunFinishedEntry)]
        print(
            f"requests after the kill {len(model.requests)}, final answers {len(answers)}, "
            f"run ends {len(ends)}"
        )
        assert model.requests == [] and ran_here == []
        assert answers == ["done"]
        assert (result.status, result.text, result.model_requests) == (
            RunStatus.COMPLETED,
            "done",
            0,
        )
        assert [(e.status, e.text) for e in ends] == [(RunStatus.COMPLETED, "done")]
        # The session goes on as any other from there.
        again = await reopened.run("and now?")
        assert again.text == "recovered" and len(model.requests) == 1
    finally:
        await runtime.close()


@pytest.mark.parametrize("second", ["charge", "upsert"])
async def test_a_call_queued_behind_a_killed_one_is_told_it_did_not_run(
    store_url: tuple[str, str], tmp_path: Path, second: str
) -> None:
    runtime = open_runtime(*store_url)
    try:
        session = await runtime.create_session(Agent("crashy", answering_model()))
        effects = tmp_path / "effects.txt"
        effects.touch()
        scenario = "two-then-idempotent" if second == "upsert" else "two-writes"
        kill_at(store_url, scenario, session.id, effects)
        assert effects.read_text().split() == ["call_1"]  # the second never started
        seen: list[ModelRequest] = []

        def model_fn(request: ModelRequest) -> object:
            seen.append(request)
            return reply("recovered")

        model = FunctionModel(model_fn, name="crash")
        ran_here.clear()
        agent = Agent("crashy", model, tools=[charge, upsert])
        reopened = await runtime.open_session(session.id, agent)
        result = await reopened.run("are we done?")
        assert result.status is RunStatus.COMPLETED
        results = {r.tool_call_id: r for m in seen[0].messages for r in m.results}
        print(
            f"{second}: ran again {ran_here}, first {results['call_1'].content!r}, "
            f"second {results['call_2'].content!r}"
        )
        assert (results["call_1"].content, results["call_1"].is_error) == (INTERRUPTED, True)
        if second == "upsert":
            # Idempotent and never started: run now, once, for the first time
            # (no retry of its bounded few is spent on it).
            assert ran_here == ["call_2"]
            assert (results["call_2"].content, results["call_2"].is_error) == ("upserted 6", False)
            starts = [
                p
                for e in await reopened.entries()
                if isinstance(p := e.payload, CallsStarted) and "call_2" in p.call_ids
            ]
            assert starts and all(p.step for p in starts), starts
        else:
            assert ran_here == []
            assert (results["call_2"].content, results["call_2"].is_error) == (NOT_STARTED, True)
    finally:
        await runtime.close()
