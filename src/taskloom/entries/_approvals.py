"""Approvals: the calls a turn parks, the decisions on them, the record of
calls started, and a child's escalation to its parent's people."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ._base import EntryKind, Payload, _kind


@dataclass(frozen=True, slots=True)
class RequestedCall:
    """One call of a parked turn that waits for a decision.

    `reason` says why it was parked when that is not simply the tool's rule
    (its `needs_approval` predicate raised); older logs have none.
    """

    call_id: str
    name: str
    arguments: Mapping[str, Any]
    hash: str
    reason: str | None = None


@_kind
@dataclass(frozen=True, slots=True)
class ApprovalRequests(Payload):
    """Every approval request of one turn, written as one entry.

    `turn` is the log position of the assistant message that made the calls;
    decisions bind to it, so a call id that a provider reuses in a later turn
    never inherits an old decision. (0.1 logs wrote one entry per call with
    no turn; those read as turn 0.)
    """

    KIND: ClassVar[str] = EntryKind.APPROVAL_REQUEST
    turn: int
    calls: tuple[RequestedCall, ...]

    def to_data(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "calls": [_requested_data(c) for c in self.calls],
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ApprovalRequests:
        raw = data.get("calls")
        if raw is None:  # 0.1: one call per entry
            raw = [data]
        calls = tuple(
            RequestedCall(
                str(c["call_id"]),
                str(c.get("name", "")),
                c.get("arguments") or {},
                str(c["hash"]),
                str(c["reason"]) if c.get("reason") is not None else None,
            )
            for c in raw
        )
        return cls(int(data.get("turn", 0)), calls)


def _requested_data(call: RequestedCall) -> dict[str, Any]:
    data: dict[str, Any] = {
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "hash": call.hash,
    }
    if call.reason is not None:
        data["reason"] = call.reason
    return data


@_kind
@dataclass(frozen=True, slots=True)
class ApprovalDecision(Payload):
    """A human's write-once decision on one call of one turn (bound to its arguments)."""

    KIND: ClassVar[str] = EntryKind.APPROVAL_DECISION
    call_id: str
    approved: bool
    hash: str
    turn: int = 0
    note: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "approved": self.approved,
            "hash": self.hash,
            "turn": self.turn,
            "note": self.note,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ApprovalDecision:
        return cls(
            str(data["call_id"]),
            bool(data.get("approved")),
            str(data.get("hash", "")),
            int(data.get("turn", 0)),
            data.get("note"),
        )


@_kind
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

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"turn": self.turn, "call_ids": list(self.call_ids)}
        if self.step:
            data["step"] = True
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CallsStarted:
        return cls(
            int(data.get("turn", 0)),
            tuple(str(c) for c in data.get("call_ids") or ()),
            bool(data.get("step", False)),
        )


@_kind
@dataclass(frozen=True, slots=True)
class ApprovalEscalated(Payload):
    """In a parent's log: its child `child_session_id` (named `name`) parked
    on calls `call_ids`, which it escalated to the parent's people instead of
    denying them (`on_approval="escalate"`). The parent's `pending()` lists
    them while undecided; deciding one resumes the child.

    `call_id` and `turn` name the parent's delegation call that waits on the
    child (an inline escalation): that call holds the parent's turn parked
    until the parent's resume runs the child on; None for a child that
    escalated from the background."""

    KIND: ClassVar[str] = EntryKind.APPROVAL_ESCALATED
    child_session_id: str
    name: str
    call_ids: tuple[str, ...]
    call_id: str | None = None
    turn: int | None = None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "child_session_id": self.child_session_id,
            "name": self.name,
            "call_ids": list(self.call_ids),
        }
        if self.call_id is not None:
            data["call_id"], data["turn"] = self.call_id, self.turn
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ApprovalEscalated:
        call_id, turn = data.get("call_id"), data.get("turn")
        return cls(
            str(data["child_session_id"]),
            str(data.get("name", "")),
            tuple(str(c) for c in data.get("call_ids") or ()),
            str(call_id) if call_id is not None else None,
            int(turn) if turn is not None else None,
        )
