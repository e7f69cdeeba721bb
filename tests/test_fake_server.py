"""The fake provider server: its wire formats, its faults, and the adapters against it.

The first part drives `FakeServer` with raw `httpx2` requests and checks what
a real client would see, including a comparison with recorded provider
traffic. The second part runs wire adapters against it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
import yaml

from cassettes import CORPUS
from taskloom.messages import Usage
from taskloom.testing.fake_server import FakeServer

CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
ALL_PATHS = (CHAT, RESPONSES, MESSAGES)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as s:
        yield s


@pytest.fixture
async def client() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=10) as c:
        yield c


def parse_sse(text: str) -> list[tuple[str | None, str]]:
    """(event name, data) of every event in an SSE body."""
    events = []
    for block in text.strip().split("\n\n"):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        events.append((name, "\n".join(data)))
    return events


async def post(
    client: httpx2.AsyncClient, server: FakeServer, path: str, **body: Any
) -> httpx2.Response:
    return await client.post(server.url + path, json={"model": "m", **body})


async def stream_events(
    client: httpx2.AsyncClient, server: FakeServer, path: str, **body: Any
) -> list[tuple[str | None, Any]]:
    response = await post(client, server, path, stream=True, **body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    return [
        (name, data if data == "[DONE]" else json.loads(data))
        for name, data in parse_sse(response.text)
    ]


TOOL_ARGS = {"city": "Paris", "days": [1, 2], "note": "a longer string to split"}


# --- the three wire formats, streamed and not -----------------------------------------------


async def test_chat_completion_json(server: FakeServer, client: httpx2.AsyncClient) -> None:
    server.script(
        FakeServer.reply(
            "It is sunny.",
            tool_calls=[("weather", TOOL_ARGS, "call_1")],
            usage=Usage(input_tokens=21, output_tokens=7, cache_read_tokens=4),
        )
    )
    body = (await post(client, server, CHAT)).json()
    assert body["object"] == "chat.completion" and body["model"] == "m"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "It is sunny."
    (call,) = choice["message"]["tool_calls"]
    assert call["id"] == "call_1" and call["function"]["name"] == "weather"
    assert json.loads(call["function"]["arguments"]) == TOOL_ARGS
    assert body["usage"]["prompt_tokens"] == 21 and body["usage"]["completion_tokens"] == 7
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 4


@pytest.mark.parametrize("include_usage", [True, False])
async def test_chat_completion_stream(
    server: FakeServer, client: httpx2.AsyncClient, include_usage: bool
) -> None:
    server.script(
        FakeServer.reply(
            ["Hel", "lo", " there"],
            tool_calls=[("weather", TOOL_ARGS), ("time", {})],
            usage=Usage(input_tokens=5, output_tokens=9),
        )
    )
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    events = await stream_events(client, server, CHAT, **options)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(("usage" in c) == include_usage for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0]["role"] == "assistant"
    assert [d["content"] for d in deltas if d.get("content")] == ["Hel", "lo", " there"]
    arguments: dict[int, str] = {}
    names = {}
    for d in deltas:
        for call in d.get("tool_calls", ()):
            arguments[call["index"]] = (
                arguments.get(call["index"], "") + call["function"]["arguments"]
            )
            if "name" in call["function"]:
                names[call["index"]] = (call["id"], call["function"]["name"])
    assert [n for _, n in names.values()] == ["weather", "time"]
    assert len({i for i, _ in names.values()}) == 2
    assert json.loads(arguments[0]) == TOOL_ARGS and json.loads(arguments[1]) == {}
    assert sum(len(d.get("tool_calls", ())) for d in deltas) > 3  # arguments come in pieces
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "tool_calls" and not any(finishes[:-1])
    if include_usage:
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"]["prompt_tokens"] == 5
        assert chunks[-1]["usage"]["completion_tokens"] == 9
    else:
        assert chunks[-1]["choices"]


async def test_responses_json(server: FakeServer, client: httpx2.AsyncClient) -> None:
    server.script(
        FakeServer.reply(
            "Sure.",
            tool_calls=[("weather", TOOL_ARGS)],
            usage=Usage(input_tokens=3, output_tokens=4),
        )
    )
    body = (await post(client, server, RESPONSES, instructions="be brief")).json()
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["instructions"] == "be brief"
    message, call = body["output"]
    assert message["type"] == "message" and message["content"][0]["text"] == "Sure."
    assert call["type"] == "function_call" and call["name"] == "weather"
    assert call["call_id"] != call["id"]
    assert json.loads(call["arguments"]) == TOOL_ARGS
    assert body["usage"]["input_tokens"] == 3 and body["usage"]["output_tokens"] == 4


async def test_responses_stream(server: FakeServer, client: httpx2.AsyncClient) -> None:
    server.script(FakeServer.reply(["A", "B", "C"], tool_calls=[("weather", TOOL_ARGS)]))
    events = await stream_events(client, server, RESPONSES)
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    kinds = [name for name, _ in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed"
    texts = [d["delta"] for n, d in events if n == "response.output_text.delta"]
    assert texts == ["A", "B", "C"]
    pieces = [d["delta"] for n, d in events if n == "response.function_call_arguments.delta"]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == TOOL_ARGS
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    final = events[-1][1]["response"]
    assert final["output"] == done and final["status"] == "completed"
    assert final["usage"]["output_tokens"] >= 1
    assert events[0][1]["response"]["status"] == "in_progress"


async def test_responses_max_tokens_is_incomplete(
    server: FakeServer, client: httpx2.AsyncClient
) -> None:
    server.script(FakeServer.reply("cut", stop_reason="max_tokens"))
    events = await stream_events(client, server, RESPONSES)
    name, data = events[-1]
    assert name == "response.incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_anthropic_json(server: FakeServer, client: httpx2.AsyncClient) -> None:
    usage = Usage(input_tokens=30, output_tokens=8, cache_read_tokens=10, cache_write_tokens=5)
    server.script(
        FakeServer.reply("Let me look.", tool_calls=[("weather", TOOL_ARGS)], usage=usage)
    )
    body = (await post(client, server, MESSAGES)).json()
    assert body["type"] == "message" and body["stop_reason"] == "tool_use"
    text, tool = body["content"]
    assert text == {"type": "text", "text": "Let me look."}
    assert tool["type"] == "tool_use" and tool["input"] == TOOL_ARGS
    assert tool["id"].startswith("toolu_")
    assert body["usage"]["input_tokens"] == 30
    assert body["usage"]["cache_read_input_tokens"] == 10
    assert body["usage"]["cache_creation_input_tokens"] == 5


async def test_anthropic_stream(server: FakeServer, client: httpx2.AsyncClient) -> None:
    server.script(
        FakeServer.reply(["x", "y"], tool_calls=[("weather", TOOL_ARGS)], usage=Usage(2, 6))
    )
    events = await stream_events(client, server, MESSAGES)
    assert all(name == data["type"] for name, data in events)
    kinds = [n for n, _ in events if n != "ping"]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "tool_use"]
    assert starts[1]["input"] == {} and starts[1]["name"] == "weather"
    deltas = [d for n, d in events if n == "content_block_delta"]
    assert [d["delta"]["text"] for d in deltas if d["index"] == 0] == ["x", "y"]
    partial = [d["delta"]["partial_json"] for d in deltas if d["index"] == 1]
    assert partial[0] == "" and json.loads("".join(partial)) == TOOL_ARGS
    assert [d["index"] for n, d in events if n == "content_block_stop"] == [0, 1]
    message_delta = next(d for n, d in events if n == "message_delta")
    assert message_delta["delta"]["stop_reason"] == "tool_use"
    assert message_delta["usage"]["output_tokens"] == 6


# --- the formats match recorded provider traffic --------------------------------------------


@functools.cache
def interactions(folder: str) -> list[dict[str, Any]]:
    """Every recorded request and response of a corpus folder (parsed once per run)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found = []
    for cassette in sorted((CORPUS / folder).glob("*.yaml")):
        found += yaml.load(cassette.read_text(), Loader=loader).get("interactions", [])
    return found


