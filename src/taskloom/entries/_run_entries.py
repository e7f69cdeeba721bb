"""The payloads every run writes: where it began, its messages, the record
of calls started and how it ended. Imported with the package; the other
kinds load at their first use (see the package's `__getattr__`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .._codec import decode, encode, stored
from ..messages import Message, Usage
from ..results import BudgetLeft, RunStatus
from ._base import EntryKind, Payload


@stored(omit=("folds", "usage"), skip=("delivered_text", "delivered_ids"))
@dataclass(frozen=True, slots=True)
class MessageEntry(Payload):
    """A message of the conversation.

    `delivered` is the notice text an assistant turn answered (with the
    notice ids to acknowledge once this entry is persisted); `folds` the
    positions of the steering and deferred entries this user turn folded in;
    `usage` what the model request that produced an assistant message cost
    (None for other messages, and in logs written before it was recorded).
    """

    KIND: ClassVar[str] = EntryKind.MESSAGE
    message: Message
    delivered_text: str | None = None
    delivered_ids: tuple[str, ...] = ()
    folds: tuple[int, ...] = ()
    usage: Usage | None = None

    def to_data(self) -> dict[str, Any]:
        data = encode(self)
        if self.delivered_text is not None:
            data["delivered"] = {"text": self.delivered_text, "ids": list(self.delivered_ids)}
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> MessageEntry:
        if not (delivered := data.get("delivered")):
            return decode(cls, data)
        ids = tuple(delivered.get("ids") or ())
        return decode(cls, data, delivered_text=str(delivered["text"]), delivered_ids=ids)


@stored(omit=("traceparent", "offered", "by", "tree", "memory"))
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
    `memory`: the long-term memory namespaces the run reads (its
    `taskloom.memory.Memory`'s `namespaces`; empty without one).
    """

    KIND: ClassVar[str] = EntryKind.RUN_STARTED
    agent: str = ""
    resume: bool = False
    traceparent: str | None = None
    offered: Mapping[str, Any] | None = None
    by: str = ""
    tree: dict[str, Any] | None = None
    memory: tuple[tuple[str, ...], ...] = ()


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


@stored(omit=("step",), absent={"turn": 0, "call_ids": ()})
@dataclass(frozen=True, slots=True)
class CallsStarted(Payload):
    """Calls of turn `turn` are about to run: written durably before they start,
    so a crash while they run answers them "interrupted" (an idempotent tool's
    call is run again instead, a bounded number of times).

    With `step`, the calls are one step of a turn run in several (a call that
    runs alone, or a group that overlaps), written before that step starts:
    it records how far the turn got, so a call no step record names never
    started; it does not count as a start against an idempotent call's
    retries."""

    KIND: ClassVar[str] = EntryKind.CALLS_STARTED
    turn: int
    call_ids: tuple[str, ...]
    step: bool = False
