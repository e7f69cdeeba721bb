from __future__ import annotations

import pickle
from typing import Any

from taskloom import Agent, ReasoningOptions, RunOptions, RunStatus, Runtime, ToolEffect, tool
from taskloom.loop import (
    Continue,
    Inject,
    ReasoningChange,
    RoundAdjustment,
    RoundBoundary,
    RoundContext,
    RoundDecision,
)
from taskloom.models import ModelRequest, ScriptedModel, reply
from taskloom.runtime import SessionModel


@tool(effect=ToolEffect.READ_ONLY)
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "bad":
        raise ValueError("no such key")
    return key.upper()


def script() -> list[Any]:
    return [
        reply(tool_calls=[("lookup", {"key": "a"}), ("lookup", {"key": "bad"})]),
        reply(tool_calls=[("lookup", {"key": "b"})]),
        reply("final"),
    ]


class Recorder:
    def __init__(self, decide: Any = None) -> None:
        self.seen: list[RoundContext] = []
        self.decide = decide

    async def on_round(self, ctx: RoundContext) -> RoundDecision:
        self.seen.append(ctx)
        if self.decide is not None:
            return self.decide(ctx)
        return RoundDecision.proceed()


def wire(requests: list[ModelRequest]) -> list[Any]:
    """Everything a model request carries, as plain data."""
    return [
        (
            [m.to_dict() for m in r.messages],
            r.system,
            [(t.name, t.description, dict(t.input_schema)) for t in r.tools],
            r.settings,
            r.output_schema,
        )
        for r in requests
    ]


async def run_with(strategy: Any) -> tuple[ScriptedModel, Any]:
    model = ScriptedModel(script())
    result = await Agent(model=model, instructions="sys", tools=[lookup]).run(
        "go", options=RunOptions(strategy=strategy)
    )
    return model, result


async def test_no_strategy_is_exactly_proceed_everywhere() -> None:
    plain, plain_result = await run_with(None)
    recorder = Recorder()
    recorded, recorded_result = await run_with(recorder)
    assert wire(plain.requests) == wire(recorded.requests)
    assert plain_result.text == recorded_result.text == "final"
    assert (plain_result.rounds, plain_result.tool_calls) == (
        recorded_result.rounds,
        recorded_result.tool_calls,
    )
    assert [c.boundary for c in recorder.seen] == [
        RoundBoundary.TOOL_RESULTS_COMMITTED,
        RoundBoundary.TOOL_RESULTS_COMMITTED,
        RoundBoundary.ASSISTANT_MESSAGE_COMMITTED,
    ]


async def test_the_context_carries_what_the_boundary_knows() -> None:
    recorder = Recorder()
    await run_with(recorder)
    first, second, last = recorder.seen
    assert first.assistant_message is None
    assert [(r.tool_use_id, r.tool_name, r.is_error) for r in first.tool_results] == [
        ("call_1", "lookup", False),
        ("call_2", "lookup", True),
    ]
    assert (first.rounds_completed, second.rounds_completed, last.rounds_completed) == (1, 2, 3)
    assert last.tool_results == () and last.assistant_message is not None
    assert last.assistant_message.text == "final"
    assert last.model_requests == 3 and last.transport_retries == 0


async def test_inject_adds_a_corrective_turn_and_asks_again() -> None:
    def decide(ctx: RoundContext) -> RoundDecision:
        if ctx.boundary is RoundBoundary.ASSISTANT_MESSAGE_COMMITTED and ctx.rounds_completed == 1:
            return RoundDecision.inject("Cite your source.")
        return RoundDecision.proceed()

    model = ScriptedModel(["Paris.", "Paris (source: atlas)."])
    result = await Agent(model=model).run(
        "capital of France?", options=RunOptions(strategy=Recorder(decide))
    )
    assert result.status is RunStatus.COMPLETED and result.text == "Paris (source: atlas)."
    assert [m.text for m in model.requests[1].messages] == [
        "capital of France?",
        "Paris.",
        "Cite your source.",
    ]


async def test_inject_after_tool_results() -> None:
    def decide(ctx: RoundContext) -> RoundDecision:
        if ctx.boundary is RoundBoundary.TOOL_RESULTS_COMMITTED and any(
            r.is_error for r in ctx.tool_results
        ):
            return Inject("A lookup failed: do not guess.")
        return Continue()

    model, result = await run_with(Recorder(decide))
    assert result.text == "final"
    assert model.requests[1].messages[-1].text == "A lookup failed: do not guess."
    assert model.requests[1].messages[-2].role == "tool"


async def test_stop_ends_the_run_stopped() -> None:
    model, result = await run_with(Recorder(lambda ctx: RoundDecision.stop()))
    assert result.status is RunStatus.STOPPED
    assert len(model.requests) == 1


async def test_injected_rounds_pass_the_same_budget_checks() -> None:
    always = Recorder(lambda ctx: RoundDecision.inject("again"))
    model = ScriptedModel(["x"] * 10)
    result = await Agent(model=model).run("go", options=RunOptions(strategy=always, max_rounds=3))
    assert result.status is RunStatus.BUDGET_EXHAUSTED and len(model.requests) == 3


async def test_adjustments_switch_model_and_reasoning_and_persist() -> None:
    small = ScriptedModel([reply(tool_calls=[("lookup", {"key": "a"})])], name="small")
    big = ScriptedModel(["big answer", "later answer"], name="big")
    runtime = Runtime(models={big.spec: big})

    def decide(ctx: RoundContext) -> RoundDecision:
        if ctx.rounds_completed == 1:
            return Continue(
                RoundAdjustment(
                    model=big, reasoning=ReasoningChange.set(ReasoningOptions(effort="high"))
                )
            )
        return Continue()

    agent = Agent(model=small, tools=[lookup])
    session = await runtime.create_session(agent)
    result = await session.run("go", options=RunOptions(strategy=Recorder(decide)))
    assert result.text == "big answer"
    assert big.requests[0].settings.reasoning == ReasoningOptions(effort="high")
    # persisted: a fresh Session object over the same log keeps the choice
    reopened = await runtime.open_session(session.id, agent)
    choice = SessionModel(runtime, agent, reopened.journal)
    assert choice.model is big
    await reopened.run("more")
    assert big.requests[1].settings.reasoning == ReasoningOptions(effort="high")
    await reopened.set_reasoning(None)
    assert choice.settings.reasoning is None
    kinds = [e.kind for e in await reopened.entries()]
    assert kinds.count("model_change") == 3


def test_decisions_are_values() -> None:
    assert RoundDecision.proceed() == Continue()
    assert RoundDecision.inject("x") == Inject("x")
    assert RoundDecision.stop().action == "stop"
    assert pickle.loads(
        pickle.dumps(Inject("x", RoundAdjustment(model="openai:gpt-4.1")))
    ) == Inject("x", RoundAdjustment(model="openai:gpt-4.1"))
