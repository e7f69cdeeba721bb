"""Snapshots of the session fold, so opening a long session costs what is recent.

A snapshot is a chain of rows, each written when the log had grown by some
entries since the last: a row covers the log up to its position and holds
the fold's small state as of there (models, approvals, pending steering, the
compaction...) plus the message entries since the previous row, still
encoded. Restoring reads the chain, keeps the messages encoded until someone
asks for them, and folds the entries after the chain's end as usual.

A snapshot is a cache, never the truth: a row of another format version, a
row that does not continue the chain, text that does not decode, or a chain
whose last entry is not the one the log holds at that position (a session
deleted and created again under the same id) is ignored, and what remains
is replayed from the log. So a stale or foreign row costs time, never
correctness.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..entries import (
    ApprovalDecision,
    ApprovalEscalated,
    ApprovalRequests,
    CompactionEntry,
    Entry,
    EntryKind,
)
from ..messages import Message
from ..models import ReasoningOptions
from ._log import SessionLog

__all__ = ["SNAPSHOT_VERSION", "Snapshot", "encode_snapshot", "read_snapshot"]

SNAPSHOT_VERSION = 3
"""The format rows are written in; rows of any other version are ignored.

Version 2 keeps each row's message entries as one JSON text inside the row,
so opening parses them only when the history is read, not to restore."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A usable chain of rows: the log up to `position`, restorable by `restore`."""

    position: int
    last: tuple[str, float]
    state: Mapping[str, Any]
    messages: list[str]
    """Each row's message entries, as the JSON text of a list of [position, data]."""
    positions: list[int]
    """The history's message positions (a delivered notice's twice: its text and the message)."""
    call_ids: list[str]

    def matches(self, entry: Entry) -> bool:
        """Whether `entry` is the entry this snapshot saw last (same log)."""
        return entry.position == self.position and (entry.kind, entry.created_at) == self.last

    def restore(self) -> SessionLog:
        """The log as folded up to `position`, its messages still encoded.

        Raises `ValueError` (or another error of a malformed value) when the
        state does not have the shape this version writes.
        """
        st = self.state
        log = SessionLog()
        log.position = log.base = log.snapshot_at = self.position
        log._undecoded = self.messages
        positions = self.positions
        log.positions = positions
        log.call_ids = set(self.call_ids)
        log.pending = [Entry.from_dict(e) for e in st["pending"]]
        log.model_spec = st["model_spec"]
        log.model_position = int(st["model_position"])
        reasoning = st["reasoning"]
        log.reasoning = ReasoningOptions.from_dict(reasoning) if reasoning else None
        log.reasoning_set = bool(st["reasoning_set"])
        for turn, data in st["requests"]:
            call = ApprovalRequests.from_data(data).calls[0]
            log.requests[(int(turn), call.call_id)] = call
        for turn, data in st["decisions"]:
            decision = ApprovalDecision.from_data(data)
            log.decisions[(int(turn), decision.call_id)] = decision
        log.started = {(int(turn), str(call_id)): int(n) for turn, call_id, n in st["started"]}
        log.escalated = {
            str(e["child_session_id"]): ApprovalEscalated.from_data(e) for e in st["escalated"]
        }
        log.turn = int(st["turn"])
        turn_message = st["turn_message"]
        log.turn_message = Message.from_dict(turn_message) if turn_message else None
        log.assistant_turns = int(st["assistant_turns"])
        log._folded = {int(p) for p in st["folded"]}
        log.stop_position = int(st["stop_position"])
        compaction = st["compaction"]
        if compaction is not None:
            log.compaction = CompactionEntry.from_data(compaction)
            log.view_start = bisect.bisect_right(positions, log.compaction.up_to)
            log._before_view = -1
        started = st["last_run_started"]
        log.last_run_started = Entry.from_dict(started) if started else None
        finished = st["last_finished"]
        log.last_finished = Entry.from_dict(finished) if finished else None
        return log


