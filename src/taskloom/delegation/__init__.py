"""Delegation: named subagents, the spawn tool, console tools, background children."""

from __future__ import annotations

from .children import ChildOutcome, ChildStatus, child_status
from .console import console_tools
from .dispatch import ChildSpec, ChildWorker, Dispatcher, InlineDispatcher, TaskDispatcher
from .spawner import Spawner, WorkerType
from .subagent import DelegationTool, SubAgent

__all__ = [
    "ChildOutcome",
    "ChildSpec",
    "ChildStatus",
    "ChildWorker",
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
