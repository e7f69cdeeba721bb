"""Transcripts: the conversation a session's log holds, read one way for
every reader (a `Session`, the `taskloom show` command, the console)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from .. import entries as log_entries
from .._lazy import LazyModule
from ..entries import Entry, MessageEntry
from ..messages import Message
from ._view import summary_message

if TYPE_CHECKING:
    from .. import events
else:
    # Imported for a child's link: a plain session's transcript names no origin.
    events = LazyModule("taskloom.events")

Load = Callable[[str], Awaitable[Sequence[Entry]]]
"""Reads a session's whole log by id (a store's `load`)."""


def entry_messages(payload: MessageEntry) -> tuple[Message, ...]:
    """What one message entry adds to the conversation, as `SessionLog` folds it:
    the user turn of the notices it delivered, if any, then its message."""
    if payload.delivered_text:
        return Message.user(payload.delivered_text), payload.message
    return (payload.message,)


def conversation(entries: Iterable[Entry]) -> Iterator[tuple[Entry, tuple[Message, ...]]]:
    """Each entry of the log, in order, with the messages it adds to the conversation."""
    for entry in entries:
        payload = entry.payload
        yield entry, entry_messages(payload) if isinstance(payload, MessageEntry) else ()


async def transcript(
    entries: Iterable[Entry],
    *,
    load: Load | None = None,
    mark_compactions: bool = False,
    origin: str = "",
) -> list[Message]:
    """Every message the log holds, in order, tagged with `origin` if given.
    With `load`, each child's transcript follows the entry linking it (tagged
    with the child's origin); with `mark_compactions`, each compaction's
    summary stands where it was made (a user message, origin `"compaction"`).
    """
    out: list[Message] = []
    for entry, said in conversation(entries):
        out.extend(replace(m, origin=origin) if origin else m for m in said)
        payload = entry.payload
        if mark_compactions and isinstance(payload, log_entries.CompactionEntry):
            out.append(replace(summary_message(payload.summary), origin="compaction"))
        elif load is not None and isinstance(payload, log_entries.SubagentLink):
            child_id = payload.child_session_id
            out += await transcript(
                await load(child_id),
                load=load,
                mark_compactions=mark_compactions,
                origin=events.origin_label(payload.name, child_id, origin),
            )
    return out
