"""Reading a Messages API answer: stream events (`StreamAssembler`) or a whole
body (`decode`) in, a response out."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    AuthenticationError,
    InvalidRequest,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
    TransportError,
)
from ..events import TextDelta, ThinkingDelta
from ..messages import Block, CompactionBlock, Message, TextBlock, ThinkingBlock, ToolCall, Usage
from ._base import ModelResponse, StreamEvent, ToolCallDelta
from ._http import SSE, loads_event
from ._wire import answer_from_output_tool

PROVIDER = "anthropic"

_STREAM_ERRORS: dict[str, tuple[type[ProviderError], bool]] = {
    "overloaded_error": (ProviderOverloaded, True),
    "rate_limit_error": (RateLimitError, True),
    "api_error": (ProviderError, True),
    "authentication_error": (AuthenticationError, False),
    "permission_error": (AuthenticationError, False),
    "invalid_request_error": (InvalidRequest, False),
    "not_found_error": (InvalidRequest, False),
    "request_too_large": (InvalidRequest, False),
}


def _tool_call(call_id: str, name: str, raw: str) -> ToolCall:
    """A call from its streamed JSON text: empty means `{}`, non-objects keep the raw text."""
    if not raw.strip():
        return ToolCall(call_id, name, {})
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):  # nesting too deep to read is invalid too
        parsed = None
    if isinstance(parsed, dict):
        return ToolCall(call_id, name, parsed)
    return ToolCall(call_id, name, {}, raw_arguments=raw)


def parse_block(d: Mapping[str, Any]) -> Block | None:
    """A taskloom block for one whole content block (None for server-side tool blocks)."""
    kind = d.get("type")
    if kind == "text":
        return TextBlock(d.get("text") or "")
    if kind == "thinking":
        return ThinkingBlock(
            text=d.get("thinking") or "", signature=d.get("signature") or None, provider=PROVIDER
        )
    if kind == "redacted_thinking":
        return ThinkingBlock(redacted=True, data=d.get("data"), provider=PROVIDER)
    if kind == "tool_use":
        value = d.get("input")
        if isinstance(value, dict):
            return ToolCall(str(d["id"]), str(d["name"]), value)
        return ToolCall(str(d["id"]), str(d["name"]), {}, raw_arguments=json.dumps(value))
    if kind == "compaction":
        return CompactionBlock(PROVIDER, dict(d))
    return None


def stream_error(payload: Mapping[str, Any]) -> ProviderError:
    """The typed error for an `error` event or error body, retryable as its type says."""
    err = payload.get("error")
    err = err if isinstance(err, dict) else {}
    error_type = str(err.get("type") or "error")
    message = str(err.get("message") or error_type)
    cls, retryable = _STREAM_ERRORS.get(error_type, (ProviderError, True))
    return cls(message, error_type=error_type, provider=PROVIDER, retryable=retryable, body=payload)


@dataclass(eq=False)
class StreamAssembler:
    """Folds Messages API stream events into deltas and, at the end, the response;
    `output_tool` names the tool standing in for structured output, if any."""

    model: str
    output_tool: str | None
    # Content blocks as a non-streamed response would carry them, by index.
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Per tool_use block index: its position among the calls, its JSON pieces.
    tools: dict[int, tuple[int, list[str]]] = field(default_factory=dict)
    message: dict[str, Any] = field(default_factory=lambda: {"usage": {}})
    done: bool = False

    def feed(self, sse: SSE) -> Iterable[StreamEvent]:
        """Take one server-sent event; return the deltas it carries (none after `message_stop`)."""
        if self.done:
            return ()
        return self._event(loads_event(sse, PROVIDER))

    def finish(self) -> ModelResponse:
        """The whole response; a stream cut before `message_stop` raises `TransportError`."""
        if not self.done:
            raise TransportError("stream ended before message_stop", provider=PROVIDER)
        return _response(self.model, self.content(), self.message, self.output_tool)

    def _event(self, payload: Mapping[str, Any]) -> Iterator[StreamEvent]:
        kind = payload.get("type")
        if kind == "message_start":
            start = payload.get("message") or {}
            self.message.update(id=start.get("id"), model=start.get("model"))
            self.message["usage"].update(start.get("usage") or {})
        elif kind == "content_block_start":
            yield from self._start(int(payload["index"]), payload.get("content_block") or {})
        elif kind == "content_block_delta":
            yield from self._delta(int(payload["index"]), payload.get("delta") or {})
        elif kind == "message_delta":
            stop_reason = (payload.get("delta") or {}).get("stop_reason")
            self.message["stop_reason"] = stop_reason or self.message.get("stop_reason")
            # Usage here is cumulative: it replaces what message_start said,
            # field by field, rather than adding to it.
            usage = payload.get("usage") or {}
            self.message["usage"].update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise stream_error(payload)

    def _start(self, index: int, start: Mapping[str, Any]) -> Iterator[StreamEvent]:
        block = self.blocks[index] = dict(start)
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            yield TextDelta(text=block["text"])
        elif kind == "thinking" and block.get("thinking"):
            yield ThinkingDelta(text=block["thinking"])
        elif kind == "tool_use":
            self.tools[index] = (len(self.tools), [])
            yield ToolCallDelta(index=len(self.tools) - 1, id=block["id"], name=block["name"])

    def _delta(self, index: int, delta: Mapping[str, Any]) -> Iterator[StreamEvent]:
        block = self.blocks.get(index)
        kind = delta.get("type")
        if block is None:
            return
        if kind == "text_delta" and block["type"] == "text" and delta.get("text"):
            block["text"] = (block.get("text") or "") + delta["text"]
            yield TextDelta(text=delta["text"])
        elif kind == "thinking_delta" and block["type"] == "thinking" and delta.get("thinking"):
            block["thinking"] = (block.get("thinking") or "") + delta["thinking"]
            yield ThinkingDelta(text=delta["thinking"])
        elif kind == "signature_delta" and block["type"] == "thinking":
            block["signature"] = (block.get("signature") or "") + str(delta.get("signature") or "")
        elif kind == "compaction_delta" and block["type"] == "compaction":
            # The block starts empty (`content: null`); its summary arrives in
            # deltas, and the opaque `encrypted_content`, when sent, is whole.
            if isinstance(delta.get("content"), str):
                block["content"] = (block.get("content") or "") + delta["content"]
            if delta.get("encrypted_content") is not None:
                block["encrypted_content"] = delta["encrypted_content"]
        elif kind == "input_json_delta" and index in self.tools and delta.get("partial_json"):
            position, pieces = self.tools[index]
            pieces.append(str(delta["partial_json"]))
            yield ToolCallDelta(index=position, arguments=pieces[-1])

    def content(self) -> list[Block]:
        """The response's blocks in order, tool calls parsed from their streamed JSON."""
        out: list[Block | None] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if index in self.tools:
                raw = "".join(self.tools[index][1])
                out.append(_tool_call(str(block["id"]), str(block["name"]), raw))
            else:
                out.append(parse_block(block))
        return [b for b in out if b is not None]


