from __future__ import annotations

import pytest

from store_signals import SignalingStore
from taskloom import Agent, RunStatus, Runtime, ToolContext, ToolEffect, tool
from taskloom.errors import ModelScriptExhausted
from taskloom.events import (
    ModelRequestStarted,
    RoundCommitted,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
)
from taskloom.models import ScriptedModel, reply


@tool(effect=ToolEffect.READ_ONLY)
async def count(n: int, ctx: ToolContext) -> int:
    """Count to n, reporting progress."""
    for i in range(n):
        ctx.progress(f"at {i}", step=i)
    return n


async def test_stream_yields_the_run_in_order_with_session_ids() -> None:
    model = ScriptedModel([reply(tool_calls=[("count", {"n": 2})]), reply("two words")])
    session = await Runtime().create_session(Agent(model=model, tools=[count]))
    stream = session.stream("go")
    events = [e async for e in stream]
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "RunStarted",
        "ModelRequestStarted",
        "ToolCallStarted",
        "ToolProgress",
        "ToolProgress",
        "ToolCallFinished",
        "RoundCommitted",
        "ModelRequestStarted",
        "TextDelta",
        "TextDelta",
        "RoundCommitted",
        "RunFinished",
    ]
    assert all(e.session_id == session.id and e.origin == "" for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "two words"
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert progress[1].data == {"step": 1} and progress[1].call_id == "call_1"
    assert stream.result is not None and stream.result.status is RunStatus.COMPLETED
    assert isinstance(events[-1], RunFinished) and events[-1].result == stream.result


async def test_a_slow_subscriber_does_not_slow_the_run() -> None:
    text = " ".join(["w"] * 5000)
    model = ScriptedModel([text])
    store = SignalingStore()
    session = await Runtime(store=store).create_session(Agent(model=model))
    stream = session.stream("go")
    seen = []
    async for event in stream:
        seen.append(event)
        if len(seen) == 1:
            # The subscriber reads nothing more until the run has ended.
            await store.runs_finished.reached(1)
    assert stream.result is not None and stream.result.text == text
    assert stream.dropped > 0  # deltas were dropped, not queued without bound
    assert isinstance(seen[-1], RunFinished) and any(isinstance(e, RoundCommitted) for e in seen)


async def test_leaving_the_stream_cancels_the_run() -> None:
    model = ScriptedModel([reply("slow", delay=5)])
    session = await Runtime().create_session(Agent(model=model))
    async for event in session.stream("go"):
        if isinstance(event, ModelRequestStarted):
            break
    assert [m.role for m in await session.transcript()] == ["user"]


async def test_stream_reraises_run_errors() -> None:
    session = await Runtime().create_session(Agent(model=ScriptedModel([])))
    with pytest.raises(ModelScriptExhausted):
        async for _ in session.stream("go"):
            pass


async def test_agent_stream_shortcut() -> None:
    events = [e async for e in Agent(model=ScriptedModel(["hi"])).stream("x")]
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    assert not any(isinstance(e, ToolCallStarted | ToolCallFinished) for e in events)


async def test_progress_from_a_sync_tool_thread_reaches_the_stream() -> None:
    @tool
    def crunch(ctx: ToolContext) -> str:
        """Crunch in a worker thread, reporting progress."""
        for i in range(3):
            ctx.progress(f"step {i}")
        return "crunched"

    model = ScriptedModel([reply(tool_calls=[("crunch", {})]), reply("done")])
    session = await Runtime().create_session(Agent(model=model, tools=[crunch]))
    events = [e async for e in session.stream("go")]
    steps = [e.message for e in events if isinstance(e, ToolProgress)]
    assert steps == ["step 0", "step 1", "step 2"]
    finished = next(i for i, e in enumerate(events) if isinstance(e, ToolCallFinished))
    assert all(events.index(e) < finished for e in events if isinstance(e, ToolProgress))
