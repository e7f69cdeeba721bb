"""The OpenAI Responses API (`POST {base_url}/responses`) wire adapter.

Requests are stateless (`store: false`): the whole transcript travels in
`input` on every request. Reasoning therefore round-trips as encrypted
content: it is asked for (`include: ["reasoning.encrypted_content"]`) and each
reasoning item is kept as a `ThinkingBlock` whose `signature` holds it, to be
replayed in place to this provider and dropped for any other.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import httpx2

from ..errors import ProviderError, TransportError
from ..messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from ._http import api_key_from_env, default_client, iter_sse, loads_event, open_stream, send_json
from ._responses_stream import PROVIDER, SUMMARY_SEPARATOR, StreamState, event_error
from .base import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ResponseCompleted,
    StreamEvent,
    ToolSpec,
    collect,
)

__all__ = ["OpenAIResponsesModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_ENCRYPTED_REASONING = "reasoning.encrypted_content"

_Json = dict[str, Any]


class OpenAIResponsesModel:
    """A model served through the OpenAI Responses API.

    Construction does no I/O; a missing API key raises `ConfigurationError`
    naming `api_key_env` (pass `api_key_env=None` for a server that needs no
    key). With `stream=True` (the default) `request()` streams under the hood;
    `stream()` always yields events, ending with `ResponseCompleted`.
    `settings` are this model's defaults; a request's own settings win field
    by field, and `extra` entries are merged into the body last.
    """

    __slots__ = ("_client", "_headers", "_name", "_settings", "_stream", "_url")

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = True,
        api_key_env: str | None = "OPENAI_API_KEY",
        settings: ModelSettings | None = None,
    ) -> None:
        key = api_key_from_env(api_key, api_key_env, PROVIDER)
        self._name = model_name
        self._url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/responses"
        self._client = http_client
        self._headers: dict[str, str] = {"Authorization": f"Bearer {key}"} if key else {}
        self._headers.update(headers or {})
        self._stream = stream
        self._settings = settings

    @property
    def name(self) -> str:
        """The model's name as the API knows it."""
        return self._name

    @property
    def provider(self) -> str:
        """Always `"openai-responses"`."""
        return PROVIDER

    @property
    def spec(self) -> str:
        """`"openai-responses:<name>"`, what `resolve_model` turns back into this model."""
        return f"{PROVIDER}:{self._name}"

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel({self._name!r}, url={self._url!r})"

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send the request and return the whole response (streamed or not, per `stream=`)."""
        if self._stream:
            return await collect(self._streamed(request, emit_deltas=False))
        return await self._unstreamed(request)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send the request, yielding deltas; the last event is `ResponseCompleted`.

        With `stream=False` the answer arrives whole, as one `ResponseCompleted`.
        """
        if self._stream:
            return self._streamed(request, emit_deltas=True)
        return self._whole(request)

    async def _whole(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield ResponseCompleted(await self._unstreamed(request))

    async def _unstreamed(self, request: ModelRequest) -> ModelResponse:
        body = _build_body(self._name, request, self._merged(request.settings), stream=False)
        data = await send_json(self._http(), self._url, body, self._headers, PROVIDER)
        if not isinstance(data, dict):
            raise ProviderError(f"unexpected response body: {str(data)[:200]!r}", provider=PROVIDER)
        if data.get("status") == "failed" or (data.get("error") and not data.get("output")):
            raise event_error(data.get("error") or {})
        return self._response(data, data.get("output") or ())

    async def _streamed(
        self, request: ModelRequest, *, emit_deltas: bool
    ) -> AsyncIterator[StreamEvent]:
        body = _build_body(self._name, request, self._merged(request.settings), stream=True)
        state = StreamState()
        async with open_stream(self._http(), self._url, body, self._headers, PROVIDER) as resp:
            # Read to the end of the body even after the final event: a
            # response closed early cannot return its connection to the pool.
            async for sse in iter_sse(resp, PROVIDER):
                if sse.data == "[DONE]" or state.final is not None:
                    continue
                event = loads_event(sse, PROVIDER)
                if not isinstance(event, dict):
                    continue
                for delta in state.feed(event):
                    if emit_deltas:
                        yield delta
        if state.final is None:
            raise TransportError("stream ended before the response was complete", provider=PROVIDER)
        yield ResponseCompleted(self._response(state.final, state.output()))

    def _response(self, data: Mapping[str, Any], output: Iterable[Any]) -> ModelResponse:
        blocks, refused = _blocks(output)
        message = Message("assistant", tuple(blocks), provider=PROVIDER, model=self._name)
        return ModelResponse(
            message=message,
            usage=_usage(data.get("usage")),
            stop_reason=_stop_reason(data, blocks, refused),
            model=data.get("model") or self._name,
            provider=PROVIDER,
            response_id=data.get("id"),
        )

    def _http(self) -> httpx2.AsyncClient:
        return self._client if self._client is not None else default_client()

    def _merged(self, settings: ModelSettings) -> ModelSettings:
        base = self._settings
        if base is None:
            return settings

        def pick(mine: Any, default: Any) -> Any:
            return default if mine is None else mine

        return ModelSettings(
            temperature=pick(settings.temperature, base.temperature),
            top_p=pick(settings.top_p, base.top_p),
            max_tokens=pick(settings.max_tokens, base.max_tokens),
            stop=settings.stop or base.stop,
            reasoning=pick(settings.reasoning, base.reasoning),
            extra={**base.extra, **settings.extra},
        )


# --- request body -----------------------------------------------------------


def _build_body(
    model: str, request: ModelRequest, settings: ModelSettings, *, stream: bool
) -> _Json:
    """The JSON body of one Responses request (stop sequences have no equivalent)."""
    body: _Json = {"model": model, "input": _input_items(request.messages), "store": False}
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
                "name": _SCHEMA_NAME.sub("_", request.output_name)[:64] or "output",
                "schema": schema,
                "strict": _is_strict_compatible(schema),
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


def _input_items(messages: Sequence[Message]) -> list[_Json]:
    items: list[_Json] = []
    for message in messages:
        if message.role == "assistant":
            _assistant_items(message.blocks, items)
        else:
            _user_items(message.blocks, items)
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
    if call.raw_arguments is not None:
        arguments = call.raw_arguments
    else:
        arguments = json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)
    item: _Json = {
        "type": "function_call",
        "call_id": _wire_call_id(call.id),
        "name": call.name,
        "arguments": arguments,
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
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")


def _wire_call_id(call_id: str) -> str:
    """The `call_id` sent for a tool call id: unchanged when it is a plain token
    of at most 64 characters, else a stable digest of it, so that a call and its
    output (which may come from another provider) always agree."""
    if _PLAIN_CALL_ID.fullmatch(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode()).hexdigest()[:40]


def _tool(spec: ToolSpec) -> _Json:
    schema = dict(spec.input_schema) or {"type": "object", "properties": {}}
    tool: _Json = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["parameters"] = schema
    tool["strict"] = _is_strict_compatible(schema)
    return tool


# JSON-schema keywords that strict mode rejects.
# fmt: off
_NOT_STRICT_KEYWORDS = frozenset({
    "allOf", "oneOf", "not", "if", "then", "else", "default", "contains", "uniqueItems",
    "patternProperties", "propertyNames", "unevaluatedProperties", "dependentRequired",
    "dependentSchemas", "minProperties", "maxProperties",
})
# fmt: on


def _is_strict_compatible(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI's strict mode accepts `schema` as it is.

    Strict mode needs an object at the root, every object closed
    (`additionalProperties: false`) with all its properties required, and
    none of the keywords it does not support. The Responses API makes tools
    strict by default, so a schema that fails this is sent with `strict: false`.
    """
    return schema.get("type") == "object" and _strict_node(schema)


def _strict_node(node: Any) -> bool:
    if isinstance(node, list):
        return all(_strict_node(n) for n in node)
    if not isinstance(node, Mapping):
        return True
    if not _NOT_STRICT_KEYWORDS.isdisjoint(node.keys()):
        return False
    properties = node.get("properties")
    if node.get("type") == "object" or properties is not None:
        if node.get("additionalProperties") is not False:
            return False
        if set(node.get("required") or ()) != set(properties or ()):
            return False
    for key in ("properties", "$defs", "definitions"):
        children = node.get(key)
        if isinstance(children, Mapping) and not all(_strict_node(c) for c in children.values()):
            return False
    return all(_strict_node(node[k]) for k in ("items", "anyOf", "prefixItems") if k in node)


# --- response parsing -------------------------------------------------------


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
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except ValueError:
        arguments = None
    if isinstance(arguments, dict):
        return ToolCall(call_id, name, arguments, provider_id=item_id)
    return ToolCall(call_id, name, {}, raw_arguments=raw, provider_id=item_id)


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