def recorded(folder: str, path: str, *, stream: bool) -> list[Any]:
    """Bodies of the successful recorded responses to `path`: SSE text or JSON."""
    assert (CORPUS / folder).is_dir(), f"recorded traffic not found at {CORPUS / folder}"
    bodies = []
    for item in interactions(folder):
        response, uri = item["response"], item["request"]["uri"]
        if response["status"]["code"] != 200 or not uri.partition("?")[0].endswith(path):
            continue
        text = (response.get("body") or {}).get("string")
        if stream and isinstance(text, str) and text.lstrip().startswith(("data:", "event:")):
            bodies.append(text)
        elif not stream and response.get("parsed_body") is not None:
            bodies.append(response["parsed_body"])
    assert bodies, f"no recorded {'streamed' if stream else 'JSON'} responses in {folder}"
    return bodies


def common_keys(objects: list[dict[str, Any]]) -> set[str]:
    """Keys every recorded object has (fields that come and go are not required)."""
    keys = set(objects[0])
    for obj in objects[1:]:
        keys &= set(obj)
    return keys - {"obfuscation"}


def by_kind(texts: list[str], kind_of: Any) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for text in texts:
        for _, data in parse_sse(text):
            if data and data != "[DONE]":
                obj = json.loads(data)
                kinds.setdefault(kind_of(obj), []).append(obj)
    return kinds


