from __future__ import annotations

import asyncio
import threading
from typing import Any

import pydantic
import pytest

from taskloom import (
    Agent,
    ConfigurationError,
    RunStatus,
    Tool,
    ToolContext,
    ToolEffect,
    ToolError,
    ToolOutput,
    tool,
)
from taskloom.models import ScriptedModel, reply
from taskloom.tools import cap_output


def test_schema_and_description_come_from_signature_and_docstring() -> None:
    @tool
    def search(query: str, limit: int = 5, ctx: ToolContext | None = None) -> list[str]:
        """Search the index.

        Args:
            query: what to look for
            limit: at most this many hits
        """
        return []

    assert search.name == "search"
    assert search.description == "Search the index."
    assert search.input_schema["required"] == ["query"]
    props = search.input_schema["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for"}
    assert props["limit"]["default"] == 5 and props["limit"]["type"] == "integer"
    assert search.effect is ToolEffect.WRITE  # the safe default


def test_context_parameter_is_injected_not_in_schema() -> None:
    @tool(name="whoami", effect=ToolEffect.READ_ONLY)
    async def who(ctx: ToolContext) -> str:
        """Say the call id."""
        return ctx.call_id

    assert who.input_schema.get("properties", {}) == {}
    model = ScriptedModel([reply(tool_calls=[("whoami", {}, "call_xyz")]), reply("done")])
    Agent(model=model, tools=[who]).run_sync("go")
    assert model.requests[1].messages[-1].results[0].content == "call_xyz"


def test_schema_is_built_once_at_decoration(monkeypatch: pytest.MonkeyPatch) -> None:
    @tool
    def f(x: int) -> int:
        """Identity."""
        return x

    calls = []
    monkeypatch.setattr(
        pydantic.BaseModel,
        "model_json_schema",
        classmethod(lambda cls, *a, **k: calls.append(1) or {}),
    )
    Agent(model=ScriptedModel([]), tools=[f])
    assert calls == []


async def _call(t: Tool, args: dict[str, Any]) -> ToolOutput:
    return await t.call(args, None)  # type: ignore[arg-type]


async def test_sync_tools_run_in_a_worker_thread() -> None:
    main = threading.get_ident()

    @tool
    def where() -> bool:
        """Report whether we are off the event loop thread."""
        return threading.get_ident() != main

    assert (await _call(where, {})).content == "true"


async def test_tool_error_and_exceptions_become_error_results() -> None:
    @tool
    def boom(kind: str) -> str:
        """Fail."""
        if kind == "tool":
            raise ToolError("bad input, try 3")
        raise KeyError("missing")

    out = await _call(boom, {"kind": "tool"})
    assert out == ToolOutput("bad input, try 3", is_error=True)
    out = await _call(boom, {"kind": "other"})
    assert out.is_error and out.content == "KeyError: 'missing'"
    assert "Traceback" not in out.content


async def test_invalid_arguments_name_the_problem_and_the_schema() -> None:
    ran = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append(1)
        return a + b

    out = await _call(add, {"a": 1})
    assert out.is_error and "b" in out.content and "Field required" in out.content
    assert '"required": ["a", "b"]' in out.content
    out = await _call(add, {"a": 1, "b": 2, "c": 3})
    assert out.is_error and "c" in out.content
    assert ran == []


async def test_timeout_gives_an_error_result() -> None:
    @tool(timeout=0.05)
    async def slow() -> str:
        """Sleep."""
        await asyncio.sleep(5)
        return "never"

    out = await _call(slow, {})
    assert out.is_error and "timed out after 0.05s" in out.content


async def test_output_is_capped_keeping_head_and_tail() -> None:
    @tool(max_output_chars=100)
    def big() -> str:
        """Lots."""
        return "H" * 500 + "T" * 500

    out = await _call(big, {})
    assert out.content.startswith("H" * 60) and out.content.endswith("T" * 30)
    assert "truncated: 900 characters omitted" in out.content
    assert cap_output("short", 100) == "short"


