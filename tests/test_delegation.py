from __future__ import annotations

import asyncio
import json
from typing import Any

import pydantic
import pytest

from barriers import Overlap
from taskloom import (
    Agent,
    ConfigurationError,
    ModelRequest,
    RunOptions,
    RunStatus,
    Runtime,
    Tool,
    ToolEffect,
    Usage,
    tool,
)
from taskloom.delegation import ChildStatus, SubAgent, child_status
from taskloom.events import Event, SubagentFinished, SubagentStarted, TextDelta, origin_label
from taskloom.models import FunctionModel, ScriptedModel, reply


@tool(effect=ToolEffect.READ_ONLY)
async def slow_search(query: str) -> str:
    """Search slowly."""
    await asyncio.sleep(0.5)
    return f"results for {query}"


def researcher_model(name: str = "researcher") -> FunctionModel:
    """Each child: one search for its task, then an answer naming the task."""

    def answer(request: ModelRequest) -> Any:
        task = request.messages[0].text
        if len(request.messages) == 1:
            return reply(tool_calls=[("slow_search", {"query": task})], usage=Usage(10, 2))
        return reply(f"summary of {task}", usage=Usage(20, 3))

    return FunctionModel(answer, name=name)


def researcher(search: Tool = slow_search, **kw: Any) -> SubAgent:
    return SubAgent(
        "researcher",
        "Researches one topic.",
        researcher_model(),
        "You research.",
        tools=[search],
        **kw,
    )


async def test_a_subagent_answers_with_a_clean_context() -> None:
    sub = researcher()
    lead = ScriptedModel(
        [
            reply(
                "I'll delegate.", tool_calls=[("researcher", {"task": "tides"})], usage=Usage(5, 1)
            ),
            reply("done", usage=Usage(5, 1)),
        ]
    )
    runtime = Runtime()
    session = await runtime.create_session(Agent("lead", lead, "Lead.", tools=[sub]))
    result = await session.run("research tides")
    answer = json.loads(lead.requests[1].messages[-1].results[0].content)
    assert answer == {"answer": "summary of tides", "tokens": 35}
    # the child saw only its task, not the parent's conversation
    child_model = sub.agent.model
    assert [m.text for m in child_model.requests[0].messages] == ["tides"]  # type: ignore[union-attr]
    # the parent's usage includes the child's
    assert result.usage == Usage(10 + 30, 2 + 5, requests=2 + 2)
    # linked from the parent's log, with artifact and edge
    entries = await session.entries()
    link = next(e for e in entries if e.kind == "subagent")
    child_id = link.data["child_session_id"]
    assert link.data["edge"] == {"parent": session.id, "child": child_id}
    report = next(e for e in entries if e.kind == "subagent_report")
    assert report.data["artifact"]["status"] == "done"
    assert report.data["artifact"]["result_summary"] == "summary of tides"
    assert set(report.data["artifact"]) == {
        "kind",
        "agent_id",
        "role",
        "status",
        "task_summary",
        "result_summary",
    }
    # exactly one terminal entry in the child's own log
    child_entries = await runtime.store.load(child_id)
    kinds = [e.kind for e in child_entries]
    assert kinds.count("subagent_result") == 1 and kinds.index("subagent_started") < kinds.index(
        "subagent_result"
    )
    assert child_entries[-1].data["report"] == "summary of tides"
    assert await child_status(runtime, child_id) is ChildStatus.DONE
    assert (await runtime.store.get(child_id)).parent_id == session.id


async def test_three_children_fan_out_in_parallel() -> None:
    overlap = Overlap(3)

    @tool(name="slow_search", effect=ToolEffect.READ_ONLY)
    async def search_together(query: str) -> str:
        """Search, once every child is searching."""
        async with overlap.inside(query):
            return f"results for {query}"

    sub = researcher(search_together)
    lead = ScriptedModel(
        [
            reply(tool_calls=[("researcher", {"task": t}) for t in ("tides", "winds", "waves")]),
            reply("synthesis"),
        ]
    )
    result = await Agent("lead", lead, tools=[sub]).run("go")
    assert overlap.overlapped, overlap.log  # every child was searching before any finished
    answers = [json.loads(r.content)["answer"] for r in lead.requests[1].messages[-1].results]
    assert answers == ["summary of tides", "summary of winds", "summary of waves"]  # call order
    assert result.usage.requests == 2 + 3 * 2


