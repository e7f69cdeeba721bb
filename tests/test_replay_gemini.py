"""Replay recorded Gemini and Vertex AI traffic through `GeminiModel`, with Google's SDK as oracle.

Every in-scope `generateContent` / `streamGenerateContent` interaction of the
`test_google` cassettes is served back, byte for byte, twice: to taskloom's
adapter and to the official `google-genai` SDK (its own client, reading the
same bytes through the same kind of transport). The two must agree on the
text, the thinking, the function calls and their arguments, where each
thought signature sits, the usage, the finish reason, the response id and
the model version. A streamed answer is read by the SDK chunk by chunk, as
its users read it, and the adapter's deltas must add up to the same text,
thinking and calls. Each whole answer is also sent again as a stream and
must read the same.

The recorded request is read back into a taskloom `ModelRequest`, and the
body the adapter sends for it must be the recorded body (a body Gemini
accepted), except where taskloom decides otherwise on purpose; each such
place is named in `normalized_body` with the reason.

Where taskloom and the SDK read the same bytes differently, on purpose:

- A function call Gemini sent without an id (before Gemini 3) has no id in
  the SDK; taskloom gives it a fresh one, because its transcript pairs every
  call with its result by id (and Gemini accepts an id it did not make: the
  recorded requests carry pydantic-ai's own ids, and every one was answered).
- A thought signature is bytes in the SDK (it decodes the base64) and the
  base64 text itself in taskloom, which sends it back as it came; compared
  decoded.
- Usage: the SDK gives Gemini's counts as they are; taskloom's
  `output_tokens` is `candidatesTokenCount + thoughtsTokenCount` (Gemini
  counts thinking apart; every other wire counts it as output), and its
  `input_tokens` adds `toolUsePromptTokenCount` to `promptTokenCount`.
- A blocked prompt, and an answer a filter stopped before it said anything,
  are a response object with no text in the SDK and an exception naming the
  reason in taskloom (the run then ends FAILED, saying why, rather than
  COMPLETED with an empty answer).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import google.oauth2.credentials
import pytest
from google import genai
from google.genai import types

from cassettes import Cassette, Interaction, count_replayed, load, note_skipped, transport_for
from taskloom.errors import InvalidRequest, ProviderError
from taskloom.events import TextDelta, ThinkingDelta
from taskloom.messages import (
    Block,
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
    ModelResponse,
    ModelSettings,
    ReasoningOptions,
    ResponseCompleted,
    ToolCallDelta,
)
from taskloom.results import ToolSpec
from taskloom.testing.transport import RecordingTransport

# Google's documented placeholder for a call that carries no thought signature.
SKIP_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode()

API = "google"
_CALL = re.compile(r"/models/([^/:]+):(generateContent|streamGenerateContent)$")
SERVER_TOOLS = {
    "googleSearch": "server-side tool: Google Search",
    "urlContext": "server-side tool: URL context",
    "fileSearch": "server-side tool: file search (with uploads)",
    "codeExecution": "server-side tool: code execution",
}
BLOCKED = {
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "MODEL_ARMOR",
}
# Request keys taskloom turns into its own values; the rest rides in `extra`.
_MODELLED_CONFIG = {"temperature", "topP", "maxOutputTokens", "stopSequences"}


def is_generate_call(interaction: Interaction) -> bool:
    url = urlsplit(interaction.uri)
    host = url.hostname or ""
    return host.endswith("googleapis.com") and _CALL.search(url.path) is not None


def request_body(interaction: Interaction) -> dict[str, Any]:
    if interaction.request_body is not None:
        return dict(interaction.request_body)
    parsed = json.loads(interaction.request_text or "null")
    assert isinstance(parsed, dict), interaction.uri
    return parsed


def response_parts(interaction: Interaction) -> Iterator[dict[str, Any]]:
    for payload in payloads(interaction):
        for candidate in payload.get("candidates") or ():
            yield from (candidate.get("content") or {}).get("parts") or ()


def payloads(interaction: Interaction) -> list[dict[str, Any]]:
    """The recorded answer: one body, or the stream's chunks."""
    if interaction.is_stream:
        text = interaction.text_body or ""
        return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    if interaction.json_body is not None:
        return [interaction.json_body]
    return [json.loads(interaction.text_body or "null")]


