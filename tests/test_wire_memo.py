"""A run's `ModelRequest.memo`: adapters encode each message once, and the
bodies are exactly what they would be without it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from taskloom.messages import Message, ToolCall, ToolResult
from taskloom.models import ModelRequest, OpenAIChatModel
from taskloom.results import ToolSpec

SPEC = ToolSpec(
    "add",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
)


def conversation(turns: int, *, empty_ids: bool = False) -> list[Message]:
    messages = [Message.user("start")]
    for i in range(turns):
        call_id = "" if empty_ids and i % 2 else f"call_{i}"
        messages.append(
            Message.assistant(tool_calls=[ToolCall(id=call_id, name="add", arguments={"a": i})])
        )
        messages.append(Message.tool_results([ToolResult(call_id, str(i), False, "add")]))
    messages.append(Message.assistant("done"))
    return messages


def model(base_url: str = "https://api.openai.com/v1") -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4.1-mini", api_key="k", base_url=base_url)


def bodies(m: OpenAIChatModel, messages: list[Message], memo: dict[Any, Any] | None) -> list[Any]:
    """The body of each request of a growing conversation, as a run sends them."""
    tools = (SPEC,)
    return [
        m.build_body(
            ModelRequest(messages=tuple(messages[:n]), system="Be brief.", tools=tools, memo=memo)
        )
        for n in range(1, len(messages) + 1)
    ]


def test_bodies_with_a_memo_are_the_bodies_without_one() -> None:
    for empty_ids in (False, True):
        messages = conversation(6, empty_ids=empty_ids)
        memo: dict[Any, Any] = {}
        assert bodies(model(), messages, memo) == bodies(model(), messages, None)
        # A message is kept unless a call or result id in it is empty: the
        # wire id of those depends on where the message stands.
        for message in messages:
            placeless = all(
                b.id if isinstance(b, ToolCall) else b.tool_call_id
                for b in message.blocks
                if isinstance(b, ToolCall | ToolResult)
            )
            assert (("openai-chat", id(message)) in memo) is placeless


def test_a_kept_encoding_is_reused_not_rebuilt() -> None:
    messages = conversation(2)
    memo: dict[Any, Any] = {}
    m = model()
    tools = (SPEC,)  # a run passes the same tuple while its tools are unchanged
    first = m.build_body(ModelRequest(messages=tuple(messages), tools=tools, memo=memo))
    second = m.build_body(ModelRequest(messages=tuple(messages), tools=tools, memo=memo))
    assert second == first
    assert all(a is b for a, b in zip(first["messages"], second["messages"], strict=True))
    assert second["tools"] is first["tools"]
    # Another tuple of specs is encoded anew.
    other = replace(SPEC, description="Adds.")
    third = m.build_body(ModelRequest(messages=tuple(messages), tools=(other,), memo=memo))
    assert third["tools"][0]["function"]["description"] == "Adds."


def test_servers_that_differ_in_tool_turn_content_do_not_share_an_encoding() -> None:
    # OpenAI's own host sends a tool-call-only turn without content; other
    # hosts send "content": "" (quirks): one memo, both right.
    messages = conversation(1)
    memo: dict[Any, Any] = {}
    home, compatible = model(), model("http://127.0.0.1:9/v1")
    for m in (home, compatible, home):
        assert m.build_body(ModelRequest(messages=tuple(messages), memo=memo)) == m.build_body(
            ModelRequest(messages=tuple(messages))
        )
    turn = compatible.build_body(ModelRequest(messages=tuple(messages), memo=memo))["messages"][1]
    assert turn["content"] == ""
    assert (
        "content"
        not in home.build_body(ModelRequest(messages=tuple(messages), memo=memo))["messages"][1]
    )


def test_responses_bodies_with_a_memo_are_the_bodies_without_one() -> None:
    from taskloom.models import OpenAIResponsesModel

    m = OpenAIResponsesModel("gpt-4.1-mini", api_key="k")
    messages = conversation(4)
    memo: dict[Any, Any] = {}
    with_memo = [
        m.build_body(ModelRequest(messages=tuple(messages[:n]), memo=memo))
        for n in range(1, len(messages) + 1)
    ]
    without = [
        m.build_body(ModelRequest(messages=tuple(messages[:n])))
        for n in range(1, len(messages) + 1)
    ]
    assert with_memo == without
    assert {
        id(message)
        for kind, message_id in memo
        if kind == "openai-responses"
        for message in messages
        if id(message) == message_id
    } == {id(m) for m in messages}


def test_a_run_that_changes_wire_format_shares_its_memo_safely() -> None:
    # A strategy may move a run from Chat Completions to Responses: each
    # format keeps its own encodings in the run's one memo.
    from taskloom.models import OpenAIResponsesModel

    chat, responses = model(), OpenAIResponsesModel("gpt-4.1-mini", api_key="k")
    messages = tuple(conversation(2))
    memo: dict[Any, Any] = {}
    for m in (chat, responses, chat, responses):
        assert m.build_body(ModelRequest(messages=messages, memo=memo)) == m.build_body(
            ModelRequest(messages=messages)
        )


def test_gemini_bodies_with_a_memo_are_the_bodies_without_one() -> None:
    from taskloom.models import GeminiModel

    own = Message("assistant", (ToolCall("c9", "add", {"a": 9}),), "google", "gemini-2.5-flash")
    for empty_names in (False, True):
        messages = conversation(4)
        if empty_names:
            # A result without its tool's name takes it from its call, found by id.
            messages[2] = Message.tool_results([ToolResult("call_0", "0")])
        messages += [own, Message.tool_results([ToolResult("c9", "9", False, "add")])]
        memo: dict[Any, Any] = {}
        for name in ("gemini-2.5-flash", "gemini-3-pro-preview"):
            m = GeminiModel(name, api_key="k-gemini-test")
            with_memo = gemini_bodies(m, messages, memo)
            assert with_memo == gemini_bodies(m, messages, None)
        assert (("gemini", "google", "gemini-2.5-flash", id(messages[2])) in memo) is not (
            empty_names
        )
        assert with_memo[-1]["contents"][2]["parts"][0]["functionResponse"]["name"] == "add"


def gemini_bodies(m: Any, messages: list[Message], memo: dict[Any, Any] | None) -> list[Any]:
    return [
        m.build_body(ModelRequest(messages=tuple(messages[:n]), tools=(SPEC,), memo=memo))
        for n in range(1, len(messages) + 1)
    ]