async def test_child_events_reach_the_parent_tagged_with_their_origin() -> None:
    sub = researcher()
    lead = ScriptedModel(
        [
            reply(tool_calls=[("researcher", {"task": "a", "name": "deep dive #1 > more"})]),
            reply("ok"),
        ]
    )
    session = await Runtime().create_session(Agent("lead", lead, tools=[sub]))
    events: list[Event] = []
    await session.run("go", emit=events.append)
    started = next(e for e in events if isinstance(e, SubagentStarted))
    assert started.origin == "" and started.session_id == session.id
    expected = f"deep-dive-1-more#{started.child_session_id[:8]}"
    child_events = [e for e in events if e.origin]
    assert child_events and all(e.origin == expected for e in child_events)
    assert all(e.session_id == started.child_session_id for e in child_events)
    assert "".join(e.text for e in child_events if isinstance(e, TextDelta)) == "summary of a"
    finished = next(e for e in events if isinstance(e, SubagentFinished))
    assert finished.status == "done"


def test_origin_labels_are_sanitized_and_nest() -> None:
    assert origin_label("a b#c>d", "0123456789abcdef") == "a-b-c-d#01234567"
    assert origin_label("x" * 50, "abcdefgh99") == "x" * 32 + "#abcdefgh"
    assert origin_label("kid", "ffffffff00", "parent#12345678") == "parent#12345678>kid#ffffffff"


async def test_transcript_can_splice_children_in() -> None:
    sub = researcher()
    lead = ScriptedModel([reply(tool_calls=[("researcher", {"task": "tides"})]), reply("done")])
    session = await Runtime().create_session(Agent("lead", lead, tools=[sub]))
    await session.run("go")
    plain = await session.transcript()
    full = await session.transcript(include_children=True)
    assert [m.role for m in plain] == ["user", "assistant", "tool", "assistant"]
    origins = [m.origin for m in full]
    assert origins[:2] == ["", ""] and origins[-2:] == ["", ""]
    child = [m for m in full if m.origin]
    assert [m.role for m in child] == ["user", "assistant", "tool", "assistant"]
    assert child[0].origin.startswith("researcher#")
    # the child's messages come right after the parent's turn that delegated
    assert full.index(child[0]) == 2


async def test_output_schema_makes_the_answer_validated_json() -> None:
    class Facts(pydantic.BaseModel):
        city: str
        population: int

    child_model = ScriptedModel(['{"city": "Oslo"}', '{"city": "Oslo", "population": 700000}'])
    sub = SubAgent("facts", "Finds facts.", child_model, "Answer in JSON.", output_type=Facts)
    lead = ScriptedModel([reply(tool_calls=[("facts", {"task": "Oslo"})]), reply("ok")])
    await Agent("lead", lead, tools=[sub]).run("go")
    answer = json.loads(lead.requests[1].messages[-1].results[0].content)["answer"]
    assert answer == {"city": "Oslo", "population": 700000}
    assert child_model.requests[0].output_schema is not None
    assert "population" in child_model.requests[1].messages[-1].text  # the fix round


async def test_a_child_that_cannot_fix_its_answer_fails_in_band() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    sub = SubAgent(
        "counter", "Counts.", ScriptedModel(["no", "still no"]), output_type=schema, fixes=1
    )
    lead = ScriptedModel([reply(tool_calls=[("counter", {"task": "count"})]), reply("ok")])
    runtime = Runtime()
    session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
    result = await session.run("go")
    assert result.status is RunStatus.COMPLETED  # the parent goes on
    error = lead.requests[1].messages[-1].results[0]
    assert error.is_error and "failed" in error.content and "output schema" in error.content
    child_id = next(e for e in await session.entries() if e.kind == "subagent").data[
        "child_session_id"
    ]
    assert await child_status(runtime, child_id) is ChildStatus.FAILED


async def test_empty_task_is_answered_in_band() -> None:
    lead = ScriptedModel([reply(tool_calls=[("researcher", {"task": "  "})]), reply("ok")])
    await Agent("lead", lead, tools=[researcher()]).run("go")
    out = lead.requests[1].messages[-1].results[0]
    assert out.is_error and "'task' is empty" in out.content