def interaction_out_of_scope(interaction: Interaction) -> str | None:
    body = request_body(interaction)
    for tool in body.get("tools", []):
        for kind in tool:
            if kind != "functionDeclarations":
                return SERVER_TOOLS.get(kind, f"server-side tool: {kind}")
    for content in body.get("contents", []):
        for part in content.get("parts", []):
            if "fileData" in part:
                return "file and URL input (fileData): taskloom sends images only"
            mime = str((part.get("inlineData") or {}).get("mimeType", "image/"))
            if not mime.startswith("image/"):
                return f"{mime.split('/')[0]} input ({mime}): taskloom sends images only"
            if "videoMetadata" in part:
                return "video input"
    config = body.get("generationConfig", {})
    if config.get("responseLogprobs") or "logprobs" in config:
        return "logprobs"
    for part in response_parts(interaction):
        kinds = set(part) - {"text", "thought", "thoughtSignature", "functionCall"}
        if kinds:
            return "server-side tool parts in the answer: " + ", ".join(sorted(kinds))
    return None


def out_of_scope(cassette: Cassette) -> str | None:
    calls = [i for i in cassette.interactions if is_generate_call(i)]
    if not calls:
        return "no generateContent interaction (token counting only)"
    for call in calls:
        reason = interaction_out_of_scope(call)
        if reason is not None:
            return reason
    return None


# --- the recorded request, read back as a taskloom request ------------------------------


def _signature(part: dict[str, Any]) -> str | None:
    return part.get("thoughtSignature") or part.get("thought_signature")


def _result_text(response: Any) -> tuple[str, bool]:
    if isinstance(response, dict) and set(response) == {"return_value"}:
        value = response["return_value"]
    elif isinstance(response, dict) and set(response) == {"error"}:
        return str(response["error"]), True
    else:
        value = response
    return (value if isinstance(value, str) else json.dumps(value)), False


def recorded_messages(body: dict[str, Any], provider: str, model: str) -> list[Message]:
    out: list[Message] = []
    for content in body["contents"]:
        blocks: list[Block] = []
        results: list[ToolResult] = []
        for part in content.get("parts", []):
            signature = _signature(part)
            if part.get("thought"):
                blocks.append(ThinkingBlock(part.get("text", ""), signature, provider=provider))
                continue
            if signature is not None:
                blocks.append(ThinkingBlock("", signature, provider=provider))
            if "text" in part:
                blocks.append(TextBlock(part["text"]))
            elif "functionCall" in part:
                call = part["functionCall"]
                blocks.append(ToolCall(call["id"], call["name"], dict(call.get("args") or {})))
            elif "functionResponse" in part:
                answer = part["functionResponse"]
                text, is_error = _result_text(answer["response"])
                results.append(ToolResult(answer["id"], text, is_error, answer["name"]))
            elif "inlineData" in part:
                data = part["inlineData"]
                raw = base64.urlsafe_b64decode(data["data"] + "=" * (-len(data["data"]) % 4))
                blocks.append(ImageBlock(data=raw, media_type=data["mimeType"]))
        if content["role"] == "model":
            out.append(Message("assistant", tuple(blocks), provider=provider, model=model))
            continue
        if results:
            out.append(Message.tool_results(results))
        if blocks or not results:
            out.append(Message.user(blocks))
    return out