def read_snapshot(rows: Sequence[tuple[int, str]]) -> Snapshot | None:
    """The longest usable chain among `rows` (position order), or None.

    A row starting from 0 begins a chain afresh; a row continues the chain
    only from the position where it ends; any other row is skipped.
    """
    chain: list[Mapping[str, Any]] = []
    end = 0
    for position, text in rows:
        try:
            row = json.loads(text)
            if not isinstance(row, dict) or row.get("v") != SNAPSHOT_VERSION:
                continue
            start = row["from"]
            if not isinstance(start, int) or position <= start:
                continue
        except (ValueError, RecursionError, KeyError, TypeError):
            continue
        if start == 0:
            chain = [row]
        elif chain and start == end:
            chain.append(row)
        else:
            continue
        end = position
    if not chain:
        return None
    try:
        messages: list[str] = []
        positions: list[int] = []
        call_ids: list[str] = []
        for row in chain:
            text = row["messages"]
            if not isinstance(text, str):
                return None
            messages.append(text)
            positions.extend(int(p) for p in row["positions"])
            call_ids.extend(str(c) for c in row["call_ids"])
        kind, created_at = chain[-1]["last"]
        return Snapshot(
            end, (str(kind), float(created_at)), chain[-1]["state"], messages, positions, call_ids
        )
    except (KeyError, TypeError, ValueError):
        return None


def encode_snapshot(log: SessionLog) -> str:
    """A row continuing `log`'s chain: its state now, and the message entries
    since `log.snapshot_at` (the whole log's when it has no snapshot yet)."""
    since = log.snapshot_at
    # Entries are dense from `base`: the ones after `since` are a slice.
    fresh = log.entries[since - log.base :]
    message_entries = [e for e in fresh if e.kind == EntryKind.MESSAGE]
    messages = [[e.position, e.data] for e in message_entries]
    positions: list[int] = []
    for e in message_entries:
        if e.data.get("delivered"):
            positions.append(e.position)
        positions.append(e.position)
    # The fresh messages, without decoding a restored log's older ones: they
    # sit at the end of its decoded list whether or not the rest is decoded.
    fresh_count = len(log.positions) - bisect.bisect_right(log.positions, since)
    fresh_messages = log._messages[len(log._messages) - fresh_count :] if fresh_count else []
    call_ids = [c.id for m in fresh_messages for c in m.tool_calls]
    last = log.entries[-1] if log.entries else None
    reasoning = log.reasoning
    state = {
        "pending": [e.to_dict() for e in log.pending],
        "model_spec": log.model_spec,
        "model_position": log.model_position,
        "reasoning": reasoning.to_dict() if reasoning is not None else None,
        "reasoning_set": log.reasoning_set,
        "requests": [
            [turn, ApprovalRequests(turn, (call,)).to_data()]
            for (turn, _), call in log.requests.items()
        ],
        "decisions": [[turn, d.to_data()] for (turn, _), d in log.decisions.items()],
        "started": sorted([turn, call_id, n] for (turn, call_id), n in log.started.items()),
        "escalated": [e.to_data() for e in log.escalated.values()],
        "turn": log.turn,
        "turn_message": log.turn_message.to_dict() if log.turn_message is not None else None,
        "assistant_turns": log.assistant_turns,
        "folded": sorted(log._folded),
        "stop_position": log.stop_position,
        "compaction": log.compaction.to_data() if log.compaction is not None else None,
        "last_run_started": _entry(log.last_run_started),
        "last_finished": _entry(log.last_finished),
    }
    row = {
        "v": SNAPSHOT_VERSION,
        "from": since,
        "last": [last.kind, last.created_at] if last is not None else ["", 0.0],
        "state": state,
        "messages": json.dumps(messages, separators=(",", ":"), allow_nan=False, default=_plain),
        "positions": positions,
        "call_ids": call_ids,
    }
    return json.dumps(row, separators=(",", ":"), allow_nan=False, default=_plain)


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _entry(entry: Entry | None) -> dict[str, Any] | None:
    return entry.to_dict() if entry is not None else None
