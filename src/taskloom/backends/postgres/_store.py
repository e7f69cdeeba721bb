"""The PostgreSQL session store: one database shared by any number of processes.

Appends are optimistic: an insert takes `max(position) + 1` and yields to
the unique `(session_id, position)` key when another writer got there first
(`ON CONFLICT DO NOTHING`), then retries at the next position. No error
aborts the transaction on a lost race, so a fenced append retries inside the
same transaction that holds its lease row locked.

Entries are `json`, not `jsonb`, on purpose: `jsonb` reorders object keys
and renders numbers through `numeric` (a float such as 1e300 would come back
as a different integer), and the log must load exactly as it was written.
"""

from __future__ import annotations

import asyncio
import random
from builtins import list as _list
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._activities import ActivityRegistry, BackgroundActivity, BackgroundNotice, NoticeInbox
from .._leases import Clock, Fence, check_fence, system_clock
from .._sql import Migration, dump_json, list_query, load_entries
from .._store import Entry, SessionMeta, check_session_id, not_found
from ._database import PostgresDatabase
from ._leases import PostgresLeases

if TYPE_CHECKING:
    from .._backend import Backend

POSTGRES_SESSION_MIGRATIONS: tuple[Migration, ...] = (
    (
        """CREATE TABLE IF NOT EXISTS {sessions} (
            id text PRIMARY KEY,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            agent text NOT NULL,
            parent_id text,
            created_at double precision NOT NULL,
            metadata json NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_sessions_created ON {sessions} (created_at, seq)",
        "CREATE INDEX IF NOT EXISTS taskloom_sessions_parent ON {sessions} (parent_id, created_at)",
        "CREATE INDEX IF NOT EXISTS taskloom_sessions_agent ON {sessions} (agent, created_at)",
        """CREATE TABLE IF NOT EXISTS {entries} (
            session_id text NOT NULL REFERENCES {sessions} (id) ON DELETE CASCADE,
            position bigint NOT NULL,
            kind text NOT NULL,
            run_id text,
            created_at double precision NOT NULL,
            data json NOT NULL,
            PRIMARY KEY (session_id, position)
        )""",
    ),
)


def _meta(row: tuple[Any, ...]) -> SessionMeta:
    return SessionMeta(row[0], row[1], row[2], row[3], row[4])


async def _lost_race(attempt: int) -> int:
    """Wait before retrying a position another writer took; returns the next attempt."""
    # Jitter keeps a crowd of writers on one session from colliding in lockstep.
    attempt += 1
    await asyncio.sleep(random.uniform(0, min(0.0005 * attempt, 0.01)))
    return attempt


class PostgresStore:
    """Sessions in PostgreSQL, on a `PostgresBackend`'s `PostgresDatabase` (one pool).

    The schema is created (or migrated) on first use. Any number of processes
    may append to the same session; positions stay dense and each writer's
    entries keep their order. `leases` is a `PostgresLeases` on the same
    database, and `append(..., fence=)` checks it in the append's own
    transaction. `backend` is the `Backend` that built the store. No call
    waits on the server unboundedly (see `PostgresDatabase`).
    """

    backend: Backend | None = None

    def __init__(self, database: PostgresDatabase, *, clock: Clock = system_clock) -> None:
        self.database = self._db = database
        self._clock = clock
        database.require("sessions", POSTGRES_SESSION_MIGRATIONS)
        self.leases = PostgresLeases(database, clock=clock)
        sessions, entries = self._db.table("sessions"), self._db.table("entries")
        self._sessions = sessions
        columns = "id, agent, parent_id, created_at, metadata"
        self._sql_list = f"SELECT {columns} FROM {sessions}"
        self._sql_create = f"""
            INSERT INTO {sessions} ({columns}) VALUES (%s, %s, %s, %s, %s::json)
            ON CONFLICT (id) DO NOTHING RETURNING id"""
        self._sql_get = f"SELECT {columns} FROM {sessions} WHERE id = %s"
        self._insert = insert = f"""
            INSERT INTO {entries} (session_id, position, kind, run_id, created_at, data)
            SELECT %(sid)s, COALESCE(MAX(position), 0) + 1, %(kind)s, %(run_id)s,
                   %(created_at)s, %(data)s::json
            FROM {entries} WHERE session_id = %(sid)s"""
        self._sql_append = f"""{insert}
            ON CONFLICT (session_id, position) DO NOTHING
            RETURNING position"""
        # A fenced append is one statement, so one round trip: the lease row
        # is locked FOR SHARE before the row is made, and the lock holds to
        # the statement's commit. FOR SHARE, not KEY SHARE: a new acquisition
        # updates `generation` (a non-key column), and must wait until this
        # append commits, so no write checked against the old generation can
        # land after the new one; an acquisition that got there first is
        # seen by the lock, which reads the row's newest version.
        self._sql_fenced_append = self._fenced_append(insert, sessions)
        # The fenced append that also reads an inbox's pending notices, by the
        # inbox's statement (one per inbox, made at its first use).
        self._with_pending: dict[str, str] = {}
        # Several entries in one statement (`append_all`), by (fenced, the
        # inbox's pending column or "", the registry's running column or "",
        # whether the tail is gated as `append_ending` gates it), made at
        # first use.
        self._sql_append_all: dict[tuple[bool, str, str, bool], str] = {}
        # The data as text, decoded here: a row Python cannot decode (the json
        # type takes nesting deeper than Python's parser, and any JSON value)
        # is then reported as that entry, not as a failed fetch. Joined from
        # the session's row, so one statement also tells an empty tail (one
        # row of NULLs) from an unknown session (no row).
        self._sql_load = f"""
            SELECT e.kind, e.data::text, e.run_id, e.position, e.created_at
            FROM {sessions} s
            LEFT JOIN {entries} e ON e.session_id = s.id AND e.position > %s
            WHERE s.id = %s ORDER BY e.position"""
        self._sql_delete = f"DELETE FROM {sessions} WHERE id = %s"

    def _fenced_append(self, insert: str, sessions: str, also: str = "") -> str:
        """The fenced append's statement; `also`: one more column it returns."""
        return f"""
            WITH fence AS (
                SELECT generation FROM {self._db.table("leases")} WHERE key = %(key)s FOR SHARE
            ), placed AS ({insert}
                HAVING COALESCE((SELECT generation FROM fence), 0) = %(generation)s
                ON CONFLICT (session_id, position) DO NOTHING
                RETURNING position
            )
            SELECT (SELECT position FROM placed),
                   COALESCE((SELECT generation FROM fence), 0),
                   EXISTS (SELECT 1 FROM {sessions} WHERE id = %(sid)s){also}"""

    @property
    def concurrency(self) -> int:
        """How many children a runtime on this store runs at once by default
        (`Runtime(child_concurrency=)`): four per pooled connection, since a
        child holds one only for a statement at a time. More would only wait
        for connections, and past `checkout_timeout` fail."""
        return max(1, self._db.max_size - 1) * 4

    async def create(self, meta: SessionMeta) -> SessionMeta:
        check_session_id(meta.id)
        if not meta.created_at:
            meta = SessionMeta(meta.id, meta.agent, meta.parent_id, self._clock(), meta.metadata)
        params = (meta.id, meta.agent, meta.parent_id, meta.created_at, dump_json(meta.metadata))
        row = await self._db.fetchone(self._sql_create, params)
        if row is None:
            raise ValueError(f"session {meta.id!r} already exists")
        return meta

    async def get(self, session_id: str) -> SessionMeta:
        row = await self._db.fetchone(self._sql_get, (session_id,))
        if row is None:
            raise not_found(session_id)
        return _meta(row)

    def _params(self, session_id: str, entry: Entry) -> dict[str, Any]:
        return {
            "sid": session_id,
            "kind": entry.kind,
            "run_id": entry.run_id,
            "created_at": entry.created_at or self._clock(),
            "data": dump_json(entry.data),
        }

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        from psycopg.errors import ForeignKeyViolation

        params = self._params(session_id, entry)
        attempt = 0
        if fence is None:
            async with self._db.connection() as conn:
                while True:
                    try:
                        row = await (await conn.execute(self._sql_append, params)).fetchone()
                    except ForeignKeyViolation:
                        raise not_found(session_id) from None
                    if row is not None:
                        return int(row[0])
                    attempt = await _lost_race(attempt)
        params["key"] = fence.key
        params["generation"] = fence.generation
        while True:
            try:
                row = await self._db.fetchone(self._sql_fenced_append, params)
            except ForeignKeyViolation:
                raise not_found(session_id) from None
            position, current, exists = row or (None, 0, False)
            if position is not None:
                return int(position)
            if not exists:
                raise not_found(session_id)
            check_fence(fence, current)
            attempt = await _lost_race(attempt)

    async def append_then_pending(
        self, session_id: str, entry: Entry, inbox: NoticeInbox, *, fence: Fence | None = None
    ) -> tuple[int, _list[BackgroundNotice]]:
        """`append`, and `inbox.pending(session_id)` read in the same statement
        when the append is fenced and the inbox is on this store's database
        (one round trip); else the two one after the other. Raises as `append`
        does, and then nothing is written."""
        from psycopg.errors import ForeignKeyViolation

        column = getattr(inbox, "pending_column", None)
        pending = column(self._db) if column is not None and fence is not None else None
        if pending is None or fence is None:
            placed = await self.append(session_id, entry, fence=fence)
            return placed, await inbox.pending(session_id)
        sql = self._with_pending.get(pending)
        if sql is None:
            also = ", " + pending.replace("{session}", "%(sid)s")
            sql = self._with_pending[pending] = self._fenced_append(
                self._insert, self._sessions, also
            )
        params = self._params(session_id, entry)
        params.update(key=fence.key, generation=fence.generation)
        try:
            row = await self._db.fetchone(sql, params)
        except ForeignKeyViolation:
            raise not_found(session_id) from None
        position, current, exists, bodies = row or (None, 0, False, ())
        if position is not None:
            return int(position), inbox.from_column(bodies)  # type: ignore[attr-defined]
        if not exists:
            raise not_found(session_id)
        check_fence(fence, current)
        # Another writer took the position: append as `append` retries, then read.
        placed = await self.append(session_id, entry, fence=fence)
        return placed, await inbox.pending(session_id)

    def _append_all_sql(self, fenced: bool, pending: str, running: str, gated: bool) -> str:
        entries, sessions = self._db.table("entries"), self._sessions
        # No ON CONFLICT: a position another writer took fails the whole
        # statement (nothing lands), where skipping the taken row would land
        # the others alone. The caller retries at the new end.
        fence = (
            f"""fence AS (
                SELECT generation FROM {self._db.table("leases")} WHERE key = %(key)s FOR SHARE
            ), """
            if fenced
            else ""
        )
        checks = ["COALESCE((SELECT generation FROM fence), 0) = %(generation)s"] if fenced else []
        pending = pending.replace("{session}", "%(sid)s")
        if gated:
            # The rows past `keep` only where the log ended where the caller
            # placed the first, and the inbox holds nothing (this statement's
            # snapshot, the one the pending column below is read in).
            checks.append(
                f"(r.n <= %(keep)s OR (last.position = %(after)s AND cardinality({pending}) = 0))"
            )
        check = "WHERE " + " AND ".join(checks) if checks else ""
        also = ", " + pending if pending else ""
        if running:
            also += ", " + running.replace("{session}", "%(sid)s").replace("{now}", "%(now)s")
        if gated:
            also += ", (SELECT count(*) FROM placed)"
        current = "COALESCE((SELECT generation FROM fence), 0)" if fenced else "0"
        return f"""
            WITH {fence}last AS (
                SELECT COALESCE(MAX(position), 0) AS position FROM {entries}
                WHERE session_id = %(sid)s
            ), placed AS (
                INSERT INTO {entries} (session_id, position, kind, run_id, created_at, data)
                SELECT %(sid)s, last.position + r.n, r.e ->> 0, r.e ->> 1,
                       (r.e ->> 2)::float8, r.data::json
                FROM last, ROWS FROM (json_array_elements(%(rows)s::json),
                                      unnest(%(datas)b::text[]))
                     WITH ORDINALITY AS r(e, data, n)
                {check}
                RETURNING position
            )
            SELECT (SELECT MIN(position) FROM placed), {current},
                   EXISTS (SELECT 1 FROM {sessions} WHERE id = %(sid)s){also}"""

    async def append_all(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        fence: Fence | None = None,
        inbox: NoticeInbox | None = None,
    ) -> tuple[int, _list[BackgroundNotice] | None]:
        """`entries` appended at consecutive positions in one statement (all
        or none), the first one's position returned; with `inbox`, its
        pending notices read in the same statement when it is on this store's
        database (else right after), None without. Raises as `append` does,
        and then nothing is written."""
        first, pending, _, _ = await self._append_all(session_id, entries, fence, inbox, None)
        return first, pending

    async def append_ending(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        keep: int,
        fence: Fence | None,
        inbox: NoticeInbox,
    ) -> tuple[int, _list[BackgroundNotice], bool] | None:
        """`append_all` with `inbox` (one statement), where `entries[keep:]`
        land only if the inbox has no pending notice and the log ends right
        before `entries[0].position`, both as the statement sees them: (the
        first one's position, the pending notices, whether all landed; when
        not, only `entries[:keep]` did). None, with nothing written, when
        the inbox is not on this store's database. Raises as `append` does,
        and then nothing is written."""
        column = getattr(inbox, "pending_column", None)
        if column is None or column(self._db) is None:
            return None
        first, pending, _, placed = await self._append_all(
            session_id, entries, fence, inbox, None, keep, entries[0].position - 1
        )
        return first, pending or [], placed == len(entries)

    async def append_all_listing(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        fence: Fence | None,
        inbox: NoticeInbox,
        registry: ActivityRegistry,
    ) -> tuple[int, _list[BackgroundNotice], _list[BackgroundActivity] | None]:
        """`append_all` with `inbox`, and `registry.list(session_id)` read in
        the same statement when the registry is on this store's database
        (one round trip; the notices and the activities of one snapshot);
        None for the activities when it is not (nothing is listed). Raises
        as `append` does, and then nothing is written."""
        first, pending, running, _ = await self._append_all(
            session_id, entries, fence, inbox, registry
        )
        return first, pending or [], running

    async def _append_all(
        self,
        session_id: str,
        entries: Sequence[Entry],
        fence: Fence | None,
        inbox: NoticeInbox | None,
        registry: ActivityRegistry | None,
        keep: int | None = None,
        after: int = 0,
    ) -> tuple[int, _list[BackgroundNotice] | None, _list[BackgroundActivity] | None, int | None]:
        from psycopg.errors import ForeignKeyViolation, UniqueViolation

        if not entries:
            raise ValueError("append_all needs at least one entry")
        column = getattr(inbox, "pending_column", None) if inbox is not None else None
        pending = (column(self._db) if column is not None else None) or ""
        listing = getattr(registry, "running_column", None) if pending else None
        running = (listing(self._db) if listing is not None else None) or ""
        key = (fence is not None, pending, running, keep is not None)
        sql = self._sql_append_all.get(key)
        if sql is None:
            sql = self._sql_append_all[key] = self._append_all_sql(*key)
        clock = self._clock
        # [kind, run_id, created_at] rows as one JSON text (cheaper to send
        # than three arrays); the data apart, as text, since reading a JSON
        # value decodes its escapes, and \u0000 has no text to decode to.
        # The texts go as a binary array: the text form escapes every quote
        # of every JSON text with a regular expression (about 20x the CPU).
        rows = ",".join(
            f"[{dump_json(e.kind)},{dump_json(e.run_id)},{dump_json(e.created_at or clock())}]"
            for e in entries
        )
        params: dict[str, Any] = {
            "sid": session_id,
            "rows": f"[{rows}]",
            "datas": [dump_json(e.data) for e in entries],
        }
        if fence is not None:
            params["key"] = fence.key
            params["generation"] = fence.generation
        if running:
            params["now"] = registry.now()  # type: ignore[union-attr]
        if keep is not None:
            params["keep"] = keep
            params["after"] = after
        attempt = 0
        while True:
            try:
                row = await self._db.fetchone(sql, params)
            except ForeignKeyViolation:
                raise not_found(session_id) from None
            except UniqueViolation:
                attempt = await _lost_race(attempt)
                continue
            first, current, exists = row[:3] if row else (None, 0, False)
            if first is not None:
                break
            if not exists:
                raise not_found(session_id)
            if fence is not None:
                check_fence(fence, current)
            attempt = await _lost_race(attempt)
        placed = int(row[-1]) if keep is not None else None
        if inbox is None:
            return int(first), None, None, placed
        if not pending:
            return int(first), await inbox.pending(session_id), None, placed
        notices = inbox.from_column(row[3])  # type: ignore[attr-defined]
        if not running:
            return int(first), notices, None, placed
        listed = registry.from_running_column(row[4])  # type: ignore[union-attr]
        return int(first), notices, listed, placed

    async def load(self, session_id: str, after: int | None = None) -> _list[Entry]:
        rows = await self._db.fetchall(self._sql_load, (after or 0, session_id))
        if not rows:
            raise not_found(session_id)
        if rows[0][0] is None:
            return []
        return load_entries(rows, session_id)

    async def list(
        self, *, parent_id: str | None = None, agent: str | None = None, limit: int | None = None
    ) -> _list[SessionMeta]:
        # Ties in created_at go to the later insert.
        order = "created_at DESC, seq DESC"
        query, params = list_query(self._sql_list, order, "%s", None, parent_id, agent, limit)
        rows = await self._db.fetchall(query, params)
        return [_meta(row) for row in rows]

    async def delete(self, session_id: str) -> None:
        await self._db.execute(self._sql_delete, (session_id,))

    async def close(self) -> None:
        """Close the pool every part of the backend shares. Idempotent."""
        await self._db.close()
