"""Snapshot rows in the `taskloom_snapshots` table of a PostgreSQL backend."""

from __future__ import annotations

from .._leases import Fence, check_fence
from .._sql import Migration
from ._database import PostgresDatabase

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


class PostgresSnapshots:
    """Rows in the `taskloom_snapshots` table of a store's PostgreSQL database."""

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = self._db = db = database
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
        rows = await self._db.fetchall(self._sql_read, (session_id,))
        return [(int(p), str(d)) for p, d in rows]

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        async with self._db.connection() as conn, conn.transaction():
            if fence is not None:
                row = await (await conn.execute(self._sql_fence, (fence.key,))).fetchone()
                check_fence(fence, int(row[0]) if row else 0)
            await conn.execute(self._sql_write, (position, data, session_id))

    async def prune(self, session_id: str, before: int) -> None:
        await self._db.execute(self._sql_prune, (session_id, before))

    async def delete(self, session_id: str) -> None:
        await self.prune(session_id, 2**62)
