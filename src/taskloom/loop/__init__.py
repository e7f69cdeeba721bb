"""The round loop: options, strategies, tool execution, approvals, streaming.

The loop talks to its session and to background notices through the ports
in `taskloom.loop._port` (`SessionPort`, `NoticesPort`); it knows nothing of
runtimes, stores, background work or delegation.
"""

from __future__ import annotations

from .._control import RunControls, StopSignal, UsageMeter
from ..results import PendingCall, RunResult, RunStatus
from ._compact import SUMMARY_PROMPT, Compaction, ContextEstimate
from ._log import INTERRUPTED, SessionLog
from ._options import RunOptions
from ._port import Delivery, NoticesPort, RunNoticesPort, SessionPort
from ._run import RunLoop
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
    "SUMMARY_PROMPT",
    "Compaction",
    "ContextEstimate",
    "Continue",
    "Delivery",
    "Inject",
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
    "RunLoop",
    "RunNoticesPort",
    "RunOptions",
    "RunResult",
    "RunStatus",
    "RunStream",
    "SessionLog",
    "SessionPort",
    "Stop",
    "StopSignal",
    "UsageMeter",
]
