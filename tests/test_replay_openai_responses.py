"""Replays recorded OpenAI Responses traffic through `OpenAIResponsesModel`.

For every in-scope interaction of the `test_openai_responses` cassettes:

- the recorded conversation (the request's `input` items) is read back into
  taskloom messages, and the body the adapter builds for it must have the
  recorded body's shape: item types and roles, call ids, arguments, outputs,
  reasoning ids and encrypted content, instructions, tools, settings;
- the recorded answer is served back (as SSE when it was streamed) and the
  parsed response must match what this file computes from the recorded body
  on its own: text, function calls and arguments, reasoning and its encrypted
  content, usage and stop reason; for streams, the deltas must add up to it;
- a recorded error must come back as the typed error with the message verbatim;
- server-side compaction items are kept whole and go back byte for byte.

Features taskloom does not model (hosted tools, files, chaining by
`previous_response_id` or `conversation`, background mode, the standalone
`/responses/compact` endpoint...) are left out with a reason, per interaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise
from typing import Any
from urllib.parse import urlsplit

import pytest

from cassettes import Cassette, Interaction, count_replayed, load, note_skipped, transport_for
from taskloom.errors import ContextWindowExceeded, InvalidRequest, ProviderError
from taskloom.events import TextDelta, ThinkingDelta
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
from taskloom.models import (
    ModelRequest,
    ModelSettings,
    OpenAIResponsesModel,
    ReasoningOptions,
    ResponseCompleted,
    ToolCallDelta,
)
from taskloom.results import ToolSpec

API = "openai-responses"
FOLDER = "test_openai_responses"
CASSETTES = list(load(FOLDER))

ITEM_KINDS = {"message", "function_call", "function_call_output", "reasoning", "compaction"}
CONTENT_KINDS = {"input_text", "input_image", "output_text"}
OUTPUT_KINDS = {"message", "function_call", "reasoning", "compaction"}
UNSUPPORTED_OPTIONS = {
    "background": "background mode (answers are polled from /responses/{id})",
    "previous_response_id": "previous_response_id chaining (server-side state)",
    "conversation": "server-side conversations",
}
EFFORTS = {"minimal", "low", "medium", "high", "xhigh"}
SUMMARIES = {"auto", "concise", "detailed"}


# --- which interactions are in scope ---------------------------------------------------


def is_responses_host(host: str) -> bool:
    return host == "api.openai.com" or host.endswith(".openai.azure.com") or host == "openrouter.ai"


def sse_events(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            events.append(json.loads(line[5:]))
    return events


def out_of_scope(interaction: Interaction) -> str | None:
    """Why this interaction is not replayed, or None when it is."""
    url = urlsplit(interaction.uri)
    if url.path.endswith("/responses/compact"):
        return "the /responses/compact endpoint (compaction on demand, not a model turn)"
    if not url.path.endswith("/responses"):
        return f"not a Responses call ({url.path})"
    if not is_responses_host(url.hostname or ""):
        return f"unknown host {url.hostname}"
    body = interaction.request_body
    if not isinstance(body, dict) or not isinstance(body.get("input"), list):
        return "request is not a Responses body with input items"
    for option, reason in UNSUPPORTED_OPTIONS.items():
        if body.get(option):
            return reason
    for tool in body.get("tools") or ():
        if tool.get("type") != "function":
            return f"hosted tool {tool.get('type')}"
    for item in body["input"]:
        kind = item.get("type", "message")
        if kind not in ITEM_KINDS:
            return f"{kind} input items"
        for part in item.get("content") if isinstance(item.get("content"), list) else ():
            if part.get("type") not in CONTENT_KINDS:
                return f"{part.get('type')} content (files/documents)"
    if interaction.status != 200:
        return None
    if interaction.is_stream:
        events = sse_events(interaction.text_body or "")
        kinds = {e["item"].get("type") for e in events if "item" in e}
    else:
        kinds = {o.get("type") for o in (interaction.json_body or {}).get("output") or ()}
    if kinds - OUTPUT_KINDS:
        return f"output items {sorted(k for k in kinds - OUTPUT_KINDS if k)}"
    return None


def in_scope(cassette: Cassette) -> Iterator[tuple[int, Interaction]]:
    reasons = []
    for index, interaction in enumerate(cassette.interactions):
        reason = out_of_scope(interaction)
        if reason is None:
            yield index, interaction
        else:
            reasons.append((index, reason))
    if len(reasons) < len(cassette.interactions):
        for index, reason in reasons:
            note_skipped(API, f"{cassette.name}#{index}", reason)
        return
    # A cassette skipped whole is named by what its Responses calls needed,
    # not by the set-up calls (files, vector stores) around them.
    responses_calls = [r for i, r in reasons if "/responses" in cassette.interactions[i].uri]
    reason = (responses_calls or [r for _, r in reasons] or ["no interactions"])[0]
    note_skipped(API, cassette.name, reason)
    pytest.skip(reason)


# --- the recorded conversation, read back into taskloom values -------------------------


def text_of(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text") or "" for p in content or ())


def user_blocks(item: dict[str, Any]) -> list[Block]:
    content = item.get("content")
    if isinstance(content, str):
        return [TextBlock(content)]
    blocks: list[Block] = []
    for part in content or ():
        if part["type"] == "input_text":
            blocks.append(TextBlock(part["text"]))
        else:
            blocks.append(ImageBlock(url=part["image_url"]))
    return blocks


def summary_text(item: dict[str, Any]) -> str:
    return "\n\n".join(p["text"] for p in item.get("summary") or () if p.get("text"))


def read_conversation(body: dict[str, Any]) -> tuple[str | None, list[Message]]:
    """System prompt and messages equivalent to a recorded `input` list."""
    system = [body["instructions"]] if body.get("instructions") else []
    messages: list[Message] = []
    assistant: list[Block] = []
    results: list[ToolResult] = []

    def flush() -> None:
        if assistant:
            messages.append(Message("assistant", tuple(assistant), provider=API))
            assistant.clear()
        if results:
            messages.append(Message.tool_results(list(results)))
            results.clear()

    for item in body["input"]:
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "function_call_output":
            if assistant:
                flush()
            results.append(ToolResult(item["call_id"], item["output"]))
            continue
        if results or (kind == "message" and role != "assistant"):
            flush()
        if kind == "message" and role in ("system", "developer"):
            system.append(text_of(item))
        elif kind == "message" and role == "user":
            messages.append(Message.user(user_blocks(item)))
        elif kind == "message":
            if text_of(item):
                assistant.append(TextBlock(text_of(item)))
        elif kind == "compaction":
            assistant.append(CompactionBlock(API, item))
        elif kind == "reasoning":
            assistant.append(
                ThinkingBlock(
                    summary_text(item),
                    signature=item.get("encrypted_content"),
                    provider=API,
                    id=item.get("id"),
                )
            )
        else:
            assistant.append(
                ToolCall(
                    item["call_id"],
                    item["name"],
                    json.loads(item["arguments"] or "{}"),
                    provider_id=item.get("id"),
                )
            )
    flush()
    return ("\n\n".join(system) or None), messages


def request_for(body: dict[str, Any]) -> ModelRequest:
    system, messages = read_conversation(body)
    reasoning = body.get("reasoning") or {}
    effort, summary = reasoning.get("effort"), reasoning.get("summary")
    options = ReasoningOptions(
        effort=effort if effort in EFFORTS else None,
        summary=summary if summary in SUMMARIES else None,
    )
    fmt = (body.get("text") or {}).get("format") or {}
    structured = fmt.get("type") == "json_schema"
    return ModelRequest(
        messages=messages,
        system=system,
        tools=[
            ToolSpec(t["name"], t.get("description") or "", t["parameters"])
            for t in body.get("tools") or ()
        ],
        settings=ModelSettings(
            temperature=body.get("temperature"),
            top_p=body.get("top_p"),
            max_tokens=body.get("max_output_tokens"),
            reasoning=options if options.effort or options.summary else None,
            extra={k: body[k] for k in ("context_management",) if k in body},
        ),
        output_schema=fmt["schema"] if structured else None,
        output_name=fmt["name"] if structured else "output",
    )


# --- comparing the body taskloom builds with the recorded one ---------------------------


def item_shape(item: dict[str, Any]) -> tuple[Any, ...] | None:
    kind, role = item.get("type", "message"), item.get("role")
    if kind == "message":
        if role in ("system", "developer") or (role == "assistant" and not text_of(item)):
            return None
        if role == "user":
            parts = [
                ("text", b.text) if isinstance(b, TextBlock) else ("image", b.url)
                for b in user_blocks(item)
                if isinstance(b, TextBlock | ImageBlock)
            ]
            return (kind, role, parts)
        return (kind, role, text_of(item))
    if kind == "function_call":
        item_id = item.get("id") if str(item.get("id", "")).startswith("fc") else None
        return (kind, item["call_id"], item["name"], json.loads(item["arguments"] or "{}"), item_id)
    if kind == "function_call_output":
        return (kind, item["call_id"], item["output"])
    if kind == "compaction":
        return (kind, json.dumps(item, sort_keys=True))  # byte for byte, whatever its fields
    if not item.get("encrypted_content"):
        return None
    return (kind, item.get("id"), item["encrypted_content"], summary_text(item))


def shapes(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [s for s in map(item_shape, items) if s is not None]


def check_body(sent: dict[str, Any], recorded: dict[str, Any]) -> None:
    assert sent["model"] == recorded["model"]
    assert sent["store"] is False
    assert shapes(sent["input"]) == shapes(recorded["input"])
    system, _ = read_conversation(recorded)
    assert sent.get("instructions") == system
    assert [(t["type"], t["name"], t["parameters"]) for t in sent.get("tools") or ()] == [
        ("function", t["name"], t["parameters"]) for t in recorded.get("tools") or ()
    ]
    for ours, theirs in zip(sent.get("tools") or (), recorded.get("tools") or (), strict=True):
        # The recording's client may have chosen non-strict for its own reasons,
        # but a schema it sent strict must be one taskloom sends strict too.
        assert ours["strict"] or not theirs.get("strict")
    if any(i["type"] == "reasoning" for i in sent["input"]):
        assert "reasoning.encrypted_content" in sent["include"]
    for key in ("temperature", "top_p", "max_output_tokens", "context_management"):
        assert sent.get(key) == recorded.get(key)
    reasoning = recorded.get("reasoning") or {}
    wanted = {}
    if reasoning.get("effort") in EFFORTS:
        wanted["effort"] = reasoning["effort"]
    if reasoning.get("summary") in SUMMARIES:
        wanted["summary"] = reasoning["summary"]
    assert sent.get("reasoning", {}) == wanted
    fmt = (recorded.get("text") or {}).get("format") or {}
    if fmt.get("type") == "json_schema":
        assert sent["text"]["format"] == {k: fmt[k] for k in ("type", "name", "schema", "strict")}


# --- what the recorded answer says, computed from the recording alone ---------------------


def recorded_answer(interaction: Interaction) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The final response object and its output items, as recorded."""
    if not interaction.is_stream:
        body = interaction.json_body
        return body, body.get("output") or []
    events = sse_events(interaction.text_body or "")
    final = next(
        e["response"] for e in events if e["type"] in ("response.completed", "response.incomplete")
    )
    items = {
        e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"
    }
    return final, [items[i] for i in sorted(items)] if items else final.get("output") or []


