"""Models for tests and demos that play a script instead of calling a provider.

They are real `Model`s: the loop cannot tell them from a wire adapter. Both
record every request they receive in `requests`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from .._deltas import TextDelta, ThinkingDelta
from ..errors import ModelScriptExhausted
from ..messages import Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, Usage
from ._base import ModelRequest, ModelResponse, ResponseCompleted, StreamEvent

ToolCallSpec: TypeAlias = ToolCall | tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model turn (build it with `reply(...)`)."""

    text: str | None
    tool_calls: tuple[ToolCallSpec, ...]
    thinking: str | ThinkingBlock | None
    usage: Usage | None
    stop_reason: str | None
    error: BaseException | None
    delay: float


def reply(
    text: str | None = None,
    *,
    tool_calls: Iterable[ToolCallSpec] = (),
    thinking: str | ThinkingBlock | None = None,
    usage: Usage | None = None,
    stop_reason: str | None = None,
    error: BaseException | None = None,
    delay: float = 0.0,
) -> Reply:
    """A scripted turn: text and/or tool calls `(name, args[, id])`, optional
    thinking and usage; or `error=` to make that request raise (to exercise
    retries). `delay` sleeps before answering (for demos and timing tests).
    """
    return Reply(text, tuple(tool_calls), thinking, usage, stop_reason, error, delay)


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _request_text(request: ModelRequest) -> str:
    parts = [request.system or ""]
    for m in request.messages:
        for b in m.blocks:
            if isinstance(b, TextBlock):
                parts.append(b.text)
            elif isinstance(b, ToolResult):
                parts.append(b.content)
            elif isinstance(b, ToolCall):
                parts.append(json.dumps(b.arguments))
    return " ".join(parts)


def _build_response(
    item: Reply, request: ModelRequest, counter: Iterator[int], name: str, kind: str
) -> ModelResponse:
    calls: list[ToolCall] = []
    for spec in item.tool_calls:
        if isinstance(spec, ToolCall):
            calls.append(spec)
            continue
        n = next(counter)
        call_id = spec[2] if len(spec) == 3 else f"call_{n}"  # type: ignore[misc]
        calls.append(ToolCall(call_id, spec[0], dict(spec[1])))
    thinking: list[ThinkingBlock] = []
    if isinstance(item.thinking, ThinkingBlock):
        thinking.append(item.thinking)
    elif item.thinking:
        thinking.append(ThinkingBlock(item.thinking, signature="scripted", provider="scripted"))
    # The answer names its kind (`function` for a FunctionModel), which is
    # how logs and the console tell the two apart.
    message = Message.assistant(
        item.text, tool_calls=calls, thinking=thinking, provider=kind, model=name
    )
    usage = item.usage
    if usage is None:
        out = (item.text or "") + "".join(json.dumps(c.arguments) for c in calls)
        usage = Usage(_estimate_tokens(_request_text(request)), _estimate_tokens(out) if out else 0)
    if usage.requests == 0:
        usage = usage + Usage(requests=1)
    stop = item.stop_reason or ("tool_use" if calls else "end_turn")
    return ModelResponse(message, usage, stop, model=name, provider=kind)


class _Scripted:
    """What the two scripted models share: a name, the `scripted` provider, and
    `native_output` (False plays a model without structured output: agents
    then offer it their final-answer tool)."""

    name: str
    # Always `scripted`: thinking a scripted model produced is replayed only to one.
    provider = "scripted"
    _kind = "scripted"
    _chunk_delay = 0.0
    _counter: Iterator[int]
    native_output: bool = True

    @property
    def spec(self) -> str:
        """`scripted:<name>` or `function:<name>`; register the instance to resolve it."""
        return f"{self._kind}:{self.name}"

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The whole response to `request` (see `Model.request`)."""
        raise NotImplementedError

    async def _play(self, item: Reply, request: ModelRequest) -> ModelResponse:
        if item.delay:
            await asyncio.sleep(item.delay)
        if item.error is not None:
            raise item.error
        return _build_response(item, request, self._counter, self.name, self._kind)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Deltas (text word by word), then `ResponseCompleted` (see `Model.stream`)."""
        response = await self.request(request)
        deltas: list[StreamEvent] = []
        for block in response.message.blocks:
            if isinstance(block, ThinkingBlock) and block.text:
                deltas.append(ThinkingDelta(text=block.text))
            elif isinstance(block, TextBlock):
                words = block.text.split(" ")
                deltas += [TextDelta(text=w + " ") for w in words[:-1]]
                deltas.append(TextDelta(text=words[-1]))
        for delta in deltas:
            if self._chunk_delay:
                await asyncio.sleep(self._chunk_delay)
            yield delta
        yield ResponseCompleted(response)


class ScriptedModel(_Scripted):
    """Plays `replies` in order, one per request; fails loudly past the end.

    An item may be a `reply(...)`, a plain string (a text reply), or an
    exception (raised by that request).
    """

    def __init__(
        self,
        replies: Sequence[Reply | str | BaseException],
        *,
        name: str = "scripted",
        chunk_delay: float = 0.0,
        native_output: bool = True,
    ) -> None:
        self._replies = list(replies)
        self.name = name
        self.native_output = native_output
        self._chunk_delay = chunk_delay
        self._counter = itertools.count(1)
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        """Replies not yet played."""
        return len(self._replies) - len(self.requests)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The next scripted reply to `request` (see `Model.request`)."""
        index = len(self.requests)
        self.requests.append(request)
        # Like any model call, give the event loop a turn: background work and
        # other runs progress while a scripted run goes on.
        await asyncio.sleep(0)
        if index >= len(self._replies):
            raise ModelScriptExhausted(
                f"ScriptedModel {self.name!r} was asked for reply #{index + 1} "
                f"but only {len(self._replies)} were scripted"
            )
        item = self._replies[index]
        if isinstance(item, BaseException):
            raise item
        return await self._play(reply(item) if isinstance(item, str) else item, request)


ModelFunction: TypeAlias = Callable[
    [ModelRequest], "Reply | ModelResponse | str | Awaitable[Reply | ModelResponse | str]"
]


class FunctionModel(_Scripted):
    """Answers each request with `fn(request)` (sync or async), which returns
    a `reply(...)`, a plain string, or a `ModelResponse`."""

    _kind = "function"

    def __init__(
        self, fn: ModelFunction, *, name: str = "function", native_output: bool = True
    ) -> None:
        self._fn = fn
        self.name = name
        self.native_output = native_output
        self._counter = itertools.count(1)
        self.requests: list[ModelRequest] = []

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The whole response to `request` (see `Model.request`)."""
        self.requests.append(request)
        await asyncio.sleep(0)  # a turn for the rest of the event loop, as ScriptedModel gives
        out: Any = self._fn(request)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, ModelResponse):
            return out
        if isinstance(out, str):
            out = reply(out)
        if not isinstance(out, Reply):
            raise TypeError(f"FunctionModel function returned {type(out).__name__}, not a reply")
        return await self._play(out, request)
