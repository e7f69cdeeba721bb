"""The Anthropic Messages API (`POST /v1/messages`), streamed or not.

Wire decisions, for readers comparing bodies with Anthropic's documentation:

- History: thinking goes back unchanged, and only when Anthropic wrote it;
  other providers' tool call ids are mapped to a form Anthropic accepts
  (`wire_tool_id`).
- Caching: with `cache=True` the last system block and the last tool carry
  an ephemeral `cache_control` breakpoint.
- Reasoning: `budget_tokens` sends `thinking: {type: enabled, budget_tokens}`.
  `effort` goes to `output_config.effort` on models that take it (Opus 4.5,
  Claude 4.6 on); alone, it also turns on adaptive thinking on Claude 4.6 on
  (`display: summarized` from 4.7, where thinking text is otherwise omitted)
  and a budget sized from the effort on older thinking models. Models before
  Claude 3.7 get no thinking settings, so a reasoning choice survives a
  model switch.
- Structured output: Claude 4.5 on gets `output_config.format`; older models
  a forced output tool named `request.output_name`, whose call comes back as
  a JSON text block.
- Native tools: a tool whose `ToolSpec.native` has an `anthropic` definition
  is sent as that definition (the memory tool: `{"type": "memory_20250818",
  "name": "memory"}`); a request offering one whose type needs a beta
  (`TOOL_BETAS`) turns that beta on, after the model's own: the
  `anthropic-beta` header and `?beta=true` on the URL, as Anthropic's SDK
  sends it. Its calls come back as ordinary `tool_use` blocks.
- `settings.extra` is merged into the body last (dict values one level deep);
  a `None` value removes that key (`{"thinking": None}`: effort without
  adaptive thinking).
- Server-side compaction (`betas=[AnthropicModel.COMPACTION_BETA]`, `extra=
  {"context_management": {"edits": [{"type": "compact_20260112"}]}}`): the
  `compaction` blocks answered are kept whole and go back in place, like
  thinking. A model without the beta drops them (the history they stand for
  is still sent whole) rather than have the request refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from .._deltas import TextDelta, ThinkingDelta
from ..errors import (
    AuthenticationError,
    InvalidRequest,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
    TransportError,
)
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
from ._base import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ReasoningOptions,
    StreamEvent,
    ToolCallDelta,
)
from ._http import SSE, Target, loads_event
from ._openai_common import parse_arguments
from ._resolve import ANTHROPIC
from ._wire import answer_from_output_tool, arguments_object, merge_extra, present

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._adapter import WireOptions

PROVIDER = "anthropic"
API_VERSION = "2023-06-01"
COMPACTION_BETA = "compact-2026-01-12"
"""The `anthropic-beta` feature of server-side compaction (see `AnthropicModel`'s `betas`)."""
MEMORY_TOOL_BETA = "context-management-2025-06-27"
"""The `anthropic-beta` feature of the memory tool (`memory_20250818`)."""
TOOL_BETAS: Mapping[str, str] = {"memory_20250818": MEMORY_TOOL_BETA}
"""The beta feature each native tool type needs: a request offering such a
tool turns it on (header and `?beta=true`, as Anthropic's SDK sends it)."""
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
    """A tool call id Anthropic accepts (`^[a-zA-Z0-9_-]+$`): valid ids pass,
    others are sanitized and suffixed with a hash of the original, so ids that
    sanitize alike still differ."""
    if _VALID_TOOL_ID.match(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^a-zA-Z0-9_-]', '_', call_id)}_{digest}"


def _assistant_block(block: Block, compaction: bool) -> dict[str, Any] | None:
    if isinstance(block, CompactionBlock):
        if block.provider != PROVIDER or not compaction:
            return None
        return dict(block.data)
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
            "input": arguments_object(block),
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


def _wire_messages(
    messages: Sequence[Message], *, compaction: bool = False
) -> list[dict[str, Any]]:
    """The conversation as Anthropic messages: strictly alternating roles (turns
    of one role merged), a user turn's tool results first."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        if role == "assistant":
            converted = (_assistant_block(b, compaction) for b in message.blocks)
        else:
            converted = (_user_block(b) for b in message.blocks)
        content = [b for b in converted if b is not None]
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


def _wire_tool(spec: ToolSpec) -> dict[str, Any]:
    native = spec.native.get(PROVIDER) if spec.native else None
    if native is not None:
        return dict(native)
    return {
        "name": spec.name,
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
    }


def tool_betas(tools: Iterable[ToolSpec]) -> tuple[str, ...]:
    """The `anthropic-beta` features the native definitions among `tools` need, in order."""
    wanted: dict[str, None] = {}
    for spec in tools:
        native = spec.native.get(PROVIDER) if spec.native else None
        beta = None if native is None else TOOL_BETAS.get(str(native.get("type")))
        if beta is not None:
            wanted[beta] = None
    return tuple(wanted)


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
    settings: ModelSettings,
    default_max_tokens: int | None,
    stream: bool,
    cache: bool,
    compaction: bool,
) -> dict[str, Any]:
    family = _Family.of(model)
    messages = _wire_messages(request.messages, compaction=compaction)
    body: dict[str, Any] = {"model": model, "messages": messages}
    if request.system:
        body["system"] = [{"type": "text", "text": request.system}]
    tools = [_wire_tool(t) for t in request.tools]
    thinking, effort = _thinking(family, settings.reasoning)
    if thinking is not None and thinking["type"] == "enabled" and _ends_in_unthought_tool_use(body):
        # With thinking enabled, Anthropic rejects a tool loop whose last
        # assistant turn does not start with its own thinking (a turn written
        # by another provider): that request goes without thinking.
        thinking = None
    output_config: dict[str, Any] = {"effort": effort} if effort else {}
    output_tool = _output_tool(model, request)
    if request.output_schema is not None and output_tool is None:
        schema = _strict_schema(dict(request.output_schema))
        output_config["format"] = {"type": "json_schema", "schema": schema}
    elif request.output_schema is not None and output_tool is not None:
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
    body.update(
        present(
            thinking=thinking,
            output_config=output_config or None,
            temperature=settings.temperature,
            top_p=settings.top_p,
            stop_sequences=list(settings.stop) or None,
        )
    )
    body["stream"] = stream
    merge_extra(body, settings.extra, drop_nested_none=False)
    return body


def _output_tool(model: str, request: ModelRequest) -> str | None:
    if request.output_schema is None or _Family.of(model).native_output:
        return None
    return request.output_name


def _max_tokens(family: _Family, thinking: Mapping[str, Any] | None) -> int:
    # Anthropic requires `max_tokens`: the default leaves room to answer.
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
    # The API reads a turn from its compaction block on: the thinking comes after it.
    kinds = [b["type"] for b in last["content"] if b["type"] != "compaction"]
    return kinds[0] not in ("thinking", "redacted_thinking")


class AnthropicModel(WireModel):
    """A Claude model over the Anthropic Messages API (see `WireModel` for the options).

    `max_tokens` overrides the per-family default when the request's settings
    give none; `cache` places prompt-cache breakpoints on the system prompt
    and tools. `betas` names Anthropic beta features to turn on (the
    `anthropic-beta` header; an `anthropic-beta` in `headers` replaces it),
    e.g. `[AnthropicModel.COMPACTION_BETA]` for server-side compaction. With
    `stream=False`, `stream()` yields the whole answer as one `ResponseCompleted`.
    """

    __slots__ = ("_betas", "_cache", "_compacts", "_max_tokens")

    _HOME = ANTHROPIC
    COMPACTION_BETA: ClassVar[str] = COMPACTION_BETA
    """The beta feature of server-side compaction, for `betas`."""
    MEMORY_TOOL_BETA: ClassVar[str] = MEMORY_TOOL_BETA
    """The beta feature of the memory tool: turned on by itself for a request
    that offers it (a tool whose `ToolSpec.native` names `memory_20250818`)."""

    def __init__(
        self,
        model_name: str,
        *,
        max_tokens: int | None = None,
        cache: bool = True,
        betas: Sequence[str] = (),
        **options: Unpack[WireOptions],
    ) -> None:
        # Set before the base reads the headers (`_wire_headers`).
        self._betas = (betas,) if isinstance(betas, str) else tuple(betas)
        super().__init__(model_name, **options)
        self._max_tokens = max_tokens
        self._cache = cache
        sent = (v for k, v in self._target.headers.items() if k.lower() == "anthropic-beta")
        features = {f.strip() for f in ",".join(sent).split(",")}
        self._compacts = any(f.startswith("compact-") for f in features)

    def _native_output(self) -> bool:
        # Before Claude 4.5 agents ask through their final-answer tool (a request
        # with an output schema anyway gets the forced output tool).
        return _Family.of(self._name).native_output

    def _endpoint(self, base_url: str) -> str:
        return f"{base_url}/messages" if base_url.endswith("/v1") else f"{base_url}/v1/messages"

    def _wire_headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION, "content-type": "application/json"}
        if self._betas:
            headers["anthropic-beta"] = ",".join(self._betas)
        if key is not None:
            headers["x-api-key"] = key
        return headers

    def _target_for(self, request: ModelRequest, stream: bool) -> Target:
        target = super()._target_for(request, stream)
        if not request.tools:
            return target
        wanted = tool_betas(request.tools)
        return target if not wanted else _with_betas(target, wanted)

    def _encode(
        self, request: ModelRequest, settings: ModelSettings, stream: bool
    ) -> dict[str, Any]:
        return _build_body(
            self._name, request, settings, self._max_tokens, stream, self._cache, self._compacts
        )

    def _assembler(self, request: ModelRequest, emit: bool) -> StreamAssembler:
        return StreamAssembler(self._name, _output_tool(self._name, request))

    def _decode(self, payload: Any, request: ModelRequest) -> ModelResponse:
        if not isinstance(payload, dict) or payload.get("type") == "error":
            if isinstance(payload, dict):
                raise stream_error(payload)
            raise ProviderError(f"unexpected response: {payload!r:.200}", provider=PROVIDER)
        built = (parse_block(b) for b in payload.get("content") or () if isinstance(b, dict))
        blocks = [b for b in built if b is not None]
        return _response(self._name, blocks, payload, _output_tool(self._name, request))


def _with_betas(target: Target, wanted: Sequence[str]) -> Target:
    """`target` with the `wanted` beta features added to its `anthropic-beta`
    header (those it has stay first) and `beta=true` in its query."""
    headers = {k: v for k, v in target.headers.items() if k.lower() != "anthropic-beta"}
    sent = [v for k, v in target.headers.items() if k.lower() == "anthropic-beta"]
    features = [f.strip() for f in ",".join(sent).split(",") if f.strip()]
    features += [f for f in wanted if f not in features]
    headers["anthropic-beta"] = ",".join(features)
    url = target.url
    if "beta=true" not in urlsplit(url).query.split("&"):
        url += ("&" if "?" in url else "?") + "beta=true"
    return dataclasses.replace(target, url=url, headers=headers)


# --- answers: stream events (`StreamAssembler`) or a whole body (`_decode`) ---------


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
                arguments, raw = parse_arguments("".join(self.tools[index][1]))
                out.append(ToolCall(str(block["id"]), str(block["name"]), arguments, raw))
            else:
                out.append(parse_block(block))
        return [b for b in out if b is not None]


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
    # As Anthropic (and its SDK) reports it: cache reads and writes apart from input.
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=int(raw.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(raw.get("cache_creation_input_tokens") or 0),
        reasoning_tokens=int(details.get("thinking_tokens") or 0),
        requests=1,
    )
