"""Tool-call arguments JSON cannot carry (NaN, infinities, absurd nesting)
are answered in band on every store, and the call that carried them stays
storable; so is a tool result nested too deeply to encode."""

from __future__ import annotations

import json
import math

import httpx2
import pytest

from pg import pg_schema  # noqa: F401 (fixture)
from store_backends import Backend, backend  # noqa: F401 (fixture)
from taskloom import Agent, RunStatus, Runtime, tool
from taskloom.messages import MAX_ARGUMENT_DEPTH, Message, ToolCall, ToolResult
from taskloom.models import AnthropicModel, ModelRequest, OpenAIChatModel, ScriptedModel, reply
from taskloom.testing.transport import RecordingTransport


def _nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _strict(value: object) -> str:
    return json.dumps(value, allow_nan=False)


@tool
def measure(x: object) -> str:
    """Accept anything."""
    return "ran"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"x": float("nan")}, "NaN"),
        ({"x": [1.0, float("inf")]}, "Infinity"),
        ({"x": {"y": -math.inf}}, "-Infinity"),
        ({"x": _nested(10_000)}, f"deeper than {MAX_ARGUMENT_DEPTH}"),
    ],
)
async def test_validation_rejects_non_finite_and_too_deep(
    arguments: dict[str, object], problem: str
) -> None:
    out = await measure.call(arguments, None)  # type: ignore[arg-type]
    assert out.is_error and problem in out.content and "x" in out.content
    assert out.content != "ran"


async def test_nesting_up_to_the_limit_is_accepted() -> None:
    # The arguments object is level 1.
    out = await measure.call({"x": _nested(MAX_ARGUMENT_DEPTH - 1)}, None)  # type: ignore[arg-type]
    assert out.content == "ran"
    out = await measure.call({"x": _nested(MAX_ARGUMENT_DEPTH)}, None)  # type: ignore[arg-type]
    assert out.is_error


def test_a_call_with_unstorable_arguments_keeps_them_as_text() -> None:
    call = ToolCall("c1", "measure", {"x": float("nan"), "y": _nested(10_000)})
    assert call.arguments == {}
    assert call.raw_arguments is not None
    assert (
        "<NaN>" in call.raw_arguments and f"deeper than {MAX_ARGUMENT_DEPTH}" in call.raw_arguments
    )
    text = _strict(Message.assistant(tool_calls=[call]).to_dict())
    assert Message.from_dict(json.loads(text)).tool_calls[0] == call


async def test_unstorable_arguments_are_answered_in_band_on_every_store(
    backend: Backend,  # noqa: F811
) -> None:
    ran: list[object] = []

    @tool
    def take(x: object) -> str:
        """Record what arrived."""
        ran.append(x)
        return "ran"

    model = ScriptedModel(
        [
            reply(tool_calls=[("take", {"x": float("nan")})]),
            reply(tool_calls=[("take", {"x": _nested(10_000)})]),
            reply(tool_calls=[("take", {"x": 1.5})]),
            reply("done"),
        ]
    )
    session = await Runtime(store=backend.open()).create_session(Agent("a", model, tools=[take]))
    result = await session.run("go")
    assert result.status is RunStatus.COMPLETED, result.error
    assert ran == [1.5]
    answers = [m.results[0] for m in model.requests[-1].messages if m.role == "tool"]
    assert [a.is_error for a in answers] == [True, True, False]
    assert "NaN" in answers[0].content
    assert f"deeper than {MAX_ARGUMENT_DEPTH}" in answers[1].content
    for request in model.requests:
        _strict([m.to_dict() for m in request.messages])

    reopened = await Runtime(store=backend.open()).open_session(
        session.id, Agent("a", ScriptedModel([]), tools=[take])
    )
    transcript = await reopened.transcript()
    assert [m.role for m in transcript] == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
    _strict([m.to_dict() for m in transcript])


DEEP = '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"


def _answering(body: dict[str, object] | str) -> httpx2.AsyncClient:
    answer = (
        RecordingTransport.sse(body) if isinstance(body, str) else RecordingTransport.json(body)
    )
    return RecordingTransport(default=answer).client()


async def test_openai_arguments_nested_too_deep_are_invalid_not_a_crash() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "t", "arguments": DEEP}}
    answer = {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    model = OpenAIChatModel(
        "m",
        api_key="k",
        base_url="http://127.0.0.1:9/v1",
        http_client=_answering(answer),
        stream=False,
    )
    response = await model.request(ModelRequest(messages=[Message.user("go")]))
    assert response.message.tool_calls == [ToolCall("c", "t", {}, raw_arguments=DEEP)]


async def test_anthropic_arguments_nested_too_deep_are_invalid_not_a_crash() -> None:
    events = [
        {"type": "message_start", "message": {"id": "m", "model": "c", "usage": {}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "c", "name": "t", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": DEEP},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    ]
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    model = AnthropicModel("c", api_key="k", http_client=_answering(body), stream=True)
    response = await model.request(ModelRequest(messages=[Message.user("go")]))
    assert response.message.tool_calls == [ToolCall("c", "t", {}, raw_arguments=DEEP)]


async def test_anthropic_sends_arguments_json_cannot_carry_as_no_arguments() -> None:
    answer = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "c",
        "content": [],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    server = RecordingTransport(default=RecordingTransport.json(answer))
    model = AnthropicModel("c", api_key="k", http_client=server.client(), stream=False)
    nan = ToolCall("c", "t", {}, raw_arguments='{"x": NaN}')
    history = [
        Message.user("go"),
        Message.assistant(tool_calls=[nan]),
        Message.tool_results([ToolResult("c", "r")]),
    ]
    await model.request(ModelRequest(messages=history))
    (tool_use,) = server.body()["messages"][1]["content"]
    assert tool_use["input"] == {}


@tool
def deep_result() -> list[object]:
    """Return a list nested 3,000 levels deep."""
    return _nested(3_000)


@tool
async def deep_progress():  # type: ignore[no-untyped-def]
    """Report progress nested 3,000 levels deep, then finish."""
    yield _nested(3_000)
    yield "finished"


async def test_a_result_nested_too_deeply_is_answered_in_band_on_every_store(
    backend: Backend,  # noqa: F811
) -> None:
    model = ScriptedModel(
        [
            reply(tool_calls=[("deep_result", {})]),
            reply(tool_calls=[("deep_progress", {})]),
            reply("done"),
        ]
    )
    agent = Agent("a", model, tools=[deep_result, deep_progress])
    session = await Runtime(store=backend.open()).create_session(agent)
    result = await session.run("go")
    assert result.status is RunStatus.COMPLETED, result.error
    answers = [m.results[0] for m in model.requests[-1].messages if m.role == "tool"]
    assert [a.is_error for a in answers] == [True, True]
    for answer in answers:
        assert "nests 3000 levels deep" in answer.content, answer.content
    reopened = await Runtime(store=backend.open()).open_session(
        session.id, Agent("a", ScriptedModel([]), tools=[deep_result, deep_progress])
    )
    stored = [m.results[0] for m in await reopened.transcript() if m.role == "tool"]
    assert stored == answers


async def test_a_result_nested_within_reach_is_encoded() -> None:
    @tool
    def nested() -> list[object]:
        """Return a list nested 100 levels deep."""
        return _nested(100)

    out = await nested.call({}, None)  # type: ignore[arg-type]
    assert not out.is_error and json.loads(out.content) == _nested(100)
