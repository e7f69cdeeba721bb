"""Values of a run's end: its status, result and pending calls, and tool specs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic

from typing_extensions import TypeVar

from ._codec import fast_init, stored
from .messages import Usage

__all__ = [
    "BudgetLeft",
    "PendingCall",
    "PendingInput",
    "RunResult",
    "RunStatus",
    "ToolSpec",
    "arguments_digest",
]

OutputT = TypeVar("OutputT", default=Any)
"""The type of a run's output (`Agent(output_type=...)`; `str` without one)."""


class RunStatus(StrEnum):
    """Why a run ended. Only COMPLETED means the model gave its final answer."""

    COMPLETED = "completed"
    AWAITING_APPROVAL = "awaiting_approval"
    STOPPED = "stopped"
    BUDGET_EXHAUSTED = "budget_exhausted"
    DEADLINE = "deadline"
    FAILED = "failed"


NANO = 1_000_000_000
"""Nano-dollars per US dollar: budget ledgers keep money as integers of these."""


@dataclass(frozen=True, slots=True)
class BudgetLeft:
    """What a delegation tree's `Budget` has left: tokens and nano-dollars (None: no such ceiling)."""

    tokens: int | None
    nano_usd: int | None

    @property
    def usd(self) -> float | None:
        """Dollars left (None: no dollar ceiling)."""
        return None if self.nano_usd is None else self.nano_usd / NANO

    def __str__(self) -> str:
        """As "1,200 tokens · $0.0450" (nothing below zero)."""
        parts = []
        if self.tokens is not None:
            parts.append(f"{max(self.tokens, 0):,} tokens")
        usd = self.usd
        if usd is not None:
            parts.append(f"${max(usd, 0):.4f}")
        return " · ".join(parts)


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call parked until a human approves or denies it.

    `reason` says why it was parked when the tool's rule could not decide
    (its `needs_approval` predicate raised); None otherwise. `session_id` and
    `origin` name the child session whose call it is, for a call a child
    escalated to its parent ("" for the session's own).
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    session_id: str = ""
    origin: str = ""

    @property
    def arguments_hash(self) -> str:
        """The hash a decision is bound to (see `arguments_digest`)."""
        return arguments_digest(self.arguments)


@dataclass(frozen=True, slots=True)
class PendingInput:
    """A question work of the session asked a person, not answered yet: an
    MCP server's elicitation during a task the session's call started.

    `message` is what the server asks; `schema` the JSON schema of the
    answer it wants (a flat object of strings, numbers, booleans and
    enums), or None when it asks the person to visit `url` instead;
    `source` names the server, tool and task; `activity_id` the background
    activity waiting for it. Answer with `Session.answer(id, content)`
    (or `action="decline"` / `"cancel"`), `taskloom answer`, or the console.
    """

    id: str
    message: str
    schema: dict[str, Any] | None = None
    url: str | None = None
    source: str = ""
    activity_id: str = ""
    requested_at: float = 0.0


def arguments_digest(arguments: dict[str, Any]) -> str:
    """A stable hash of call arguments: decisions are bound to it."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


@fast_init
@dataclass(frozen=True, slots=True)
class RunResult(Generic[OutputT]):
    """The value a run returns; `status` says how it ended.

    `output` is the final answer when the run COMPLETED (None otherwise):
    the validated value of the agent's `output_type` (a pydantic model,
    dataclass, TypedDict, ... or, for a JSON schema, the JSON value), else
    the answer's text. `text` is the last assistant text (the answer as JSON
    for structured output). `usage` is the run's usage with its children's;
    `own_usage` this agent's alone (`children_usage` the difference), while
    `rounds`, `model_requests` and `tool_calls` count this agent's own.
    `pending` are the calls awaiting approval, `error` what went wrong for
    FAILED (and, for a run STOPPED by `StopSignal.cancel`, `"cancelled"`
    and the cancel's reason). `empty_answer` is True when the run COMPLETED on an answer with
    no text and no tool calls: the model said nothing (`text` is empty),
    which is worth telling apart from a short answer (an `EmptyAnswer` event
    was emitted when it came). `budget_left` is what the delegation tree's
    `Budget` had left when the run ended (None: the run had none).
    """

    status: RunStatus
    text: str = ""
    output: OutputT | None = None
    usage: Usage = Usage()
    pending: tuple[PendingCall, ...] = ()
    session_id: str = ""
    run_id: str = ""
    rounds: int = 0
    model_requests: int = 0
    tool_calls: int = 0
    transport_retries: int = 0
    error: str | None = None
    own_usage: Usage = Usage()
    empty_answer: bool = False
    budget_left: BudgetLeft | None = None

    @property
    def ok(self) -> bool:
        """True when the run COMPLETED."""
        return self.status is RunStatus.COMPLETED

    @property
    def children_usage(self) -> Usage:
        """What the run's children used (`usage` less `own_usage`)."""
        total, own = self.usage.to_dict(), self.own_usage.to_dict()
        return Usage(**{k: n - own[k] for k, n in total.items() if k != "estimated"})


@stored(omit=("native",))
@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about one tool.

    `native` (None for most tools) holds the tool's provider-native wire definitions by provider
    (`{"anthropic": {"type": "memory_20250818", "name": "memory"}}`): an
    adapter for a provider named there sends that definition in place of
    the function form (`name`, `description`, `input_schema`), which every
    other adapter sends. Either way the model's calls come back as calls
    of `name` with the same arguments.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    native: Mapping[str, Mapping[str, Any]] | None = None
