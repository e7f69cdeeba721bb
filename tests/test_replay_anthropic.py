"""Replay recorded Anthropic Messages API traffic through `AnthropicModel`.

For every in-scope interaction of the `test_anthropic` cassettes, the recorded
response is served through a RecordingTransport, and the test checks what the
adapter parsed against values computed here, independently, from the recorded
body; it also rebuilds the recorded conversation as taskloom messages and
checks that the body the adapter sends has the recorded request's shape.
Recorded errors must come back as typed errors with the message verbatim.
Server-side compaction is in scope: its `compaction` blocks are kept whole and
must go back to Anthropic byte for byte.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from cassettes import Cassette, Interaction, count_replayed, load, note_skipped, transport_for
from taskloom.errors import (
    AuthenticationError,
    InvalidRequest,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
)
from taskloom.messages import (
    Block,
    CompactionBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
)
from taskloom.models import AnthropicModel, ModelRequest, ModelSettings, ReasoningOptions
from taskloom.results import ToolSpec
from taskloom.testing.transport import RecordingTransport

API = "anthropic"
HOST = "api.anthropic.com"
CLIENT_BLOCKS = {"text", "tool_use", "thinking", "redacted_thinking", "compaction"}
REQUEST_BLOCKS = CLIENT_BLOCKS | {"tool_result", "image"}
# Client-executed tools Anthropic defines, which taskloom offers natively
# (`ToolSpec.native`), with the beta each turns on.
NATIVE_TOOLS = {"memory_20250818": AnthropicModel.MEMORY_TOOL_BETA}
SERVER_TOOLS = {
    "web_search": "server tool: web search",
    "web_fetch": "server tool: web fetch",
    "code_execution": "server tool: code execution",
    "advisor": "advisor tool",
    "tool_search": "tool search",
}


def is_messages_call(interaction: Interaction) -> bool:
    url = urlsplit(interaction.uri)
    return url.hostname == HOST and url.path == "/v1/messages"


def out_of_scope(cassette: Cassette) -> str | None:
    """Why a cassette exercises features the adapter does not implement, or None."""
    calls = [i for i in cassette.interactions if is_messages_call(i)]
    if not calls:
        if any("bedrock" in i.uri for i in cassette.interactions):
            return "Bedrock endpoint"
        return "no Messages API interaction"
    for call in calls:
        body = call.request_body or {}
        for tool in body.get("tools", []):
            if "type" in tool and tool["type"] not in NATIVE_TOOLS:
                kind = str(tool["type"])
                return next(
                    (r for k, r in SERVER_TOOLS.items() if k in kind), f"server tool {kind}"
                )
            if tool.get("defer_loading"):
                return "tool search (deferred tool loading)"
        if "mcp_servers" in body:
            return "MCP servers"
        if "container" in body:
            return "server tool: code execution container"
        edits = (body.get("context_management") or {}).get("edits") or ()
        if any(not str(e.get("type")).startswith("compact_") for e in edits):
            return "context editing"
        for message in body.get("messages", []):
            if message["role"] not in ("user", "assistant"):
                return "tool search (tool additions)"
            for block in _content(message):
                if block["type"] == "document":
                    return "documents"
                if block["type"] not in REQUEST_BLOCKS:
                    return f"server tool blocks in history ({block['type']})"
                if block["type"] == "tool_result" and _has_tool_references(block["content"]):
                    return "tool search (tool references in results)"
        if call.status == 200:
            kinds = {str(b.get("type")) for b in expected_blocks(call)}
            if not kinds <= CLIENT_BLOCKS:
                return "server tool blocks in response: " + ", ".join(sorted(kinds - CLIENT_BLOCKS))
    return None


def _has_tool_references(content: Any) -> bool:
    return not isinstance(content, str) and any(p.get("type") != "text" for p in content)


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


# --- the recorded response, read independently of the adapter ---------------


def _sse_payloads(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data:") :]) for line in text.splitlines() if line.startswith("data:")
    ]


def expected_blocks(call: Interaction) -> list[dict[str, Any]]:
    """The whole content blocks of a recorded response (streamed ones reassembled)."""
    if not call.is_stream:
        return list(call.json_body["content"])
    blocks: dict[int, dict[str, Any]] = {}
    json_text: dict[int, str] = {}
    for payload in _sse_payloads(call.text_body or ""):
        if payload["type"] == "content_block_start":
            blocks[payload["index"]] = dict(payload["content_block"])
        elif payload["type"] == "content_block_delta":
            block, delta = blocks[payload["index"]], payload["delta"]
            field = {"text_delta": "text", "thinking_delta": "thinking"}.get(delta["type"])
            if field is not None:
                block[field] = block.get(field, "") + delta[field]
            elif delta["type"] == "compaction_delta":
                if delta.get("content") is not None:
                    block["content"] = (block.get("content") or "") + delta["content"]
                if delta.get("encrypted_content") is not None:
                    block["encrypted_content"] = delta["encrypted_content"]
            elif delta["type"] == "signature_delta":
                block["signature"] = block.get("signature", "") + delta["signature"]
            elif delta["type"] == "input_json_delta":
                json_text[payload["index"]] = (
                    json_text.get(payload["index"], "") + delta["partial_json"]
                )
    for index, text in json_text.items():
        blocks[index]["input"] = json.loads(text) if text else {}
    return [blocks[i] for i in sorted(blocks)]


def expected_summary(call: Interaction) -> dict[str, Any]:
    """Stop reason, id and final usage of a recorded response."""
    if not call.is_stream:
        body = call.json_body
        return {"stop_reason": body["stop_reason"], "id": body["id"], "usage": body["usage"]}
    usage: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for payload in _sse_payloads(call.text_body or ""):
        if payload["type"] == "message_start":
            summary["id"] = payload["message"]["id"]
            usage = dict(payload["message"]["usage"])
        elif payload["type"] == "message_delta":
            summary["stop_reason"] = payload["delta"]["stop_reason"]
            usage.update(payload["usage"])
    summary["usage"] = usage
    return summary


# --- the recorded request, read back as a taskloom request ---------------------


def _result_text(content: Any) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def recorded_messages(body: dict[str, Any]) -> list[Message]:
    """The recorded conversation as taskloom messages, results split into tool turns."""
    out: list[Message] = []
    for message in body["messages"]:
        blocks: list[Block] = []
        results: list[ToolResult] = []
        for b in _content(message):
            if b["type"] == "text":
                blocks.append(TextBlock(b["text"]))
            elif b["type"] == "thinking":
                blocks.append(ThinkingBlock(b["thinking"], b["signature"], provider=API))
            elif b["type"] == "redacted_thinking":
                blocks.append(ThinkingBlock(redacted=True, data=b["data"], provider=API))
            elif b["type"] == "compaction":
                blocks.append(CompactionBlock(API, dict(b)))
            elif b["type"] == "tool_use":
                blocks.append(ToolCall(b["id"], b["name"], dict(b["input"])))
            elif b["type"] == "tool_result":
                content = _result_text(b["content"])
                results.append(ToolResult(b["tool_use_id"], content, bool(b.get("is_error"))))
            elif b["type"] == "image":
                source = b["source"]
                if source["type"] == "url":
                    blocks.append(ImageBlock(url=source["url"]))
                else:
                    data = base64.b64decode(source["data"])
                    blocks.append(ImageBlock(data=data, media_type=source["media_type"]))
        if message["role"] == "assistant":
            out.append(Message("assistant", tuple(blocks), provider=API))
            continue
        # Results travel as their own tool turn; the adapter must fold them back
        # into one user turn, results first.
        if results:
            out.append(Message.tool_results(results))
        if blocks:
            out.append(Message.user(blocks))
    return out


def recorded_request(body: dict[str, Any]) -> ModelRequest:
    """A ModelRequest that should make the adapter send the recorded body."""
    system = body.get("system")
    if isinstance(system, list):
        system = "".join(b["text"] for b in system)
    thinking = body.get("thinking")
    output_config = dict(body.get("output_config") or {})
    effort = output_config.pop("effort", None)
    schema = output_config.pop("format", {}).get("schema")
    extra: dict[str, Any] = {
        k: body[k]
        for k in ("top_k", "metadata", "cache_control", "context_management")
        if k in body
    }
    if output_config:
        extra["output_config"] = output_config
    if body.get("tool_choice", {"type": "auto"})["type"] != "auto":
        extra["tool_choice"] = body["tool_choice"]
    budget = None
    if thinking is not None and thinking["type"] == "enabled":
        budget = thinking["budget_tokens"]
    elif thinking is not None and effort is None:
        extra["thinking"] = thinking  # adaptive thinking with no effort: not a taskloom setting
    elif thinking is None and effort is not None:
        extra["thinking"] = None  # effort alone, without the adaptive thinking it implies
    reasoning = ReasoningOptions(effort=effort, budget_tokens=budget) if effort or budget else None
    settings = ModelSettings(
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        max_tokens=body["max_tokens"],
        stop=tuple(body.get("stop_sequences", ())),
        reasoning=reasoning,
        extra=extra,
    )
    tools = [
        ToolSpec(t["name"], "", {"type": "object"}, native={API: t})
        if "type" in t
        else ToolSpec(t["name"], t.get("description", ""), t["input_schema"])
        for t in body.get("tools", [])
    ]
    return ModelRequest(
        messages=recorded_messages(body),
        system=system or None,
        tools=tools,
        settings=settings,
        output_schema=schema,
    )


def _normalized_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive same-role turns merged (Anthropic merges them itself), blank text dropped."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = [b for b in _content(message) if b["type"] != "text" or b["text"].strip()]
        if out and out[-1]["role"] == message["role"]:
            out[-1]["content"].extend(content)
        elif content:
            out.append({"role": message["role"], "content": content})
    for turn in out:
        turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    return out


def _block_shape(block: dict[str, Any]) -> tuple[Any, ...]:
    kind = block["type"]
    if kind == "text":
        return (kind, block["text"])
    if kind == "thinking":
        return (kind, block["thinking"], block["signature"])
    if kind == "redacted_thinking":
        return (kind, block["data"])
    if kind == "compaction":
        return (kind, json.dumps(block, sort_keys=True))  # byte for byte, whatever its fields
    if kind == "tool_use":
        return (kind, block["id"], block["name"], block["input"])
    if kind == "tool_result":
        content = _result_text(block["content"])
        return (kind, block["tool_use_id"], content, bool(block.get("is_error")))
    if kind == "image":
        return (kind, block["source"])
    raise AssertionError(f"unexpected block {kind}")


def _without_cache_marks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_marks(v) for v in value]
    return value


def check_request_shape(sent: dict[str, Any], recorded: dict[str, Any]) -> None:
    sent_turns = _normalized_turns(sent["messages"])
    recorded_turns = _normalized_turns(recorded["messages"])
    assert [t["role"] for t in sent_turns] == [t["role"] for t in recorded_turns]
    for ours, theirs in zip(sent_turns, recorded_turns, strict=True):
        assert [_block_shape(b) for b in ours["content"]] == [
            _block_shape(b) for b in theirs["content"]
        ]
    assert sent["model"] == recorded["model"]
    assert sent["stream"] == recorded.get("stream", False)
    for key in (
        "max_tokens",
        "thinking",
        "output_config",
        "temperature",
        "top_p",
        "top_k",
        "context_management",
    ):
        assert sent.get(key) == recorded.get(key), key
    system = recorded.get("system")
    if system is None:
        assert "system" not in sent
    else:
        text = system if isinstance(system, str) else "".join(b["text"] for b in system)
        assert "".join(b["text"] for b in sent["system"]) == text
    assert _without_cache_marks(sent.get("tools", [])) == [
        {k: v for k, v in t.items() if k != "strict"} for t in recorded.get("tools", [])
    ]


# --- the replay ------------------------------------------------------------


ERROR_TYPES: dict[int, type[ProviderError]] = {
    400: InvalidRequest,
    401: AuthenticationError,
    403: AuthenticationError,
    404: InvalidRequest,
    429: RateLimitError,
    529: ProviderOverloaded,
}


def _cassettes() -> list[Cassette]:
    # Cassettes that only count tokens hold nothing for this adapter: left out silently.
    return [
        c
        for c in load("test_anthropic")
        if any(is_messages_call(i) or "bedrock" in i.uri for i in c.interactions)
    ]


CASSETTES = _cassettes()


def test_the_corpus_is_there() -> None:
    assert len(CASSETTES) > 40


@pytest.mark.parametrize("cassette", CASSETTES, ids=[c.name for c in CASSETTES])
async def test_replay(cassette: Cassette) -> None:
    reason = out_of_scope(cassette)
    if reason is not None:
        note_skipped(API, cassette.name, reason)
        pytest.skip(reason)
    for call in (i for i in cassette.interactions if is_messages_call(i)):
        await replay_one(call)
        count_replayed(API)


def compacts(body: dict[str, Any]) -> bool:
    """Whether a recorded request used server-side compaction (it needs the beta)."""
    return "context_management" in body or any(
        b["type"] == "compaction" for m in body["messages"] for b in _content(m)
    )


async def replay_one(call: Interaction) -> None:
    recorded = call.request_body
    replay = transport_for(call)
    betas = [AnthropicModel.COMPACTION_BETA] if compacts(recorded) else []
    async with replay.client() as client:
        model = AnthropicModel(
            recorded["model"],
            api_key="sk-test",
            http_client=client,
            stream=call.is_stream,
            betas=betas,
        )
        request = recorded_request(recorded)
        if call.status >= 400:
            error = call.json_body["error"]
            with pytest.raises(ERROR_TYPES.get(call.status, ProviderError)) as caught:
                await model.request(request)
            assert caught.value.message == error["message"]
            assert caught.value.error_type == error["type"]
            assert caught.value.status == call.status
            check_request_shape(replay.body(), recorded)
            return
        response = await model.request(request)
    check_request_shape(replay.body(), recorded)
    sent = replay.requests[-1]
    assert sent.headers["x-api-key"] == "sk-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    native = [NATIVE_TOOLS[t["type"]] for t in recorded.get("tools", []) if "type" in t]
    assert sent.headers.get("anthropic-beta") == (",".join(betas + native) or None)
    if native:
        assert sent.url == call.uri  # `?beta=true`, as the recording
    check_response(response, call)


def check_response(response: Any, call: Interaction) -> None:
    blocks = expected_blocks(call)
    summary = expected_summary(call)
    message = response.message
    assert message.role == "assistant"
    assert message.provider == API
    assert message.model == call.request_body["model"]
    assert message.text == "".join(b["text"] for b in blocks if b["type"] == "text")
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
        (b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"
    ]
    assert [(t.text, t.signature, t.redacted, t.data) for t in message.thinking] == [
        (b.get("thinking", ""), b.get("signature"), b["type"] == "redacted_thinking", b.get("data"))
        for b in blocks
        if b["type"] in ("thinking", "redacted_thinking")
    ]
    assert all(t.provider == API for t in message.thinking)
    compactions = [b for b in message.blocks if isinstance(b, CompactionBlock)]
    assert [(c.provider, c.data) for c in compactions] == [
        (API, b) for b in blocks if b["type"] == "compaction"
    ]
    usage = summary["usage"]
    read = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    # taskloom's input is the whole prompt; Anthropic reports cache traffic apart.
    assert response.usage.input_tokens == usage["input_tokens"]  # as the SDK reports it
    assert response.usage.output_tokens == usage["output_tokens"]
    assert (response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (read, written)
    details = usage.get("output_tokens_details") or {}
    assert response.usage.reasoning_tokens == (details.get("thinking_tokens") or 0)
    assert response.usage.requests == 1
    assert response.stop_reason == summary["stop_reason"]
    assert response.response_id == summary["id"]


def _server_tool_calls() -> list[tuple[str, Interaction]]:
    return [
        (f"{c.name}#{n}", call)
        for c in CASSETTES
        if "server tool" in (out_of_scope(c) or "") or "advisor" in (out_of_scope(c) or "")
        for n, call in enumerate(i for i in c.interactions if is_messages_call(i))
        if call.status == 200
    ]


SERVER_TOOL_CALLS = _server_tool_calls()


@pytest.mark.parametrize(
    "call", [c for _, c in SERVER_TOOL_CALLS], ids=[n for n, _ in SERVER_TOOL_CALLS]
)
async def test_server_tool_blocks_are_ignored_when_parsing(call: Interaction) -> None:
    """Server-side tool blocks are out of scope, but a response carrying them still parses:
    its text, thinking and usage come through and the server's calls are not ours to run."""
    replay = transport_for(call)
    async with replay.client() as client:
        model = AnthropicModel(
            call.request_body["model"], api_key="sk-test", http_client=client, stream=call.is_stream
        )
        response = await model.request(ModelRequest(messages=[Message.user("hi")]))
    check_response(response, call)
    assert not response.message.tool_calls


