"""Leases kept in PostgreSQL, shared by every process that reaches the database.

Each operation is one statement: acquisition is an upsert whose conflict
branch only fires when the held lease lapsed or was released, so two
processes racing for a free key serialise on its row and exactly one gets it.
A released lease keeps its row (holder cleared) because the row also carries
the key's generation, which must keep rising for fencing to work.

Time comes from the injected clock and is passed into SQL as a parameter,
never read from the server, so every backend and every test agrees on "now".
"""

from __future__ import annotations

from .._leases import Clock, Lease, system_clock
from .._sql import Migration
from ._database import PostgresDatabase

__all__ = ["POSTGRES_LEASE_MIGRATIONS", "PostgresLeases"]

POSTGRES_LEASE_MIGRATIONS: tuple[Migration, ...] = (
    (
        # holder IS NULL marks a released lease; generation survives it.
        """CREATE TABLE IF NOT EXISTS {leases} (
            key text PRIMARY KEY,
            holder text,
            generation bigint NOT NULL,
            expires_at double precision NOT NULL
        )""",
    ),
)


class PostgresLeases:
    """`Leases` on a backend's `PostgresDatabase`; behaves exactly like `MemoryLeases`."""

    def __init__(self, database: PostgresDatabase, *, clock: Clock = system_clock) -> None:
        self.database = self._db = database
        self._clock = clock
        database.require("leases", POSTGRES_LEASE_MIGRATIONS)
        table = self._db.table("leases")
        self._acquire = f"""
            INSERT INTO {table} AS l (key, holder, generation, expires_at)
            VALUES (%(key)s, %(holder)s, 1, %(expires_at)s)
            ON CONFLICT (key) DO UPDATE
                SET holder = EXCLUDED.holder,
                    generation = l.generation + 1,
                    expires_at = EXCLUDED.expires_at
                WHERE l.holder IS NULL OR l.expires_at <= %(now)s
            RETURNING generation"""
        self._renew = f"""
            UPDATE {table} SET expires_at = %(expires_at)s
            WHERE key = %(key)s AND generation = %(generation)s
              AND holder IS NOT NULL AND expires_at > %(now)s
            RETURNING generation"""
        self._release = f"""
            UPDATE {table} SET holder = NULL
            WHERE key = %s AND generation = %s AND holder IS NOT NULL"""
        self._take_over = f"""
            UPDATE {table}
            SET holder = %(holder)s, generation = generation + 1, expires_at = %(expires_at)s
            WHERE key = %(key)s AND generation = %(generation)s AND holder = %(old)s
            RETURNING generation"""
        self._current = f"""
            SELECT holder, generation, expires_at FROM {table}
            WHERE key = %s AND holder IS NOT NULL AND expires_at > %s"""

    async def acquire(self, key: str, holder: str, ttl: float) -> Lease | None:
        now = self._clock()
        params = {"key": key, "holder": holder, "expires_at": now + ttl, "now": now}
        row = await self._db.fetchone(self._acquire, params)
        return None if row is None else Lease(key, holder, int(row[0]), now + ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        now = self._clock()
        params = {
            "key": lease.key,
            "generation": lease.generation,
            "expires_at": now + ttl,
            "now": now,
        }
        # On the reserved connection: a renewal queued behind the holder's own
        # work (its children's writes) could come too late and lose the lease.
        row = await self._db.fetchone(self._renew, params, urgent=True)
        return None if row is None else Lease(lease.key, lease.holder, lease.generation, now + ttl)

    async def release(self, lease: Lease) -> None:
        await self._db.execute(self._release, (lease.key, lease.generation), urgent=True)

    async def take_over(self, lease: Lease, holder: str, ttl: float) -> Lease | None:
        now = self._clock()
        params = {
            "key": lease.key,
            "generation": lease.generation,
            "old": lease.holder,
            "holder": holder,
            "expires_at": now + ttl,
        }
        row = await self._db.fetchone(self._take_over, params)
        return None if row is None else Lease(lease.key, holder, int(row[0]), now + ttl)

    async def current(self, key: str) -> Lease | None:
        now = self._clock()
        row = await self._db.fetchone(self._current, (key, now))
        return None if row is None else Lease(key, row[0], int(row[1]), float(row[2]))
