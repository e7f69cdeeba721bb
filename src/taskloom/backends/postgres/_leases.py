"""Leases kept in PostgreSQL, shared by every process that reaches the database.

Each operation is one statement: acquisition is an upsert whose conflict
branch only fires when the held lease lapsed or was released, so two
processes racing for a free key serialise on its row and exactly one gets it.
"""

from __future__ import annotations

from .._leases import Clock, system_clock
from .._sql import Migration, SQLLeases
from ._database import PostgresDatabase

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


class PostgresLeases(SQLLeases):
    """`Leases` on a backend's `PostgresDatabase`; behaves exactly like `MemoryLeases`."""

    MIGRATIONS = POSTGRES_LEASE_MIGRATIONS

    def __init__(self, database: PostgresDatabase, *, clock: Clock = system_clock) -> None:
        super().__init__(database, clock=clock)
        table = database.table("leases")
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
            WHERE key = %(key)s AND generation = %(generation)s AND holder IS NOT NULL"""
        self._take_over = f"""
            UPDATE {table}
            SET holder = %(holder)s, generation = generation + 1, expires_at = %(expires_at)s
            WHERE key = %(key)s AND generation = %(generation)s AND holder = %(old)s
            RETURNING generation"""
        self._current = f"""
            SELECT holder, generation, expires_at FROM {table}
            WHERE key = %(key)s AND holder IS NOT NULL AND expires_at > %(now)s"""

    @property
    def release_statement(self) -> str:
        """The statement `release` sends (parameters `%(key)s` and
        `%(generation)s`), for a statement that gives a lease up together
        with writes of its own (a data-modifying CTE)."""
        return self._release
