"""Unit tests of the Anthropic Messages adapter: bodies, parsing, streams, errors."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx2
import pytest

from taskloom.errors import (
    AuthenticationError,
    ConfigurationError,
    InvalidRequest,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
    TransportError,
)
from taskloom.events import TextDelta, ThinkingDelta
from taskloom.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult
from taskloom.models import (
    AnthropicModel,
    Model,
    ModelRequest,
    ModelSettings,
    ReasoningOptions,
    ResponseCompleted,
    ToolCallDelta,
)
from taskloom.results import ToolSpec
from taskloom.testing.transport import Answer, CannedResponse, RecordingTransport

WEATHER = ToolSpec("weather", "Weather in a city.", {"type": "object", "properties": {}})
CLOCK = ToolSpec("clock", "The time.", {"type": "object", "properties": {}})


def reply_json(
    content: list[dict[str, Any]], stop_reason: str = "end_turn", **usage: int
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage},
    }


def server_of(answer: Answer) -> RecordingTransport:
    """A server answering every request with `answer`, keeping the requests."""
    return RecordingTransport(default=answer)


def model_on(
    server: RecordingTransport, name: str = "claude-sonnet-4-5", **options: Any
) -> AnthropicModel:
    options.setdefault("stream", False)
    return AnthropicModel(name, api_key="sk-test", http_client=server.client(), **options)


def json_server(body: dict[str, Any] | None = None) -> RecordingTransport:
    return server_of(RecordingTransport.json(body or reply_json([{"type": "text", "text": "ok"}])))


def sse(*events: dict[str, Any], end: bool = True) -> str:
    """Server-sent events as Anthropic sends them, with message_start first."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_s",
            "model": "claude-sonnet-4-5-20250929",
            "content": [],
            "usage": {"input_tokens": 7, "output_tokens": 1, "cache_read_input_tokens": 3},
        },
    }
    stop = [{"type": "message_stop"}] if end else []
    return "".join(
        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in [start, *events, *stop]
    )


def sse_server(text: str) -> RecordingTransport:
    return server_of(RecordingTransport.sse(text))


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **d: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str = "end_turn", **usage: int) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage}


async def body_for(request: ModelRequest, name: str = "claude-sonnet-4-5", **options: Any) -> Any:
    server = json_server()
    await model_on(server, name, **options).request(request)
    return server.body()


def ask(*messages: Message, **kw: Any) -> ModelRequest:
    return ModelRequest(messages=list(messages) or [Message.user("hi")], **kw)


# --- construction -----------------------------------------------------------


def test_identity_and_protocol() -> None:
    model = AnthropicModel("claude-opus-4-6", api_key="k")
    assert (model.name, model.provider, model.spec) == (
        "claude-opus-4-6",
        "anthropic",
        "anthropic:claude-opus-4-6",
    )
    assert isinstance(model, Model)
    # Building a body needs no client and no network.
    body = model.build_body(ask(system="s"))
    assert (body["model"], body["stream"], body["messages"][0]["role"]) == (
        "claude-opus-4-6",
        True,
        "user",
    )


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    AnthropicModel("claude-sonnet-4-5")
    AnthropicModel("claude-sonnet-4-5", api_key_env=None)


async def test_key_from_the_environment_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    server = json_server()
    client = server.client()
    await AnthropicModel("claude-sonnet-4-5", http_client=client, stream=False).request(ask())
    assert server.requests[0].headers["x-api-key"] == "from-env"


async def test_url_and_headers() -> None:
    server = json_server()
    model = model_on(server, base_url="http://127.0.0.1:9/proxy/", headers={"anthropic-beta": "b1"})
    await model.request(ask())
    sent = server.requests[0]
    assert str(sent.url) == "http://127.0.0.1:9/proxy/v1/messages"
    assert sent.method == "POST"
    assert sent.headers["x-api-key"] == "sk-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["anthropic-beta"] == "b1"
    default = json_server()
    await model_on(default).request(ask())
    assert str(default.requests[0].url) == "https://api.anthropic.com/v1/messages"
    versioned = json_server()
    await model_on(versioned, base_url="http://127.0.0.1:9/v1").request(ask())
    assert str(versioned.requests[0].url) == "http://127.0.0.1:9/v1/messages"


# --- request bodies -----------------------------------------------------------


