"""Background work sits on the stores' databases: one connection (SQLite) or one pool
(PostgreSQL) per store, versioned migrations, and databases made by the old DDL upgrade."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pg import PG_DSN, requires_postgres
from taskloom import Runtime
from taskloom.backends import (
    BackgroundActivity,
    BackgroundNotice,
    PostgresBackend,
    SessionMeta,
    SQLiteBackend,
)
from taskloom.backends.postgres import (
    PostgresActivityRegistry,
    PostgresDatabase,
)
from taskloom.backends.sqlite import SQLiteActivityRegistry, SQLiteDatabase
from taskloom.background import BackgroundService
from taskloom.errors import StoreUnavailable

ACTIVITY = BackgroundActivity("a1", "shell", "pytest -q", 1_700_000_000.0)
NOTICE = BackgroundNotice("a1:end", "a1", "shell", "exit 0")

# What the background backends created before they had versioned migrations.
OLD_SQLITE_DDL = """
CREATE TABLE IF NOT EXISTS taskloom_background_activities (
    session_id TEXT NOT NULL,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    expires_at REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, id)
);
CREATE INDEX IF NOT EXISTS taskloom_background_activities_kind
    ON taskloom_background_activities (session_id, kind);
CREATE TABLE IF NOT EXISTS taskloom_background_notices (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    id TEXT NOT NULL,
    acked INTEGER NOT NULL DEFAULT 0,
    body TEXT NOT NULL,
    UNIQUE (session_id, id)
);
CREATE INDEX IF NOT EXISTS taskloom_background_notices_pending
    ON taskloom_background_notices (session_id, seq) WHERE acked = 0;
