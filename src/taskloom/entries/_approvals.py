"""What people are asked: the calls a turn parks, the decisions on them, a
child's escalation to its parent's people, and input a session's work (an
MCP task) asks for, its answer and the end of the task that asked. (The
record of calls started: `_run_entries`.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .._codec import decode, stored
from ._base import EntryKind, Payload


@stored(omit=("reason",), absent={"name": "", "arguments": {}})
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


@stored(absent={"turn": 0})
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

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ApprovalRequests:
        if data.get("calls") is None:  # 0.1: one call per entry
            return decode(cls, {"turn": data.get("turn", 0), "calls": [data]})
        return decode(cls, data)


@stored(absent={"approved": False, "hash": ""})
@dataclass(frozen=True, slots=True)
class ApprovalDecision(Payload):
    """A human's write-once decision on one call of one turn (bound to its arguments)."""

    KIND: ClassVar[str] = EntryKind.APPROVAL_DECISION
    call_id: str
    approved: bool
    hash: str
    turn: int = 0
    note: str | None = None


@stored(omit=("call_id", "turn"), absent={"name": "", "call_ids": ()})
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


@stored(absent={"text": ""})
@dataclass(frozen=True, slots=True)
class MCPTaskEnded(Payload):
    """In the session's log: an MCP task that asked a person something ended
    (`status` is a `NoticeStatus`, `text` what its notice carries), so its
    questions are no longer open. Its record is its child session's log."""

    KIND: ClassVar[str] = EntryKind.MCP_TASK_ENDED
    activity_id: str
    status: str
    text: str


@stored(absent={"activity_id": "", "key": "", "request": {}})
@dataclass(frozen=True, slots=True)
class InputRequest(Payload):
    """Work of the session (an MCP task, named by its `activity_id`) asks a
    person for input: `request` is what was asked, as the protocol spells it
    (an MCP `elicitation/create` request: `method` and `params`), `key` the
    asker's name for it (unique within the activity), and `input_id` the
    session-wide id a person answers by. The session's `pending_input()`
    lists it until an `InputAnswer` for `input_id` is in the log."""

    KIND: ClassVar[str] = EntryKind.INPUT_REQUEST
    input_id: str
    activity_id: str
    key: str
    request: dict[str, Any]
    source: str = ""
    requested_at: float = 0.0


@stored(absent={"action": "accept"})
@dataclass(frozen=True, slots=True)
class InputAnswer(Payload):
    """A person's answer to the `InputRequest` `input_id`: `action` is
    "accept" (with `content`), "decline" or "cancel", as MCP elicitation
    answers. Write-once: the first answer in the log is the answer."""

    KIND: ClassVar[str] = EntryKind.INPUT_ANSWER
    input_id: str
    action: str
    content: dict[str, Any] | None = None
