"""The Anthropic Messages API (`POST /v1/messages`), streamed or not.

Wire decisions, for readers comparing bodies with Anthropic's documentation:

- History: thinking blocks go back unchanged, and only when Anthropic wrote
  them; other providers' reasoning is dropped. Their tool call ids are mapped
  (`wire_tool_id`) to the form Anthropic accepts.
- Caching: with `cache=True` the last system block and the last tool carry a
  `cache_control: {"type": "ephemeral"}` breakpoint, so the stable prefix of
  every round is read from the cache.
- Reasoning: `budget_tokens` sends `thinking: {type: enabled, budget_tokens}`.
  `effort` goes to `output_config.effort` on models that take it (Opus 4.5,
  Claude 4.6 and later); alone, it also turns on adaptive thinking
  (`thinking: {type: adaptive}`, plus `display: summarized` from Claude 4.7 on,
  where thinking text is otherwise omitted) on Claude 4.6 and later, and an
  enabled thinking budget sized from the effort on older thinking models.
  Models known not to think (before Claude 3.7) get no thinking settings, so
  a session's reasoning choice survives a model switch.
- Structured output: models with native structured outputs (Claude 4.5 and
  later) get `output_config.format: {type: json_schema, schema}`; older ones
  get a forced output tool named `request.output_name`, whose call comes back
  as a JSON text block so callers see one shape whatever the model.
- `settings.extra` is merged into the body last (dict values one level deep);
  a `None` value removes that key, e.g. `{"thinking": None}` for effort
  without adaptive thinking.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
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
from ._anthropic_stream import PROVIDER, StreamAssembler, parse_block, stream_error
from ._http import api_key_from_env, default_client, iter_sse, loads_event, open_stream, send_json
from .base import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ReasoningOptions,
    ResponseCompleted,
    StreamEvent,
    collect,
)

__all__ = ["AnthropicModel", "wire_tool_id"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_EPHEMERAL = {"type": "ephemeral"}
_VALID_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_EFFORT_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32000}
_ANSWER_HEADROOM = 8192


@dataclass(frozen=True, slots=True)
class _Family:
    """What a model name says about its capabilities (unknown names: assume little)."""

    version: tuple[int, int] | None
    is_opus: bool

    @classmethod
    def of(cls, name: str) -> _Family:
        lowered = name.lower()
        at = lowered.find("claude-")
        if at < 0:
            return cls(None, False)
        # Dates (`-20250514`) are longer than two digits and never a version part.
        numbers = [int(p) for p in lowered[at + 7 :].split("-") if p.isdigit() and len(p) <= 2]
        if not numbers:
            return cls(None, "opus" in lowered)
        return cls((numbers[0], numbers[1] if len(numbers) > 1 else 0), "opus" in lowered)

    def at_least(self, major: int, minor: int) -> bool:
        return self.version is not None and self.version >= (major, minor)

    @property
    def thinks(self) -> bool:
        return self.version is None or self.version >= (3, 7)

    @property
    def adaptive(self) -> bool:
        return self.at_least(4, 6)

    @property
    def effort(self) -> bool:
        return self.at_least(4, 6) or (self.is_opus and self.at_least(4, 5))

    @property
    def native_output(self) -> bool:
        return self.at_least(4, 5)

    @property
    def output_cap(self) -> int:
        if self.version is None:
            return 64000
        if self.version < (3, 5):
            return 4096
        if self.version < (3, 7):
            return 8192
        return 32000 if self.is_opus and self.version < (4, 5) else 64000


def wire_tool_id(call_id: str) -> str:
    """A tool call id Anthropic accepts (`^[a-zA-Z0-9_-]+$`), deterministic per id.

    Valid ids pass unchanged; others are sanitized and suffixed with a hash of
    the original, so two ids that sanitize alike still differ and a call and
    its result always map to the same id.
    """
    if _VALID_TOOL_ID.match(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^a-zA-Z0-9_-]', '_', call_id)}_{digest}"


def _merge_settings(base: ModelSettings, over: ModelSettings) -> ModelSettings:
    return ModelSettings(
        temperature=over.temperature if over.temperature is not None else base.temperature,
        top_p=over.top_p if over.top_p is not None else base.top_p,
        max_tokens=over.max_tokens if over.max_tokens is not None else base.max_tokens,
        stop=over.stop or base.stop,
        reasoning=over.reasoning if over.reasoning is not None else base.reasoning,
        extra={**base.extra, **over.extra},
    )


def _tool_input(call: ToolCall) -> dict[str, Any]:
    if call.arguments or call.raw_arguments is None:
        return dict(call.arguments)
    try:
        parsed = json.loads(call.raw_arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _assistant_block(block: Block) -> dict[str, Any] | None:
    if isinstance(block, ThinkingBlock):
        # Signatures bind thinking to Anthropic's own output; another provider's
        # reasoning cannot be verified there and is dropped.
        if block.provider != PROVIDER:
            return None
        if block.redacted:
            return None if block.data is None else {"type": "redacted_thinking", "data": block.data}
        if block.signature is None:
            return None
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text.strip() else None
    if isinstance(block, ToolCall):
        return {
            "type": "tool_use",
            "id": wire_tool_id(block.id),
            "name": block.name,
            "input": _tool_input(block),
        }
    return None


def _user_block(block: Block) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text.strip() else None
    if isinstance(block, ToolResult):
        return {
            "type": "tool_result",
            "tool_use_id": wire_tool_id(block.tool_call_id),
            "content": block.content,
            "is_error": block.is_error,
        }
    if isinstance(block, ImageBlock):
        if block.url is not None:
            return {"type": "image", "source": {"type": "url", "url": block.url}}
        source = {"type": "base64", "media_type": block.media_type, "data": block.base64}
        return {"type": "image", "source": source}
    return None


def _wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Anthropic messages: strictly alternating roles.

    Tool results become `tool_result` blocks of a user turn; consecutive turns
    of one role are merged, and within a user turn the tool results come
    first, as Anthropic requires right after the assistant's `tool_use`.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        convert = _assistant_block if role == "assistant" else _user_block
        content = [b for b in map(convert, message.blocks) if b is not None]
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    for turn in out:
        if turn["role"] == "user":
            turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    return out


def _strict_schema(schema: Any) -> Any:
    """Close every object schema (`additionalProperties: false`), as native output requires."""
    if isinstance(schema, list):
        return [_strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict_schema(v) for k, v in schema.items()}
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _thinking(
    family: _Family, reasoning: ReasoningOptions | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The `thinking` setting and the `output_config.effort` for these options."""
    if reasoning is None or not family.thinks:
        return None, None
    effort = "low" if reasoning.effort == "minimal" else reasoning.effort
    sent_effort = effort if family.effort else None
    if reasoning.budget_tokens is not None:
        return {"type": "enabled", "budget_tokens": reasoning.budget_tokens}, sent_effort
    if effort is None:
        return None, None
    if family.adaptive:
        adaptive: dict[str, Any] = {"type": "adaptive"}
        if family.at_least(4, 7):
            adaptive["display"] = "summarized"
        return adaptive, effort
    return {"type": "enabled", "budget_tokens": _EFFORT_BUDGET[effort]}, sent_effort


