"""Round strategies: the host's say at every round boundary (proceed, inject
a corrective user turn, or stop, maybe adjusting model or reasoning); with
none the loop behaves as if every decision were `proceed()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from ..messages import Message
from ..models import ReasoningOptions
from ._boundary import RoundBoundary

if TYPE_CHECKING:
    from ..models import Model


@dataclass(frozen=True, slots=True)
class RoundToolResult:
    """One committed tool result, as a strategy sees it."""

    tool_use_id: str
    tool_name: str
    is_error: bool


@dataclass(frozen=True, slots=True)
class RoundContext:
    """What a strategy knows at a boundary.

    `assistant_message` is set only at ASSISTANT_MESSAGE_COMMITTED,
    `tool_results` only at TOOL_RESULTS_COMMITTED.
    """

    boundary: RoundBoundary
    rounds_completed: int
    model_requests: int
    transport_retries: int
    assistant_message: Message | None = None
    tool_results: tuple[RoundToolResult, ...] = ()
    session_id: str = ""
    run_id: str = ""
    context_tokens: int | None = None
    context_window: int | None = None


@dataclass(frozen=True, slots=True)
class ReasoningChange:
    """Set or clear the session's reasoning options (`set(...)` / `clear()`)."""

    reasoning: ReasoningOptions | None

    @classmethod
    def set(cls, reasoning: ReasoningOptions) -> ReasoningChange:
        """Set the session's reasoning options."""
        return cls(reasoning)

    @classmethod
    def clear(cls) -> ReasoningChange:
        """Clear the session's reasoning options (provider defaults)."""
        return cls(None)


@dataclass(frozen=True, slots=True)
class RoundAdjustment:
    """A change for the next request on: a model (instance or spec string) and/or reasoning."""

    model: Model | str | None = None
    reasoning: ReasoningChange | None = None


@dataclass(frozen=True, slots=True)
class RoundDecision:
    """What the loop does next. Build with `proceed()`, `inject(...)`, `stop()`.

    `compaction` (for agents with a `Compaction` policy) is `"auto"` (the
    policy decides), `"now"` (compact before the next request) or `"veto"`
    (not before the next request).
    """

    action: Literal["continue", "inject", "stop"] = "continue"
    content: str | None = None
    adjust: RoundAdjustment | None = None
    compaction: Literal["auto", "now", "veto"] = "auto"

    @staticmethod
    def proceed(
        adjust: RoundAdjustment | None = None,
        *,
        compaction: Literal["auto", "now", "veto"] = "auto",
    ) -> RoundDecision:
        """Carry on as the loop would without a strategy."""
        return Continue(adjust, compaction=compaction)

    @staticmethod
    def inject(
        content: str,
        adjust: RoundAdjustment | None = None,
        *,
        compaction: Literal["auto", "now", "veto"] = "auto",
    ) -> RoundDecision:
        """Append `content` as a user turn and ask the model again."""
        return Inject(content, adjust, compaction=compaction)

    @staticmethod
    def stop() -> RoundDecision:
        """End the run now with status STOPPED."""
        return Stop()


@dataclass(frozen=True, slots=True, init=False)
class Continue(RoundDecision):
    """Proceed, optionally adjusting model or reasoning."""

    def __init__(
        self,
        adjust: RoundAdjustment | None = None,
        *,
        compaction: Literal["auto", "now", "veto"] = "auto",
    ) -> None:
        RoundDecision.__init__(self, "continue", None, adjust, compaction)


@dataclass(frozen=True, slots=True, init=False)
class Inject(RoundDecision):
    """Append a corrective user turn, optionally adjusting model or reasoning."""

    def __init__(
        self,
        content: str,
        adjust: RoundAdjustment | None = None,
        *,
        compaction: Literal["auto", "now", "veto"] = "auto",
    ) -> None:
        if not content:
            raise ValueError("Inject needs non-empty content")
        RoundDecision.__init__(self, "inject", content, adjust, compaction)


@dataclass(frozen=True, slots=True, init=False)
class Stop(RoundDecision):
    """End the run with status STOPPED."""

    def __init__(self) -> None:
        RoundDecision.__init__(self, "stop")


@runtime_checkable
class RoundStrategy(Protocol):
    """Decides at each round boundary; see the module docstring."""

    async def on_round(self, ctx: RoundContext) -> RoundDecision:
        """The decision at this boundary."""
        ...