def to_sse(events: list[tuple[str | None, Any]]) -> str:
    """Parsed events back into SSE text (what `by_kind` reads)."""
    return "\n\n".join(f"data: {d if d == '[DONE]' else json.dumps(d)}" for _, d in events)


def chat_kind(chunk: dict[str, Any]) -> str:
    if not chunk["choices"]:
        return "usage"
    delta = chunk["choices"][0]["delta"]
    return "tool_calls" if delta.get("tool_calls") else "content" if "content" in delta else "end"


@pytest.mark.parametrize(
    ("folder", "path", "kind_of"),
    [
        ("test_openai", CHAT, chat_kind),
        ("test_openai_responses", RESPONSES, lambda e: e["type"]),
        ("test_anthropic", MESSAGES, lambda e: e["type"]),
    ],
)
async def test_streamed_events_carry_the_recorded_fields(
    server: FakeServer, client: httpx2.AsyncClient, folder: str, path: str, kind_of: Any
) -> None:
    real = by_kind(recorded(folder, path, stream=True), kind_of)
    server.script(FakeServer.reply("Hi there", tool_calls=[("weather", TOOL_ARGS)]))
    events = await stream_events(client, server, path, stream_options={"include_usage": True})
    ours = by_kind([to_sse(events)], kind_of)
    for kind, objects in ours.items():
        assert kind in real, f"{kind} does not occur in recorded {folder} traffic"
        missing = common_keys(real[kind]) - common_keys(objects)
        assert not missing, f"{kind} lacks recorded fields {missing}"
        for name in ("response", "message", "item", "usage", "delta", "content_block", "part"):
            nested = [o[name] for o in real[kind] if isinstance(o.get(name), dict)]
            if nested and all(isinstance(o.get(name), dict) for o in objects):
                missing = common_keys(nested) - common_keys([o[name] for o in objects])
                assert not missing, f"{kind}.{name} lacks recorded fields {missing}"


@pytest.mark.parametrize(
    ("folder", "path", "nested"),
    [
        ("test_openai", CHAT, lambda b: b["choices"][0]),
        ("test_openai_responses", RESPONSES, lambda b: b["usage"] or {}),
        ("test_anthropic", MESSAGES, lambda b: b["usage"]),
    ],
)
async def test_json_bodies_carry_the_recorded_fields(
    server: FakeServer, client: httpx2.AsyncClient, folder: str, path: str, nested: Any
) -> None:
    real = [
        b
        for b in recorded(folder, path, stream=False)
        if isinstance(b, dict)
        and b.get("object", b.get("type")) in ("chat.completion", "response", "message")
    ]
    server.script(FakeServer.reply("Hi"))
    ours = (await post(client, server, path)).json()
    assert not common_keys(real) - set(ours)
    inner = [nested(b) for b in real if nested(b)]
    assert not common_keys(inner) - set(nested(ours))


GEMINI = "/v1beta/models/gemini-2.5-flash"


def gemini_recorded(*, stream: bool) -> list[dict[str, Any]]:
    """Recorded Gemini answers (each stream's chunks) that carry text or a function call."""
    method = ":streamGenerateContent" if stream else ":generateContent"
    found: list[dict[str, Any]] = []
    for item in interactions("test_google"):
        uri, response = item["request"]["uri"], item["response"]
        if not uri.partition("?")[0].endswith(method):
            continue
        text = (response.get("body") or {}).get("string")
        if stream and isinstance(text, str) and text.lstrip().startswith("data:"):
            found += [json.loads(d) for _, d in parse_sse(text.replace("\r\n", "\n"))]
        elif not stream and isinstance(response.get("parsed_body"), dict):
            found.append(response["parsed_body"])
    return [
        b
        for b in found
        if any(
            "text" in p or "functionCall" in p
            for c in b.get("candidates") or ()
            for p in (c.get("content") or {}).get("parts") or ()
        )
    ]