def _build_body(
    model: str,
    request: ModelRequest,
    *,
    settings: ModelSettings,
    default_max_tokens: int | None,
    stream: bool,
    cache: bool,
) -> tuple[dict[str, Any], str | None]:
    """The JSON body for one request, and the output tool's name when one stands in
    for native structured output."""
    family = _Family.of(model)
    body: dict[str, Any] = {"model": model, "messages": _wire_messages(request.messages)}
    if request.system:
        body["system"] = [{"type": "text", "text": request.system}]
    tools = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
        for t in request.tools
    ]
    thinking, effort = _thinking(family, settings.reasoning)
    if thinking is not None and thinking["type"] == "enabled" and _ends_in_unthought_tool_use(body):
        # With thinking enabled, Anthropic rejects a tool loop whose last
        # assistant turn does not start with its own thinking (a turn written
        # by another provider): that request goes without thinking.
        thinking = None
    output_config: dict[str, Any] = {"effort": effort} if effort else {}
    output_tool: str | None = None
    if request.output_schema is not None and family.native_output:
        schema = _strict_schema(dict(request.output_schema))
        output_config["format"] = {"type": "json_schema", "schema": schema}
    elif request.output_schema is not None:
        output_tool = request.output_name
        tools.append(
            {
                "name": output_tool,
                "description": "Give the final answer, following this schema.",
                "input_schema": dict(request.output_schema),
            }
        )
        # Forcing a tool is refused together with thinking; `any` keeps the
        # other tools callable.
        if thinking is None:
            forced = {"type": "tool", "name": output_tool}
            body["tool_choice"] = forced if len(tools) == 1 else {"type": "any"}
    if cache:
        for breakpoint in (body.get("system"), tools):
            if breakpoint:
                breakpoint[-1]["cache_control"] = dict(_EPHEMERAL)
    if tools:
        body["tools"] = tools
    body["max_tokens"] = settings.max_tokens or default_max_tokens or _max_tokens(family, thinking)
    optional = {
        "thinking": thinking,
        "output_config": output_config or None,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "stop_sequences": list(settings.stop) or None,
    }
    body.update((k, v) for k, v in optional.items() if v is not None)
    body["stream"] = stream
    for key, value in settings.extra.items():
        if value is None:
            body.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return body, output_tool


def _max_tokens(family: _Family, thinking: Mapping[str, Any] | None) -> int:
    """A default `max_tokens` (Anthropic requires one) that leaves room to answer."""
    wanted = _ANSWER_HEADROOM
    if thinking is not None and thinking["type"] == "adaptive":
        wanted = 2 * _ANSWER_HEADROOM
    elif thinking is not None:
        # The thinking budget is part of max_tokens and must stay below it.
        wanted += int(thinking["budget_tokens"])
    return min(family.output_cap, wanted)


def _ends_in_unthought_tool_use(body: Mapping[str, Any]) -> bool:
    last = next((m for m in reversed(body["messages"]) if m["role"] == "assistant"), None)
    if last is None or not any(b["type"] == "tool_use" for b in last["content"]):
        return False
    return last["content"][0]["type"] not in ("thinking", "redacted_thinking")


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


