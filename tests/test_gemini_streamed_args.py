"""Streamed function-call arguments on the Gemini wire (Vertex AI's
`streamFunctionCallArguments`): the pieces of one call (`partialArgs`,
`willContinue`) become that one call with its whole arguments, as Google's
Go SDK assembles them; a stream that never ends a call, or whose pieces cannot
be placed, is a clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskloom.errors import ProviderError
from taskloom.messages import MAX_ARGUMENT_DEPTH, Message
from taskloom.models import (
    GeminiModel,
    ModelRequest,
    ResponseCompleted,
    RetryPolicy,
    ToolCallDelta,
)
from taskloom.testing.transport import RecordingTransport

RECORDING = Path(__file__).parent / "corpora" / "genai-sdk-streams" / "streamed_function_calls.sse"
ASSEMBLED = [
    ("controlLight", {"room": "living", "brightness": 50, "color": "warm white"}),
    ("setThermostat", {"temp": 21}),
]
"""What Google's Go SDK makes of the recording (its own test's expectation)."""


def vertex_on(body: str) -> GeminiModel:
    server = RecordingTransport(default=RecordingTransport.sse(body))
    return GeminiModel.vertex(
        "gemini-3-pro-preview", project="p", token="t-vertex", http_client=server.client()
    )


def sse(*parts: dict[str, Any], finish: str | None = "STOP") -> str:
    """One chunk per function-call part, the last with `finish`."""
    chunks = []
    for i, part in enumerate(parts):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}}
        if finish is not None and i == len(parts) - 1:
            candidate["finishReason"] = finish
        chunks.append({"candidates": [candidate], "responseId": "r-1"})
    return "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks)


def call(
    *pieces: dict[str, Any], name: str | None = None, more: bool = True, **rest: Any
) -> dict[str, Any]:
    function_call: dict[str, Any] = {**rest}
    if name is not None:
        function_call["name"] = name
    if pieces:
        function_call["partialArgs"] = list(pieces)
    if more:
        function_call["willContinue"] = True
    return {"functionCall": function_call}


async def test_the_sdk_recording_yields_exactly_its_two_calls_whole() -> None:
    model = vertex_on(RECORDING.read_text())
    events = [e async for e in model.stream(ModelRequest([Message.user("lights")]))]
    done = events[-1]
    assert isinstance(done, ResponseCompleted)
    calls = done.response.message.tool_calls
    assert [(c.name, c.arguments) for c in calls] == ASSEMBLED
    assert len({c.id for c in calls}) == 2 and all(c.id for c in calls)
    assert done.response.stop_reason == "tool_use"
    # One delta per call, each with the call's whole arguments.
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(d.index, d.name, json.loads(d.arguments)) for d in deltas] == [
        (i, name, args) for i, (name, args) in enumerate(ASSEMBLED)
    ]
    # Without streaming the events, the same answer.
    again = await vertex_on(RECORDING.read_text()).request(ModelRequest([Message.user("l")]))
    assert [(c.name, c.arguments) for c in again.message.tool_calls] == ASSEMBLED


def test_the_recording_uses_the_wire_names_the_python_sdk_reads() -> None:
    """google-genai (a test-only dependency) assembles nothing, but its types
    name every field of the wire: each part of the recording reads back whole,
    so the fields the adapter reads are Google's."""
    types = pytest.importorskip("google.genai.types")
    for line in RECORDING.read_text().splitlines():
        if not line.startswith("data:"):
            continue
        chunk = json.loads(line.removeprefix("data:"))
        parsed = types.GenerateContentResponse.model_validate(chunk)
        dumped = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
        raw = chunk["candidates"][0]["content"]["parts"]
        assert _doubles(dumped["candidates"][0]["content"]["parts"]) == _doubles(raw)


