"""Runs: where a run of the session began and how it ended, and notices
delivered outside an assistant entry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..messages import Usage
from ..results import BudgetLeft, RunStatus
from ._base import EntryKind, Payload, _kind


@_kind
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


@_kind
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


@_kind
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
