"""Tools that need the runtime offering them are bound to it: once per
runtime, and the bound copies are what its sessions offer."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from taskloom import Agent, Runtime, ToolEffect, tool
from taskloom.background import BackgroundService, background_tools
from taskloom.delegation import DelegationTool, Spawner, SubAgent, WorkerType, console_tools
from taskloom.errors import ConfigurationError, UsageError
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply
from taskloom.tools import ArgumentsInvalid, Tool, UnboundTool


def calling(name: str, rounds: int) -> FunctionModel:
    """A model that calls `name` for `rounds` rounds, then answers with the last result."""

    async def answer(request: ModelRequest) -> Any:
        if len(request.messages) < 2 * rounds:
            return reply(tool_calls=[(name, {})])
        return reply(request.messages[-1].results[0].content)

    return FunctionModel(answer)


@tool(effect=ToolEffect.READ_ONLY)
async def _whose(runtime: Runtime, /) -> str:
    """Say which runtime runs this call."""
    return hex(id(runtime))


async def test_a_tool_is_bound_once_per_runtime_not_per_round_or_session() -> None:
    bound_to: list[Runtime] = []

    def given(runtime: Runtime) -> Runtime:
        bound_to.append(runtime)
        return runtime

    whose = UnboundTool(_whose, given)
    agent = Agent("a", calling("_whose", rounds=3), tools=[whose])
    first, second = Runtime(), Runtime()
    sessions = [await first.create_session(agent) for _ in range(2)]
    for session in sessions:
        assert (await session.run("go")).text == hex(id(first))
    # Two sessions of three tool rounds each: one binding.
    assert bound_to == [first]
    offered = sessions[0].tools["_whose"]
    assert offered is sessions[1].tools["_whose"] is first.tools_for(agent)["_whose"]
    assert offered is not whose and agent.tool_map["_whose"] is whose

    other = await second.create_session(agent)
    assert (await other.run("go")).text == hex(id(second))
    assert bound_to == [first, second]
    await first.close()
    await second.close()


def test_the_model_is_offered_what_the_unbound_tool_describes() -> None:
    whose = UnboundTool(_whose, lambda runtime: runtime)
    assert whose.spec == _whose.spec
    assert "runtime" not in whose.input_schema["properties"]
    assert whose.effect is ToolEffect.READ_ONLY


async def test_an_unbound_tool_does_not_run() -> None:
    whose = UnboundTool(_whose, lambda runtime: runtime)
    out = await whose.call({}, None)  # type: ignore[arg-type]
    assert out.is_error and "runs only as a runtime offers it" in out.content


def test_a_bound_delegation_tool_is_still_one_and_runs_on_its_runtime() -> None:
    sub = SubAgent("helper", "Helps.", ScriptedModel([]))
    agent = Agent("lead", ScriptedModel([]), tools=[sub, *console_tools()])
    runtime = Runtime()
    unbound = agent.tool_map["helper"]
    offered = runtime.tools_for(agent)["helper"]
    assert isinstance(unbound, DelegationTool) and isinstance(offered, DelegationTool)
    assert offered is not unbound and offered is runtime.tools_for(agent)["helper"]
    # What identifies a delegation tool survives binding: the loop runs it
    # concurrently, a crash recovery finds its child agent, a run start its work.
    assert offered.concurrent and offered.child_agent is sub.agent
    assert offered.spec is unbound.spec
    assert callable(getattr(offered, "resume_work", None))
    assert offered.runtime is runtime
    with pytest.raises(UsageError, match="runs only as a runtime offers it"):
        _ = unbound.runtime


def test_an_agent_without_tools_that_bind_offers_its_own_map() -> None:
    @tool
    def plain() -> str:
        """Nothing to bind."""
        return "x"

    agent = Agent("a", ScriptedModel([]), tools=[plain])
    assert Runtime().tools_for(agent) is agent.tool_map


def test_the_runtime_builds_its_own_background_service() -> None:
    runtime = Runtime()
    assert isinstance(runtime.background, BackgroundService)
    assert runtime.background is BackgroundService.of(runtime)
    assert not hasattr(Runtime, "default_background")


def test_the_spawn_tools_schema_is_the_one_the_model_was_always_shown() -> None:
    @tool
    def look(q: str) -> str:
        """Look."""
        return q

    model = ScriptedModel([])
    spawn: Tool = Spawner(
        model, tools=[look], types=[WorkerType("r", "research", ("look",))]
    ).tool()

    def text(description: str) -> dict[str, str]:
        return {"type": "string", "description": description}

    assert spawn.input_schema == {
        "type": "object",
        "properties": {
            "name": text("A short name for the worker (used to find it later)."),
            "instructions": text("The worker's instructions (its system prompt)."),
            "task": text("The complete task: the worker sees nothing else."),
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tools to grant, from: look",
            },
            "model": text(f"Model, from: {model.spec}"),
            "mode": text("inline (wait for the answer)"),
            "type": text("A predefined worker type: r (research)"),
        },
        "required": ["name", "task"],
        "additionalProperties": False,
    }


def test_a_subagents_schema_is_the_one_the_model_was_always_shown() -> None:
    def text(description: str) -> dict[str, str]:
        return {"type": "string", "description": description}

    model = FunctionModel(lambda r: reply("ok"))
    plain = SubAgent("helper", "Helps.", model).tool()
    asking = SubAgent("asker", "Asks.", model, ask_parent=True).tool()
    delegating = {
        "task": text("The complete task: the agent sees nothing else."),
        "name": text("A short display name for this piece of work."),
    }
    assert plain.input_schema == {
        "type": "object",
        "properties": delegating,
        "required": ["task"],
        "additionalProperties": False,
    }
    assert asking.input_schema == {
        "type": "object",
        "properties": {
            **delegating,
            "child": text("Only to answer a question an agent asked: the child id it gave."),
            "question": text("With child: the id of the question you answer, as it gave it."),
            "reply": text("Your answer to that question."),
        },
        "additionalProperties": False,
    }
    assert list(asking.input_schema["properties"]) == ["task", "name", "child", "question", "reply"]
    # Its arguments model validates: every field filled, nothing undeclared.
    assert plain.validate({"task": "t"}) == {"task": "t", "name": ""}
    with pytest.raises(ArgumentsInvalid, match="child: Extra inputs"):
        plain.validate({"task": "t", "child": "c"})
    with pytest.raises(ArgumentsInvalid, match="task"):
        plain.validate({"name": "n"})


def test_a_delegation_tool_needs_a_closed_arguments_model() -> None:
    class Loose(pydantic.BaseModel):
        task: str

    async def handler(runtime: Runtime, arguments: dict[str, Any], ctx: Any) -> str:
        return ""

    with pytest.raises(ConfigurationError, match="extra='forbid'"):
        DelegationTool("loose", "Delegates.", Loose, handler)
    schema = {"type": "object", "properties": {"task": {"type": "string"}}}
    with pytest.raises(ConfigurationError, match="a pydantic model class"):
        DelegationTool("schema", "Delegates.", schema, handler)  # type: ignore[arg-type]


def test_the_command_and_console_tools_keep_their_names_and_schemas() -> None:
    commands = {t.name: t.input_schema for t in background_tools()}
    assert list(commands) == [
        "background_run",
        "background_status",
        "background_wait",
        "background_stop",
    ]
    assert commands["background_wait"]["required"] == ["ids"]
    console = {t.name: t.input_schema for t in console_tools()}
    assert list(console) == ["list_agents", "read_agent", "steer_agent", "stop_agent"]
    # `self`, filled by the binding, is not the model's to give.
    assert console["list_agents"]["properties"] == {}
    assert console["steer_agent"]["required"] == ["agent", "text"]
    assert all("self" not in schema["properties"] for schema in [*commands.values()])


async def test_decision_hooks_are_the_runtimes_own() -> None:
    heard: list[tuple[str, str]] = []

    def hearing(label: str) -> Any:
        async def hook(session_id: str, offered: Any) -> None:
            heard.append((label, session_id))

        return hook

    one, other = Runtime(), Runtime()
    one.background.on_decided(hearing("one"))
    await other.background.decided("s1")
    assert heard == []  # a hook on one runtime never hears another's decisions
    await one.background.decided("s2")
    assert heard == [("one", "s2")]


async def test_every_decision_hook_runs_and_the_first_failure_is_raised_after() -> None:
    heard: list[str] = []
    runtime = Runtime()

    async def failing(session_id: str, offered: Any) -> None:
        heard.append("failing")
        raise RuntimeError("queue down")

    async def after(session_id: str, offered: Any) -> None:
        heard.append("after")

    runtime.background.on_decided(failing)
    runtime.background.on_decided(after)
    with pytest.raises(RuntimeError, match="queue down"):
        await runtime.background.decided("s")
    assert heard == ["failing", "after"]


def test_a_runtime_binds_its_agents_tools_as_it_is_made() -> None:
    """What a tool brings to its runtime (a delegation tool: resuming the
    children decided through it) is there before any session opens, so a
    process that only decides (the CLI, the console) resumes children too."""
    bound_to: list[Runtime] = []

    def given(runtime: Runtime) -> Runtime:
        bound_to.append(runtime)
        return runtime

    whose = UnboundTool(_whose, given)
    runtime = Runtime(agents=[Agent("lead", calling("_whose", 1), tools=[whose])])
    assert bound_to == [runtime]
    runtime.tools_for(runtime.agents["lead"])
    assert bound_to == [runtime]  # once
