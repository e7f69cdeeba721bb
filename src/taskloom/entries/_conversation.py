"""What the conversation is made of besides its messages: steering, deferred
items, stop requests, model changes, compactions and a fork's link to its
origin. (The message entry: `_run_entries`.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._codec import Stored, decode, stored
from ._base import EntryKind, Payload


@dataclass(frozen=True, slots=True)
class DeferredItem(Stored):
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


@stored(absent={"text": ""})
@dataclass(frozen=True, slots=True)
class Steer(Payload):
    """Text to fold in as a user turn at the next round boundary."""

    KIND: ClassVar[str] = EntryKind.STEER
    text: str


@stored(absent={"deferred_id": ""})
@dataclass(frozen=True, slots=True)
class DeferredEntry(Payload):
    """A deferred item pushed through a `Deferred` handle."""

    KIND: ClassVar[str] = EntryKind.DEFERRED
    deferred_id: str
    item: DeferredItem


@dataclass(frozen=True, slots=True)
class StopRequest(Payload):
    """Ask the running run to stop at its next boundary."""

    KIND: ClassVar[str] = EntryKind.STOP_REQUEST
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ForkLink(Payload):
    """A fork's link to its origin: the entries before it are the origin's
    `session_id` up to `position`, copied as they were. A turn parked for
    approval there is not parked in the fork (see `SessionLog.reopened`)."""

    KIND: ClassVar[str] = EntryKind.FORK_LINK
    session_id: str
    position: int


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
        changed = bool(data.get("model_changed", "model" in data))  # older logs: no flag
        return decode(cls, data, model_changed=changed, reasoning=dict(reasoning or {}) or None)


@stored(absent={"summary": ""})
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
