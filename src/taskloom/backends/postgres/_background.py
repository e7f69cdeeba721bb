"""PostgreSQL activity registry and notice inbox (psycopg 3).

Both work through a `PostgresDatabase`: their own, opened lazily from a URL,
or a store's, so that a `PostgresStore`, its leases and its background work
share one pool and the store's bounds on every wait (connect, checkout,
statements). The pool belongs to the event loop that first used it.

The tables are the `"background"` component's versioned migrations, applied
on first use under the database's migration lock. `schema` puts them in a
schema of their own, e.g. one per test run. Registry and inbox may share a
schema (and the database of a `PostgresStore`): their tables do not overlap.
"""

from __future__ import annotations

import functools
from builtins import list as _list
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.types.json import Jsonb

from .._activities import BackgroundActivity, BackgroundNotice
from .._leases import Clock, system_clock
from .._pool import PoolOptions, PoolSettings
from .._sql import Migration
from ._database import PostgresDatabase

if TYPE_CHECKING:
    from typing_extensions import Unpack

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


class _Database:
    """The `PostgresDatabase` a registry or inbox works on (its own, or a shared
    one), plus the background tables' names.

    Its own is replaced by a fresh one when closed, because these backends
    promise that a call after `close()` opens a new pool; a shared one is left
    to its owner (the store), which closes it once for everything on it.
    """

    def __init__(
        self, source: str | PostgresDatabase, pool: PoolOptions | None, options: PoolSettings
    ) -> None:
        self._make: Callable[[], PostgresDatabase] | None = None
        if isinstance(source, PostgresDatabase):
            self.db = source
        else:
            self._make = functools.partial(
                PostgresDatabase, source, (pool or PoolOptions()).replace(**options)
            )
            self.db = self._make()
        self.db.require("background", POSTGRES_BACKGROUND_MIGRATIONS)
        schema = self.db.schema
        prefix = (schema,) if schema else ()
        self.activities = sql.Identifier(*prefix, "taskloom_background_activities")
        self.notices = sql.Identifier(*prefix, "taskloom_background_notices")
        # Advisory locks are database-wide: the schema keeps two deployments
        # in one database from serialising on each other's keys.
        self.kind_lock_prefix = f"taskloom.background.kind:{schema or ''}:"

    async def execute(self, query: sql.Composed, params: tuple[object, ...]) -> int:
        """Run one statement (its own transaction) and return how many rows it changed."""
        async with self.db.connection() as conn:
            cur = await conn.execute(query, params)
            return cur.rowcount

    async def bodies(self, query: sql.Composed, params: tuple[object, ...]) -> _list[Any]:
        """The first column of every row the query returns."""
        async with self.db.connection() as conn:
            cur = await conn.execute(query, params)
            return [row[0] for row in await cur.fetchall()]

    async def close(self) -> None:
        if self._make is None:
            return
        db, self.db = self.db, self._make()
        self.db.require("background", POSTGRES_BACKGROUND_MIGRATIONS)
        await db.close()


class PostgresActivityRegistry:
    """An `ActivityRegistry` in PostgreSQL at `url`; `clock` measures leases.

    Given a URL, the registry opens its own pool on first use, sized and
    bounded by `pool` (a `PoolOptions`, or its fields as keywords); given a
    `PostgresDatabase` (its backend's) it works on that pool, in that
    database's schema, and those options are ignored.

    Lease times are stored as the clock's readings, so processes sharing the
    tables must share a clock — the default wall clock does.
    """

    def __init__(
        self,
        url: str | PostgresDatabase,
        *,
        clock: Clock = system_clock,
        pool: PoolOptions | None = None,
        **options: Unpack[PoolSettings],
    ) -> None:
        self._db = _Database(url, pool, options)
        self._clock = clock

    @property
    def database(self) -> PostgresDatabase:
        """The database the registry works on now (a store's, when built on it)."""
        return self._db.db

    async def add(
        self, session: str, activity: BackgroundActivity, lease: float, kind_cap: int | None = None
    ) -> bool:
        now = self._clock()
        table = self._db.activities
        async with self._db.db.connection() as conn, conn.transaction():
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
        """Close the pool if this object opened it (a later call opens a new one);
        a shared database stays open until its owner closes it."""
        await self._db.close()


class PostgresNoticeInbox:
    """A `NoticeInbox` in PostgreSQL at `url` (or on a `PostgresDatabase`, as the registry).

    Acknowledged notices stay (marked) until `clear`, so a late duplicate of
    a report the model already saw is still recognised and refused.
    """

    def __init__(
        self,
        url: str | PostgresDatabase,
        *,
        pool: PoolOptions | None = None,
        **options: Unpack[PoolSettings],
    ) -> None:
        self._db = _Database(url, pool, options)

    @property
    def database(self) -> PostgresDatabase:
        """The database the inbox works on now (a store's, when built on it)."""
        return self._db.db

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
        """Close the pool if this object opened it (a later call opens a new one);
        a shared database stays open until its owner closes it."""
        await self._db.close()
