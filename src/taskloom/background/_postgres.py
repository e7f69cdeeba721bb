"""PostgreSQL activity registry and notice inbox (psycopg 3, async pool).

Each object opens its connection pool lazily, on the first call, and uses
it from that event loop only; the pool is a `PostgresDatabase`'s, so every
wait on the server is bounded and a dead connection is never handed out.
Tables (and the schema, when one is named) are created on first use under
an advisory lock, since two processes racing `CREATE TABLE IF NOT EXISTS`
can otherwise both try to create it and one fails.

`schema` puts the tables in a schema of their own, e.g. one per test run.
Registry and inbox may share a schema (and the database of a
`PostgresStore`): their tables do not overlap.
"""

from __future__ import annotations

import asyncio
from builtins import list as _list
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from ..stores._leases import Clock, system_clock
from ..stores._sql import PostgresDatabase
from ._activities import BackgroundActivity, BackgroundNotice

__all__ = ["PostgresActivityRegistry", "PostgresNoticeInbox"]

_ACTIVITIES = "taskloom_background_activities"
_NOTICES = "taskloom_background_notices"

_DDL = (
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


class _Database:
    """A `PostgresDatabase` (its pool and bounded waits) plus the background tables' names."""

    def __init__(self, url: str, schema: str | None, min_size: int, max_size: int) -> None:
        self._url = url
        self._schema = schema
        self._sizes = (min_size, max_size)
        self._db = self._new_db()
        self._tables_ready = False
        self._opening = asyncio.Lock()
        prefix = (schema,) if schema else ()
        self.activities = sql.Identifier(*prefix, _ACTIVITIES)
        self.notices = sql.Identifier(*prefix, _NOTICES)
        # Advisory locks are database-wide: the schema keeps two deployments
        # in one database from serialising on each other's keys.
        self.ddl_lock = f"taskloom.background.ddl:{schema or ''}"
        self.kind_lock_prefix = f"taskloom.background.kind:{schema or ''}:"

    def _new_db(self) -> PostgresDatabase:
        min_size, max_size = self._sizes
        return PostgresDatabase(self._url, min_size=min_size, max_size=max_size)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        if not self._tables_ready:
            await self._open()
        async with self._db.connection() as conn:
            yield conn

    async def _open(self) -> None:
        async with self._opening:
            if not self._tables_ready:
                await self._create_tables()
                self._tables_ready = True

    async def _create_tables(self) -> None:
        async with self._db.connection() as conn:
            # All of the DDL commits at once, so its last index standing means
            # everything is there. Skipping it then matters: CREATE INDEX IF
            # NOT EXISTS still locks the table, queueing behind live writers
            # of other processes and holding up the writers behind it.
            cur = await conn.execute(
                "SELECT 1 FROM pg_indexes WHERE schemaname = coalesce(%s, current_schema())"
                " AND indexname = 'taskloom_background_notices_pending'",
                (self._schema,),
            )
            if await cur.fetchone() is not None:
                return
            async with conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (self.ddl_lock,),
                )
                if self._schema:
                    await conn.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                            sql.Identifier(self._schema)
                        )
                    )
                for statement in _DDL:
                    await conn.execute(
                        sql.SQL(statement).format(activities=self.activities, notices=self.notices)
                    )

    async def execute(self, query: sql.Composed, params: tuple[object, ...]) -> int:
        """Run one statement (its own transaction) and return how many rows it changed."""
        async with self.connection() as conn:
            cur = await conn.execute(query, params)
            return cur.rowcount

    async def bodies(self, query: sql.Composed, params: tuple[object, ...]) -> _list[Any]:
        """The first column of every row the query returns."""
        async with self.connection() as conn:
            cur = await conn.execute(query, params)
            return [row[0] for row in await cur.fetchall()]

    async def close(self) -> None:
        # A PostgresDatabase closes for good; these objects promise that a
        # later call opens a new pool.
        db, self._db = self._db, self._new_db()
        self._tables_ready = False
        await db.close()


