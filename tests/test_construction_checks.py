"""Mistakes fail at construction, saying what is wrong and what is valid; streaming
tools; approval predicates on validated arguments."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from taskloom import (
    Agent,
    ConfigurationError,
    RunOptions,
    RunStatus,
    Runtime,
    ToolContext,
    tool,
)
from taskloom.entries import ApprovalRequests, RequestedCall
from taskloom.events import ApprovalRequested, Event, ToolProgress
from taskloom.models import ScriptedModel, reply

MODEL = ScriptedModel([])


# ---------------------------------------------------------------- Agent


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"model": 123}, r"model must be a Model .* or a 'provider:model' string"),
        ({"model": "gpt-4.1"}, r"model 'gpt-4.1' is not a Model .* 'openai:gpt-4.1-mini'"),
        ({"model": None}, "has no model: pass model="),
        ({"model": MODEL, "instructions": 42}, "instructions must be a string"),
        ({"model": MODEL, "instructions": ["be brief"]}, "instructions must be a string"),
        ({"model": MODEL, "name": ""}, "name must be a non-empty string"),
        ({"model": MODEL, "tools": "add"}, "tools must be a list of tools"),
        ({"model": MODEL, "fixes": -1}, "fixes must be an int of at least 0"),
        ({"model": MODEL, "settings": {"temperature": 0}}, "settings must be a"),
        ({"model": MODEL, "output_type": 5}, "output_type must be a type pydantic validates"),
        ({"model": MODEL, "deps_type": "Deps"}, "deps_type must be a type"),
    ],
)
def test_agent_arguments_are_checked_at_construction(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        Agent(**options)


def test_a_provider_model_string_is_accepted_without_resolving_it() -> None:
    agent = Agent(model="openai:gpt-4.1-mini")  # no key needed until a run
    assert agent.model == "openai:gpt-4.1-mini"


# ---------------------------------------------------------------- RunOptions


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"max_rounds": "4"}, r"max_rounds='4'\): max_rounds must be an int .*, not a str"),
        ({"max_rounds": 0}, "max_rounds must be an int of at least 1"),
        ({"max_model_requests": -3}, "max_model_requests must be an int of at least 1"),
        ({"max_tool_calls": -1}, "max_tool_calls must be an int of at least 0"),
        ({"max_tool_calls": 2.5}, "max_tool_calls must be an int"),
        ({"token_budget": True}, "token_budget must be an int .*, not a bool"),
        ({"deadline": "30"}, r"deadline must be seconds .*, a datetime, or None, not a str"),
        ({"deadline": -1}, "deadline must be seconds from the start"),
        ({"deadline": math.nan}, "deadline must be seconds from the start"),
        ({"stop": True}, "stop must be a taskloom.StopSignal"),
        ({"strategy": "fast"}, "strategy must be a RoundStrategy"),
        ({"retry": 3}, "retry must be a taskloom.models.RetryPolicy"),
    ],
)
def test_run_options_are_checked_at_construction(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        RunOptions(**options)


def test_valid_run_options_pass() -> None:
    RunOptions(max_rounds=1, max_tool_calls=0, token_budget=10, deadline=0)
    RunOptions(deadline=2.5)


def test_a_misspelt_store_url_names_the_schemes() -> None:
    with pytest.raises(ConfigurationError, match=r"memory://.*sqlite.*postgresql"):
        Runtime(store="sqlit:///x.db")


# ---------------------------------------------------------------- streaming tools


async def test_an_async_generator_tool_streams_progress_and_its_last_value_is_the_result() -> None:
    @tool
    async def count(to: int, ctx: ToolContext) -> AsyncIterator[str]:
        """Count up."""
        for i in range(1, to + 1):
            yield f"{i} of {to}"
            await asyncio.sleep(0)

    model = ScriptedModel([reply(tool_calls=[("count", {"to": 3})]), reply("ok")])
    events: list[Event] = []
    session = await Runtime().create_session(Agent(model=model, tools=[count]))
    await session.run("go", emit=events.append)

    progress = [e.message for e in events if isinstance(e, ToolProgress)]
    assert progress == ["1 of 3", "2 of 3", "3 of 3"]
    (result,) = model.requests[1].messages[-1].results
    assert result.content == "3 of 3" and not result.is_error
    assert count.input_schema["properties"] == {"to": {"type": "integer"}}


async def test_a_sync_generator_tool_streams_too() -> None:
    @tool
    def lines() -> Iterator[dict[str, int]]:
        """Lines."""
        yield {"done": 1}
        yield {"done": 2}

    model = ScriptedModel([reply(tool_calls=[("lines", {})]), reply("ok")])
    events: list[Event] = []
    await (await Runtime().create_session(Agent(model=model, tools=[lines]))).run(
        "go", emit=events.append
    )
    assert [e.message for e in events if isinstance(e, ToolProgress)] == [
        '{"done": 1}',
        '{"done": 2}',
    ]
    assert model.requests[1].messages[-1].results[0].content == '{"done": 2}'


async def test_a_streaming_tool_that_raises_is_an_error_result() -> None:
    @tool
    async def flaky() -> AsyncIterator[str]:
        """Flaky."""
        yield "started"
        raise RuntimeError("disk full")

    model = ScriptedModel([reply(tool_calls=[("flaky", {})]), reply("ok")])
    await Agent(model=model, tools=[flaky]).run("go")
    result = model.requests[1].messages[-1].results[0]
    assert result.is_error and result.content == "RuntimeError: disk full"


# ---------------------------------------------------------------- approval predicates


async def test_an_approval_predicate_sees_validated_arguments() -> None:
    seen: list[dict[str, Any]] = []

    def expensive(args: dict[str, Any]) -> bool:
        seen.append(args)
        return bool(args["total"] * args["quantity"] > 100)

    @tool(needs_approval=expensive)
    def order(total: float, quantity: int = 1) -> str:
        """Order."""
        return "ordered"

    # "60" is coerced to 60.0 and quantity gets its default: 60 * 1 runs at once.
    model = ScriptedModel([reply(tool_calls=[("order", {"total": "60"})]), reply("ok")])
    result = await Agent(model=model, tools=[order]).run("go")
    assert result.status is RunStatus.COMPLETED
    assert seen == [{"total": 60.0, "quantity": 1}]


async def test_arguments_that_fail_validation_need_no_approval_and_never_run() -> None:
    ran: list[str] = []

    @tool(needs_approval=lambda args: True)
    def order(total: float) -> str:
        """Order."""
        ran.append("ran")
        return "ordered"

    model = ScriptedModel([reply(tool_calls=[("order", {"total": "a lot"})]), reply("ok")])
    result = await Agent(model=model, tools=[order]).run("go")
    assert result.status is RunStatus.COMPLETED and ran == []
    assert model.requests[1].messages[-1].results[0].is_error


async def test_a_raising_predicate_parks_the_call_and_says_why() -> None:
    @tool(needs_approval=lambda args: args["budget"]["limit"] < args["total"])
    def order(total: float, budget: dict[str, float]) -> str:
        """Order."""
        return "ordered"

    model = ScriptedModel([reply(tool_calls=[("order", {"total": 5, "budget": {}})])])
    events: list[Event] = []
    session = await Runtime().create_session(Agent(model=model, tools=[order]))
    result = await session.run("go", emit=events.append)

    assert result.status is RunStatus.AWAITING_APPROVAL
    (pending,) = result.pending
    why = "its needs_approval check raised KeyError: 'limit'"
    assert pending.reason == why
    assert [c.reason for c in await session.pending()] == [why]
    assert [e.reason for e in events if isinstance(e, ApprovalRequested)] == [why]
    # Read back from the store by another process: the reason is in the log.
    other = await session.runtime.open_session(session.id, session.agent)
    assert [c.reason for c in await other.pending()] == [why]


def test_requested_calls_read_tolerantly_with_or_without_a_reason() -> None:
    with_reason = ApprovalRequests(3, (RequestedCall("c1", "t", {"a": 1}, "h", "why"),))
    data = with_reason.to_data()
    assert data["calls"][0]["reason"] == "why"
    assert ApprovalRequests.from_data(data) == with_reason
    old = {"turn": 3, "calls": [{"call_id": "c1", "name": "t", "arguments": {}, "hash": "h"}]}
    (call,) = ApprovalRequests.from_data(old).calls
    assert call.reason is None
    plain = ApprovalRequests(3, (RequestedCall("c1", "t", {}, "h"),)).to_data()
    assert "reason" not in plain["calls"][0]
