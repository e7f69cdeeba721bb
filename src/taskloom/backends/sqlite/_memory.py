"""Long-term memory in the `taskloom_memory` table of a SQLite backend, searched with FTS5."""

from __future__ import annotations

import builtins
import functools
import sqlite3
from typing import Any

from ...errors import ConfigurationError
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
from ._database import SQLiteDatabase, immediate

SQLITE_MEMORY_MIGRATIONS: tuple[Migration, ...] = (
    (
        """CREATE TABLE IF NOT EXISTS taskloom_memory (
            id INTEGER PRIMARY KEY,
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            version INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (namespace, key)
        )""",
        # The words of each value (rowid = taskloom_memory.id), written in the
        # same transaction as the item.
        "CREATE VIRTUAL TABLE IF NOT EXISTS taskloom_memory_fts USING fts5(words)",
    ),
    (
        # The idempotency keys writes applied, each with the item it wrote
        # and its outcome (`applied_record`); written in the write's
        # transaction, pruned after IDEMPOTENCY_KEEP_SECONDS.
        """CREATE TABLE IF NOT EXISTS taskloom_memory_applied (
            idempotency_key TEXT PRIMARY KEY,
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            outcome TEXT NOT NULL,
            applied_at REAL NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS taskloom_memory_applied_at ON taskloom_memory_applied (applied_at)",
    ),
)

SQLITE_MEMORY_VECTOR_MIGRATIONS: tuple[Migration, ...] = (
    (
        # One vector per item and embedder (`model`), made from the text
        # whose digest it records (see taskloom.backends.Embedder).
        """CREATE TABLE IF NOT EXISTS taskloom_memory_vectors (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            model TEXT NOT NULL,
            version INTEGER NOT NULL,
            digest TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (namespace, key, model)
        )""",
    ),
)

_COLUMNS = "namespace, key, value, version, created_at, updated_at"
# The lower bound lets the (namespace, key) index start at the prefix.
_UNDER = "namespace >= :prefix AND substr(namespace, 1, :n) = :prefix"
_KEYED = "key >= :kp AND substr(key, 1, :kn) = :kp"


def _item(row: Any) -> MemoryItem:
    ns, key, value, version, created_at, updated_at = row[:6]
    return MemoryItem(
        parse_namespace(ns), key, decode_value(value), int(version), created_at, updated_at
    )


@functools.cache
def has_fts5() -> bool:
    """Whether this Python's SQLite library was built with FTS5 (`PRAGMA compile_options`)."""
    conn = sqlite3.connect(":memory:")
    try:
        return any(row[0] == "ENABLE_FTS5" for row in conn.execute("PRAGMA compile_options"))
    finally:
        conn.close()


def _applied(conn: sqlite3.Connection, idem: str) -> tuple[str, str, str] | None:
    """The (stored namespace, key, outcome record) of the write that applied `idem`, or None."""
    row = conn.execute(
        "SELECT namespace, key, outcome FROM taskloom_memory_applied WHERE idempotency_key = ?",
        (idem,),
    ).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def _remember(
    conn: sqlite3.Connection,
    idem: str | None,
    ns: str,
    key: str,
    outcome: MemoryItem | bool,
    now: float,
) -> None:
    """Record `idem` as applied (in the caller's transaction), pruning expired keys."""
    if idem is None:
        return
    conn.execute(
        "DELETE FROM taskloom_memory_applied WHERE applied_at < ?",
        (now - IDEMPOTENCY_KEEP_SECONDS,),
    )
    conn.execute(
        "INSERT INTO taskloom_memory_applied (idempotency_key, namespace, key, outcome, applied_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (idem, ns, key, applied_record(outcome), now),
    )


class SQLiteMemories(SemanticStore):
    """A `Memories` on a SQLite database: each write is one `BEGIN
    IMMEDIATE` transaction, so its version check and its write hold SQLite's
    one write lock together, against every process on the file. Search is
    FTS5's BM25; a SQLite library without FTS5 raises `ConfigurationError`
    here. Semantic search needs `embedder`; the vectors are in
    `taskloom_memory_vectors`. `clock` gives the items' times."""

    def __init__(
        self,
        database: SQLiteDatabase,
        *,
        clock: Clock = system_clock,
        embedder: Embedder | None = None,
    ) -> None:
        if not has_fts5():
            # Refused before its migration is queued: a failing one would
            # fail the session store's next statement too.
            raise ConfigurationError(
                f"the SQLite library of this Python ({sqlite3.sqlite_version}) lacks FTS5, "
                "which the SQLite memory store searches with; use a Python whose sqlite3 has it"
            )
        self.database = self._db = database
        self._clock = clock
        self.embedder = check_embedder(embedder)
        database.require("memory", SQLITE_MEMORY_MIGRATIONS)
        database.require("memory_vectors", SQLITE_MEMORY_VECTOR_MIGRATIONS)

    async def get(self, namespace: Namespace, key: str) -> MemoryItem | None:
        ns, key = check_namespace(namespace), check_key(key)
        row = await self._db.fetchone(
            f"SELECT {_COLUMNS} FROM taskloom_memory WHERE namespace = ? AND key = ?", (ns, key)
        )
        return None if row is None else _item(row)

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
        indexed = index_text(value)
        now = self._clock()

        def put(conn: sqlite3.Connection) -> tuple[bool, Any]:
            with immediate(conn):
                if idem is not None and (done := _applied(conn, idem)) is not None:
                    return True, done
                row = conn.execute(
                    f"SELECT id, {_COLUMNS} FROM taskloom_memory WHERE namespace = ? AND key = ?",
                    (ns, key),
                ).fetchone()
                if wanted is not None and (row[4] if row else 0) != wanted:
                    return False, row and row[1:]
                if row is None:
                    (row_id,) = conn.execute(
                        f"INSERT INTO taskloom_memory ({_COLUMNS}) VALUES (?, ?, ?, 1, ?, ?)"
                        " RETURNING id",
                        (ns, key, text, now, now),
                    ).fetchone()
                    written = (ns, key, text, 1, now, now)
                else:
                    row_id = row[0]
                    conn.execute(
                        "UPDATE taskloom_memory SET value = ?, version = version + 1,"
                        " updated_at = ? WHERE id = ?",
                        (text, now, row_id),
                    )
                    conn.execute("DELETE FROM taskloom_memory_fts WHERE rowid = ?", (row_id,))
                    written = (ns, key, text, row[4] + 1, row[5], now)
                conn.execute(
                    "INSERT INTO taskloom_memory_fts (rowid, words) VALUES (?, ?)",
                    (row_id, indexed),
                )
                item = _item(written)
                _remember(conn, idem, ns, key, item, now)
                return True, item

        done, row = await self._db.run(put)
        if not done:
            raise conflict(namespace, key, wanted or 0, None if row is None else _item(row))
        if isinstance(row, tuple):  # an earlier write's (namespace, key, outcome)
            return as_put(replayed(idem or "", (ns, key), row[:2], namespace, row[2]), idem or "")
        await self._embed_put(row)
        return row  # type: ignore[no-any-return]

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
        now = self._clock()

        def delete(conn: sqlite3.Connection) -> tuple[bool, Any]:
            with immediate(conn):
                if idem is not None and (done := _applied(conn, idem)) is not None:
                    return True, done
                row = conn.execute(
                    f"SELECT id, {_COLUMNS} FROM taskloom_memory WHERE namespace = ? AND key = ?",
                    (ns, key),
                ).fetchone()
                if wanted is not None and (row is None or row[4] != wanted):
                    return False, row and row[1:]
                if row is not None:
                    conn.execute("DELETE FROM taskloom_memory WHERE id = ?", (row[0],))
                    conn.execute("DELETE FROM taskloom_memory_fts WHERE rowid = ?", (row[0],))
                    conn.execute(
                        "DELETE FROM taskloom_memory_vectors WHERE namespace = ? AND key = ?",
                        (ns, key),
                    )
                _remember(conn, idem, ns, key, row is not None, now)
                return True, row is not None

        done, outcome = await self._db.run(delete)
        if not done:
            raise conflict(namespace, key, wanted or 0, None if outcome is None else _item(outcome))
        if isinstance(outcome, tuple):  # an earlier write's (namespace, key, outcome)
            earlier = replayed(idem or "", (ns, key), outcome[:2], namespace, outcome[2])
            return as_delete(earlier, idem or "")
        return bool(outcome)

    async def list(
        self, prefix: Namespace = (), *, limit: int = 100, offset: int = 0, key_prefix: str = ""
    ) -> list[MemoryItem]:
        start = check_namespace(prefix, prefix=True)
        key_prefix = check_key_prefix(key_prefix)
        limit, offset = check_page(limit, offset)
        params = {"n": len(start), "prefix": start, "limit": limit, "offset": offset}
        keyed = ""
        if key_prefix:
            keyed = f" AND {_KEYED}"
            params.update(kn=len(key_prefix), kp=key_prefix)
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM taskloom_memory WHERE {_UNDER}{keyed}"
            " ORDER BY namespace, key LIMIT :limit OFFSET :offset",
            params,
        )
        return [_item(row) for row in rows]

    async def namespaces(self, prefix: Namespace = ()) -> builtins.list[Namespace]:
        start = check_namespace(prefix, prefix=True)
        rows = await self._db.fetchall(
            f"SELECT DISTINCT namespace FROM taskloom_memory WHERE {_UNDER} ORDER BY namespace",
            {"n": len(start), "prefix": start},
        )
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
        # Each word quoted: FTS5 reads it as a plain string, never as its syntax.
        match = " OR ".join('"' + term + '"' for term in terms)
        rows = await self._db.fetchall(
            f"SELECT {', '.join('m.' + c for c in _COLUMNS.split(', '))},"
            " bm25(taskloom_memory_fts) AS rank"
            " FROM taskloom_memory_fts JOIN taskloom_memory AS m"
            " ON m.id = taskloom_memory_fts.rowid"
            " WHERE taskloom_memory_fts MATCH :match"
            " AND m.namespace >= :prefix AND substr(m.namespace, 1, :n) = :prefix"
            " ORDER BY rank, m.namespace, m.key LIMIT :limit",
            {"match": match, "n": len(start), "prefix": start, "limit": limit},
        )
        # FTS5's bm25() is lower for better matches; a hit's score is higher.
        return [MemoryHit(_item(row), -float(row[6])) for row in rows]

    async def candidates(
        self, start: str, after: tuple[str, str] | None, model: str, limit: int
    ) -> builtins.list[Candidate]:
        """Items under `start` after `after`, with their vectors under `model` (for semantic search)."""
        after_ns, after_key = after or ("", "")
        rows = await self._db.fetchall(
            f"SELECT {', '.join('m.' + c for c in _COLUMNS.split(', '))}, v.digest, v.vector"
            " FROM taskloom_memory AS m LEFT JOIN taskloom_memory_vectors AS v"
            " ON v.namespace = m.namespace AND v.key = m.key AND v.model = :model"
            " WHERE m.namespace >= :prefix AND substr(m.namespace, 1, :n) = :prefix"
            " AND (m.namespace, m.key) > (:after_ns, :after_key)"
            " ORDER BY m.namespace, m.key LIMIT :limit",
            {
                "model": model,
                "prefix": start,
                "n": len(start),
                "after_ns": after_ns,
                "after_key": after_key,
                "limit": limit,
            },
            inline=False,
        )
        return [Candidate(_item(row), row[6], row[7]) for row in rows]

    async def keep_vectors(
        self, model: str, made: builtins.list[tuple[MemoryItem, str, bytes]]
    ) -> None:
        """Store each item's vector under `model` (while the item exists)."""
        rows = [
            (check_namespace(item.namespace), item.key, model, item.version, digest, vector)
            for item, digest, vector in made
        ]

        def keep(conn: sqlite3.Connection) -> None:
            with immediate(conn):
                conn.executemany(
                    "INSERT INTO taskloom_memory_vectors"
                    " (namespace, key, model, version, digest, vector)"
                    " SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE EXISTS"
                    " (SELECT 1 FROM taskloom_memory WHERE namespace = ?1 AND key = ?2)"
                    " ON CONFLICT (namespace, key, model) DO UPDATE SET version = excluded.version,"
                    " digest = excluded.digest, vector = excluded.vector",
                    rows,
                )

        await self._db.run(keep)