"""

OLD_POSTGRES_DDL = (
    """CREATE TABLE IF NOT EXISTS {activities} (
        session_id text NOT NULL,
        id text NOT NULL,
        kind text NOT NULL,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        expires_at double precision NOT NULL,
        body jsonb NOT NULL,
        PRIMARY KEY (session_id, id)
    )""",
    "CREATE INDEX IF NOT EXISTS taskloom_background_activities_kind"
    " ON {activities} (session_id, kind)",
    """CREATE TABLE IF NOT EXISTS {notices} (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id text NOT NULL,
        id text NOT NULL,
        acked boolean NOT NULL DEFAULT false,
        body jsonb NOT NULL,
        UNIQUE (session_id, id)
    )""",
    "CREATE INDEX IF NOT EXISTS taskloom_background_notices_pending"
    " ON {notices} (session_id, seq) WHERE NOT acked",
)


def sqlite_versions(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT component, version FROM taskloom_schema_version").fetchall()
    return {component: version for component, version in rows}


def postgres_versions(schema: str) -> dict[str, int]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT component, version FROM {}").format(
                sql.Identifier(schema, "taskloom_schema_version")
            )
        ).fetchall()
    return {component: version for component, version in rows}


# ---------------------------------------------------------------- SQLite


async def test_sqlite_store_and_its_background_share_one_connection(tmp_path: Path) -> None:
    store = SQLiteBackend(tmp_path / "t.db").store
    async with Runtime(store) as runtime:
        service = BackgroundService.of(runtime)
        await store.create(SessionMeta("s", "agent"))
        traced: list[str] = []
        await store.database.run(lambda conn: conn.set_trace_callback(traced.append))

        assert await service.registry.add("s", ACTIVITY, 30.0, kind_cap=1)
        assert await service.inbox.push("s", NOTICE)

        # The background statements ran on the store's own connection, and
        # the capped add took the write lock before it counted.
        assert traced[0] == "BEGIN IMMEDIATE"
        assert [s.split()[0] for s in traced] == [
            "BEGIN", "DELETE", "SELECT", "INSERT", "COMMIT", "INSERT"
        ]  # fmt: skip
        assert "taskloom_background_activities" in traced[2]
        assert traced[5].startswith("INSERT INTO taskloom_background_notices")
        assert service.registry.database is store.database
        assert service.inbox.database is store.database
    assert sqlite_versions(tmp_path / "t.db") == {"sessions": 1, "leases": 1, "background": 1}


async def test_sqlite_background_waits_on_a_lock_only_as_long_as_the_store(
    tmp_path: Path,
) -> None:
    store = SQLiteBackend(tmp_path / "t.db", busy_timeout=0.2).store
    async with Runtime(store) as runtime:
        service = BackgroundService.of(runtime)
        await service.inbox.pending("s")  # the tables exist before the lock is taken
        other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            async with asyncio.timeout(10):
                with pytest.raises(StoreUnavailable, match="busy_timeout"):
                    await service.registry.add("s", ACTIVITY, 30.0, kind_cap=1)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await service.registry.add("s", ACTIVITY, 30.0, kind_cap=1)


async def test_closing_the_background_leaves_the_stores_connection_open(tmp_path: Path) -> None:
    store = SQLiteBackend(tmp_path / "t.db").store
    service = BackgroundService.for_store(store)
    await store.create(SessionMeta("s", "agent"))
    assert await service.inbox.push("s", NOTICE)
    await service.close()
    assert (await store.get("s")).agent == "agent"
    # The store's owner decides when the shared connection goes.
    assert [n.id for n in await service.inbox.pending("s")] == [NOTICE.id]
    await store.close()


async def test_a_registry_of_its_own_reopens_after_close(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "bg.db")
    registry = SQLiteActivityRegistry(db)
    assert await registry.add("s", ACTIVITY, 30.0)
    await db.close()
    db = SQLiteDatabase(tmp_path / "bg.db")  # the registry is rebuilt on a new database
    registry = SQLiteActivityRegistry(db)
    assert await registry.list("s") == [ACTIVITY]
    await db.close()
    assert sqlite_versions(tmp_path / "bg.db") == {"background": 1}


async def test_a_sqlite_database_made_by_the_old_ddl_upgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    # As the file was before: the store's tables versioned, the background's not.
    old_store = SQLiteBackend(path).store
    await old_store.create(SessionMeta("s", "agent"))
    await old_store.close()
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SQLITE_DDL)
        conn.execute(
            "INSERT INTO taskloom_background_activities VALUES (?, ?, ?, ?, ?)",
            ("s", "old", "shell", 9e18, '{"id":"old","kind":"shell"}'),
        )
        conn.execute(
            "INSERT INTO taskloom_background_notices (session_id, id, body) VALUES (?, ?, ?)",
            ("s", "old:end", '{"id":"old:end","activity_id":"old","kind":"shell"}'),
        )
    store = SQLiteBackend(path).store
    async with Runtime(store) as runtime:
        service = BackgroundService.of(runtime)
        assert [a.id for a in await service.registry.list("s")] == ["old"]
        assert [n.id for n in await service.inbox.pending("s")] == ["old:end"]
        assert await service.registry.add("s", ACTIVITY, 30.0, kind_cap=2)
        assert not await service.inbox.push("s", BackgroundNotice("old:end", "old", "shell", ""))
        assert (await store.get("s")).agent == "agent"
        assert await service.inbox.push("s", NOTICE)
    assert sqlite_versions(path) == {"sessions": 1, "leases": 1, "background": 1}

    # A backend of its own on the upgraded file finds the version recorded.
    inbox_backend = SQLiteBackend(path)
    inbox = inbox_backend.inbox
    try:
        assert [n.id for n in await inbox.pending("s")] == ["old:end", NOTICE.id]
    finally:
        await inbox_backend.close()


# ---------------------------------------------------------------- PostgreSQL


@requires_postgres
async def test_postgres_store_and_its_background_share_one_pool(pg_schema: str) -> None:
    store = PostgresBackend(PG_DSN, schema=pg_schema, max_size=1, checkout_timeout=0.5).store
    async with Runtime(store) as runtime:
        service = BackgroundService.of(runtime)
        assert await service.registry.add("s", ACTIVITY, 30.0, kind_cap=1)
        async with store.database.connection():
            # The pool's only connection is out: background work waits for
            # it, bounded by the store's checkout_timeout.
            async with asyncio.timeout(10):
                with pytest.raises(StoreUnavailable, match="no pooled connection"):
                    await service.inbox.pending("s")
        assert await service.inbox.push("s", NOTICE)
        assert service.registry.database is store.database
        assert service.inbox.database is store.database
    assert postgres_versions(pg_schema) == {"sessions": 1, "leases": 1, "background": 1}


@requires_postgres
async def test_a_postgres_registry_of_its_own_reopens_after_close(pg_schema: str) -> None:
    db = PostgresDatabase(PG_DSN, schema=pg_schema)
    registry = PostgresActivityRegistry(db)
    assert await registry.add("s", ACTIVITY, 30.0)
    await db.close()
    db = PostgresDatabase(PG_DSN, schema=pg_schema)  # the registry is rebuilt on a new database
    registry = PostgresActivityRegistry(db)
    assert await registry.list("s") == [ACTIVITY]
    await db.close()
    assert postgres_versions(pg_schema) == {"background": 1}


@requires_postgres
async def test_a_postgres_database_made_by_the_old_ddl_upgrades(pg_schema: str) -> None:
    activities = sql.Identifier(pg_schema, "taskloom_background_activities")
    notices = sql.Identifier(pg_schema, "taskloom_background_notices")
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        for statement in OLD_POSTGRES_DDL:
            conn.execute(sql.SQL(statement).format(activities=activities, notices=notices))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (session_id, id, kind, expires_at, body) VALUES (%s, %s, %s, %s, %s)"
            ).format(activities),
            ("s", "old", "shell", 9e18, '{"id":"old","kind":"shell"}'),
        )
        conn.execute(
            sql.SQL("INSERT INTO {} (session_id, id, body) VALUES (%s, %s, %s)").format(notices),
            ("s", "old:end", '{"id":"old:end","activity_id":"old","kind":"shell"}'),
        )
    store = PostgresBackend(PG_DSN, schema=pg_schema).store
    async with Runtime(store) as runtime:
        service = BackgroundService.of(runtime)
        assert [a.id for a in await service.registry.list("s")] == ["old"]
        assert await service.registry.add("s", BackgroundActivity("b", "shell", "", 0.0), 30.0)
        assert not await service.registry.add("s", ACTIVITY, 30.0, kind_cap=2)
        assert [n.id for n in await service.inbox.pending("s")] == ["old:end"]
        assert await service.inbox.push("s", NOTICE)
    assert postgres_versions(pg_schema) == {"sessions": 1, "leases": 1, "background": 1}

    inbox_backend = PostgresBackend(PG_DSN, schema=pg_schema)
    inbox = inbox_backend.inbox
    try:
        assert [n.id for n in await inbox.pending("s")] == ["old:end", NOTICE.id]
    finally:
        await inbox_backend.close()