def check_response(
    events: list[Any], interaction: Interaction, model_name: str, request: ModelRequest
) -> None:
    assert isinstance(events[-1], ResponseCompleted)
    assert sum(isinstance(e, ResponseCompleted) for e in events) == 1
    response = events[-1].response
    final, output = recorded_answer(interaction)
    messages = [o for o in output if o["type"] == "message"]
    calls = [o for o in output if o["type"] == "function_call"]
    reasoning = [o for o in output if o["type"] == "reasoning"]
    compactions = [o for o in output if o["type"] == "compaction"]

    text = "".join(p.get("text", "") for m in messages for p in m["content"])
    assert response.text == text
    got_calls = [
        (c.id, c.name, c.arguments, c.raw_arguments, c.provider_id)
        for c in response.message.tool_calls
    ]
    assert got_calls == [
        (c["call_id"], c["name"], json.loads(c["arguments"] or "{}"), None, c["id"]) for c in calls
    ]
    thinking = response.message.thinking
    assert [(t.id, t.signature, t.provider) for t in thinking] == [
        (r["id"], r.get("encrypted_content"), API) for r in reasoning
    ]
    for block, item in zip(thinking, reasoning, strict=True):
        raw = "\n\n".join(p["text"] for p in item.get("content") or () if p.get("text"))
        assert block.text == (summary_text(item) or raw)
    kept = [b for b in response.message.blocks if isinstance(b, CompactionBlock)]
    assert [(b.provider, b.data) for b in kept] == [(API, c) for c in compactions]
    order = {
        "message": TextBlock,
        "function_call": ToolCall,
        "reasoning": ThinkingBlock,
        "compaction": CompactionBlock,
    }
    assert [type(b) for b in response.message.blocks] == [
        order[o["type"]] for o in output if o["type"] != "message" or text_of(o)
    ]

    usage = final["usage"]
    assert response.usage.input_tokens == usage["input_tokens"]
    assert response.usage.output_tokens == usage["output_tokens"]
    assert response.usage.cache_read_tokens == usage["input_tokens_details"]["cached_tokens"]
    assert response.usage.reasoning_tokens == usage["output_tokens_details"]["reasoning_tokens"]
    assert response.usage.requests == 1

    reason = (final.get("incomplete_details") or {}).get("reason")
    expected_stop = (
        "tool_use"
        if calls
        else {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}.get(
            reason or "", "end_turn"
        )
    )
    assert response.stop_reason == expected_stop
    assert response.response_id == final["id"]
    assert response.message.provider == API and response.message.model == model_name

    if interaction.is_stream:
        recorded_deltas = [
            e["delta"]
            for e in sse_events(interaction.text_body or "")
            if e["type"] == "response.output_text.delta"
        ]
        streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert streamed == "".join(recorded_deltas) == text
        thought = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
        if thought:
            assert thought == "".join(t.text for t in thinking)
        for index, call in enumerate(calls):
            pieces = [e for e in events if isinstance(e, ToolCallDelta) and e.index == index]
            assert (pieces[0].id, pieces[0].name) == (call["call_id"], call["name"])
            assert "".join(p.arguments for p in pieces) == call["arguments"]


