"""Delegation: named subagents, the spawn tool, console tools, background children."""

from __future__ import annotations

from ._children import ChildOutcome, ChildStatus, child_status
from ._console import console_tools
from ._dispatch import ChildSpec, ChildWorker, Dispatcher, InlineDispatcher, TaskDispatcher
from ._spawner import Spawner, WorkerType
from ._subagent import SubAgent
from ._tool import ChildHandover, ChildQueue, DecidedChildren, DelegationTool

__all__ = [
    "ChildHandover",
    "ChildOutcome",
    "ChildQueue",
    "ChildSpec",
    "ChildStatus",
    "ChildWorker",
    "DecidedChildren",
    "DelegationTool",
    "Dispatcher",
    "InlineDispatcher",
    "Spawner",
    "SubAgent",
    "TaskDispatcher",
    "WorkerType",
    "child_status",
    "console_tools",
]
