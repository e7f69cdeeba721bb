"""The round loop: options, strategies, tool execution, approvals, streaming.

The loop talks to the session's journal, model choice and tool board, to
background notices and to whoever observes its runs through the small ports
defined here (`Journal`, `ModelChoice`, `ToolBoard`, `NoticesPort`,
`RunObserver`), handed to a run together as `RunPorts` with its `RunScope`;
it knows nothing of runtimes, stores, background work, delegation or
tracing. What other packages use of it is
exported here, never read from its private modules (`SessionLog` and its
`finished_result`, `summary_message`, `to_jsonable`, `EndRun`, ...).
"""

from __future__ import annotations

from .._control import RunControls, StopSignal, UsageMeter
from ..results import BudgetLeft, PendingCall, PendingInput, RunResult, RunStatus
from ._budget import MIN_ANSWER_TOKENS, Budget, BudgetSpent, Price, TreeBudget
from ._compact import SUMMARY_PROMPT, Compaction, ContextEstimate
from ._log import INTERRUPTED, SessionLog, denial_text, summary_message
from ._options import RunOptions
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
from ._scope import RunScope, new_run_id
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
    "OUTPUT_TOOL",
    "SNAPSHOT_VERSION",
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
    "SessionLog",
    "Snapshot",
    "Stop",
    "StopSignal",
    "ToolBoard",
    "ToolCallWatch",
    "TreeBudget",
    "UsageMeter",
    "denial_text",
    "encode_snapshot",
    "new_run_id",
    "read_snapshot",
    "summary_message",
    "to_jsonable",
]
