"""Leases kept in a SQLite file, shared by every process that opens it.

Each operation is one statement, so SQLite's write lock makes it atomic
across processes.
"""

from __future__ import annotations

import sqlite3

from .._sql import Migration, SQLLeases

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


def generation(conn: sqlite3.Connection, key: str) -> int:
    """The newest generation granted for `key` (0 if none), read in the caller's transaction."""
    row = conn.execute("SELECT generation FROM taskloom_leases WHERE key = ?", (key,)).fetchone()
    return int(row[0]) if row else 0


class SQLiteLeases(SQLLeases):
    """`Leases` on a backend's `SQLiteDatabase`; behaves exactly like `MemoryLeases`."""

    MIGRATIONS = SQLITE_LEASE_MIGRATIONS
    _acquire = """
        INSERT INTO taskloom_leases (key, holder, generation, expires_at)
        VALUES (:key, :holder, 1, :expires_at)
        ON CONFLICT (key) DO UPDATE SET holder = excluded.holder,
            generation = generation + 1, expires_at = excluded.expires_at
        WHERE holder IS NULL OR expires_at <= :now
        RETURNING generation"""
    _renew = """
        UPDATE taskloom_leases SET expires_at = :expires_at
        WHERE key = :key AND generation = :generation AND holder IS NOT NULL
          AND expires_at > :now
        RETURNING generation"""
    _release = """
        UPDATE taskloom_leases SET holder = NULL
        WHERE key = :key AND generation = :generation AND holder IS NOT NULL"""
    _take_over = """
        UPDATE taskloom_leases
        SET holder = :holder, generation = generation + 1, expires_at = :expires_at
        WHERE key = :key AND generation = :generation AND holder = :old
        RETURNING generation"""
    _current = """
        SELECT holder, generation, expires_at FROM taskloom_leases
        WHERE key = :key AND holder IS NOT NULL AND expires_at > :now"""
