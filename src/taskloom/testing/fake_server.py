"""A fake OpenAI- and Anthropic-compatible HTTP server on loopback, for tests.

`FakeServer` speaks HTTP/1.1 on real sockets (keep-alive, chunked server-sent
events) and answers three wire APIs in the providers' own formats:

- `POST /v1/chat/completions` — OpenAI Chat Completions (JSON, or SSE chunks
  ending in `data: [DONE]`, with a usage chunk when
  `stream_options.include_usage` is set);
- `POST /v1/responses` — OpenAI Responses (JSON, or `response.*` events);
- `POST /v1/messages` — Anthropic Messages (JSON, or `message_start` ...
  `message_stop` events).

Each request to one of them takes the next item of a script: a reply
(`FakeServer.reply`) rendered in that endpoint's format, or a fault
(`error`, `rate_limit`, `overloaded`, `drop`, `malformed`, `stream_error`,
`hang`). When the script is empty the server answers its `default` item — a
short text reply unless configured otherwise; `default=None` makes it answer
500 instead, for tests that must notice an unscripted request. Every request
is recorded in `server.requests`.

    async with FakeServer() as server:
        server.script(FakeServer.rate_limit(retry_after=2), FakeServer.reply("hi"))
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")

`base_url` (`http://127.0.0.1:PORT/v1`) is what OpenAI clients take;
`anthropic_base_url` (`http://127.0.0.1:PORT`) is what Anthropic clients take,
since they add `/v1/messages` themselves. `FakeServer.in_thread()` runs the
same server on its own loop in a daemon thread, for tests that drive a
subprocess; `python -m taskloom.testing.fake_server` runs one in its own
process and prints its root URL.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal, Protocol, TypeAlias

from ..messages import Usage

__all__ = [
    "Drop",
    "ErrorReply",
    "FakeReply",
    "FakeServer",
    "FakeToolCall",
    "Hang",
    "Malformed",
    "RecordedRequest",
    "ScriptItem",
    "StreamError",
    "ToolCallSpec",
]

Json: TypeAlias = dict[str, Any]
StopReason: TypeAlias = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence"]


# --- scripted items -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FakeToolCall:
    """One tool call of a `FakeReply`; `arguments` is sent verbatim (it may be invalid JSON)."""

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class FakeReply:
    """A successful answer: text deltas, then tool calls, usage and a stop reason.

    `text` is None when the answer has no text part. `delay` waits before the
    status line (a slow first byte); `chunk_delay` waits before each streamed
    event. `usage=None` reports 10 input tokens and one output token per delta.
    Usage fields go on the wire as they are, each under the provider's own name
    (`Usage` keeps figures as providers report them), so a reply's usage comes
    back unchanged from any adapter.
    """

    text: tuple[str, ...] | None = None
    tool_calls: tuple[FakeToolCall, ...] = ()
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0

    @property
    def full_text(self) -> str:
        """The whole text, as a client should reassemble it from the deltas."""
        return "".join(self.text or ())

    def resolved_usage(self) -> Usage:
        """The usage the server reports for this reply."""
        if self.usage is not None:
            return self.usage
        pieces = len(self.text or ()) + sum(len(_pieces(c.arguments)) for c in self.tool_calls)
        return Usage(input_tokens=10, output_tokens=max(1, pieces))

    def resolved_stop(self) -> StopReason:
        """The stop reason the server reports (tool_use when there are tool calls)."""
        return self.stop_reason or ("tool_use" if self.tool_calls else "end_turn")


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An HTTP error status. `body` None means the endpoint's own error shape.

    A dict body is sent as JSON, str/bytes verbatim; `headers` are added as given.
    """

    status: int
    error_type: str | None = None
    message: str | None = None
    body: Mapping[str, Any] | str | bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Drop:
    """Close the connection after `after_events` streamed events of `reply` (at most
    all but its final event, so the stream is always incomplete).

    A non-streamed request gets nothing at all when `after_events` is 0, else
    the status line, headers and half of the JSON body. With `ends_cleanly` a
    stream instead ends as a well-formed HTTP response that stops short of its
    final event, as when a proxy cuts an idle stream.
    """

    after_events: int = 0
    reply: FakeReply | None = None
    ends_cleanly: bool = False