def decode(payload: Any, model_name: str, output_tool: str | None) -> ModelResponse:
    """The response of an unstreamed answer; an error body raises its typed error."""
    if not isinstance(payload, dict) or payload.get("type") == "error":
        if isinstance(payload, dict):
            raise stream_error(payload)
        raise ProviderError(f"unexpected response: {payload!r:.200}", provider=PROVIDER)
    built = (parse_block(b) for b in payload.get("content") or () if isinstance(b, dict))
    return _response(model_name, [b for b in built if b is not None], payload, output_tool)


def _response(
    model_name: str, blocks: list[Block], message: Mapping[str, Any], output_tool: str | None
) -> ModelResponse:
    stop_reason = message.get("stop_reason")
    if output_tool is not None:
        blocks, answered = answer_from_output_tool(blocks, output_tool)
        if answered and not any(isinstance(b, ToolCall) for b in blocks):
            stop_reason = "end_turn"
    return ModelResponse(
        message=Message("assistant", tuple(blocks), provider=PROVIDER, model=model_name),
        usage=_usage(message.get("usage") or {}),
        stop_reason=stop_reason or "end_turn",
        model=message.get("model") or model_name,
        provider=PROVIDER,
        response_id=message.get("id"),
    )


def _usage(raw: Mapping[str, Any]) -> Usage:
    details = raw.get("output_tokens_details") or {}
    read = int(raw.get("cache_read_input_tokens") or 0)
    written = int(raw.get("cache_creation_input_tokens") or 0)
    return Usage(
        # As the provider reports it (and its SDK parses it): Anthropic counts
        # cache reads and writes apart from `input_tokens`.
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=read,
        cache_write_tokens=written,
        reasoning_tokens=int(details.get("thinking_tokens") or 0),
        requests=1,
    )
