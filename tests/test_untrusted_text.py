"""Text from tools, models and users reaches the log only as valid UTF-8,
and error text is capped like any other tool output."""

from __future__ import annotations

import json

from pg import pg_schema  # noqa: F401 (fixture)
from store_backends import Backend, backend  # noqa: F401 (fixture)
from taskloom import Agent, RunStatus, Runtime, ToolError, ToolOutput, tool
from taskloom.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    valid_text,
)
from taskloom.models import ModelRequest, ScriptedModel, reply

REPLACED_NOTE = "invalid characters were replaced"


def _encodable(messages: list[Message] | tuple[Message, ...]) -> bytes:
    """What a wire adapter does with the messages: UTF-8 JSON, strict."""
    return json.dumps([m.to_dict() for m in messages], ensure_ascii=False).encode("utf-8")


def _wire(request: ModelRequest) -> bytes:
    return _encodable(request.messages)


def test_valid_text_replaces_lone_surrogates_and_keeps_the_rest() -> None:
    assert valid_text("plain ascii") == "plain ascii"
    assert valid_text("héllo wörld ✓ 😀") == "héllo wörld ✓ 😀"
    assert valid_text("\ud800abc") == "\ufffdabc"
    assert valid_text("a\udfffb\ud800") == "a\ufffdb\ufffd"
    # A surrogate pair written as two code points is one character.
    assert valid_text("\ud83d\ude00") == "😀"
    s = "ascii only"
    assert valid_text(s) is s


def test_blocks_are_valid_utf8_from_construction() -> None:
    assert TextBlock("x\ud800").text == "x\ufffd"
    assert ThinkingBlock("t\udc00").text == "t\ufffd"
    call = ToolCall("c\ud800", "n", {"k\ud800": ["v\udc00", {"deep": "\ud801"}]}, "r\ud800")
    assert call.id == "c\ufffd"
    assert call.arguments == {"k\ufffd": ["v\ufffd", {"deep": "\ufffd"}]}
    assert call.raw_arguments == "r\ufffd"
    result = ToolResult("c1", "\ud800abc", tool_name="t")
    assert result.content.startswith("\ufffdabc") and REPLACED_NOTE in result.content
    assert Message.user("hi \ud800").text == "hi \ufffd"
    # Loading a log written before values were checked heals it.
    old = {
        "role": "tool",
        "blocks": [{"type": "tool_result", "tool_call_id": "c", "content": "\ud800"}],
    }
    _encodable([Message.from_dict(old)])


def test_valid_values_are_kept_as_given() -> None:
    args = {"a": 1, "b": [1.5, "ü", None, True]}
    call = ToolCall("c1", "t", args)
    assert call.arguments is args
    result = ToolResult("c1", "fine ✓")
    assert result.content == "fine ✓"
    message = Message.assistant("text", tool_calls=[call])
    assert Message.from_dict(json.loads(json.dumps(message.to_dict()))) == message


async def test_tool_output_with_a_lone_surrogate_is_noted_and_replaced() -> None:
    @tool
    def bad() -> str:
        """Returns broken text."""
        return "\ud800abc"

    out = await bad.call({}, None)  # type: ignore[arg-type]
    assert out.content.startswith("\ufffdabc") and REPLACED_NOTE in out.content
    assert ToolOutput("\udc00", is_error=True).content.startswith("\ufffd")


async def test_lone_surrogates_never_poison_the_session(backend: Backend) -> None:  # noqa: F811
    @tool
    def broken(text: str) -> str:
        """Echo with a lone surrogate."""
        return "\ud800abc " + text

    @tool
    def failing() -> str:
        """Fail with a lone surrogate in the message."""
        raise ToolError("bad \udfff")

    model = ScriptedModel(
        [
            reply("thinking \ud800", tool_calls=[("broken", {"text": "arg \udc00"})]),
            reply(tool_calls=[("failing", {})]),
            reply("done \ud83d"),
        ]
    )
    agent = Agent("a", model, tools=[broken, failing])
    runtime = Runtime(store=backend.open())
    session = await runtime.create_session(agent)
    result = await session.run("user says \ud800")
    assert result.status is RunStatus.COMPLETED
    for request in model.requests:
        _wire(request)
    transcript = await session.transcript()
    _encodable(transcript)
    results = [r for m in transcript for r in m.results]
    assert results[0].content.startswith("\ufffdabc arg \ufffd")
    assert REPLACED_NOTE in results[0].content
    assert results[1].is_error and results[1].content.startswith("bad \ufffd")
    assert transcript[0].text == "user says \ufffd"

    # A second run on the same session (and, when durable, a reopened one).
    model2 = ScriptedModel([reply("again")])
    store = backend.open()
    reopened = await Runtime(store=store).open_session(session.id, Agent("a", model2))
    assert (await reopened.run("more")).status is RunStatus.COMPLETED
    _wire(model2.requests[0])
    _encodable(await reopened.transcript())


async def test_error_text_is_capped_like_output() -> None:
    @tool(max_output_chars=1000)
    def huge(kind: str) -> str:
        """Fail loudly."""
        if kind == "tool":
            raise ToolError("E" * 500 + "x" * 20_000_000 + "Z" * 300)
        raise RuntimeError("E" * 500 + "x" * 20_000_000 + "Z" * 300)

    for kind in ("tool", "other"):
        out = await huge.call({"kind": kind}, None)  # type: ignore[arg-type]
        assert out.is_error
        assert len(out.content) < 1200, len(out.content)
        assert "output truncated" in out.content
        assert out.content.endswith("Z" * 300)
        assert "EEEE" in out.content[:600]


async def test_huge_tool_error_is_capped_in_the_log_and_the_request() -> None:
    @tool(max_output_chars=2000)
    def huge() -> str:
        """Fail loudly."""
        raise ToolError("x" * 20_000_000)

    model = ScriptedModel([reply(tool_calls=[("huge", {})]), reply("ok")])
    session = await Runtime().create_session(Agent("a", model, tools=[huge]))
    await session.run("go")
    assert len(_wire(model.requests[1])) < 10_000
    result = (await session.transcript())[2].results[0]
    assert result.is_error and len(result.content) < 2200
