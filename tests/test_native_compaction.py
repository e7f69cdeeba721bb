"""Provider-native compaction: the blocks and items a provider compacts with.

Anthropic's `compaction` content blocks and OpenAI Responses' `compaction`
items are kept whole as a `CompactionBlock`, stored and read back unchanged,
replayed byte for byte to the wire API that made them, and dropped for any
other, as thinking is. (The recorded cassettes are replayed in
test_replay_anthropic.py and test_replay_openai_responses.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskloom import Agent, Runtime, ToolEffect, tool
from taskloom.backends import open_backend
from taskloom.messages import (
    CompactionBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
)
from taskloom.models import (
    AnthropicModel,
    ModelRequest,
    ModelSettings,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ReasoningOptions,
)
from taskloom.testing.transport import RecordingTransport

ANTHROPIC_BLOCK = {
    "type": "compaction",
    "content": "Summary: the user asked for the weather in Paris; it was sunny.",
    "encrypted_content": "opaque-anthropic-state",
}
OPENAI_ITEM = {
    "type": "compaction",
    "id": "cmp_0123",
    "encrypted_content": "gAAAAABopaque-openai-state",
}
BETA = AnthropicModel.COMPACTION_BETA
COMPACT = {"context_management": {"edits": [{"type": "compact_20260112"}]}}


def transcript(block: CompactionBlock) -> list[Message]:
    return [
        Message.user("What is the weather in Paris?"),
        Message("assistant", (block, TextBlock("It is sunny.")), provider=block.provider),
        Message.user("And tomorrow?"),
    ]


def anthropic(**options: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-6", api_key="k", **options)


# --- the value ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "data", [ANTHROPIC_BLOCK, OPENAI_ITEM, {"type": "compaction", "content": None}]
)
def test_a_compaction_block_round_trips_exactly(data: dict[str, Any]) -> None:
    block = CompactionBlock("anthropic", data)
    message = Message("assistant", (block, TextBlock("ok")), provider="anthropic")
    stored = json.loads(json.dumps(message.to_dict()))
    assert stored["blocks"][0] == {"type": "compaction", "provider": "anthropic", "data": data}
    back = Message.from_dict(stored)
    assert back == message
    assert back.blocks[0].data == data and back.text == "ok"


def test_a_compaction_block_keeps_its_own_copy_of_the_data() -> None:
    source = {"type": "compaction", "content": "S", "nested": {"a": [1, 2]}}
    block = CompactionBlock("anthropic", source)
    source["content"] = "changed"
    source["nested"]["a"].append(3)
    assert block.data == {"type": "compaction", "content": "S", "nested": {"a": [1, 2]}}
    assert block.summary == "S"
    assert CompactionBlock("openai-responses", OPENAI_ITEM).summary is None


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"type": "compaction", "x": float("nan")}, "data.x: NaN"),
        ({"type": "compaction", "x": {1, 2}}, "data.x: a set"),
        ({"type": "compaction", 3: "y"}, "key 3"),
        (["compaction"], "JSON object"),
    ],
)
def test_a_compaction_block_holds_only_json(data: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        CompactionBlock("anthropic", data)


# --- replayed to its own provider only ---------------------------------------------------


def test_anthropic_replays_its_own_block_byte_for_byte() -> None:
    body = anthropic(betas=[BETA]).build_body(
        ModelRequest(transcript(CompactionBlock("anthropic", ANTHROPIC_BLOCK)))
    )
    assert body["messages"][1]["content"] == [
        ANTHROPIC_BLOCK,
        {"type": "text", "text": "It is sunny."},
    ]


def test_other_providers_drop_an_anthropic_compaction_block() -> None:
    """Like thinking: the block means nothing to another API; the history stays whole."""
    messages = transcript(CompactionBlock("anthropic", ANTHROPIC_BLOCK))
    chat = OpenAIChatModel("gpt-4.1-mini", api_key="k").build_body(ModelRequest(messages))
    assert [(m["role"], m["content"]) for m in chat["messages"]] == [
        ("user", "What is the weather in Paris?"),
        ("assistant", "It is sunny."),
        ("user", "And tomorrow?"),
    ]
    responses = OpenAIResponsesModel("gpt-5-mini", api_key="k").build_body(ModelRequest(messages))
    assert [i.get("type", "message") for i in responses["input"]] == ["message"] * 3
    for body in (chat, responses):
        assert "compaction" not in json.dumps(body) and "opaque" not in json.dumps(body)


def test_anthropic_drops_an_openai_compaction_item() -> None:
    messages = transcript(CompactionBlock("openai-responses", OPENAI_ITEM))
    body = anthropic(betas=[BETA]).build_body(ModelRequest(messages))
    assert body["messages"][1]["content"] == [{"type": "text", "text": "It is sunny."}]


def test_openai_responses_replays_its_own_item_in_place() -> None:
    messages = transcript(CompactionBlock("openai-responses", OPENAI_ITEM))
    body = OpenAIResponsesModel("gpt-5-mini", api_key="k").build_body(ModelRequest(messages))
    assert [i.get("type") for i in body["input"]] == ["message", "compaction", "message", "message"]
    assert body["input"][1] == OPENAI_ITEM
    # Without its encrypted content the item cannot be resolved by a stateless request.
    bare = CompactionBlock("openai-responses", {"type": "compaction", "id": "cmp_1"})
    body = OpenAIResponsesModel("gpt-5-mini", api_key="k").build_body(
        ModelRequest(transcript(bare))
    )
    assert "compaction" not in json.dumps(body["input"])


def test_thinking_after_a_compaction_block_still_opens_the_turn() -> None:
    """With thinking on, Anthropic wants the last tool-using turn to open with thinking;
    the API reads that turn from its compaction block on, so the block comes first and
    thinking stays enabled."""
    turn = Message(
        "assistant",
        (
            CompactionBlock("anthropic", ANTHROPIC_BLOCK),
            ThinkingBlock("look it up", signature="sig", provider="anthropic"),
            ToolCall("toolu_1", "weather", {"city": "Paris"}),
        ),
        provider="anthropic",
    )
    messages = [Message.user("x"), turn, Message.tool_results([ToolResult("toolu_1", "sunny")])]
    settings = ModelSettings(reasoning=ReasoningOptions(budget_tokens=2048))
    body = anthropic(betas=[BETA]).build_body(ModelRequest(messages, settings=settings))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert [b["type"] for b in body["messages"][1]["content"]] == [
        "compaction",
        "thinking",
        "tool_use",
    ]


# --- read from streams -----------------------------------------------------------------


def sse(events: list[dict[str, Any]]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


async def test_an_anthropic_stream_assembles_the_block_from_its_deltas() -> None:
    """The block opens empty; the summary may come in pieces, the opaque state whole."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [],
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    pieces = ANTHROPIC_BLOCK["content"][:20], ANTHROPIC_BLOCK["content"][20:]
    events = [
        {"type": "message_start", "message": start},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "compaction", "content": None, "encrypted_content": None},
        },
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "compaction_delta", "content": piece, "encrypted_content": None},
            }
            for piece in pieces
        ),
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {
                "type": "compaction_delta",
                "content": None,
                "encrypted_content": "opaque-anthropic-state",
            },
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    wire = RecordingTransport(RecordingTransport.sse(sse(events)))
    async with wire.client() as client:
        model = anthropic(http_client=client, betas=[BETA])
        response = await model.request(ModelRequest([Message.user("hi")]))
    assert response.message.blocks == (
        CompactionBlock("anthropic", ANTHROPIC_BLOCK),
        TextBlock("Hi"),
    )


