"""Session log entries: every kind taskloom writes, each with a frozen payload.

A store keeps `Entry(kind, data)` with `data` plain JSON and knows nothing
else. Everything that writes or reads an entry goes through a payload class
here: `Entry.of(payload)` encodes one, `entry.payload` decodes it. No other
module reads entry dicts by key, so a field is named in exactly one place.

Reading is tolerant of logs written by taskloom 0.1 (noted where a kind's
shape changed); writing always uses the current shape.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._base import Entry, EntryKind, Payload
from ._run_entries import CallsStarted, MessageEntry, RunFinishedEntry, RunStartedEntry

if TYPE_CHECKING:
    from ._approvals import (
        ApprovalDecision,
        ApprovalEscalated,
        ApprovalRequests,
        InputAnswer,
        InputRequest,
        MCPTaskEnded,
        RequestedCall,
    )
    from ._conversation import (
        CompactionEntry,
        DeferredEntry,
        DeferredItem,
        ForkLink,
        ModelChange,
        Steer,
        StopRequest,
    )
    from ._memory import MemoryEdited
    from ._runs import (
        NoticeDeliveredEntry,
        SubagentDispatched,
        SubagentLink,
        SubagentReport,
        SubagentResult,
        SubagentStartedEntry,
    )

# The payloads a plain run never writes: each module is imported at the first
# use of one of its names (its ~20 dataclasses cost a tenth of the import).
_LAZY = {
    "ApprovalDecision": "_approvals",
    "ApprovalEscalated": "_approvals",
    "ApprovalRequests": "_approvals",
    "InputAnswer": "_approvals",
    "InputRequest": "_approvals",
    "MCPTaskEnded": "_approvals",
    "RequestedCall": "_approvals",
    "CompactionEntry": "_conversation",
    "DeferredEntry": "_conversation",
    "DeferredItem": "_conversation",
    "ForkLink": "_conversation",
    "ModelChange": "_conversation",
    "Steer": "_conversation",
    "StopRequest": "_conversation",
    "MemoryEdited": "_memory",
    "NoticeDeliveredEntry": "_runs",
    "SubagentDispatched": "_runs",
    "SubagentLink": "_runs",
    "SubagentReport": "_runs",
    "SubagentResult": "_runs",
    "SubagentStartedEntry": "_runs",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    imported = importlib.import_module(f"{__name__}.{module}")
    # Kept as this module's globals: later reads cost what an eager name's does.
    for other, home in _LAZY.items():
        if home == module:
            globals()[other] = getattr(imported, other)
    return globals()[name]


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
    "MemoryEdited",
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
