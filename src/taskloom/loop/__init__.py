"""The round loop: options, budgets, strategies, compaction, streaming.

What a user sets and reads of a run is here (`RunOptions`, `Budget`, the
round strategies, `RunStream`); a run's result and status are values of
`taskloom.results`. The loop knows nothing of runtimes, stores, background
work, delegation or tracing: it talks to a run through the ports of
`taskloom.loop.ports`, which is all other packages of taskloom use of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._boundary import RoundBoundary
from ._options import DEFAULT_MAX_ROUNDS, RunOptions
from ._stream import RunStream
from ._tree_budget import Budget, Price

# The round strategies import on first use: a run without one never needs
# them. Type checkers see them through the imports below.
if TYPE_CHECKING:
    from ._compact import SUMMARY_PROMPT, Compaction, ContextEstimate
    from ._strategy import (
        Continue,
        Inject,
        ReasoningChange,
        RoundAdjustment,
        RoundContext,
        RoundDecision,
        RoundStrategy,
        RoundToolResult,
        Stop,
    )

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

_LAZY = {
    name: "taskloom.loop._strategy"
    for name in (
        "Continue",
        "Inject",
        "ReasoningChange",
        "RoundAdjustment",
        "RoundContext",
        "RoundDecision",
        "RoundStrategy",
        "RoundToolResult",
        "Stop",
    )
}
# Compaction, too: only an agent with a policy needs its machinery.
_LAZY.update(
    dict.fromkeys(("SUMMARY_PROMPT", "Compaction", "ContextEstimate"), "taskloom.loop._compact")
)

__getattr__ = lazy_exports(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
