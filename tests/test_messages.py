from __future__ import annotations

import json

import pytest

from taskloom import ImageBlock, Message, ThinkingBlock, ToolCall, ToolResult, Usage


def test_every_block_kind_round_trips_through_json() -> None:
    messages = [
        Message.user("hi ✓"),
        Message.user(
            [
                ImageBlock(data=b"\x89PNG\x00", media_type="image/png"),
                ImageBlock(url="https://x/y.png"),
            ]
        ),
        Message.assistant(
            "answer",
            tool_calls=[
                ToolCall("c1", "add", {"a": 1}),
                ToolCall("c2", "bad", {}, raw_arguments="{nope"),
            ],
            thinking=[
                ThinkingBlock("hmm", signature="sig", provider="anthropic"),
                ThinkingBlock(redacted=True, data="xyz"),
            ],
            provider="anthropic",
            model="claude",
        ),
        Message.tool_results(
            [ToolResult("c1", "2", tool_name="add"), ToolResult("c2", "bad", is_error=True)]
        ),
    ]
    for m in messages:
        assert Message.from_dict(json.loads(json.dumps(m.to_dict()))) == m


def test_message_accessors() -> None:
    m = Message.assistant("a", tool_calls=[ToolCall("1", "t", {})], thinking=[ThinkingBlock("t")])
    assert m.text == "a"
    assert [c.id for c in m.tool_calls] == ["1"]
    assert m.blocks[0] == ThinkingBlock("t")  # thinking comes first
    assert Message.tool_results([ToolResult("1", "x")]).results[0].content == "x"


def test_image_needs_exactly_one_source() -> None:
    with pytest.raises(ValueError):
        ImageBlock()
    with pytest.raises(ValueError):
        ImageBlock(data=b"x", url="u")


def test_usage_adds_up() -> None:
    total = Usage(1, 2, 3, 4, 5, 1) + Usage(10, 20, 30, 40, 50, 1)
    assert total == Usage(11, 22, 33, 44, 55, 2)
    assert total.total_tokens == 33
    assert Usage.from_dict(total.to_dict()) == total
