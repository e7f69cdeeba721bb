"""SQLite activity registry and notice inbox (stdlib `sqlite3`, WAL).

Each object owns one connection, used only by its own worker thread: sqlite3
calls block, and a dedicated thread keeps them off the event loop while
serialising them without a lock. Several processes may share the file;
atomicity between them comes from SQLite's own locking (a cap check takes
the write lock before it counts, see `SQLiteActivityRegistry.add`).

Tables are created on first use. Registry and inbox may share one file (and
the file of a `SQLiteStore`): their tables do not overlap.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from builtins import list as _list
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from ..stores._leases import Clock, system_clock
from ._activities import BackgroundActivity, BackgroundNotice

__all__ = ["SQLiteActivityRegistry", "SQLiteNoticeInbox"]

_T = TypeVar("_T")

_SCHEMA = """
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


def _connect(path: str) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; the few multi-statement
    # operations open theirs explicitly, so every lock taken is visible here.
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_SCHEMA)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def _write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE takes the database write lock before the first read, so what a
    # transaction counts cannot change under it, even from another process.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class _Connection:
    """One sqlite3 connection, opened lazily and used only by its own thread."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    async def run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="taskloom-sqlite")
        # A call whose awaiting task is cancelled still completes in the thread;
        # each function is one transaction, so it lands whole or not at all.
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call, fn)

    async def execute(self, sql: str, params: tuple[object, ...]) -> int:
        """Run one statement (its own transaction) and return how many rows it changed."""
        return await self.run(lambda conn: conn.execute(sql, params).rowcount)

    def _call(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._conn is None:
            self._conn = _connect(self._path)
        return fn(self._conn)

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(executor, self._close_conn)
        executor.shutdown(wait=False)

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class SQLiteActivityRegistry:
    """An `ActivityRegistry` in the SQLite file at `path`; `clock` measures leases.

    Lease times are stored as the clock's readings, so processes sharing a
    file must share a clock — the default wall clock does.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock = system_clock) -> None:
        self._db = _Connection(path)
        self._clock = clock

    async def add(
        self, session: str, activity: BackgroundActivity, lease: float, kind_cap: int | None = None
    ) -> bool:
        now = self._clock()
        body = _dumps(activity.to_dict())

        def add(conn: sqlite3.Connection) -> bool:
            with _write_transaction(conn):
                conn.execute(
                    "DELETE FROM taskloom_background_activities"
                    " WHERE session_id = ? AND kind = ? AND expires_at <= ?",
                    (session, activity.kind, now),
                )
                if kind_cap is not None:
                    (taken,) = conn.execute(
                        "SELECT count(*) FROM taskloom_background_activities"
                        " WHERE session_id = ? AND kind = ? AND id != ? AND expires_at > ?",
                        (session, activity.kind, activity.id, now),
                    ).fetchone()
                    if taken >= kind_cap:
                        return False
                # An upsert keeps the row (and its rowid, hence its place in
                # `list`) when the id is re-added.
                conn.execute(
                    "INSERT INTO taskloom_background_activities"
                    " (session_id, id, kind, expires_at, body) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (session_id, id) DO UPDATE SET"
                    " kind = excluded.kind, expires_at = excluded.expires_at, body = excluded.body",
                    (session, activity.id, activity.kind, now + lease, body),
                )
            return True

        return await self._db.run(add)

    async def list(self, session: str) -> _list[BackgroundActivity]:
        now = self._clock()

        def select(conn: sqlite3.Connection) -> _list[str]:
            rows = conn.execute(
                "SELECT body FROM taskloom_background_activities"
                " WHERE session_id = ? AND expires_at > ? ORDER BY rowid",
                (session, now),
            ).fetchall()
            return [body for (body,) in rows]

        return [BackgroundActivity.from_dict(json.loads(b)) for b in await self._db.run(select)]

    async def renew(self, session: str, activity_id: str, lease: float) -> bool:
        now = self._clock()

        changed = await self._db.execute(
            "UPDATE taskloom_background_activities SET expires_at = ?"
            " WHERE session_id = ? AND id = ? AND expires_at > ?",
            (now + lease, session, activity_id, now),
        )
        return changed == 1

    async def remove(self, session: str, activity_id: str) -> None:
        await self._db.execute(
            "DELETE FROM taskloom_background_activities WHERE session_id = ? AND id = ?",
            (session, activity_id),
        )

    async def clear(self, session: str) -> None:
        await self._db.execute(
            "DELETE FROM taskloom_background_activities WHERE session_id = ?", (session,)
        )

    async def close(self) -> None:
        """Close the connection and stop its thread (a later call reopens them)."""
        await self._db.close()


class SQLiteNoticeInbox:
    """A `NoticeInbox` in the SQLite file at `path`.

    Acknowledged notices stay (marked) until `clear`, so a late duplicate of
    a report the model already saw is still recognised and refused.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._db = _Connection(path)

    async def push(self, session: str, notice: BackgroundNotice) -> bool:
        # One statement decides the race: the unique key lets exactly one writer
        # of an id insert, whichever connection or process it is on.
        inserted = await self._db.execute(
            "INSERT INTO taskloom_background_notices (session_id, id, body) VALUES (?, ?, ?)"
            " ON CONFLICT (session_id, id) DO NOTHING",
            (session, notice.id, _dumps(notice.to_dict())),
        )
        return inserted == 1

    async def pending(self, session: str) -> _list[BackgroundNotice]:
        def select(conn: sqlite3.Connection) -> _list[str]:
            rows = conn.execute(
                "SELECT body FROM taskloom_background_notices"
                " WHERE session_id = ? AND acked = 0 ORDER BY seq",
                (session,),
            ).fetchall()
            return [body for (body,) in rows]

        return [BackgroundNotice.from_dict(json.loads(b)) for b in await self._db.run(select)]

    async def ack(self, session: str, ids: Iterable[str]) -> None:
        wanted = _dumps(_list(ids))
        if wanted == "[]":
            return
        await self._db.execute(
            "UPDATE taskloom_background_notices SET acked = 1"
            " WHERE session_id = ? AND acked = 0 AND id IN (SELECT value FROM json_each(?))",
            (session, wanted),
        )

    async def clear(self, session: str) -> None:
        await self._db.execute(
            "DELETE FROM taskloom_background_notices WHERE session_id = ?", (session,)
        )

    async def close(self) -> None:
        """Close the connection and stop its thread (a later call reopens them)."""
        await self._db.close()