@dataclass(frozen=True, slots=True)
class Malformed:
    """Answer 200 with broken JSON, then end the response cleanly.

    Non-streamed: half of the JSON body. Streamed: `after_events` good events,
    then one event whose data is cut in half (the stream ends there).
    """

    after_events: int = 0
    reply: FakeReply | None = None


@dataclass(frozen=True, slots=True)
class StreamError:
    """An error event inside a 200 stream after `after_events` events, as providers send
    when they fail mid-answer (Anthropic `event: error`, Responses `event: error`, Chat
    Completions `data: {"error": ...}`). A non-streamed request gets HTTP `status`.
    """

    after_events: int = 0
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    status: int = 529
    reply: FakeReply | None = None


@dataclass(frozen=True, slots=True)
class Hang:
    """Read the request and never answer; the connection stays open until the client
    closes it or the server stops."""


ScriptItem: TypeAlias = FakeReply | ErrorReply | Drop | Malformed | StreamError | Hang
ToolCallSpec: TypeAlias = (
    tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str]
)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request the server received: `headers` lower-cased, `body` the parsed JSON
    (None when the body is not JSON), `raw` the body bytes."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes


_WORDS = re.compile(r"\s*\S+|\s+")


def _split_text(text: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    if isinstance(text, str):
        return tuple(_WORDS.findall(text))
    return tuple(text)


def _pieces(s: str, size: int = 8) -> list[str]:
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


# --- wire formats ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    """One request being answered: what the wire renderers need to know about it."""

    body: Json
    number: int
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def model(self) -> str:
        return str(self.body.get("model") or "fake-model")

    @property
    def is_stream(self) -> bool:
        return self.body.get("stream") is True

    def tool_id(self, prefix: str, index: int, call: FakeToolCall) -> str:
        return call.id or f"{prefix}fake{self.number}x{index}"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _sse(data: Json, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + _dumps(data) + b"\n\n"


class _Wire(Protocol):
    """How one provider API renders replies and errors."""

    provider: str

    def body(self, r: FakeReply, c: _Call) -> Json: ...

    def events(self, r: FakeReply, c: _Call) -> list[bytes]: ...

    def error_body(self, status: int, error_type: str | None, message: str | None) -> Json: ...

    def stream_error(self, c: _Call, error_type: str, message: str, seq: int) -> bytes: ...


class _ChatWire:
    """OpenAI Chat Completions."""

    provider = "openai"

    _finish = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}

    @staticmethod
    def usage(u: Usage) -> Json:
        return {
            "prompt_tokens": u.input_tokens,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": u.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _base(self, c: _Call, obj: str) -> Json:
        return {
            "id": f"chatcmpl-fake{c.number}",
            "object": obj,
            "created": c.created,
            "model": c.model,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

    def body(self, r: FakeReply, c: _Call) -> Json:
        message: Json = {"role": "assistant", "content": None if r.text is None else r.full_text}
        message |= {"refusal": None, "annotations": []}
        if r.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.tool_id("call_", i, t),
                    "type": "function",
                    "function": {"name": t.name, "arguments": t.arguments},
                }
                for i, t in enumerate(r.tool_calls)
            ]
        finish = self._finish.get(r.resolved_stop(), "stop")
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        return self._base(c, "chat.completion") | {
            "choices": [choice],
            "usage": self.usage(r.resolved_usage()),
        }

    def events(self, r: FakeReply, c: _Call) -> list[bytes]:
        options = c.body.get("stream_options")
        with_usage = isinstance(options, dict) and options.get("include_usage") is True
        base = self._base(c, "chat.completion.chunk")
        extra: Json = {"usage": None} if with_usage else {}

        def chunk(delta: Json, finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return _sse(base | {"choices": [choice]} | extra)

        opening: Json = {"role": "assistant", "content": "", "refusal": None}
        frames = []
        if r.text is not None or not r.tool_calls:
            frames.append(chunk(opening))
            frames += [chunk({"content": d}) for d in r.text or ()]
        for i, t in enumerate(r.tool_calls):
            head = {
                "index": i,
                "id": c.tool_id("call_", i, t),
                "type": "function",
                "function": {"name": t.name, "arguments": ""},
            }
            first: Json = {"tool_calls": [head]}
            frames.append(chunk(opening | {"content": None} | first if not frames else first))
            frames += [
                chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                for p in _pieces(t.arguments)
            ]
        frames.append(chunk({}, self._finish.get(r.resolved_stop(), "stop")))
        if with_usage:
            frames.append(_sse(base | {"choices": [], "usage": self.usage(r.resolved_usage())}))
        frames.append(b"data: [DONE]\n\n")
        return frames

    def error_body(self, status: int, error_type: str | None, message: str | None) -> Json:
        kind, code, text = _OPENAI_ERRORS.get(status, _OPENAI_ERRORS[500])
        error = {"message": message or text, "type": error_type or kind, "param": None}
        return {"error": error | {"code": code}}

    def stream_error(self, c: _Call, error_type: str, message: str, seq: int) -> bytes:
        return _sse(
            {"error": {"message": message, "type": error_type, "param": None, "code": None}}
        )


_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden."),
    404: ("invalid_request_error", "unknown_url", "Unknown request URL."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


class _ResponsesWire(_ChatWire):
    """OpenAI Responses API (errors in OpenAI's shape, as Chat Completions)."""

    @staticmethod
    def usage(u: Usage) -> Json:
        return {
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.input_tokens + u.output_tokens,
        }

    def _response(self, c: _Call, r: FakeReply | None, output: list[Json]) -> Json:
        b = c.body
        incomplete = r is not None and r.resolved_stop() == "max_tokens"
        status = "in_progress" if r is None else "incomplete" if incomplete else "completed"
        return {
            "id": f"resp_fake{c.number}",
            "object": "response",
            "created_at": c.created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": b.get("instructions"),
            "max_output_tokens": b.get("max_output_tokens"),
            "model": c.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": b.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "store": b.get("store", True),
            "temperature": b.get("temperature", 1.0),
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": b.get("tool_choice", "auto"),
            "tools": b.get("tools", []),
            "top_p": b.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": None if r is None else self.usage(r.resolved_usage()),
            "user": None,
            "metadata": {},
        }

    def _items(self, r: FakeReply, c: _Call) -> list[Json]:
        items: list[Json] = []
        if r.text is not None or not r.tool_calls:
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": r.full_text}
            items.append(
                {
                    "id": f"msg_fake{c.number}",
                    "type": "message",
                    "status": "completed",
                    "content": [part],
                    "role": "assistant",
                }
            )
        for i, t in enumerate(r.tool_calls):
            items.append(
                {
                    "id": f"fc_fake{c.number}x{i}",
                    "type": "function_call",
                    "status": "completed",
                    "arguments": t.arguments,
                    "call_id": c.tool_id("call_", i, t),
                    "name": t.name,
                }
            )
        return items

    def body(self, r: FakeReply, c: _Call) -> Json:
        return self._response(c, r, self._items(r, c))

    def events(self, r: FakeReply, c: _Call) -> list[bytes]:
        frames: list[bytes] = []

        def emit(kind: str, **fields: Any) -> None:
            frames.append(_sse({"type": kind, "sequence_number": len(frames)} | fields, kind))

        emit("response.created", response=self._response(c, None, []))
        emit("response.in_progress", response=self._response(c, None, []))
        items = self._items(r, c)
        for index, item in enumerate(items):
            at: Json = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                part, opening = item["content"][0], {"status": "in_progress", "content": []}
                emit("response.output_item.added", output_index=index, item=item | opening)
                emit("response.content_part.added", **at, content_index=0, part=part | {"text": ""})
                for d in r.text or ():
                    emit("response.output_text.delta", **at, content_index=0, delta=d, logprobs=[])
                text = r.full_text
                emit("response.output_text.done", **at, content_index=0, text=text, logprobs=[])
                emit("response.content_part.done", **at, content_index=0, part=part)
            else:
                opening = {"status": "in_progress", "arguments": ""}
                emit("response.output_item.added", output_index=index, item=item | opening)
                for p in _pieces(item["arguments"]):
                    emit("response.function_call_arguments.delta", **at, delta=p)
                emit("response.function_call_arguments.done", **at, arguments=item["arguments"])
            emit("response.output_item.done", output_index=index, item=item)
        final = self._response(c, r, items)
        done = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        emit(done, response=final)
        return frames

    def stream_error(self, c: _Call, error_type: str, message: str, seq: int) -> bytes:
        data = {"type": "error", "code": error_type, "message": message, "param": None}
        return _sse(data | {"sequence_number": seq}, "error")


class _AnthropicWire:
    """Anthropic Messages API."""

    provider = "anthropic"

    @staticmethod
    def usage(u: Usage, output_tokens: int | None = None) -> Json:
        return {
            "input_tokens": u.input_tokens,
            "cache_creation_input_tokens": u.cache_write_tokens,
            "cache_read_input_tokens": u.cache_read_tokens,
            "output_tokens": u.output_tokens if output_tokens is None else output_tokens,
        }

    def _blocks(self, r: FakeReply, c: _Call) -> list[tuple[Json, list[Json]]]:
        """Each content block with the deltas that stream it."""
        blocks: list[tuple[Json, list[Json]]] = []
        if r.text is not None or not r.tool_calls:
            deltas = [{"type": "text_delta", "text": d} for d in r.text or ()]
            blocks.append(({"type": "text", "text": r.full_text}, deltas))
        for i, t in enumerate(r.tool_calls):
            try:
                arguments: Any = json.loads(t.arguments)
            except ValueError:
                arguments = t.arguments
            block = {"type": "tool_use", "id": c.tool_id("toolu_", i, t), "name": t.name}
            # Anthropic opens every tool_use block with an empty partial_json.
            pieces = ["", *_pieces(t.arguments)]
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
            blocks.append((block | {"input": arguments}, deltas))
        return blocks

    def _message(self, c: _Call, content: list[Json], stop: str | None, usage: Json) -> Json:
        written = usage["cache_creation_input_tokens"]
        cache = {"ephemeral_5m_input_tokens": written, "ephemeral_1h_input_tokens": 0}
        return {
            "id": f"msg_fake{c.number}",
            "type": "message",
            "role": "assistant",
            "model": c.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage | {"cache_creation": cache, "service_tier": "standard"},
        }

    def body(self, r: FakeReply, c: _Call) -> Json:
        usage = self.usage(r.resolved_usage())
        content = [block for block, _ in self._blocks(r, c)]
        return self._message(c, content, r.resolved_stop(), usage)

    def events(self, r: FakeReply, c: _Call) -> list[bytes]:
        frames: list[bytes] = []

        def emit(kind: str, **fields: Any) -> None:
            frames.append(_sse({"type": kind} | fields, kind))

        usage = r.resolved_usage()
        emit("message_start", message=self._message(c, [], None, self.usage(usage, 1)))
        for index, (block, deltas) in enumerate(self._blocks(r, c)):
            empty: Json = {"text": ""} if block["type"] == "text" else {"input": {}}
            emit("content_block_start", index=index, content_block=block | empty)
            if index == 0:
                frames.append(_PING)
            for delta in deltas:
                emit("content_block_delta", index=index, delta=delta)
            emit("content_block_stop", index=index)
        stop = {"stop_reason": r.resolved_stop(), "stop_sequence": None}
        emit("message_delta", delta=stop, usage=self.usage(usage))
        emit("message_stop")
        return frames

    def error_body(self, status: int, error_type: str | None, message: str | None) -> Json:
        kind, text = _ANTHROPIC_ERRORS.get(status, _ANTHROPIC_ERRORS[500])
        error = {"type": error_type or kind, "message": message or text}
        return {"type": "error", "error": error, "request_id": "req_fake"}

    def stream_error(self, c: _Call, error_type: str, message: str, seq: int) -> bytes:
        error = {"type": error_type, "message": message}
        return _sse({"type": "error", "error": error, "request_id": f"req_fake{c.number}"}, "error")


_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use this resource."),
    404: ("not_found_error", "Not found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}

_PING = _sse({"type": "ping"}, "ping")

_ROUTES: dict[str, _Wire] = {
    "/v1/chat/completions": _ChatWire(),
    "/v1/responses": _ResponsesWire(),
    "/v1/messages": _AnthropicWire(),
}

DEFAULT_REPLY = FakeReply(text=_split_text("Hello from the fake server."))
"""What an unscripted request gets unless the server was built with another `default`."""


def _truncate(frame: bytes) -> bytes:
    """The same event with its JSON data cut in half: a line no JSON parser accepts."""
    head, _, data = frame.rstrip(b"\n").rpartition(b"data: ")
    return head + b"data: " + data[: max(1, len(data) // 2)] + b"\n\n"


# --- HTTP -----------------------------------------------------------------------------------


class _BadRequest(Exception):
    pass


async def _read_request(
    reader: asyncio.StreamReader,
) -> tuple[str, str, dict[str, str], bytes] | None:
    """Method, target, headers and body of the next request; None at a clean end of input."""
    line = b"\r\n"
    while line in (b"\r\n", b"\n"):
        line = await reader.readline()
    if not line:
        return None
    try:
        method, target, _version = line.decode("latin-1").split()
    except ValueError:
        raise _BadRequest(line) from None
    headers: dict[str, str] = {}
    while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while size := int((await reader.readline()).split(b";")[0].strip() or b"0", 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return method, target, headers, bytes(body)
    length = int(headers.get("content-length") or 0)
    return method, target, headers, await reader.readexactly(length)


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    reason = "Overloaded" if status == 529 else HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class FakeServer:
    """An OpenAI/Anthropic-compatible HTTP server on 127.0.0.1 that plays a script.

    `port=0` picks a free port. `default` answers requests the script does not
    cover (None: HTTP 500, `script_exhausted`). With `api_key`, requests
    without that key (`Authorization: Bearer` for OpenAI paths, `x-api-key`
    for Anthropic) get 401 without consuming the script. Requests to unknown
    paths get 404 and requests whose body is not a JSON object 400, neither
    consuming the script. `connections` counts accepted TCP connections.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        default: ScriptItem | None = DEFAULT_REPLY,
        api_key: str | None = None,
    ) -> None:
        self.requests: list[RecordedRequest] = []
        self.connections = 0
        self.default = default
        self._port = port
        self._api_key = api_key
        # A lock, not only the loop, guards the script: in thread mode tests
        # script from their own thread while the server's loop consumes it.
        self._lock = threading.Lock()
        self._script: deque[ScriptItem] = deque()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._answered = 0

    # -- script ---------------------------------------------------------------------------

    @staticmethod
    def reply(
        text: str | Sequence[str] | None = None,
        *,
        tool_calls: Sequence[ToolCallSpec] = (),
        usage: Usage | None = None,
        stop_reason: StopReason | None = None,
        delay: float = 0.0,
        chunk_delay: float = 0.0,
    ) -> FakeReply:
        """A successful answer. A `text` string streams word by word (`"a b"` -> `"a"`,
        `" b"`); a sequence of strings streams as exactly those deltas. `tool_calls`
        are `(name, arguments)` or `(name, arguments, id)`; a str `arguments` is
        sent verbatim, a mapping as JSON. See `FakeReply` for the rest.
        """
        calls = tuple(
            FakeToolCall(
                spec[0],
                spec[1] if isinstance(spec[1], str) else _dumps(dict(spec[1])).decode(),
                spec[2] if len(spec) > 2 else None,
            )
            for spec in tool_calls
        )
        return FakeReply(_split_text(text), calls, usage, stop_reason, delay, chunk_delay)

    @staticmethod
    def error(
        status: int,
        *,
        error_type: str | None = None,
        message: str | None = None,
        body: Mapping[str, Any] | str | bytes | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> ErrorReply:
        """An HTTP error in the endpoint's error shape (or `body` verbatim)."""
        extra = dict(headers or {})
        if retry_after is not None:
            extra["retry-after"] = f"{retry_after:g}"
        return ErrorReply(status, error_type, message, body, extra)

    @staticmethod
    def rate_limit(retry_after: float | None = 1.0) -> ErrorReply:
        """429 with a `Retry-After` header (seconds)."""
        return FakeServer.error(429, retry_after=retry_after)

    @staticmethod
    def overloaded() -> ErrorReply:
        """529 `overloaded_error`, as Anthropic answers when it is overloaded."""
        return ErrorReply(
            529,
            body={
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
                "request_id": "req_fake",
            },
        )

    @staticmethod
    def drop(after_events: int = 0, reply: FakeReply | None = None) -> Drop:
        """Close the connection after `after_events` events (see `Drop`)."""
        return Drop(after_events, reply)

    @staticmethod
    def truncate(after_events: int, reply: FakeReply | None = None) -> Drop:
        """End a stream cleanly after `after_events` events, before its final one."""
        return Drop(after_events, reply, ends_cleanly=True)

    @staticmethod
    def malformed(after_events: int = 0, reply: FakeReply | None = None) -> Malformed:
        """A 200 answer whose JSON is broken (see `Malformed`)."""
        return Malformed(after_events, reply)

    @staticmethod
    def stream_error(
        after_events: int = 0,
        *,
        error_type: str = "overloaded_error",
        message: str = "Overloaded",
        status: int = 529,
        reply: FakeReply | None = None,
    ) -> StreamError:
        """An error event inside a 200 stream (see `StreamError`)."""
        return StreamError(after_events, error_type, message, status, reply)

    @staticmethod
    def hang() -> Hang:
        """Never answer (see `Hang`)."""
        return Hang()

    def script(self, *items: ScriptItem) -> None:
        """Append answers to the script; each request takes the next one."""
        with self._lock:
            self._script.extend(items)

    @property
    def pending(self) -> int:
        """How many scripted items no request has taken yet."""
        with self._lock:
            return len(self._script)

    def _next_item(self) -> ScriptItem | None:
        with self._lock:
            return self._script.popleft() if self._script else self.default

    # -- addresses and lifecycle ------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on (raises before it started)."""
        if self._server is None:
            raise RuntimeError("FakeServer is not running")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, the server's root."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, `http://127.0.0.1:PORT/v1`."""
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The Anthropic base URL, `http://127.0.0.1:PORT` (clients add `/v1/messages`)."""
        return self.url

    async def start(self) -> None:
        """Listen on loopback in the running loop."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self._port)

    async def stop(self) -> None:
        """Stop listening and close every open connection (hung answers included)."""
        if self._server is None:
            return
        self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def __aenter__(self) -> FakeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @classmethod
    @contextmanager
    def in_thread(cls, **options: Any) -> Iterator[FakeServer]:
        """Run a server on its own event loop in a daemon thread; stopped on exit.

        `options` go to the constructor. `script` and `requests` may be used
        from the calling thread.
        """
        server = cls(**options)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="FakeServer", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=30)
            yield server
        finally:
            with suppress(Exception):
                asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            if not thread.is_alive():
                loop.close()

    # -- serving ----------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            while (request := await _read_request(reader)) is not None:
                if not await self._answer(*request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, _BadRequest, ValueError):
            pass
        except asyncio.CancelledError:
            # `stop` cancels open connections, here or in the wait below; ending
            # the task normally keeps asyncio from logging the cancellation as an
            # error of the connection callback.
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _answer(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        raw: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; False when the connection must close."""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = target.partition("?")[0]
        self.requests.append(RecordedRequest(method, target, headers, body, raw))
        keep_alive = headers.get("connection", "").lower() != "close"
        wire = _ROUTES.get(path)
        if wire is None or method != "POST":
            await self._send_error(writer, _ROUTES["/v1/chat/completions"], ErrorReply(404), None)
            return keep_alive
        if not isinstance(body, dict):
            await self._send_error(
                writer, wire, ErrorReply(400, message="Body is not a JSON object."), None
            )
            return keep_alive
        if self._api_key is not None and not self._is_authorized(wire, headers):
            await self._send_error(writer, wire, ErrorReply(401), None)
            return keep_alive
        self._answered += 1
        item = self._next_item()
        if item is None:
            message = "FakeServer script exhausted: no scripted answer left for this request"
            item = ErrorReply(500, error_type="script_exhausted", message=message)
        return (
            await self._play(item, wire, _Call(body, self._answered), reader, writer) and keep_alive
        )

    async def _play(
        self,
        item: ScriptItem,
        wire: _Wire,
        call: _Call,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer with one script item; False when it leaves the connection unusable."""
        if isinstance(item, ErrorReply):
            await self._send_error(writer, wire, item, call)
            return True
        if isinstance(item, Hang):
            await reader.read()
            return False
        if isinstance(item, StreamError) and not call.is_stream:
            error = ErrorReply(item.status, error_type=item.error_type, message=item.message)
            await self._send_error(writer, wire, error, call)
            return True
        reply = item if isinstance(item, FakeReply) else item.reply or DEFAULT_REPLY
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if not call.is_stream:
            payload = _dumps(wire.body(reply, call))
            if isinstance(item, Drop | Malformed):
                if isinstance(item, Drop) and item.after_events == 0:
                    return False
                cut = payload[: len(payload) // 2]
                sent = cut if isinstance(item, Malformed) else payload
                await self._send(writer, 200, self._json_headers(wire, call, sent), cut)
                return isinstance(item, Malformed)
            await self._send(writer, 200, self._json_headers(wire, call, payload), payload)
            return True
        frames = wire.events(reply, call)
        if isinstance(item, Drop | Malformed | StreamError):
            n = max(0, min(item.after_events, len(frames) - 1))
            kept = frames[:n]
            if isinstance(item, Malformed):
                # A ping carries nothing a client must parse; break the next real event.
                while n < len(frames) - 1 and frames[n] == _PING:
                    kept.append(frames[n])
                    n += 1
                kept.append(_truncate(frames[n]))
            elif isinstance(item, StreamError):
                kept.append(wire.stream_error(call, item.error_type, item.message, n))
            frames = kept
        is_complete = not isinstance(item, Drop) or item.ends_cleanly
        await self._stream(writer, wire, call, frames, reply.chunk_delay, is_complete)
        return is_complete

    def _is_authorized(self, wire: _Wire, headers: Mapping[str, str]) -> bool:
        if wire.provider == "anthropic":
            return headers.get("x-api-key") == self._api_key
        return headers.get("authorization") == f"Bearer {self._api_key}"

    @staticmethod
    def _common_headers(wire: _Wire, call: _Call | None) -> dict[str, str]:
        request_id = f"req_fake{call.number if call else 0}"
        key = "request-id" if wire.provider == "anthropic" else "x-request-id"
        return {key: request_id}

    def _json_headers(self, wire: _Wire, call: _Call | None, payload: bytes) -> dict[str, str]:
        return {
            "content-type": "application/json",
            "content-length": str(len(payload)),
            **self._common_headers(wire, call),
        }

    async def _send(
        self, writer: asyncio.StreamWriter, status: int, headers: Mapping[str, str], body: bytes
    ) -> None:
        writer.write(_head(status, headers) + body)
        await writer.drain()

    async def _send_error(
        self, writer: asyncio.StreamWriter, wire: _Wire, error: ErrorReply, call: _Call | None
    ) -> None:
        if error.body is None:
            payload = _dumps(wire.error_body(error.status, error.error_type, error.message))
        elif isinstance(error.body, Mapping):
            payload = _dumps(dict(error.body))
        else:
            payload = error.body.encode() if isinstance(error.body, str) else error.body
        headers = self._json_headers(wire, call, payload) | dict(error.headers)
        await self._send(writer, error.status, headers, payload)

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        wire: _Wire,
        call: _Call,
        frames: list[bytes],
        chunk_delay: float,
        is_complete: bool,
    ) -> None:
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "transfer-encoding": "chunked",
            "cache-control": "no-cache",
            **self._common_headers(wire, call),
        }
        writer.write(_head(200, headers))
        # One HTTP chunk per event, drained each time, so a client sees events
        # arrive one by one (and a drop lands between two events).
        for frame in frames:
            if chunk_delay:
                await asyncio.sleep(chunk_delay)
            writer.write(_chunk(frame))
            await writer.drain()
        if is_complete:
            writer.write(b"0\r\n\r\n")
            await writer.drain()


async def _serve_forever(port: int, text: str | None) -> None:
    default = DEFAULT_REPLY if text is None else FakeServer.reply(text)
    async with FakeServer(port=port, default=default) as server:
        print(server.url, flush=True)
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m taskloom.testing.fake_server [--port N] [--text T]`: serve the default
    reply to every request until killed; the first line printed is the root URL."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--text", default=None, help="the text every request gets")
    args = parser.parse_args(argv)
    with suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args.port, args.text))


if __name__ == "__main__":
    main()
