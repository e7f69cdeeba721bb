"""Snapshots of the fold (`SnapshotState`, a base of `SessionLog`): when one
is due, the fold's small state as JSON values, and a log restored from one.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import entries as log_entries
from ..entries import Entry
from ..messages import Message
from ..models import ReasoningOptions
from ._registers import FoldRegisters, Key

if TYPE_CHECKING:
    from ..entries import ApprovalDecision, RequestedCall


class SnapshotState(FoldRegisters):
    """The snapshot half of `SessionLog`."""

    __slots__ = ()

    def snapshot_due(self, every: int) -> bool:
        """Whether `every` entries or more were folded in since the latest snapshot."""
        return self._position - self._snapshot_at >= every

    def snapshotted(self, position: int) -> None:
        """A snapshot of this log up to `position` was written."""
        self._snapshot_at = position

    def snapshot_state(self) -> dict[str, Any]:
        """The fold's small state as JSON values (everything but the entries
        and messages): what a snapshot row keeps, for `restore`."""
        reasoning = self._reasoning
        turn_message = self._turn_message
        compaction = self._compaction
        return {
            "pending": [e.to_dict() for e in self._pending],
            "model_spec": self._model_spec,
            "model_position": self._model_position,
            "reasoning": reasoning.to_dict() if reasoning is not None else None,
            "reasoning_set": self._reasoning_set,
            "requests": [
                [turn, log_entries.ApprovalRequests(turn, (call,)).to_data()]
                for (turn, _), call in self._requests.items()
            ],
            "decisions": [[turn, d.to_data()] for (turn, _), d in self._decisions.items()],
            "started": sorted([turn, call_id, n] for (turn, call_id), n in self._started.items()),
            "stepped": [self._stepped_turn, sorted(self._stepped)],
            "escalated": [e.to_data() for e in self._escalated.values()],
            "reopened": self._reopened,
            "turn": self._turn,
            "turn_message": turn_message.to_dict() if turn_message is not None else None,
            "assistant_turns": self._assistant_turns,
            "folded": sorted(self._folded),
            "stop_position": self._stop_position,
            "compaction": compaction.to_data() if compaction is not None else None,
            "last_run_started": _entry_dict(self._last_run_started),
            "last_finished": _entry_dict(self._last_finished),
        }

    def messages_since(self, position: int) -> list[Message]:
        """The messages after `position`, without decoding a restored log's older ones."""
        count = len(self._positions) - bisect.bisect_right(self._positions, position)
        messages = self._messages
        return messages[len(messages) - count :] if count else []

    def restore(
        self,
        position: int,
        state: Mapping[str, Any],
        messages: list[str],
        positions: list[int],
        call_ids: list[str],
    ) -> None:
        """Start this log, still empty, from a snapshot up to `position`: its
        `state` (see `snapshot_state`), its message entries still encoded
        (per row, the JSON text of a list of [position, data]), their
        `positions` and tool call ids. A state of the wrong shape raises
        `ValueError` (or the like) and leaves the log as it was.
        """
        st = state
        pending = [Entry.from_dict(e) for e in st["pending"]]
        model_spec = st["model_spec"]
        model_position = int(st["model_position"])
        raw_reasoning = st["reasoning"]
        reasoning = ReasoningOptions.from_dict(raw_reasoning) if raw_reasoning else None
        reasoning_set = bool(st["reasoning_set"])
        requests: dict[Key, RequestedCall] = {}
        for turn, data in st["requests"]:
            call = log_entries.ApprovalRequests.from_data(data).calls[0]
            requests[(int(turn), call.call_id)] = call
        decisions: dict[Key, ApprovalDecision] = {}
        for turn, data in st["decisions"]:
            decision = log_entries.ApprovalDecision.from_data(data)
            decisions[(int(turn), decision.call_id)] = decision
        started = {(int(turn), str(call_id)): int(n) for turn, call_id, n in st["started"]}
        # Snapshots written before step records have none.
        stepped_turn, stepped = st.get("stepped") or (0, ())
        stepped_turn, stepped = int(stepped_turn), {str(c) for c in stepped}
        escalated = {
            str(e["child_session_id"]): log_entries.ApprovalEscalated.from_data(e)
            for e in st["escalated"]
        }
        # Snapshots written before fork links have none.
        reopened = int(st.get("reopened") or 0)
        turn = int(st["turn"])
        raw_message = st["turn_message"]
        turn_message = Message.from_dict(raw_message) if raw_message else None
        assistant_turns = int(st["assistant_turns"])
        folded = {int(p) for p in st["folded"]}
        stop_position = int(st["stop_position"])
        raw_compaction = st["compaction"]
        compaction = (
            log_entries.CompactionEntry.from_data(raw_compaction)
            if raw_compaction is not None
            else None
        )
        raw_started = st["last_run_started"]
        last_run_started = Entry.from_dict(raw_started) if raw_started else None
        raw_finished = st["last_finished"]
        last_finished = Entry.from_dict(raw_finished) if raw_finished else None
        # Every value read: only now does the log change, all at once.
        self._position = self._base = self._snapshot_at = position
        self._undecoded = messages
        self._positions = positions
        self._call_ids = set(call_ids)
        self._pending = pending
        self._model_spec, self._model_position = model_spec, model_position
        self._reasoning, self._reasoning_set = reasoning, reasoning_set
        self._requests, self._decisions, self._started = requests, decisions, started
        self._stepped_turn, self._stepped = stepped_turn, stepped
        self._escalated, self._reopened = escalated, reopened
        self._turn, self._turn_message = turn, turn_message
        self._assistant_turns = assistant_turns
        self._folded = folded
        self._stop_position = stop_position
        self._last_run_started, self._last_finished = last_run_started, last_finished
        if compaction is not None:
            self._compaction = compaction
            self._view_start = bisect.bisect_right(positions, compaction.up_to)
            self._before_view = -1


def _entry_dict(entry: Entry | None) -> dict[str, Any] | None:
    return entry.to_dict() if entry is not None else None