def test_server_tool_responses_are_in_the_corpus() -> None:
    assert len(SERVER_TOOL_CALLS) >= 10
    assert any(call.is_stream for _, call in SERVER_TOOL_CALLS)


def as_event_stream(body: dict[str, Any], piece: int = 7) -> str:
    """A recorded whole response re-sent the way the streaming API would send it,
    in small pieces, so the stream parser meets the same real content."""
    usage = dict(body["usage"])
    start = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(body["content"]):
        empty = {"text": "", "thinking": "", "signature": "", "input": {}}
        opening = {k: empty.get(k, v) for k, v in block.items()}
        if block["type"] == "compaction":
            # A compaction block opens empty and arrives whole in one delta.
            opening = {"type": "compaction", "content": None}
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        if block["type"] == "compaction":
            delta = {**block, "type": "compaction_delta"}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
            events.append({"type": "content_block_stop", "index": index})
            continue
        kind, key, text = "text_delta", "text", block.get("text", "")
        if block["type"] == "tool_use":
            kind, key, text = "input_json_delta", "partial_json", json.dumps(block["input"])
        elif block["type"] == "thinking":
            kind, key, text = "thinking_delta", "thinking", block["thinking"]
        for at in range(0, len(text), piece):
            delta = {"type": kind, key: text[at : at + piece]}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        if block["type"] == "thinking":
            delta = {"type": "signature_delta", "signature": block["signature"]}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "ping"})
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": body["stop_reason"]}, "usage": usage}
    )
    events.append({"type": "message_stop"})
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


