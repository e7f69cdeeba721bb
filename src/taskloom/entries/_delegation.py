"""Delegation: the links between a parent's log and its children's, and a
child's start and end."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..messages import Usage
from ._base import EntryKind, Payload, _kind


@_kind
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


@_kind
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


@_kind
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


@_kind
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


@_kind
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
