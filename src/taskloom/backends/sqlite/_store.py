"""The SQLite session store: one file, safe for several processes at once.

Entries are JSON text with a unique `(session_id, position)`. An append is
one INSERT statement, which takes SQLite's write lock before it reads, so
"check the session, check the fence, take max + 1, insert" is one atomic
step even when other processes append to the same session: nothing is lost
or reordered, and a fenced write is checked against the very lease row a
successor would bump.
"""

from __future__ import annotations

import json
import os
import sqlite3
from builtins import list as _list
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._activities import BackgroundNotice, NoticeInbox
from .._leases import Clock, Fence, check_fence, system_clock
from .._sql import Migration, dump_json, list_query, load_entries
from .._store import Entry, SessionMeta, check_session_id, not_found
from ._database import SQLiteDatabase, immediate
from ._leases import SQLiteLeases, generation

if TYPE_CHECKING:
    from .._backend import Backend

SQLITE_SESSION_MIGRATIONS: tuple[Migration, ...] = (
    (
        """CREATE TABLE IF NOT EXISTS taskloom_sessions (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            parent_id TEXT,
            created_at REAL NOT NULL,
            metadata TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_sessions_created ON taskloom_sessions (created_at)",
        "CREATE INDEX IF NOT EXISTS taskloom_sessions_parent"
        " ON taskloom_sessions (parent_id, created_at)",
        "CREATE INDEX IF NOT EXISTS taskloom_sessions_agent"
        " ON taskloom_sessions (agent, created_at)",
        """CREATE TABLE IF NOT EXISTS taskloom_entries (
            session_id TEXT NOT NULL
                REFERENCES taskloom_sessions (id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            kind TEXT NOT NULL,
            run_id TEXT,
            created_at REAL NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, position)
        )""",
    ),
)

_CREATE = """
INSERT INTO taskloom_sessions (id, agent, parent_id, created_at, metadata)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING
"""
_LIST = "SELECT id, agent, parent_id, created_at, metadata FROM taskloom_sessions"
_GET = f"{_LIST} WHERE id = ?"
_EXISTS = "SELECT 1 FROM taskloom_sessions WHERE id = ?"
# Nothing is inserted unless the session exists and the fence (?6, ?7), when
# given, is the lease's current generation; `_append_checked` then says which
# failed. MAX stands alone in its subquery, so it reads one index entry
# (an aggregate beside other conditions would scan the session's entries).
_APPEND = """
INSERT INTO taskloom_entries (session_id, position, kind, run_id, created_at, data)
SELECT ?1, COALESCE((SELECT MAX(position) FROM taskloom_entries WHERE session_id = ?1), 0) + 1,
       ?2, ?3, ?4, ?5
WHERE EXISTS (SELECT 1 FROM taskloom_sessions WHERE id = ?1)
  AND (?6 IS NULL OR COALESCE((SELECT generation FROM taskloom_leases WHERE key = ?6), 0) = ?7)
RETURNING position
"""
# The append where the caller expects the entry to land (`Entry.position`,
# as a journal places it): a plain single-row INSERT, which SQLite runs
# without the temporary table that INSERT ... SELECT from the same table
# costs it (nor, for a plain append, the one RETURNING costs): 8% of a
# steady tool round's instructions. The position is NULL, failing its NOT
# NULL constraint (nothing written), unless the fence (?6, ?7) holds and ?8
# is the next position; a session that does not exist fails the entries'
# foreign key (the connection enforces foreign keys), which checks what an
# EXISTS here would. `_append_checked` then says which failed, or `_APPEND`
# lands it.
_PLACE = """
INSERT INTO taskloom_entries (session_id, position, kind, run_id, created_at, data)
VALUES (?1, CASE WHEN
  (?6 IS NULL OR COALESCE((SELECT generation FROM taskloom_leases WHERE key = ?6), 0) = ?7)
  AND COALESCE((SELECT MAX(position) FROM taskloom_entries WHERE session_id = ?1), 0) + 1 = ?8
  THEN ?8 END, ?2, ?3, ?4, ?5)
"""
_PLACE_THEN = "THEN ?8 END"
_LOAD = """
SELECT kind, data, run_id, position, created_at FROM taskloom_entries
WHERE session_id = ? AND position > ? ORDER BY position
"""
_DELETE = "DELETE FROM taskloom_sessions WHERE id = ?"


def _meta(row: tuple[Any, ...]) -> SessionMeta:
    return SessionMeta(row[0], row[1], row[2], row[3], json.loads(row[4]))


def _append_checked(conn: sqlite3.Connection, params: tuple[Any, ...], fence: Fence | None) -> int:
    """The append that was refused, under the write lock: raise why, or land it now."""
    session_id = params[0]
    with immediate(conn):
        if conn.execute(_EXISTS, (session_id,)).fetchone() is None:
            raise not_found(session_id)
        if fence is not None:
            check_fence(fence, generation(conn, fence.key))
        # What refused it changed in between (the session was just created).
        return int(conn.execute(_APPEND, params).fetchone()[0])


def _placed(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...], expected: int) -> bool:
    """`sql` (`_PLACE`, maybe with a further condition) run for position
    `expected`: whether the entry landed there (else nothing was written)."""
    try:
        conn.execute(sql, (*params, expected))
    except sqlite3.IntegrityError:
        return False
    return True


class SQLiteStore:
    """Sessions in the SQLite file of a `SQLiteBackend`, on its `SQLiteDatabase`
    (whose worker thread takes what would wait or read a lot, so the event
    loop never waits for another process). Appends from every process on the
    file interleave into one dense order per session. `leases` is a `SQLiteLeases` on the
    same database, and `append(..., fence=)` checks it in the append's own
    transaction. `backend` is the `Backend` that built the store.
    """

    backend: Backend | None = None

    def __init__(self, database: SQLiteDatabase, *, clock: Clock = system_clock) -> None:
        self.database = self._db = database
        self._clock = clock
        database.require("sessions", SQLITE_SESSION_MIGRATIONS)
        self.leases = SQLiteLeases(database, clock=clock)
        # The append that also returns an inbox's pending notices, by the
        # inbox's column (one per inbox, made at its first use).
        self._with_pending: dict[str, tuple[str, str]] = {}

    @property
    def concurrency(self) -> int:
        """How many children a runtime on this store runs at once by default
        (`Runtime(child_concurrency=)`), 32: the one connection serves them in turn,
        and a deeper queue would only delay everyone's writes."""
        return 32

    @property
    def path(self) -> str | os.PathLike[str]:
        """The database file (`":memory:"` for a private in-memory database)."""
        return self._db.path

    async def create(self, meta: SessionMeta) -> SessionMeta:
        check_session_id(meta.id)
        if not meta.created_at:
            meta = SessionMeta(meta.id, meta.agent, meta.parent_id, self._clock(), meta.metadata)
        params = (meta.id, meta.agent, meta.parent_id, meta.created_at, dump_json(meta.metadata))

        def create(conn: sqlite3.Connection) -> bool:
            return conn.execute(_CREATE, params).rowcount == 1

        if not await self._db.run(create):
            raise ValueError(f"session {meta.id!r} already exists")
        return meta

    async def get(self, session_id: str) -> SessionMeta:
        row = await self._db.fetchone(_GET, (session_id,))
        if row is None:
            raise not_found(session_id)
        return _meta(row)

    def _params(self, session_id: str, entry: Entry, fence: Fence | None) -> tuple[Any, ...]:
        return (
            session_id,
            entry.kind,
            entry.run_id,
            entry.created_at or self._clock(),
            dump_json(entry.data),
            None if fence is None else fence.key,
            None if fence is None else fence.generation,
        )

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        params = self._params(session_id, entry, fence)
        expected = entry.position

        def append(conn: sqlite3.Connection) -> int:
            # One statement is one transaction: it lands whole or not at all.
            if expected > 0 and _placed(conn, _PLACE, params, expected):
                return expected
            row = conn.execute(_APPEND, params).fetchone()
            return int(row[0]) if row is not None else _append_checked(conn, params, fence)

        return await self._db.run(append)

    async def append_then_pending(
        self, session_id: str, entry: Entry, inbox: NoticeInbox, *, fence: Fence | None = None
    ) -> tuple[int, _list[BackgroundNotice]]:
        """`append`, and `inbox.pending(session_id)` read in the same call to the
        database when the inbox is on it; else the two one after the other.
        Raises as `append` does, and then nothing is written."""
        column = getattr(inbox, "pending_column", None)
        pending = column(self._db) if column is not None else None
        if pending is None:
            position = await self.append(session_id, entry, fence=fence)
            return position, await inbox.pending(session_id)
        statements = self._with_pending.get(pending)
        if statements is None:
            column = pending.replace("{session}", "?1")
            statements = self._with_pending[pending] = (
                # Placed only while no notice is pending (the SQLite inbox's
                # column is NULL then), so the common case returns nothing:
                # RETURNING costs SQLite a temporary table each time it runs
                # (about 25,000 instructions, a third of the statement's).
                _PLACE.replace(_PLACE_THEN, f"AND {column} IS NULL {_PLACE_THEN}"),
                # Else the general append, returning the notices too: one
                # statement, one transaction, one commit.
                f"{_APPEND.rstrip()}, {column}",
            )
        place, sql = statements
        params = self._params(session_id, entry, fence)
        expected = entry.position

        def append(conn: sqlite3.Connection) -> tuple[int, bool, Any]:
            if expected > 0 and _placed(conn, place, params, expected):
                return expected, True, None
            row = conn.execute(sql, params).fetchone()
            if row is not None:
                return int(row[0]), True, row[1]
            # Refused: say why, or land it now, and read the inbox apart.
            return _append_checked(conn, params, fence), False, None

        position, read, value = await self._db.run(append)
        if not read:
            return position, await inbox.pending(session_id)
        return position, inbox.from_column(value)  # type: ignore[attr-defined]

    async def append_all(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        fence: Fence | None = None,
        inbox: NoticeInbox | None = None,
    ) -> tuple[int, _list[BackgroundNotice] | None]:
        """`entries` appended at consecutive positions in one transaction (all
        or none), the first one's position returned; with `inbox`, its
        pending notices read in the same transaction when it is on this
        database (else right after), None without. Raises as `append` does,
        and then nothing is written."""
        if not entries:
            raise ValueError("append_all needs at least one entry")
        column = getattr(inbox, "pending_column", None) if inbox is not None else None
        pending = column(self._db) if column is not None else None
        rows = [self._params(session_id, e, fence) for e in entries]

        def append(conn: sqlite3.Connection) -> tuple[int, Any]:
            with immediate(conn):
                first = None
                for params in rows:
                    row = conn.execute(_APPEND, params).fetchone()
                    if row is None:
                        # Refused (nothing after it runs): say why.
                        if conn.execute(_EXISTS, (session_id,)).fetchone() is None:
                            raise not_found(session_id)
                        if fence is not None:
                            check_fence(fence, generation(conn, fence.key))
                        row = conn.execute(_APPEND, params).fetchone()
                    if first is None:
                        first = int(row[0])
                value = None
                if pending is not None:
                    read = f"SELECT {pending.replace('{session}', '?1')}"
                    value = conn.execute(read, (session_id,)).fetchone()[0]
            assert first is not None
            return first, value

        first, value = await self._db.run(append)
        if inbox is None:
            return first, None
        if pending is not None:
            return first, inbox.from_column(value)  # type: ignore[attr-defined]
        return first, await inbox.pending(session_id)

    async def load(self, session_id: str, after: int | None = None) -> _list[Entry]:
        def load(conn: sqlite3.Connection) -> _list[tuple[Any, ...]] | None:
            rows = conn.execute(_LOAD, (session_id, after or 0)).fetchall()
            if not rows and conn.execute(_EXISTS, (session_id,)).fetchone() is None:
                return None
            return rows

        # A whole log may be long: read on the worker, not the caller's thread.
        rows = await self._db.run(load, inline=after is not None)
        if rows is None:
            raise not_found(session_id)
        return load_entries(rows, session_id)

    async def list(
        self, *, parent_id: str | None = None, agent: str | None = None, limit: int | None = None
    ) -> _list[SessionMeta]:
        # Ties in created_at go to the later insert (higher rowid), so
        # same-instant sessions list newest first too.
        order = "created_at DESC, rowid DESC"
        query, params = list_query(_LIST, order, "?", -1, parent_id, agent, limit)
        rows = await self._db.fetchall(query, params, inline=limit is not None)
        return [_meta(row) for row in rows]

    async def delete(self, session_id: str) -> None:
        await self._db.execute(_DELETE, (session_id,))

    async def close(self) -> None:
        """Close the database every part of the backend shares. Idempotent."""
        await self._db.close()
