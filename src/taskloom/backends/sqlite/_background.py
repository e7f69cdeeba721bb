"""SQLite activity registry and notice inbox.

Both work through their backend's `SQLiteDatabase` (one connection, one
thread, one `busy_timeout`). Atomicity between processes comes from SQLite's
own locking (a cap check takes the write lock before it counts).
"""

from __future__ import annotations

import json
import sqlite3

from .._activities import BackgroundActivity, BackgroundNotice
from .._sql import Migration, SQLActivities, SQLNotices
from ._database import immediate

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


class SQLiteActivityRegistry(SQLActivities):
    """An `ActivityRegistry` on a backend's `SQLiteDatabase`; `clock` measures leases.

    Lease times are stored as the clock's readings, so processes sharing a
    file must share a clock — the default wall clock does.
    """

    MIGRATIONS = SQLITE_BACKGROUND_MIGRATIONS
    _load = staticmethod(json.loads)
    _sql_list = (
        "SELECT body FROM taskloom_background_activities"
        " WHERE session_id = :session AND expires_at > :now ORDER BY rowid"
    )
    _sql_renew = (
        "UPDATE taskloom_background_activities SET expires_at = :expires_at"
        " WHERE session_id = :session AND id = :id AND expires_at > :now"
    )
    _sql_remove = (
        "DELETE FROM taskloom_background_activities WHERE session_id = :session AND id = :id"
    )
    _sql_clear = "DELETE FROM taskloom_background_activities WHERE session_id = :session"

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

        return bool(await self._db.run(add))


class SQLiteNoticeInbox(SQLNotices):
    """A `NoticeInbox` on a backend's `SQLiteDatabase` (see `SQLNotices`)."""

    MIGRATIONS = SQLITE_BACKGROUND_MIGRATIONS
    _dump = _dump_ids = staticmethod(_dumps)
    _load = staticmethod(json.loads)
    _sql_push = (
        "INSERT INTO taskloom_background_notices (session_id, id, body)"
        " VALUES (:session, :id, :body) ON CONFLICT (session_id, id) DO NOTHING"
    )
    _sql_pending = (
        "SELECT body FROM taskloom_background_notices"
        " WHERE session_id = :session AND acked = 0 ORDER BY seq"
    )
    # Each body with its seq, as one JSON text: group_concat keeps no order
    # SQLite promises, so `from_column` sorts by the seq. NULL when nothing
    # is pending: the store's placed append tests it so (`IS NULL`).
    _sql_pending_column = (
        "(SELECT '[' || group_concat('[' || seq || ',' || body || ']', ',') || ']'"
        " FROM taskloom_background_notices WHERE session_id = {session} AND acked = 0)"
    )
    _sql_ack = (
        "UPDATE taskloom_background_notices SET acked = 1 WHERE session_id = :session"
        " AND acked = 0 AND id IN (SELECT value FROM json_each(:ids))"
    )
    _sql_clear = "DELETE FROM taskloom_background_notices WHERE session_id = :session"

    def from_column(self, value: str | None) -> list[BackgroundNotice]:
        if value is None:
            return []
        return [BackgroundNotice.from_dict(body) for _, body in sorted(json.loads(value))]
