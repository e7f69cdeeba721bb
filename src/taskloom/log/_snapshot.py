"""Snapshots of the session fold, so opening a long session costs what is recent.

A snapshot is a chain of rows: each covers the log up to its position with
the fold's small state as of there plus the message entries since the
previous row, still encoded (decoded only when someone asks for them); the
entries after the chain's end are folded as usual.

A snapshot is a cache, never the truth. Each row carries the position it
covers, the position it continues from and a SHA-256 checksum of its text
and its session's id, verified when a session opens (never per round). A
row of another version, or one that continues no chain, is passed over; a
damaged row of this version rejects the whole snapshot (a warning names the
session and the position, no content) and the log is replayed in full. So
a stale, foreign or damaged row costs time, never correctness. The checksum
guards against damage, not against someone able to write the store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..entries import Entry, EntryKind
from ._fold import SessionLog

logger = logging.getLogger("taskloom")

SNAPSHOT_VERSION = 4
"""The format rows are written in; rows of any other version are ignored (2 kept
message entries as one JSON text per row; 4 added the position and checksum)."""

# A row is `{"v":4,"at":P,"from":S,"row":{...},"sum":"<sha256 hex>"}`: the
# checksum covers the text before `,"sum"`, so it is hashed once as written.
_HEAD = f'{{"v":{SNAPSHOT_VERSION},"at":'
_SUM = re.compile(r',"sum":"([0-9a-f]{64})"\}\Z')
_SUM_CHARS = 74


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
        """The log as folded up to `position`, its messages still encoded;
        `ValueError` (or the like) for a state of the wrong shape."""
        log = SessionLog()
        self.restore_into(log)
        return log

    def restore_into(self, log: SessionLog) -> None:
        """Start `log`, still empty, from this snapshot (see `restore`); a
        state of the wrong shape raises and leaves `log` as it was."""
        log.restore(self.position, self.state, self.messages, self.positions, self.call_ids)


class _Damaged(Exception):
    """A row of this version that cannot be trusted (why, without content)."""


def read_snapshot(rows: Sequence[tuple[int, str]], *, session_id: str = "") -> Snapshot | None:
    """The longest usable chain among `rows` (position order) of session `session_id`,
    or None: a row from 0 begins a chain afresh, a row continues it only from
    where it ends, a damaged row rejects every row."""
    chain: list[dict[str, Any]] = []
    end = 0
    for position, text in rows:
        try:
            row = _verified(session_id, position, text)
        except _Damaged as exc:
            logger.warning(
                "session %s: snapshot row at %d rejected (%s); replaying the log in full",
                session_id or "?",
                position,
                exc,
            )
            return None
        if row is None:
            continue
        start = row["from"]
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
        for link in chain:
            body = link["row"]
            text = body["messages"]
            if not isinstance(text, str):
                raise TypeError("messages")
            messages.append(text)
            positions.extend(int(p) for p in body["positions"])
            call_ids.extend(str(c) for c in body["call_ids"])
        last = chain[-1]["row"]
        kind, created_at = last["last"]
        state = last["state"]
        if not isinstance(state, Mapping):
            raise TypeError("state")
        return Snapshot(end, (str(kind), float(created_at)), state, messages, positions, call_ids)
    except (KeyError, TypeError, ValueError):
        logger.warning(
            "session %s: snapshot rejected (a row of the wrong shape); replaying the log in full",
            session_id or "?",
        )
        return None


def _verified(session_id: str, position: int, text: str) -> dict[str, Any] | None:
    """The row at `position`, checked; None for a row of another version,
    `_Damaged` for one that is not what its writer wrote there."""
    if not text.startswith(_HEAD):
        # Another version's row (skipped), or one too garbled to say.
        try:
            version = json.loads(text).get("v")
        except (ValueError, RecursionError, AttributeError) as exc:
            raise _Damaged("unreadable") from exc
        if type(version) is int and version != SNAPSHOT_VERSION:
            return None
        raise _Damaged("unreadable")
    found = _SUM.search(text, len(text) - _SUM_CHARS)
    if found is None:
        raise _Damaged("no checksum: cut short?")
    try:
        encoded = text.encode()
    except UnicodeError as exc:
        raise _Damaged("unreadable") from exc
    # The covered part, found from the end in bytes (what follows it is ASCII).
    covered = memoryview(encoded)[: len(encoded) - (len(text) - found.start())]
    if _checksum(session_id, covered) != found.group(1):
        raise _Damaged("checksum mismatch")
    try:
        row: dict[str, Any] = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Damaged("unreadable") from exc
    at, start = row.get("at"), row.get("from")
    if type(at) is not int:
        raise _Damaged("wrong shape")
    if at != position:
        raise _Damaged(f"written for position {at}")
    if type(start) is not int or not 0 <= start < position or not isinstance(row.get("row"), dict):
        raise _Damaged("wrong shape")
    return row


def encode_snapshot(log: SessionLog, *, session_id: str = "") -> str:
    """A row continuing `log`'s chain up to its position, with a checksum that
    `read_snapshot` checks against the same `session_id`."""
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
        "last": [last.kind, last.created_at] if last is not None else ["", 0.0],
        "state": log.snapshot_state(),
        "messages": json.dumps(messages, separators=(",", ":"), allow_nan=False, default=_plain),
        "positions": positions,
        "call_ids": call_ids,
    }
    body = json.dumps(row, separators=(",", ":"), allow_nan=False, default=_plain)
    # ASCII (json.dumps escapes the rest), so the checksum reads the same
    # text whatever a store's encoding.
    covered = f'{_HEAD}{log.position},"from":{since},"row":{body}'
    return f'{covered},"sum":"{_checksum(session_id, covered.encode())}"}}'


def _checksum(session_id: str, covered: bytes | memoryview) -> str:
    digest = hashlib.sha256(session_id.encode())
    digest.update(b"\n")
    digest.update(covered)
    return digest.hexdigest()


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
