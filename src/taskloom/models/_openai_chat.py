"""The OpenAI Chat Completions wire adapter (OpenAI and compatible servers).

One adapter serves api.openai.com and every server that speaks the same
protocol (Ollama, vLLM, LM Studio, llama.cpp, OpenRouter, Groq, Together,
DeepSeek, ...); `provider` names which, and its preset's `ChatQuirks` decide
the few places where they differ. `openai:` pointed at another host is the
generic compatible server.

Compatible servers fail in ways OpenAI does not: some stream no usage (it is
then estimated and marked so), and llama.cpp answers a prompt longer than
its window with an empty stream, or (behind a router) with an empty answer
that looks finished. With the window known (`ModelSettings.context_window`,
or the model's well-known one) either is `ContextWindowExceeded`, not a
transport error to retry nor an empty success.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

from .._deltas import TextDelta, ThinkingDelta
from ..errors import ProviderError, TransportError
from ..messages import Block, Message, TextBlock, ThinkingBlock, ToolCall, Usage
from ._adapter import WireModel, context_overflow, same_origin
from ._base import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    StopReason,
    StreamEvent,
    ToolCallDelta,
)
from ._http import SSE, error_in_body, loads_event
from ._openai_common import build_messages, build_tools, parse_arguments, response_format
from ._resolve import COMPATIBLE, PRESETS, ChatQuirks
from ._wire import estimated_usage, json_body, new_call_id, present, replayed_deltas

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._adapter import WireOptions


_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


_KEPT_LISTS = ("messages", "tools")


class OpenAIChatModel(WireModel):
    """A model behind `POST {base_url}/chat/completions`.

    `provider` names the server (`openai`, or a preset such as `ollama`), whose
    preset gives the default `base_url`, key variable and `quirks` (how it
    departs from OpenAI's own host); see `WireModel` for the options. With
    `stream=False`, `stream()` replays the whole response as deltas. Thinking
    blocks are never sent.
    """

    __slots__ = ("_quirks",)

    _HOME = PRESETS["openai"]

    def __init__(
        self, model_name: str, *, provider: str = "openai", **options: Unpack[WireOptions]
    ) -> None:
        home = PRESETS.get(provider, self._HOME)
        self._configure(model_name, provider, home, options)
        on_its_host = home.name != "openai" or same_origin(self._base_url, home.base_url)
        self._quirks = home.quirks if on_its_host else COMPATIBLE

    @property
    def quirks(self) -> ChatQuirks:
        """How the server this model points at departs from OpenAI's own host."""
        return self._quirks

    def _endpoint(self, base_url: str) -> str:
        return f"{base_url}/chat/completions"

    def _encode(
        self, request: ModelRequest, settings: ModelSettings, stream: bool
    ) -> dict[str, Any]:
        messages = build_messages(request, tool_turn_content=self._quirks.tool_turn_content)
        body: dict[str, Any] = {"model": self._name, "messages": messages}
        if request.tools:
            body["tools"] = build_tools(request.tools, request.memo)
        reasoning = settings.reasoning
        sampling = present(
            temperature=settings.temperature,
            top_p=settings.top_p,
            stop=list(settings.stop) or None,
            **{self._quirks.max_tokens_field: settings.max_tokens},
            reasoning_effort=None if reasoning is None else reasoning.effort,
        )
        body.update(sampling)
        if request.output_schema is not None:
            body["response_format"] = response_format(request.output_schema, request.output_name)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(settings.extra)
        return body

    def _encoded(self, request: ModelRequest, body: dict[str, Any]) -> bytes | None:
        # The messages' and tools' wire forms are kept across a run's requests
        # (`build_messages`, `build_tools`), so their text can be too.
        return json_body(body, request.memo, _KEPT_LISTS)

    def _assembler(self, request: ModelRequest, emit: bool) -> _StreamState:
        return _StreamState(self._provider, self._name, request, self._window(request), emit)

    def _replayed(self, response: ModelResponse) -> Iterable[StreamEvent]:
        return replayed_deltas(response.message)

    def _decode(self, payload: Any, request: ModelRequest) -> ModelResponse:
        payload_is_object = is_object(payload)
        if payload_is_object and payload.get("error"):
            raise error_in_body(payload, self._provider)
        choices = payload.get("choices") if payload_is_object else None
        if type(choices) is not list or not choices or not is_object(choices[0]):
            raise ProviderError(
                f"response is not a chat completion: {json.dumps(payload)[:200]}",
                status=200,
                provider=self._provider,
                retryable=False,
            )
        message = choices[0].get("message") or {}
        calls = [_tool_call(tc) for tc in message.get("tool_calls") or () if is_object(tc)]
        return _response(
            self._provider,
            self._name,
            thinking=reasoning_of(message),
            text=text_of(message.get("content")),
            refusal=message.get("refusal"),
            calls=calls,
            finish_reason=choices[0].get("finish_reason"),
            usage=payload.get("usage"),
            wire=payload,
        )


def _tool_call(wire: Mapping[str, Any]) -> ToolCall:
    function = wire.get("function")
    if not is_object(function):
        function = {}
    arguments, raw_arguments = parse_arguments(function.get("arguments"))
    call_id, name = wire.get("id"), function.get("name")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else new_call_id(),
        name=name if isinstance(name, str) else "",
        arguments=arguments,
        raw_arguments=raw_arguments,
    )