async def test_cache_breakpoints_on_system_and_last_tool() -> None:
    body = await body_for(ask(system="Be brief.", tools=[WEATHER, CLOCK]))
    assert body["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1] == {
        "name": "clock",
        "description": "The time.",
        "input_schema": {"type": "object", "properties": {}},
        "cache_control": {"type": "ephemeral"},
    }
    plain = await body_for(ask(system="Be brief.", tools=[WEATHER]), cache=False)
    assert "cache_control" not in json.dumps(plain)
    assert "system" not in await body_for(ask())


async def test_tool_results_and_user_text_merge_into_one_user_turn() -> None:
    call = ToolCall("toolu_1", "weather", {"city": "Paris"})
    body = await body_for(
        ask(
            Message.user("weather?"),
            Message.assistant("Let me look.", tool_calls=[call], provider="anthropic"),
            Message.tool_results([ToolResult("toolu_1", "sunny", tool_name="weather")]),
            Message.user("and be quick"),
            Message.user("please"),
        )
    )
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": False},
        {"type": "text", "text": "and be quick"},
        {"type": "text", "text": "please"},
    ]


async def test_tool_results_come_first_even_after_user_text() -> None:
    body = await body_for(
        ask(
            Message.assistant(tool_calls=[ToolCall("a", "weather")]),
            Message.user("steer: hurry"),
            Message.tool_results([ToolResult("a", "boom", is_error=True)]),
        )
    )
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_result", "text"]
    assert body["messages"][1]["content"][0]["is_error"] is True


async def test_thinking_is_replayed_unchanged_only_to_anthropic() -> None:
    ours = ThinkingBlock("step by step", signature="sig==", provider="anthropic")
    redacted = ThinkingBlock(redacted=True, data="opaque", provider="anthropic")
    theirs = ThinkingBlock("openai reasoning", signature="enc", provider="openai-responses")
    body = await body_for(
        ask(
            Message.user("q1"),
            Message.assistant("a1", thinking=[ours, redacted], provider="anthropic"),
            Message.user("q2"),
            Message.assistant("a2", thinking=[theirs], provider="openai-responses"),
            Message.user("q3"),
        )
    )
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "step by step", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "a1"},
    ]
    assert body["messages"][3]["content"] == [{"type": "text", "text": "a2"}]
    assert "openai reasoning" not in json.dumps(body)


async def test_cross_provider_history_drops_reasoning_and_maps_ids() -> None:
    """A transcript from OpenAI: its reasoning goes, its odd call ids are made valid."""
    call = ToolCall("functions.weather:0", "weather", {"city": "Oslo"}, provider_id="fc_1")
    body = await body_for(
        ask(
            Message.user("weather in Oslo?"),
            Message(
                "assistant",
                (ThinkingBlock("hidden", signature="enc", provider="openai-responses"), call),
                provider="openai-responses",
            ),
            Message.tool_results([ToolResult("functions.weather:0", "rain")]),
            Message("assistant", (ThinkingBlock("only reasoning", provider="openai-responses"),)),
            Message.user("thanks"),
        )
    )
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    tool_use = body["messages"][1]["content"][0]
    result = body["messages"][2]["content"][0]
    assert tool_use["type"] == "tool_use"
    assert tool_use["id"] == result["tool_use_id"] and VALID_ID.match(tool_use["id"])
    assert [b["type"] for b in body["messages"][2]["content"]] == ["tool_result", "text"]


VALID_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
"""The tool call ids Anthropic accepts."""


async def sent_ids(*call_ids: str) -> list[tuple[str, str]]:
    """The (tool_use id, tool_result id) pairs a history with these call ids is sent with."""
    body = await body_for(
        ask(
            Message.user("go"),
            Message.assistant(tool_calls=[ToolCall(i, "weather", {}) for i in call_ids]),
            Message.tool_results([ToolResult(i, "x") for i in call_ids]),
        )
    )
    uses = [b["id"] for b in body["messages"][1]["content"]]
    results = [b["tool_use_id"] for b in body["messages"][2]["content"]]
    return list(zip(uses, results, strict=True))


async def test_tool_ids_are_sent_as_anthropic_accepts_them() -> None:
    valid = await sent_ids("toolu_01AbC", "call_abc-123")
    assert valid == [("toolu_01AbC", "toolu_01AbC"), ("call_abc-123", "call_abc-123")]
    # Ids that would sanitize alike (or to nothing) stay apart, the same every time.
    odd = ("fn.a:1", "a.b", "a:b", "")
    mapped = await sent_ids(*odd)
    assert all(use == result and VALID_ID.match(use) for use, result in mapped)
    assert len({use for use, _ in mapped}) == len(odd)
    assert await sent_ids(*odd) == mapped