async def test_return_values_become_text() -> None:
    class Point(pydantic.BaseModel):
        x: int

    @tool
    def values(kind: str) -> Any:
        """Return things."""
        return {"dict": {"a": [1, "é"]}, "model": Point(x=1), "none": None}[kind]

    assert (await _call(values, {"kind": "dict"})).content == '{"a": [1, "é"]}'
    assert (await _call(values, {"kind": "model"})).content == '{"x":1}'
    assert (await _call(values, {"kind": "none"})).content == "(no output)"


async def test_hand_written_tool_checks_required_and_types() -> None:
    async def fn(city: str) -> str:
        return city.upper()

    t = Tool(
        "weather",
        "Weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        fn,
        effect=ToolEffect.READ_ONLY,
    )
    assert (await _call(t, {"city": "oslo"})).content == "OSLO"
    assert (await _call(t, {})).is_error
    assert "arguments.city: expected string" in (await _call(t, {"city": 3})).content
    assert "missing required property 'city'" in (await _call(t, {})).content


def test_configuration_errors_name_the_culprit() -> None:
    @tool
    def a() -> None:
        """A."""

    with pytest.raises(ConfigurationError, match="two tools named 'a'"):
        Agent(model=ScriptedModel([]), tools=[a, a])
    with pytest.raises(ConfigurationError, match="no model"):
        Agent(name="x")

    class Opaque:
        pass

    with pytest.raises(
        ConfigurationError,
        match=r"'weird': parameter 'thing' has type .*Opaque, which a model cannot send",
    ):

        @tool
        def weird(thing: Opaque) -> None:
            """Weird."""

    with pytest.raises(ConfigurationError):
        Tool("bad name!", "", {"type": "object"})


def test_needs_approval_bool_or_predicate() -> None:
    @tool(needs_approval=lambda args: args["total"] > 500)
    def gift(total: float) -> str:
        """Send a gift."""
        return "sent"

    assert gift.is_gated
    assert gift.requires_approval({"total": 501}) and not gift.requires_approval({"total": 10})


async def test_a_timeout_error_the_tool_raises_itself_is_its_own_error() -> None:
    from taskloom import Agent, RunStatus
    from taskloom.models import ScriptedModel, reply

    @tool
    async def flaky() -> str:
        """Raise a TimeoutError of its own."""
        raise TimeoutError("upstream timed out")

    @tool(timeout=30)
    async def flaky_with_budget() -> str:
        """The same, with a timeout of its own that never expires."""
        raise TimeoutError("upstream timed out")

    model = ScriptedModel(
        [reply(tool_calls=[("flaky", {}), ("flaky_with_budget", {})]), reply("ok")]
    )
    result = await Agent("t", model, tools=[flaky, flaky_with_budget]).run("go")
    assert result.status is RunStatus.COMPLETED
    results = model.requests[1].messages[-1].results
    assert [r.content for r in results] == ["TimeoutError: upstream timed out"] * 2


def test_only_tools_that_use_their_context_take_one() -> None:
    @tool
    def plain(a: int) -> int:
        """No context."""
        return a

    @tool
    def with_ctx(a: int, ctx: ToolContext) -> int:
        """Reads its context."""
        return a

    @tool
    def streams(n: int):  # type: ignore[no-untyped-def]
        """Progress goes through the context."""
        yield n

    class Custom(Tool):
        async def invoke(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
            return ctx.call_id

    custom = Custom("custom", "A subclass.", {"type": "object", "properties": {}})
    assert not plain.takes_context
    assert with_ctx.takes_context and streams.takes_context and custom.takes_context


async def test_the_loop_builds_a_context_only_for_tools_that_take_one() -> None:
    seen: list[str] = []

    @tool
    async def who(ctx: ToolContext) -> str:
        """Name the call."""
        seen.append(ctx.call_id)
        return ctx.call_id

    @tool(blocking=False)
    def plain() -> str:
        """Nothing to read."""
        return "plain"

    model = ScriptedModel(
        [reply(tool_calls=[("who", {})]), reply(tool_calls=[("plain", {})]), reply("ok")]
    )
    result = await Agent("a", model, tools=[who, plain]).run("go")
    assert result.status is RunStatus.COMPLETED
    assert len(seen) == 1 and seen[0]
    assert [r.content for r in model.requests[2].messages[-1].results] == ["plain"]
