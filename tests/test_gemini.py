"""Unit tests of the Gemini adapter: bodies, thought signatures, answers, streams, errors."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from taskloom.errors import (
    AuthenticationError,
    ConfigurationError,
    ContextWindowExceeded,
    InvalidRequest,
    ProviderError,
    ProviderOverloaded,
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
    GeminiModel,
    ModelRequest,
    ModelSettings,
    ReasoningOptions,
    ResponseCompleted,
    RetryPolicy,
    ToolCallDelta,
)
from taskloom.results import ToolSpec
from taskloom.testing.transport import RecordingTransport

# Google's documented placeholder for a call that carries no thought signature.
SKIP_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode()

WEATHER = ToolSpec(
    "weather",
    "Weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = ToolSpec("clock", "The time.", {"type": "object", "properties": {}})
SIG_A, SIG_B = "EpwICpkIAXLI2nx+lU6g/sWZ==", "Ev4DCvsDAXLI2nw7mTF/"


def answer(*parts: dict[str, Any], finish: str | None = "STOP", **usage: int) -> dict[str, Any]:
    """A `generateContent` body with one candidate holding `parts`."""
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    meta = {"promptTokenCount": 10, "candidatesTokenCount": 5, **usage}
    return {
        "candidates": [candidate],
        "usageMetadata": meta,
        "modelVersion": "gemini-2.5-flash-001",
        "responseId": "resp-1",
    }


def model_on(
    server: RecordingTransport, name: str = "gemini-2.5-flash", **options: Any
) -> GeminiModel:
    options.setdefault("stream", False)
    return GeminiModel(name, api_key="k-gemini-test", http_client=server.client(), **options)


def body_of(name: str, request: ModelRequest, **options: Any) -> dict[str, Any]:
    return GeminiModel(name, api_key="k-gemini-test", **options).build_body(request)


def sse(*chunks: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks)


# --- the request -------------------------------------------------------------------------


async def test_a_request_goes_to_generate_content_with_the_key_in_its_header() -> None:
    server = RecordingTransport(default=RecordingTransport.json(answer({"text": "hi"})))
    model = model_on(server)
    response = await model.request(ModelRequest([Message.user("hello")], system="Be brief."))
    assert response.text == "hi"
    sent = server.requests[0]
    assert sent.url == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert sent.headers["x-goog-api-key"] == "k-gemini-test"
    assert "authorization" not in sent.headers
    assert sent.body == {
        "contents": [{"role": "user", "parts": [{"text": "hello"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
    }


async def test_streaming_goes_to_stream_generate_content_with_the_same_body() -> None:
    server = RecordingTransport(default=RecordingTransport.sse(sse(answer({"text": "hi"}))))
    model = model_on(server, stream=True)
    request = ModelRequest([Message.user("hello")])
    assert (await model.request(request)).text == "hi"
    assert server.requests[0].url.endswith(":streamGenerateContent?alt=sse")
    assert server.body() == model.build_body(request, stream=False)
    assert model.url.endswith(":streamGenerateContent?alt=sse")


def test_tool_calls_and_results_are_matched_by_id_and_name_results_first() -> None:
    calls = [ToolCall("c1", "weather", {"city": "Paris"}), ToolCall("c2", "clock", {})]
    transcript = [
        Message.user("weather and time?"),
        Message.assistant(tool_calls=calls, provider="anthropic", model="claude"),
        Message.tool_results([ToolResult("c1", "sunny"), ToolResult("c2", "boom", is_error=True)]),
        Message.user("and tomorrow?"),
    ]
    body = body_of("gemini-2.5-flash", ModelRequest(transcript, tools=[WEATHER, CLOCK]))
    user, model, results = body["contents"]
    assert user == {"role": "user", "parts": [{"text": "weather and time?"}]}
    # Another provider's calls carry no signature: the first one gets Google's skip value.
    assert model == {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "weather", "args": {"city": "Paris"}, "id": "c1"},
                "thoughtSignature": SKIP_SIGNATURE,
            },
            {"functionCall": {"name": "clock", "args": {}, "id": "c2"}},
        ],
    }
    # The results' names come from their calls; the next user turn merges after them.
    assert results == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "weather", "response": {"output": "sunny"}, "id": "c1"}},
            {"functionResponse": {"name": "clock", "response": {"error": "boom"}, "id": "c2"}},
            {"text": "and tomorrow?"},
        ],
    }
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "weather",
                    "description": "Weather in a city.",
                    "parametersJsonSchema": dict(WEATHER.input_schema),
                },
                {
                    "name": "clock",
                    "description": "The time.",
                    "parametersJsonSchema": {"type": "object", "properties": {}},
                },
            ]
        }
    ]


def test_thinking_and_signatures_go_back_exactly_to_the_model_that_wrote_them() -> None:
    own = Message(
        "assistant",
        (
            ThinkingBlock("Let me look.", provider="google"),
            ThinkingBlock("", SIG_A, provider="google"),
            ToolCall("c1", "weather", {"city": "Paris"}),
            ToolCall("c2", "clock", {}),
            TextBlock("Done."),
            ThinkingBlock("", SIG_B, provider="google"),
        ),
        provider="google",
        model="gemini-3-pro-preview",
    )
    transcript = [Message.user("go"), own]
    parts = body_of("gemini-3-pro-preview", ModelRequest(transcript))["contents"][1]["parts"]
    assert parts == [
        {"text": "Let me look.", "thought": True},
        {
            "functionCall": {"name": "weather", "args": {"city": "Paris"}, "id": "c1"},
            "thoughtSignature": SIG_A,
        },
        {"functionCall": {"name": "clock", "args": {}, "id": "c2"}},
        {"text": "Done."},
        {"text": "", "thoughtSignature": SIG_B},
    ]
    # Another Gemini model gets neither the thinking nor the signatures.
    other = body_of("gemini-2.5-pro", ModelRequest(transcript))["contents"][1]["parts"]
    assert other == [
        {
            "functionCall": {"name": "weather", "args": {"city": "Paris"}, "id": "c1"},
            "thoughtSignature": SKIP_SIGNATURE,
        },
        {"functionCall": {"name": "clock", "args": {}, "id": "c2"}},
        {"text": "Done."},
    ]
    # Nor does the same model on Vertex AI, another provider.
    vertex = GeminiModel.vertex("gemini-3-pro-preview", project="p", token="t-vertex-token")
    assert SIG_A not in json.dumps(vertex.build_body(ModelRequest(transcript)))


def test_a_models_own_unsigned_calls_go_back_unsigned() -> None:
    # Gemini before 3 (or without thinking) signs nothing: its turn goes back as it came.
    turn = Message.assistant(
        tool_calls=[ToolCall("c1", "clock", {})], provider="google", model="gemini-2.0-flash"
    )
    body = body_of("gemini-2.0-flash", ModelRequest([Message.user("time?"), turn]))
    assert body["contents"][1]["parts"] == [
        {"functionCall": {"name": "clock", "args": {}, "id": "c1"}}
    ]


def test_images_go_inline_or_by_uri_and_empty_turns_keep_their_place() -> None:
    image = ImageBlock(data=b"\x89PNG", media_type="image/png")
    linked = ImageBlock(url="gs://bucket/cat.jpg", media_type="image/jpeg")
    transcript = [
        Message.user([TextBlock("look"), image, linked]),
        Message("assistant", (), provider="google", model="gemini-2.5-flash"),
        Message.user("well?"),
    ]
    contents = body_of("gemini-2.5-flash", ModelRequest(transcript))["contents"]
    assert contents[0]["parts"] == [
        {"text": "look"},
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(b"\x89PNG").decode()}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "gs://bucket/cat.jpg"}},
    ]
    assert contents[1] == {"role": "model", "parts": [{"text": ""}]}
    assert [c["role"] for c in contents] == ["user", "model", "user"]


@pytest.mark.parametrize(
    ("name", "reasoning", "expected"),
    [
        ("gemini-2.0-flash", ReasoningOptions(effort="high"), None),
        ("gemini-2.5-flash", ReasoningOptions(effort="low"), {"thinkingBudget": 2048}),
        ("gemini-2.5-pro", ReasoningOptions(budget_tokens=0), {"thinkingBudget": 0}),
        ("gemini-3-pro-preview", ReasoningOptions(effort="medium"), {"thinkingLevel": "medium"}),
        ("gemini-3-pro-preview", ReasoningOptions(effort="minimal"), {"thinkingLevel": "low"}),
        (
            "gemini-3-flash-preview",
            ReasoningOptions(effort="minimal"),
            {"thinkingLevel": "minimal"},
        ),
        ("gemini-3.1-pro", ReasoningOptions(effort="xhigh"), {"thinkingLevel": "high"}),
        ("gemini-3-pro-preview", ReasoningOptions(budget_tokens=4096), {"thinkingBudget": 4096}),
        ("gemini-flash-latest", ReasoningOptions(summary="auto"), {}),
    ],
)
def test_reasoning_maps_to_each_generations_thinking_config(
    name: str, reasoning: ReasoningOptions, expected: dict[str, Any] | None
) -> None:
    settings = ModelSettings(reasoning=reasoning, temperature=0.2, max_tokens=100, stop=("END",))
    config = body_of(name, ModelRequest([Message.user("hi")], settings=settings))[
        "generationConfig"
    ]
    assert (config["temperature"], config["maxOutputTokens"], config["stopSequences"]) == (
        0.2,
        100,
        ["END"],
    )
    if expected is None:
        assert "thinkingConfig" not in config
    else:
        assert config["thinkingConfig"] == {"includeThoughts": True, **expected}


def test_extra_merges_into_the_body_one_level_deep() -> None:
    settings = ModelSettings(
        temperature=0.5,
        extra={"generationConfig": {"topK": 40, "temperature": None}, "safetySettings": []},
    )
    body = body_of("gemini-2.5-flash", ModelRequest([Message.user("hi")], settings=settings))
    assert body["generationConfig"] == {"topK": 40}
    assert body["safetySettings"] == []


# --- schemas -------------------------------------------------------------------------------


def test_tool_schemas_are_mapped_onto_what_gemini_reads() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "definitions": {"Unit": {"const": "celsius", "description": "The unit."}},
        "properties": {
            "city": {"type": "string", "minLength": 1, "examples": ["Paris"]},
            "days": {"type": "integer", "exclusiveMinimum": 0, "multipleOf": 1},
            "unit": {"allOf": [{"$ref": "#/definitions/Unit"}], "description": "Which unit."},
            "mode": {"oneOf": [{"type": "string"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    spec = ToolSpec("forecast", "A forecast.", schema)
    body = body_of("gemini-2.5-flash", ModelRequest([Message.user("hi")], tools=[spec]))
    assert body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == {
        "type": "object",
        "$defs": {"Unit": {"enum": ["celsius"], "description": "The unit."}},
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "days": {"type": "integer"},
            "unit": {"description": "Which unit.", "$ref": "#/$defs/Unit"},
            "mode": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["city"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("name", "schema", "problem"),
    [
        ("lookup", {"type": "string"}, "object schema"),
        (
            "lookup",
            {
                "type": "object",
                "properties": {"a": {"allOf": [{"type": "string"}, {"minLength": 2}]}},
            },
            "allOf",
        ),
        (
            "lookup",
            {"type": "object", "properties": {"a": {"$ref": "https://x.example/s.json"}}},
            "references",
        ),
        ("lookup", {"type": "object", "properties": {"a": {"enum": [{"k": 1}]}}}, "enums"),
        (
            "lookup",
            {"type": "object", "properties": {"a": {"type": "date"}}},
            "not a JSON Schema type",
        ),
        ("lookup", {"type": "object", "properties": {"a": False}}, "matches nothing"),
        ("1lookup", {"type": "object"}, "Gemini function name"),
        ("look up", {"type": "object"}, "Gemini function name"),
    ],
)
def test_what_gemini_cannot_express_is_a_configuration_error_naming_the_tool(
    name: str, schema: dict[str, Any], problem: str
) -> None:
    spec = ToolSpec(name, "", schema)
    with pytest.raises(ConfigurationError, match=problem) as caught:
        body_of("gemini-2.5-flash", ModelRequest([Message.user("hi")], tools=[spec]))
    assert repr(name) in str(caught.value)
    assert not RetryPolicy().should_retry(caught.value, 0)


def test_a_colon_is_a_valid_function_name_on_the_gemini_api_only() -> None:
    spec = ToolSpec("files:read", "", {"type": "object"})
    request = ModelRequest([Message.user("hi")], tools=[spec])
    assert (
        body_of("gemini-2.5-flash", request)["tools"][0]["functionDeclarations"][0]["name"]
        == "files:read"
    )
    vertex = GeminiModel.vertex("gemini-2.5-flash", project="p", token="t-vertex-token")
    with pytest.raises(ConfigurationError, match="files:read"):
        vertex.build_body(request)


OUTPUT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_structured_output_is_a_response_json_schema() -> None:
    body = body_of("gemini-2.5-flash", ModelRequest([Message.user("hi")], output_schema=OUTPUT))
    assert body["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseJsonSchema": OUTPUT,
    }
    # Gemini 3 takes a response schema beside tools.
    with_tools = ModelRequest([Message.user("hi")], tools=[CLOCK], output_schema=OUTPUT)
    body = body_of("gemini-3-pro-preview", with_tools)
    assert body["generationConfig"]["responseJsonSchema"] == OUTPUT
    assert [d["name"] for d in body["tools"][0]["functionDeclarations"]] == ["clock"]
    assert GeminiModel("gemini-3-pro-preview", api_key="k-gemini-test").native_output


async def test_before_gemini_3_tools_and_output_go_through_an_output_function() -> None:
    model = GeminiModel("gemini-2.5-flash", api_key="k-gemini-test")
    assert not model.native_output  # agents use their final-answer tool
    request = ModelRequest(
        [Message.user("hi")], tools=[CLOCK], output_schema={"type": "array"}, output_name="answer"
    )
    body = model.build_body(request)
    assert "responseJsonSchema" not in body.get("generationConfig", {})
    declared = body["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declared] == ["clock", "answer"]
    assert declared[1]["parametersJsonSchema"] == {
        "type": "object",
        "properties": {"response": {"type": "array"}},
        "required": ["response"],
    }
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    server = RecordingTransport(
        default=RecordingTransport.json(
            answer({"functionCall": {"name": "answer", "args": {"response": [1, 2]}}})
        )
    )
    response = await model_on(server).request(request)
    assert response.text == "[1, 2]" and not response.message.tool_calls
    assert response.stop_reason == "end_turn"


# --- answers ---------------------------------------------------------------------------------


async def test_an_answer_with_thoughts_calls_and_signatures() -> None:
    body = answer(
        {"text": "Thinking it over.", "thought": True},
        {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": SIG_A},
        {"functionCall": {"name": "clock", "args": {}, "id": "fc-2"}},
        promptTokenCount=100,
        candidatesTokenCount=20,
        thoughtsTokenCount=50,
        cachedContentTokenCount=64,
        totalTokenCount=170,
    )
    server = RecordingTransport(default=RecordingTransport.json(body))
    response = await model_on(server).request(ModelRequest([Message.user("go")], tools=[WEATHER]))
    blocks = response.message.blocks
    assert blocks[0] == ThinkingBlock("Thinking it over.", provider="google")
    assert blocks[1] == ThinkingBlock("", SIG_A, provider="google")
    first, second = response.message.tool_calls
    assert (first.name, first.arguments) == ("weather", {"city": "Paris"})
    assert first.id and first.id != second.id  # Gemini 2.5 sends no ids: one is made
    assert (second.id, second.name, second.arguments) == ("fc-2", "clock", {})
    assert response.stop_reason == "tool_use"
    usage = response.usage
    # Gemini counts thinking apart from the answer; both are output.
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (100, 70, 50)
    assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.requests) == (64, 0, 1)
    assert (response.model, response.response_id) == ("gemini-2.5-flash-001", "resp-1")
    assert response.message.provider == "google"
    assert response.message.model == "gemini-2.5-flash"


async def test_the_answer_goes_back_as_it_came() -> None:
    parts = [
        {"text": "Plan.", "thought": True},
        {"text": "Sure: ", "thoughtSignature": SIG_A},
        {"functionCall": {"name": "clock", "args": {}, "id": "fc-1"}, "thoughtSignature": SIG_B},
    ]
    server = RecordingTransport(default=RecordingTransport.json(answer(*parts)))
    model = model_on(server, name="gemini-3-pro-preview")
    response = await model.request(ModelRequest([Message.user("go")]))
    stored = Message.from_dict(json.loads(json.dumps(response.message.to_dict())))
    results = Message.tool_results([ToolResult("fc-1", "noon", tool_name="clock")])
    body = model.build_body(ModelRequest([Message.user("go"), stored, results]))
    assert body["contents"][1] == {"role": "model", "parts": parts}


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("STOP", "end_turn"),
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "malformed_function_call"),
    ],
)
async def test_finish_reasons_of_an_answer_that_said_something(
    finish: str, stop_reason: str
) -> None:
    server = RecordingTransport(
        default=RecordingTransport.json(answer({"text": "Part"}, finish=finish))
    )
    response = await model_on(server).request(ModelRequest([Message.user("go")]))
    assert (response.text, response.stop_reason) == ("Part", stop_reason)


async def test_a_blocked_prompt_is_a_request_error_naming_the_reason() -> None:
    body = {
        "promptFeedback": {
            "blockReason": "MODEL_ARMOR",
            "blockReasonMessage": "The prompt violated Prompt Injection and Jailbreak filters.",
        },
        "usageMetadata": {"trafficType": "ON_DEMAND"},
    }
    for stream in (False, True):
        canned = RecordingTransport.sse(sse(body)) if stream else RecordingTransport.json(body)
        server = RecordingTransport(default=canned)
        with pytest.raises(InvalidRequest) as caught:
            await model_on(server, stream=stream).request(ModelRequest([Message.user("go")]))
        assert caught.value.error_type == "MODEL_ARMOR"
        assert "Jailbreak filters" in caught.value.message and not caught.value.retryable


@pytest.mark.parametrize(
    ("finish", "retryable"), [("SAFETY", False), ("MALFORMED_FUNCTION_CALL", True)]
)
async def test_an_answer_that_failed_before_saying_anything_raises(
    finish: str, retryable: bool
) -> None:
    body = answer(finish=finish)
    body["candidates"][0]["content"] = {}
    server = RecordingTransport(default=RecordingTransport.json(body))
    with pytest.raises(ProviderError) as caught:
        await model_on(server).request(ModelRequest([Message.user("go")]))
    assert caught.value.error_type == finish and caught.value.retryable is retryable
    assert finish in caught.value.message


async def test_an_answer_cut_by_max_tokens_before_any_text_is_an_empty_answer() -> None:
    body = answer(finish="MAX_TOKENS", thoughtsTokenCount=2)
    body["candidates"][0]["content"] = {"role": "model"}
    server = RecordingTransport(default=RecordingTransport.json(body))
    response = await model_on(server).request(ModelRequest([Message.user("go")]))
    assert (response.text, response.stop_reason, response.usage.output_tokens) == (
        "",
        "max_tokens",
        7,
    )


# --- streams ---------------------------------------------------------------------------------


async def test_a_stream_folds_chunks_into_deltas_and_one_answer() -> None:
    chunks = [
        answer({"text": "Hmm, ", "thought": True}, finish=None),
        answer({"text": "rain?", "thought": True}, finish=None),
        answer({"text": "It ", "thoughtSignature": SIG_A}, finish=None),
        answer({"text": "rains."}, finish=None),
        answer(
            {"functionCall": {"name": "clock", "args": {"tz": "UTC"}, "id": "fc-9"}}, finish=None
        ),
        answer(
            {"text": "", "thoughtSignature": SIG_B},
            promptTokenCount=30,
            candidatesTokenCount=8,
            thoughtsTokenCount=4,
        ),
    ]
    server = RecordingTransport(default=RecordingTransport.sse(sse(*chunks)))
    model = model_on(server, stream=True)
    events = [e async for e in model.stream(ModelRequest([Message.user("go")]))]
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["Hmm, ", "rain?"]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["It ", "rains."]
    assert [e for e in events if isinstance(e, ToolCallDelta)] == [
        ToolCallDelta(0, "fc-9", "clock", '{"tz":"UTC"}')
    ]
    done = events[-1]
    assert isinstance(done, ResponseCompleted)
    assert done.response.message.blocks == (
        ThinkingBlock("Hmm, rain?", provider="google"),
        ThinkingBlock("", SIG_A, provider="google"),
        TextBlock("It rains."),
        ToolCall("fc-9", "clock", {"tz": "UTC"}),
        ThinkingBlock("", SIG_B, provider="google"),
    )
    usage = done.response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (30, 12, 4)


async def test_a_stream_cut_before_its_finish_reason_is_a_transport_error() -> None:
    chunks = [answer({"text": "It "}, finish=None), answer({"text": "rains"}, finish=None)]
    server = RecordingTransport(default=RecordingTransport.sse(sse(*chunks)))
    with pytest.raises(TransportError) as caught:
        await model_on(server, stream=True).request(ModelRequest([Message.user("go")]))
    assert caught.value.retryable


async def test_an_error_chunk_mid_stream_is_typed() -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    server = RecordingTransport(
        default=RecordingTransport.sse(sse(answer({"text": "It "}, finish=None), error))
    )
    with pytest.raises(ProviderOverloaded) as caught:
        await model_on(server, stream=True).request(ModelRequest([Message.user("go")]))
    assert caught.value.retryable and caught.value.error_type == "UNAVAILABLE"


async def test_stream_false_replays_the_answer_as_deltas() -> None:
    body = answer(
        {"text": "Hm.", "thought": True},
        {"text": "Yes."},
        {"functionCall": {"name": "clock", "args": {}, "id": "f"}},
    )
    server = RecordingTransport(default=RecordingTransport.json(body))
    events = [e async for e in model_on(server).stream(ModelRequest([Message.user("go")]))]
    assert events[:-1] == [
        ThinkingDelta(text="Hm."),
        TextDelta(text="Yes."),
        ToolCallDelta(0, "f", "clock", "{}"),
    ]


# --- errors ----------------------------------------------------------------------------------


def google_error(code: int, status: str, message: str, *details: dict[str, Any]) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return {"error": error}


async def test_a_429_honours_the_retry_info_delay() -> None:
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37.5s"}
    body = google_error(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota.", retry)
    server = RecordingTransport(default=RecordingTransport.json(body, status=429))
    with pytest.raises(RateLimitError) as caught:
        await model_on(server).request(ModelRequest([Message.user("go")]))
    error = caught.value
    assert (error.retry_after, error.error_type, error.retryable) == (
        37.5,
        "RESOURCE_EXHAUSTED",
        True,
    )
    assert RetryPolicy(max_retry_after=60).delay(1, error) == 37.5


async def test_an_overloaded_503_is_retryable() -> None:
    body = google_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")
    server = RecordingTransport(default=RecordingTransport.json(body, status=503))
    with pytest.raises(ProviderOverloaded) as caught:
        await model_on(server).request(ModelRequest([Message.user("go")]))
    assert caught.value.retryable and caught.value.status == 503


async def test_a_prompt_over_the_window_is_context_window_exceeded() -> None:
    message = (
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
    )
    server = RecordingTransport(
        default=RecordingTransport.json(google_error(400, "INVALID_ARGUMENT", message), status=400)
    )
    with pytest.raises(ContextWindowExceeded) as caught:
        await model_on(server).request(ModelRequest([Message.user("go")]))
    assert caught.value.message == message and not caught.value.retryable


async def test_a_refused_key_is_an_authentication_error_without_the_key() -> None:
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
    body = google_error(400, "INVALID_ARGUMENT", "API key not valid: k-gemini-test.", info)
    server = RecordingTransport(default=RecordingTransport.json(body, status=400))
    with pytest.raises(AuthenticationError) as caught:
        await model_on(server).request(ModelRequest([Message.user("go")]))
    assert "k-gemini-test" not in str(caught.value) and "[redacted]" in str(caught.value)
    assert not caught.value.retryable


# --- Vertex AI -------------------------------------------------------------------------------


async def test_vertex_takes_project_location_and_a_bearer_token() -> None:
    server = RecordingTransport(default=RecordingTransport.json(answer({"text": "hi"})))
    model = GeminiModel.vertex(
        "gemini-2.5-flash",
        project="my-proj",
        location="europe-west4",
        token="ya29.token-value",
        http_client=server.client(),
        stream=False,
    )
    assert model.provider == "vertex"
    response = await model.request(ModelRequest([Message.user("hi")]))
    assert response.message.provider == "vertex"
    sent = server.requests[0]
    assert sent.url == (
        "https://europe-west4-aiplatform.googleapis.com/v1beta1/projects/my-proj/locations/"
        "europe-west4/publishers/google/models/gemini-2.5-flash:generateContent"
    )
    assert sent.headers["authorization"] == "Bearer ya29.token-value"
    assert "x-goog-api-key" not in sent.headers
    assert model.spec == f"vertex:gemini-2.5-flash@{model.base_url}"
    assert "ya29" not in model.spec


@pytest.mark.parametrize(
    ("location", "host"),
    [
        ("global", "aiplatform.googleapis.com"),
        ("us-central1", "us-central1-aiplatform.googleapis.com"),
        ("eu", "aiplatform.eu.rep.googleapis.com"),
    ],
)
def test_vertex_hosts_by_location(location: str, host: str) -> None:
    model = GeminiModel.vertex("gemini-2.5-flash", project="p", location=location, token="t-tok")
    assert model.base_url == (
        f"https://{host}/v1beta1/projects/p/locations/{location}/publishers/google"
    )


def test_vertex_reads_project_and_location_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-proj")
    monkeypatch.delenv("GOOGLE_CLOUD_LOCATION", raising=False)
    model = GeminiModel.vertex("gemini-2.5-flash", token="ya29.token-value")
    assert model.base_url == (
        "https://aiplatform.googleapis.com/v1beta1/projects/env-proj/locations/global/publishers/google"
    )


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"token": "ya29.token-value"}, "project"),
        ({"project": "p"}, "access token"),
        ({"project": "p/../x", "token": "ya29.token-value"}, "not a Vertex AI project"),
        ({"project": "p", "base_url": "https://proxy.example", "token": "t"}, "not both"),
    ],
)
def test_vertex_without_what_it_needs_is_a_configuration_error(
    options: dict[str, Any], problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    with pytest.raises(ConfigurationError, match=problem):
        GeminiModel.vertex("gemini-2.5-flash", **options)