# --- the replay ------------------------------------------------------------------------------


@pytest.mark.parametrize("cassette", CASSETTES, ids=[c.name for c in CASSETTES])
async def test_replay(cassette: Cassette) -> None:
    for _, interaction in in_scope(cassette):
        recorded = interaction.request_body
        replay = transport_for(interaction)
        model = OpenAIResponsesModel(
            recorded["model"],
            api_key="replay-key",
            base_url=interaction.uri.rsplit("/responses", 1)[0],
            http_client=replay.client(),
            stream=interaction.is_stream,
        )
        request = request_for(recorded)
        if interaction.status == 200:
            events = [e async for e in model.stream(request)]
            check_response(events, interaction, recorded["model"], request)
        else:
            error = interaction.json_body["error"]
            with pytest.raises(ProviderError) as info:
                await model.request(request)
            assert isinstance(info.value, InvalidRequest | ContextWindowExceeded)
            assert info.value.status == interaction.status
            assert info.value.message == error["message"]
            assert info.value.error_type == (error.get("type") or error.get("code"))
        check_body(replay.body(), recorded)
        count_replayed(API)


def test_the_replay_covers_the_core_of_the_api() -> None:
    """Guards the scope rules: the main features must stay replayed, not skipped."""
    picked = {c.name for c in CASSETTES if any(out_of_scope(i) is None for i in c.interactions)}
    for name in (
        "test_openai_responses_stream",
        "test_openai_responses_model_simple_response_with_tool_call",
        "test_openai_responses_model_thinking_part",
        "test_openai_responses_thinking_with_tool_calls",
        "test_openai_responses_phase_streamed_on_part_start",
        "test_openai_responses_raw_cot_stream_openrouter",
        "test_openai_responses_model_http_error",
        "test_openai_responses_thinking_with_modified_history",
        "test_native_output",
        "test_openai_responses_image_url_input",
        "test_openai_responses_compact_stateful_mode",
        "test_openai_responses_compact_messages",
        "test_openai_responses_compact_with_auto_previous_response_id_chain",
    ):
        assert name in picked
    assert len(picked) >= 40


