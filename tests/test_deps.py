"""Dependencies: `Agent(deps_type=...)`, `run(..., deps=...)`, `ctx.deps` in tools."""

from __future__ import annotations

import dataclasses

import pytest

from taskloom import Agent, RunStatus, Runtime, SubAgent, ToolContext, UsageError, tool
from taskloom.models import ScriptedModel, reply


@dataclasses.dataclass
class Deps:
    """Something a host would not want in a log: a client with its secret."""

    user: str
    secret: str = "s3cr3t-token"


@tool
def whoami(ctx: ToolContext[Deps]) -> str:
    """Whoami."""
    return f"user={ctx.deps.user}"


def asks_whoami(n: int = 1) -> ScriptedModel:
    script = []
    for _ in range(n):
        script += [reply(tool_calls=[("whoami", {})]), reply("done")]
    return ScriptedModel(script)


def seen(model: ScriptedModel, request: int = 1) -> str:
    return model.requests[request].messages[-1].results[0].content


async def test_tools_get_the_runs_deps_and_nothing_is_persisted() -> None:
    model = asks_whoami()
    runtime = Runtime()
    agent = Agent(model=model, tools=[whoami], deps_type=Deps)
    session = await runtime.create_session(agent)
    result = await session.run("who?", deps=Deps("ada"))

    assert result.status is RunStatus.COMPLETED
    assert seen(model) == "user=ada"
    logged = [repr(e.data) for e in await session.entries()]
    assert logged and not any("s3cr3t-token" in text or "Deps(" in text for text in logged)


def test_run_sync_agent_run_and_stream_pass_deps() -> None:
    model = asks_whoami(2)
    agent = Agent(model=model, tools=[whoami], deps_type=Deps)
    agent.run_sync("who?", deps=Deps("bo"))
    assert seen(model) == "user=bo"

    async def streamed() -> None:
        async for _ in agent.stream("who?", deps=Deps("cy")):
            pass

    import asyncio

    asyncio.run(streamed())
    assert seen(model, 3) == "user=cy"


async def test_session_stream_and_resume_pass_deps_per_run() -> None:
    @tool(needs_approval=True)
    def gated(ctx: ToolContext[Deps]) -> str:
        """Gated."""
        return f"gated for {ctx.deps.user}"

    model = ScriptedModel(
        [
            reply(tool_calls=[("whoami", {})]),
            reply("one"),
            reply(tool_calls=[("gated", {})]),
            reply("two"),
        ]
    )
    runtime = Runtime()
    session = await runtime.create_session(
        Agent(model=model, tools=[whoami, gated], deps_type=Deps)
    )
    stream = session.stream("who?", deps=Deps("di"))
    async for _ in stream:
        pass
    assert seen(model) == "user=di"

    parked = await session.run("and now?", deps=Deps("ed"))
    assert parked.status is RunStatus.AWAITING_APPROVAL
    await session.approve(parked.pending[0].id)
    # A resume is a new run: its deps are the ones given now (none were stored).
    resumed = await session.resume(deps=Deps("fay"))
    assert resumed.status is RunStatus.COMPLETED
    assert seen(model, 3) == "gated for fay"


async def test_missing_or_mistyped_deps_are_refused_before_the_run() -> None:
    model = ScriptedModel([])
    agent = Agent(model=model, tools=[whoami], deps_type=Deps)
    with pytest.raises(UsageError, match="needs deps of type Deps"):
        await agent.run("who?")
    with pytest.raises(UsageError, match="takes deps of type Deps, got str"):
        await agent.run("who?", deps="ada")  # type: ignore[arg-type]
    assert model.requests == []


async def test_a_child_gets_no_deps_of_its_parent() -> None:
    @tool
    def peek(ctx: ToolContext) -> str:
        """Peek."""
        return f"child deps: {ctx.deps!r}"

    child_model = ScriptedModel([reply(tool_calls=[("peek", {})]), reply("nothing here")])
    helper = SubAgent("helper", "Helps.", child_model, tools=[peek])
    parent_model = ScriptedModel([reply(tool_calls=[("helper", {"task": "look"})]), reply("ok")])
    parent = Agent(model=parent_model, tools=[helper, whoami], deps_type=Deps)
    await parent.run("go", deps=Deps("gus"))
    assert seen(child_model) == "child deps: None"
