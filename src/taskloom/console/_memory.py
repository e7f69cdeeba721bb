"""What a session page shows of long-term memory: the namespaces its runs
read (their start entries) or edited (the log's `memory_edited` entries)
with their items as the store holds them now (each item's text cut at
`MAX_TEXT_CHARS`). Read-only; bounded however many the log names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..backends import Memories, MemoryItem, Namespace
from ..entries import Entry, EntryKind, MemoryEdited
from ..errors import CorruptEntry

MAX_NAMESPACES = 20
"""The most namespaces one session page shows."""
MAX_ITEMS = 50
"""The most items shown per namespace."""
MAX_TEXT_CHARS = 2000
"""The most characters of one item's text shown (`taskloom memory show` prints it whole)."""


@dataclass(frozen=True, slots=True)
class MemoryItemView:
    """One item as the page shows it: a block (key `block:...`) or another item."""

    key: str
    version: int
    text: str
    updated_at: float

    @property
    def is_block(self) -> bool:
        """Whether it is a memory block's text."""
        return self.key.startswith("block:")


@dataclass(frozen=True, slots=True)
class NamespaceView:
    """A namespace the session's runs used, and its items (`more`: some left out)."""

    namespace: Namespace
    items: tuple[MemoryItemView, ...]
    more: bool

    @property
    def label(self) -> str:
        """The namespace as one line: its parts joined by "/"."""
        return "/".join(self.namespace)


def used_namespaces(entries: Sequence[Entry]) -> list[Namespace]:
    """The namespaces the log's runs read (their start entries say) and its
    memory edits name, in order of first use."""
    found: dict[Namespace, None] = {}
    for entry in entries:
        try:
            if entry.kind == EntryKind.RUN_STARTED:
                spaces = entry.data.get("memory") or ()
                for namespace in spaces if isinstance(spaces, list) else ():
                    if isinstance(namespace, list) and all(isinstance(p, str) for p in namespace):
                        found.setdefault(tuple(namespace), None)
            elif entry.kind == EntryKind.MEMORY_EDITED:
                edited = MemoryEdited.from_data(entry.data)
                found.setdefault(tuple(edited.namespace), None)
        except (CorruptEntry, KeyError, TypeError, ValueError, AttributeError):
            continue
    return list(found)


def _view(item: MemoryItem) -> MemoryItemView:
    value = item.value
    text = value if isinstance(value, str) else repr(value)
    if len(text) > MAX_TEXT_CHARS:
        # Items of up to 64 KiB, 50 a namespace, 20 namespaces: whole, a page
        # could run to tens of megabytes.
        more = len(text) - MAX_TEXT_CHARS
        text = (
            f"{text[:MAX_TEXT_CHARS]}\n… {more} more characters (taskloom memory show prints them)"
        )
    return MemoryItemView(item.key, item.version, text, item.updated_at)


async def memory_views(memory: Memories | None, entries: Sequence[Entry]) -> list[NamespaceView]:
    """The namespaces `entries` used, each with its items now (none without a store)."""
    if memory is None:
        return []
    views = []
    for namespace in used_namespaces(entries)[:MAX_NAMESPACES]:
        # The namespace's own items sort before those of namespaces under it.
        items = await memory.list(namespace, limit=MAX_ITEMS + 1)
        own = [i for i in items if i.namespace == namespace]
        views.append(
            NamespaceView(namespace, tuple(_view(i) for i in own[:MAX_ITEMS]), len(own) > MAX_ITEMS)
        )
    return views