class PostgresActivityRegistry:
    """An `ActivityRegistry` in PostgreSQL at `url`; `clock` measures leases.

    Lease times are stored as the clock's readings, so processes sharing the
    tables must share a clock — the default wall clock does.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        clock: Clock = system_clock,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        self._db = _Database(url, schema, min_size, max_size)
        self._clock = clock

    async def add(
        self, session: str, activity: BackgroundActivity, lease: float, kind_cap: int | None = None
    ) -> bool:
        now = self._clock()
        table = self._db.activities
        async with self._db.connection() as conn, conn.transaction():
            # Rows that do not exist yet cannot be locked, so counting and
            # inserting are serialised per (session, kind) by a transaction-
            # scoped advisory lock instead: no two adds of one kind can both
            # count below the cap and both insert.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"{self._db.kind_lock_prefix}{session}:{activity.kind}",),
            )
            # Only this kind's lapsed rows, which the lock covers: touching
            # other kinds' rows here could deadlock with their adds.
            await conn.execute(
                sql.SQL(
                    "DELETE FROM {} WHERE session_id = %s AND kind = %s AND expires_at <= %s"
                ).format(table),
                (session, activity.kind, now),
            )
            if kind_cap is not None:
                cur = await conn.execute(
                    sql.SQL(
                        "SELECT count(*) FROM {} WHERE session_id = %s AND kind = %s"
                        " AND id <> %s AND expires_at > %s"
                    ).format(table),
                    (session, activity.kind, activity.id, now),
                )
                row = await cur.fetchone()
                if row is not None and row[0] >= kind_cap:
                    return False
            # An upsert keeps the row's `seq`, hence its place in `list`.
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (session_id, id, kind, expires_at, body)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id, id) DO UPDATE SET"
                    " kind = excluded.kind, expires_at = excluded.expires_at, body = excluded.body"
                ).format(table),
                (session, activity.id, activity.kind, now + lease, Jsonb(activity.to_dict())),
            )
        return True

    async def list(self, session: str) -> _list[BackgroundActivity]:
        bodies = await self._db.bodies(
            sql.SQL(
                "SELECT body FROM {} WHERE session_id = %s AND expires_at > %s ORDER BY seq"
            ).format(self._db.activities),
            (session, self._clock()),
        )
        return [BackgroundActivity.from_dict(b) for b in bodies]

    async def renew(self, session: str, activity_id: str, lease: float) -> bool:
        now = self._clock()
        changed = await self._db.execute(
            sql.SQL(
                "UPDATE {} SET expires_at = %s WHERE session_id = %s AND id = %s AND expires_at > %s"
            ).format(self._db.activities),
            (now + lease, session, activity_id, now),
        )
        return changed == 1

    async def remove(self, session: str, activity_id: str) -> None:
        await self._db.execute(
            sql.SQL("DELETE FROM {} WHERE session_id = %s AND id = %s").format(self._db.activities),
            (session, activity_id),
        )

    async def clear(self, session: str) -> None:
        await self._db.execute(
            sql.SQL("DELETE FROM {} WHERE session_id = %s").format(self._db.activities),
            (session,),
        )

    async def close(self) -> None:
        """Close the pool (a later call opens a new one)."""
        await self._db.close()


class PostgresNoticeInbox:
    """A `NoticeInbox` in PostgreSQL at `url`.

    Acknowledged notices stay (marked) until `clear`, so a late duplicate of
    a report the model already saw is still recognised and refused.
    """

    def __init__(
        self, url: str, *, schema: str | None = None, min_size: int = 1, max_size: int = 4
    ) -> None:
        self._db = _Database(url, schema, min_size, max_size)

    async def push(self, session: str, notice: BackgroundNotice) -> bool:
        # The unique key decides the race: a second writer of the id waits for
        # the first to commit and then inserts nothing (or inserts, if the
        # first rolled back), so exactly one push reports True.
        inserted = await self._db.execute(
            sql.SQL(
                "INSERT INTO {} (session_id, id, body) VALUES (%s, %s, %s)"
                " ON CONFLICT (session_id, id) DO NOTHING"
            ).format(self._db.notices),
            (session, notice.id, Jsonb(notice.to_dict())),
        )
        return inserted == 1

    async def pending(self, session: str) -> _list[BackgroundNotice]:
        bodies = await self._db.bodies(
            sql.SQL("SELECT body FROM {} WHERE session_id = %s AND NOT acked ORDER BY seq").format(
                self._db.notices
            ),
            (session,),
        )
        return [BackgroundNotice.from_dict(b) for b in bodies]

    async def ack(self, session: str, ids: Iterable[str]) -> None:
        wanted = _list(ids)
        if not wanted:
            return
        await self._db.execute(
            sql.SQL(
                "UPDATE {} SET acked = true WHERE session_id = %s AND NOT acked AND id = ANY(%s)"
            ).format(self._db.notices),
            (session, wanted),
        )

    async def clear(self, session: str) -> None:
        await self._db.execute(
            sql.SQL("DELETE FROM {} WHERE session_id = %s").format(self._db.notices), (session,)
        )

    async def close(self) -> None:
        """Close the pool (a later call opens a new one)."""
        await self._db.close()
