"""Snapshots of a session's fold: a cache beside the log, never the truth.

A snapshot row covers the log up to its `position` and holds opaque JSON
text that its writer (the session, through the loop's fold) knows how to
read; the store only keeps rows, in position order, per session. Readers
that cannot use a row (another format version, a gap, corrupt text) ignore
it and replay the log, so a row may be stale, foreign or damaged without
harm. Rows go with their session: SQL rows by foreign key, memory rows by
`delete`.

A write may carry the session lease's `Fence`: it is refused (nothing
written) unless the generation is current, so only the session's one writer
adds rows. Two writers never corrupt each other: the first row written at a
position stays.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import StaleLeaseError
from ._leases import Fence, MemoryLeases

if TYPE_CHECKING:
    import sqlite3

    from ._base import SessionStore
    from ._sql import PostgresDatabase, SQLiteDatabase

# The SQL modules import with their stores, not with this one (import time).
Migration = tuple[str, ...]

__all__ = [
    "POSTGRES_SNAPSHOT_MIGRATIONS",
    "SQLITE_SNAPSHOT_MIGRATIONS",
    "MemorySnapshots",
    "PostgresSnapshots",
    "SQLiteSnapshots",
    "SnapshotStore",
    "snapshots_for",
]

SQLITE_SNAPSHOT_MIGRATIONS: tuple[Migration, ...] = (
    (
        """CREATE TABLE IF NOT EXISTS taskloom_snapshots (
            session_id TEXT NOT NULL
                REFERENCES taskloom_sessions (id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, position)
        )""",
    ),
)

POSTGRES_SNAPSHOT_MIGRATIONS: tuple[Migration, ...] = (
    (
        """CREATE TABLE IF NOT EXISTS {snapshots} (
            session_id text NOT NULL REFERENCES {sessions} (id) ON DELETE CASCADE,
            position bigint NOT NULL,
            data text NOT NULL,
            PRIMARY KEY (session_id, position)
        )""",
    ),
)


@runtime_checkable
class SnapshotStore(Protocol):
    """Snapshot rows per session (see the module docstring)."""

    async def read(self, session_id: str) -> list[tuple[int, str]]:
        """Every row of the session as `(position, data)`, in position order
        (empty for an unknown session)."""
        ...

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        """Add a row at `position` unless one is there; raises `StaleLeaseError`
        (writing nothing) when `fence` is not current."""
        ...

    async def prune(self, session_id: str, before: int) -> None:
        """Remove the session's rows at positions below `before`."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove every row of the session."""
        ...


class MemorySnapshots:
    """Rows in process memory, beside a `MemoryStore`."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self._rows: dict[str, dict[int, str]] = {}

    async def read(self, session_id: str) -> list[tuple[int, str]]:
        return sorted(self._rows.get(session_id, {}).items())

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        leases = self._store.leases
        if fence is not None and isinstance(leases, MemoryLeases):
            current = leases.generation(fence.key)
            if current != fence.generation:
                raise StaleLeaseError(
                    f"lease {fence.key!r} generation {fence.generation} is stale "
                    f"(current {current})"
                )
        self._rows.setdefault(session_id, {}).setdefault(position, data)

    async def prune(self, session_id: str, before: int) -> None:
        rows = self._rows.get(session_id)
        if rows:
            for position in [p for p in rows if p < before]:
                del rows[position]

    async def delete(self, session_id: str) -> None:
        self._rows.pop(session_id, None)


class SQLiteSnapshots:
    """Rows in the `taskloom_snapshots` table of a store's SQLite database."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db
        db.require("snapshots", SQLITE_SNAPSHOT_MIGRATIONS)

    async def read(self, session_id: str) -> list[tuple[int, str]]:
        sql = "SELECT position, data FROM taskloom_snapshots WHERE session_id = ? ORDER BY position"
        rows = await self._db.run(lambda conn: conn.execute(sql, (session_id,)).fetchall())
        return [(int(p), str(d)) for p, d in rows]

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        from ._sql import immediate

        def write(conn: sqlite3.Connection) -> None:
            with immediate(conn):
                if fence is not None:
                    row = conn.execute(
                        "SELECT generation FROM taskloom_leases WHERE key = ?", (fence.key,)
                    ).fetchone()
                    current = int(row[0]) if row else 0
                    if current != fence.generation:
                        raise StaleLeaseError(
                            f"lease {fence.key!r} generation {fence.generation} is stale "
                            f"(current {current})"
                        )
                # The session may be gone (deleted meanwhile): then nothing is written.
                conn.execute(
                    "INSERT INTO taskloom_snapshots (session_id, position, data)"
                    " SELECT id, ?, ? FROM taskloom_sessions WHERE id = ?"
                    " ON CONFLICT (session_id, position) DO NOTHING",
                    (position, data, session_id),
                )

        await self._db.run(write)

    async def prune(self, session_id: str, before: int) -> None:
        sql = "DELETE FROM taskloom_snapshots WHERE session_id = ? AND position < ?"
        await self._db.run(lambda conn: conn.execute(sql, (session_id, before)))

    async def delete(self, session_id: str) -> None:
        await self.prune(session_id, 2**62)


