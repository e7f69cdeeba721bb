"""Delegation: named subagents, the spawn tool, console tools, background children."""

from __future__ import annotations

from ._children import (
    DEFAULT_MAX_ANSWER_CHARS,
    ChildStatus,
    cap_answer,
    check_answer_cap,
    child_status,
    kept_answer,
    read_on,
)
from ._console import console_tools
from ._dispatch import ChildSpec, ChildWorker, Dispatcher, InlineDispatcher, TaskDispatcher
from ._spawner import Spawner, WorkerType
from ._subagent import SubAgent
from ._tool import ChildQueue, DecidedChildren, DelegationTool

__all__ = [
    "DEFAULT_MAX_ANSWER_CHARS",
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
    "cap_answer",
    "check_answer_cap",
    "child_status",
    "console_tools",
    "kept_answer",
    "read_on",
]
