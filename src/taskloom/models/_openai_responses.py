"""The OpenAI Responses API (`POST {base_url}/responses`) wire adapter.

Requests are stateless (`store: false`): the whole transcript travels in
`input` every time, so reasoning round-trips as encrypted content (asked for
with `include`), kept in a `ThinkingBlock`'s `signature` and replayed in
place to this provider only. Server-side compaction items (`extra=
{"context_management": [...]}`) are kept whole and go back the same way.

Answers are read from server-sent events (`StreamState`) or a whole body
(`_decode`); items that never finished are rebuilt from their deltas.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2

from .._deltas import TextDelta, ThinkingDelta
from ..errors import ProviderError, TransportError
from ..messages import (
    Block,
    CompactionBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from ..results import ToolSpec
from ._adapter import WireModel
from ._base import ModelRequest, ModelResponse, ModelSettings, StreamEvent, ToolCallDelta
from ._http import SSE, error_from_response, loads_event
from ._openai_common import WireIds, parse_arguments, schema_name, strict_schema_allowed
from ._resolve import OPENAI_RESPONSES
from ._wire import arguments_json, present

PROVIDER = "openai-responses"
# Reasoning summary parts join with a blank line, in the streamed deltas and
# in the final block alike.
SUMMARY_SEPARATOR = "\n\n"
_ENCRYPTED_REASONING = "reasoning.encrypted_content"

_Json = dict[str, Any]


class OpenAIResponsesModel(WireModel):
    """A model served through the OpenAI Responses API (see `WireModel` for the
    options); with `stream=False`, `stream()` yields the whole answer as one
    `ResponseCompleted`. `extra` settings are merged into the body last.
    """

    __slots__ = ()

    _HOME = OPENAI_RESPONSES

    def _endpoint(self, base_url: str) -> str:
        return f"{base_url}/responses"

    def _encode(self, request: ModelRequest, settings: ModelSettings, stream: bool) -> _Json:
        return _build_body(self._name, request, settings, stream=stream)

    def _assembler(self, request: ModelRequest, emit: bool) -> StreamState:
        return StreamState(self._name)

    def _decode(self, payload: Any, request: ModelRequest) -> ModelResponse:
        if not isinstance(payload, dict):
            raise ProviderError(
                f"unexpected response body: {str(payload)[:200]!r}", provider=PROVIDER
            )
        if payload.get("status") == "failed" or (
            payload.get("error") and not payload.get("output")
        ):
            raise event_error(payload.get("error") or {})
        return _response(self._name, payload, payload.get("output") or ())


def _build_body(
    model: str, request: ModelRequest, settings: ModelSettings, *, stream: bool
) -> _Json:
    """The JSON body of one Responses request (stop sequences have no equivalent)."""
    body: _Json = {
        "model": model,
        "input": _input_items(request.messages, request.memo),
        "store": False,
    }
    if stream:
        body["stream"] = True
    if request.system:
        body["instructions"] = request.system
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
    body.update(
        present(
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_output_tokens=settings.max_tokens,
        )
    )
    reasoning = settings.reasoning
    options = (
        {} if reasoning is None else present(effort=reasoning.effort, summary=reasoning.summary)
    )
    if options:
        body["reasoning"] = options
    # Models without reasoning reject the include, so ask for it only when
    # reasoning was requested (a thinking budget alone means nothing here) or
    # this provider already reasoned in the transcript.
    if options or any(
        isinstance(b, ThinkingBlock) and b.provider == PROVIDER
        for m in request.messages
        if m.role == "assistant"
        for b in m.blocks
    ):
        body["include"] = [_ENCRYPTED_REASONING]
    if request.output_schema is not None:
        schema = dict(request.output_schema)
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": schema_name(request.output_name),
                "schema": schema,
                "strict": strict_schema_allowed(schema),
            }
        }
    if settings.extra:
        body.update(settings.extra)
    return body


_MEMO = "openai-responses"
"""This wire format's keys in a `ModelRequest.memo` (a run may change models)."""


def _input_items(messages: Sequence[Message], memo: dict[Any, Any] | None) -> list[_Json]:
    # A message's items do not depend on where it stands: each is encoded
    # once per run and kept in the request's memo.
    items: list[_Json] = []
    for message in messages:
        if memo is not None:
            kept = memo.get((_MEMO, id(message)))
            if kept is not None and kept[0] is message:
                items.extend(kept[1])
                continue
        start = len(items)
        if message.role == "assistant":
            _assistant_items(message.blocks, items)
        else:
            _user_items(message.blocks, items)
        if memo is not None:
            memo[(_MEMO, id(message))] = (message, items[start:])
    return items


