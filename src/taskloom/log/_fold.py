"""The session log, folded into what its readers need: a cache, never the truth.

`SessionLog` applies entries in position order and keeps the messages, the
steering and deferred items not yet folded into a turn, the model settings
and the approval registers; any process rebuilds the same state from the
store. A *turn* is the position of an assistant message entry: approvals and
started-call records name their turn, so a reused call id never meets an
earlier turn's decision.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import replace

from .. import entries as log_entries
from .._offered import without_schemas
from ..entries import CallsStarted, Entry, EntryKind, MessageEntry
from ..errors import CorruptEntry
from ..messages import Message
from ..models import ReasoningOptions
from ._fold_state import SnapshotState
from ._turn import OpenTurn
from ._view import MessageView, message_chars, summary_chars, summary_message


def fold_text(entries: Iterable[Entry]) -> str:
    """The user-turn text for steering and deferred items, in arrival order."""
    parts = []
    for e in entries:
        payload = e.payload
        if isinstance(payload, log_entries.Steer):
            parts.append(payload.text)
        elif isinstance(payload, log_entries.DeferredEntry):
            parts.append(payload.item.render())
    return "\n\n".join(parts)


class SessionLog(OpenTurn, SnapshotState):
    """The state derived from one session's entries (see module docstring)."""

    # Built of parts: the registers it folds into (`FoldRegisters`), the
    # queries on the open turn (`OpenTurn`) and its snapshots
    # (`SnapshotState`); folding entries in is here.
    __slots__ = ()

    @classmethod
    def folded(cls, entries: Iterable[Entry]) -> SessionLog:
        """A log with `entries` folded in, in order."""
        log = cls()
        for entry in entries:
            log.apply(entry)
        return log

    def apply(self, entry: Entry, message: Message | None = None, position: int = 0) -> None:
        """Fold one entry in (in position order; repeats are ignored). `message`
        may pass a message entry's already-built Message; `position` places an
        entry this process just appended."""
        if position:
            entry = entry.placed(position)
        elif entry.position <= self._position:
            return
        try:
            self._apply(entry, message)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptEntry(
                f"entry {entry.position} ({entry.kind}) does not have its kind's shape: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def _apply(self, entry: Entry, message: Message | None) -> None:
        self._position = entry.position
        self._entries.append(entry)
        kind = entry.kind
        if kind == EntryKind.MESSAGE:
            if message is None:
                payload = MessageEntry.from_data(entry.data)
                message = payload.message
                delivered, folds = payload.delivered_text, payload.folds
            else:
                raw = entry.data.get("delivered")
                delivered = str(raw["text"]) if raw else None
                folds = tuple(entry.data.get("folds") or ())
            self._apply_message(entry.position, message, delivered, folds)
        elif kind in (EntryKind.STEER, EntryKind.DEFERRED):
            if entry.position not in self._folded:
                self._pending.append(entry)
        elif kind == EntryKind.MODEL_CHANGE:
            change = log_entries.ModelChange.from_data(entry.data)
            if change.model_changed:
                self._model_spec = change.model
                self._model_position = entry.position
            if change.reasoning_changed:
                raw_reasoning = change.reasoning
                self._reasoning = (
                    ReasoningOptions.from_dict(raw_reasoning) if raw_reasoning else None
                )
                self._reasoning_set = True
        elif kind == EntryKind.STOP_REQUEST:
            self._stop_position = entry.position
        elif kind == EntryKind.RUN_STARTED:
            data = without_schemas(entry.data)
            self._last_run_started = entry if data is entry.data else replace(entry, data=data)
        elif kind == EntryKind.RUN_FINISHED:
            self._last_finished = entry
        elif kind == EntryKind.APPROVAL_REQUEST:
            requests = log_entries.ApprovalRequests.from_data(entry.data)
            # 0.1 logs name no turn: their requests followed the turn at once.
            turn = requests.turn or self._turn
            for call in requests.calls:
                self._requests.setdefault((turn, call.call_id), call)
        elif kind == EntryKind.APPROVAL_DECISION:
            decision = log_entries.ApprovalDecision.from_data(entry.data)
            turn = decision.turn or max(
                (t for t, cid in self._requests if cid == decision.call_id), default=self._turn
            )
            # First decision wins: later ones are either repeats or conflicts
            # that their writer detects and reports.
            self._decisions.setdefault((turn, decision.call_id), decision)
        elif kind == EntryKind.CALLS_STARTED:
            started = CallsStarted.from_data(entry.data)
            if started.step:
                if started.turn != self._stepped_turn:
                    self._stepped_turn, self._stepped = started.turn, set()
                self._stepped.update(started.call_ids)
                return
            for c in started.call_ids:
                key = (started.turn, c)
                self._started[key] = self._started.get(key, 0) + 1
            for child_id, e in list(self._escalated.items()):
                if e.call_id in started.call_ids and e.turn == started.turn:
                    # The call that waited on the child runs again (the
                    # parent's resume): it holds the turn no longer.
                    self._escalated[child_id] = replace(e, call_id=None, turn=None)
        elif kind == EntryKind.APPROVAL_ESCALATED:
            escalated = log_entries.ApprovalEscalated.from_data(entry.data)
            self._escalated[escalated.child_session_id] = escalated
        elif kind == EntryKind.FORK_LINK:
            self._fork_link()
        elif kind == EntryKind.COMPACTION:
            compaction = log_entries.CompactionEntry.from_data(entry.data)
            self._compaction = compaction
            self._view_start = bisect.bisect_right(self._positions, compaction.up_to)
            self._before_view = -1  # measured on the next `view_chars`

    def _apply_message(
        self, position: int, message: Message, delivered: str | None, folds: tuple[int, ...]
    ) -> None:
        if delivered:
            # Notices ride on the assistant entry that answered them, so the
            # pair is persisted atomically (see RunNotices).
            self._messages.append(Message.user(delivered))
            self._positions.append(position)
        if folds:
            self._folded.update(folds)
            self._pending = [e for e in self._pending if e.position not in self._folded]
        self._messages.append(message)
        self._positions.append(position)
        if message.role == "assistant":
            self._turn = position
            self._turn_message = message
            self._assistant_turns += 1
            for call in message.tool_calls:
                self._call_ids.add(call.id)

    def _fork_link(self) -> None:
        # The origin's approvals stay with it: what it asked, what was decided
        # for a turn still parked and what its children escalated are not the
        # fork's to decide. Nothing is written in their place: the fork's
        # first run takes the turn up (`reopened`). A call that waited on a
        # child's escalation is cut off in the fork: its child is the
        # origin's, never written through the fork.
        self._escalated = {}
        if self.parked():
            turn = self._reopened = self._turn
            self._requests = {k: v for k, v in self._requests.items() if k[0] != turn}
            self._decisions = {k: v for k, v in self._decisions.items() if k[0] != turn}

    def view(self, extra: Message | None = None) -> MessageView:
        """The messages the next request is built from: all of them, or after a
        compaction its summary (if any) and the messages it did not replace;
        then `extra`. A read-only view that stays as it is while the log grows."""
        compaction = self._compaction
        if self._undecoded is not None:
            self._decode()
        messages = self._messages
        if compaction is None:
            return MessageView(messages, 0, len(messages), None, extra)
        head = summary_message(compaction.summary) if compaction.summary else None
        return MessageView(messages, self._view_start, len(messages), head, extra)

    def view_chars(self) -> int:
        """Characters of the view's messages (measured incrementally)."""
        sizes = self._sizes
        for m in self.messages[len(sizes) :]:
            size = message_chars(m)
            sizes.append(size)
            self._total += size
        if self._compaction is None:
            return self._total
        if self._before_view < 0:
            self._before_view = sum(sizes[: self._view_start])
        return summary_chars(self._compaction.summary) + self._total - self._before_view
