"""The result of a finished run read back from the log (`SessionLog.finished_result`,
`Session.wait`, any process): the very `RunResult` the run returned, and logs
written before `RunFinishedEntry` recorded counts and own usage still read."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic

from taskloom import Agent, RunResult, RunStatus, Runtime, tool
from taskloom.backends.memory import MemoryStore
from taskloom.entries import Entry, EntryKind, MessageEntry, RunFinishedEntry
from taskloom.errors import ProviderError
from taskloom.log import SessionLog
from taskloom.loop import RunOptions
from taskloom.messages import Message, Usage
from taskloom.models import FunctionModel, ModelRequest, RetryPolicy, ScriptedModel, reply
from taskloom.runtime import Session

FAST = RetryPolicy(initial_delay=0.001, max_delay=0.001)


async def read_back(store: MemoryStore, session_id: str, agent: Agent) -> RunResult | None:
    """The latest result as another process sees it: a fresh runtime on the store."""
    session = await Runtime(store=store).open_session(session_id, agent)
    return latest_result(session)


def latest_result(session: Session[Any, Any]) -> RunResult | None:
    """The result of the session's latest finished run, from its log as last synced."""
    return session.journal.log.finished_result(session.id, session.agent)


@tool
def touch(n: int) -> str:
    """Touch."""
    return f"touched {n}"


async def test_a_run_with_tool_calls_and_retries_reads_back_as_it_returned() -> None:
    failed: list[int] = []

    def model(request: ModelRequest) -> Any:
        if request.messages[-1].role == "user":
            if not failed:
                failed.append(1)
                raise ProviderError("overloaded", status=503)
            calls = [("touch", {"n": 1}, "a"), ("touch", {"n": 2}, "b")]
            return reply(tool_calls=calls, usage=Usage(100, 10))
        return reply("done", usage=Usage(40, 4))

    store = MemoryStore()
    agent = Agent("t", FunctionModel(model), tools=[touch])
    session = await Runtime(store=store).create_session(agent)
    result = await session.run("go", options=RunOptions(retry=FAST))

    assert (result.tool_calls, result.transport_retries, result.model_requests) == (2, 1, 3)
    assert result.own_usage == result.usage == Usage(140, 14, requests=2)
    assert latest_result(session) == result
    assert await read_back(store, session.id, agent) == result


async def test_a_parked_run_reads_back_with_its_pending_calls_and_their_reasons() -> None:
    @tool(needs_approval=lambda args: args["budget"]["limit"] < args["total"])
    def order(total: float, budget: dict[str, float]) -> str:
        """Order."""
        return "ordered"

    store = MemoryStore()
    model = ScriptedModel([reply(tool_calls=[("order", {"total": 5, "budget": {}})])])
    agent = Agent("o", model, tools=[order])
    session = await Runtime(store=store).create_session(agent)
    result = await session.run("go")

    assert result.status is RunStatus.AWAITING_APPROVAL
    assert result.pending[0].reason == "its needs_approval check raised KeyError: 'limit'"
    assert await read_back(store, session.id, agent) == result


class Invoice(pydantic.BaseModel):
    number: str
    total: float


async def test_an_answer_through_the_final_answer_tool_reads_back_with_its_text_and_type() -> None:
    answer = {"number": "A-1", "total": 12.5}
    model = ScriptedModel(
        [reply("here it is", tool_calls=[("final_result", answer)])], native_output=False
    )
    store = MemoryStore()
    agent = Agent("i", model, output_type=Invoice)
    session = await Runtime(store=store).create_session(agent)
    result = await session.run("go")

    assert result.output == Invoice(number="A-1", total=12.5)
    assert result.text != "here it is"  # the answer as JSON, not the message's text
    assert await read_back(store, session.id, agent) == result


async def test_a_text_answer_reads_back_with_its_text_as_output() -> None:
    store = MemoryStore()
    agent = Agent("p", ScriptedModel(["plain words"]))
    session = await Runtime(store=store).create_session(agent)
    result = await session.run("go")

    assert result.output == "plain words"
    assert await read_back(store, session.id, agent) == result


def test_a_run_end_written_before_counts_were_recorded_still_reads() -> None:
    old = {
        "status": "completed",
        "error": None,
        "usage": {"input_tokens": 7, "output_tokens": 3, "requests": 2},
        "rounds": 2,
        "model_requests": 2,
        "output": None,
    }
    payload = Entry(EntryKind.RUN_FINISHED, old).payload
    assert isinstance(payload, RunFinishedEntry)
    assert (payload.tool_calls, payload.transport_retries) == (0, 0)
    assert payload.own_usage is None and payload.text is None
    assert payload.to_data() == {
        **old,
        "tool_calls": 0,
        "transport_retries": 0,
        "usage": {**Usage(7, 3, requests=2).to_dict()},
    }

    log = SessionLog()
    log.apply(Entry(EntryKind.MESSAGE, MessageEntry(Message.user("hi")).to_data()).placed(1))
    answer = Message.assistant("hello")
    log.apply(Entry(EntryKind.MESSAGE, MessageEntry(answer).to_data(), "r1").placed(2))
    log.apply(Entry(EntryKind.RUN_FINISHED, old, "r1").placed(3))
    result = log.finished_result("s1")
    assert result is not None
    assert result == RunResult(
        RunStatus.COMPLETED,
        text="hello",
        usage=Usage(7, 3, requests=2),
        session_id="s1",
        run_id="r1",
        rounds=2,
        model_requests=2,
    )


def test_a_log_without_a_finished_run_has_no_result() -> None:
    assert SessionLog().finished_result("s1") is None


async def test_the_latest_result_is_the_finished_runs_while_another_run_goes_on() -> None:
    from taskloom import tool

    gate, inside = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        """Take a while."""
        inside.set()
        await gate.wait()
        return "ok"

    def answers(request: ModelRequest) -> Any:
        users = [m for m in request.messages if m.role == "user"]
        if len(users) == 1:
            return reply("first answer")
        if request.messages[-1].role != "tool":
            return reply("let me look (second run, unfinished)", tool_calls=[("slow", {})])
        return reply("second answer")

    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", FunctionModel(answers), tools=[slow]))
        first = await session.run("one")
        second = asyncio.create_task(session.run("two"))
        await inside.wait()
        other = await runtime.open_session(session.id, session.agent)
        seen = latest_result(other)
        gate.set()
        await second
    assert seen is not None
    assert (seen.run_id, seen.status, seen.text) == (first.run_id, first.status, "first answer")
