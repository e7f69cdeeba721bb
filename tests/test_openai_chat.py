"""OpenAIChatModel: the bodies it sends and how it reads what comes back.

Servers are `taskloom.testing.transport.RecordingTransport`s, answering each request
with the next prepared response; streamed bodies are written by hand to
reach the edge cases real servers produce.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx2
import pytest

from taskloom.errors import (
    AuthenticationError,
    ConfigurationError,
    ContextWindowExceeded,
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
    ModelSettings,
    OpenAIChatModel,
    ReasoningOptions,
    ResponseCompleted,
    StreamEvent,
    ToolCallDelta,
)
from taskloom.results import ToolSpec
from taskloom.testing.fake_server import FakeServer
from taskloom.testing.transport import CannedResponse, RecordingTransport

WIRE_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")


def completion(
    message: dict[str, Any], finish: str | None = "stop", usage: Any = None
) -> CannedResponse:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test-2025",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return RecordingTransport.json(body)


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "model": "gpt-test-2025",
    }
    out["choices"] = (
        []
        if delta is None and finish is None
        else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    )
    out.update(extra)
    return out


def sse(*chunks: dict[str, Any], done: bool = True) -> CannedResponse:
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    if done:
        text += "data: [DONE]\n\n"
    return RecordingTransport.sse(text)


def tool_delta(
    index: int | None, *, id: str | None = None, name: str | None = None, args: str | None = None
) -> dict[str, Any]:
    call: dict[str, Any] = {"function": {}}
    if index is not None:
        call["index"] = index
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    if name is not None:
        call["function"]["name"] = name
    call["function"]["arguments"] = args
    return {"tool_calls": [call]}


def model(server: RecordingTransport, **options: Any) -> OpenAIChatModel:
    options.setdefault("api_key", "sk-test")
    options.setdefault("stream", False)
    return OpenAIChatModel(options.pop("name", "gpt-test"), http_client=server.client(), **options)


def ask(text: str = "hi", **kw: Any) -> ModelRequest:
    return ModelRequest(messages=[Message.user(text)], **kw)


async def events_of(m: OpenAIChatModel, request: ModelRequest) -> list[StreamEvent]:
    return [e async for e in m.stream(request)]


# --- construction -------------------------------------------------------------


def test_missing_key_raises_at_construction_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o")
    monkeypatch.delenv("CORP_LLM_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="CORP_LLM_KEY"):
        OpenAIChatModel("gpt-4o", api_key_env="CORP_LLM_KEY")


async def test_key_from_environment_and_no_io_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server = RecordingTransport(completion({"content": "ok"}))
    m = OpenAIChatModel("gpt-4o", http_client=server.client(), stream=False)
    assert server.requests == []
    assert isinstance(m, Model)
    await m.request(ask())
    sent = server.requests[0]
    assert sent.method == "POST"
    assert str(sent.url) == "https://api.openai.com/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-from-env"


async def test_no_key_sends_no_authorization_and_custom_headers_go_out() -> None:
    server = RecordingTransport(completion({"content": "ok"}))
    m = model(
        server,
        api_key=None,
        api_key_env=None,
        base_url="http://127.0.0.1:9/v1/",
        headers={"X-Team": "a"},
    )
    await m.request(ask())
    sent = server.requests[0]
    assert "authorization" not in sent.headers
    assert sent.headers["x-team"] == "a"
    assert str(sent.url) == "http://127.0.0.1:9/v1/chat/completions"
    assert m.base_url == "http://127.0.0.1:9/v1"


def test_spec_names_provider_model_and_any_non_default_server() -> None:
    assert OpenAIChatModel("gpt-4o", api_key="k").spec == "openai:gpt-4o"
    assert (
        OpenAIChatModel("m", api_key="k", base_url="http://127.0.0.1:9/v1").spec
        == "openai:m@http://127.0.0.1:9/v1"
    )
    local = OpenAIChatModel("qwen3", provider="ollama", api_key_env=None)
    assert (local.spec, local.base_url, local.provider, local.name) == (
        "ollama:qwen3",
        "http://localhost:11434/v1",
        "ollama",
        "qwen3",
    )
    odd = OpenAIChatModel("m", provider="corp", api_key_env=None, base_url="http://10.0.0.1/v1")
    assert odd.spec == "openai:m@http://10.0.0.1/v1"


# --- request bodies ------------------------------------------------------------


async def test_body_carries_the_conversation_and_drops_thinking() -> None:
    server = RecordingTransport(completion({"content": "ok"}))
    png = b"\x89PNG\r\n\x1a\nfake"
    messages = [
        Message.user(
            [
                TextBlock("look"),
                ImageBlock(data=png, media_type="image/png"),
                ImageBlock(url="https://x.test/a.jpg"),
            ]
        ),
        Message.assistant(
            "let me check",
            thinking=[ThinkingBlock("secret reasoning", provider="openai")],
            tool_calls=[
                ToolCall("call_1", "add", {"a": 1, "b": "é"}),
                ToolCall("call_2", "broken", {}, raw_arguments='{"a": '),
            ],
        ),
        Message.tool_results(
            [
                ToolResult("call_1", "3", tool_name="add"),
                ToolResult("call_2", "bad JSON", is_error=True),
            ]
        ),
        Message.user("thanks"),
    ]
    await model(server).request(ModelRequest(messages=messages, system="be brief"))
    body = server.body()
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBORw0KGgpmYWtl"},
                },
                {"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}},
            ],
        },
        {
            "role": "assistant",
            "content": "let me check",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a":1,"b":"é"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "broken", "arguments": '{"a": '},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        {"role": "tool", "tool_call_id": "call_2", "content": "bad JSON"},
        {"role": "user", "content": "thanks"},
    ]
    assert "secret reasoning" not in server.requests[0].content.decode()
    assert "stream" not in body


async def test_assistant_turn_with_only_thinking_is_left_out() -> None:
    server = RecordingTransport(completion({"content": "ok"}))
    messages = [
        Message.user("a"),
        Message.assistant(thinking=[ThinkingBlock("hmm")]),
        Message.user("b"),
    ]
    await model(server).request(ModelRequest(messages=messages))
    assert [m["role"] for m in server.body()["messages"]] == ["user", "user"]


async def test_tools_settings_and_extra_merged_last() -> None:
    server = RecordingTransport(completion({"content": "ok"}))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    settings = ModelSettings(
        temperature=0.2,
        top_p=0.5,
        max_tokens=64,
        stop=("END",),
        reasoning=ReasoningOptions(effort="low"),
        extra={"temperature": 0.9, "user": "u-1", "tool_choice": "required"},
    )
    await model(server).request(
        ask(tools=[ToolSpec("add", "Add numbers.", schema)], settings=settings)
    )
    body = server.body()
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "add", "description": "Add numbers.", "parameters": schema},
        }
    ]
    assert body["temperature"] == 0.9
    assert (body["top_p"], body["stop"], body["max_completion_tokens"]) == (0.5, ["END"], 64)
    assert body["reasoning_effort"] == "low"
    assert (body["user"], body["tool_choice"]) == ("u-1", "required")
    assert "max_tokens" not in body


async def test_compatible_servers_get_max_tokens() -> None:
    server = RecordingTransport(completion({"content": "ok"}))
    m = model(server, provider="vllm", api_key_env=None)
    await m.request(ask(settings=ModelSettings(max_tokens=10)))
    assert server.body()["max_tokens"] == 10
    assert "max_completion_tokens" not in server.body()


async def test_model_settings_are_defaults_under_the_request_settings() -> None:
    server = RecordingTransport(completion({"content": "ok"}), completion({"content": "ok"}))
    defaults = ModelSettings(temperature=0.1, max_tokens=5, extra={"user": "default", "seed": 1})
    m = model(server, settings=defaults)
    await m.request(ask())
    await m.request(ask(settings=ModelSettings(temperature=0.7, extra={"user": "mine"})))
    first, second = server.body(0), server.body(1)
    assert (first["temperature"], first["max_completion_tokens"], first["user"], first["seed"]) == (
        0.1,
        5,
        "default",
        1,
    )
    assert (
        second["temperature"],
        second["max_completion_tokens"],
        second["user"],
        second["seed"],
    ) == (0.7, 5, "mine", 1)


CLOSED = {
    "type": "object",
    "properties": {"a": {"type": "string"}},
    "required": ["a"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "strict"),
    [
        (CLOSED, True),
        (
            {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/P"}}},
                "required": ["items"],
                "additionalProperties": False,
                "$defs": {"P": CLOSED},
            },
            True,
        ),
        ({**CLOSED, "additionalProperties": True}, False),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, False),
        ({**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}, False),
        ({**CLOSED, "properties": {"a": {"type": "object", "properties": {}}}}, False),
        ({**CLOSED, "properties": {"a": {"type": "string", "minLength": 2}}}, False),
        ({"type": "array", "items": {"type": "string"}}, False),
    ],
    ids=[
        "closed",
        "defs",
        "open",
        "no-additional",
        "optional-prop",
        "open-nested",
        "min-length",
        "root-array",
    ],
)
async def test_output_schema_asks_for_strict_json_when_allowed(
    schema: dict[str, Any], strict: bool
) -> None:
    server = RecordingTransport(completion({"content": "{}"}))
    await model(server).request(ask(output_schema=schema, output_name="City answer"))
    assert server.body()["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "City_answer", "schema": schema, "strict": strict},
    }


# --- tool call ids ---------------------------------------------------------------


def _history(call_ids: list[str], result_ids: list[str]) -> list[Message]:
    return [
        Message.user("go"),
        Message.assistant(tool_calls=[ToolCall(i, "f", {"n": n}) for n, i in enumerate(call_ids)]),
        Message.tool_results([ToolResult(i, f"r{n}") for n, i in enumerate(result_ids)]),
    ]


async def test_long_and_odd_ids_are_mapped_the_same_for_call_and_result() -> None:
    ids = ["x" * 60, "tool.call/1", "y" * 60]
    server = RecordingTransport(completion({"content": "a"}), completion({"content": "b"}))
    m = model(server)
    await m.request(ModelRequest(messages=_history(ids, ids)))
    await m.request(ModelRequest(messages=_history(ids, ids)))
    wire = server.body(0)["messages"]
    call_ids = [c["id"] for c in wire[1]["tool_calls"]]
    assert all(WIRE_ID.fullmatch(i) for i in call_ids)
    assert len(set(call_ids)) == 3
    assert [w["tool_call_id"] for w in wire[2:]] == call_ids
    assert server.body(1)["messages"] == wire


async def test_empty_ids_get_positional_ids_paired_with_results_in_order() -> None:
    server = RecordingTransport(completion({"content": "a"}), completion({"content": "b"}))
    m = model(server)
    await m.request(ModelRequest(messages=_history(["", ""], ["", ""])))
    await m.request(ModelRequest(messages=_history(["", ""], ["", ""])))
    wire = server.body(0)["messages"]
    call_ids = [c["id"] for c in wire[1]["tool_calls"]]
    assert all(WIRE_ID.fullmatch(i) for i in call_ids) and len(set(call_ids)) == 2
    assert [(w["tool_call_id"], w["content"]) for w in wire[2:]] == [
        (call_ids[0], "r0"),
        (call_ids[1], "r1"),
    ]
    assert server.body(1)["messages"] == wire


async def test_history_from_another_provider_is_accepted_and_its_thinking_dropped() -> None:
    anthropic_turn = Message(
        "assistant",
        (
            ThinkingBlock("I should look it up", signature="EqQBCkYIARgCIkD", provider="anthropic"),
            ThinkingBlock(redacted=True, data="opaque-payload", provider="anthropic"),
            TextBlock("Checking."),
            ToolCall("toolu_01A09q90qw90lq917835lq9", "lookup", {"q": "x"}),
        ),
        provider="anthropic",
        model="claude-sonnet-4-5",
    )
    messages = [
        Message.user("find x"),
        anthropic_turn,
        Message.tool_results([ToolResult("toolu_01A09q90qw90lq917835lq9", "found")]),
    ]
    server = RecordingTransport(completion({"content": "done"}))
    response = await model(server).request(ModelRequest(messages=messages))
    assert response.text == "done"
    raw = server.requests[0].content.decode()
    for secret in ("I should look it up", "EqQBCkYIARgCIkD", "opaque-payload"):
        assert secret not in raw
    wire = server.body()["messages"]
    assert wire[1] == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "toolu_01A09q90qw90lq917835lq9",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q":"x"}'},
            }
        ],
    }
    assert wire[2] == {
        "role": "tool",
        "tool_call_id": "toolu_01A09q90qw90lq917835lq9",
        "content": "found",
    }


# --- non-streamed responses -----------------------------------------------------------


async def test_text_usage_ids_and_origin() -> None:
    usage = {
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 12},
    }
    server = RecordingTransport(completion({"content": "Paris."}, usage=usage))
    m = model(server, provider="openai")
    response = await m.request(ask())
    assert response.text == "Paris."
    assert response.message.blocks == (TextBlock("Paris."),)
    assert (response.message.provider, response.message.model) == ("openai", "gpt-test")
    assert (response.model, response.provider, response.response_id) == (
        "gpt-test-2025",
        "openai",
        "chatcmpl-1",
    )
    assert response.stop_reason == "end_turn"
    u = response.usage
    assert (
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.reasoning_tokens,
        u.requests,
    ) == (120, 30, 100, 12, 1)


async def test_usage_missing_counts_one_request() -> None:
    server = RecordingTransport(completion({"content": "x"}))
    response = await model(server).request(ask())
    assert (response.usage.total_tokens, response.usage.requests) == (0, 1)


async def test_parallel_tool_calls_with_broken_arguments() -> None:
    calls = [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "ok", "arguments": '{"x": [1, 2]}'},
        },
        {"id": "call_b", "type": "function", "function": {"name": "cut", "arguments": '{"x": '}},
        {"id": "call_c", "type": "function", "function": {"name": "list", "arguments": "[1, 2]"}},
        {"id": "call_d", "type": "function", "function": {"name": "null", "arguments": None}},
        {"id": "", "type": "function", "function": {"name": "noid1", "arguments": ""}},
        {"type": "function", "function": {"name": "noid2", "arguments": "{}"}},
    ]
    server = RecordingTransport(
        completion({"content": None, "tool_calls": calls}, finish="tool_calls")
    )
    response = await model(server).request(ask())
    got = response.message.tool_calls
    assert [(c.name, c.arguments, c.raw_arguments) for c in got] == [
        ("ok", {"x": [1, 2]}, None),
        ("cut", {}, '{"x": '),
        ("list", {}, "[1, 2]"),
        ("null", {}, None),
        ("noid1", {}, None),
        ("noid2", {}, None),
    ]
    assert [c.id for c in got[:4]] == ["call_a", "call_b", "call_c", "call_d"]
    assert all(c.id for c in got) and len({c.id for c in got}) == 6
    assert response.stop_reason == "tool_use"
    assert response.text == ""


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_fields_become_the_first_block(field: str) -> None:
    server = RecordingTransport(completion({"content": "4", field: "2+2 is 4"}))
    response = await model(server, provider="deepseek", api_key_env=None).request(ask())
    assert response.message.blocks == (
        ThinkingBlock("2+2 is 4", provider="deepseek"),
        TextBlock("4"),
    )


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("stop", "end_turn"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("length", "max_tokens"),
        ("content_filter", "content_filter"),
        ("eos_token", "eos_token"),
    ],
)
async def test_finish_reason_map(finish: str, expected: str) -> None:
    server = RecordingTransport(completion({"content": "x"}, finish=finish))
    assert (await model(server).request(ask())).stop_reason == expected


async def test_refusal_is_text_with_refusal_stop_reason() -> None:
    server = RecordingTransport(completion({"content": None, "refusal": "I can't help with that."}))
    response = await model(server).request(ask())
    assert (response.text, response.stop_reason) == ("I can't help with that.", "refusal")


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (
            401,
            {
                "message": "Incorrect API key provided",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            },
            AuthenticationError,
        ),
        (
            429,
            {
                "message": "Rate limit reached for gpt-4o",
                "type": "requests",
                "code": "rate_limit_exceeded",
            },
            RateLimitError,
        ),
        (
            400,
            {
                "message": "This model's maximum context length is 8192 tokens",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            },
            ContextWindowExceeded,
        ),
    ],
)
async def test_error_status_is_typed_with_the_message_verbatim(
    status: int, error: dict[str, Any], kind: type[ProviderError]
) -> None:
    for stream in (False, True):
        server = RecordingTransport(RecordingTransport.json({"error": error}, status=status))
        with pytest.raises(kind) as info:
            await model(server, stream=stream).request(ask())
        assert (info.value.message, info.value.status, info.value.provider) == (
            error["message"],
            status,
            "openai",
        )


async def test_error_object_with_status_200_is_typed() -> None:
    server = RecordingTransport(
        RecordingTransport.json({"error": {"message": "upstream overloaded", "code": 503}})
    )
    with pytest.raises(ProviderError) as info:
        await model(server).request(ask())
    assert (info.value.message, info.value.status, info.value.retryable) == (
        "upstream overloaded",
        503,
        True,
    )


async def test_body_that_is_not_a_completion_is_a_provider_error() -> None:
    server = RecordingTransport(RecordingTransport.json({"pathname": "/chat/completions"}))
    with pytest.raises(ProviderError, match="not a chat completion"):
        await model(server).request(ask())


async def test_stream_false_still_streams_events_ending_with_the_response() -> None:
    message = {
        "content": "calling",
        "reasoning_content": "think",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
        ],
    }
    server = RecordingTransport(completion(message, finish="tool_calls"))
    events = await events_of(model(server, stream=False), ask())
    assert events[:3] == [
        ThinkingDelta(text="think"),
        TextDelta(text="calling"),
        ToolCallDelta(index=0, id="call_1", name="f", arguments='{"a":1}'),
    ]
    assert isinstance(events[3], ResponseCompleted) and len(events) == 4
    assert events[3].response.message.tool_calls == [ToolCall("call_1", "f", {"a": 1})]
    assert "stream" not in server.body()


# --- streamed responses ------------------------------------------------------------------


async def test_stream_text_deltas_usage_and_ids() -> None:
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    server = RecordingTransport(
        sse(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, finish="stop"),
            chunk(usage=usage),
        )
    )
    m = model(server, stream=True)
    events = await events_of(m, ask())
    assert events[:2] == [TextDelta(text="Hel"), TextDelta(text="lo")]
    response = events[-1].response  # type: ignore[union-attr]
    assert (response.text, response.stop_reason, response.response_id, response.model) == (
        "Hello",
        "end_turn",
        "chatcmpl-s",
        "gpt-test-2025",
    )
    u = response.usage
    assert (
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.reasoning_tokens,
        u.requests,
    ) == (9, 3, 4, 1, 1)
    body = server.body()
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


async def test_request_with_stream_true_reads_the_stream() -> None:
    server = RecordingTransport(sse(chunk({"content": "streamed"}), chunk({}, finish="length")))
    response = await model(server, stream=True).request(ask())
    assert (response.text, response.stop_reason) == ("streamed", "max_tokens")
    assert server.body()["stream"] is True


async def test_stream_parallel_tool_calls_are_routed_by_index() -> None:
    server = RecordingTransport(
        sse(
            chunk(tool_delta(0, id="call_a", name="first", args="")),
            chunk(tool_delta(0, args='{"x":')),
            chunk(tool_delta(1, id="call_b", name="second", args='{"y": 2}')),
            chunk(tool_delta(0, args=" 1}")),
            chunk({}, finish="tool_calls"),
        )
    )
    events = await events_of(model(server, stream=True), ask())
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas == [
        ToolCallDelta(index=0, id="call_a", name="first", arguments=""),
        ToolCallDelta(index=0, arguments='{"x":'),
        ToolCallDelta(index=1, id="call_b", name="second", arguments='{"y": 2}'),
        ToolCallDelta(index=0, arguments=" 1}"),
    ]
    response = events[-1].response  # type: ignore[union-attr]
    assert response.message.tool_calls == [
        ToolCall("call_a", "first", {"x": 1}),
        ToolCall("call_b", "second", {"y": 2}),
    ]
    assert response.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("pieces", "arguments", "raw"),
    [
        (["", "{}"], {}, None),
        (["{}", '{"a": ', "1}"], {"a": 1}, None),
        ([None], {}, None),
        ([None, None], {}, None),
        (['{"a"', ": 1", "}"], {"a": 1}, None),
        (["{not json"], {}, "{not json"),
        (["[1,", "2]"], {}, "[1,2]"),
        (['"text"'], {}, '"text"'),
    ],
    ids=[
        "empty-then-object",
        "placeholder-then-object",
        "null",
        "null-twice",
        "pieces",
        "invalid",
        "array",
        "string",
    ],
)
async def test_stream_argument_edge_cases(
    pieces: list[str | None], arguments: dict[str, Any], raw: str | None
) -> None:
    chunks = [chunk(tool_delta(0, id="call_1", name="f", args=pieces[0]))]
    chunks += [chunk(tool_delta(0, args=p)) for p in pieces[1:]]
    server = RecordingTransport(sse(*chunks, chunk({}, finish="tool_calls")))
    response = await model(server, stream=True).request(ask())
    assert response.message.tool_calls == [ToolCall("call_1", "f", arguments, raw_arguments=raw)]


async def test_stream_calls_without_ids_get_ids_and_names_are_not_doubled() -> None:
    server = RecordingTransport(
        sse(
            chunk(tool_delta(0, name="lookup", args='{"q":')),
            chunk(tool_delta(0, name="lookup", args='"a"}')),
            chunk(tool_delta(1, name="other", args="{}")),
            chunk({}, finish="tool_calls"),
        )
    )
    response = await model(server, stream=True).request(ask())
    calls = response.message.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("lookup", {"q": "a"}), ("other", {})]
    assert all(c.id for c in calls) and calls[0].id != calls[1].id


async def test_stream_new_id_at_a_used_index_is_a_new_call() -> None:
    server = RecordingTransport(
        sse(
            chunk(tool_delta(0, id="call_1", name="a", args='{"n": 1}')),
            chunk(tool_delta(0, id="call_2", name="b", args='{"n":')),
            chunk(tool_delta(0, args=" 2}")),
            chunk({}, finish="tool_calls"),
        )
    )
    response = await model(server, stream=True).request(ask())
    assert response.message.tool_calls == [
        ToolCall("call_1", "a", {"n": 1}),
        ToolCall("call_2", "b", {"n": 2}),
    ]


async def test_stream_calls_without_index_follow_their_id() -> None:
    server = RecordingTransport(
        sse(
            chunk(tool_delta(None, id="call_1", name="a", args="{}")),
            chunk(tool_delta(None, id="call_2", name="b", args='{"k"')),
            chunk(tool_delta(None, args=': "v"}')),
            chunk({}, finish="tool_calls"),
        )
    )
    response = await model(server, stream=True).request(ask())
    assert response.message.tool_calls == [
        ToolCall("call_1", "a", {}),
        ToolCall("call_2", "b", {"k": "v"}),
    ]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_stream_reasoning_deltas_become_thinking(field: str) -> None:
    server = RecordingTransport(
        sse(
            chunk({field: "step 1, "}),
            chunk({field: "step 2"}),
            chunk({"content": "answer"}),
            chunk({}, finish="stop"),
        )
    )
    m = model(server, stream=True, provider="ollama", api_key_env=None)
    events = await events_of(m, ask())
    assert events[:3] == [
        ThinkingDelta(text="step 1, "),
        ThinkingDelta(text="step 2"),
        TextDelta(text="answer"),
    ]
    message = events[-1].response.message  # type: ignore[union-attr]
    assert message.blocks == (
        ThinkingBlock("step 1, step 2", provider="ollama"),
        TextBlock("answer"),
    )


@pytest.mark.parametrize(
    ("error", "kind", "status", "retryable"),
    [
        (
            {"message": "Rate limit reached", "type": "rate_limit_exceeded", "code": 429},
            RateLimitError,
            429,
            True,
        ),
        (
            {"message": "The server had an error processing your request.", "type": "server_error"},
            ProviderError,
            None,
            True,
        ),
        (
            {"message": "bad schema", "type": "BadRequestError", "code": "400"},
            ProviderError,
            400,
            False,
        ),
    ],
)
async def test_error_inside_the_stream_is_typed(
    error: dict[str, Any], kind: type[ProviderError], status: int | None, retryable: bool
) -> None:
    server = RecordingTransport(sse(chunk({"content": "par"}), {"error": error}, done=False))
    with pytest.raises(kind) as info:
        await events_of(model(server, stream=True), ask())
    assert (info.value.message, info.value.status, info.value.retryable) == (
        error["message"],
        status,
        retryable,
    )


async def test_stream_cut_before_its_end_is_a_transport_error() -> None:
    server = RecordingTransport(sse(chunk({"content": "half an ans"}), done=False))
    with pytest.raises(TransportError):
        await model(server, stream=True).request(ask())


async def test_stream_without_done_marker_but_finished_is_complete() -> None:
    server = RecordingTransport(sse(chunk({"content": "ok"}), chunk({}, finish="stop"), done=False))
    assert (await model(server, stream=True).request(ask())).text == "ok"


async def test_malformed_event_is_a_retryable_provider_error() -> None:
    bad = RecordingTransport.sse("data: {not json\n\n")
    with pytest.raises(ProviderError) as info:
        await model(RecordingTransport(bad), stream=True).request(ask())
    assert info.value.retryable


async def test_tool_results_answer_generated_ids_on_the_next_request() -> None:
    """A call the server sent without an id is answered under the id taskloom gave it."""
    calls = [{"type": "function", "function": {"name": "now", "arguments": "{}"}}]
    server = RecordingTransport(
        completion({"tool_calls": calls}, finish="tool_calls"), completion({"content": "noon"})
    )
    m = model(server)
    first = await m.request(ask("time?"))
    call = first.message.tool_calls[0]
    history = [
        Message.user("time?"),
        first.message,
        Message.tool_results([ToolResult(call.id, "12:00")]),
    ]
    await m.request(ModelRequest(messages=history))
    wire = server.body(1)["messages"]
    assert wire[1]["tool_calls"][0]["id"] == wire[2]["tool_call_id"]
    assert WIRE_ID.fullmatch(wire[2]["tool_call_id"])


async def test_stream_refusal_is_text_with_refusal_stop_reason() -> None:
    server = RecordingTransport(
        sse(
            chunk({"refusal": "I can't "}), chunk({"refusal": "do that."}), chunk({}, finish="stop")
        )
    )
    response = await model(server, stream=True).request(ask())
    assert (response.text, response.stop_reason) == ("I can't do that.", "refusal")


class Endless(httpx2.AsyncByteStream):
    """A stream that never ends by itself and records whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        n = 0
        while True:
            n += 1
            yield f"data: {json.dumps(chunk({'content': f'{n} '}))}\n\n".encode()

    async def aclose(self) -> None:
        self.closed = True


