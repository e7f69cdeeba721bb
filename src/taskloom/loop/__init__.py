"""The round loop: options, strategies, tool execution, approvals, streaming.

The loop talks to its session, to background notices and to whoever
observes its runs through the ports defined here (`SessionPort`,
`NoticesPort`, `RunObserver`); it knows nothing of runtimes, stores,
background work, delegation or tracing.
"""

from __future__ import annotations

from .._control import RunControls, StopSignal, UsageMeter
from ..results import PendingCall, RunResult, RunStatus
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
    "NO_OBSERVER",
    "NO_WATCH",
    "SUMMARY_PROMPT",
    "Compaction",
    "ContextEstimate",
    "Continue",
    "Delivery",
    "Inject",
    "ModelCallWatch",
    "NoticesPort",
    "PendingCall",
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
    "SNAPSHOT_VERSION",
    "STORE_GRACE",
    "Snapshot",
    "RunNoticesPort",
    "RunObserver",
    "RunOptions",
    "RunResult",
    "RunStatus",
    "RunStream",
    "RunWatch",
    "SessionLog",
    "denial_text",
    "encode_snapshot",
    "read_snapshot",
    "SessionPort",
    "Stop",
    "StopSignal",
    "ToolCallWatch",
    "UsageMeter",
]