def _json_schema(schema: Any) -> Any:
    """An OpenAPI `parameters` schema (upper-case types) as JSON Schema."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    return out


def _declared_schema(declaration: dict[str, Any]) -> dict[str, Any]:
    for key in ("parametersJsonSchema", "parameters_json_schema"):
        if key in declaration:
            return dict(declaration[key])
    return _json_schema(declaration.get("parameters") or {})


def _reasoning(thinking: dict[str, Any]) -> ReasoningOptions | None:
    """The taskloom setting a recorded `thinkingConfig` stands for, when it is one."""
    if thinking.get("includeThoughts") is not True or not set(thinking) <= {
        "includeThoughts",
        "thinkingBudget",
    }:
        return None
    return ReasoningOptions(budget_tokens=thinking.get("thinkingBudget"), summary="auto")


def recorded_request(body: dict[str, Any], provider: str, model: str) -> ModelRequest:
    config = dict(body.get("generationConfig") or {})
    settings: dict[str, Any] = {
        "temperature": config.pop("temperature", None),
        "top_p": config.pop("topP", None),
        "max_tokens": config.pop("maxOutputTokens", None),
        "stop": tuple(config.pop("stopSequences", ())),
    }
    output_schema = None
    if config.get("responseMimeType") == "application/json" and "responseJsonSchema" in config:
        output_schema = config.pop("responseJsonSchema")
        config.pop("responseMimeType")
    reasoning = _reasoning(config.get("thinkingConfig") or {})
    if reasoning is not None:
        config.pop("thinkingConfig")
    extra = {k: v for k, v in body.items() if k not in ("contents", "systemInstruction", "tools")}
    extra.pop("generationConfig", None)
    if config:
        extra["generationConfig"] = config
    system = body.get("systemInstruction")
    tools = [
        ToolSpec(d["name"], d.get("description", ""), _declared_schema(d))
        for tool in body.get("tools", [])
        for d in tool.get("functionDeclarations", [])
    ]
    return ModelRequest(
        messages=recorded_messages(body, provider, model),
        system="".join(p["text"] for p in system["parts"]) if system else None,
        tools=tools,
        settings=ModelSettings(**settings, reasoning=reasoning, extra=extra),
        output_schema=output_schema,
    )


def _any_of(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_any_of(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {("anyOf" if k == "oneOf" else k): _any_of(v) for k, v in schema.items()}


def normalized_body(body: dict[str, Any], *, ours: bool) -> dict[str, Any]:
    """A body with the differences taskloom makes on purpose taken out."""
    body = json.loads(json.dumps(body))
    if body.get("generationConfig") == {}:
        del body["generationConfig"]  # an empty config is no config
    system = body.get("systemInstruction")
    if system is not None:
        # The SDK labels the system instruction `role: user`; Gemini needs no role there.
        system.pop("role", None)
    for tool in body.get("tools", []):
        for declaration in tool.get("functionDeclarations", []):
            # Older recordings declare tools in OpenAPI form (`parameters`, upper-case
            # types); taskloom always sends JSON Schema, which later recordings show
            # Gemini accepting in `parametersJsonSchema`.
            declaration["parametersJsonSchema"] = _declared_schema(declaration)
            declaration.pop("parameters", None)
            declaration.pop("parameters_json_schema", None)
    config = body.get("generationConfig")
    if config is not None and "responseJsonSchema" in config:
        # Gemini reads oneOf as anyOf; taskloom sends it as what it means.
        config["responseJsonSchema"] = _any_of(config["responseJsonSchema"])
    for content in body["contents"]:
        first_call = True
        for part in content["parts"]:
            if "thought_signature" in part:
                part["thoughtSignature"] = part.pop("thought_signature")
            if "functionCall" in part:
                # taskloom signs a call Gemini did not sign with Google's skip
                # signature (Gemini 3 refuses unsigned calls in the current turn);
                # pydantic-ai did not always, when these were recorded.
                if first_call and part.get("thoughtSignature") == SKIP_SIGNATURE:
                    del part["thoughtSignature"]
                first_call = False
            answer = part.get("functionResponse")
            if answer is not None and not ours:
                # A tool result is text in taskloom: `{"output": text}` (or
                # `{"error": text}`) where pydantic-ai sent `{"return_value": value}`.
                text, is_error = _result_text(answer["response"])
                answer["response"] = {"error" if is_error else "output": text}
            data = part.get("inlineData")
            if data is not None:
                # The SDK sends bytes as URL-safe base64; both decode the same.
                raw = data["data"] + "=" * (-len(data["data"]) % 4)
                data["data"] = base64.b64encode(base64.urlsafe_b64decode(raw)).decode()
    return body


# --- what the SDK reads -------------------------------------------------------------------


@dataclass
class Reading:
    """What one answer says, as the SDK reads it."""

    text: str = ""
    thinking: str = ""
    calls: list[tuple[str | None, str | None, dict[str, Any]]] = field(default_factory=list)
    signatures: list[tuple[str, bytes]] = field(default_factory=list)
    usage: types.GenerateContentResponseUsageMetadata | None = None
    finish: str | None = None
    finish_message: str | None = None
    block_reason: str | None = None
    response_id: str | None = None
    model_version: str | None = None

    def add(self, response: types.GenerateContentResponse) -> None:
        self.response_id = self.response_id or response.response_id
        self.model_version = self.model_version or response.model_version
        if response.usage_metadata is not None:
            self.usage = response.usage_metadata
        feedback = response.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            self.block_reason = feedback.block_reason.value
        for candidate in (response.candidates or ())[:1]:
            if candidate.finish_reason is not None:
                self.finish = candidate.finish_reason.value
                self.finish_message = candidate.finish_message
            for part in (candidate.content.parts if candidate.content else None) or ():
                if part.thought:
                    self.thinking += part.text or ""
                    kind = "thought"
                elif part.function_call is not None:
                    call = part.function_call
                    self.calls.append((call.id, call.name, dict(call.args or {})))
                    kind = "call"
                else:
                    self.text += part.text or ""
                    kind = "text"
                if part.thought_signature:
                    self.signatures.append((kind, part.thought_signature))


async def sdk_reading(interaction: Interaction) -> Reading:
    replay = transport_for(interaction)
    options = types.HttpOptions(httpx_async_client=replay.client())
    if "aiplatform" in (urlsplit(interaction.uri).hostname or ""):
        credentials = google.oauth2.credentials.Credentials(token="ya29.replay")
        client = genai.Client(
            vertexai=True,
            project="replay",
            location="global",
            credentials=credentials,
            http_options=options,
        )
    else:
        client = genai.Client(api_key="k-replay", http_options=options)
    reading = Reading()
    if interaction.is_stream:
        async for chunk in await client.aio.models.generate_content_stream(
            model="replay", contents="hi"
        ):
            reading.add(chunk)
    else:
        reading.add(await client.aio.models.generate_content(model="replay", contents="hi"))
    return reading


def our_signatures(blocks: tuple[Block, ...]) -> list[tuple[str, bytes]]:
    """Where taskloom's blocks put each signature: on a thought, or on the part after it."""
    out: list[tuple[str, bytes]] = []
    for index, block in enumerate(blocks):
        if not isinstance(block, ThinkingBlock) or block.signature is None:
            continue
        if block.text:
            kind = "thought"
        else:
            following = blocks[index + 1] if index + 1 < len(blocks) else None
            kind = "call" if isinstance(following, ToolCall) else "text"
        out.append((kind, base64.b64decode(block.signature)))
    return out