class PostgresSnapshots:
    """Rows in the `taskloom_snapshots` table of a store's PostgreSQL database."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db
        db.require("snapshots", POSTGRES_SNAPSHOT_MIGRATIONS)
        table, sessions = db.table("snapshots"), db.table("sessions")
        self._sql_read = (
            f"SELECT position, data FROM {table} WHERE session_id = %s ORDER BY position"
        )
        # FOR SHARE: a new holder bumping the generation waits for this
        # write to commit, so no row checked against the old one lands after.
        self._sql_fence = f"SELECT generation FROM {db.table('leases')} WHERE key = %s FOR SHARE"
        self._sql_write = f"""
            INSERT INTO {table} (session_id, position, data)
            SELECT id, %s, %s FROM {sessions} WHERE id = %s
            ON CONFLICT (session_id, position) DO NOTHING"""
        self._sql_prune = f"DELETE FROM {table} WHERE session_id = %s AND position < %s"

    async def read(self, session_id: str) -> list[tuple[int, str]]:
        async with self._db.connection() as conn:
            rows = await (await conn.execute(self._sql_read, (session_id,))).fetchall()
        return [(int(p), str(d)) for p, d in rows]

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        async with self._db.connection() as conn, conn.transaction():
            if fence is not None:
                row = await (await conn.execute(self._sql_fence, (fence.key,))).fetchone()
                current = int(row[0]) if row else 0
                if current != fence.generation:
                    raise StaleLeaseError(
                        f"lease {fence.key!r} generation {fence.generation} is stale "
                        f"(current {current})"
                    )
            await conn.execute(self._sql_write, (position, data, session_id))

    async def prune(self, session_id: str, before: int) -> None:
        async with self._db.connection() as conn:
            await conn.execute(self._sql_prune, (session_id, before))

    async def delete(self, session_id: str) -> None:
        await self.prune(session_id, 2**62)


_MEMORY: weakref.WeakKeyDictionary[object, MemorySnapshots] = weakref.WeakKeyDictionary()


def snapshots_for(store: SessionStore) -> SnapshotStore | None:
    """The snapshot rows beside `store` (on its own database), or None for a
    store taskloom does not know: its sessions then open by full replay."""
    from ._memory import MemoryStore

    if isinstance(store, MemoryStore):
        snapshots = _MEMORY.get(store)
        if snapshots is None:
            snapshots = _MEMORY[store] = MemorySnapshots(store)
        return snapshots
    database = getattr(store, "database", None)
    if database is None:
        return None
    from ._sql import PostgresDatabase, SQLiteDatabase

    if isinstance(database, SQLiteDatabase):
        return SQLiteSnapshots(database)
    if isinstance(database, PostgresDatabase):
        return PostgresSnapshots(database)
    return None
