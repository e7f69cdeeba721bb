"""PostgreSQL activity registry and notice inbox (psycopg 3).

Both work through their backend's `PostgresDatabase`: one pool, and its
bounds on every wait.

The tables are the `"background"` component's versioned migrations, applied
on first use under the database's migration lock, in the database's schema.
"""

from __future__ import annotations

from builtins import list as _list
from collections.abc import Iterable

from psycopg.types.json import Jsonb

from .._activities import BackgroundActivity, BackgroundNotice
from .._leases import Clock, system_clock
from .._sql import Migration
from ._database import PostgresDatabase

__all__ = ["POSTGRES_BACKGROUND_MIGRATIONS", "PostgresActivityRegistry", "PostgresNoticeInbox"]

POSTGRES_BACKGROUND_MIGRATIONS: tuple[Migration, ...] = (
    # IF NOT EXISTS: databases made before these migrations existed already
    # hold exactly these tables; the first migration then only records version 1.
    (
        """CREATE TABLE IF NOT EXISTS {background_activities} (
            session_id text NOT NULL,
            id text NOT NULL,
            kind text NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            expires_at double precision NOT NULL,
            body jsonb NOT NULL,
            PRIMARY KEY (session_id, id)
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_background_activities_kind"
        " ON {background_activities} (session_id, kind)",
        """CREATE TABLE IF NOT EXISTS {background_notices} (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id text NOT NULL,
            id text NOT NULL,
            acked boolean NOT NULL DEFAULT false,
            body jsonb NOT NULL,
            UNIQUE (session_id, id)
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_background_notices_pending"
        " ON {background_notices} (session_id, seq) WHERE NOT acked",
    ),
)


class PostgresActivityRegistry:
    """An `ActivityRegistry` on a backend's `PostgresDatabase`; `clock` measures leases.

    Lease times are stored as the clock's readings, so processes sharing the
    tables must share a clock — the default wall clock does.
    """

    def __init__(self, database: PostgresDatabase, *, clock: Clock = system_clock) -> None:
        self.database = self._db = database
        self._clock = clock
        database.require("background", POSTGRES_BACKGROUND_MIGRATIONS)
        self._table = database.table("background_activities")
        # Advisory locks are database-wide: the schema keeps two deployments
        # in one database from serialising on each other's keys.
        self._kind_lock_prefix = f"taskloom.background.kind:{database.schema or ''}:"

    async def add(
        self, session: str, activity: BackgroundActivity, lease: float, kind_cap: int | None = None
    ) -> bool:
        now = self._clock()
        table = self._table
        async with self._db.connection() as conn, conn.transaction():
            # Rows that do not exist yet cannot be locked, so counting and
            # inserting are serialised per (session, kind) by a transaction-
            # scoped advisory lock instead: no two adds of one kind can both
            # count below the cap and both insert.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"{self._kind_lock_prefix}{session}:{activity.kind}",),
            )
            # Only this kind's lapsed rows, which the lock covers: touching
            # other kinds' rows here could deadlock with their adds.
            await conn.execute(
                f"DELETE FROM {table} WHERE session_id = %s AND kind = %s AND expires_at <= %s",
                (session, activity.kind, now),
            )
            if kind_cap is not None:
                cur = await conn.execute(
                    f"SELECT count(*) FROM {table} WHERE session_id = %s AND kind = %s"
                    " AND id <> %s AND expires_at > %s",
                    (session, activity.kind, activity.id, now),
                )
                row = await cur.fetchone()
                if row is not None and row[0] >= kind_cap:
                    return False
            # An upsert keeps the row's `seq`, hence its place in `list`.
            await conn.execute(
                f"INSERT INTO {table} (session_id, id, kind, expires_at, body)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id, id) DO UPDATE SET"
                " kind = excluded.kind, expires_at = excluded.expires_at, body = excluded.body",
                (session, activity.id, activity.kind, now + lease, Jsonb(activity.to_dict())),
            )
        return True

    async def list(self, session: str) -> _list[BackgroundActivity]:
        bodies = await self._db.fetchall(
            f"SELECT body FROM {self._table}"
            " WHERE session_id = %s AND expires_at > %s ORDER BY seq",
            (session, self._clock()),
        )
        return [BackgroundActivity.from_dict(b) for (b,) in bodies]

    async def renew(self, session: str, activity_id: str, lease: float) -> bool:
        now = self._clock()
        changed = await self._db.execute(
            f"UPDATE {self._table} SET expires_at = %s"
            " WHERE session_id = %s AND id = %s AND expires_at > %s",
            (now + lease, session, activity_id, now),
        )
        return changed == 1

    async def remove(self, session: str, activity_id: str) -> None:
        await self._db.execute(
            f"DELETE FROM {self._table} WHERE session_id = %s AND id = %s",
            (session, activity_id),
        )

    async def clear(self, session: str) -> None:
        await self._db.execute(
            f"DELETE FROM {self._table} WHERE session_id = %s",
            (session,),
        )


class PostgresNoticeInbox:
    """A `NoticeInbox` on a backend's `PostgresDatabase`.

    Acknowledged notices stay (marked) until `clear`, so a late duplicate of
    a report the model already saw is still recognised and refused.
    """

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = self._db = database
        database.require("background", POSTGRES_BACKGROUND_MIGRATIONS)
        self._table = database.table("background_notices")

    async def push(self, session: str, notice: BackgroundNotice) -> bool:
        # The unique key decides the race: a second writer of the id waits for
        # the first to commit and then inserts nothing (or inserts, if the
        # first rolled back), so exactly one push reports True.
        inserted = await self._db.execute(
            f"INSERT INTO {self._table} (session_id, id, body) VALUES (%s, %s, %s)"
            " ON CONFLICT (session_id, id) DO NOTHING",
            (session, notice.id, Jsonb(notice.to_dict())),
        )
        return inserted == 1

    async def pending(self, session: str) -> _list[BackgroundNotice]:
        bodies = await self._db.fetchall(
            f"SELECT body FROM {self._table} WHERE session_id = %s AND NOT acked ORDER BY seq",
            (session,),
        )
        return [BackgroundNotice.from_dict(b) for (b,) in bodies]

    async def ack(self, session: str, ids: Iterable[str]) -> None:
        wanted = _list(ids)
        if not wanted:
            return
        await self._db.execute(
            f"UPDATE {self._table} SET acked = true"
            " WHERE session_id = %s AND NOT acked AND id = ANY(%s)",
            (session, wanted),
        )

    async def clear(self, session: str) -> None:
        await self._db.execute(
            f"DELETE FROM {self._table} WHERE session_id = %s",
            (session,),
        )
