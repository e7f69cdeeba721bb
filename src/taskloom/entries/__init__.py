"""Session log entries: every kind taskloom writes, each with a frozen payload.

A store keeps `Entry(kind, data)` with `data` plain JSON and knows nothing
else. Everything that writes or reads an entry goes through a payload class
here: `Entry.of(payload)` encodes one, `entry.payload` decodes it. No other
module reads entry dicts by key, so a field is named in exactly one place.

Reading is tolerant of logs written by taskloom 0.1 (noted where a kind's
shape changed); writing always uses the current shape.
"""

from __future__ import annotations

from ._approvals import (
    ApprovalDecision,
    ApprovalEscalated,
    ApprovalRequests,
    CallsStarted,
    InputAnswer,
    InputRequest,
    MCPTaskEnded,
    RequestedCall,
)
from ._base import Entry, EntryKind, Payload
from ._conversation import (
    CompactionEntry,
    DeferredEntry,
    DeferredItem,
    ForkLink,
    MessageEntry,
    ModelChange,
    Steer,
    StopRequest,
)
from ._runs import (
    NoticeDeliveredEntry,
    RunFinishedEntry,
    RunStartedEntry,
    SubagentDispatched,
    SubagentLink,
    SubagentReport,
    SubagentResult,
    SubagentStartedEntry,
)

__all__ = [
    "ApprovalDecision",
    "ApprovalEscalated",
    "ApprovalRequests",
    "CallsStarted",
    "CompactionEntry",
    "DeferredEntry",
    "DeferredItem",
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
    "SubagentLink",
    "SubagentReport",
    "SubagentResult",
    "SubagentStartedEntry",
]