# --- server-side compaction: the item goes back as it came ------------------------------


def _compaction_follow_ups() -> list[tuple[str, Interaction, Interaction]]:
    """In-scope pairs where the first answer holds a compaction item the next request sends."""
    pairs = []
    for cassette in CASSETTES:
        calls = [(n, i) for n, i in enumerate(cassette.interactions) if out_of_scope(i) is None]
        for (n, first), (_, then) in pairwise(calls):
            made = [o for o in recorded_answer(first)[1] if o["type"] == "compaction"]
            if first.status == 200 and made and made[-1] in then.request_body["input"]:
                pairs.append((f"{cassette.name}#{n}", first, then))
    return pairs


FOLLOW_UPS = _compaction_follow_ups()


def test_the_corpus_holds_a_compaction_follow_up() -> None:
    assert FOLLOW_UPS


@pytest.mark.parametrize(
    ("first", "then"), [(f, t) for _, f, t in FOLLOW_UPS], ids=[n for n, _, _ in FOLLOW_UPS]
)
async def test_a_compaction_item_goes_back_as_it_came(
    first: Interaction, then: Interaction
) -> None:
    """The answer holding a compaction item is parsed by the adapter; the next request,
    built from the transcript that answer made (stored and read back), has the recorded
    next request's shape, and carries the item byte for byte where it was recorded."""
    model_name = first.request_body["model"]
    replay = transport_for(first)
    model = OpenAIResponsesModel(
        model_name,
        api_key="replay-key",
        http_client=replay.client(),
        stream=first.is_stream,
    )
    earlier = request_for(first.request_body)
    response = await model.request(earlier)
    made = [b for b in response.message.blocks if isinstance(b, CompactionBlock)]
    assert made and made[-1].data == next(
        o for o in reversed(recorded_answer(first)[1]) if o["type"] == "compaction"
    )

    later = then.request_body
    at = later["input"].index(made[-1].data)
    _, since = read_conversation({"input": later["input"][at + 1 :]})
    stored = Message.from_dict(json.loads(json.dumps(response.message.to_dict())))
    request = request_for(later)
    transcript = [*earlier.messages, stored, *since]
    body = model.build_body(
        ModelRequest(transcript, request.system, request.tools, request.settings)
    )
    check_body(body, later)
    sent = [i for i in body["input"] if i.get("type") == "compaction"]
    assert sent == [i for i in later["input"] if i.get("type") == "compaction"]
