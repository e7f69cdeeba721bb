"""A run's model rounds are bounded by default (`DEFAULT_MAX_ROUNDS`): a
model that never stops calling tools ends BUDGET_EXHAUSTED, saying which
limit it reached; `RunOptions(max_rounds=...)` sets another bound, and
`max_rounds=None` lifts it."""

from __future__ import annotations

from typing import Any

from taskloom import Agent, RunOptions, RunStatus, Runtime, tool
from taskloom.loop import DEFAULT_MAX_ROUNDS
from taskloom.models import FunctionModel, ModelRequest, reply


@tool
async def look() -> str:
    """Look around."""
    return "nothing new"


def looks_until(rounds: int | None) -> Any:
    def model(request: ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m.role == "tool")
        if rounds is not None and done >= rounds:
            return reply(f"looked {done} times")
        return reply(tool_calls=[("look", {})])

    return model


async def _run(rounds: int | None, options: RunOptions | None = None) -> Any:
    async with Runtime() as runtime:
        agent = Agent("looker", FunctionModel(looks_until(rounds)), tools=[look])
        session = await runtime.create_session(agent)
        return await session.run("Look.", options=options)


async def test_a_runaway_run_ends_at_the_default_bound() -> None:
    assert DEFAULT_MAX_ROUNDS == 50 and RunOptions().max_rounds == DEFAULT_MAX_ROUNDS
    result = await _run(None)
    assert result.status is RunStatus.BUDGET_EXHAUSTED
    assert result.error == f"max_rounds ({DEFAULT_MAX_ROUNDS}) reached"
    assert result.rounds == DEFAULT_MAX_ROUNDS


async def test_max_rounds_raises_lowers_or_lifts_the_bound() -> None:
    lowered = await _run(None, RunOptions(max_rounds=3))
    assert (lowered.status, lowered.rounds) == (RunStatus.BUDGET_EXHAUSTED, 3)
    raised = await _run(60, RunOptions(max_rounds=80))
    assert (raised.status, raised.text) == (RunStatus.COMPLETED, "looked 60 times")
    lifted = await _run(DEFAULT_MAX_ROUNDS + 10, RunOptions(max_rounds=None))
    assert (lifted.status, lifted.rounds) == (RunStatus.COMPLETED, DEFAULT_MAX_ROUNDS + 11)
