"""PostgreSQL activity registry and notice inbox (psycopg 3).

Both work through their backend's `PostgresDatabase`: one pool, and its
bounds on every wait.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from .._activities import ActivityRegistry, BackgroundActivity, BackgroundNotice
from .._leases import Clock, Lease, Leases, system_clock
from .._sql import Migration, SQLActivities, SQLLeases, SQLNotices
from ._database import PostgresDatabase
from ._leases import PostgresLeases

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


class PostgresActivityRegistry(SQLActivities):
    """An `ActivityRegistry` on a backend's `PostgresDatabase`; `clock` measures leases.

    Lease times are stored as the clock's readings, so processes sharing the
    tables must share a clock — the default wall clock does.
    """

    MIGRATIONS = POSTGRES_BACKGROUND_MIGRATIONS

    def __init__(self, database: PostgresDatabase, *, clock: Clock = system_clock) -> None:
        super().__init__(database, clock=clock)
        self._table = table = database.table("background_activities")
        where = "WHERE session_id = %(session)s"
        self._sql_list = f"SELECT body FROM {table} {where} AND expires_at > %(now)s ORDER BY seq"
        self._sql_renew = (
            f"UPDATE {table} SET expires_at = %(expires_at)s"
            f" {where} AND id = %(id)s AND expires_at > %(now)s"
        )
        self._sql_remove = f"DELETE FROM {table} {where} AND id = %(id)s"
        self._sql_clear = f"DELETE FROM {table} {where}"
        self._sql_running_column = (
            f"ARRAY(SELECT body FROM {table} WHERE session_id = {{session}}"
            " AND expires_at > {now} ORDER BY seq)"
        )
        # Advisory locks are database-wide: the schema keeps two deployments
        # in one database from serialising on each other's keys.
        self._kind_lock_prefix = f"taskloom.background.kind:{database.schema or ''}:"

    def running_column(self, database: object) -> str | None:
        """A scalar SQL expression of what `list(session)` returns, for a store
        on `database` to return beside its own columns (one statement); None
        when this registry is on another database or lists in its own way.
        `{session}` and `{now}` in it stand for the session id and the clock's
        reading (`now()`): the caller puts its own parameters there.
        `from_running_column` reads its value."""
        if database is not self._db or type(self).list is not SQLActivities.list:
            return None
        return self._sql_running_column

    def now(self) -> float:
        """The clock's reading, by which a lease that ends before it has lapsed."""
        return self._clock()

    def from_running_column(self, value: list[Any]) -> list[BackgroundActivity]:
        """The activities `running_column`'s value holds, in `list`'s order."""
        return [BackgroundActivity.from_dict(body) for body in value]

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


class PostgresNoticeInbox(SQLNotices):
    """A `NoticeInbox` on a backend's `PostgresDatabase` (see `SQLNotices`)."""

    MIGRATIONS = POSTGRES_BACKGROUND_MIGRATIONS
    _dump = staticmethod(Jsonb)

    def __init__(self, database: PostgresDatabase) -> None:
        super().__init__(database)
        table = database.table("background_notices")
        where = "WHERE session_id = %(session)s"
        # A second writer of an id waits for the first to commit, then inserts
        # nothing (or inserts, if the first rolled back).
        self._sql_push = (
            f"INSERT INTO {table} (session_id, id, body) VALUES (%(session)s, %(id)s, %(body)s)"
            " ON CONFLICT (session_id, id) DO NOTHING"
        )
        self._sql_pending = f"SELECT body FROM {table} {where} AND NOT acked ORDER BY seq"
        self._sql_pending_column = (
            f"ARRAY(SELECT body FROM {table} WHERE session_id = {{session}}"
            " AND NOT acked ORDER BY seq)"
        )
        self._sql_ack = (
            f"UPDATE {table} SET acked = true {where} AND NOT acked AND id = ANY(%(ids)s)"
        )
        self._sql_clear = f"DELETE FROM {table} {where}"
        # A data-modifying CTE runs whether or not the query reads it: both
        # writes in one statement, one transaction.
        self._sql_push_removing = self._push_removing_sql("")
        # With a lease given up too, by the leases' table (made at first use).
        self._sql_releasing: dict[str, str] = {}

    def _push_removing_sql(self, also: str) -> str:
        """The push and the registration's removal in one statement; `also`:
        more data-modifying CTEs (each with its leading comma)."""
        return (
            f"WITH pushed AS ({self._sql_push} RETURNING 1), removed AS ("
            f"DELETE FROM {self.database.table('background_activities')}"
            f" WHERE session_id = %(session)s AND id = %(activity)s){also}"
            " SELECT count(*) FROM pushed"
        )

    def _removes_with(self, registry: ActivityRegistry) -> bool:
        """Whether the push and `registry`'s removal can go in one statement."""
        return (
            isinstance(registry, PostgresActivityRegistry)
            and registry.database is self.database
            and type(registry).remove is SQLActivities.remove
            and type(self).push is SQLNotices.push
        )

    async def push_removing(
        self, session: str, notice: BackgroundNotice, registry: ActivityRegistry
    ) -> bool | None:
        """`push(session, notice)` and `registry.remove(session, notice.activity_id)`
        in one statement, both or neither: True if this call wrote the notice.
        None, with nothing done, when `registry` is not this backend's own on
        the same database (or either's write is overridden): the caller then
        makes the two calls."""
        if not self._removes_with(registry):
            return None
        return await self._written(self._sql_push_removing, session, notice)

    async def push_removing_releasing(
        self,
        session: str,
        notice: BackgroundNotice,
        registry: ActivityRegistry,
        leases: Leases,
        lease: Lease,
    ) -> bool | None:
        """`push_removing`, with `leases.release(lease)` in the same statement:
        all three writes or none. True if this call wrote the notice. None,
        with nothing done, when `push_removing` would return None, or `leases`
        is not a `PostgresLeases` on the same database that releases as it
        does: the caller then makes the calls apart."""
        if not (
            self._removes_with(registry)
            and isinstance(leases, PostgresLeases)
            and leases.database is self.database
            and type(leases).release is SQLLeases.release
        ):
            return None
        table = self.database.table("leases")
        sql = self._sql_releasing.get(table)
        if sql is None:
            # The leases' own release (`key`, `generation`: no name shared
            # with the push's parameters).
            sql = self._sql_releasing[table] = self._push_removing_sql(
                f", released AS ({leases.release_statement})"
            )
        # Ahead of queued writes, as a release alone goes (`SQLLeases.release`).
        return await self._written(
            sql, session, notice, urgent=True, key=lease.key, generation=lease.generation
        )

    async def _written(
        self,
        sql: str,
        session: str,
        notice: BackgroundNotice,
        *,
        urgent: bool = False,
        **more: Any,
    ) -> bool:
        params = {
            "session": session,
            "id": notice.id,
            "body": self._dump(notice.to_dict()),
            "activity": notice.activity_id,
            **more,
        }
        row = await self.database.fetchone(sql, params, urgent=urgent)
        return row is not None and int(row[0]) == 1

    def from_column(self, value: list[Any]) -> list[BackgroundNotice]:
        return [BackgroundNotice.from_dict(body) for body in value]