def _response(
    provider: str,
    model_name: str,
    *,
    thinking: str,
    text: str,
    refusal: Any,
    calls: list[ToolCall],
    finish_reason: Any,
    usage: Any,
    wire: Mapping[str, Any],
) -> ModelResponse:
    # A refusal arrives in its own field with `finish_reason: stop`: it becomes
    # the turn's text, so the transcript shows what the model said.
    reason = stop_reason(finish_reason, bool(calls))
    if not text and isinstance(refusal, str) and refusal:
        text, reason = refusal, "refusal"
    blocks = assistant_blocks(thinking, text, calls, provider)
    model, response_id = wire.get("model"), wire.get("id")
    return ModelResponse(
        message=Message("assistant", blocks, provider=provider, model=model_name),
        usage=usage_of(usage),
        stop_reason=reason,
        model=model if isinstance(model, str) else None,
        provider=provider,
        response_id=response_id if isinstance(response_id, str) else None,
    )


@dataclass(slots=True, eq=False)
class _PendingCall:
    index: int
    id: str | None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _StreamState:
    """Accumulates `chat.completion.chunk`s into one response."""

    provider: str
    model_name: str
    request: ModelRequest
    window: int | None
    emit: bool
    chunks: int = 0
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: list[_PendingCall] = field(default_factory=list)
    by_index: dict[int, _PendingCall] = field(default_factory=dict)
    by_id: dict[str, _PendingCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Any = None
    response_id: str | None = None
    model: str | None = None
    done: bool = False

    def feed(self, sse: SSE) -> list[StreamEvent]:
        """Take one event; return the deltas it carried (none when not emitting).
        `[DONE]` ends the answer; whatever follows it is ignored."""
        if self.done:
            return []
        if sse.data == "[DONE]":
            self.done = True
            return []
        chunk = loads_event(sse, self.provider)
        self.chunks += 1
        return self._chunk(chunk) if is_object(chunk) else []

    def _chunk(self, chunk: Mapping[str, Any]) -> list[StreamEvent]:
        if chunk.get("error"):
            raise error_in_body(chunk, self.provider)
        kind = chunk.get("object")
        if isinstance(kind, str) and not kind.startswith("chat.completion"):
            # Not a completion chunk: Azure OpenAI's content-filter events
            # (`object: ""`, `id: ""`, no delta), skipped as OpenAI's SDK
            # skips them. A server that names no object is read as before.
            return []
        if not self.response_id and type(chunk.get("id")) is str:
            self.response_id = chunk["id"]
        if not self.model and type(chunk.get("model")) is str:
            self.model = chunk["model"]
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        events: list[StreamEvent] = []
        for choice in chunk.get("choices") or ():
            # Only the first choice is ours: taskloom never asks for n > 1.
            if not is_object(choice):
                continue
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            # Most chunks carry neither reasoning nor text: look before parsing.
            reasoning = (
                reasoning_of(delta) if "reasoning_content" in delta or "reasoning" in delta else ""
            )
            if reasoning:
                self.thinking.append(reasoning)
                if self.emit:
                    events.append(ThinkingDelta(text=reasoning))
            content = delta.get("content")
            if content and type(content) is not str:
                content = text_of(content)
            if content:
                self.text.append(content)
                if self.emit:
                    events.append(TextDelta(text=content))
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self.refusal.append(refusal)
            for tool_call in delta.get("tool_calls") or ():
                if is_object(tool_call):
                    self._tool_delta(tool_call, events)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return events

    def _slot(self, tool_call: Mapping[str, Any]) -> tuple[_PendingCall, bool]:
        call_id = tool_call.get("id") or None
        if isinstance(call_id, str) and call_id in self.by_id:
            return self.by_id[call_id], False
        index = tool_call.get("index")
        if isinstance(index, int):
            current = self.by_index.get(index)
            # Some servers number every parallel call 0: a new id at a used
            # index is a new call, not more of the old one.
            if current is not None and (call_id is None or current.id in (None, call_id)):
                if current.id is None and isinstance(call_id, str):
                    current.id = call_id
                    self.by_id[call_id] = current
                return current, False
        elif call_id is None and self.calls:
            return self.calls[-1], False
        pending = _PendingCall(len(self.calls), call_id if isinstance(call_id, str) else None)
        self.calls.append(pending)
        if isinstance(index, int):
            self.by_index[index] = pending
        if pending.id is not None:
            self.by_id[pending.id] = pending
        return pending, True

    def _tool_delta(self, tool_call: Mapping[str, Any], events: list[StreamEvent]) -> None:
        pending, is_new = self._slot(tool_call)
        function = tool_call.get("function") or {}
        name = function.get("name")
        # The name arrives once; servers that repeat it must not double it.
        fresh_name = False
        if isinstance(name, str) and name and not pending.name:
            pending.name, fresh_name = name, True
        piece = function.get("arguments")
        if isinstance(piece, str) and piece:
            pending.arguments.append(piece)
        else:
            piece = ""
        if self.emit and (is_new or fresh_name or piece):
            events.append(
                ToolCallDelta(
                    index=pending.index,
                    id=pending.id if is_new else None,
                    name=pending.name if is_new or fresh_name else None,
                    arguments=piece,
                )
            )

    def finish(self) -> ModelResponse:
        """The whole response (usage estimated when the server sent none); a
        stream cut before its end raises `TransportError`, or
        `ContextWindowExceeded` when empty for a request over the window
        (what llama.cpp sends for a prompt over its window)."""
        if not self.done and self.finish_reason is None:
            if self.chunks == 0:
                empty = "an empty stream"
                overflow = context_overflow(self.request, self.window, self.provider, empty)
                if overflow is not None:
                    raise overflow
            raise TransportError(
                "stream ended before the response finished", provider=self.provider
            )
        calls = []
        for pending in self.calls:
            arguments, raw = parse_arguments("".join(pending.arguments))
            call_id = pending.id or new_call_id()
            calls.append(ToolCall(call_id, pending.name, arguments, raw_arguments=raw))
        response = _response(
            self.provider,
            self.model_name,
            thinking="".join(self.thinking),
            text="".join(self.text),
            refusal="".join(self.refusal),
            calls=calls,
            finish_reason=self.finish_reason,
            usage=self.usage,
            wire={"id": self.response_id, "model": self.model},
        )
        if self.usage is None:
            usage = estimated_usage(self.request, response.message)
            response = dataclasses.replace(response, usage=usage)
        return response


def text_of(content: Any) -> str:
    """Assistant content as text (a string, or a list of parts from some servers)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def reasoning_of(obj: Mapping[str, Any]) -> str:
    """The reasoning text a message or delta carries: `reasoning_content`
    (DeepSeek, vLLM, llama.cpp) or `reasoning` (Ollama, OpenRouter), the
    first present (a few servers send both)."""
    value = obj.get("reasoning_content") or obj.get("reasoning")
    return value if isinstance(value, str) else ""


def is_object(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """Whether a decoded JSON value is an object (a dict; any mapping passes)."""
    # Decoded JSON objects are dicts: the exact type test spares the ABC check.
    return type(value) is dict or isinstance(value, Mapping)


def _int(obj: Any, key: str) -> int:
    if not is_object(obj):
        return 0
    value = obj.get(key)
    return value if type(value) is int else 0


def usage_of(usage: Any) -> Usage:
    """Usage of one request from a `usage` object (absent counts as zero)."""
    if not is_object(usage):
        return Usage(requests=1)
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    return Usage(
        prompt if type(prompt) is int else 0,
        completion if type(completion) is int else 0,
        _int(prompt_details, "cached_tokens") if prompt_details else 0,
        0,
        _int(completion_details, "reasoning_tokens") if completion_details else 0,
        1,
    )


def stop_reason(finish_reason: Any, has_tool_calls: bool) -> StopReason | str:
    """taskloom's stop reason for a `finish_reason` (unknown ones kept as they are)."""
    if not finish_reason:
        return "tool_use" if has_tool_calls else "end_turn"
    reason = str(finish_reason)
    return _STOP_REASONS.get(reason, reason)


def assistant_blocks(
    thinking: str, text: str, calls: Iterable[ToolCall], provider: str
) -> tuple[Block, ...]:
    """An assistant turn's blocks in taskloom's order: thinking, text, calls."""
    blocks: list[Block] = []
    if thinking:
        blocks.append(ThinkingBlock(text=thinking, provider=provider))
    if text:
        blocks.append(TextBlock(text))
    blocks.extend(calls)
    return tuple(blocks)
