"""Long-term memory in the `taskloom_memory` table of a PostgreSQL backend, with text search."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

from .._leases import Clock, system_clock
from .._memories import (
    IDEMPOTENCY_KEEP_SECONDS,
    MemoryHit,
    MemoryItem,
    MemoryValue,
    Namespace,
    applied_record,
    as_delete,
    as_put,
    check_idempotency_key,
    check_key,
    check_key_prefix,
    check_namespace,
    check_page,
    check_query,
    check_version,
    conflict,
    decode_value,
    encode_value,
    index_text,
    parse_namespace,
    replayed,
)
from .._semantic import Candidate, Embedder, SearchMode, SemanticStore, check_embedder, check_mode
from .._sql import Migration
from ._database import PostgresDatabase

POSTGRES_MEMORY_MIGRATIONS: tuple[Migration, ...] = (
    (
        # COLLATE "C": ordered by code point, as on every backend, whatever
        # the database's locale.
        """CREATE TABLE IF NOT EXISTS {memory} (
            namespace text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            value text NOT NULL,
            version bigint NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            words text NOT NULL,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', words)) STORED,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_memory_tsv ON {memory} USING gin (tsv)",
    ),
    (
        # The idempotency keys writes applied, each with the item it wrote
        # and its outcome (`applied_record`); written in the write's
        # transaction, pruned after IDEMPOTENCY_KEEP_SECONDS.
        """CREATE TABLE IF NOT EXISTS {memory_applied} (
            idempotency_key text PRIMARY KEY,
            namespace text NOT NULL,
            key text NOT NULL,
            outcome text NOT NULL,
            applied_at double precision NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_memory_applied_at ON {memory_applied} (applied_at)",
    ),
)

POSTGRES_MEMORY_VECTOR_MIGRATIONS: tuple[Migration, ...] = (
    (
        # One vector per item and embedder (`model`), made from the text
        # whose digest it records (see taskloom.backends.Embedder).
        """CREATE TABLE IF NOT EXISTS {memory_vectors} (
            namespace text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            model text NOT NULL,
            version bigint NOT NULL,
            digest text NOT NULL,
            vector bytea NOT NULL,
            PRIMARY KEY (namespace, key, model)
        )""",
    ),
)

_COLUMNS = "namespace, key, value, version, created_at, updated_at"
# The lower bound lets the primary key index start at the prefix.
_UNDER = "namespace >= %(prefix)s AND left(namespace, %(n)s) = %(prefix)s"


def _item(row: Any) -> MemoryItem:
    ns, key, value, version, created_at, updated_at = row[:6]
    return MemoryItem(
        parse_namespace(ns), key, decode_value(value), int(version), created_at, updated_at
    )


class PostgresMemories(SemanticStore):
    """A `Memories` on a PostgreSQL database: each write is one statement
    (an upsert, an insert that does nothing on conflict, or an UPDATE or
    DELETE whose WHERE names the expected version, re-checked under READ
    COMMITTED against the row a concurrent writer committed), so no two
    writers of one version both succeed. Search is `ts_rank` over a
    `'simple'` text search vector; semantic search needs `embedder` (the
    vectors are in `taskloom_memory_vectors`); `clock` gives the items' times."""

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        clock: Clock = system_clock,
        embedder: Embedder | None = None,
    ) -> None:
        self.database = self._db = db = database
        self._clock = clock
        self.embedder = check_embedder(embedder)
        db.require("memory", POSTGRES_MEMORY_MIGRATIONS)
        db.require("memory_vectors", POSTGRES_MEMORY_VECTOR_MIGRATIONS)
        table = db.table("memory")
        self._vector_sql(table, db.table("memory_vectors"))
        where = "namespace = %(ns)s AND key = %(key)s"
        values = "(%(ns)s, %(key)s, %(value)s, 1, %(now)s, %(now)s, %(words)s)"
        insert = f"INSERT INTO {table} ({_COLUMNS}, words) VALUES {values}"
        self._sql_get = f"SELECT {_COLUMNS} FROM {table} WHERE {where}"
        self._sql_upsert = (
            f"{insert} ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value,"
            f" version = {table}.version + 1, updated_at = EXCLUDED.updated_at,"
            f" words = EXCLUDED.words RETURNING {_COLUMNS}"
        )
        self._sql_create = f"{insert} ON CONFLICT (namespace, key) DO NOTHING RETURNING {_COLUMNS}"
        self._sql_update = (
            f"UPDATE {table} SET value = %(value)s, version = version + 1,"
            f" updated_at = %(now)s, words = %(words)s"
            f" WHERE {where} AND version = %(version)s RETURNING {_COLUMNS}"
        )
        self._sql_delete = f"DELETE FROM {table} WHERE {where} RETURNING version"
        self._sql_delete_at = (
            f"DELETE FROM {table} WHERE {where} AND version = %(version)s RETURNING version"
        )
        self._sql_list = (
            f"SELECT {_COLUMNS} FROM {table} WHERE {_UNDER}"
            " ORDER BY namespace, key LIMIT %(limit)s OFFSET %(offset)s"
        )
        self._sql_list_keyed = (
            f"SELECT {_COLUMNS} FROM {table} WHERE {_UNDER}"
            " AND key >= %(kp)s AND substr(key, 1, %(kn)s) = %(kp)s"
            " ORDER BY namespace, key LIMIT %(limit)s OFFSET %(offset)s"
        )
        self._sql_namespaces = (
            f"SELECT DISTINCT namespace FROM {table} WHERE {_UNDER} ORDER BY namespace"
        )
        applied = db.table("memory_applied")
        # Taken first: a concurrent retry of the key waits here for this
        # transaction, then finds the key applied (or taken anew if it rolled back).
        self._sql_claim = (
            f"INSERT INTO {applied} (idempotency_key, namespace, key, outcome, applied_at)"
            " VALUES (%(idem)s, %(ns)s, %(key)s, '', %(now)s)"
            " ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key"
        )
        self._sql_applied = (
            f"SELECT namespace, key, outcome FROM {applied} WHERE idempotency_key = %(idem)s"
        )
        self._sql_record = (
            f"UPDATE {applied} SET outcome = %(outcome)s WHERE idempotency_key = %(idem)s"
        )
        self._sql_unclaim = f"DELETE FROM {applied} WHERE idempotency_key = %(idem)s"
        self._sql_prune = f"DELETE FROM {applied} WHERE applied_at < %(before)s"
        self._sql_search = (
            f"SELECT {_COLUMNS}, ts_rank(tsv, q) AS score"
            f" FROM {table}, to_tsquery('simple', %(query)s) AS q"
            f" WHERE tsv @@ q AND {_UNDER}"
            " ORDER BY score DESC, namespace, key LIMIT %(limit)s"
        )

    async def get(self, namespace: Namespace, key: str) -> MemoryItem | None:
        ns, key = check_namespace(namespace), check_key(key)
        rows = await self._db.fetchall(self._sql_get, {"ns": ns, "key": key})
        return _item(rows[0]) if rows else None

    async def put(
        self,
        namespace: Namespace,
        key: str,
        value: MemoryValue,
        *,
        if_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> MemoryItem:
        ns, key, text = check_namespace(namespace), check_key(key), encode_value(value)
        wanted = check_version(if_version)
        idem = check_idempotency_key(idempotency_key)
        params: dict[str, Any] = {
            "ns": ns,
            "key": key,
            "value": text,
            "now": self._clock(),
            "words": index_text(value),
            "version": wanted,
        }
        sql = (
            self._sql_upsert
            if wanted is None
            else self._sql_create
            if wanted == 0
            else self._sql_update
        )
        if idem is None:
            rows = await self._db.fetchall(sql, params)
        else:
            done, rows = await self._keyed(sql, params, idem, lambda rows: _item(rows[0]))
            if done is not None:
                return as_put(replayed(idem, (ns, key), done[:2], namespace, done[2]), idem)
        if not rows:
            assert wanted is not None
            raise conflict(namespace, key, wanted, await self.get(namespace, key))
        item = _item(rows[0])
        await self._embed_put(item)
        return item

    async def _keyed(
        self,
        sql: str,
        params: dict[str, Any],
        idem: str,
        outcome: Callable[[list[Any]], MemoryItem | bool],
    ) -> tuple[tuple[str, str, str] | None, list[Any]]:
        """Run the write `sql` under idempotency key `idem`, in one transaction:
        `(the earlier write's (namespace, key, outcome), [])` when the key was
        applied, else `(None, the rows the write returned)`, its `outcome(rows)`
        recorded with the key. A write refused for its version (no row while
        `params["version"]` is set) withdraws its claim of the key: deleted
        and committed rather than rolled back, as psycopg deallocates every
        prepared statement of a connection whose transaction rolls back."""
        params = {**params, "idem": idem}
        async with self._db.connection() as conn, conn.transaction():
            claimed = await (await conn.execute(self._sql_claim, params)).fetchall()
            if not claimed:
                row = await (await conn.execute(self._sql_applied, params)).fetchone()
                assert row is not None
                return (row[0], row[1], row[2]), []
            rows = await (await conn.execute(sql, params)).fetchall()
            if not rows and params["version"] is not None:
                await conn.execute(self._sql_unclaim, params)
                return None, []
            params["outcome"] = applied_record(outcome(rows))
            params["before"] = params["now"] - IDEMPOTENCY_KEEP_SECONDS
            await conn.execute(self._sql_record, params)
            await conn.execute(self._sql_prune, params)
            return None, rows

    async def delete(
        self,
        namespace: Namespace,
        key: str,
        *,
        if_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> bool:
        ns, key = check_namespace(namespace), check_key(key)
        wanted = check_version(if_version, deleting=True)
        idem = check_idempotency_key(idempotency_key)
        params = {"ns": ns, "key": key, "version": wanted, "now": self._clock()}
        sql = self._sql_delete if wanted is None else self._sql_delete_at
        sql = self._with_vectors_deleted(sql)
        if idem is None:
            rows = await self._db.fetchall(sql, params)
        else:
            done, rows = await self._keyed(sql, params, idem, bool)
            if done is not None:
                return as_delete(replayed(idem, (ns, key), done[:2], namespace, done[2]), idem)
        if not rows and wanted is not None:
            raise conflict(namespace, key, wanted, await self.get(namespace, key))
        return bool(rows)

    async def list(
        self, prefix: Namespace = (), *, limit: int = 100, offset: int = 0, key_prefix: str = ""
    ) -> list[MemoryItem]:
        start = check_namespace(prefix, prefix=True)
        key_prefix = check_key_prefix(key_prefix)
        limit, offset = check_page(limit, offset)
        params = {"n": len(start), "prefix": start, "limit": limit, "offset": offset}
        if not key_prefix:
            return [_item(row) for row in await self._db.fetchall(self._sql_list, params)]
        params.update(kn=len(key_prefix), kp=key_prefix)
        return [_item(row) for row in await self._db.fetchall(self._sql_list_keyed, params)]

    async def namespaces(self, prefix: Namespace = ()) -> builtins.list[Namespace]:
        start = check_namespace(prefix, prefix=True)
        params = {"n": len(start), "prefix": start}
        rows = await self._db.fetchall(self._sql_namespaces, params)
        return [parse_namespace(ns) for (ns,) in rows]

    async def search(
        self, prefix: Namespace, query: str, *, limit: int = 10, mode: SearchMode = "text"
    ) -> builtins.list[MemoryHit]:
        start = check_namespace(prefix, prefix=True)
        limit, _ = check_page(limit)
        terms = check_query(query)
        if check_mode(mode) == "semantic":
            return await self._semantic(start, query, limit)
        if not terms or not limit:
            return []
        # Words are letters and digits only; quoted, each is one lexeme, never
        # tsquery syntax. Any of them matches, as on every backend.
        params = {
            "query": " | ".join(f"'{term}'" for term in terms),
            "n": len(start),
            "prefix": start,
            "limit": limit,
        }
        rows = await self._db.fetchall(self._sql_search, params)
        return [MemoryHit(_item(row), float(row[6])) for row in rows]

    # ----- vectors for semantic search -----

    def _vector_sql(self, table: str, vectors: str) -> None:
        self._vectors_table = vectors
        self._sql_candidates = (
            f"SELECT {', '.join('m.' + c for c in _COLUMNS.split(', '))}, v.digest, v.vector"
            f" FROM {table} AS m LEFT JOIN {vectors} AS v"
            " ON v.namespace = m.namespace AND v.key = m.key AND v.model = %(model)s"
            " WHERE m.namespace >= %(prefix)s AND left(m.namespace, %(n)s) = %(prefix)s"
            " AND (m.namespace, m.key) > (%(after_ns)s, %(after_key)s)"
            " ORDER BY m.namespace, m.key LIMIT %(limit)s"
        )
        # Only for items that still exist: a vector never outlives its item.
        self._sql_keep = (
            f"INSERT INTO {vectors} (namespace, key, model, version, digest, vector)"
            " SELECT u.ns, u.key, %(model)s, u.version, u.digest, u.vector FROM unnest("
            "%(ns)s::text[], %(keys)s::text[], %(versions)s::bigint[], %(digests)s::text[],"
            " %(vectors)s::bytea[]) AS u(ns, key, version, digest, vector)"
            f" WHERE EXISTS (SELECT 1 FROM {table} AS m WHERE m.namespace = u.ns AND m.key = u.key)"
            " ON CONFLICT (namespace, key, model) DO UPDATE SET version = EXCLUDED.version,"
            " digest = EXCLUDED.digest, vector = EXCLUDED.vector"
        )

    def _with_vectors_deleted(self, delete: str) -> str:
        """`delete` (an item's DELETE ... RETURNING version) that also deletes
        the item's vectors, in the same statement."""
        return (
            f"WITH gone AS ({delete}), vectors AS (DELETE FROM {self._vectors_table}"
            " WHERE namespace = %(ns)s AND key = %(key)s AND EXISTS (SELECT 1 FROM gone))"
            " SELECT version FROM gone"
        )

    async def candidates(
        self, start: str, after: tuple[str, str] | None, model: str, limit: int
    ) -> builtins.list[Candidate]:
        """Items under `start` after `after`, with their vectors under `model` (for semantic search)."""
        after_ns, after_key = after or ("", "")
        params = {
            "model": model,
            "prefix": start,
            "n": len(start),
            "after_ns": after_ns,
            "after_key": after_key,
            "limit": limit,
        }
        rows = await self._db.fetchall(self._sql_candidates, params)
        return [
            Candidate(_item(row), row[6], None if row[7] is None else bytes(row[7])) for row in rows
        ]

    async def keep_vectors(
        self, model: str, made: builtins.list[tuple[MemoryItem, str, bytes]]
    ) -> None:
        """Store each item's vector under `model` (while the item exists)."""
        params = {
            "model": model,
            "ns": [check_namespace(item.namespace) for item, _, _ in made],
            "keys": [item.key for item, _, _ in made],
            "versions": [item.version for item, _, _ in made],
            "digests": [digest for _, digest, _ in made],
            "vectors": [vector for _, _, vector in made],
        }
        await self._db.execute(self._sql_keep, params)
