"""Session log entries: every kind taskloom writes, each with a frozen payload.

A store keeps `Entry(kind, data)` with `data` plain JSON and knows nothing
else. Everything that writes or reads an entry goes through a payload class
here: `Entry.of(payload)` encodes one, `entry.payload` decodes it. No other
module reads entry dicts by key, so a field is named in exactly one place.

Reading is tolerant of logs written by taskloom 0.1 (noted where a kind's
shape changed); writing always uses the current shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from .errors import CorruptEntry
from .messages import Message, Usage
from .results import BudgetLeft, RunStatus

__all__ = [
    "ApprovalDecision",
    "ApprovalEscalated",
    "ApprovalRequests",
    "CallsStarted",
    "CompactionEntry",
    "ContextItem",
    "DeferredEntry",
    "DeferredItem",
    "DelegationResult",
    "Entry",
    "EntryKind",
    "ForkLink",
    "InputAnswer",
    "InputRequest",
    "MCPTaskEnded",
    "MessageEntry",
    "ModelChange",
    "NoticeDeliveredEntry",
    "Payload",
    "RequestedCall",
    "RunFinishedEntry",
    "RunStartedEntry",
    "Steer",
    "StopRequest",
    "SubagentDispatched",
    "SubagentFinishedItem",
    "SubagentLink",
    "SubagentReport",
    "SubagentResult",
    "SubagentStartedEntry",
]


class EntryKind:
    """The entry kinds taskloom writes (a store accepts any string)."""

    MESSAGE = "message"
    STEER = "steer"
    STOP_REQUEST = "stop_request"
    DEFERRED = "deferred"
    APPROVAL_REQUEST = "approval_request"
    APPROVAL_DECISION = "approval_decision"
    CALLS_STARTED = "calls_started"
    COMPACTION = "compaction"
    SUBAGENT = "subagent"
    SUBAGENT_DISPATCHED = "subagent_dispatched"
    SUBAGENT_STARTED = "subagent_started"
    SUBAGENT_RESULT = "subagent_result"
    SUBAGENT_REPORT = "subagent_report"
    NOTICE_DELIVERED = "notice_delivered"
    MODEL_CHANGE = "model_change"
    RUN_STARTED = "run_started"
    RUN_FINISHED = "run_finished"
    MCP_TASK_ENDED = "mcp_task_ended"
    APPROVAL_ESCALATED = "approval_escalated"
    INPUT_REQUEST = "input_request"
    INPUT_ANSWER = "input_answer"
    FORK_LINK = "fork_link"


class Payload:
    """Base of the entry payloads: `KIND`, `to_data()` and `from_data(data)`."""

    __slots__ = ()
    KIND: ClassVar[str]

    def to_data(self) -> dict[str, Any]:
        """The payload as plain JSON data."""
        raise NotImplementedError

    @classmethod
    def from_data(cls: type[P], data: Mapping[str, Any]) -> P:
        """The payload `to_data` described."""
        raise NotImplementedError


P = TypeVar("P", bound=Payload)
_KINDS: dict[str, type[Payload]] = {}


def _kind(cls: type[P]) -> type[P]:
    _KINDS[cls.KIND] = cls
    return cls


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry. `data` is JSON-serialisable; `position` is set by the store."""

    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    position: int = 0
    created_at: float = 0.0

    @classmethod
    def of(cls, payload: Payload, run_id: str | None = None) -> Entry:
        """The entry that stores `payload`."""
        return cls(payload.KIND, payload.to_data(), run_id)

    @property
    def payload(self) -> Payload | None:
        """The typed payload of a kind taskloom writes (None for a foreign kind).

        Raises `CorruptEntry` when the data does not have its kind's shape.
        """
        cls = _KINDS.get(self.kind)
        if cls is None:
            return None
        try:
            return cls.from_data(self.data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptEntry(
                f"entry {self.position} ({self.kind}) does not have its kind's shape: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def placed(self, position: int) -> Entry:
        """This entry as stored at `position` (timestamped if it was not)."""
        return Entry(self.kind, self.data, self.run_id, position, self.created_at or time.time())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        return {
            "kind": self.kind,
            "data": dict(self.data),
            "run_id": self.run_id,
            "position": self.position,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Entry:
        """The value `to_dict` described."""
        return cls(
            d["kind"],
            d.get("data") or {},
            d.get("run_id"),
            d.get("position", 0),
            d.get("created_at", 0.0),
        )


# ---------------------------------------------------------------- deferred items


@dataclass(frozen=True, slots=True)
class DeferredItem:
    """Something a tool's work delivers to the model later.

    Build with `context(text)`, `delegation_result(content, artifact, edge)`
    or `subagent_finished(id, status)`; each kind renders itself (`render()`).
    An item of a kind this version does not know renders as its raw data.
    """

    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def context(cls, text: str) -> DeferredItem:
        """Plain text for the model's context."""
        return ContextItem("context", {"text": text})

    @classmethod
    def delegation_result(
        cls,
        content: str,
        artifact: Mapping[str, Any] | None = None,
        edge: Mapping[str, Any] | None = None,
    ) -> DeferredItem:
        """A delegated task's answer, with its artifact record and (parent, child) edge."""
        return DelegationResult(
            "delegation_result",
            {"content": content, "artifact": dict(artifact or {}), "edge": dict(edge or {})},
        )

    @classmethod
    def subagent_finished(cls, id: str, status: str) -> DeferredItem:
        """A child agent reached a terminal status."""
        return SubagentFinishedItem("subagent_finished", {"id": id, "status": status})

    def render(self) -> str:
        """The text the model reads for this item."""
        return f"[{self.kind}] {dict(self.data)}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        return {"kind": self.kind, "data": dict(self.data)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeferredItem:
        """The value `to_dict` described (of its kind's class)."""
        kind = str(d["kind"])
        return _ITEM_KINDS.get(kind, DeferredItem)(kind, d.get("data") or {})


class ContextItem(DeferredItem):
    """Plain text for the model (`DeferredItem.context`)."""

    __slots__ = ()

    def render(self) -> str:
        """The text itself."""
        return str(self.data.get("text", ""))


class DelegationResult(DeferredItem):
    """A delegated task's answer (`DeferredItem.delegation_result`)."""

    __slots__ = ()

    def render(self) -> str:
        """The answer, headed by who gave it."""
        artifact = self.data.get("artifact") or {}
        edge = self.data.get("edge") or {}
        who = artifact.get("agent_id") or edge.get("child") or "a delegated agent"
        return f"[delegation result from {who}]\n{self.data.get('content', '')}"


class SubagentFinishedItem(DeferredItem):
    """A child reached a terminal status (`DeferredItem.subagent_finished`)."""

    __slots__ = ()

    def render(self) -> str:
        """One line naming the child and its status."""
        return f"[subagent {self.data.get('id')} finished with status {self.data.get('status')}]"


_ITEM_KINDS: dict[str, Callable[[str, Mapping[str, Any]], DeferredItem]] = {
    "context": ContextItem,
    "delegation_result": DelegationResult,
    "subagent_finished": SubagentFinishedItem,
}


# ---------------------------------------------------------------- conversation


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
        data: dict[str, Any] = {"message": self.message.to_dict()}
        if self.delivered_text is not None:
            data["delivered"] = {"text": self.delivered_text, "ids": list(self.delivered_ids)}
        if self.folds:
            data["folds"] = list(self.folds)
        if self.usage is not None:
            data["usage"] = self.usage.to_dict()
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> MessageEntry:
        delivered = data.get("delivered") or None
        usage = data.get("usage")
        return cls(
            Message.from_dict(data["message"]),
            str(delivered["text"]) if delivered else None,
            tuple(delivered.get("ids") or ()) if delivered else (),
            tuple(data.get("folds") or ()),
            Usage.from_dict(usage) if usage else None,
        )


@dataclass(frozen=True, slots=True)
class Steer(Payload):
    """Text to fold in as a user turn at the next round boundary."""

    KIND: ClassVar[str] = EntryKind.STEER
    text: str

    def to_data(self) -> dict[str, Any]:
        return {"text": self.text}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Steer:
        return cls(str(data.get("text", "")))


@dataclass(frozen=True, slots=True)
class DeferredEntry(Payload):
    """A deferred item pushed through a `Deferred` handle."""

    KIND: ClassVar[str] = EntryKind.DEFERRED
    deferred_id: str
    item: DeferredItem

    def to_data(self) -> dict[str, Any]:
        return {"deferred_id": self.deferred_id, "item": self.item.to_dict()}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> DeferredEntry:
        return cls(str(data.get("deferred_id", "")), DeferredItem.from_dict(data["item"]))


@dataclass(frozen=True, slots=True)
class StopRequest(Payload):
    """Ask the running run to stop at its next boundary."""

    KIND: ClassVar[str] = EntryKind.STOP_REQUEST
    reason: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {"reason": self.reason}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> StopRequest:
        return cls(data.get("reason"))


@dataclass(frozen=True, slots=True)
class ForkLink(Payload):
    """A fork's link to its origin: the entries before it are the origin's
    `session_id` up to `position`, copied as they were. A turn parked for
    approval there is not parked in the fork (see `SessionLog.reopened`)."""

    KIND: ClassVar[str] = EntryKind.FORK_LINK
    session_id: str
    position: int

    def to_data(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "position": self.position}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ForkLink:
        return cls(str(data["session_id"]), int(data["position"]))


@dataclass(frozen=True, slots=True)
class ModelChange(Payload):
    """A persisted change of model (a spec) and/or reasoning options (a dict)."""

    KIND: ClassVar[str] = EntryKind.MODEL_CHANGE
    model: str | None = None
    model_changed: bool = False
    reasoning: Mapping[str, Any] | None = None
    reasoning_changed: bool = False

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"model_changed": self.model_changed}
        if self.model_changed:
            data["model"] = self.model
        if self.reasoning_changed:
            data["reasoning"] = dict(self.reasoning) if self.reasoning else None
            data["reasoning_changed"] = True
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ModelChange:
        reasoning = data.get("reasoning")
        return cls(
            data.get("model"),
            bool(data.get("model_changed", "model" in data)),
            dict(reasoning) if reasoning else None,
            bool(data.get("reasoning_changed", False)),
        )


# ---------------------------------------------------------------- approvals


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


@dataclass(frozen=True, slots=True)
class CompactionEntry(Payload):
    """The request view was compacted: messages of entries up to position
    `up_to` are replaced by `summary` in later requests (the log keeps them).

    `method` is `summary` (a model wrote it) or `dropped` (the summarizer
    failed, did not answer in time, or wrote a summary that would not have
    made the request smaller, and the oldest whole turns were left out, as
    `note` says); `note` also says when a summary was cut to its budget;
    `tokens_before` / `tokens_after` are the estimated request sizes.
    """

    KIND: ClassVar[str] = EntryKind.COMPACTION
    summary: str
    up_to: int
    method: str = "summary"
    tokens_before: int = 0
    tokens_after: int = 0
    note: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "up_to": self.up_to,
            "method": self.method,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "note": self.note,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CompactionEntry:
        return cls(
            str(data.get("summary", "")),
            int(data["up_to"]),
            str(data.get("method", "summary")),
            int(data.get("tokens_before", 0)),
            int(data.get("tokens_after", 0)),
            data.get("note"),
        )


# ---------------------------------------------------------------- runs


@dataclass(frozen=True, slots=True)
class RunStartedEntry(Payload):
    """A run (or a resume) of the session began.

    `traceparent` is the run's trace context (W3C) when it was traced: a run
    that resumes the turn this one parks links its trace to it. Trace ids
    only, never a secret. `offered`: the `digest` of the instructions and
    tool schemas the run offered, with the `instructions` and `tools`
    themselves when it differs from the previous run's (None: an old log).
    `by` names who ran it when that was said
    (`taskloom.loop.RUN_BY`: a queue worker names itself and the job), else "".
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

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"agent": self.agent, "resume": self.resume}
        if self.traceparent is not None:
            data["traceparent"] = self.traceparent
        if self.offered is not None:
            data["offered"] = self.offered
        if self.by:
            data["by"] = self.by
        if self.tree is not None:
            data["tree"] = self.tree
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> RunStartedEntry:
        traceparent, offered, tree = data.get("traceparent"), data.get("offered"), data.get("tree")
        return cls(
            str(data.get("agent", "")),
            bool(data.get("resume", False)),
            traceparent if isinstance(traceparent, str) else None,
            offered if isinstance(offered, Mapping) else None,
            str(data.get("by") or ""),
            tree if isinstance(tree, dict) else None,
        )


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

    def to_data(self) -> dict[str, Any]:
        out = {
            "status": self.status.value,
            "error": self.error,
            "usage": self.usage.to_dict(),
            "rounds": self.rounds,
            "model_requests": self.model_requests,
            "output": self.output,
            "tool_calls": self.tool_calls,
            "transport_retries": self.transport_retries,
        }
        if self.own_usage is not None:
            out["own_usage"] = self.own_usage.to_dict()
        if self.text is not None:
            out["text"] = self.text
        left = self.budget_left
        if left is not None:  # runs without a budget keep their shape
            out["budget_left"] = {"tokens": left.tokens, "nano_usd": left.nano_usd}
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> RunFinishedEntry:
        raw = str(data.get("status", "failed"))
        status = RunStatus(raw) if raw in RunStatus._value2member_map_ else RunStatus.FAILED
        own = data.get("own_usage")
        text = data.get("text")
        return cls(
            status,
            data.get("error"),
            Usage.from_dict(data.get("usage") or {}),
            int(data.get("rounds", 0)),
            int(data.get("model_requests", 0)),
            data.get("output"),
            _budget_left(data.get("budget_left")),
            int(data.get("tool_calls", 0)),
            int(data.get("transport_retries", 0)),
            Usage.from_dict(own) if isinstance(own, Mapping) else None,
            text if isinstance(text, str) else None,
        )


def _budget_left(data: object) -> BudgetLeft | None:
    if not isinstance(data, Mapping):
        return None
    tokens, nano_usd = data.get("tokens"), data.get("nano_usd")
    return BudgetLeft(
        int(tokens) if tokens is not None else None,
        int(nano_usd) if nano_usd is not None else None,
    )


@dataclass(frozen=True, slots=True)
class NoticeDeliveredEntry(Payload):
    """Background notices shown to the model outside an assistant entry."""

    KIND: ClassVar[str] = EntryKind.NOTICE_DELIVERED
    text: str
    ids: tuple[str, ...] = ()

    def to_data(self) -> dict[str, Any]:
        return {"text": self.text, "ids": list(self.ids)}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> NoticeDeliveredEntry:
        return cls(str(data.get("text", "")), tuple(data.get("ids") or ()))


# ---------------------------------------------------------------- delegation


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

    def to_data(self) -> dict[str, Any]:
        return {
            "child_session_id": self.child_session_id,
            "name": self.name,
            "role": self.role,
            "agent": self.agent,
            "task": self.task,
            "mode": self.mode,
            "call_id": self.call_id,
            "artifact": dict(self.artifact),
            "edge": dict(self.edge),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SubagentLink:
        return cls(
            str(data["child_session_id"]),
            str(data.get("name", "agent")),
            str(data.get("role", "")),
            str(data.get("agent", "")),
            str(data.get("task", "")),
            str(data.get("mode", "inline")),
            str(data.get("call_id", "")),
            data.get("artifact") or {},
            data.get("edge") or {},
        )


@dataclass(frozen=True, slots=True)
class SubagentDispatched(Payload):
    """In a background child's log: the spec it was dispatched with."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT_DISPATCHED
    spec: Mapping[str, Any]

    def to_data(self) -> dict[str, Any]:
        return {"spec": dict(self.spec)}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SubagentDispatched:
        return cls(data.get("spec") or {})


@dataclass(frozen=True, slots=True)
class SubagentStartedEntry(Payload):
    """In a child's log: a runner holding its lease started it."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT_STARTED
    name: str = ""

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SubagentStartedEntry:
        return cls(str(data.get("name", "")))


@dataclass(frozen=True, slots=True)
class SubagentResult(Payload):
    """In a child's log: its one terminal entry (`done`, `stopped` or `failed`)."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT_RESULT
    status: str
    report: Any = None
    error: str | None = None
    usage: Usage | None = None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status}
        if self.status == "done":
            data["report"] = self.report
        if self.error:
            data["error"] = self.error
        if self.usage is not None:
            data["usage"] = self.usage.to_dict()
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SubagentResult:
        usage = data.get("usage")
        return cls(
            str(data["status"]),
            data.get("report"),
            data.get("error"),
            Usage.from_dict(usage) if usage else None,
        )


@dataclass(frozen=True, slots=True)
class SubagentReport(Payload):
    """In the parent's log: how an inline child ended, or `running` when its
    call answered while the child went on in the background."""

    KIND: ClassVar[str] = EntryKind.SUBAGENT_REPORT
    child_session_id: str
    status: str
    artifact: Mapping[str, Any] = field(default_factory=dict)
    edge: Mapping[str, Any] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {
            "child_session_id": self.child_session_id,
            "status": self.status,
            "artifact": dict(self.artifact),
            "edge": dict(self.edge),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SubagentReport:
        return cls(
            str(data["child_session_id"]),
            str(data.get("status", "")),
            data.get("artifact") or {},
            data.get("edge") or {},
        )


for _cls in (
    MessageEntry,
    Steer,
    DeferredEntry,
    StopRequest,
    ForkLink,
    ModelChange,
    ApprovalRequests,
    ApprovalDecision,
    CallsStarted,
    CompactionEntry,
    RunStartedEntry,
    RunFinishedEntry,
    NoticeDeliveredEntry,
    SubagentLink,
    SubagentDispatched,
    SubagentStartedEntry,
    SubagentResult,
    SubagentReport,
):
    _kind(_cls)
del _cls


# ---------------------------------------------------------------- MCP tasks


@dataclass(frozen=True, slots=True)
class MCPTaskEnded(Payload):
    """In the session's log: an MCP task that asked a person something ended
    (`status` is a `NoticeStatus`, `text` what its notice carries), so its
    questions are no longer open. Its record is its child session's log."""

    KIND: ClassVar[str] = EntryKind.MCP_TASK_ENDED
    activity_id: str
    status: str
    text: str

    def to_data(self) -> dict[str, Any]:
        return {"activity_id": self.activity_id, "status": self.status, "text": self.text}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> MCPTaskEnded:
        return cls(str(data["activity_id"]), str(data["status"]), str(data.get("text", "")))


_kind(MCPTaskEnded)


# ---------------------------------------------------------------- input for a person


@_kind
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

    def to_data(self) -> dict[str, Any]:
        return {
            "input_id": self.input_id,
            "activity_id": self.activity_id,
            "key": self.key,
            "request": dict(self.request),
            "source": self.source,
            "requested_at": self.requested_at,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> InputRequest:
        return cls(
            str(data["input_id"]),
            str(data.get("activity_id", "")),
            str(data.get("key", "")),
            dict(data.get("request") or {}),
            str(data.get("source", "")),
            float(data.get("requested_at", 0.0)),
        )


@_kind
@dataclass(frozen=True, slots=True)
class InputAnswer(Payload):
    """A person's answer to the `InputRequest` `input_id`: `action` is
    "accept" (with `content`), "decline" or "cancel", as MCP elicitation
    answers. Write-once: the first answer in the log is the answer."""

    KIND: ClassVar[str] = EntryKind.INPUT_ANSWER
    input_id: str
    action: str
    content: dict[str, Any] | None = None

    def to_data(self) -> dict[str, Any]:
        return {
            "input_id": self.input_id,
            "action": self.action,
            "content": None if self.content is None else dict(self.content),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> InputAnswer:
        content = data.get("content")
        return cls(
            str(data["input_id"]),
            str(data.get("action", "accept")),
            None if content is None else dict(content),
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