def stop_reason_for(finish: str | None, has_calls: bool) -> str:
    if finish in (None, "STOP"):
        return "tool_use" if has_calls else "end_turn"
    if finish == "MAX_TOKENS":
        return "max_tokens"
    return "content_filter" if finish in BLOCKED else finish.lower()


def check_against_sdk(response: ModelResponse, sdk: Reading, provider: str, model: str) -> None:
    message = response.message
    assert (message.role, message.provider, message.model) == ("assistant", provider, model)
    assert message.text == sdk.text
    assert "".join(b.text for b in message.thinking) == sdk.thinking
    assert all(b.provider == provider for b in message.thinking)
    calls = message.tool_calls
    assert [(c.name, c.arguments, c.raw_arguments) for c in calls] == [
        (name, args, None) for _, name, args in sdk.calls
    ]
    for call, (sdk_id, _, _) in zip(calls, sdk.calls, strict=True):
        assert call.id == sdk_id if sdk_id else call.id  # made when Gemini sent none
    assert len({c.id for c in calls}) == len(calls)
    assert our_signatures(message.blocks) == sdk.signatures
    meta = sdk.usage
    assert meta is not None
    thoughts = meta.thoughts_token_count or 0
    usage = response.usage
    assert usage.input_tokens == (meta.prompt_token_count or 0) + (
        meta.tool_use_prompt_token_count or 0
    )
    assert usage.output_tokens == (meta.candidates_token_count or 0) + thoughts
    assert usage.reasoning_tokens == thoughts
    assert usage.cache_read_tokens == (meta.cached_content_token_count or 0)
    assert (usage.cache_write_tokens, usage.requests, usage.estimated) == (0, 1, False)
    assert response.stop_reason == stop_reason_for(sdk.finish, bool(calls))
    assert (response.response_id, response.model) == (sdk.response_id, sdk.model_version)


