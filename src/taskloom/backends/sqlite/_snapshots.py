"""Snapshot rows in the `taskloom_snapshots` table of a SQLite backend."""

from __future__ import annotations

import sqlite3

from .._leases import Fence, check_fence
from .._sql import Migration
from ._database import SQLiteDatabase, immediate
from ._leases import generation

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


class SQLiteSnapshots:
    """Rows in the `taskloom_snapshots` table of a store's SQLite database."""

    def __init__(self, database: SQLiteDatabase) -> None:
        self.database = self._db = database
        database.require("snapshots", SQLITE_SNAPSHOT_MIGRATIONS)

    async def read(self, session_id: str) -> list[tuple[int, str]]:
        # As bytes, decoded here: a damaged row (bytes that are not UTF-8)
        # must reach the reader as text it rejects, not fail the read.
        sql = (
            "SELECT position, CAST(data AS BLOB) FROM taskloom_snapshots"
            " WHERE session_id = ? ORDER BY position"
        )
        rows = await self._db.fetchall(sql, (session_id,))
        return [(int(p), bytes(d).decode(errors="replace")) for p, d in rows]

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            with immediate(conn):
                if fence is not None:
                    check_fence(fence, generation(conn, fence.key))
                # The session may be gone (deleted meanwhile): then nothing is written.
                conn.execute(
                    "INSERT INTO taskloom_snapshots (session_id, position, data)"
                    " SELECT id, ?, ? FROM taskloom_sessions WHERE id = ?"
                    " ON CONFLICT (session_id, position) DO NOTHING",
                    (position, data, session_id),
                )

        await self._db.run(write)

    async def prune(self, session_id: str, before: int) -> None:
        await self._db.execute(
            "DELETE FROM taskloom_snapshots WHERE session_id = ? AND position < ?",
            (session_id, before),
        )

    async def delete(self, session_id: str) -> None:
        await self.prune(session_id, 2**62)