def test_children_cannot_delegate_or_ask_for_approval() -> None:
    @tool(needs_approval=True)
    def pay() -> str:
        """Pay."""
        return "paid"

    with pytest.raises(ConfigurationError, match="'pay' needs approval"):
        SubAgent("payer", "Pays.", ScriptedModel([]), tools=[pay])
    with pytest.raises(ConfigurationError, match="one level deep"):
        SubAgent("boss", "Delegates.", ScriptedModel([]), tools=[researcher()])


async def test_a_child_hitting_an_approval_gate_at_runtime_is_denied_and_fails() -> None:
    ran: list[int] = []

    @tool
    def risky() -> str:
        """Risky."""
        ran.append(1)
        return "did it"

    sub = SubAgent(
        "worker",
        "Works.",
        ScriptedModel([reply(tool_calls=[("risky", {})]), reply("never")]),
        tools=[risky],
    )
    risky.needs_approval = (
        True  # became gated after construction: only a runtime check can catch it
    )
    lead = ScriptedModel([reply(tool_calls=[("worker", {"task": "do it"})]), reply("ok")])
    runtime = Runtime()
    session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
    await session.run("go")
    assert ran == []
    out = lead.requests[1].messages[-1].results[0]
    assert out.is_error and "approval" in out.content
    child_id = next(e for e in await session.entries() if e.kind == "subagent").data[
        "child_session_id"
    ]
    child_entries = await runtime.store.load(child_id)
    assert [e.data["status"] for e in child_entries if e.kind == "subagent_result"] == ["failed"]
    denied = [e for e in child_entries if e.kind == "approval_decision"]
    assert len(denied) == 1 and denied[0].data["approved"] is False


async def test_needs_approval_gates_the_delegation_itself() -> None:
    sub = researcher(needs_approval=True)
    lead = ScriptedModel([reply(tool_calls=[("researcher", {"task": "x"})]), reply("ok")])
    result = await Agent("lead", lead, tools=[sub]).run("go")
    assert result.status is RunStatus.AWAITING_APPROVAL and result.pending[0].name == "researcher"


async def test_stopping_the_parent_cascades_to_children() -> None:
    started = asyncio.Event()

    def child_answer(request: ModelRequest) -> Any:
        started.set()
        return reply(tool_calls=[("slow_search", {"query": "x"})])

    sub = SubAgent("looper", "Loops.", FunctionModel(child_answer), tools=[slow_search])
    lead = ScriptedModel([reply(tool_calls=[("looper", {"task": "loop"})]), reply("after")])
    options = RunOptions()
    runtime = Runtime()
    session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
    task = asyncio.create_task(session.run("go", options=options))
    await started.wait()
    options.stop.set()
    result = await task
    assert result.status is RunStatus.STOPPED
    child_id = next(e for e in await session.entries() if e.kind == "subagent").data[
        "child_session_id"
    ]
    assert await child_status(runtime, child_id) is ChildStatus.STOPPED


async def test_cancelling_the_parent_cancels_children_and_ends_them_stopped() -> None:
    started = asyncio.Event()

    async def child_answer(request: ModelRequest) -> Any:
        started.set()
        await asyncio.sleep(10)
        return reply("never")

    sub = SubAgent("sleeper", "Sleeps.", FunctionModel(child_answer))
    lead = ScriptedModel([reply(tool_calls=[("sleeper", {"task": "sleep"})])])
    runtime = Runtime()
    session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
    task = asyncio.create_task(session.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child_id = next(e for e in await session.entries() if e.kind == "subagent").data[
        "child_session_id"
    ]
    assert await child_status(runtime, child_id) is ChildStatus.STOPPED


async def test_children_share_the_parents_deadline_and_token_budget() -> None:
    def child_answer(request: ModelRequest) -> Any:
        return reply(tool_calls=[("slow_search", {"query": "x"})], usage=Usage(100, 0))

    sub = SubAgent("spender", "Spends.", FunctionModel(child_answer), tools=[slow_search])
    lead = ScriptedModel(
        [reply(tool_calls=[("spender", {"task": "spend"})], usage=Usage(10, 0)), reply("ok")]
    )
    session = await Runtime().create_session(Agent("lead", lead, tools=[sub]))
    result = await session.run("go", options=RunOptions(token_budget=250))
    # the child stopped once the shared counter passed 250, and so did the parent
    assert result.status is RunStatus.BUDGET_EXHAUSTED and len(lead.requests) == 1
    assert result.usage.input_tokens == 10 + 300
    out = (await session.transcript())[-1].results[0]
    assert out.is_error and "budget" in out.content