def _assistant_items(blocks: Sequence[Block], items: list[_Json]) -> None:
    for block in blocks:
        if isinstance(block, TextBlock):
            if block.text:
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": block.text, "annotations": []}],
                    }
                )
        elif isinstance(block, ToolCall):
            items.append(_function_call(block))
        elif isinstance(block, ThinkingBlock):
            # A stateless request can only resolve reasoning it carries whole:
            # without encrypted content the item would be looked up and not found.
            if block.provider == PROVIDER and block.signature:
                items.append(_reasoning_item(block))
        elif isinstance(block, CompactionBlock):
            # Like reasoning, only an item carrying its encrypted content
            # resolves in a stateless request.
            if block.provider == PROVIDER and block.data.get("encrypted_content"):
                items.append(dict(block.data))
        elif isinstance(block, ToolResult):
            items.append(_function_call_output(block))


def _user_items(blocks: Sequence[Block], items: list[_Json]) -> None:
    content: list[_Json] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            content.append({"type": "input_text", "text": block.text})
        elif isinstance(block, ImageBlock):
            url = block.url or f"data:{block.media_type};base64,{block.base64}"
            content.append({"type": "input_image", "image_url": url, "detail": "auto"})
        elif isinstance(block, ToolResult):
            if content:
                items.append({"type": "message", "role": "user", "content": content})
                content = []
            items.append(_function_call_output(block))
    if content:
        items.append({"type": "message", "role": "user", "content": content})


def _reasoning_item(block: ThinkingBlock) -> _Json:
    item: _Json = {"type": "reasoning"}
    if block.id:
        item["id"] = block.id
    item["summary"] = [{"type": "summary_text", "text": block.text}] if block.text else []
    item["encrypted_content"] = block.signature
    return item


def _function_call(call: ToolCall) -> _Json:
    item: _Json = {
        "type": "function_call",
        "call_id": _wire_call_id(call.id),
        "name": call.name,
        "arguments": arguments_json(call),
    }
    # The API insists that a function call's item id is one of its own ("fc...").
    if call.provider_id and call.provider_id.startswith("fc"):
        item["id"] = call.provider_id
    return item


def _function_call_output(result: ToolResult) -> _Json:
    return {
        "type": "function_call_output",
        "call_id": _wire_call_id(result.tool_call_id),
        "output": result.content,
    }


_PLAIN_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _wire_call_id(call_id: str) -> str:
    # A stable digest: a call and its output always agree.
    return WireIds.of(call_id, _PLAIN_CALL_ID, 40)


def _tool(spec: ToolSpec) -> _Json:
    schema = dict(spec.input_schema) or {"type": "object", "properties": {}}
    tool: _Json = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["parameters"] = schema
    tool["strict"] = strict_schema_allowed(schema)
    return tool


_CODE_STATUS = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "internal_error": 500,
    "server_is_overloaded": 503,
    "overloaded": 503,
    "slow_down": 503,
    "vector_store_timeout": 504,
}


def event_error(error: Any) -> ProviderError:
    """A typed error for an `error` event or a failed response, typed by the
    HTTP status its code would have had as a response."""
    err = dict(error) if isinstance(error, Mapping) else {"message": str(error or "")}
    code = err.get("code") or err.get("type")
    status = _CODE_STATUS.get(str(code), 500 if code is None else 400)
    if not err.get("message"):
        err["message"] = f"the response failed ({code or 'no error code'})"
    return error_from_response(
        status, json.dumps({"error": err}).encode(), httpx2.Headers(), PROVIDER
    )


