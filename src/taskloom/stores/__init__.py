"""Session stores: memory, SQLite, PostgreSQL, behind one `SessionStore` interface,
with the leases and fences that coordinate their writers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports
from ..errors import ConfigurationError
from ._base import Entry, EntryKind, SessionMeta, SessionStore
from ._leases import Clock, Fence, Lease, Leases, MemoryLeases, system_clock
from ._memory import MemoryStore
from ._snapshots import SnapshotStore, snapshots_for

__all__ = [
    "Clock",
    "Entry",
    "EntryKind",
    "Fence",
    "Lease",
    "Leases",
    "MemoryLeases",
    "MemoryStore",
    "PostgresLeases",
    "PostgresStore",
    "SQLiteLeases",
    "SQLiteStore",
    "SessionMeta",
    "SessionStore",
    "SnapshotStore",
    "open_store",
    "snapshots_for",
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
        raise ConfigurationError(f"store URL {url!r} has no scheme; {_VALID}")
    if scheme == "memory":
        return MemoryStore(**options)
    if scheme == "sqlite":
        from ._sqlite import SQLiteStore

        return SQLiteStore(rest[1:] if rest.startswith("/") else rest, **options)
    if scheme in ("postgresql", "postgres"):
        from ._postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ConfigurationError(f"unknown store scheme {scheme!r} in {url!r}; {_VALID}")


_VALID = (
    "valid store URLs are memory://, sqlite:///relative/path.db (three slashes: relative "
    "to the current folder), sqlite:////absolute/path.db (four: absolute), and "
    "postgresql://user@host:port/database"
)

if TYPE_CHECKING:
    from ._leases_postgres import PostgresLeases
    from ._leases_sqlite import SQLiteLeases
    from ._postgres import PostgresStore
    from ._sqlite import SQLiteStore

# The SQL backends import on first use: their drivers cost time to import.
__getattr__ = lazy_exports(
    __name__,
    {
        "SQLiteStore": "._sqlite",
        "PostgresStore": "._postgres",
        "SQLiteLeases": "._leases_sqlite",
        "PostgresLeases": "._leases_postgres",
    },
)
