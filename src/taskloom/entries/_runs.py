"""Children and notices: notices delivered outside an assistant entry, the
links between a parent's log and its children's, and a child's start and
end. (Where a run began and how it ended: `_run_entries`.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._codec import encode, stored
from ..messages import Usage
from ._base import EntryKind, Payload


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
