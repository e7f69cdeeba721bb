"""OpenTelemetry GenAI spans and metrics of runs, in one process.

Spans and metrics go to the SDK's in-memory exporter and reader through a
`GenAIObserver` with providers of the test's own (the global provider can be
set once per process; tests/test_tracing_processes.py covers it).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from taskloom import (
    Agent,
    AuthenticationError,
    RetryPolicy,
    RunOptions,
    RunStatus,
    Runtime,
    SubAgent,
    ToolEffect,
    ToolError,
    Usage,
    tool,
)
from taskloom.entries import RunStartedEntry
from taskloom.loop.ports import NO_OBSERVER
from taskloom.models import (
    AnthropicModel,
    FunctionModel,
    GeminiModel,
    ModelRequest,
    OpenAIChatModel,
    ScriptedModel,
    reply,
)
from taskloom.testing.fake_server import FakeServer
from tracing_support import (
    Traced,
    everything_exported,
    in_memory,
    overlap,
    parent_of,
    span_id,
    trace_id,
)

# The bucket boundaries the GenAI semantic conventions advise for
# gen_ai.client.token.usage and gen_ai.client.operation.duration (seconds).
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)  # fmt: skip
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)  # fmt: skip
FAST = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.02, max_retry_after=0.05)
SECRET = "sk-test-SECRET-0123456789abcdef"
CONTENT_KEYS = {
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


@pytest.fixture
def traced() -> Iterator[Traced]:
    yield from in_memory()


# ---------------------------------------------------------------- tools


def both_running() -> tuple[Any, Any]:
    """Two read-only tools that each wait until the other started: they only
    finish if the loop runs them at the same time."""
    barrier = asyncio.Barrier(2)

    @tool(effect=ToolEffect.READ_ONLY)
    async def weather(city: str) -> str:
        """The weather in a city."""
        await asyncio.wait_for(barrier.wait(), 5)
        return f"{city}: 4°C, rain"

    @tool(effect=ToolEffect.READ_ONLY)
    async def clock(city: str) -> str:
        """The time in a city."""
        await asyncio.wait_for(barrier.wait(), 5)
        return f"{city}: noon"

    return weather, clock


# ---------------------------------------------------------------- the span tree


async def test_a_run_with_parallel_tools_is_one_tree_with_every_attribute(traced: Traced) -> None:
    weather, clock = both_running()
    model = ScriptedModel(
        [
            reply(tool_calls=[("weather", {"city": "Oslo"}), ("clock", {"city": "Oslo"})]),
            reply("Rain at noon."),
        ]
    )
    agent = Agent(
        "forecaster", model, "Answer briefly.", [weather, clock], description="Weather desk"
    )
    session = await traced.runtime().create_session(agent)
    result = await session.run("Weather and time in Oslo?")
    assert result.status is RunStatus.COMPLETED

    (run,) = traced.named("invoke_agent")
    chats = traced.named("chat")
    tools = traced.named("execute_tool")
    assert run.name == "invoke_agent forecaster" and run.kind is SpanKind.INTERNAL
    assert parent_of(run) is None
    assert [c.name for c in chats] == ["chat scripted", "chat scripted"]
    assert sorted(t.name for t in tools) == ["execute_tool clock", "execute_tool weather"]
    # every step is a child of the run, in one trace; the tools ran side by side
    for child in [*chats, *tools]:
        assert parent_of(child) == span_id(run) and trace_id(child) == trace_id(run)
    assert overlap(tools[0], tools[1])
    assert not overlap(chats[0], tools[0]) and not overlap(tools[0], chats[1])

    a = dict(run.attributes or {})
    usage = result.usage
    assert a == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "forecaster",
        "gen_ai.agent.id": a["gen_ai.agent.id"],
        "gen_ai.agent.description": "Weather desk",
        "gen_ai.conversation.id": session.id,
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "taskloom.run.id": result.run_id,
        "taskloom.run.resume": False,
        "taskloom.run.status": "completed",
        "taskloom.run.rounds": 2,
        "taskloom.run.model_requests": 2,
        "taskloom.run.tool_calls": 2,
        "taskloom.run.transport_retries": 0,
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "gen_ai.usage.cache_creation.input_tokens": 0,
    }
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert run.status.status_code is StatusCode.UNSET

    first = dict(chats[0].attributes or {})
    assert chats[0].kind is SpanKind.CLIENT
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "scripted"
    assert first["gen_ai.conversation.id"] == session.id
    assert first["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert dict(chats[1].attributes or {})["gen_ai.response.finish_reasons"] == ("stop",)
    assert first["gen_ai.request.stream"] is False
    summed = sum(dict(c.attributes or {})["gen_ai.usage.input_tokens"] for c in chats)  # type: ignore[misc]
    assert summed == usage.input_tokens

    by_name = {t.name: dict(t.attributes or {}) for t in tools}
    assert by_name["execute_tool weather"] == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "weather",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "The weather in a city.",
    }
    assert by_name["execute_tool clock"]["gen_ai.tool.call.id"] == "call_2"
    # content is not recorded unless asked
    for span in traced.spans:
        assert not CONTENT_KEYS & set(span.attributes or {}), span.name


async def test_the_agent_id_names_the_definition(traced: Traced) -> None:
    runtime = traced.runtime()
    for instructions in ("Be brief.", "Be brief.", "Be thorough."):
        agent = Agent("helper", ScriptedModel([reply("ok")]), instructions)
        await (await runtime.create_session(agent)).run("hi")
    ids = [dict(s.attributes or {})["gen_ai.agent.id"] for s in traced.named("invoke_agent")]
    assert ids[0] == ids[1] != ids[2]


async def test_streamed_runs_say_so(traced: Traced) -> None:
    session = await traced.runtime().create_session(Agent("a", ScriptedModel([reply("hi")])))
    async for _ in session.stream("hello"):
        pass
    (chat,) = traced.named("chat")
    assert dict(chat.attributes or {})["gen_ai.request.stream"] is True


async def test_an_in_band_tool_error_fails_its_span_not_the_run(traced: Traced) -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        raise ToolError(f"no such key: {key}")

    model = ScriptedModel([reply(tool_calls=[("lookup", {"key": "k"})]), reply("not found")])
    session = await traced.runtime().create_session(Agent("a", model, tools=[lookup]))
    assert (await session.run("find k")).status is RunStatus.COMPLETED
    (span,) = traced.named("execute_tool")
    assert dict(span.attributes or {})["error.type"] == "tool_error"
    assert span.status.status_code is StatusCode.ERROR
    (run,) = traced.named("invoke_agent")
    assert "error.type" not in (run.attributes or {})
    assert run.status.status_code is StatusCode.UNSET


# ---------------------------------------------------------------- a real adapter


PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini"}
RESPONSE_IDS = {"openai": "chatcmpl-fake", "anthropic": "msg_", "gemini": "fake"}


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_a_retried_request_over_http(
    traced: Traced, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    usage = Usage(input_tokens=120, output_tokens=7, cache_read_tokens=30, cache_write_tokens=5)
    async with FakeServer() as server:
        port = server.port
        server.script(
            FakeServer.rate_limit(retry_after=0.01),
            FakeServer.error(500),
            FakeServer.reply("It rains.", usage=usage),
        )
        if kind == "openai":
            model: Any = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key=SECRET)
        elif kind == "gemini":
            model = GeminiModel("gemini-2.5-flash", base_url=server.gemini_base_url, api_key=SECRET)
        else:
            model = AnthropicModel(
                "claude-sonnet-4-5", base_url=server.anthropic_base_url, api_key=SECRET
            )
        session = await traced.runtime(capture_content=True).create_session(
            Agent("a", model, "Be brief.")
        )
        with caplog.at_level(logging.INFO, logger="taskloom"):
            result = await session.run("Weather?", options=RunOptions(retry=FAST))
    assert result.text == "It rains." and result.transport_retries == 2

    (chat,) = traced.named("chat")
    a = dict(chat.attributes or {})
    # cached tokens included (Anthropic counts them apart)
    expected_input = 120 + 30 + 5 if kind == "anthropic" else 120
    assert chat.name == f"chat {model.name}"
    assert a["gen_ai.provider.name"] == PROVIDER_NAMES[kind]
    assert a["gen_ai.request.model"] == model.name
    assert a["gen_ai.response.model"] == model.name
    assert str(a["gen_ai.response.id"]).startswith(RESPONSE_IDS[kind])
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == port
    assert a["gen_ai.usage.input_tokens"] == expected_input
    assert a["gen_ai.usage.output_tokens"] == 7
    assert a["gen_ai.usage.cache_read.input_tokens"] == 30
    if kind == "anthropic":
        assert a["gen_ai.usage.cache_creation.input_tokens"] == 5
    assert "error.type" not in a and chat.status.status_code is StatusCode.UNSET

    retries = [e for e in chat.events if e.name == "taskloom.retry"]
    assert [dict(e.attributes or {})["http.response.status_code"] for e in retries] == [429, 500]
    assert [dict(e.attributes or {})["error.type"] for e in retries] == ["429", "500"]
    assert [dict(e.attributes or {})["taskloom.retry.attempt"] for e in retries] == [1, 2]
    for e in retries:
        assert 0 < float(dict(e.attributes or {})["taskloom.retry.delay"]) <= 0.05  # type: ignore[arg-type]

    # one operation: one duration point; tokens by type, with the conventions' buckets
    (duration,) = traced.histogram("gen_ai.client.operation.duration")
    assert duration.count == 1 and tuple(duration.explicit_bounds) == DURATION_BUCKETS
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER_NAMES[kind],
        "gen_ai.request.model": model.name,
        "gen_ai.response.model": model.name,
        "server.address": "127.0.0.1",
        "server.port": port,
    }
    assert dict(duration.attributes or {}) == common
    tokens = {
        dict(p.attributes or {})["gen_ai.token.type"]: p
        for p in traced.histogram("gen_ai.client.token.usage")
    }
    assert tokens["input"].sum == expected_input and tokens["output"].sum == 7
    assert dict(tokens["input"].attributes or {}) == {**common, "gen_ai.token.type": "input"}
    assert tuple(tokens["input"].explicit_bounds) == TOKEN_BUCKETS

    # the retries are logged with the session id
    logged = [r.getMessage() for r in caplog.records if r.name == "taskloom"]
    assert len([m for m in logged if "retry" in m and session.id in m]) == 2
    assert SECRET not in everything_exported(traced)


async def test_a_failed_request_says_why_without_the_provider_message(traced: Traced) -> None:
    async with FakeServer() as server:
        # The provider quotes the key back: its message never reaches a span.
        server.script(FakeServer.error(401, message=f"Incorrect API key provided: {SECRET}"))
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key=SECRET)
        session = await traced.runtime(capture_content=True).create_session(Agent("a", model))
        with pytest.raises(AuthenticationError):
            await session.run("hi", options=RunOptions(retry=FAST))
    (chat,) = traced.named("chat")
    (run,) = traced.named("invoke_agent")
    for span in (chat, run):
        assert dict(span.attributes or {})["error.type"] == "401"
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "401"
    (duration,) = traced.histogram("gen_ai.client.operation.duration")
    assert dict(duration.attributes or {})["error.type"] == "401"
    assert traced.histogram("gen_ai.client.token.usage") == []
    exported = everything_exported(traced)
    assert SECRET not in exported and "Incorrect API key" not in exported
    assert "Bearer" not in exported and "x-api-key" not in exported.lower()


# ---------------------------------------------------------------- delegation


async def test_a_fan_out_of_three_children_nests_each_under_its_tool_call(
    traced: Traced,
) -> None:
    barrier = asyncio.Barrier(3)

    async def researcher(request: ModelRequest) -> Any:
        # Each child waits for the other two: the fan-out only ends if they overlap.
        await asyncio.wait_for(barrier.wait(), 5)
        return reply(f"found: {request.messages[0].text}")

    child = SubAgent("researcher", "Looks one thing up.", FunctionModel(researcher, name="finder"))
    lead = ScriptedModel(
        [
            reply(
                tool_calls=[
                    ("researcher", {"task": "alpha"}),
                    ("researcher", {"task": "beta"}),
                    ("researcher", {"task": "gamma"}),
                ]
            ),
            reply("All three found."),
        ]
    )
    session = await traced.runtime().create_session(Agent("lead", lead, tools=[child.tool()]))
    assert (await session.run("research")).status is RunStatus.COMPLETED

    runs = traced.named("invoke_agent")
    (parent,) = [r for r in runs if r.name == "invoke_agent lead"]
    children = [r for r in runs if r.name == "invoke_agent researcher"]
    calls = traced.named("execute_tool researcher")
    assert len(children) == 3 and len(calls) == 3
    # three sibling tool calls under the lead's run, one child run under each
    assert {parent_of(c) for c in calls} == {span_id(parent)}
    assert sorted(parent_of(c) for c in children) == sorted(span_id(c) for c in calls)  # type: ignore[type-var]
    assert {trace_id(s) for s in traced.spans} == {trace_id(parent)}
    assert all(overlap(a, b) for a in children for b in children)
    # each child's run is its own conversation, with its model's spans under it
    conversations = {dict(c.attributes or {})["gen_ai.conversation.id"] for c in children}
    assert len(conversations) == 3 and session.id not in conversations
    for c in children:
        (chat,) = [s for s in traced.named("chat finder") if parent_of(s) == span_id(c)]
        assert dict(chat.attributes or {})["gen_ai.provider.name"] == "scripted"


# ---------------------------------------------------------------- content


async def content_run(runtime: Runtime) -> Any:
    @tool
    def echo(text: str) -> str:
        """Echo the text."""
        return text * 3

    model = ScriptedModel([reply(tool_calls=[("echo", {"text": "ab"})]), reply("ababab")])
    session = await runtime.create_session(Agent("a", model, "You echo.", [echo]))
    return await session.run("echo ab")


async def test_content_is_recorded_when_asked_in_the_conventions_shapes(traced: Traced) -> None:
    await content_run(traced.runtime(capture_content=True))
    first, second = traced.named("chat")
    a = dict(first.attributes or {})
    assert json.loads(str(a["gen_ai.system_instructions"])) == [
        {"type": "text", "content": "You echo."}
    ]
    assert json.loads(str(a["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "echo ab"}]}
    ]
    assert json.loads(str(a["gen_ai.output.messages"])) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "call_1", "name": "echo", "arguments": {"text": "ab"}}
            ],
            "finish_reason": "tool_call",
        }
    ]
    later = json.loads(str(dict(second.attributes or {})["gen_ai.input.messages"]))
    assert later[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_1", "response": "ababab"}],
    }
    (call,) = traced.named("execute_tool")
    assert dict(call.attributes or {})["gen_ai.tool.call.arguments"] == '{"text": "ab"}'
    assert dict(call.attributes or {})["gen_ai.tool.call.result"] == "ababab"


async def test_content_follows_the_environment_variable(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    await content_run(traced.runtime())
    assert all(CONTENT_KEYS & set(s.attributes or {}) for s in traced.spans)
    traced.exporter.clear()
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
    await content_run(traced.runtime())
    assert not any(CONTENT_KEYS & set(s.attributes or {}) for s in traced.spans)


async def test_content_is_capped_and_stays_valid_json(traced: Traced) -> None:
    big = "x" * 50_000

    @tool
    def dump() -> str:
        """A large result."""
        return big

    model = ScriptedModel([reply("a" * 30_000), reply(tool_calls=[("dump", {})]), reply("done")])
    observer = traced.observer(capture_content=True)  # the default cap
    session = await Runtime(observer=observer).create_session(
        Agent("a", model, "y" * 40_000, [dump])
    )
    await session.run("first")
    await session.run("second")
    for span in traced.spans:
        for key in CONTENT_KEYS & set(span.attributes or {}):
            value = str(dict(span.attributes or {})[key])
            assert len(value) <= observer.max_content_chars, (span.name, key, len(value))
            if key not in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result"):
                assert isinstance(json.loads(value), list)
    last = json.loads(str(dict(traced.named("chat")[-1].attributes or {})["gen_ai.input.messages"]))
    # the latest messages are the ones kept
    assert last[-1]["role"] == "tool" and "truncated" in last[-1]["parts"][0]["response"]


# ---------------------------------------------------------------- the seam


async def test_a_runtime_without_tracing_watches_nothing() -> None:
    runtime = Runtime()
    # opentelemetry.trace is imported in this process, but no global provider is set
    assert runtime.observer.current_traceparent() is None
    session = await runtime.create_session(Agent("a", ScriptedModel([reply("hi")])))
    await session.run("hello")
    (started,) = [e.payload for e in await session.entries() if e.kind == "run_started"]
    assert isinstance(started, RunStartedEntry) and started.traceparent is None
    assert Runtime(observer=NO_OBSERVER).observer is NO_OBSERVER


def test_run_started_entries_keep_their_trace_context_and_old_ones_read_the_same() -> None:
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    entry = RunStartedEntry("a", True, tp)
    assert RunStartedEntry.from_data(entry.to_data()) == entry
    assert RunStartedEntry("a").to_data() == {"agent": "a", "resume": False}
    assert RunStartedEntry.from_data({"agent": "a", "resume": False}).traceparent is None
