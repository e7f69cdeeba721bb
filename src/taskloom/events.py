"""The events every run stream carries.

Each event names the session it came from (`session_id`) and, for events of a
child agent, its `origin`: `label#<first 8 of child session id>`, nested
origins joined with `>`; empty for the top agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ._codec import fast_init
from ._deltas import EventBase as _Base
from ._deltas import TextDelta, ThinkingDelta

if TYPE_CHECKING:
    from .results import RunResult

__all__ = [
    "CompactionFinished",
    "CompactionStarted",
    "ApprovalRequested",
    "EmptyAnswer",
    "Event",
    "ModelRequestStarted",
    "NoticeDelivered",
    "RetryAttempt",
    "RoundCommitted",
    "RunFinished",
    "RunStarted",
    "SubagentFinished",
    "SubagentStarted",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolProgress",
    "WorkFinished",
    "origin_label",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(_Base):
    """A run began (also emitted by `resume`)."""

    run_id: str
    agent: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequestStarted(_Base):
    """The loop is about to ask the model (once per attempt). `round` numbers
    the session's rounds: a later run (a resume, a follow-up) goes on from
    the rounds of the runs before it."""

    run_id: str
    round: int
    model: str
    attempt: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStarted(_Base):
    """A tool call began executing."""

    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolProgress(_Base):
    """A running tool reported progress; it never causes a model round."""

    call_id: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallFinished(_Base):
    """A tool call produced its result (an error result included)."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    duration: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested(_Base):
    """A call needs a human decision; the run parks after this. `reason` says
    why when the tool's rule could not decide (its predicate raised)."""

    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NoticeDelivered(_Base):
    """Background notices or deferred items were handed to the model."""

    text: str
    notice_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentStarted(_Base):
    """A child agent began; `child_session_id` opens its log."""

    child_session_id: str
    name: str
    task: str = ""
    mode: str = "inline"


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentFinished(_Base):
    """A child agent ended with `status` (done, stopped, failed)."""

    child_session_id: str
    name: str
    status: str
    summary: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryAttempt(_Base):
    """A model request failed and will be tried again after `delay` seconds."""

    attempt: int
    delay: float
    error: str
    status: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundCommitted(_Base):
    """A round's entries are in the log (`boundary` names which); `round`
    numbers the session's rounds, as in `ModelRequestStarted`."""

    run_id: str
    round: int
    boundary: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EmptyAnswer(_Base):
    """The model answered a round with no text and no tool calls (thinking
    aside): like any final answer, it ends the run COMPLETED with empty `text`
    and `RunResult.empty_answer` set, unless something keeps the run going.
    `round` numbers the session's rounds, as in `ModelRequestStarted`."""

    run_id: str
    round: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkFinished(_Base):
    """Background work finished and its notice was written (exactly once)."""

    activity_id: str
    kind: str
    text: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(_Base):
    """The run ended; `result` is what `Session.run` returns."""

    result: RunResult


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionStarted(_Base):
    """The loop is compacting the request's view: `tokens` is the estimate
    before, `window` the model's context window."""

    run_id: str
    tokens: int
    window: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionFinished(_Base):
    """The view was compacted: the estimate before and after, and how
    (`summary`, or `dropped` when the summarizer failed, timed out or would
    not have made the request smaller)."""

    run_id: str
    tokens_before: int
    tokens_after: int
    method: str
    up_to: int


Event: TypeAlias = (
    RunStarted
    | ModelRequestStarted
    | TextDelta
    | ThinkingDelta
    | ToolCallStarted
    | ToolProgress
    | ToolCallFinished
    | ApprovalRequested
    | NoticeDelivered
    | SubagentStarted
    | SubagentFinished
    | RetryAttempt
    | RoundCommitted
    | EmptyAnswer
    | WorkFinished
    | CompactionStarted
    | CompactionFinished
    | RunFinished
)

# A subscribed run makes several events a round: each fills its slots
# directly rather than through `object.__setattr__`.
# (The base and the deltas, which the model adapters make, are `_deltas`'.)
_EVENT_CLASSES: list[type[_Base]] = [
    c for c in _Base.__subclasses__() if c not in (TextDelta, ThinkingDelta)
]
for _event in _EVENT_CLASSES:
    fast_init(_event)
del _event

_LABEL_UNSAFE = re.compile(r"[#>\s]+")


def origin_label(name: str, child_session_id: str, parent_origin: str = "") -> str:
    """The origin of a child's events: `label#<first 8 of child id>`, nested
    origins joined with `>`; the label is `name` sanitized (`[#>\\s]+` → `-`,
    at most 32 characters)."""
    label = _LABEL_UNSAFE.sub("-", name).strip("-")[:32] or "agent"
    own = f"{label}#{child_session_id[:8]}"
    return f"{parent_origin}>{own}" if parent_origin else own
