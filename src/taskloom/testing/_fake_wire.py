"""The scripted answers of `FakeServer` and the OpenAI and Anthropic wire formats
it speaks (Gemini's are in `_fake_gemini`; sockets and HTTP in `fake_server`)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from ..messages import Usage

Json: TypeAlias = dict[str, Any]
StopReason: TypeAlias = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence"]


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
    status line; `chunk_delay` before each streamed event. `usage=None`
    reports 10 input tokens and one output token per delta; a given usage
    goes on the wire under each provider's names and comes back unchanged.
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
    """An HTTP error status; `body` None means the endpoint's own error shape, a
    dict is sent as JSON, str/bytes verbatim; `headers` are added as given."""

    status: int
    error_type: str | None = None
    message: str | None = None
    body: Mapping[str, Any] | str | bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Drop:
    """Close the connection after `after_events` streamed events of `reply` (all
    but its final one at most). A non-streamed request gets nothing when
    `after_events` is 0, else half of the JSON body. With `ends_cleanly` a
    stream ends as a well-formed response short of its final event (as when a
    proxy cuts an idle stream).
    """

    after_events: int = 0
    reply: FakeReply | None = None
    ends_cleanly: bool = False


@dataclass(frozen=True, slots=True)
class Malformed:
    """Answer 200 with broken JSON, then end cleanly: half of the JSON body, or
    `after_events` good events and one whose data is cut in half."""

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


@dataclass(frozen=True, slots=True)
class Prelude:
    """`events` streamed verbatim (each as one `data:` event) before `reply`'s
    own, as servers send events that are not part of the answer (Azure
    OpenAI's content-filter results first of all). A non-streamed request gets
    `reply` alone."""

    events: tuple[Mapping[str, Any], ...]
    reply: FakeReply | None = None


ScriptItem: TypeAlias = FakeReply | ErrorReply | Drop | Malformed | StreamError | Hang | Prelude
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


@dataclass(slots=True)
class _Call:
    """One request being answered: what the wire renderers need to know about it."""

    body: Json
    number: int
    model: str
    is_stream: bool
    created: int = field(default_factory=lambda: int(time.time()))

    def tool_id(self, prefix: str, index: int, call: FakeToolCall) -> str:
        return call.id or f"{prefix}fake{self.number}x{index}"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _sse(data: Json, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + _dumps(data) + b"\n\n"


class _Wire(Protocol):
    """How one provider API renders replies and errors; with `retry_in_body`
    (Gemini) a retry hint travels in the error body, not a header."""

    provider: str
    retry_in_body: bool

    def body(self, r: FakeReply, c: _Call) -> Json: ...

    def events(self, r: FakeReply, c: _Call) -> list[bytes]: ...

    def error_body(self, e: ErrorReply, retry_after: str | None) -> Json: ...

    def stream_error(self, c: _Call, e: StreamError, seq: int) -> bytes: ...


class _ChatWire:
    """OpenAI Chat Completions."""

    provider = "openai"
    retry_in_body = False

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

    def error_body(self, e: ErrorReply, retry_after: str | None) -> Json:
        kind, code, text = _OPENAI_ERRORS.get(e.status, _OPENAI_ERRORS[500])
        error = {"message": e.message or text, "type": e.error_type or kind, "param": None}
        return {"error": error | {"code": code}}

    def stream_error(self, c: _Call, e: StreamError, seq: int) -> bytes:
        return _sse(
            {"error": {"message": e.message, "type": e.error_type, "param": None, "code": None}}
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

    def stream_error(self, c: _Call, e: StreamError, seq: int) -> bytes:
        data = {"type": "error", "code": e.error_type, "message": e.message, "param": None}
        return _sse(data | {"sequence_number": seq}, "error")


class _AnthropicWire:
    """Anthropic Messages API."""

    provider = "anthropic"
    retry_in_body = False

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

    def error_body(self, e: ErrorReply, retry_after: str | None) -> Json:
        kind, text = _ANTHROPIC_ERRORS.get(e.status, _ANTHROPIC_ERRORS[500])
        error = {"type": e.error_type or kind, "message": e.message or text}
        return {"type": "error", "error": error, "request_id": "req_fake"}

    def stream_error(self, c: _Call, e: StreamError, seq: int) -> bytes:
        error = {"type": e.error_type, "message": e.message}
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
