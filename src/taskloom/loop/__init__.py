"""The round loop: options, strategies, tool execution, approvals, streaming.

The loop talks to its session, to background notices and to whoever
observes its runs through the ports defined here (`SessionPort`,
`NoticesPort`, `RunObserver`); it knows nothing of runtimes, stores,
background work, delegation or tracing.
"""

from __future__ import annotations

from .._control import RunControls, StopSignal, UsageMeter
from ..results import BudgetLeft, PendingCall, PendingInput, RunResult, RunStatus
from ._budget import MIN_ANSWER_TOKENS, Budget, Price, TreeBudget
from ._compact import SUMMARY_PROMPT, Compaction, ContextEstimate
from ._log import INTERRUPTED, SessionLog, denial_text
from ._options import RunOptions
from ._port import (
    NO_OBSERVER,
    NO_WATCH,
    Delivery,
    ModelCallWatch,
    NoticesPort,
    RunInfo,
    RunNoticesPort,
    RunObserver,
    RunWatch,
    SessionPort,
    ToolCallWatch,
)
from ._run import STORE_GRACE, RunLoop
from ._snapshot import SNAPSHOT_VERSION, Snapshot, encode_snapshot, read_snapshot
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

__all__ = [
    "INTERRUPTED",
    "MIN_ANSWER_TOKENS",
    "NO_OBSERVER",
    "NO_WATCH",
    "SNAPSHOT_VERSION",
    "STORE_GRACE",
    "SUMMARY_PROMPT",
    "Budget",
    "BudgetLeft",
    "Compaction",
    "ContextEstimate",
    "Continue",
    "Delivery",
    "Inject",
    "ModelCallWatch",
    "NoticesPort",
    "PendingCall",
    "PendingInput",
    "Price",
    "ReasoningChange",
    "RoundAdjustment",
    "RoundBoundary",
    "RoundContext",
    "RoundDecision",
    "RoundStrategy",
    "RoundToolResult",
    "RunControls",
    "RunInfo",
    "RunLoop",
    "RunNoticesPort",
    "RunObserver",
    "RunOptions",
    "RunResult",
    "RunStatus",
    "RunStream",
    "RunWatch",
    "SessionLog",
    "SessionPort",
    "Snapshot",
    "Stop",
    "StopSignal",
    "ToolCallWatch",
    "TreeBudget",
    "UsageMeter",
    "denial_text",
    "encode_snapshot",
    "read_snapshot",
]