@dataclass(slots=True, eq=False)
class _Item:
    """One output item as it streams: what was announced, plus the text so far."""

    data: _Json
    done: bool = False
    parts: dict[tuple[str, int], list[str]] = dataclasses.field(default_factory=dict)
    tool_index: int | None = None

    def joined(self, field: str) -> list[str]:
        keys = sorted(k for k in self.parts if k[0] == field)
        return ["".join(self.parts[k]) for k in keys]

    def final(self) -> _Json:
        """The finished item, or one rebuilt from its deltas if it never finished."""
        if self.done or not self.parts:
            return self.data
        item = dict(self.data)
        if item.get("type") == "message":
            keys = sorted((k[1], k[0]) for k in self.parts)
            item["content"] = [
                {
                    "type": kind,
                    "refusal" if kind == "refusal" else "text": "".join(self.parts[(kind, i)]),
                }
                for i, kind in keys
            ]
        elif item.get("type") == "function_call":
            item["arguments"] = "".join(self.joined("arguments"))
        elif item.get("type") == "reasoning":
            item["summary"] = [{"text": t} for t in self.joined("summary")]
            item["content"] = [{"text": t} for t in self.joined("reasoning")]
        return item


class StreamState:
    """Folds the Responses event stream into deltas and, at the end, the response."""

    __slots__ = ("_by_id", "_items", "_model", "_tools", "final")

    def __init__(self, model_name: str) -> None:
        self._model = model_name
        self._items: dict[int, _Item] = {}
        self._by_id: dict[str, int] = {}
        self._tools = 0
        self.final: _Json | None = None

    def feed(self, sse: SSE) -> list[StreamEvent]:
        """Take one server-sent event; return the deltas it carries (none after the final one)."""
        if sse.data == "[DONE]" or self.final is not None:
            return []
        event = loads_event(sse, PROVIDER)
        return self._event(event) if isinstance(event, dict) else []

    def finish(self) -> ModelResponse:
        """The whole response; a stream cut before its final event raises `TransportError`."""
        if self.final is None:
            raise TransportError("stream ended before the response was complete", provider=PROVIDER)
        return _response(self._model, self.final, self.output())

    def output(self) -> list[_Json]:
        """The response's items in order; the final response's own list if none streamed."""
        if not self._items:
            return list((self.final or {}).get("output") or ())
        return [self._items[i].final() for i in sorted(self._items)]

    def _item(self, event: Mapping[str, Any]) -> _Item | None:
        index = event.get("output_index")
        if not isinstance(index, int):
            index = self._by_id.get(event.get("item_id") or "")
        return None if index is None else self._items.get(index)

    def _track(self, event: Mapping[str, Any], data: _Json) -> tuple[_Item, list[StreamEvent]]:
        index = event.get("output_index")
        if not isinstance(index, int):
            index = self._by_id.get(data.get("id") or "", len(self._items))
        item = self._items.get(index)
        if item is None:
            item = self._items[index] = _Item(data)
        if data.get("id"):
            self._by_id[data["id"]] = index
        deltas: list[StreamEvent] = []
        if data.get("type") == "function_call" and item.tool_index is None:
            item.tool_index = self._tools
            self._tools += 1
            deltas.append(
                ToolCallDelta(
                    item.tool_index,
                    id=data.get("call_id"),
                    name=data.get("name"),
                    arguments=data.get("arguments") or "",
                )
            )
            if data.get("arguments"):
                item.parts[("arguments", 0)] = [data["arguments"]]
        return item, deltas

    def _event(self, event: Mapping[str, Any]) -> list[StreamEvent]:
        kind = event.get("type")
        if kind == "response.output_item.added":
            return self._track(event, dict(event.get("item") or {}))[1]
        if kind == "response.output_item.done":
            data = dict(event.get("item") or {})
            item, deltas = self._track(event, data)
            if item.tool_index is not None and not deltas:
                deltas = self._arguments_rest(item, data.get("arguments"))
            item.data = data
            item.done = True
            return deltas
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            field = "output_text" if kind == "response.output_text.delta" else "refusal"
            return self._text(event, field, event.get("content_index", 0), TextDelta)
        if kind == "response.reasoning_summary_text.delta":
            return self._text(event, "summary", event.get("summary_index", 0), ThinkingDelta)
        if kind == "response.reasoning_text.delta":
            return self._text(event, "reasoning", event.get("content_index", 0), ThinkingDelta)
        if kind in (
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
        ):
            return self._arguments(event)
        if kind in ("response.completed", "response.incomplete"):
            self.final = dict(event.get("response") or {})
        elif kind == "response.failed":
            raise event_error((event.get("response") or {}).get("error"))
        elif kind == "error":
            nested = event.get("error")
            if isinstance(nested, Mapping):
                raise event_error(nested)
            raise event_error({k: event[k] for k in ("code", "message", "param") if k in event})
        return []

    def _text(
        self,
        event: Mapping[str, Any],
        field: str,
        index: Any,
        make: type[TextDelta] | type[ThinkingDelta],
    ) -> list[StreamEvent]:
        item = self._item(event)
        delta = event.get("delta") or ""
        if not delta:
            return []
        out: list[StreamEvent] = []
        if item is not None:
            key = (field, index if isinstance(index, int) else 0)
            if field in ("summary", "reasoning") and key not in item.parts and item.joined(field):
                # Parts join with a blank line in the final block; the deltas match it.
                out.append(make(text=SUMMARY_SEPARATOR))
            item.parts.setdefault(key, []).append(delta)
        out.append(make(text=delta))
        return out

    def _arguments(self, event: Mapping[str, Any]) -> list[StreamEvent]:
        item = self._item(event)
        if item is None or item.tool_index is None:
            return []
        if event.get("type") == "response.function_call_arguments.done":
            return self._arguments_rest(item, event.get("arguments"))
        delta = event.get("delta") or ""
        if not delta:
            return []
        item.parts.setdefault(("arguments", 0), []).append(delta)
        return [ToolCallDelta(item.tool_index, arguments=delta)]

    def _arguments_rest(self, item: _Item, arguments: Any) -> list[StreamEvent]:
        """Whatever of the final arguments the deltas have not carried yet."""
        if not isinstance(arguments, str) or item.tool_index is None:
            return []
        seen = "".join(item.parts.get(("arguments", 0), ()))
        item.parts[("arguments", 0)] = [arguments]
        if arguments.startswith(seen) and len(arguments) > len(seen):
            return [ToolCallDelta(item.tool_index, arguments=arguments[len(seen) :])]
        return []