def gemini_fields(bodies: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The fields every body, candidate and usage block has."""
    candidates = [b["candidates"][0] for b in bodies]
    return {
        "body": common_keys(bodies),
        "candidate": common_keys(candidates),
        "content": common_keys([c["content"] for c in candidates]),
        "usage": common_keys([b["usageMetadata"] for b in bodies]),
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_gemini_answers_carry_the_recorded_fields(
    server: FakeServer, client: httpx2.AsyncClient, stream: bool
) -> None:
    server.script(FakeServer.reply("Hi there", tool_calls=[("weather", TOOL_ARGS)]))
    path = GEMINI + (":streamGenerateContent?alt=sse" if stream else ":generateContent")
    response = await client.post(server.url + path, json={"contents": []})
    assert response.status_code == 200
    if stream:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.text.endswith("\r\n\r\n")  # Gemini ends events with CRLF CRLF
        ours = [json.loads(d) for _, d in parse_sse(response.text.replace("\r\n", "\n"))]
        assert ours[-1]["candidates"][0]["finishReason"] == "STOP"
        assert all("finishReason" not in o["candidates"][0] for o in ours[:-1])
    else:
        ours = [response.json()]
    real = gemini_fields(gemini_recorded(stream=stream))
    mine = gemini_fields(ours)
    for level, keys in real.items():
        # A recorded stream's last chunk alone has the finish reason; the
        # candidate's fields are compared on what every chunk has.
        assert not keys - mine[level] - {"finishReason"}, f"{level} lacks {keys - mine[level]}"
    parts = [p for o in ours for p in o["candidates"][0]["content"]["parts"]]
    assert "".join(p.get("text", "") for p in parts) == "Hi there"
    [call] = [p["functionCall"] for p in parts if "functionCall" in p]
    assert (call["name"], call["args"]) == ("weather", TOOL_ARGS) and call["id"]
    assert ours[0]["modelVersion"] == "gemini-2.5-flash"


async def test_gemini_errors_have_googles_shape_and_retry_info(
    server: FakeServer, client: httpx2.AsyncClient
) -> None:
    server.script(FakeServer.rate_limit(retry_after=3), FakeServer.error(503))
    limited = await client.post(server.url + GEMINI + ":generateContent", json={})
    assert limited.status_code == 429 and "retry-after" not in limited.headers
    assert limited.json() == {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted (e.g. check quota).",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}],
        }
    }
    vertex = server.vertex_base_url + "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    overloaded = await client.post(vertex, json={})
    assert overloaded.status_code == 503
    assert overloaded.json()["error"]["status"] == "UNAVAILABLE"


# --- faults -----------------------------------------------------------------------------------


ANTHROPIC_TYPES = {
    401: "authentication_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
}


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("status", [401, 429, 500, 503])
async def test_error_statuses_use_each_providers_shape(
    server: FakeServer, client: httpx2.AsyncClient, path: str, status: int
) -> None:
    server.script(FakeServer.error(status, retry_after=3 if status == 429 else None))
    response = await post(client, server, path, stream=True)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert ("retry-after" in response.headers) == (status == 429)
    body = response.json()
    if path == MESSAGES:
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        assert body["error"]["type"] == ANTHROPIC_TYPES[status]
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    if status == 429:
        assert response.headers["retry-after"] == "3"


async def test_overloaded_and_custom_errors(server: FakeServer, client: httpx2.AsyncClient) -> None:
    server.script(
        FakeServer.overloaded(),
        FakeServer.error(418, body="not json at all", headers={"x-custom": "yes"}),
    )
    overloaded = await post(client, server, MESSAGES)
    assert overloaded.status_code == 529
    assert overloaded.json()["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    custom = await post(client, server, CHAT)
    assert custom.status_code == 418 and custom.text == "not json at all"
    assert custom.headers["x-custom"] == "yes"


@pytest.mark.parametrize("path", ALL_PATHS)
async def test_drop_mid_stream(server: FakeServer, client: httpx2.AsyncClient, path: str) -> None:
    server.script(FakeServer.drop(after_events=2))
    received = []
    with pytest.raises(httpx2.RemoteProtocolError):
        async with client.stream("POST", server.url + path, json={"stream": True}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    received.append(line)
    assert len(received) == 2
    assert (await post(client, server, path)).status_code == 200
    assert server.connections == 2  # the dropped connection is not reused


@pytest.mark.parametrize("after", [0, 1])
async def test_drop_non_streamed(
    server: FakeServer, client: httpx2.AsyncClient, after: int
) -> None:
    server.script(FakeServer.drop(after_events=after))
    with pytest.raises(httpx2.RemoteProtocolError):
        await post(client, server, CHAT)


@pytest.mark.parametrize("path", ALL_PATHS)
async def test_truncated_stream_ends_cleanly_without_final_event(
    server: FakeServer, client: httpx2.AsyncClient, path: str
) -> None:
    server.script(FakeServer.truncate(after_events=3))
    events = parse_sse((await post(client, server, path, stream=True)).text)
    assert len(events) == 3


async def test_malformed_json_body(server: FakeServer, client: httpx2.AsyncClient) -> None:
    server.script(FakeServer.malformed())
    response = await post(client, server, CHAT)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    with pytest.raises(ValueError):
        response.json()


@pytest.mark.parametrize("path", ALL_PATHS)
async def test_malformed_stream_event(
    server: FakeServer, client: httpx2.AsyncClient, path: str
) -> None:
    server.script(FakeServer.malformed(after_events=3))
    events = parse_sse((await post(client, server, path, stream=True)).text)
    for _, data in events[:-1]:
        json.loads(data)
    with pytest.raises(ValueError):
        json.loads(events[-1][1])
    assert events[-1][1] != "[DONE]" and events[-1][0] != "ping"


@pytest.mark.parametrize(
    ("path", "check"),
    [
        (CHAT, lambda name, d: name is None and d["error"]["type"] == "overloaded_error"),
        (RESPONSES, lambda name, d: name == "error" and d["code"] == "overloaded_error"),
        (MESSAGES, lambda name, d: name == "error" and d["error"]["type"] == "overloaded_error"),
    ],
)
async def test_error_event_in_stream(
    server: FakeServer, client: httpx2.AsyncClient, path: str, check: Any
) -> None:
    server.script(FakeServer.stream_error(after_events=2), FakeServer.stream_error())
    events = await stream_events(client, server, path)
    assert len(events) == 3 and check(*events[-1])
    assert (await post(client, server, path)).status_code == 529


async def test_slow_stream_spreads_events_over_time(
    server: FakeServer, client: httpx2.AsyncClient
) -> None:
    server.script(FakeServer.reply(["a", "b", "c", "d"], chunk_delay=0.05))
    arrivals = []
    async with client.stream(
        "POST", server.base_url + "/chat/completions", json={"stream": True}
    ) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
    assert arrivals[-1] - arrivals[0] >= 0.2  # 7 events, 50 ms before each


async def test_delay_and_hang_time_out_then_the_server_stops(server: FakeServer) -> None:
    server.script(FakeServer.reply("late", delay=30), FakeServer.hang())
    async with httpx2.AsyncClient(timeout=0.2) as client:
        for _ in range(2):
            with pytest.raises(httpx2.ReadTimeout):
                await post(client, server, CHAT)
    server.script(FakeServer.hang())
    async with httpx2.AsyncClient(timeout=10) as client:
        waiting = asyncio.ensure_future(post(client, server, CHAT))
        async with asyncio.timeout(10):  # the server has no hook: look until the request is in
            while len(server.requests) < 3:
                await asyncio.sleep(0.01)
        await asyncio.wait_for(server.stop(), 5)  # a hung answer does not block stopping
        with pytest.raises(httpx2.TransportError):
            await waiting


# --- script, records, routing, lifecycle --------------------------------------------------------


async def test_script_is_consumed_in_order_then_the_default(
    server: FakeServer, client: httpx2.AsyncClient
) -> None:
    server.script(FakeServer.reply("one"), FakeServer.reply("two"))
    assert server.pending == 2
    texts = [
        (await post(client, server, CHAT)).json()["choices"][0]["message"]["content"]
        for _ in range(3)
    ]
    assert texts[:2] == ["one", "two"] and texts[2] == "Hello from the fake server."
    assert server.pending == 0
    assert server.connections == 1  # keep-alive: one connection for every request


async def test_strict_server_answers_500_when_the_script_is_empty(
    client: httpx2.AsyncClient,
) -> None:
    async with FakeServer(default=None) as server:
        response = await post(client, server, MESSAGES)
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "script_exhausted"


async def test_requests_are_recorded(server: FakeServer, client: httpx2.AsyncClient) -> None:
    await client.post(
        server.base_url + "/chat/completions?x=1",
        json={"model": "m", "n": 1},
        headers={"X-Trace": "t"},
    )
    (request,) = server.requests
    assert request.method == "POST" and request.path == "/v1/chat/completions?x=1"
    assert request.body == {"model": "m", "n": 1} and request.headers["x-trace"] == "t"
    assert json.loads(request.raw) == request.body


async def test_unknown_paths_and_bad_bodies_do_not_consume_the_script(
    server: FakeServer, client: httpx2.AsyncClient
) -> None:
    server.script(FakeServer.reply("kept"))
    assert (await client.post(server.url + "/v1/embeddings", json={})).status_code == 404
    assert (await client.get(server.base_url + "/chat/completions")).status_code == 404
    bad = await client.post(server.base_url + "/chat/completions", content=b"{nope")
    assert bad.status_code == 400 and server.requests[-1].body is None
    assert server.pending == 1


async def test_api_key_is_checked_per_provider(client: httpx2.AsyncClient) -> None:
    async with FakeServer(api_key="k") as server:
        server.script(FakeServer.reply("a"), FakeServer.reply("b"))
        assert (await post(client, server, CHAT)).status_code == 401
        wrong = await client.post(server.url + MESSAGES, json={}, headers={"x-api-key": "no"})
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        assert server.pending == 2
        ok = await client.post(server.url + CHAT, json={}, headers={"authorization": "Bearer k"})
        assert ok.status_code == 200
        ok = await client.post(server.url + MESSAGES, json={}, headers={"x-api-key": "k"})
        assert ok.status_code == 200 and server.pending == 0
        gemini = server.gemini_base_url + "/models/m:generateContent"
        server.script(FakeServer.reply("c"), FakeServer.reply("d"))
        assert (await client.post(gemini, json={})).status_code == 401
        ok = await client.post(gemini, json={}, headers={"x-goog-api-key": "k"})
        assert ok.status_code == 200
        ok = await client.post(gemini, json={}, headers={"authorization": "Bearer k"})
        assert ok.status_code == 200 and server.pending == 0


async def test_chunked_request_bodies_are_read(
    server: FakeServer, client: httpx2.AsyncClient
) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"model": '
        yield b'"chunky"}'

    response = await client.post(server.base_url + "/chat/completions", content=body())
    assert response.json()["model"] == "chunky"


def test_in_thread_mode_serves_and_stops_cleanly() -> None:
    with FakeServer.in_thread() as server:
        server.script(FakeServer.reply("from a thread"))
        url = server.base_url + "/chat/completions"
        body = httpx2.post(url, json={"model": "m"}).json()
        assert body["choices"][0]["message"]["content"] == "from a thread"
        assert server.requests[0].body == {"model": "m"}
        server.script(FakeServer.hang())
        with pytest.raises(httpx2.ReadTimeout):
            httpx2.post(url, json={}, timeout=0.2)
    assert not [t for t in threading.enumerate() if t.name == "FakeServer"]
    with pytest.raises(httpx2.ConnectError):
        httpx2.post(url, json={})


@pytest.fixture
def server_process() -> Iterator[str]:
    command = [sys.executable, "-m", "taskloom.testing.fake_server", "--text", "from a process"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            yield proc.stdout.readline().strip()
        finally:
            proc.kill()  # the pid this fixture started; leaving the block reaps it


@pytest.mark.slow
def test_server_runs_in_its_own_process(server_process: str) -> None:
    assert server_process.startswith("http://127.0.0.1:")
    body = httpx2.post(server_process + "/v1/messages", json={"model": "m"}).json()
    assert body["content"] == [{"type": "text", "text": "from a process"}]
