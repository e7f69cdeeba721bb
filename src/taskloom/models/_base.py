"""The provider seam: the loop builds a `ModelRequest`, calls `Model.stream` (or
`request`) and receives a `ModelResponse`; adapters raise `ProviderError`s and
the `RetryPolicy` decides whether to try again. No wire format leaks out.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from .._codec import Stored, fast_init, stored
from .._deltas import TextDelta, ThinkingDelta
from ..errors import ProviderError
from ..messages import Message, Usage
from ..results import ToolSpec

StopReason: TypeAlias = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filter", "refusal", "error"
]


@dataclass(frozen=True, slots=True)
class ReasoningOptions(Stored):
    """How much the model should think.

    `effort` maps to OpenAI's `reasoning_effort` / Responses `reasoning.effort`
    and Anthropic's `output_config.effort`; `budget_tokens` to Anthropic's
    thinking budget. `summary` asks OpenAI Responses for reasoning summaries.
    """

    effort: Literal["minimal", "low", "medium", "high", "xhigh"] | None = None
    budget_tokens: int | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


@stored(skip=("context_window",))
@dataclass(frozen=True, slots=True)
class ModelSettings(Stored):
    """Sampling settings; None means the provider's default.

    `extra` entries go into the request body as they are, after everything
    else (e.g. `{"tool_choice": ..., "seed": 1}` for Chat Completions).
    `context_window` (tokens) is never sent: it lets an adapter tell a request
    too long for the model from a server that failed (llama.cpp answers an
    over-long prompt with an empty stream).
    """

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    reasoning: ReasoningOptions | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    context_window: int | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request: system prompt, conversation, tools, settings.

    `output_schema` asks for a JSON answer following that schema (native
    structured output where the provider has it); `output_name` names it.
    `memo` is a dict passed with every request of one run: adapters keep their
    wire encodings there, so a request encodes only what is new (None: none).
    """

    messages: Sequence[Message]
    system: str | None = None
    tools: Sequence[ToolSpec] = ()
    settings: ModelSettings = ModelSettings()
    output_schema: Mapping[str, Any] | None = None
    output_name: str = "output"
    memo: dict[Any, Any] | None = field(default=None, compare=False, repr=False)


@fast_init
@dataclass(frozen=True, slots=True)
class ModelResponse(Stored):
    """The assistant message a request produced, with its usage."""

    message: Message
    usage: Usage = Usage()
    stop_reason: StopReason | str = "end_turn"
    model: str | None = None
    provider: str | None = None
    response_id: str | None = None

    @property
    def text(self) -> str:
        """Shortcut for `message.text`."""
        return self.message.text


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a streaming tool call (its arguments arrive in pieces)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ResponseCompleted:
    """The last event of every stream: the whole response."""

    response: ModelResponse


StreamEvent: TypeAlias = TextDelta | ThinkingDelta | ToolCallDelta | ResponseCompleted


@runtime_checkable
class Model(Protocol):
    """A model on some provider.

    A model without structured output of its own says so with a false
    `native_output` attribute (optional; without it a model is taken to
    honour `ModelRequest.output_schema`): agents with an output type then
    ask it for the answer through a final-answer tool.
    """

    @property
    def name(self) -> str:
        """The model's name as its provider knows it."""
        ...

    @property
    def provider(self) -> str:
        """The wire API (`openai`, `openai-responses`, `anthropic`, `scripted`, ...)."""
        ...

    @property
    def spec(self) -> str:
        """The string `resolve_model` turns back into an equivalent model."""
        ...

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send the request and return the whole response."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send the request, yielding deltas; the last event is `ResponseCompleted`."""
        ...


async def collect(stream: AsyncIterator[StreamEvent]) -> ModelResponse:
    """Drain a stream and return the response its last event carries."""
    response: ModelResponse | None = None
    async for event in stream:
        if isinstance(event, ResponseCompleted):
            response = event.response
    if response is None:
        raise RuntimeError("model stream ended without a ResponseCompleted event")
    return response


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently the loop retries a failed model request (one
    policy for every adapter; nothing reaches the log before a response is
    complete, so retrying an attempt never duplicates output).

    `max_retries` counts retries after the first attempt. The delay before
    retry n (1-based) is `initial_delay * multiplier**(n-1)`, capped at
    `max_delay`, scaled by a random factor in `[1 - jitter, 1]`; a server's
    `Retry-After` replaces it when larger, capped at `max_retry_after`.
    """

    max_retries: int = 3
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0

    def should_retry(self, error: BaseException, retries_so_far: int) -> bool:
        """Whether `error` may be retried after `retries_so_far` retries.

        Only a `ProviderError` marked retryable is: a configuration mistake
        (`ConfigurationError`, such as a base URL that is not http(s)) fails
        the same way every time and is never retried.
        """
        return (
            retries_so_far < self.max_retries
            and isinstance(error, ProviderError)
            and error.retryable
        )

    def delay(self, retry: int, error: BaseException | None = None) -> float:
        """Seconds to wait before retry number `retry` (1-based)."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1))
        base *= 1.0 - self.jitter * random.random()
        hint = getattr(error, "retry_after", None)
        if isinstance(hint, int | float) and hint > base:
            return min(float(hint), self.max_retry_after)
        return base

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(max_retries=0)
