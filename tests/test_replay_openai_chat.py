"""Replaying recorded Chat Completions traffic through `OpenAIChatModel`.

Each recorded `/chat/completions` interaction of the `test_openai` and
`test_ollama` corpus folders is served back through a RecordingTransport. The
expected text, tool calls, thinking, usage and stop reason are computed here
from the recorded body (never with adapter code), and the body taskloom sends
for the recorded conversation is compared with the recorded request.
Interactions with other hosts or paths in those folders belong to other APIs
and are ignored.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from cassettes import Interaction, count_replayed, load, note_skipped, transport_for
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
    ModelRequest,
    ModelResponse,
    ModelSettings,
    OpenAIChatModel,
    ReasoningOptions,
    ResponseCompleted,
    ToolCallDelta,
)
from taskloom.results import ToolSpec

FOLDERS = {"test_openai": "openai-chat", "test_ollama": "ollama"}
CHAT_PATH = "/chat/completions"

FINISH = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


def _chat_interactions(interactions: list[Interaction]) -> list[Interaction]:
    return [i for i in interactions if urlsplit(i.uri).path.endswith(CHAT_PATH)]


def _cases() -> list[Any]:
    cases = []
    for folder, api in FOLDERS.items():
        for cassette in load(folder):
            chat = _chat_interactions(cassette.interactions)
            if chat:
                cases.append(pytest.param(api, cassette.name, chat, id=f"{folder}/{cassette.name}"))
    return cases


CASES = _cases()


def _out_of_scope(body: dict[str, Any]) -> str | None:
    """Why a successful interaction is beyond a Chat Completions text/tools adapter."""
    kinds = {
        part.get("type")
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for part in message["content"]
    }
    if "input_audio" in kinds or "audio" in body or "modalities" in body:
        return "audio input/output is out of scope"
    if "file" in kinds:
        return "document/file parts are out of scope"
    if "web_search_options" in body:
        return "hosted tools (web search) are out of scope"
    if "moderation" in body:
        return "moderation is out of scope"
    if body.get("logprobs") or body.get("top_logprobs"):
        return "logprobs are out of scope"
    return None


# --- reading a recorded request back into taskloom values -------------------


# Request keys the reader turns into taskloom values; the rest rides in `extra`.
_READ_KEYS = {
    "model",
    "messages",
    "tools",
    "stream",
    "stream_options",
    "max_completion_tokens",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "reasoning_effort",
}


def _user_blocks(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [TextBlock(content)]
    blocks: list[Block] = []
    for part in content:
        if part["type"] == "text":
            blocks.append(TextBlock(part["text"]))
        elif part["type"] == "image_url":
            url = part["image_url"]["url"]
            if url.startswith("data:"):
                head, _, payload = url.partition(",")
                media_type = head[len("data:") : -len(";base64")]
                blocks.append(ImageBlock(data=base64.b64decode(payload), media_type=media_type))
            else:
                blocks.append(ImageBlock(url=url))
        else:
            raise AssertionError(f"test reader does not know content part {part['type']!r}")
    return blocks


def _read_request(body: dict[str, Any], thinking_provider: str) -> ModelRequest:
    wire = list(body["messages"])
    system = None
    if wire and wire[0]["role"] in ("system", "developer"):
        system = wire.pop(0)["content"]
    messages: list[Message] = []
    results: list[ToolResult] = []
    for m in wire:
        if m["role"] != "tool" and results:
            messages.append(Message.tool_results(results))
            results = []
        if m["role"] == "user":
            messages.append(Message.user(_user_blocks(m["content"])))
        elif m["role"] == "assistant":
            thinking = (
                [ThinkingBlock(m["reasoning"], provider=thinking_provider)]
                if m.get("reasoning")
                else []
            )
            calls = [
                ToolCall(
                    id=tc["id"],
                    name=tc["function"]["name"],
                    arguments=json.loads(tc["function"]["arguments"]),
                )
                for tc in m.get("tool_calls") or ()
            ]
            messages.append(
                Message.assistant(m.get("content"), tool_calls=calls, thinking=thinking)
            )
        elif m["role"] == "tool":
            results.append(ToolResult(m["tool_call_id"], m["content"]))
        else:
            raise AssertionError(f"test reader does not know role {m['role']!r} mid-conversation")
    if results:
        messages.append(Message.tool_results(results))
    tools = [
        ToolSpec(
            t["function"]["name"], t["function"].get("description", ""), t["function"]["parameters"]
        )
        for t in body.get("tools") or ()
    ]
    extra = {k: v for k, v in body.items() if k not in _READ_KEYS}
    output_schema = None
    output_name = "output"
    response_format = extra.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        del extra["response_format"]
        output_schema = response_format["json_schema"]["schema"]
        output_name = response_format["json_schema"]["name"]
    effort = body.get("reasoning_effort")
    settings = ModelSettings(
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        max_tokens=body.get("max_completion_tokens", body.get("max_tokens")),
        stop=tuple(body.get("stop") or ()),
        reasoning=ReasoningOptions(effort=effort) if effort else None,
        extra=extra,
    )
    return ModelRequest(
        messages=messages,
        system=system,
        tools=tools,
        settings=settings,
        output_schema=output_schema,
        output_name=output_name,
    )


# --- comparing the body taskloom sent with the recorded one -----------------


def _parts(content: Any) -> list[tuple[str, str]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [("text", content)]
    out = []
    for part in content:
        if part["type"] == "text":
            out.append(("text", part["text"]))
        else:
            out.append((part["type"], part["image_url"]["url"]))
    return out


def _shape(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    shaped = []
    for m in messages:
        role = "system" if m["role"] == "developer" else m["role"]
        entry: dict[str, Any] = {"role": role, "content": _parts(m.get("content"))}
        if m.get("tool_calls"):
            entry["tool_calls"] = [
                (
                    tc["id"],
                    tc["type"],
                    tc["function"]["name"],
                    json.loads(tc["function"]["arguments"]),
                )
                for tc in m["tool_calls"]
            ]
        if role == "tool":
            entry["tool_call_id"] = m["tool_call_id"]
        shaped.append(entry)
    return shaped


def _check_body(sent: dict[str, Any], recorded: dict[str, Any]) -> None:
    sent, recorded = dict(sent), dict(recorded)
    sent_messages, recorded_messages = sent.pop("messages"), recorded.pop("messages")
    for m in sent_messages:
        assert "reasoning" not in m and "reasoning_content" not in m, "thinking must not be sent"
    assert _shape(sent_messages) == _shape(recorded_messages)

    def tools(body: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [
            (
                t["type"],
                t["function"]["name"],
                t["function"].get("description", ""),
                t["function"]["parameters"],
            )
            for t in body.pop("tools", [])
        ]

    assert tools(sent) == tools(recorded)
    sent_format, recorded_format = (
        sent.pop("response_format", None),
        recorded.pop("response_format", None),
    )
    if recorded_format is not None and recorded_format["type"] == "json_schema":
        assert sent_format["type"] == "json_schema"
        ours, theirs = sent_format["json_schema"], recorded_format["json_schema"]
        assert (ours["name"], ours["schema"]) == (theirs["name"], theirs["schema"])
        assert isinstance(ours["strict"], bool)
        if "strict" in theirs:
            assert ours["strict"] == theirs["strict"]
    else:
        assert sent_format == recorded_format
    if recorded.get("stream") is False:
        del recorded["stream"]
    assert sent == recorded


# --- what the recorded response says --------------------------------------


@dataclass
class Expected:
    text: str = ""
    thinking: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # id, name, raw arguments
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    response_id: str | None = None
    model: str | None = None


def _expected_json(body: dict[str, Any]) -> Expected:
    message = body["choices"][0]["message"]
    return Expected(
        text=message.get("content") or "",
        thinking=message.get("reasoning_content") or message.get("reasoning") or "",
        calls=[
            (tc.get("id") or "", tc["function"]["name"], tc["function"]["arguments"])
            for tc in message.get("tool_calls") or ()
        ],
        usage=body.get("usage") or {},
        finish_reason=body["choices"][0].get("finish_reason"),
        response_id=body.get("id"),
        model=body.get("model"),
    )


def _expected_sse(text: str) -> Expected:
    out = Expected()
    calls: dict[int, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        chunk = json.loads(line[5:])
        out.response_id = out.response_id or chunk.get("id")
        out.model = out.model or chunk.get("model")
        if chunk.get("usage"):
            out.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            out.text += delta.get("content") or ""
            out.thinking += delta.get("reasoning_content") or delta.get("reasoning") or ""
            for tc in delta.get("tool_calls") or ():
                entry = calls.setdefault(tc["index"], ["", "", ""])
                entry[0] = entry[0] or tc.get("id") or ""
                entry[1] = entry[1] or (tc.get("function") or {}).get("name") or ""
                entry[2] += (tc.get("function") or {}).get("arguments") or ""
            out.finish_reason = choice.get("finish_reason") or out.finish_reason
    out.calls = [(c[0], c[1], c[2]) for _, c in sorted(calls.items())]
    return out


def _check_response(response: ModelResponse, expected: Expected, model: OpenAIChatModel) -> None:
    message = response.message
    assert message.role == "assistant"
    assert (message.provider, message.model) == (model.provider, model.name)
    assert message.text == expected.text
    if expected.thinking:
        assert [b.text for b in message.thinking] == [expected.thinking]
        assert message.thinking[0].provider == model.provider
        assert message.blocks[0] is message.thinking[0]
    else:
        assert message.thinking == []
    calls = message.tool_calls
    assert [(c.name, c.arguments, c.raw_arguments) for c in calls] == [
        (name, json.loads(raw), None) for _, name, raw in expected.calls
    ]
    for call, (call_id, _, _) in zip(calls, expected.calls, strict=True):
        if call_id:
            assert call.id == call_id
        else:
            assert call.id, "a call sent without an id must get one"
    assert len({c.id for c in calls}) == len(calls)
    usage = expected.usage
    assert response.usage.input_tokens == usage.get("prompt_tokens", 0)
    assert response.usage.output_tokens == usage.get("completion_tokens", 0)
    assert response.usage.cache_read_tokens == (usage.get("prompt_tokens_details") or {}).get(
        "cached_tokens", 0
    )
    assert response.usage.reasoning_tokens == (usage.get("completion_tokens_details") or {}).get(
        "reasoning_tokens", 0
    )
    assert response.usage.requests == 1
    assert response.stop_reason == FINISH.get(expected.finish_reason or "", expected.finish_reason)
    assert (response.response_id, response.model) == (expected.response_id, expected.model)


# --- the replay ---------------------------------------------------------------


def _provider(api: str, uri: str) -> str:
    if api == "ollama":
        return "ollama"
    return "openai" if urlsplit(uri).hostname == "api.openai.com" else "compatible"


async def _replay(api: str, interaction: Interaction) -> None:
    body = interaction.request_body
    provider = _provider(api, interaction.uri)
    request = _read_request(body, provider)
    replay = transport_for(interaction)
    model = OpenAIChatModel(
        body["model"],
        api_key="sk-replay",
        base_url=interaction.uri[: -len(CHAT_PATH)],
        http_client=replay.client(),
        stream=interaction.is_stream,
        provider=provider,
    )
    recorded = interaction.json_body
    if interaction.status >= 400:
        with pytest.raises(ProviderError) as info:
            await model.request(request)
        error = recorded["error"]
        assert info.value.message == error["message"]
        assert info.value.status == interaction.status
        assert info.value.error_type == (error.get("type") or error.get("code"))
        if interaction.status == 400:
            assert isinstance(info.value, InvalidRequest)
    elif not interaction.is_stream and not (isinstance(recorded, dict) and recorded.get("choices")):
        # A 200 whose body is not a chat completion (a misrouted endpoint).
        with pytest.raises(ProviderError):
            await model.request(request)
    elif interaction.is_stream:
        assert interaction.text_body is not None
        expected = _expected_sse(interaction.text_body)
        events = [event async for event in model.stream(request)]
        assert isinstance(events[-1], ResponseCompleted)
        assert not any(isinstance(e, ResponseCompleted) for e in events[:-1])
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == expected.text
        assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == expected.thinking
        pieces: dict[int, str] = {}
        for e in events:
            if isinstance(e, ToolCallDelta):
                pieces[e.index] = pieces.get(e.index, "") + e.arguments
        assert [pieces[i] for i in sorted(pieces)] == [raw for _, _, raw in expected.calls]
        _check_response(events[-1].response, expected, model)
    else:
        _check_response(await model.request(request), _expected_json(recorded), model)
    assert len(replay.requests) == 1
    assert str(replay.requests[0].url) == interaction.uri
    assert replay.requests[0].headers["authorization"] == "Bearer sk-replay"
    _check_body(replay.body(), body)


@pytest.mark.parametrize(("api", "cassette", "interactions"), CASES)
async def test_replay(api: str, cassette: str, interactions: list[Interaction]) -> None:
    for interaction in interactions:
        if interaction.status < 400:
            reason = _out_of_scope(interaction.request_body)
            if reason is not None:
                note_skipped(api, cassette, reason)
                pytest.skip(reason)
    for interaction in interactions:
        await _replay(api, interaction)
        count_replayed(api)


def test_corpus_has_chat_traffic() -> None:
    """Guards against a moved corpus silently replaying nothing."""
    assert sum(1 for c in CASES if c.values[0] == "openai-chat") >= 30
    assert sum(1 for c in CASES if c.values[0] == "ollama") == 3
