"""What the other packages of taskloom use of the loop: its ports and the values they carry.

The loop talks to a run through small ports: the session's `Journal`, its
`ModelChoice` and `ToolBoard`, background notices (`NoticesPort`, a run's
`RunNoticesPort` with its `Delivery`) and whoever observes its runs
(`RunObserver` with its watches), handed to a `RunLoop` together as
`RunPorts` with the run's `RunScope`. The runtime fills them in; tracing
observes; delegation shares a tree's budget (`TreeBudget`). A user needs none
of this: what a user sets and reads of a run is on `taskloom.loop`.
"""

from __future__ import annotations

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
from ._tree_budget import BudgetSpent, TreeBudget

__all__ = [
    "NO_OBSERVER",
    "NO_WATCH",
    "OUTPUT_TOOL",
    "RUN_BY",
    "STORE_GRACE",
    "AgentSpec",
    "BudgetSpent",
    "Delivery",
    "EndRun",
    "Journal",
    "ModelCallWatch",
    "ModelChoice",
    "NoticesPort",
    "QueueWatch",
    "RunInfo",
    "RunLoop",
    "RunNoticesPort",
    "RunObserver",
    "RunPorts",
    "RunScope",
    "RunWatch",
    "ToolBoard",
    "ToolCallWatch",
    "TreeBudget",
    "new_run_id",
    "to_jsonable",
]