WHOLE_RESPONSES = [
    (f"{c.name}#{n}", call)
    for c in CASSETTES
    if out_of_scope(c) is None
    for n, call in enumerate(i for i in c.interactions if is_messages_call(i))
    if call.status == 200 and not call.is_stream
]


@pytest.mark.parametrize(
    "call", [c for _, c in WHOLE_RESPONSES], ids=[n for n, _ in WHOLE_RESPONSES]
)
async def test_recorded_responses_parse_the_same_when_streamed(call: Interaction) -> None:
    streamed = Interaction(
        call.uri,
        {**call.request_body, "stream": True},
        200,
        {"content-type": "text/event-stream"},
        text_body=as_event_stream(call.json_body),
    )
    replay = transport_for(streamed)
    async with replay.client() as client:
        model = AnthropicModel(call.request_body["model"], api_key="sk-test", http_client=client)
        response = await model.request(recorded_request(call.request_body))
    assert replay.body()["stream"] is True
    check_response(response, streamed)


# --- server-side compaction: the block goes back as it came ------------------


def _compaction_call() -> Interaction:
    cassette = next(c for c in CASSETTES if c.name == "test_anthropic_compaction_round_trip")
    return next(i for i in cassette.interactions if is_messages_call(i))


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_compaction_block_goes_back_as_it_came(streamed: bool) -> None:
    """The recorded turn that holds a compaction block, served as Anthropic's answer
    (whole, or streamed as the API streams it: an empty block, then its delta), is
    parsed into a `CompactionBlock`; the next request, built from the transcript that
    answer made, is the recorded request exactly: the block goes back byte for byte."""
    call = _compaction_call()
    recorded = call.request_body
    first_user, turn, follow_up = recorded["messages"]
    answer = {**call.json_body, "content": turn["content"]}
    wire = RecordingTransport(
        RecordingTransport.sse(as_event_stream(answer))
        if streamed
        else RecordingTransport.json(answer)
    )
    async with wire.client() as client:
        model = AnthropicModel(
            recorded["model"],
            api_key="sk-test",
            http_client=client,
            stream=streamed,
            betas=[AnthropicModel.COMPACTION_BETA],
        )
        settings = recorded_request(recorded).settings
        opening = recorded_messages({"messages": [first_user]})
        response = await model.request(ModelRequest(opening, "Be brief.", settings=settings))
    compaction, text = turn["content"]
    assert response.message.blocks == (CompactionBlock(API, compaction), TextBlock(text["text"]))
    assert response.message.blocks[0].summary == "Summary: user said hello."
    assert wire.requests[0].headers["anthropic-beta"] == AnthropicModel.COMPACTION_BETA
    assert wire.body(0)["context_management"] == recorded["context_management"]

    transcript = [
        *opening,
        Message.from_dict(json.loads(json.dumps(response.message.to_dict()))),  # as stored
        *recorded_messages({"messages": [follow_up]}),
    ]
    body = model.build_body(ModelRequest(transcript, "Be brief.", settings=settings), stream=False)
    assert body["messages"] == recorded["messages"]
    assert body["context_management"] == recorded["context_management"]


async def test_a_model_without_the_compaction_beta_drops_the_block() -> None:
    """Anthropic refuses compaction blocks without the beta (and a model switch can land
    there): such a model sends the history the block stands for, without the block."""
    recorded = _compaction_call().request_body
    request = recorded_request(recorded)
    plain = AnthropicModel(recorded["model"], api_key="sk-test").build_body(request)
    assert plain["messages"][1]["content"] == [recorded["messages"][1]["content"][1]]
    assert [m["content"] for m in plain["messages"][::2]] == [
        m["content"] for m in recorded["messages"][::2]
    ]
    # The beta named through the headers counts as well.
    headers = {"Anthropic-Beta": f"other-beta, {AnthropicModel.COMPACTION_BETA}"}
    beta = AnthropicModel(recorded["model"], api_key="sk-test", headers=headers)
    assert beta.build_body(request)["messages"] == recorded["messages"]
