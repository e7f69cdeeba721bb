"""Leases kept in a SQLite file, shared by every process that opens it.

Each operation is one statement, so SQLite's write lock makes it atomic
across processes. A released lease keeps its row (holder cleared) because
the row also carries the key's generation, which must keep rising across
releases for fencing to work.

Time comes from the injected clock and is passed into SQL as a parameter,
never read from the database, so every backend and every test agrees on
"now".
"""

from __future__ import annotations

import sqlite3

from .._leases import Clock, Lease, system_clock
from .._sql import Migration
from ._database import SQLiteDatabase

__all__ = ["SQLITE_LEASE_MIGRATIONS", "SQLiteLeases", "generation"]

SQLITE_LEASE_MIGRATIONS: tuple[Migration, ...] = (
    (
        # holder IS NULL marks a released lease; generation survives it.
        """CREATE TABLE IF NOT EXISTS taskloom_leases (
            key TEXT PRIMARY KEY,
            holder TEXT,
            generation INTEGER NOT NULL,
            expires_at REAL NOT NULL
        )""",
    ),
)

_ACQUIRE = """
INSERT INTO taskloom_leases (key, holder, generation, expires_at) VALUES (?1, ?2, 1, ?3)
ON CONFLICT (key) DO UPDATE
    SET holder = excluded.holder, generation = generation + 1, expires_at = excluded.expires_at
    WHERE holder IS NULL OR expires_at <= ?4
RETURNING generation
"""

_RENEW = """
UPDATE taskloom_leases SET expires_at = ?1
WHERE key = ?2 AND generation = ?3 AND holder IS NOT NULL AND expires_at > ?4
RETURNING generation
"""

_RELEASE = """
UPDATE taskloom_leases SET holder = NULL
WHERE key = ?1 AND generation = ?2 AND holder IS NOT NULL
"""

_TAKE_OVER = """
UPDATE taskloom_leases SET holder = ?1, generation = generation + 1, expires_at = ?2
WHERE key = ?3 AND generation = ?4 AND holder = ?5
RETURNING generation
"""

_CURRENT = """
SELECT holder, generation, expires_at FROM taskloom_leases
WHERE key = ?1 AND holder IS NOT NULL AND expires_at > ?2
"""


def generation(conn: sqlite3.Connection, key: str) -> int:
    """The newest generation granted for `key` (0 if none), read in the caller's transaction."""
    row = conn.execute("SELECT generation FROM taskloom_leases WHERE key = ?", (key,)).fetchone()
    return int(row[0]) if row else 0


class SQLiteLeases:
    """`Leases` on a backend's `SQLiteDatabase`; behaves exactly like `MemoryLeases`."""

    def __init__(self, database: SQLiteDatabase, *, clock: Clock = system_clock) -> None:
        self.database = self._db = database
        self._clock = clock
        database.require("leases", SQLITE_LEASE_MIGRATIONS)

    async def acquire(self, key: str, holder: str, ttl: float) -> Lease | None:
        now = self._clock()
        expires_at = now + ttl

        def acquire(conn: sqlite3.Connection) -> int | None:
            # fetchall: the statement must run to completion to commit.
            rows = conn.execute(_ACQUIRE, (key, holder, expires_at, now)).fetchall()
            return int(rows[0][0]) if rows else None

        generation = await self._db.run(acquire)
        return None if generation is None else Lease(key, holder, generation, expires_at)

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        now = self._clock()
        expires_at = now + ttl

        def renew(conn: sqlite3.Connection) -> bool:
            params = (expires_at, lease.key, lease.generation, now)
            return bool(conn.execute(_RENEW, params).fetchall())

        # Ahead of the holder's other work: a renewal queued behind its own
        # children's writes could come too late and lose the lease.
        if not await self._db.run(renew, urgent=True):
            return None
        return Lease(lease.key, lease.holder, lease.generation, expires_at)

    async def release(self, lease: Lease) -> None:
        # Ahead of queued writes too: a release waiting behind them locks the
        # session for everyone else until it lands.
        await self._db.execute(_RELEASE, (lease.key, lease.generation), urgent=True)

    async def take_over(self, lease: Lease, holder: str, ttl: float) -> Lease | None:
        expires_at = self._clock() + ttl

        def take_over(conn: sqlite3.Connection) -> int | None:
            params = (holder, expires_at, lease.key, lease.generation, lease.holder)
            rows = conn.execute(_TAKE_OVER, params).fetchall()
            return int(rows[0][0]) if rows else None

        generation = await self._db.run(take_over)
        return None if generation is None else Lease(lease.key, holder, generation, expires_at)

    async def current(self, key: str) -> Lease | None:
        now = self._clock()
        row = await self._db.fetchone(_CURRENT, (key, now))
        return None if row is None else Lease(key, row[0], int(row[1]), float(row[2]))