# --- the replay --------------------------------------------------------------------------


def _cassettes() -> list[Cassette]:
    return list(load("test_google"))


CASSETTES = _cassettes()


def test_the_corpus_is_there() -> None:
    assert len(CASSETTES) >= 80
    in_scope = [c for c in CASSETTES if out_of_scope(c) is None]
    calls = [i for c in in_scope for i in c.interactions if is_generate_call(i)]
    assert len(in_scope) >= 50 and len(calls) >= 70
    assert any(i.is_stream for i in calls)
    assert any("aiplatform" in i.uri for i in calls)


def model_for(interaction: Interaction, client: Any) -> tuple[GeminiModel, str]:
    url = urlsplit(interaction.uri)
    found = _CALL.search(url.path)
    assert found is not None
    name = found[1]
    base_url = interaction.uri[: interaction.uri.index("/models/")]
    if "aiplatform" in (url.hostname or ""):
        model = GeminiModel.vertex(
            name,
            base_url=base_url,
            token="ya29.replay",
            http_client=client,
            stream=interaction.is_stream,
        )
    else:
        model = GeminiModel(
            name,
            api_key="k-replay",
            base_url=base_url,
            http_client=client,
            stream=interaction.is_stream,
        )
    return model, name


@pytest.mark.parametrize("cassette", CASSETTES, ids=[c.name for c in CASSETTES])
async def test_replay(cassette: Cassette) -> None:
    reason = out_of_scope(cassette)
    if reason is not None:
        note_skipped(API, cassette.name, reason)
        pytest.skip(reason)
    for interaction in (i for i in cassette.interactions if is_generate_call(i)):
        await replay_one(interaction)
        count_replayed(API)


