"""Toolsets: tools an agent gets from elsewhere (an MCP server), whose list may
change between rounds; a change is offered from the next round boundary on,
never in the middle of a round."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from taskloom import Agent, RunStatus, Runtime, Tool, ToolEffect, tool
from taskloom.errors import ConfigurationError
from taskloom.models import ScriptedModel, reply
from taskloom.runtime import SessionTools
from taskloom.tools import ToolHost, Toolset


@tool(effect=ToolEffect.READ_ONLY)
def alpha() -> str:
    """The first tool."""
    return "alpha"


@tool(effect=ToolEffect.READ_ONLY)
def beta() -> str:
    """A tool that appears later."""
    return "beta"


class Shelf:
    """A toolset whose list the test changes; it counts how often it is asked."""

    name = "shelf"

    def __init__(self, *tools: Tool) -> None:
        self.listing: tuple[Tool, ...] = tools
        self.asked = 0

    def offer(self, *tools: Tool) -> None:
        self.listing = tools  # a new tuple: the list changed

    async def current_tools(self, host: ToolHost) -> Sequence[Tool]:
        self.asked += 1
        return self.listing


def test_an_agent_keeps_toolsets_apart_from_its_own_tools() -> None:
    shelf = Shelf(alpha)
    agent = Agent("a", ScriptedModel([]), tools=[shelf, beta])
    assert isinstance(shelf, Toolset)
    assert agent.tools == (beta,) and agent.toolsets == (shelf,)
    assert agent.replace(name="b").toolsets == (shelf,)
    assert Agent("plain", ScriptedModel([]), tools=[beta]).toolsets == ()


async def test_a_changed_list_is_offered_from_the_next_round_never_mid_round() -> None:
    shelf = Shelf(alpha)

    @tool
    def restock() -> str:
        """Put beta on the shelf."""
        shelf.offer(alpha, beta)
        return "restocked"

    model = ScriptedModel(
        [
            reply(tool_calls=[("restock", {})]),
            reply(tool_calls=[("alpha", {})]),  # no change: the same list
            reply(tool_calls=[("beta", {})]),
            "done",
        ]
    )
    runtime = Runtime()
    session = await runtime.create_session(Agent("a", model, tools=[shelf, restock]))
    result = await session.run("go")
    assert result.status is RunStatus.COMPLETED
    offered = [tuple(t.name for t in r.tools) for r in model.requests]
    assert offered[0] == ("restock", "alpha")
    assert offered[1] == offered[2] == offered[3] == ("restock", "alpha", "beta")
    # Unchanged lists are not rebuilt: the model gets the very same specs.
    assert model.requests[2].tools is model.requests[3].tools
    assert shelf.asked == 4  # once per round boundary


async def test_a_call_made_in_the_round_the_list_changed_sees_the_old_list() -> None:
    shelf = Shelf(alpha)

    @tool
    def restock() -> str:
        """Put beta on the shelf."""
        shelf.offer(alpha, beta)
        return "restocked"

    model = ScriptedModel([reply(tool_calls=[("restock", {}), ("beta", {})]), "done"])
    runtime = Runtime()
    session = await runtime.create_session(Agent("a", model, tools=[shelf, restock]))
    await session.run("go")
    results = [b for m in await session.transcript() for b in m.blocks if b.type == "tool_result"]
    assert results[1].is_error and "Unknown tool 'beta'" in results[1].content


async def test_two_tools_of_one_name_are_a_configuration_error_naming_both() -> None:
    runtime = Runtime()
    session = await runtime.create_session(
        Agent("a", ScriptedModel(["x"]), tools=[Shelf(alpha), alpha])
    )
    with pytest.raises(ConfigurationError) as caught:
        await session.run("go")
    message = str(caught.value)
    assert (
        "'alpha'" in message and "the agent's own tools" in message and "Shelf 'shelf'" in message
    )


async def test_an_agent_without_toolsets_pays_nothing_for_them() -> None:
    model = ScriptedModel([reply(tool_calls=[("alpha", {})]), "done"])
    runtime = Runtime()
    session = await runtime.create_session(Agent("a", model, tools=[alpha]))
    await session.run("go")
    assert model.requests[0].tools is model.requests[1].tools
    board = SessionTools(runtime, session.agent)
    await board.refresh_tools()
    assert board.tool_specs is session.agent.tool_specs  # nothing re-read, nothing rebuilt
