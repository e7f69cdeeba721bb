"""The round loop: options, strategies, tool execution, approvals, streaming.

The loop talks to the session's journal, model choice and tool board, to
background notices and to whoever observes its runs through the small ports
defined here (`Journal`, `ModelChoice`, `ToolBoard`, `NoticesPort`,
`RunObserver`), handed to a run together as `RunPorts` with its `RunScope`;
it knows nothing of runtimes, stores, background work, delegation or
tracing. It reads the session's log through `taskloom.log`, below it. What
other packages use of it is exported here, never read from its private
modules (`to_jsonable`, `EndRun`, ...).
"""

from __future__ import annotations

from .._run_controls import RunControls, StopSignal, UsageMeter
from ..results import BudgetLeft, PendingCall, PendingInput, RunResult, RunStatus
from ._compact import SUMMARY_PROMPT, Compaction, ContextEstimate
from ._options import DEFAULT_MAX_ROUNDS, RunOptions
from ._output import OUTPUT_TOOL, to_jsonable
from ._port import (
    NO_OBSERVER,
    NO_WATCH,
    AgentSpec,
    Delivery,
    Journal,
    ModelCallWatch,
    ModelChoice,
    NoticesPort,
    QueueWatch,
    RunInfo,
    RunNoticesPort,
    RunObserver,
    RunPorts,
    RunWatch,
    ToolBoard,
    ToolCallWatch,
)
from ._result import EndRun
from ._run import STORE_GRACE, RunLoop
from ._scope import RUN_BY, RunScope, new_run_id
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
from ._tree_budget import MIN_ANSWER_TOKENS, Budget, BudgetSpent, Price, TreeBudget

__all__ = [
    "QueueWatch",
    "RUN_BY",
    "DEFAULT_MAX_ROUNDS",
    "MIN_ANSWER_TOKENS",
    "NO_OBSERVER",
    "NO_WATCH",
    "OUTPUT_TOOL",
    "STORE_GRACE",
    "SUMMARY_PROMPT",
    "AgentSpec",
    "Budget",
    "BudgetSpent",
    "BudgetLeft",
    "Compaction",
    "ContextEstimate",
    "Continue",
    "Delivery",
    "EndRun",
    "Inject",
    "Journal",
    "ModelCallWatch",
    "ModelChoice",
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
    "RunPorts",
    "RunResult",
    "RunScope",
    "RunStatus",
    "RunStream",
    "RunWatch",
    "Stop",
    "StopSignal",
    "ToolBoard",
    "ToolCallWatch",
    "TreeBudget",
    "UsageMeter",
    "new_run_id",
    "to_jsonable",
]
