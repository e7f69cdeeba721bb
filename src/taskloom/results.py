"""Values of a run's end: its status, result and pending calls, and tool specs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .messages import Usage

__all__ = ["PendingCall", "RunResult", "RunStatus", "ToolSpec", "arguments_digest"]


class RunStatus(StrEnum):
    """Why a run ended. Only COMPLETED means the model gave its final answer."""

    COMPLETED = "completed"
    AWAITING_APPROVAL = "awaiting_approval"
    STOPPED = "stopped"
    BUDGET_EXHAUSTED = "budget_exhausted"
    DEADLINE = "deadline"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call parked until a human approves or denies it."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def arguments_hash(self) -> str:
        """The hash a decision is bound to (see `arguments_digest`)."""
        return arguments_digest(self.arguments)


def arguments_digest(arguments: dict[str, Any]) -> str:
    """A stable hash of call arguments: decisions are bound to it."""
    import hashlib

    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class RunResult:
    """The value a run returns; `status` says how it ended.

    `text` is the last assistant text, `output` the validated structured
    output when the agent has an `output_schema`, `usage` the run's usage with
    its children's, `pending` the calls awaiting approval, `error` what went
    wrong for FAILED.
    """

    status: RunStatus
    text: str = ""
    output: Any = None
    usage: Usage = Usage()
    pending: tuple[PendingCall, ...] = ()
    session_id: str = ""
    run_id: str = ""
    rounds: int = 0
    model_requests: int = 0
    tool_calls: int = 0
    transport_retries: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the run COMPLETED."""
        return self.status is RunStatus.COMPLETED


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about one tool."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