def _response(model_name: str, data: Mapping[str, Any], output: Iterable[Any]) -> ModelResponse:
    blocks, refused = _blocks(output)
    message = Message("assistant", tuple(blocks), provider=PROVIDER, model=model_name)
    return ModelResponse(
        message=message,
        usage=_usage(data.get("usage")),
        stop_reason=_stop_reason(data, blocks, refused),
        model=data.get("model") or model_name,
        provider=PROVIDER,
        response_id=data.get("id"),
    )


def _blocks(output: Iterable[Any]) -> tuple[list[Block], bool]:
    """The assistant blocks of a response's `output` items, and whether it refused."""
    blocks: list[Block] = []
    refused = False
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            parts: list[str] = []
            for part in item.get("content") or ():
                if part.get("type") == "refusal":
                    refused = True
                    parts.append(part.get("refusal") or "")
                else:
                    parts.append(part.get("text") or "")
            text = "".join(parts)
            if text:
                blocks.append(TextBlock(text))
        elif kind == "function_call":
            arguments, raw = parse_arguments(item.get("arguments") or "")
            call_id = item.get("call_id") or item.get("id") or ""
            blocks.append(
                ToolCall(
                    call_id, item.get("name") or "", arguments, raw, provider_id=item.get("id")
                )
            )
        elif kind == "compaction":
            blocks.append(CompactionBlock(PROVIDER, item))
        elif kind == "reasoning":
            blocks.append(
                ThinkingBlock(
                    text=_reasoning_text(item),
                    signature=item.get("encrypted_content"),
                    provider=PROVIDER,
                    id=item.get("id"),
                )
            )
    return blocks, refused


def _reasoning_text(item: Mapping[str, Any]) -> str:
    for field in ("summary", "content"):
        texts = [p.get("text") or "" for p in item.get(field) or () if isinstance(p, dict)]
        if any(texts):
            return SUMMARY_SEPARATOR.join(t for t in texts if t)
    return ""


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage(requests=1)
    given = raw.get("input_tokens_details") or {}
    made = raw.get("output_tokens_details") or {}
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=int(given.get("cached_tokens") or 0),
        cache_write_tokens=int(given.get("cache_write_tokens") or 0),
        reasoning_tokens=int(made.get("reasoning_tokens") or 0),
        requests=1,
    )


def _stop_reason(data: Mapping[str, Any], blocks: Sequence[Block], refused: bool) -> str:
    if any(isinstance(b, ToolCall) for b in blocks):
        return "tool_use"
    reason = (data.get("incomplete_details") or {}).get("reason")
    if reason == "max_output_tokens":
        return "max_tokens"
    if reason == "content_filter":
        return "content_filter"
    return "refusal" if refused else "end_turn"
