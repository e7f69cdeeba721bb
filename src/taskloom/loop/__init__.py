"""The round loop: options, results, strategies, tool execution, approvals, streaming."""

from __future__ import annotations

from .context import Deferred, DeferredItem, ToolContext
from .options import RunOptions, StopSignal
from .result import PendingCall, RunResult, RunStatus
from .strategy import (
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
from .stream import RunStream

__all__ = [
    "Continue",
    "Deferred",
    "DeferredItem",
    "Inject",
    "PendingCall",
    "ReasoningChange",
    "RoundAdjustment",
    "RoundBoundary",
    "RoundContext",
    "RoundDecision",
    "RoundStrategy",
    "RoundToolResult",
    "RunOptions",
    "RunResult",
    "RunStatus",
    "RunStream",
    "Stop",
    "StopSignal",
    "ToolContext",
]
