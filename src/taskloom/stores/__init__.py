"""The session-store face of the backends: memory, SQLite, PostgreSQL stores
behind one `SessionStore` interface, with the leases and fences that
coordinate their writers.

The classes live in `taskloom.backends` (one backend per database, where the
activity registry, notice inbox and snapshots sit beside the store); this
module re-exports the store side of them under the names users know. Every
store here knows its backend (`store.backend`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports
from ..backends import (
    Backend,
    Clock,
    Entry,
    EntryKind,
    Fence,
    Lease,
    Leases,
    MemoryLeases,
    MemoryStore,
    PoolOptions,
    SessionMeta,
    SessionStore,
    SnapshotStore,
    open_backend,
    snapshots_for,
    system_clock,
)

__all__ = [
    "Backend",
    "Clock",
    "Entry",
    "EntryKind",
    "Fence",
    "Lease",
    "Leases",
    "MemoryLeases",
    "MemoryStore",
    "PoolOptions",
    "PostgresLeases",
    "PostgresStore",
    "SQLiteLeases",
    "SQLiteStore",
    "SessionMeta",
    "SessionStore",
    "SnapshotStore",
    "open_backend",
    "open_store",
    "snapshots_for",
    "system_clock",
]


def open_store(
    url: str | SessionStore | None = None, *, create: bool = True, **options: Any
) -> SessionStore:
    """A store from a URL: `memory://`, `sqlite:///path`, `postgresql://...`.

    The store of `open_backend(url, create=create, **options)`; a
    `SessionStore` instance passes through; None means a fresh memory store.
    Opening does no I/O: durable stores connect on first use. With
    `create=False` a SQLite store must exist already: first use raises
    `StoreNotFound` rather than create it (see `open_backend`).
    """
    if url is None:
        return MemoryStore(**options)
    if not isinstance(url, str):
        return url
    return open_backend(url, create=create, **options).store


if TYPE_CHECKING:
    from ..backends import PostgresLeases, PostgresStore, SQLiteLeases, SQLiteStore

# The SQL backends import on first use: their drivers cost time to import.
__getattr__ = lazy_exports(
    __name__,
    {
        "SQLiteStore": "..backends.sqlite",
        "PostgresStore": "..backends.postgres",
        "SQLiteLeases": "..backends.sqlite",
        "PostgresLeases": "..backends.postgres",
    },
)
