"""Runs and children: where a run of the session began and how it ended,
notices delivered outside an assistant entry, the links between a parent's
log and its children's, and a child's start and end."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._codec import decode, encode, stored
from ..messages import Usage
from ..results import BudgetLeft, RunStatus
from ._base import EntryKind, Payload


@stored(omit=("traceparent", "offered", "by", "tree"))
@dataclass(frozen=True, slots=True)
class RunStartedEntry(Payload):
    """A run (or a resume) of the session began.

    `traceparent` is the run's trace context (W3C) when it was traced: a run
    that resumes the turn this one parks links its trace to it. Trace ids
    only, never a secret. `offered`: the `digest` of the instructions and
    tool schemas the run offered, with the `instructions` and `tools`
    themselves when it differs from the previous run's (None: an old log).
    `by` names who ran it when that was said
    (`taskloom.loop.ports.RUN_BY`: a queue worker names itself and the job), else "".
    `tree` is the tree budget the run charges
    (`TreeBudget.to_dict()`: its id and `Budget`; None: none): a run that
    goes on with this one, cut off or parked, charges the same tree.
    """

    KIND: ClassVar[str] = EntryKind.RUN_STARTED
    agent: str = ""
    resume: bool = False
    traceparent: str | None = None
    offered: Mapping[str, Any] | None = None
    by: str = ""
    tree: dict[str, Any] | None = None


@stored(omit=("own_usage", "text", "budget_left"))
@dataclass(frozen=True, slots=True)
class RunFinishedEntry(Payload):
    """How a run ended; a run that raised is recorded as FAILED with the error.

    It holds what the run's `RunResult` reports that the rest of the log does
    not tell: `usage` (with its children's), `own_usage` (this agent's
    alone), the counts of `rounds`, `model_requests`, `tool_calls` and
    `transport_retries`, and `budget_left`, what its tree's `Budget` had left
    then (None: none). `output` is a structured answer as JSON data (None
    for a text answer: its text is the last assistant message); `text` is
    the answer's text only when it is not that message's (a structured
    answer given through the final-answer tool). Logs written before
    `own_usage`, `tool_calls`, `transport_retries` and `text` were recorded
    read as None, 0, 0 and None.
    """

    KIND: ClassVar[str] = EntryKind.RUN_FINISHED
    status: RunStatus
    error: str | None = None
    usage: Usage = Usage()
    rounds: int = 0
    model_requests: int = 0
    output: Any = None
    budget_left: BudgetLeft | None = None
    tool_calls: int = 0
    transport_retries: int = 0
    own_usage: Usage | None = None
    text: str | None = None

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> RunFinishedEntry:
        raw = str(data.get("status", "failed"))
        status = RunStatus(raw) if raw in RunStatus._value2member_map_ else RunStatus.FAILED
        return decode(cls, data, status=status)


@stored(absent={"text": ""})
@dataclass(frozen=True, slots=True)
class NoticeDeliveredEntry(Payload):
    """Background notices shown to the model outside an assistant entry."""

    KIND: ClassVar[str] = EntryKind.NOTICE_DELIVERED
    text: str
    ids: tuple[str, ...] = ()


@stored(absent={"name": "agent"})
@dataclass(frozen=True, slots=True)
class SubagentLink(Payload):
    """In the parent's log: a child session was created by call `call_id`."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT
    child_session_id: str
    name: str
    role: str = ""
    agent: str = ""
    task: str = ""
    mode: str = "inline"
    call_id: str = ""
    artifact: Mapping[str, Any] = field(default_factory=dict)
    edge: Mapping[str, Any] = field(default_factory=dict)


@stored(absent={"spec": {}})
@dataclass(frozen=True, slots=True)
class SubagentDispatched(Payload):
    """In a background child's log: the spec it was dispatched with."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT_DISPATCHED
    spec: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SubagentStartedEntry(Payload):
    """In a child's log: a runner holding its lease started it."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT_STARTED
    name: str = ""


@stored(omit=("error", "usage"))
@dataclass(frozen=True, slots=True)
class SubagentResult(Payload):
    """In a child's log: its one terminal entry (`done`, `stopped` or `failed`)."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT_RESULT
    status: str
    report: Any = None
    error: str | None = None
    usage: Usage | None = None

    def to_data(self) -> dict[str, Any]:
        data = encode(self)
        if self.status != "done":
            del data["report"]
        return data


@stored(absent={"status": ""})
@dataclass(frozen=True, slots=True)
class SubagentReport(Payload):
    """In the parent's log: how an inline child ended, or `running` when its
    call answered while the child went on in the background."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT_REPORT
    child_session_id: str
    status: str
    artifact: Mapping[str, Any] = field(default_factory=dict)
    edge: Mapping[str, Any] = field(default_factory=dict)
