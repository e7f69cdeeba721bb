"""SQLite activity registry and notice inbox.

Both work through their backend's `SQLiteDatabase` (one connection, one
thread, one `busy_timeout`). Atomicity between processes comes from SQLite's
own locking (a cap check takes the write lock before it counts).

The tables are the `"background"` component's versioned migrations,
applied on first use.
"""

from __future__ import annotations

import json
import sqlite3
from builtins import list as _list
from collections.abc import Iterable

from .._activities import BackgroundActivity, BackgroundNotice
from .._leases import Clock, system_clock
from .._sql import Migration
from ._database import SQLiteDatabase, immediate

__all__ = ["SQLITE_BACKGROUND_MIGRATIONS", "SQLiteActivityRegistry", "SQLiteNoticeInbox"]

SQLITE_BACKGROUND_MIGRATIONS: tuple[Migration, ...] = (
    # IF NOT EXISTS: files made before these migrations existed already hold
    # exactly these tables; the first migration then only records version 1.
    (
        """CREATE TABLE IF NOT EXISTS taskloom_background_activities (
            session_id TEXT NOT NULL,
            id TEXT NOT NULL,
            kind TEXT NOT NULL,
            expires_at REAL NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, id)
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_background_activities_kind"
        " ON taskloom_background_activities (session_id, kind)",
        """CREATE TABLE IF NOT EXISTS taskloom_background_notices (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            id TEXT NOT NULL,
            acked INTEGER NOT NULL DEFAULT 0,
            body TEXT NOT NULL,
            UNIQUE (session_id, id)
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_background_notices_pending"
        " ON taskloom_background_notices (session_id, seq) WHERE acked = 0",
    ),
)


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class SQLiteActivityRegistry:
    """An `ActivityRegistry` on a backend's `SQLiteDatabase`; `clock` measures leases.

    Lease times are stored as the clock's readings, so processes sharing a
    file must share a clock — the default wall clock does.
    """

    def __init__(self, database: SQLiteDatabase, *, clock: Clock = system_clock) -> None:
        self.database = self._db = database
        self._clock = clock
        database.require("background", SQLITE_BACKGROUND_MIGRATIONS)

    async def add(
        self, session: str, activity: BackgroundActivity, lease: float, kind_cap: int | None = None
    ) -> bool:
        now = self._clock()
        body = _dumps(activity.to_dict())

        def add(conn: sqlite3.Connection) -> bool:
            # BEGIN IMMEDIATE takes the write lock before the count, so what
            # it counts cannot change under it, even from another process.
            with immediate(conn):
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
        rows = await self._db.fetchall(
            "SELECT body FROM taskloom_background_activities"
            " WHERE session_id = ? AND expires_at > ? ORDER BY rowid",
            (session, self._clock()),
        )
        return [BackgroundActivity.from_dict(json.loads(b)) for (b,) in rows]

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


class SQLiteNoticeInbox:
    """A `NoticeInbox` on a backend's `SQLiteDatabase`.

    Acknowledged notices stay (marked) until `clear`, so a late duplicate of
    a report the model already saw is still recognised and refused.
    """

    def __init__(self, database: SQLiteDatabase) -> None:
        self.database = self._db = database
        database.require("background", SQLITE_BACKGROUND_MIGRATIONS)

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
        rows = await self._db.fetchall(
            "SELECT body FROM taskloom_background_notices"
            " WHERE session_id = ? AND acked = 0 ORDER BY seq",
            (session,),
        )
        return [BackgroundNotice.from_dict(json.loads(b)) for (b,) in rows]

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
