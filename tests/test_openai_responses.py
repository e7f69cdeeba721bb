"""Unit tests of the OpenAI Responses adapter over a `RecordingTransport`.

Bodies are read back from what the adapter sent; streams are hand-written SSE
so that every edge case (argument deltas, reasoning parts, incomplete and
failed responses, cut streams) is exercised on purpose.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from taskloom.errors import (
    AuthenticationError,
    ConfigurationError,
    ContextWindowExceeded,
    InvalidRequest,
    ProviderError,
    RateLimitError,
    TransportError,
)
from taskloom.events import TextDelta, ThinkingDelta
from taskloom.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
)
from taskloom.models import (
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    OpenAIResponsesModel,
    ReasoningOptions,
    ResponseCompleted,
    ToolCallDelta,
)
from taskloom.results import ToolSpec
from taskloom.testing.transport import RecordingTransport

CLOSED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"country": {"type": "string"}},
    "required": ["country"],
    "additionalProperties": False,
}


def json_server(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> RecordingTransport:
    """A server answering every request with one canned JSON response."""
    return RecordingTransport(default=RecordingTransport.json(body, status=status, headers=headers))


def sse(*events: dict[str, Any], named: bool = True) -> str:
    out = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(event)}\n\n")
    return "".join(out)


def sse_server(text: str) -> RecordingTransport:
    """A server answering every request with one canned event stream."""
    return RecordingTransport(default=RecordingTransport.sse(text))


def make_model(server: RecordingTransport, **kw: Any) -> OpenAIResponsesModel:
    kw.setdefault("api_key", "test-key")
    client = server.client()
    return OpenAIResponsesModel("gpt-test", http_client=client, **kw)


def response_body(output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-test-2025",
        "status": "completed",
        "output": output,
        "usage": {
            "input_tokens": 30,
            "input_tokens_details": {"cached_tokens": 12},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 4},
            "total_tokens": 39,
        },
    }
    body.update(extra)
    return body


def message_item(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call_item(args: str, call_id: str = "call_1", item_id: str = "fc_1") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": "get_capital",
        "arguments": args,
        "status": "completed",
    }


async def body_for(request: ModelRequest, **kw: Any) -> dict[str, Any]:
    server = json_server(response_body([message_item("ok")]))
    await make_model(server, stream=False, **kw).request(request)
    return server.body()


def ask(*messages: Message, **kw: Any) -> ModelRequest:
    return ModelRequest(messages=list(messages) or [Message.user("hi")], **kw)


async def events_of(model: OpenAIResponsesModel, request: ModelRequest | None = None) -> list[Any]:
    return [e async for e in model.stream(request or ask())]


# --- construction -------------------------------------------------------------


def test_missing_key_names_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIResponsesModel("gpt-5")
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="MY_KEY"):
        OpenAIResponsesModel("gpt-5", api_key_env="MY_KEY")


async def test_construction_does_no_io_and_reads_the_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    server = json_server(response_body([message_item("ok")]))
    client = server.client()
    model = OpenAIResponsesModel("gpt-5-mini", http_client=client, stream=False)
    assert server.requests == []
    assert isinstance(model, Model)
    assert (model.name, model.provider, model.spec) == (
        "gpt-5-mini",
        "openai-responses",
        "openai-responses:gpt-5-mini",
    )
    assert "env-key" not in repr(model)
    await model.request(ask())
    sent = server.requests[0]
    assert sent.method == "POST"
    assert str(sent.url) == "https://api.openai.com/v1/responses"
    assert sent.headers["authorization"] == "Bearer env-key"


async def test_base_url_headers_and_keyless_servers() -> None:
    server = json_server(response_body([message_item("ok")]))
    model = make_model(
        server,
        api_key=None,
        api_key_env=None,
        base_url="http://127.0.0.1:9/v1/",
        headers={"X-Team": "blue"},
        stream=False,
    )
    await model.request(ask())
    sent = server.requests[0]
    assert str(sent.url) == "http://127.0.0.1:9/v1/responses"
    assert "authorization" not in sent.headers
    assert sent.headers["x-team"] == "blue"


# --- request body -------------------------------------------------------------


async def test_body_carries_system_user_content_and_is_stateless() -> None:
    image = ImageBlock(data=b"\x89PNG", media_type="image/png")
    body = await body_for(
        ask(
            Message.user(
                [TextBlock("look"), ImageBlock(url="https://x/y.jpg", media_type="image/jpeg")]
            ),
            Message.user([image]),
            system="Be brief.",
        )
    )
    assert body["model"] == "gpt-test"
    assert body["store"] is False
    assert body["instructions"] == "Be brief."
    assert "stream" not in body or body["stream"] is False
    assert "include" not in body
    assert body["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "https://x/y.jpg", "detail": "auto"},
            ],
        },
        {
            "type": "message",
            "role": "user",
            "content": [
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64," + image.base64,
                    "detail": "auto",
                }
            ],
        },
    ]


async def test_tool_round_trip_items() -> None:
    call = ToolCall("call_a", "get_capital", {"country": "Fr"}, provider_id="fc_a")
    raw = ToolCall("call_b", "get_capital", {}, raw_arguments='{"country": ')
    body = await body_for(
        ask(
            Message.user("capitals?"),
            Message.assistant("Looking.", tool_calls=[call, raw], provider="openai-responses"),
            Message.tool_results(
                [ToolResult("call_a", "Paris"), ToolResult("call_b", "bad JSON", is_error=True)]
            ),
        )
    )
    items = body["input"]
    assert [i["type"] for i in items] == [
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert items[1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
    }
    assert items[2] == {
        "type": "function_call",
        "call_id": "call_a",
        "name": "get_capital",
        "arguments": '{"country":"Fr"}',
        "id": "fc_a",
    }
    assert items[3]["arguments"] == '{"country": ' and "id" not in items[3]
    assert items[4] == {"type": "function_call_output", "call_id": "call_a", "output": "Paris"}
    assert items[5] == {"type": "function_call_output", "call_id": "call_b", "output": "bad JSON"}


async def test_foreign_call_ids_map_deterministically_for_call_and_output() -> None:
    odd = "toolu|01:weird id with spaces"
    long = "x" * 80
    messages = [
        Message.user("go"),
        Message.assistant(
            tool_calls=[ToolCall(odd, "f", {}), ToolCall(long, "f", {}), ToolCall("toolu_01", "f")],
            provider="anthropic",
        ),
        Message.tool_results(
            [ToolResult(odd, "1"), ToolResult(long, "2"), ToolResult("toolu_01", "3")]
        ),
    ]
    first = (await body_for(ask(*messages)))["input"]
    again = (await body_for(ask(*messages)))["input"]
    calls = [i["call_id"] for i in first if i["type"] == "function_call"]
    outputs = [i["call_id"] for i in first if i["type"] == "function_call_output"]
    assert calls == outputs
    assert calls == [i["call_id"] for i in again if i["type"] == "function_call"]
    assert calls[2] == "toolu_01"
    assert odd not in calls and long not in calls and calls[0] != calls[1]
    for call_id in calls:
        assert len(call_id) <= 64 and call_id.replace("_", "").replace("-", "").isalnum()


async def test_provider_item_ids_the_api_would_refuse_are_left_out() -> None:
    body = await body_for(
        ask(
            Message.user("go"),
            Message.assistant(tool_calls=[ToolCall("c1", "f", {}, provider_id="item_9")]),
            Message.tool_results([ToolResult("c1", "done")]),
        )
    )
    assert "id" not in body["input"][1]


async def test_reasoning_is_replayed_in_place_only_to_this_provider() -> None:
    own = ThinkingBlock(
        "Plan: look it up.", signature="enc-1", provider="openai-responses", id="rs_1"
    )
    empty_summary = ThinkingBlock("", signature="enc-2", provider="openai-responses", id="rs_2")
    unsigned = ThinkingBlock("no content", provider="openai-responses", id="rs_3")
    foreign = ThinkingBlock("claude thoughts", signature="sig", provider="anthropic")
    messages = [
        Message.user("q1"),
        Message(
            "assistant",
            (own, TextBlock("Checking."), ToolCall("c1", "f", {}), empty_summary),
            provider="openai-responses",
        ),
        Message.tool_results([ToolResult("c1", "r")]),
        Message("assistant", (foreign, TextBlock("Claude says hi")), provider="anthropic"),
        Message("assistant", (unsigned, TextBlock("later")), provider="openai-responses"),
        Message.user("q2"),
    ]
    body = await body_for(ask(*messages))
    kinds = [(i["type"], i.get("role")) for i in body["input"]]
    assert kinds == [
        ("message", "user"),
        ("reasoning", None),
        ("message", "assistant"),
        ("function_call", None),
        ("reasoning", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert body["input"][1] == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Plan: look it up."}],
        "encrypted_content": "enc-1",
    }
    assert body["input"][4] == {
        "type": "reasoning",
        "id": "rs_2",
        "summary": [],
        "encrypted_content": "enc-2",
    }
    assert "claude thoughts" not in json.dumps(body) and "sig" not in json.dumps(body["input"])
    assert body["include"] == ["reasoning.encrypted_content"]


async def test_encrypted_reasoning_is_requested_only_when_it_can_be_used() -> None:
    foreign_only = ask(
        Message.user("q"),
        Message.assistant("a", thinking=[ThinkingBlock("t", signature="s", provider="anthropic")]),
        Message.user("q2"),
    )
    assert "include" not in await body_for(foreign_only)
    effort = ModelSettings(reasoning=ReasoningOptions(effort="low", summary="auto"))
    body = await body_for(ask(settings=effort))
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    budget_only = await body_for(
        ask(settings=ModelSettings(reasoning=ReasoningOptions(budget_tokens=1000)))
    )
    assert "reasoning" not in budget_only and "include" not in budget_only


async def test_tools_are_strict_only_when_the_schema_allows() -> None:
    open_schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    optional = {**CLOSED_SCHEMA, "properties": {**CLOSED_SCHEMA["properties"], "n": {}}}
    nested_open = {
        "type": "object",
        "properties": {"inner": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        "required": ["inner"],
        "additionalProperties": False,
    }
    defaulted = {
        **CLOSED_SCHEMA,
        "properties": {"country": {"type": "string", "default": "FR"}},
    }
    tools = [
        ToolSpec("closed", "Closed tool.", CLOSED_SCHEMA),
        ToolSpec("open", "", open_schema),
        ToolSpec("optional", "d", optional),
        ToolSpec("nested", "d", nested_open),
        ToolSpec("defaulted", "d", defaulted),
        ToolSpec("empty", "d", {}),
    ]
    body = await body_for(ask(tools=tools))
    by_name = {t["name"]: t for t in body["tools"]}
    assert by_name["closed"] == {
        "type": "function",
        "name": "closed",
        "description": "Closed tool.",
        "parameters": CLOSED_SCHEMA,
        "strict": True,
    }
    assert "description" not in by_name["open"]
    assert {n: t["strict"] for n, t in by_name.items()} == {
        "closed": True,
        "open": False,
        "optional": False,
        "nested": False,
        "defaulted": False,
        "empty": False,
    }
    assert by_name["empty"]["parameters"] == {"type": "object", "properties": {}}


async def test_settings_map_and_extra_is_merged_last() -> None:
    settings = ModelSettings(
        temperature=0.3,
        top_p=0.9,
        max_tokens=77,
        stop=("END",),
        extra={"temperature": 0.1, "service_tier": "flex"},
    )
    body = await body_for(ask(settings=settings))
    assert body["temperature"] == 0.1
    assert body["top_p"] == 0.9
    assert body["max_output_tokens"] == 77
    assert body["service_tier"] == "flex"
    assert "stop" not in body and "max_tokens" not in body


async def test_model_default_settings_yield_to_the_request_field_by_field() -> None:
    defaults = ModelSettings(
        temperature=0.2,
        max_tokens=100,
        reasoning=ReasoningOptions(effort="high"),
        extra={"a": 1, "b": 1},
    )
    request = ask(settings=ModelSettings(max_tokens=5, extra={"b": 2}))
    body = await body_for(request, settings=defaults)
    assert body["temperature"] == 0.2
    assert body["max_output_tokens"] == 5
    assert body["reasoning"] == {"effort": "high"}
    assert (body["a"], body["b"]) == (1, 2)


async def test_output_schema_asks_for_structured_text() -> None:
    body = await body_for(ask(output_schema=CLOSED_SCHEMA, output_name="City"))
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "City", "schema": CLOSED_SCHEMA, "strict": True}
    }
    loose = await body_for(ask(output_schema={"type": "object"}))
    assert loose["text"]["format"]["strict"] is False
    assert loose["text"]["format"]["name"] == "output"
    spaced = await body_for(ask(output_schema=CLOSED_SCHEMA, output_name="City answer!"))
    assert spaced["text"]["format"]["name"] == "City_answer_"


# --- non-streamed responses -------------------------------------------------------


async def test_text_response_usage_and_ids() -> None:
    server = json_server(response_body([message_item("Paris"), message_item(" indeed", "msg_2")]))
    response = await make_model(server, stream=False).request(ask())
    assert response.text == "Paris indeed"
    assert response.stop_reason == "end_turn"
    assert response.response_id == "resp_1"
    assert response.provider == "openai-responses" and response.model == "gpt-test-2025"
    assert response.message.provider == "openai-responses"
    assert response.message.model == "gpt-test"
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens) == (30, 9)
    assert (usage.cache_read_tokens, usage.reasoning_tokens, usage.requests) == (12, 4, 1)


async def test_function_calls_and_invalid_arguments() -> None:
    output = [
        call_item('{"country":"France"}'),
        call_item('{"country": "Fra', call_id="call_2", item_id="fc_2"),
        call_item("[1, 2]", call_id="call_3", item_id="fc_3"),
        call_item("", call_id="call_4", item_id="fc_4"),
    ]
    response = await make_model(json_server(response_body(output)), stream=False).request(ask())
    assert response.stop_reason == "tool_use"
    calls = response.message.tool_calls
    assert calls[0] == ToolCall("call_1", "get_capital", {"country": "France"}, provider_id="fc_1")
    assert calls[1].arguments == {} and calls[1].raw_arguments == '{"country": "Fra'
    assert calls[2].arguments == {} and calls[2].raw_arguments == "[1, 2]"
    assert calls[3].arguments == {} and calls[3].raw_arguments is None


async def test_reasoning_items_become_thinking_blocks_in_order() -> None:
    output = [
        {
            "type": "reasoning",
            "id": "rs_1",
            "encrypted_content": "enc",
            "summary": [
                {"type": "summary_text", "text": "**First**"},
                {"type": "summary_text", "text": "Second"},
            ],
        },
        message_item("Done."),
        {
            "type": "reasoning",
            "id": "rs_2",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "raw thought"}],
        },
    ]
    response = await make_model(json_server(response_body(output)), stream=False).request(ask())
    first, text, second = response.message.blocks
    assert first == ThinkingBlock(
        "**First**\n\nSecond", signature="enc", provider="openai-responses", id="rs_1"
    )
    assert text == TextBlock("Done.")
    assert second == ThinkingBlock("raw thought", provider="openai-responses", id="rs_2")


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("max_output_tokens", "max_tokens"), ("content_filter", "content_filter")],
)
async def test_incomplete_responses_say_why(reason: str, expected: str) -> None:
    body = response_body(
        [message_item("Partial")], status="incomplete", incomplete_details={"reason": reason}
    )
    response = await make_model(json_server(body), stream=False).request(ask())
    assert response.stop_reason == expected
    assert response.text == "Partial"


async def test_refusal_content() -> None:
    item = message_item("")
    item["content"] = [{"type": "refusal", "refusal": "I can't help with that."}]
    response = await make_model(json_server(response_body([item])), stream=False).request(ask())
    assert response.stop_reason == "refusal"
    assert response.text == "I can't help with that."


async def test_failed_response_body_raises_typed_error() -> None:
    body = response_body(
        [], status="failed", error={"code": "rate_limit_exceeded", "message": "Slow down, please."}
    )
    with pytest.raises(RateLimitError) as info:
        await make_model(json_server(body), stream=False).request(ask())
    assert info.value.message == "Slow down, please."
    assert info.value.retryable


async def test_unstreamed_stream_yields_one_completed_event() -> None:
    server = json_server(response_body([message_item("whole")]))
    events = await events_of(make_model(server, stream=False))
    assert len(events) == 1 and isinstance(events[0], ResponseCompleted)
    assert events[0].response.text == "whole"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("status", "error", "kind", "retryable"),
    [
        (400, {"message": "Invalid 'temperature'.", "type": "invalid_request_error"}, InvalidRequest, False),
        (401, {"message": "Incorrect API key provided.", "code": "invalid_api_key"}, AuthenticationError, False),
        (429, {"message": "Rate limit reached.", "type": "requests"}, RateLimitError, True),
        (400, {"message": "Your input exceeds the context window.", "code": "context_length_exceeded"}, ContextWindowExceeded, False),
        (500, {"message": "The server had an error.", "type": "server_error"}, ProviderError, True),
    ],
)  # fmt: skip
async def test_http_errors_are_typed_with_the_message_verbatim(
    stream: bool, status: int, error: dict[str, str], kind: type[ProviderError], retryable: bool
) -> None:
    server = json_server({"error": error}, status=status, headers={"retry-after": "3"})
    with pytest.raises(kind) as info:
        await make_model(server, stream=stream).request(ask())
    assert info.value.message == error["message"]
    assert info.value.status == status
    assert info.value.retryable is retryable
    assert info.value.provider == "openai-responses"
    if status == 429:
        assert info.value.retry_after == 3.0


# --- streamed responses -------------------------------------------------------------


def created() -> dict[str, Any]:
    return {
        "type": "response.created",
        "response": {"id": "resp_s", "status": "in_progress", "output": [], "usage": None},
    }


def completed(output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "response.completed", "response": response_body(output, id="resp_s", **extra)}


def added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def text_delta(index: int, delta: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "output_index": index,
        "item_id": item_id,
        "content_index": 0,
        "delta": delta,
    }


def args_delta(index: int, delta: str, item_id: str = "fc_1") -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "output_index": index,
        "item_id": item_id,
        "delta": delta,
    }


def text_stream(*pieces: str, named: bool = True) -> str:
    full = "".join(pieces)
    return sse(
        created(),
        added(0, {"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        *[text_delta(0, p) for p in pieces],
        done(0, message_item(full)),
        completed([message_item(full)]),
        named=named,
    )


async def test_text_stream_deltas_match_the_final_message() -> None:
    server = sse_server(text_stream("The capital", " is", " Paris."))
    events = await events_of(make_model(server))
    assert server.body()["stream"] is True
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["The capital", " is", " Paris."]
    assert isinstance(events[-1], ResponseCompleted)
    assert sum(isinstance(e, ResponseCompleted) for e in events) == 1
    response = events[-1].response
    assert response.text == "The capital is Paris."
    assert response.response_id == "resp_s"
    assert response.usage.cache_read_tokens == 12 and response.usage.requests == 1


async def test_streams_without_event_names_parse_from_the_data_type() -> None:
    response = await make_model(sse_server(text_stream("a", "b", named=False))).request(ask())
    assert response.text == "ab"


async def test_request_streams_when_stream_is_true() -> None:
    server = sse_server(text_stream("x", "y"))
    response = await make_model(server).request(ask())
    assert isinstance(response, ModelResponse) and response.text == "xy"
    assert server.body()["stream"] is True


async def test_function_call_stream_announces_then_sends_argument_pieces() -> None:
    first = call_item('{"country":"France"}')
    second = call_item('{"country":"Peru"}', call_id="call_2", item_id="fc_2")
    stream = sse(
        created(),
        added(0, {"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        text_delta(0, "Checking."),
        done(0, message_item("Checking.")),
        added(1, {**first, "arguments": "", "status": "in_progress"}),
        args_delta(1, '{"country"'),
        args_delta(1, ':"France"}'),
        {"type": "response.function_call_arguments.done", "output_index": 1, "item_id": "fc_1", "arguments": first["arguments"]},
        done(1, first),
        added(2, {**second, "arguments": "", "status": "in_progress"}),
        {"type": "response.function_call_arguments.done", "output_index": 2, "item_id": "fc_2", "arguments": second["arguments"]},
        done(2, second),
        completed([message_item("Checking."), first, second]),
    )  # fmt: skip
    events = await events_of(make_model(sse_server(stream)))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, id="call_1", name="get_capital", arguments="")
    assert deltas[3] == ToolCallDelta(1, id="call_2", name="get_capital", arguments="")
    for index, call in enumerate((first, second)):
        pieces = "".join(d.arguments for d in deltas if d.index == index)
        assert pieces == call["arguments"]
    response = events[-1].response
    assert response.stop_reason == "tool_use"
    assert response.message.tool_calls == [
        ToolCall("call_1", "get_capital", {"country": "France"}, provider_id="fc_1"),
        ToolCall("call_2", "get_capital", {"country": "Peru"}, provider_id="fc_2"),
    ]
    assert [type(b) for b in response.message.blocks] == [TextBlock, ToolCall, ToolCall]


async def test_streamed_invalid_arguments_are_kept_raw() -> None:
    broken = call_item('{"country": "Fr')
    stream = sse(
        added(0, {**broken, "arguments": ""}),
        args_delta(0, '{"country": "Fr'),
        done(0, broken),
        completed([broken]),
    )
    response = await make_model(sse_server(stream)).request(ask())
    (call,) = response.message.tool_calls
    assert call.arguments == {} and call.raw_arguments == '{"country": "Fr'


async def test_reasoning_summary_stream() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "encrypted_content": "enc-final",
        "summary": [
            {"type": "summary_text", "text": "Part one."},
            {"type": "summary_text", "text": "Part two."},
        ],
    }

    def summary(index: int, delta: str) -> dict[str, Any]:
        return {
            "type": "response.reasoning_summary_text.delta",
            "output_index": 0,
            "item_id": "rs_1",
            "summary_index": index,
            "delta": delta,
        }

    stream = sse(
        created(),
        added(0, {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc-0"}),
        summary(0, "Part "),
        summary(0, "one."),
        summary(1, "Part two."),
        done(0, reasoning),
        added(1, {"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        text_delta(1, "Answer."),
        done(1, message_item("Answer.")),
        completed([reasoning, message_item("Answer.")]),
    )
    events = await events_of(make_model(sse_server(stream)))
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    block = events[-1].response.message.blocks[0]
    assert block == ThinkingBlock(
        "Part one.\n\nPart two.", signature="enc-final", provider="openai-responses", id="rs_1"
    )
    assert thinking == block.text
    assert events[-1].response.text == "Answer."


async def test_raw_reasoning_text_stream() -> None:
    stream = sse(
        added(0, {"type": "reasoning", "id": "rs_t", "summary": []}),
        {"type": "response.reasoning_text.delta", "output_index": 0, "item_id": "rs_t", "content_index": 0, "delta": "2+2"},
        {"type": "response.reasoning_text.delta", "output_index": 0, "item_id": "rs_t", "content_index": 0, "delta": " is 4"},
        done(0, {"type": "reasoning", "id": "rs_t", "summary": [], "content": [{"type": "reasoning_text", "text": "2+2 is 4"}]}),
        completed([]),
    )  # fmt: skip
    events = await events_of(make_model(sse_server(stream)))
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["2+2", " is 4"]
    (block,) = events[-1].response.message.blocks
    assert block == ThinkingBlock("2+2 is 4", provider="openai-responses", id="rs_t")


async def test_incomplete_stream_keeps_the_partial_text() -> None:
    stream = sse(
        created(),
        added(0, {"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        text_delta(0, "Once upon"),
        text_delta(0, " a time"),
        {
            "type": "response.incomplete",
            "response": response_body(
                [], status="incomplete", incomplete_details={"reason": "max_output_tokens"}
            ),
        },
    )
    response = await make_model(sse_server(stream)).request(ask())
    assert response.stop_reason == "max_tokens"
    assert response.text == "Once upon a time"


async def test_final_output_is_used_when_no_items_streamed() -> None:
    stream = sse(completed([message_item("only at the end"), call_item("{}")]))
    response = await make_model(sse_server(stream)).request(ask())
    assert response.text == "only at the end"
    assert response.message.tool_calls[0].arguments == {}


@pytest.mark.parametrize(
    ("event", "kind", "message", "retryable"),
    [
        ({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "Something broke."}}}, ProviderError, "Something broke.", True),
        ({"type": "response.failed", "response": {"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "Too fast."}}}, RateLimitError, "Too fast.", True),
        ({"type": "error", "code": "invalid_prompt", "message": "Prompt flagged.", "param": None}, InvalidRequest, "Prompt flagged.", False),
        ({"type": "error", "error": {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "Too long for the context window."}}, ContextWindowExceeded, "Too long for the context window.", False),
    ],
)  # fmt: skip
async def test_stream_errors_are_typed(
    event: dict[str, Any], kind: type[ProviderError], message: str, retryable: bool
) -> None:
    stream = sse(
        created(),
        added(0, {"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        text_delta(0, "partial"),
        event,
    )
    seen: list[Any] = []
    with pytest.raises(kind) as info:
        async for e in make_model(sse_server(stream)).stream(ask()):
            seen.append(e)
    assert type(info.value) is kind
    assert info.value.message == message
    assert info.value.retryable is retryable
    assert not any(isinstance(e, ResponseCompleted) for e in seen)


async def test_stream_cut_before_completion_is_a_retryable_transport_error() -> None:
    stream = sse(created(), added(0, message_item("")), text_delta(0, "half"))
    with pytest.raises(TransportError) as info:
        await make_model(sse_server(stream)).request(ask())
    assert info.value.retryable


async def test_malformed_event_json_is_a_retryable_provider_error() -> None:
    stream = sse(created()) + "event: response.output_text.delta\ndata: {not json\n\n"
    with pytest.raises(ProviderError) as info:
        await make_model(sse_server(stream)).request(ask())
    assert info.value.retryable
    assert "malformed JSON" in info.value.message
