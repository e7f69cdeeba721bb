"""Reading Responses API answers: server-sent events (`StreamState`) or a whole
body (`decode`) in, a response out; items that never finished are rebuilt from
their deltas."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2

from ..errors import ProviderError, TransportError
from ..events import TextDelta, ThinkingDelta
from ..messages import Block, CompactionBlock, Message, TextBlock, ThinkingBlock, ToolCall, Usage
from ._base import ModelResponse, StreamEvent, ToolCallDelta
from ._http import SSE, error_from_response, loads_event
from ._openai_common import parse_arguments

PROVIDER = "openai-responses"
# Reasoning summary parts join with a blank line, in the streamed deltas and
# in the final block alike.
SUMMARY_SEPARATOR = "\n\n"

_Json = dict[str, Any]


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


def decode(data: Any, model_name: str) -> ModelResponse:
    """The response of an unstreamed answer; a failed one raises its typed error."""
    if not isinstance(data, dict):
        raise ProviderError(f"unexpected response body: {str(data)[:200]!r}", provider=PROVIDER)
    if data.get("status") == "failed" or (data.get("error") and not data.get("output")):
        raise event_error(data.get("error") or {})
    return _response(model_name, data, data.get("output") or ())


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
            blocks.append(
                _tool_call(
                    item.get("call_id") or item.get("id") or "",
                    item.get("name") or "",
                    item.get("arguments") or "",
                    item.get("id"),
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


def _tool_call(call_id: str, name: str, raw: str, item_id: str | None) -> ToolCall:
    arguments, raw_arguments = parse_arguments(raw)
    return ToolCall(call_id, name, arguments, raw_arguments=raw_arguments, provider_id=item_id)


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
