"""Chat Completions request shapes (pure functions of JSON-like values), some
shared with the Responses API."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..messages import (
    ImageBlock,
    Message,
    TextBlock,
    ToolCall,
    ToolResult,
)
from ..results import ToolSpec
from ._base import ModelRequest
from ._wire import arguments_json, memoized

# OpenAI rejects tool call ids longer than 40 characters; ids from other
# providers (or hand-written histories) may be longer or carry characters some
# compatible servers refuse.
_VALID_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")

# JSON-schema keywords OpenAI's strict structured output does not accept (the
# union of what Chat Completions and the Responses API refuse: `strict: false`
# always works, a wrong `strict: true` is a 400).
# fmt: off
_NOT_STRICT = frozenset({
    "allOf", "oneOf", "not", "if", "then", "else", "default", "dependentRequired",
    "dependentSchemas", "patternProperties", "unevaluatedProperties", "propertyNames",
    "minProperties", "maxProperties", "unevaluatedItems", "contains", "minContains",
    "maxContains", "uniqueItems", "minLength", "maxLength",
})
# fmt: on


class WireIds:
    """Maps taskloom tool call ids to ids every Chat Completions server accepts.

    A valid id passes; another becomes `call_<hash>` of it, so a call and its
    result always agree. An empty call id is derived from its position; an
    empty result id takes the preceding turn's empty-id calls' ids, in order.
    """

    __slots__ = ("_unpaired",)

    def __init__(self) -> None:
        self._unpaired: list[str] = []

    @staticmethod
    def of(call_id: str, valid: re.Pattern[str] = _VALID_ID, digits: int = 32) -> str:
        """The wire id of a non-empty taskloom id (`valid` ids pass, others are
        `call_` and `digits` hex digits of their hash)."""
        if valid.fullmatch(call_id):
            return call_id
        return "call_" + hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:digits]

    def for_call(self, call_id: str, message_index: int, call_index: int) -> str:
        """The wire id of a call in assistant message `message_index`."""
        if call_id:
            return self.of(call_id)
        wire = f"call_m{message_index}_{call_index}"
        self._unpaired.append(wire)
        return wire

    def for_result(self, call_id: str, message_index: int, result_index: int) -> str:
        """The wire id of a result, matching the call it answers."""
        if call_id:
            return self.of(call_id)
        if self._unpaired:
            return self._unpaired.pop(0)
        return f"call_m{message_index}_{result_index}"

    def new_turn(self) -> None:
        """An assistant turn starts: empty-id calls of earlier turns stay unpaired."""
        self._unpaired.clear()


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    # A lone text part goes as a plain string: every compatible server takes
    # that, while some refuse content lists.
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _assistant(
    message: Message, index: int, ids: WireIds, tool_turn_content: str | None
) -> dict[str, Any] | None:
    ids.new_turn()
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ToolCall):
            calls.append(
                {
                    "id": ids.for_call(block.id, index, len(calls)),
                    "type": "function",
                    "function": {"name": block.name, "arguments": arguments_json(block)},
                }
            )
        # Thinking is never sent: Chat Completions has no way to replay it.
    if not text and not calls:
        return None
    out: dict[str, Any] = {"role": "assistant"}
    if text:
        out["content"] = "".join(text)
    elif tool_turn_content is not None:
        out["content"] = tool_turn_content
    if calls:
        out["tool_calls"] = calls
    return out


def _user_side(message: Message, index: int, ids: WireIds) -> Iterable[dict[str, Any]]:
    # Tool results come first: the server wants them right after the
    # assistant turn that made the calls.
    parts: list[dict[str, Any]] = []
    result_index = 0
    for block in message.blocks:
        if isinstance(block, ToolResult):
            yield {
                "role": "tool",
                "tool_call_id": ids.for_result(block.tool_call_id, index, result_index),
                "content": block.content,
            }
            result_index += 1
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            url = block.url or f"data:{block.media_type};base64,{block.base64}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    if parts or (message.role == "user" and result_index == 0):
        yield {"role": "user", "content": _content(parts) if parts else ""}


_MEMO = "openai-chat"
"""This wire format's keys in a `ModelRequest.memo` (a run may change models)."""