async def test_tool_inputs_from_raw_arguments() -> None:
    body = await body_for(
        ask(
            Message.assistant(
                tool_calls=[
                    ToolCall("c1", "weather", {}, raw_arguments="{not json"),
                    ToolCall("c2", "weather", {}, raw_arguments='{"city": "Rome"}'),
                    ToolCall("c3", "weather", {}, raw_arguments="[1, 2]"),
                ]
            ),
            Message.tool_results([ToolResult(i, "x") for i in ("c1", "c2", "c3")]),
        )
    )
    assert [b["input"] for b in body["messages"][0]["content"]] == [{}, {"city": "Rome"}, {}]


async def test_images_and_blank_text() -> None:
    body = await body_for(
        ask(
            Message.user(
                [
                    TextBlock("what is this?"),
                    TextBlock("  "),
                    ImageBlock(data=b"\x89PNG", media_type="image/png"),
                    ImageBlock(url="https://example.com/a.jpg"),
                ]
            )
        )
    )
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
    ]


async def test_sampling_settings() -> None:
    settings = ModelSettings(temperature=0.2, top_p=0.9, stop=("END",), max_tokens=321)
    body = await body_for(ask(settings=settings))
    assert (body["temperature"], body["top_p"], body["stop_sequences"], body["max_tokens"]) == (
        0.2,
        0.9,
        ["END"],
        321,
    )
    assert body["model"] == "claude-sonnet-4-5"
    assert body["stream"] is False
    assert not {"thinking", "output_config", "tool_choice", "tools"} & body.keys()


async def test_max_tokens_precedence_and_defaults() -> None:
    assert (await body_for(ask()))["max_tokens"] == 8192
    assert (await body_for(ask(), "claude-3-opus-latest"))["max_tokens"] == 4096
    assert (await body_for(ask(), max_tokens=1000))["max_tokens"] == 1000
    per_model = ModelSettings(max_tokens=2000)
    assert (await body_for(ask(), max_tokens=1000, settings=per_model))["max_tokens"] == 2000
    per_request = ask(settings=ModelSettings(max_tokens=3000))
    assert (await body_for(per_request, settings=per_model))["max_tokens"] == 3000


async def test_thinking_budget() -> None:
    budget = ModelSettings(reasoning=ReasoningOptions(budget_tokens=10000))
    body = await body_for(ask(settings=budget))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 10000}
    assert body["max_tokens"] > 10000
    assert "output_config" not in body
    big = ModelSettings(reasoning=ReasoningOptions(budget_tokens=60000))
    assert (await body_for(ask(settings=big), "claude-opus-4-1"))["max_tokens"] == 32000


@pytest.mark.parametrize(
    ("model", "effort", "thinking", "sent_effort"),
    [
        ("claude-opus-4-6", "high", {"type": "adaptive"}, "high"),
        ("claude-opus-4-6", "minimal", {"type": "adaptive"}, "low"),
        ("claude-opus-4-7", "xhigh", {"type": "adaptive", "display": "summarized"}, "xhigh"),
        ("claude-opus-5", "medium", {"type": "adaptive", "display": "summarized"}, "medium"),
        ("claude-sonnet-4-5-20250929", "medium", {"type": "enabled", "budget_tokens": 8192}, None),
        ("claude-opus-4-5", "low", {"type": "enabled", "budget_tokens": 2048}, "low"),
        ("claude-3-5-sonnet-latest", "high", None, None),
    ],
)
async def test_effort(
    model: str, effort: Any, thinking: dict[str, Any] | None, sent_effort: str | None
) -> None:
    body = await body_for(ask(settings=ModelSettings(reasoning=ReasoningOptions(effort))), model)
    assert body.get("thinking") == thinking
    assert body.get("output_config", {}).get("effort") == sent_effort
    if thinking and "budget_tokens" in thinking:
        assert body["max_tokens"] > thinking["budget_tokens"]


