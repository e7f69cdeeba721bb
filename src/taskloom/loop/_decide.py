"""The strategy's say at a run's round boundaries, and what its decisions do."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..messages import Message, ToolResult
from ..results import RunStatus
from ._boundary import RoundBoundary
from ._result import End
from ._scope import RunState, append_message
from ._strategy import (
    RoundAdjustment,
    RoundContext,
    RoundDecision,
    RoundStrategy,
    RoundToolResult,
)

if TYPE_CHECKING:
    from ._compact import Compactor

PROCEED = RoundDecision.proceed()
"""The decision of a run without a strategy, at every boundary."""


class Decisions:
    """Asks a run's strategy at its round boundaries and carries out what it
    decides: an adjustment (model, reasoning), an injected user turn, a stop."""

    __slots__ = ("_compactor", "_run", "_strategy")

    def __init__(self, strategy: RoundStrategy, run: RunState, compactor: Compactor | None) -> None:
        self._strategy = strategy
        self._run = run
        self._compactor = compactor

    @staticmethod
    def proceeds(decision: RoundDecision) -> bool:
        """Whether `decision` is the plain `proceed()` a run without a strategy
        takes at every boundary (nothing to carry out)."""
        return decision is PROCEED

    async def after_results(self, results: Sequence[ToolResult]) -> RoundDecision:
        """The decision once a turn's tool results are committed."""
        return await self._ask(
            RoundBoundary.TOOL_RESULTS_COMMITTED,
            tool_results=tuple(
                RoundToolResult(r.tool_call_id, r.tool_name, r.is_error) for r in results
            ),
        )

    async def after_answer(self, message: Message) -> RoundDecision:
        """The decision once an assistant message without calls is committed."""
        return await self._ask(RoundBoundary.ASSISTANT_MESSAGE_COMMITTED, assistant_message=message)

    async def apply(self, decision: RoundDecision) -> End | None:
        """Carry out a decision: its adjustment, then its injected turn or
        stop (the run's end)."""
        await self.adjust(decision.adjust)
        if decision.action == "stop":
            return End(RunStatus.STOPPED)
        if decision.action == "inject":
            message = Message.user(decision.content or "")
            await append_message(self._run.journal, self._run.scope.run_id, message)
        return None

    async def adjust(self, adjust: RoundAdjustment | None) -> None:
        """Persist an adjustment's model and reasoning changes."""
        if adjust is None:
            return
        models = self._run.ports.models
        if adjust.model is not None:
            await models.set_model(adjust.model)
        if adjust.reasoning is not None:
            await models.set_reasoning(adjust.reasoning.reasoning)

    async def _ask(
        self,
        boundary: RoundBoundary,
        *,
        tool_results: tuple[RoundToolResult, ...] = (),
        assistant_message: Message | None = None,
    ) -> RoundDecision:
        counters, scope = self._run.counters, self._run.scope
        ctx = RoundContext(
            boundary,
            counters.rounds,
            counters.model_requests,
            counters.transport_retries,
            tool_results=tool_results,
            assistant_message=assistant_message,
            session_id=scope.session_id,
            run_id=scope.run_id,
        )
        compactor = self._compactor
        if compactor is not None:
            ctx = replace(ctx, context_tokens=compactor.tokens(), context_window=compactor.window())
        decision = await self._strategy.on_round(ctx)
        if compactor is not None and decision.compaction != "auto":
            compactor.hint = decision.compaction
        return decision
