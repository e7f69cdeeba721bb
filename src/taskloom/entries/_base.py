"""The entry and the payload base every kind builds on, and the kinds' registry."""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from .._codec import Stored, decode, encode, fast_init
from ..errors import CorruptEntry


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
    MEMORY_EDITED = "memory_edited"


class Payload:
    """Base of the entry payloads: `KIND`, `to_data()` and `from_data(data)`.

    A subclass with a `KIND` is registered as that kind's payload.
    """

    __slots__ = ()
    KIND: ClassVar[str]

    def __init_subclass__(cls) -> None:
        if "KIND" in vars(cls):
            _KINDS[cls.KIND] = cls

    to_data = encode

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Self:
        """The payload `to_data` described."""
        return decode(cls, data)


_KINDS: dict[str, type[Payload]] = {}

# The modules of the kinds a plain run never writes, imported at the first
# entry of one that is read (the package imports the others).
_KIND_MODULES = {
    EntryKind.STEER: "_conversation",
    EntryKind.STOP_REQUEST: "_conversation",
    EntryKind.DEFERRED: "_conversation",
    EntryKind.FORK_LINK: "_conversation",
    EntryKind.MODEL_CHANGE: "_conversation",
    EntryKind.COMPACTION: "_conversation",
    EntryKind.APPROVAL_REQUEST: "_approvals",
    EntryKind.APPROVAL_DECISION: "_approvals",
    EntryKind.APPROVAL_ESCALATED: "_approvals",
    EntryKind.MCP_TASK_ENDED: "_approvals",
    EntryKind.INPUT_REQUEST: "_approvals",
    EntryKind.INPUT_ANSWER: "_approvals",
    EntryKind.NOTICE_DELIVERED: "_runs",
    EntryKind.SUBAGENT: "_runs",
    EntryKind.SUBAGENT_DISPATCHED: "_runs",
    EntryKind.SUBAGENT_STARTED: "_runs",
    EntryKind.SUBAGENT_RESULT: "_runs",
    EntryKind.SUBAGENT_REPORT: "_runs",
    EntryKind.MEMORY_EDITED: "_memory",
}


def payload_class(kind: str) -> type[Payload] | None:
    """The payload class of `kind` (None for a kind taskloom does not write),
    its module imported if it was not yet."""
    cls = _KINDS.get(kind)
    if cls is None and kind in _KIND_MODULES:
        importlib.import_module(f"{__package__}.{_KIND_MODULES[kind]}")
        cls = _KINDS.get(kind)
    return cls


@fast_init
@dataclass(frozen=True, slots=True)
class Entry(Stored):
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
        cls = _KINDS.get(self.kind) or payload_class(self.kind)
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