async def test_thinking_is_left_out_after_another_providers_tool_turn() -> None:
    history = ask(
        Message.user("q"),
        Message.assistant(tool_calls=[ToolCall("call_1", "weather")], provider="openai"),
        Message.tool_results([ToolResult("call_1", "sunny")]),
        settings=ModelSettings(reasoning=ReasoningOptions(budget_tokens=2048)),
    )
    assert "thinking" not in await body_for(history)
    signed = ThinkingBlock("t", signature="s", provider="anthropic")
    ours = ask(
        Message.user("q"),
        Message.assistant(
            tool_calls=[ToolCall("toolu_1", "weather")], thinking=[signed], provider="anthropic"
        ),
        Message.tool_results([ToolResult("toolu_1", "sunny")]),
        settings=ModelSettings(reasoning=ReasoningOptions(budget_tokens=2048)),
    )
    assert (await body_for(ours))["thinking"]["type"] == "enabled"


async def test_extra_is_merged_last() -> None:
    settings = ModelSettings(
        reasoning=ReasoningOptions(effort="high"),
        temperature=0.5,
        extra={
            "top_k": 40,
            "output_config": {"task_budget": {"type": "tokens", "total": 20000}},
            "thinking": None,
            "temperature": 1.0,
        },
    )
    body = await body_for(ask(settings=settings), "claude-opus-4-7")
    assert body["top_k"] == 40
    assert body["output_config"] == {
        "effort": "high",
        "task_budget": {"type": "tokens", "total": 20000},
    }
    assert "thinking" not in body
    assert body["temperature"] == 1.0


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def test_native_structured_output() -> None:
    nested = {"type": "object", "properties": {"where": SCHEMA}}
    body = await body_for(ask(output_schema=nested))
    schema = body["output_config"]["format"]["schema"]
    assert body["output_config"]["format"]["type"] == "json_schema"
    assert schema["additionalProperties"] is False
    assert schema["properties"]["where"]["additionalProperties"] is False
    assert "tools" not in body and "tool_choice" not in body


async def test_output_tool_fallback_for_older_models() -> None:
    answer = reply_json(
        [{"type": "tool_use", "id": "toolu_9", "name": "output", "input": {"city": "Paris"}}],
        stop_reason="tool_use",
    )
    server = json_server(answer)
    response = await model_on(server, "claude-sonnet-4-0").request(ask(output_schema=SCHEMA))
    assert server.body()["tools"][-1]["name"] == "output"
    assert server.body()["tools"][-1]["input_schema"] == SCHEMA
    assert server.body()["tool_choice"] == {"type": "tool", "name": "output"}
    assert json.loads(response.text) == {"city": "Paris"}
    assert response.message.tool_calls == []
    assert response.stop_reason == "end_turn"
    with_tools = await body_for(ask(output_schema=SCHEMA, tools=[WEATHER]), "claude-sonnet-4-0")
    assert with_tools["tool_choice"] == {"type": "any"}
    thinking = ModelSettings(reasoning=ReasoningOptions(budget_tokens=2048))
    with_thinking = await body_for(
        ask(output_schema=SCHEMA, settings=thinking), "claude-sonnet-4-0"
    )
    assert "tool_choice" not in with_thinking


# --- parsing whole responses -------------------------------------------------------


async def test_parse_whole_response() -> None:
    content = [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Checking. "},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "text", "text": "Done."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": "oops"},
    ]
    usage = {
        "cache_read_input_tokens": 4,
        "cache_creation_input_tokens": 6,
        "output_tokens_details": {"thinking_tokens": 3},
    }
    server = json_server(reply_json(content, "tool_use", **usage))  # type: ignore[arg-type]
    response = await model_on(server).request(ask())
    message = response.message
    assert (message.role, message.provider, message.model) == (
        "assistant",
        "anthropic",
        "claude-sonnet-4-5",
    )
    assert message.text == "Checking. Done."
    assert message.thinking == [
        ThinkingBlock("hmm", signature="sig", provider="anthropic"),
        ThinkingBlock(redacted=True, data="opaque", provider="anthropic"),
    ]
    assert message.tool_calls == [
        ToolCall("toolu_1", "weather", {"city": "Oslo"}),
        ToolCall("toolu_2", "weather", {}, raw_arguments='"oops"'),
    ]
    # As Anthropic (and its SDK) report it: uncached input apart from cache reads and writes.
    assert response.usage.to_dict() == {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_tokens": 4,
        "cache_write_tokens": 6,
        "reasoning_tokens": 3,
        "requests": 1,
    }
    assert (response.stop_reason, response.response_id, response.model) == (
        "tool_use",
        "msg_1",
        "claude-sonnet-4-5-20250929",
    )


@pytest.mark.parametrize(
    "reason", ["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"]
)
async def test_stop_reasons_are_kept(reason: str) -> None:
    server = json_server(reply_json([{"type": "text", "text": "x"}], reason))
    assert (await model_on(server).request(ask())).stop_reason == reason