class AnthropicModel:
    """A Claude model over the Anthropic Messages API.

    Constructing one does no I/O; a missing key raises `ConfigurationError`
    naming `api_key_env` at once (pass `api_key_env=None` for servers that
    need none). `stream=True` makes `request()` read server-sent events;
    `stream()` always yields events, ending with `ResponseCompleted`.
    `max_tokens` overrides the per-family default when the request's settings
    give none; `settings` are defaults under each request's own settings;
    `cache` places prompt-cache breakpoints on the system prompt and tools.
    """

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = True,
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        max_tokens: int | None = None,
        settings: ModelSettings | None = None,
        cache: bool = True,
    ) -> None:
        self._name = model_name
        self._api_key = api_key_from_env(api_key, api_key_env, PROVIDER)
        self._base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self._client = http_client
        self._headers = dict(headers or {})
        self._stream = stream
        self._max_tokens = max_tokens
        self._settings = settings or ModelSettings()
        self._cache = cache

    @property
    def name(self) -> str:
        """The model name sent on the wire."""
        return self._name

    @property
    def provider(self) -> str:
        """Always `anthropic`."""
        return PROVIDER

    @property
    def spec(self) -> str:
        """`anthropic:<name>`, which `resolve_model` turns back into this model."""
        return f"{PROVIDER}:{self._name}"

    def __repr__(self) -> str:
        return f"AnthropicModel({self._name!r}, base_url={self._base_url!r})"

    @property
    def url(self) -> str:
        """The endpoint requests go to."""
        base = self._base_url
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    def build_body(self, request: ModelRequest, *, stream: bool | None = None) -> dict[str, Any]:
        """The JSON body this model would send for `request` (no I/O)."""
        return self._body(request, self._stream if stream is None else stream)[0]

    def _body(self, request: ModelRequest, stream: bool) -> tuple[dict[str, Any], str | None]:
        return _build_body(
            self._name,
            request,
            settings=_merge_settings(self._settings, request.settings),
            default_max_tokens=self._max_tokens,
            stream=stream,
            cache=self._cache,
        )

    def _request_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION, "content-type": "application/json"}
        if self._api_key is not None:
            headers["x-api-key"] = self._api_key
        headers.update(self._headers)
        return headers

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send the request and return the whole response (streamed underneath if `stream=True`)."""
        if self._stream:
            return await collect(self.stream(request))
        body, output_tool = self._body(request, False)
        client = self._client or default_client()
        payload = await send_json(client, self.url, body, self._request_headers(), PROVIDER)
        return self._parse(payload, output_tool)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield text, thinking and tool-call deltas as they arrive, then `ResponseCompleted`."""
        if not self._stream:
            yield ResponseCompleted(await self.request(request))
            return
        body, output_tool = self._body(request, True)
        client = self._client or default_client()
        assembler = StreamAssembler()
        async with open_stream(client, self.url, body, self._request_headers(), PROVIDER) as resp:
            # Read on to the end of the body even after message_stop: a body left
            # unread makes the client close the connection instead of reusing it.
            async for sse in iter_sse(resp, PROVIDER):
                if not assembler.done:
                    for event in assembler.feed(loads_event(sse, PROVIDER)):
                        yield event
        if not assembler.done:
            raise TransportError("stream ended before message_stop", provider=PROVIDER)
        yield ResponseCompleted(self._response(assembler.content(), assembler.message, output_tool))

    def _parse(self, payload: Any, output_tool: str | None) -> ModelResponse:
        if not isinstance(payload, dict) or payload.get("type") == "error":
            if isinstance(payload, dict):
                raise stream_error(payload)
            raise ProviderError(f"unexpected response: {payload!r:.200}", provider=PROVIDER)
        built = (parse_block(b) for b in payload.get("content") or () if isinstance(b, dict))
        return self._response([b for b in built if b is not None], payload, output_tool)

    def _response(
        self, blocks: list[Block], message: Mapping[str, Any], output_tool: str | None
    ) -> ModelResponse:
        stop_reason = message.get("stop_reason")
        if output_tool is not None:
            blocks, answered = _answer_from_output_tool(blocks, output_tool)
            if answered and not any(isinstance(b, ToolCall) for b in blocks):
                stop_reason = "end_turn"
        return ModelResponse(
            message=Message("assistant", tuple(blocks), provider=PROVIDER, model=self._name),
            usage=_usage(message.get("usage") or {}),
            stop_reason=stop_reason or "end_turn",
            model=message.get("model") or self._name,
            provider=PROVIDER,
            response_id=message.get("id"),
        )


def _answer_from_output_tool(blocks: list[Block], output_tool: str) -> tuple[list[Block], bool]:
    """Turn the output tool's call into the JSON text answer it stands for."""
    out: list[Block] = []
    answered = False
    for block in blocks:
        if isinstance(block, ToolCall) and block.name == output_tool and not answered:
            answered = True
            out.append(TextBlock(block.raw_arguments or json.dumps(block.arguments)))
        else:
            out.append(block)
    return out, answered
