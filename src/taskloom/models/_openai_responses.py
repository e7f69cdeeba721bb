"""The OpenAI Responses API (`POST {base_url}/responses`) wire adapter.

Requests are stateless (`store: false`): the whole transcript travels in
`input` on every request. Reasoning therefore round-trips as encrypted
content: it is asked for (`include: ["reasoning.encrypted_content"]`) and each
reasoning item is kept as a `ThinkingBlock` whose `signature` holds it, to be
replayed in place to this provider and dropped for any other.

Server-side compaction (`extra={"context_management": [{"type": "compaction",
"compact_threshold": ...}]}`) answers with `compaction` items holding
encrypted content: each is kept whole as a `CompactionBlock` and goes back
unchanged, in place, the same way; the API reads it instead of the items
before it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from ..messages import (
    Block,
    CompactionBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
)
from ._adapter import WireModel
from ._base import ModelRequest, ModelResponse, ModelSettings, ToolSpec
from ._openai_common import schema_name, strict_schema_allowed
from ._resolve import OPENAI_RESPONSES
from ._responses_stream import PROVIDER, StreamState, decode
from ._wire import arguments_json

_ENCRYPTED_REASONING = "reasoning.encrypted_content"

_Json = dict[str, Any]


class OpenAIResponsesModel(WireModel):
    """A model served through the OpenAI Responses API (see `WireModel` for the options).

    With `stream=False`, `stream()` yields the whole answer as one
    `ResponseCompleted`. `settings` are this model's defaults; a request's
    own settings win field by field, and `extra` entries are merged into the
    body last.
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
        return decode(payload, self._name)


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
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.max_tokens is not None:
        body["max_output_tokens"] = settings.max_tokens
    reasoning = settings.reasoning
    options: _Json = {}
    if reasoning is not None:
        options = {"effort": reasoning.effort, "summary": reasoning.summary}
        options = {k: v for k, v in options.items() if v is not None}
        if options:
            body["reasoning"] = options
    # Models without reasoning reject the include, so ask for it only when
    # reasoning was requested (a thinking budget alone means nothing here) or
    # this provider already reasoned in the transcript.
    if options or _holds_own_reasoning(request.messages):
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


def _holds_own_reasoning(messages: Sequence[Message]) -> bool:
    return any(
        isinstance(b, ThinkingBlock) and b.provider == PROVIDER
        for m in messages
        if m.role == "assistant"
        for b in m.blocks
    )


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
    # A plain token of at most 64 characters passes; any other id becomes a
    # stable digest, so a call and its output always agree.
    if _PLAIN_CALL_ID.fullmatch(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode()).hexdigest()[:40]


def _tool(spec: ToolSpec) -> _Json:
    schema = dict(spec.input_schema) or {"type": "object", "properties": {}}
    tool: _Json = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["parameters"] = schema
    tool["strict"] = strict_schema_allowed(schema)
    return tool
