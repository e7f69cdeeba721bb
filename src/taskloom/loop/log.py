"""The session log, folded into what the loop needs: a cache, never the truth.

`SessionLog` applies entries in position order and keeps the model's view of
the conversation (messages), the steering and deferred items not yet folded
into a turn, the persisted model settings, and the approval registers. Any
process can rebuild it from the store and reach the same state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..messages import Message, ToolCall, ToolResult
from ..models.base import ReasoningOptions
from ..stores.base import Entry, EntryKind
from .context import DeferredItem

__all__ = ["INTERRUPTED", "SessionLog", "fold_text", "interrupted_results"]

INTERRUPTED = "interrupted; it may have run — check before retrying"


def fold_text(entries: Iterable[Entry]) -> str:
    """The user-turn text for steering and deferred items, in arrival order."""
    parts = []
    for e in entries:
        if e.kind == EntryKind.STEER:
            parts.append(str(e.data.get("text", "")))
        else:
            parts.append(DeferredItem.from_dict(e.data["item"]).render())
    return "\n\n".join(parts)


class SessionLog:
    """The state derived from one session's entries (see module docstring)."""

    __slots__ = (
        "_folded",
        "decisions",
        "entries",
        "messages",
        "model_spec",
        "pending",
        "position",
        "reasoning",
        "reasoning_set",
        "requests",
        "stop_position",
    )

    def __init__(self) -> None:
        self.position = 0
        self.entries: list[Entry] = []
        self.messages: list[Message] = []
        self.pending: list[Entry] = []
        self.model_spec: str | None = None
        self.reasoning: ReasoningOptions | None = None
        self.reasoning_set = False
        self.requests: dict[str, dict[str, Any]] = {}
        self.decisions: dict[str, dict[str, Any]] = {}
        self._folded: set[int] = set()
        self.stop_position = 0

    def apply(self, entry: Entry, message: Message | None = None, position: int = 0) -> None:
        """Fold one entry in (entries arrive in position order; repeats are ignored).

        `message` may pass the already-built Message of a message entry, to
        skip decoding what this process just encoded; `position` places an
        entry this process just appended (the store confirmed it).
        """
        if position:
            entry = entry.placed(position)
        elif entry.position <= self.position:
            return
        self.position = entry.position
        self.entries.append(entry)
        kind = entry.kind
        data = entry.data
        if kind == EntryKind.MESSAGE:
            delivered = data.get("delivered")
            if delivered:
                # Notices ride on the assistant entry that answered them, so
                # the pair is persisted atomically (see RunNotices).
                self.messages.append(Message.user(str(delivered["text"])))
            folds = data.get("folds")
            if folds:
                self._folded.update(folds)
                self.pending = [e for e in self.pending if e.position not in self._folded]
            self.messages.append(
                message if message is not None else Message.from_dict(data["message"])
            )
        elif kind in (EntryKind.STEER, EntryKind.DEFERRED):
            if entry.position not in self._folded:
                self.pending.append(entry)
        elif kind == EntryKind.MODEL_CHANGE:
            if data.get("model_changed", "model" in data):
                self.model_spec = data.get("model")
            if data.get("reasoning_changed", False):
                raw = data.get("reasoning")
                self.reasoning = ReasoningOptions.from_dict(raw) if raw else None
                self.reasoning_set = True
        elif kind == EntryKind.STOP_REQUEST:
            self.stop_position = entry.position
        elif kind == EntryKind.APPROVAL_REQUEST:
            self.requests[str(data["call_id"])] = dict(data)
        elif kind == EntryKind.APPROVAL_DECISION:
            # First decision wins: later ones are either repeats or conflicts
            # that their writer detects and reports.
            self.decisions.setdefault(str(data["call_id"]), dict(data))

    def open_calls(self) -> list[ToolCall]:
        """Calls of the last assistant turn that have no result yet."""
        for i in range(len(self.messages) - 1, -1, -1):
            m = self.messages[i]
            if m.role == "assistant":
                calls = m.tool_calls
                if not calls:
                    return []
                answered = {
                    r.tool_call_id for later in self.messages[i + 1 :] for r in later.results
                }
                return [c for c in calls if c.id not in answered]
            if m.role == "tool":
                # Results present after the last assistant turn: nothing open,
                # unless they are partial (checked through the assistant turn).
                continue
        return []

    def parked(self) -> list[ToolCall]:
        """Open calls with an approval request: the run is awaiting decisions."""
        open_calls = self.open_calls()
        if not any(c.id in self.requests for c in open_calls):
            return []
        return open_calls

    def last_assistant_text(self) -> str:
        """The text of the latest assistant message ("" if none)."""
        for m in reversed(self.messages):
            if m.role == "assistant":
                return m.text
        return ""

    def model_view(self) -> list[Message]:
        """The messages as a model should see them (tool results paired)."""
        return self.messages


def interrupted_results(calls: Iterable[ToolCall]) -> Message:
    """Error results for calls that were cut off by a crash or a cancellation."""
    return Message.tool_results(
        ToolResult(c.id, INTERRUPTED, is_error=True, tool_name=c.name) for c in calls
    )