async def test_stream_false_yields_one_completed_event() -> None:
    server = json_server()
    events = [e async for e in model_on(server, stream=False).stream(ask())]
    assert len(events) == 1 and isinstance(events[0], ResponseCompleted)
    assert events[0].response.text == "ok"
    assert server.body()["stream"] is False


# --- streams --------------------------------------------------------------------------


async def stream_events(text: str, **options: Any) -> tuple[list[Any], RecordingTransport]:
    server = sse_server(text)
    model = model_on(server, stream=True, **options)
    return [e async for e in model.stream(ask())], server


async def test_stream_text_thinking_and_tools() -> None:
    text = sse(
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        {"type": "ping"},
        delta(0, type="thinking_delta", thinking="Let me "),
        delta(0, type="thinking_delta", thinking=""),
        delta(0, type="thinking_delta", thinking="think."),
        delta(0, type="signature_delta", signature="SIG=="),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        delta(1, type="text_delta", text="Hel"),
        delta(1, type="text_delta", text="lo"),
        block_stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_a", "name": "weather", "input": {}}),
        delta(2, type="input_json_delta", partial_json=""),
        delta(2, type="input_json_delta", partial_json='{"ci'),
        delta(2, type="input_json_delta", partial_json='ty": "Par'),
        delta(2, type="input_json_delta", partial_json='is"}'),
        block_stop(2),
        block_start(3, {"type": "tool_use", "id": "toolu_b", "name": "clock", "input": {}}),
        block_stop(3),
        message_delta("tool_use", output_tokens=42),
    )
    events, server = await stream_events(text)
    assert server.body()["stream"] is True
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["Let me ", "think."]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    tool_deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert tool_deltas[0] == ToolCallDelta(index=0, id="toolu_a", name="weather")
    assert "".join(d.arguments for d in tool_deltas if d.index == 0) == '{"city": "Paris"}'
    assert tool_deltas[-1] == ToolCallDelta(index=1, id="toolu_b", name="clock")
    assert isinstance(events[-1], ResponseCompleted)
    assert sum(isinstance(e, ResponseCompleted) for e in events) == 1
    response = events[-1].response
    assert response.message.thinking == [
        ThinkingBlock("Let me think.", signature="SIG==", provider="anthropic")
    ]
    assert response.text == "Hello"
    assert response.message.tool_calls == [
        ToolCall("toolu_a", "weather", {"city": "Paris"}),
        ToolCall("toolu_b", "clock", {}),
    ]
    assert response.stop_reason == "tool_use"
    assert response.response_id == "msg_s"
    # Input and cache figures come from message_start, output from message_delta.
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 42)
    assert (response.usage.cache_read_tokens, response.usage.requests) == (3, 1)


async def test_stream_usage_in_message_delta_replaces_message_start() -> None:
    text = sse(
        block_start(0, {"type": "text", "text": "hi"}),
        block_stop(0),
        message_delta(
            input_tokens=70,
            output_tokens=9,
            cache_read_input_tokens=30,
            cache_creation_input_tokens=5,
        ),
    )
    events, _ = await stream_events(text)
    usage = events[-1].response.usage
    assert (usage.input_tokens, usage.output_tokens) == (70, 9)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (30, 5)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["hi"]


async def test_stream_invalid_tool_json_keeps_raw_arguments() -> None:
    text = sse(
        block_start(0, {"type": "tool_use", "id": "toolu_x", "name": "weather", "input": {}}),
        delta(0, type="input_json_delta", partial_json='{"city": '),
        block_stop(0),
        message_delta("max_tokens", output_tokens=3),
    )
    events, _ = await stream_events(text)
    response = events[-1].response
    assert response.message.tool_calls == [
        ToolCall("toolu_x", "weather", {}, raw_arguments='{"city": ')
    ]
    assert response.stop_reason == "max_tokens"