def build_messages(
    request: ModelRequest, *, tool_turn_content: str | None = None
) -> list[dict[str, Any]]:
    """The `messages` array for a request (system prompt first, thinking dropped);
    a tool-call-only assistant turn's content is `tool_turn_content` (see `ChatQuirks`)."""
    out: list[dict[str, Any]] = []
    memo = request.memo
    system = request.system
    if system:
        # The same object request after request, as the messages' (see `json_body`).
        kept_system = memo.get((_MEMO, "system")) if memo is not None else None
        if kept_system is not None and kept_system[0] == system:
            out.append(kept_system[1])
        else:
            wire_system = {"role": "system", "content": system}
            if memo is not None:
                memo[(_MEMO, "system")] = (system, wire_system)
            out.append(wire_system)
    ids = WireIds()
    for index, message in enumerate(request.messages):
        if memo is not None:
            kept = memo.get((_MEMO, id(message)))
            if kept is not None and kept[0] is message and kept[1] == tool_turn_content:
                if message.role == "assistant":
                    ids.new_turn()
                out.extend(kept[2])
                continue
        start = len(out)
        if message.role == "assistant":
            wire = _assistant(message, index, ids, tool_turn_content)
            if wire is not None:
                out.append(wire)
        else:
            out.extend(_user_side(message, index, ids))
        if memo is not None and _placeless(message):
            # The message object stays in the value: its id is not reused meanwhile.
            memo[(_MEMO, id(message))] = (message, tool_turn_content, out[start:])
    return out


def _placeless(message: Message) -> bool:
    # Only empty call and result ids are derived from the position (`WireIds`).
    for block in message.blocks:
        if isinstance(block, ToolCall):
            if not block.id:
                return False
        elif isinstance(block, ToolResult) and not block.tool_call_id:
            return False
    return True


def build_tools(
    tools: Sequence[ToolSpec], memo: dict[Any, Any] | None = None
) -> list[dict[str, Any]]:
    """The `tools` array: one function per tool spec."""
    return memoized(
        memo,
        (_MEMO, "tools"),
        tools,
        lambda: [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.input_schema),
                },
            }
            for t in tools
        ],
    )


def _strict_node(node: Any) -> bool:
    if isinstance(node, list):
        return all(_strict_node(n) for n in node)
    if not isinstance(node, Mapping):
        return True
    if _NOT_STRICT.intersection(node):
        return False
    props = node.get("properties")
    if node.get("type") == "object" or isinstance(props, Mapping):
        if node.get("additionalProperties") is not False:
            return False
        names = set(props) if isinstance(props, Mapping) else set()
        if set(node.get("required") or ()) != names:
            return False
    children: list[Any] = []
    if isinstance(props, Mapping):
        children.extend(props.values())
    for key in ("items", "anyOf", "prefixItems"):
        if key in node:
            children.append(node[key])
    for key in ("$defs", "definitions"):
        defs = node.get(key)
        if isinstance(defs, Mapping):
            children.extend(defs.values())
    return all(_strict_node(child) for child in children)


def strict_schema_allowed(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI's strict structured output accepts this schema as it is: an
    object at the root, every object closed with all its properties required,
    none of the keywords strict mode lacks."""
    return schema.get("type") == "object" and _strict_node(schema)


def schema_name(name: str) -> str:
    """An output's name as OpenAI takes it (64 of `[A-Za-z0-9_-]` at most)."""
    return _SCHEMA_NAME.sub("_", name)[:64] or "output"


def response_format(schema: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The `response_format` asking for JSON following `schema`."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": schema_name(name),
            "schema": dict(schema),
            "strict": strict_schema_allowed(schema),
        },
    }


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Parsed tool arguments and, when they are not a JSON object, what was sent.

    Null or empty means none. A `"{}"` some servers stream as a placeholder
    before the real arguments is dropped when what follows is the whole object.
    """
    if raw is None:
        return {}, None
    if not isinstance(raw, str):
        return (dict(raw), None) if isinstance(raw, Mapping) else ({}, json.dumps(raw))
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # nesting too deep to read is invalid too
        value = None
        if raw.startswith("{}"):
            try:
                value = json.loads(raw[2:])
            except (ValueError, RecursionError):
                value = None
            if not isinstance(value, dict):
                value = None
    if isinstance(value, dict):
        return value, None
    return {}, raw
