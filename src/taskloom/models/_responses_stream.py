"""Reading a Responses API stream: server-sent events in, deltas and output items out.

Private to `openai_responses`. `StreamState` is the state machine that folds
the stream's events into `TextDelta` / `ThinkingDelta` / `ToolCallDelta` as
they arrive and, at the end, into the response's output items (rebuilt from
their deltas when an item never finished); the adapter turns those into the
final `ModelResponse`. `event_error` types the errors that arrive inside a
stream (and in a failed unstreamed response). It lives apart from the adapter
so the request side reads on its own, and it never imports the adapter, which
imports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx2

from ..errors import ProviderError
from ..events import TextDelta, ThinkingDelta
from ._http import error_from_response
from .base import StreamEvent, ToolCallDelta

__all__ = ["PROVIDER", "SUMMARY_SEPARATOR", "StreamState", "event_error"]

# Defined here rather than in `openai_responses` (which re-exports it) so that
# this module needs nothing from the adapter.
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
    """A typed error for an `error` event or a failed response.

    Such errors arrive inside a 200 stream, so they are typed by the HTTP
    status the same error would have had as a response: the provider's code
    decides it, and the message is kept verbatim.
    """
    err = dict(error) if isinstance(error, Mapping) else {"message": str(error or "")}
    code = err.get("code") or err.get("type")
    status = _CODE_STATUS.get(str(code), 500 if code is None else 400)
    if not err.get("message"):
        err["message"] = f"the response failed ({code or 'no error code'})"
    return error_from_response(
        status, json.dumps({"error": err}).encode(), httpx2.Headers(), PROVIDER
    )


class _Item:
    """One output item as it streams: what was announced, plus the text so far."""

    __slots__ = ("data", "done", "parts", "tool_index")

    def __init__(self, data: _Json) -> None:
        self.data = data
        self.done = False
        self.parts: dict[tuple[str, int], list[str]] = {}
        self.tool_index: int | None = None

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
    """Folds the Responses event stream into deltas and, at the end, the output."""

    __slots__ = ("_by_id", "_items", "_tools", "final")

    def __init__(self) -> None:
        self._items: dict[int, _Item] = {}
        self._by_id: dict[str, int] = {}
        self._tools = 0
        self.final: _Json | None = None

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

    def feed(self, event: Mapping[str, Any]) -> list[StreamEvent]:
        """Take one event; return the deltas it carries."""
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