async def replay_one(interaction: Interaction) -> None:
    replay = transport_for(interaction)
    sdk = await sdk_reading(interaction)
    async with replay.client() as client:
        model, name = model_for(interaction, client)
        recorded = request_body(interaction)
        request = recorded_request(recorded, model.provider, name)
        if sdk.block_reason is not None:
            with pytest.raises(InvalidRequest) as blocked:
                await model.request(request)
            assert blocked.value.error_type == sdk.block_reason
            assert not blocked.value.retryable
        elif not sdk.text and not sdk.calls and sdk.finish in BLOCKED:
            with pytest.raises(ProviderError) as failed:
                await model.request(request)
            assert failed.value.error_type == sdk.finish and not failed.value.retryable
            assert failed.value.message == (sdk.finish_message or failed.value.message)
        elif interaction.is_stream:
            events = [e async for e in model.stream(request)]
            done = events[-1]
            assert isinstance(done, ResponseCompleted)
            assert not any(isinstance(e, ResponseCompleted) for e in events[:-1])
            assert "".join(e.text for e in events if isinstance(e, TextDelta)) == sdk.text
            assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == sdk.thinking
            deltas = [e for e in events if isinstance(e, ToolCallDelta)]
            assert [(d.name, json.loads(d.arguments)) for d in deltas] == [
                (n, a) for _, n, a in sdk.calls
            ]
            check_against_sdk(done.response, sdk, model.provider, name)
        else:
            check_against_sdk(await model.request(request), sdk, model.provider, name)
    (sent,) = replay.requests
    assert sent.url == interaction.uri
    auth = "authorization" if model.provider == "vertex" else "x-goog-api-key"
    assert sent.headers[auth] in ("Bearer ya29.replay", "k-replay")
    assert normalized_body(sent.body, ours=True) == normalized_body(recorded, ours=False)


# --- whole answers, streamed --------------------------------------------------------------


def as_event_stream(body: dict[str, Any], piece: int = 11) -> str:
    """A recorded whole answer sent again the way the streaming API sends it: a chunk
    per part, text in small pieces (a signature on the first), usage on every chunk
    and the finish reason on the last."""
    candidate = body["candidates"][0]
    chunks: list[dict[str, Any]] = []
    for part in (candidate.get("content") or {}).get("parts") or ():
        text = part.get("text")
        if text is None or len(text) <= piece:
            chunks.append(part)
            continue
        for at in range(0, len(text), piece):
            chunk = {**part, "text": text[at : at + piece]}
            if at:
                chunk.pop("thoughtSignature", None)
            chunks.append(chunk)
    frames = []
    for index, part in enumerate(chunks or [{"text": ""}]):
        streamed = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if index == max(0, len(chunks) - 1):
            streamed |= {k: v for k, v in candidate.items() if k != "content"}
        frame = {k: v for k, v in body.items() if k != "candidates"}
        frames.append({**frame, "candidates": [streamed]})
    return "".join(f"data: {json.dumps(f)}\r\n\r\n" for f in frames)


WHOLE_ANSWERS = [
    pytest.param(call, id=f"{c.name}#{n}")
    for c in CASSETTES
    if out_of_scope(c) is None
    for n, call in enumerate(i for i in c.interactions if is_generate_call(i))
    if not call.is_stream
    and (call.json_body or {}).get("candidates")
    and any(p for p in response_parts(call))
]


@pytest.mark.parametrize("call", WHOLE_ANSWERS)
async def test_recorded_answers_read_the_same_when_streamed(call: Interaction) -> None:
    recorded = request_body(call)
    whole_server = RecordingTransport(default=RecordingTransport.json(call.json_body))
    streamed = RecordingTransport(default=RecordingTransport.sse(as_event_stream(call.json_body)))
    responses = []
    for server, stream in ((whole_server, False), (streamed, True)):
        async with server.client() as client:
            model, name = model_for(call, client)
            model = GeminiModel(
                name, api_key="k-replay", base_url=model.base_url, http_client=client, stream=stream
            )
            request = recorded_request(recorded, model.provider, name)
            responses.append(await model.request(request))
    whole, parts = responses
    # Calls without an id from Gemini get a fresh one on each reading.
    assert shape(parts.message.blocks) == shape(whole.message.blocks)
    assert (parts.usage, parts.stop_reason, parts.response_id) == (
        whole.usage,
        whole.stop_reason,
        whole.response_id,
    )


def shape(blocks: tuple[Block, ...]) -> list[Any]:
    return [("call", b.name, b.arguments) if isinstance(b, ToolCall) else b for b in blocks]