def _doubles(value: Any) -> Any:
    """`value` with its numbers as the SDK reads them (doubles)."""
    if isinstance(value, dict):
        return {k: _doubles(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_doubles(v) for v in value]
    return float(value) if type(value) is int else value


async def test_pieces_at_nested_paths_arrays_and_quoted_names_are_placed() -> None:
    body = sse(
        call({"jsonPath": "$.where.city", "stringValue": "Par", "willContinue": True}, name="f"),
        call(
            {"jsonPath": "$.where.city", "stringValue": "is"},
            {"jsonPath": "$['two words'][0]", "boolValue": True},
            {"jsonPath": '$["two words"][1].x', "nullValue": "NULL_VALUE"},
            {"jsonPath": "$.n", "numberValue": 1.5},
        ),
        call({"jsonPath": "$.n", "numberValue": 2}, more=False),
    )
    response = await vertex_on(body).request(ModelRequest([Message.user("go")]))
    (only,) = response.message.tool_calls
    assert only.name == "f"
    assert only.arguments == {"where": {"city": "Paris"}, "two words": [True, {"x": None}], "n": 2}


async def test_a_string_piece_without_will_continue_replaces_the_one_before() -> None:
    # As the SDK does: only a piece that said willContinue is extended.
    body = sse(
        call({"jsonPath": "$.s", "stringValue": "draft"}, name="f"),
        call({"jsonPath": "$.s", "stringValue": "final"}, more=False),
    )
    response = await vertex_on(body).request(ModelRequest([Message.user("go")]))
    assert response.message.tool_calls[0].arguments == {"s": "final"}


async def test_a_call_never_ended_is_a_clear_error_not_a_partial_call() -> None:
    body = sse(
        call({"jsonPath": "$.q", "stringValue": "a", "willContinue": True}, name="search"),
        call({"jsonPath": "$.q", "stringValue": "b", "willContinue": True}),
    )
    with pytest.raises(ProviderError) as caught:
        await vertex_on(body).request(ModelRequest([Message.user("go")]))
    assert "'search' was still streaming its arguments" in str(caught.value)
    assert caught.value.retryable and RetryPolicy().should_retry(caught.value, 0)


HOSTILE = {
    "descendant path": ("$..a", "unreadable partialArgs jsonPath '$..a'"),
    "no root": ("a.b", "unreadable partialArgs jsonPath 'a.b'"),
    "root only": ("$", "unreadable partialArgs jsonPath '$'"),
    "index at the top": ("$[0]", "indexes the arguments object"),
    "index far past the end": ("$.a[999999999]", "array index 999999999 is past"),
    "index past the end": ("$.a[1]", "array index 1 is past the array's end (0)"),
    "index of absurd length": ("$.a[" + "9" * 5000 + "]", "unreadable partialArgs jsonPath"),
    "too deep": ("$" + ".a" * (MAX_ARGUMENT_DEPTH + 1), f"deeper than {MAX_ARGUMENT_DEPTH}"),
    "through a value": ("$.s.x", "path $.s.x reaches through a value"),
    "over an object": ("$.o", "a value at $.o would replace its object"),
}


@pytest.mark.parametrize(("path", "message"), HOSTILE.values(), ids=list(HOSTILE))
async def test_pieces_that_cannot_be_placed_are_refused_clearly(path: str, message: str) -> None:
    body = sse(
        call(
            {"jsonPath": "$.s", "stringValue": "v"},
            {"jsonPath": "$.o.k", "numberValue": 1},
            name="f",
        ),
        call({"jsonPath": path, "numberValue": 1}, more=False),
    )
    with pytest.raises(ProviderError) as caught:
        await vertex_on(body).request(ModelRequest([Message.user("go")]))
    assert "cannot be assembled" in str(caught.value)
    assert message in str(caught.value)
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        (
            [{"jsonPath": "$.s", "stringValue": "x", "willContinue": True}, {"jsonPath": "$.s"}],
            "string at $.s continued with a non-string",
        ),
        ([{"jsonPath": "$.s", "stringValue": 7}], "partialArgs stringValue '7'"),
        ([{"jsonPath": "$.s", "numberValue": True}], "partialArgs numberValue 'True'"),
        ([{"jsonPath": "$.s", "numberValue": {"a": 1}}], "partialArgs numberValue"),
    ],
)
async def test_values_of_the_wrong_kind_are_refused(
    pieces: list[dict[str, Any]], message: str
) -> None:
    body = sse(call(*pieces, name="f", more=False))
    with pytest.raises(ProviderError, match="cannot be assembled") as caught:
        await vertex_on(body).request(ModelRequest([Message.user("go")]))
    assert message in str(caught.value)


async def test_another_call_cutting_into_an_open_one_is_refused() -> None:
    body = sse(
        call({"jsonPath": "$.a", "stringValue": "x"}, name="first"),
        call({"jsonPath": "$.b", "stringValue": "y"}, name="second", more=False),
    )
    with pytest.raises(ProviderError, match="name changed mid-call: 'first', then 'second'"):
        await vertex_on(body).request(ModelRequest([Message.user("go")]))


async def test_a_continued_call_keeps_its_first_signature_and_its_id() -> None:
    body = sse(
        {**call(name="f", id="fc-1"), "thoughtSignature": "c2ln"},
        call({"jsonPath": "$.a", "stringValue": "x"}, id="fc-1", more=False),
    )
    response = await vertex_on(body).request(ModelRequest([Message.user("go")]))
    blocks = response.message.blocks
    assert [type(b).__name__ for b in blocks] == ["ThinkingBlock", "ToolCall"]
    assert blocks[0].signature == "c2ln"  # type: ignore[union-attr]
    assert (blocks[1].id, blocks[1].arguments) == ("fc-1", {"a": "x"})  # type: ignore[union-attr]
