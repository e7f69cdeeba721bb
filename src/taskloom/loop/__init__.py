"""The round loop: options, budgets, strategies, compaction, streaming.

What a user sets and reads of a run is here (`RunOptions`, `Budget`, the
round strategies, `RunStream`); a run's result and status are values of
`taskloom.results`. The loop knows nothing of runtimes, stores, background
work, delegation or tracing: it talks to a run through the ports of
`taskloom.loop.ports`, which is all other packages of taskloom use of it.
"""

from __future__ import annotations

from ._compact import SUMMARY_PROMPT, Compaction, ContextEstimate
from ._options import DEFAULT_MAX_ROUNDS, RunOptions
from ._strategy import (
    Continue,
    Inject,
    ReasoningChange,
    RoundAdjustment,
    RoundBoundary,
    RoundContext,
    RoundDecision,
    RoundStrategy,
    RoundToolResult,
    Stop,
)
from ._stream import RunStream
from ._tree_budget import Budget, Price

__all__ = [
    "DEFAULT_MAX_ROUNDS",
    "SUMMARY_PROMPT",
    "Budget",
    "Compaction",
    "ContextEstimate",
    "Continue",
    "Inject",
    "Price",
    "ReasoningChange",
    "RoundAdjustment",
    "RoundBoundary",
    "RoundContext",
    "RoundDecision",
    "RoundStrategy",
    "RoundToolResult",
    "RunOptions",
    "RunStream",
    "Stop",
]