async def test_consumer_that_stops_early_releases_the_connection() -> None:
    body = Endless()
    server = RecordingTransport(
        httpx2.Response(200, stream=body, headers={"content-type": "text/event-stream"})
    )
    events = model(server, stream=True).stream(ask())
    first = await events.__anext__()
    assert first == TextDelta(text="1 ")
    await events.aclose()  # type: ignore[attr-defined]
    assert body.closed


AZURE_PROMPT_FILTER = {
    "choices": [],
    "created": 0,
    "id": "",
    "model": "",
    "object": "",
    "prompt_filter_results": [
        {
            "prompt_index": 0,
            "content_filter_results": {
                kind: {"filtered": False, "severity": "safe"}
                for kind in ("hate", "self_harm", "sexual", "violence")
            },
        }
    ],
}
"""The first event of an Azure OpenAI stream (a model router's too): the
prompt's content-filter results, not a completion chunk."""


@pytest.mark.slow
async def test_a_content_filter_event_before_the_chunks_is_skipped() -> None:
    async with FakeServer() as server:
        server.script(FakeServer.prelude(AZURE_PROMPT_FILTER, reply=FakeServer.reply("hi there")))
        answer = OpenAIChatModel("model-router", base_url=server.base_url, api_key="k", stream=True)
        events = [e async for e in answer.stream(ask())]
    done = events[-1]
    assert isinstance(done, ResponseCompleted)
    # The first real chunk's id and model, not the filter event's empty ones.
    assert done.response.response_id == "chatcmpl-fake1"
    assert done.response.model == "model-router"
    assert done.response.text == "hi there"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hi there"
