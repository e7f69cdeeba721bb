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

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..entries import Entry, EntryKind
from ._fold import SessionLog

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
        log = SessionLog()
        self.restore_into(log)
        return log

    def restore_into(self, log: SessionLog) -> None:
        """Start `log`, still empty, from this snapshot (see `restore`); a
        state of the wrong shape raises and leaves `log` as it was."""
        log.restore(self.position, self.state, self.messages, self.positions, self.call_ids)


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
    call_ids = [c.id for m in log.messages_since(since) for c in m.tool_calls]
    last = log.entries[-1] if log.entries else None
    row = {
        "v": SNAPSHOT_VERSION,
        "from": since,
        "last": [last.kind, last.created_at] if last is not None else ["", 0.0],
        "state": log.snapshot_state(),
        "messages": json.dumps(messages, separators=(",", ":"), allow_nan=False, default=_plain),
        "positions": positions,
        "call_ids": call_ids,
    }
    return json.dumps(row, separators=(",", ":"), allow_nan=False, default=_plain)


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
