"""Forking a session: a new session whose history is another's up to an entry
(docs/howto/fork.md).

A fork copies the entries up to the cut with their positions, run ids and
times, so everything that names a position means the same in the copy, then
links to its origin (one `ForkLink` entry; `forked_from` in its metadata).
Nothing pending, no leases, activities or queued jobs are copied, and child
sessions are named, never copied.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

from .. import entries as log_entries
from ..backends import SessionMeta, SessionStore
from ..entries import Entry, MessageEntry
from ..errors import UsageError
from ..log import SessionLog
from ..messages import Message

FORKED_FROM = "forked_from"
"""The metadata key naming a fork's origin: `{"session_id": ..., "position": ...}`."""


def cut_position(
    entries: list[Entry], at: int | Message | None = None, *, round: int | None = None
) -> int:
    """The last position a fork keeps: `at` itself (a position), the entry that
    holds message `at`, the entry just before round `round`'s assistant message
    (rounds count from 1 over the whole session), or the last entry.

    Raises `UsageError` for a position or round that is not a whole number
    of at least 1 (a bool is not one), a position past the log, a message it
    does not hold (or holds more than once, when not the very object), or a
    round it lacks.
    """
    last = entries[-1].position if entries else 0
    if round is not None:
        if at is not None:
            raise UsageError("fork at a position, a message or a round, not two of them")
        _check_count(round, "round", "a round number")
        n = 0
        for entry in entries:
            payload = entry.payload
            if isinstance(payload, MessageEntry) and payload.message.role == "assistant":
                n += 1
                if n == round:
                    return entry.position - 1
        raise UsageError(f"the session has {n} rounds; there is no round {round}")
    if at is None:
        return last
    if isinstance(at, Message):
        return _message_position(entries, at)
    _check_count(at, "at", "an entry position or a message")
    if at > last:
        raise UsageError(f"the session's entries are 1..{last}; cannot fork at {at}")
    return at


def _check_count(value: object, name: str, what: str) -> None:
    # One rule for the API and the CLI, which passes its numbers through:
    # 1.5, True or "3" are not positions, and a fork of nothing is no fork.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"fork {name}= takes {what} (a whole number of at least 1), not {value!r}")


def _message_position(entries: list[Entry], message: Message) -> int:
    log = SessionLog.folded(entries)
    messages, positions = log.messages, log.positions
    same = [positions[i] for i, m in enumerate(messages) if m is message]
    if not same:
        same = [positions[i] for i, m in enumerate(messages) if m == message]
    if not same:
        raise UsageError("the session does not hold that message")
    if len(set(same)) > 1:
        raise UsageError(
            f"the session holds that message {len(same)} times (entries "
            f"{', '.join(map(str, same))}): fork at one of those positions"
        )
    return same[0]


async def fork_session(
    store: SessionStore,
    session_id: str,
    at: int | Message | None = None,
    *,
    round: int | None = None,
    into: SessionStore | None = None,
    new_id: str | None = None,
    agent: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> SessionMeta:
    """Fork session `session_id` of `store` at a cut (`cut_position`) into a
    new session of `into` (the same store by default); returns its metadata.

    The fork's entries are the original's up to the cut, as they were, then
    a `ForkLink` to it (see the module docstring). It keeps the original's
    agent name and metadata (`agent` and `metadata` override them), is
    nobody's child, and names its origin under `FORKED_FROM` too. The
    original is only read. Raises `UsageError` for a cut `cut_position`
    refuses, before anything is written.
    """
    meta = await store.get(session_id)
    entries = await store.load(session_id)
    cut = cut_position(entries, at, round=round)
    target = store if into is None else into
    recorded: dict[str, Any] = dict(meta.metadata if metadata is None else metadata)
    recorded[FORKED_FROM] = {"session_id": session_id, "position": cut}
    fork_id = os.urandom(16).hex() if new_id is None else new_id
    created = await target.create(
        SessionMeta(fork_id, meta.agent if agent is None else agent, None, 0.0, recorded)
    )
    try:
        kept = [e for e in entries if e.position <= cut]
        for entry in [*kept, Entry.of(log_entries.ForkLink(session_id, cut)).placed(cut + 1)]:
            await target.append(fork_id, entry)
    except BaseException:
        # A fork is whole or absent: one that failed midway is removed (a
        # process killed midway can still leave one with fewer entries than
        # its `forked_from` position says).
        with contextlib.suppress(Exception):
            await target.delete(fork_id)
        raise
    return created