async def test_stream_redacted_thinking_and_server_tools() -> None:
    text = sse(
        block_start(0, {"type": "redacted_thinking", "data": "opaque=="}),
        block_stop(0),
        block_start(1, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}),
        delta(1, type="input_json_delta", partial_json='{"query": "x"}'),
        block_stop(1),
        block_start(
            2, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
        ),
        block_stop(2),
        block_start(3, {"type": "text", "text": ""}),
        delta(3, type="text_delta", text="found"),
        delta(3, type="citations_delta", citation={"type": "web_search_result_location"}),
        block_stop(3),
        {"type": "some_future_event"},
        message_delta(output_tokens=4),
    )
    events, _ = await stream_events(text)
    assert not [e for e in events if isinstance(e, ToolCallDelta)]
    response = events[-1].response
    assert response.message.thinking == [
        ThinkingBlock(redacted=True, data="opaque==", provider="anthropic")
    ]
    assert response.text == "found"
    assert response.message.tool_calls == []


async def test_stream_error_event_is_typed_and_verbatim() -> None:
    text = sse(
        block_start(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text="partial"),
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        end=False,
    )
    server = sse_server(text)
    seen: list[Any] = []
    with pytest.raises(ProviderOverloaded) as caught:
        async for event in model_on(server, stream=True).stream(ask()):
            seen.append(event)
    assert caught.value.message == "Overloaded"
    assert caught.value.error_type == "overloaded_error"
    assert caught.value.retryable is True
    assert not any(isinstance(e, ResponseCompleted) for e in seen)


@pytest.mark.parametrize(
    ("error_type", "expected", "retryable"),
    [
        ("rate_limit_error", RateLimitError, True),
        ("api_error", ProviderError, True),
        ("invalid_request_error", InvalidRequest, False),
    ],
)
async def test_other_stream_errors(
    error_type: str, expected: type[ProviderError], retryable: bool
) -> None:
    text = sse({"type": "error", "error": {"type": error_type, "message": "said so"}}, end=False)
    server = sse_server(text)
    with pytest.raises(expected) as caught:
        await model_on(server, stream=True).request(ask())
    assert (caught.value.message, caught.value.retryable) == ("said so", retryable)


async def test_stream_cut_before_message_stop_is_a_transport_error() -> None:
    text = sse(block_start(0, {"type": "text", "text": "hal"}), end=False)
    with pytest.raises(TransportError):
        await model_on(sse_server(text), stream=True).request(ask())


async def test_malformed_event_json_is_retryable() -> None:
    bad = 'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0,\n\n'
    text = sse(block_start(0, {"type": "text", "text": ""}))
    text = text.replace("event: message_stop", bad + "event: message_stop", 1)
    with pytest.raises(ProviderError) as caught:
        await model_on(sse_server(text), stream=True).request(ask())
    assert caught.value.retryable is True
    assert "malformed" in caught.value.message


async def test_request_with_stream_true_collects_the_stream() -> None:
    text = sse(
        block_start(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text="streamed"),
        block_stop(0),
        message_delta(output_tokens=2),
    ).replace("\n", "\r\n")
    server = sse_server(text)
    response = await model_on(server, stream=True).request(ask())
    assert response.text == "streamed"
    assert server.body()["stream"] is True


# --- HTTP errors ---------------------------------------------------------------


def error_response(status: int, error_type: str, message: str, **headers: str) -> CannedResponse:
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return RecordingTransport.json(body, status=status, headers=headers)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("status", "error_type", "expected", "retryable"),
    [
        (400, "invalid_request_error", InvalidRequest, False),
        (401, "authentication_error", AuthenticationError, False),
        (404, "not_found_error", InvalidRequest, False),
        (429, "rate_limit_error", RateLimitError, True),
        (500, "api_error", ProviderError, True),
        (529, "overloaded_error", ProviderOverloaded, True),
    ],
)
async def test_http_errors_are_typed(
    stream: bool, status: int, error_type: str, expected: type[ProviderError], retryable: bool
) -> None:
    message = f"{error_type}: the server's own words"
    server = server_of(error_response(status, error_type, message, **{"retry-after": "3"}))
    with pytest.raises(expected) as caught:
        await model_on(server, stream=stream).request(ask())
    error = caught.value
    assert (error.status, error.message, error.error_type) == (status, message, error_type)
    assert error.retryable is retryable
    assert error.provider == "anthropic"
    assert error.retry_after == 3.0


async def test_connection_failure_is_a_transport_error() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    with pytest.raises(TransportError):
        await model_on(server_of(refuse)).request(ask())


async def test_events_after_message_stop_are_read_but_ignored() -> None:
    text = sse(block_start(0, {"type": "text", "text": "done"}), block_stop(0))
    text += sse(block_start(0, {"type": "text", "text": " and more"})).split("\n\n", 1)[1]
    events, _ = await stream_events(text)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["done"]
    assert events[-1].response.text == "done"
