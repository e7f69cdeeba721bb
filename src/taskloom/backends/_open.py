"""`open_backend(url)`: a backend from a URL, importing only the one it names."""

from __future__ import annotations

import copy
from typing import Any

from .._extras import needs_extra
from ..errors import ConfigurationError
from ._backend import Backend
from ._store import SessionStore


def open_backend(
    url: str | Backend | SessionStore | None = None, *, create: bool = True, **options: Any
) -> Backend:
    """A backend from a URL: `memory://`, `sqlite:///path`, `postgresql://...`.

    None means a fresh memory backend; a `Backend` passes through; a store
    gives the backend that built it (its parts around the store, for one
    that wraps a backend's store), or one around it (a `MemoryBackend` around
    a `MemoryStore`, else a `Backend` of the store alone). `options` go to the backend's
    constructor: `clock` for all; `busy_timeout`, `synchronous` for SQLite;
    `pool` (a `PoolOptions`) or its fields (`schema`, `max_size`, the
    timeouts...) for PostgreSQL. Opening does no I/O: durable backends
    connect on first use. A URL taskloom cannot read raises
    `ConfigurationError` saying which URLs it can.

    `create=False` is for readers: a SQLite file that does not exist then
    raises `StoreNotFound` at first use, and neither it nor its folder is
    created. A PostgreSQL database is never created by taskloom (its tables
    are, as on any first use); a memory backend is always new.
    """
    from .memory import MemoryBackend, MemoryStore

    if url is None:
        return MemoryBackend(**options)
    if isinstance(url, Backend):
        return url
    if isinstance(url, MemoryStore):
        return url.backend if url.backend is not None else MemoryBackend(store=url)
    if isinstance(url, SessionStore):
        found = getattr(url, "backend", None)
        if not isinstance(found, Backend):
            return Backend(url)
        if found.store is not url:  # a store wrapping a backend's own: the same parts around it
            found = copy.copy(found)
            found.store = url
        return found
    if not isinstance(url, str):
        raise ConfigurationError(f"a backend URL must be a string, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigurationError(f"store URL {url!r} has no scheme; {_VALID}")
    if scheme == "memory":
        return MemoryBackend(**options)
    if scheme == "sqlite":
        from .sqlite import SQLiteBackend

        return SQLiteBackend(rest[1:] if rest.startswith("/") else rest, create=create, **options)
    if scheme in ("postgresql", "postgres"):
        with needs_extra("a postgresql:// store"):
            from .postgres import PostgresBackend

        return PostgresBackend(url, **options)
    raise ConfigurationError(f"unknown store scheme {scheme!r} in {url!r}; {_VALID}")


_VALID = (
    "valid store URLs are memory://, sqlite:///relative/path.db (three slashes: relative "
    "to the current folder), sqlite:////absolute/path.db (four: absolute), and "
    "postgresql://user@host:port/database"
)
