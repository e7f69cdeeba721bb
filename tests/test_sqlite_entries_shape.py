"""A SQLite file whose entries table has the first shape (a rowid table beside
its key's index) opens, is rebuilt keyed by (session_id, position), and keeps
every entry and what it promised: positions, order, the cascade from its
session, appends where the log ends."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from taskloom.backends import SessionMeta
from taskloom.backends.sqlite import SQLiteBackend
from taskloom.entries import Entry

# The sessions component at schema version 1, as released: what a file made
# before the rebuild holds.
VERSION_1 = """
CREATE TABLE taskloom_schema_version (component TEXT PRIMARY KEY, version INTEGER NOT NULL);
INSERT INTO taskloom_schema_version VALUES ('sessions', 1), ('leases', 1);
CREATE TABLE taskloom_sessions (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    parent_id TEXT,
    created_at REAL NOT NULL,
    metadata TEXT NOT NULL
);
CREATE INDEX taskloom_sessions_created ON taskloom_sessions (created_at);
CREATE INDEX taskloom_sessions_parent ON taskloom_sessions (parent_id, created_at);
CREATE INDEX taskloom_sessions_agent ON taskloom_sessions (agent, created_at);
CREATE TABLE taskloom_entries (
    session_id TEXT NOT NULL REFERENCES taskloom_sessions (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    run_id TEXT,
    created_at REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (session_id, position)
);
CREATE TABLE taskloom_leases (
    key TEXT PRIMARY KEY,
    holder TEXT,
    generation INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
"""


def _old_file(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(VERSION_1)
        conn.execute("PRAGMA journal_mode = WAL")
        for sid in ("a", "b"):
            conn.execute(
                "INSERT INTO taskloom_sessions VALUES (?, 'agent', NULL, 1.0, '{}')", (sid,)
            )
        # Inserted out of key order, so a rebuild that kept rowid order would show.
        rows = [("b", 1, "note", None, 2.0, '{"n":"b1"}')]
        rows += [("a", p, "message", f"r{p}", 1.0 + p, f'{{"n":{p}}}') for p in range(1, 41)]
        rows += [("b", 2, "note", "r", 3.0, '{"n":"b2"}')]
        conn.executemany("INSERT INTO taskloom_entries VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.close()


def _shape(path: Path) -> tuple[str, int]:
    with sqlite3.connect(path) as conn:
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'taskloom_entries'"
        ).fetchone()
        (version,) = conn.execute(
            "SELECT version FROM taskloom_schema_version WHERE component = 'sessions'"
        ).fetchone()
    conn.close()
    return sql, version


async def test_an_entries_table_of_the_first_shape_is_rebuilt_keeping_its_entries(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    _old_file(path)
    backend = SQLiteBackend(path)
    store = backend.store
    try:
        a = await store.load("a")
        assert [(e.position, e.kind, e.run_id, e.created_at, e.data) for e in a] == [
            (p, "message", f"r{p}", 1.0 + p, {"n": p}) for p in range(1, 41)
        ]
        assert [e.data for e in await store.load("b")] == [{"n": "b1"}, {"n": "b2"}]
        assert [e.position for e in await store.load("a", after=38)] == [39, 40]
        # Appends go on where each log ends, placed or not.
        assert await store.append("a", Entry("note", {"n": 41}, None, 41)) == 41
        assert await store.append("b", Entry("note", {"n": "b3"})) == 3
        # The rebuilt table keeps the cascade from its session.
        await store.delete("b")
        await store.create(SessionMeta("b", "agent"))
        assert await store.load("b") == []
    finally:
        await backend.close()
    sql, version = _shape(path)
    assert version == 2
    assert sql.rstrip().endswith("WITHOUT ROWID")
    assert "REFERENCES taskloom_sessions" in sql and "ON DELETE CASCADE" in sql
    with sqlite3.connect(path) as conn:
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_schema")}
    conn.close()
    assert "sqlite_autoindex_taskloom_entries_1" not in names
    assert "taskloom_entries_keyed" not in names

    # A later opener finds the version recorded and the entries as they were.
    again = SQLiteBackend(path)
    try:
        assert [e.position for e in await again.store.load("a")] == list(range(1, 42))
    finally:
        await again.close()
    assert _shape(path) == (sql, 2)


async def test_a_new_file_has_its_entries_keyed_by_session_and_position(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "new.db")
    try:
        await backend.store.create(SessionMeta("s", "agent"))
        assert await backend.store.append("s", Entry("note", {})) == 1
    finally:
        await backend.close()
    sql, version = _shape(tmp_path / "new.db")
    assert version == 2 and sql.rstrip().endswith("WITHOUT ROWID")
    with sqlite3.connect(tmp_path / "new.db") as conn:
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_schema")}
    conn.close()
    # One b-tree: no index beside the table (a rowid table keeps its key in one).
    assert not {n for n in names if n.startswith("sqlite_autoindex_taskloom_entries")}
    assert "taskloom_entries_keyed" not in names