async def test_an_openai_stream_keeps_the_finished_compaction_item() -> None:
    added = {"type": "compaction", "id": "cmp_0123"}
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
    }
    final = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5-mini",
        "output": [message, OPENAI_ITEM],
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }
    events = [
        {"type": "response.output_item.added", "output_index": 0, "item": message},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.output_item.added", "output_index": 1, "item": added},
        {"type": "response.output_item.done", "output_index": 1, "item": OPENAI_ITEM},
        {"type": "response.completed", "response": final},
    ]
    wire = RecordingTransport(RecordingTransport.sse(sse(events)))
    async with wire.client() as client:
        model = OpenAIResponsesModel("gpt-5-mini", api_key="k", http_client=client)
        response = await model.request(ModelRequest([Message.user("hi")]))
    assert response.message.blocks == (
        TextBlock("Hi"),
        CompactionBlock("openai-responses", OPENAI_ITEM),
    )


# --- through a session, stored and read back ------------------------------------------------


@tool(effect=ToolEffect.READ_ONLY)
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def test_a_session_keeps_the_block_and_sends_it_back(tmp_path: Path) -> None:
    """An agent asking Anthropic for compaction: the answer's compaction block is logged
    with its turn, the next round sends it back byte for byte, and a session reopened
    from the store holds it unchanged."""
    calls = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [
            ANTHROPIC_BLOCK,
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    done = dict(
        calls, id="msg_2", content=[{"type": "text", "text": "Sunny."}], stop_reason="end_turn"
    )
    wire = RecordingTransport(RecordingTransport.json(calls), RecordingTransport.json(done))
    model = anthropic(http_client=wire.client(), stream=False, betas=[BETA])
    agent = Agent("a", model, tools=[weather], settings=ModelSettings(extra=COMPACT))
    url = f"sqlite:///{tmp_path / 'native.db'}"
    async with Runtime(store=open_backend(url).store) as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("Weather in Paris?")
        session_id = session.id
    assert result.text == "Sunny."
    assert all(r.headers["anthropic-beta"] == BETA for r in wire.requests)
    assert all(wire.body(i)["context_management"] == COMPACT["context_management"] for i in (0, 1))
    replayed = wire.body(1)["messages"][1]["content"]
    assert replayed[0] == ANTHROPIC_BLOCK and replayed[1]["type"] == "tool_use"

    async with Runtime(store=open_backend(url).store) as runtime:
        reopened = await runtime.open_session(session_id, agent)
        turns = [m for m in await reopened.transcript() if m.role == "assistant"]
    assert turns[0].blocks[0] == CompactionBlock("anthropic", ANTHROPIC_BLOCK)
    assert turns[0].tool_calls[0].id == "toolu_1"
