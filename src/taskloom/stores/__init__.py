"""Session stores: memory, SQLite, PostgreSQL, behind one `SessionStore` interface,
with the leases and fences that coordinate their writers."""

from __future__ import annotations

from typing import Any

from .base import Entry, EntryKind, SessionMeta, SessionStore
from .leases import Clock, Fence, Lease, Leases, MemoryLeases, system_clock
from .memory import MemoryStore

__all__ = [
    "Clock",
    "Entry",
    "EntryKind",
    "Fence",
    "Lease",
    "Leases",
    "MemoryLeases",
    "MemoryStore",
    "SessionMeta",
    "SessionStore",
    "open_store",
    "system_clock",
]


def open_store(url: str | SessionStore | None = None, **options: Any) -> SessionStore:
    """A store from a URL: `memory://`, `sqlite:///path`, `postgresql://...`.

    A `SessionStore` instance passes through; None means a fresh memory store.
    Opening does no I/O: durable stores connect on first use.
    """
    if url is None:
        return MemoryStore(**options)
    if not isinstance(url, str):
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(
            f"store URL needs a scheme (memory://, sqlite:///path, postgresql://...): {url!r}"
        )
    if scheme == "memory":
        return MemoryStore(**options)
    if scheme == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(rest[1:] if rest.startswith("/") else rest, **options)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ValueError(f"unknown store scheme {scheme!r} in {url!r}")
