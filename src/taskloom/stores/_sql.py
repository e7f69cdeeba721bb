"""Shared plumbing for the SQL backends: one owner per database, lazy, migrated.

`SQLiteDatabase` owns one SQLite file through one connection that lives on one
worker thread: sqlite3 blocks, and the event loop must not. `PostgresDatabase`
owns a psycopg connection pool, opened on first use, and bounds every wait on
the server (connecting, checkout, statements, cancellation). Both do no I/O until
first use, apply each component's versioned migrations before the first
statement runs, and are shared by a store and its leases so a fenced append
can check the lease in the same transaction that writes the entry.

Each component (`"sessions"`, `"leases"`, ...) registers its migrations with
`require`; `taskloom_schema_version` records how far each one got. A
migration is a tuple of statements, applied in order, never edited once
released: a schema change is a new migration at the end.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import math
import os
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..errors import CorruptEntry, StoreError, StoreUnavailable
from ._pg_bounds import SILENCE_MARGIN, Watchdog, connection_class

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "Migration",
    "PostgresDatabase",
    "SQLiteDatabase",
    "dump_json",
    "immediate",
    "load_entry_data",
    "quote_ident",
]

T = TypeVar("T")

Migration = tuple[str, ...]
"""The statements of one schema step, applied in one transaction with the others pending."""


def _json_default(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dump_json(value: object) -> str:
    """`value` as compact JSON text, exactly as the durable stores keep it.

    ASCII-only on purpose: escaping keeps every Python string storable,
    including lone surrogates and NUL, which neither SQLite's UTF-8 text nor
    PostgreSQL text could otherwise take. NaN and infinities are refused
    because no JSON reader is obliged to accept them; so is nesting too deep
    to read back. Either way the `ValueError` says what was refused.
    """
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=_json_default)
    except RecursionError:
        raise ValueError("cannot store JSON nested this deeply") from None
    except ValueError as exc:
        raise ValueError(f"cannot store as JSON: {exc}") from None


def load_entry_data(text: str | bytes, session_id: str, position: int) -> Mapping[str, Any]:
    """An entry's data decoded from its stored JSON; `CorruptEntry` names what failed."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        problem = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise CorruptEntry(
            f"session {session_id!r}: the entry at position {position} is not valid JSON "
            f"({problem})"
        ) from None
    if not isinstance(data, dict):
        raise CorruptEntry(
            f"session {session_id!r}: the entry at position {position} holds a "
            f"{type(data).__name__}, not a JSON object"
        )
    return data


def quote_ident(name: str) -> str:
    """`name` as a quoted SQL identifier (safe for any string without NUL)."""
    return '"' + name.replace('"', '""') + '"'


_VERSION_TABLE = "taskloom_schema_version"


def _check_version(component: str, current: int, known: int) -> None:
    if current > known:
        raise RuntimeError(
            f"the database has schema version {current} for {component!r}, newer than "
            f"the {known} this taskloom knows; upgrade taskloom to use it"
        )


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction that takes SQLite's write lock at BEGIN.

    Taking the lock up front (rather than at the first write, as a deferred
    transaction would) means a read-then-write sequence such as "next
    position = max + 1" can never be invalidated by another process between
    its read and its write.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SQLiteDatabase:
    """One SQLite file (or `":memory:"`), used through one dedicated worker thread.

    The connection is opened on the worker at first use (creating parent
    directories), in WAL mode so readers in other processes never wait for a
    writer, with `busy_timeout` so concurrent writers queue rather than fail.
    `synchronous="NORMAL"` (the default, WAL's usual pairing) survives a
    crashed or killed process; `"FULL"` also survives power loss, at the
    price of a disk sync per commit (5-20x slower appends).

    A file that cannot be opened, or a lock another writer holds past
    `busy_timeout`, raises `StoreUnavailable` naming the file.

    Use from one event loop at a time; `close()` is final.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        synchronous: Literal["FULL", "NORMAL"] = "NORMAL",
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self.path: str | Path = path if path == ":memory:" else Path(path).expanduser()
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._executor: _Worker | None = None
        # Touched only on the worker thread.
        self._conn: sqlite3.Connection | None = None
        self._pending: dict[str, Sequence[Migration]] = {}
        self._closed = False

    def require(self, component: str, migrations: Sequence[Migration]) -> None:
        """Have `component`'s migrations applied before the next statement runs (no I/O now)."""
        self._pending[component] = migrations

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, urgent: bool = False) -> T:
        """Call `fn(connection)` on the worker thread and return its result.

        Calls run in the order they came, except that `urgent` ones (lease
        renewals) go before every ordinary call still waiting: a renewal
        must not wait behind a thousand children's writes.

        Cancelling the caller withdraws `fn` if it has not started; once
        started it runs to its end, so a transaction inside it either commits
        or rolls back whole, whether or not anyone still awaits it.
        """
        if self._closed:
            raise RuntimeError(f"SQLite database {str(self.path)!r} is closed")
        if self._executor is None:
            self._executor = _Worker("taskloom-sqlite")
        done = self._executor.submit(functools.partial(self._call, fn), urgent=urgent)
        return await asyncio.wrap_future(done)

    async def close(self) -> None:
        """Close the connection and stop the worker; later calls raise. Idempotent."""
        if self._closed:
            return
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is None:
            return
        # Queued behind any work already submitted, so that work finishes first.
        await asyncio.wrap_future(executor.submit(self._disconnect))
        executor.shutdown()

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            conn = self._conn if self._conn is not None else self._connect()
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(
                f"cannot open SQLite database {str(self.path)!r}: {exc}"
            ) from exc
        try:
            if self._pending:
                self._migrate(conn)
            return fn(conn)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
            raise StoreUnavailable(
                f"SQLite database {str(self.path)!r} stayed locked by another writer "
                f"past busy_timeout ({self._busy_timeout:g} s): {exc}"
            ) from exc

    def _connect(self) -> sqlite3.Connection:
        if isinstance(self.path, Path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, cached_statements=256
        )
        try:
            self._enter_wal(conn)
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        # Switching a fresh file to WAL needs it alone for a moment, and SQLite
        # answers "locked" at once, without its busy handler, while another
        # process opening the same file does the same: retry within busy_timeout.
        give_up = time.monotonic() + self._busy_timeout
        delay = 0.005
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                if not busy or time.monotonic() + delay > give_up:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        pending = list(self._pending.items())
        # BEGIN IMMEDIATE serialises first use across processes: the second
        # opener waits, then finds the versions already recorded.
        with immediate(conn):
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_VERSION_TABLE} "
                "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            for component, migrations in pending:
                row = conn.execute(
                    f"SELECT version FROM {_VERSION_TABLE} WHERE component = ?", (component,)
                ).fetchone()
                current = int(row[0]) if row else 0
                _check_version(component, current, len(migrations))
                for migration in migrations[current:]:
                    for statement in migration:
                        conn.execute(statement)
                if current < len(migrations):
                    conn.execute(
                        f"INSERT INTO {_VERSION_TABLE} (component, version) VALUES (?, ?) "
                        "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                        (component, len(migrations)),
                    )
        for component, migrations in pending:
            if self._pending.get(component) is migrations:
                del self._pending[component]

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class _Worker:
    """One thread running submitted calls, urgent ones first, then in submission order."""

    def __init__(self, name: str) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Future[Any] | None, Callable[[], Any]]]
        self._queue = queue.PriorityQueue()
        self._order = itertools.count()
        # A daemon: an interpreter that exits without close() must not hang on
        # it, and SQLite rolls back a transaction cut off at exit.
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], T], *, urgent: bool = False) -> Future[T]:
        done: Future[T] = Future()
        self._queue.put((0 if urgent else 1, next(self._order), done, fn))
        return done

    def shutdown(self) -> None:
        """Stop once every call submitted before is done."""
        self._queue.put((2, next(self._order), None, _nothing))

    def _serve(self) -> None:
        while True:
            _, _, done, fn = self._queue.get()
            if done is None:
                return
            if not done.set_running_or_notify_cancel():
                continue  # withdrawn by its caller before it started
            try:
                result = fn()
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(result)


def _nothing() -> None:
    return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _check_timeout(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")


class PostgresDatabase:
    """A PostgreSQL database reached through a lazily opened connection pool.

    `schema`, when given, holds every taskloom table (created if missing), so
    several tenants or tests can share one database without meeting; without
    it, tables resolve through the connection's `search_path`. Connections
    run in autocommit; multi-statement work opens an explicit transaction.

    Every wait is bounded, so a slow, stalled or vanished server never holds
    a caller for long:

    - connecting gives up after `connect_timeout` seconds; failing to
      connect raises `StoreUnavailable` naming host, port and the cause
      (refused, timed out, authentication failed...);
    - waiting for a pooled connection gives up after `checkout_timeout`
      seconds with `StoreUnavailable`; a pooled connection is checked before
      it is handed out, so after a server restart or a dropped connection
      the next call gets a fresh one rather than a dead one;
    - every statement runs under the server's `statement_timeout`, and an
      open transaction under `idle_in_transaction_session_timeout`, both
      `statement_timeout` seconds: the server cancelling a statement raises
      `StoreError`. A server that does not answer at all (a stalled
      network) is given up on client-side, a use of a connection lasting
      two seconds past `statement_timeout`: `StoreUnavailable`, as for a
      connection lost mid-call. None leaves the server's settings and sets
      no client-side bound;
    - cancelling the caller (`asyncio.timeout`, `Task.cancel`) cancels the
      statement on the server and returns promptly: if the cancel request
      cannot get through within about a second, the connection is closed
      instead. A connection left mid-statement or mid-transaction is
      discarded, never handed out again.

    Use from one event loop at a time (the pool belongs to the loop that
    opened it); `close()` is final.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
        checkout_timeout: float = 10.0,
        statement_timeout: float | None = 30.0,
    ) -> None:
        _check_timeout("connect_timeout", connect_timeout)
        _check_timeout("checkout_timeout", checkout_timeout)
        _check_timeout("statement_timeout", statement_timeout)
        self.url = url
        self.schema = schema
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        self.checkout_timeout = checkout_timeout
        self.statement_timeout = statement_timeout
        self._prefix = f"{quote_ident(schema)}." if schema else ""
        self._pool: AsyncConnectionPool[Any] | None = None
        # Ordinary work takes a slot first, so one connection is always left
        # for urgent work (lease renewals) and it never queues behind the rest.
        self._slots = asyncio.Semaphore(max_size - 1) if max_size > 1 else None
        self._lock = asyncio.Lock()
        self._pending: dict[str, Sequence[Migration]] = {}
        self._closed = False

    def table(self, name: str) -> str:
        """The qualified name of the taskloom table `name` (e.g. `"sessions"`)."""
        return f"{self._prefix}taskloom_{name}"

    def require(self, component: str, migrations: Sequence[Migration]) -> None:
        """Have `component`'s migrations applied before the next connection is handed out.

        Statements may name tables as `{sessions}`, `{leases}`, ...: they are
        formatted with `table()` so they land in this database's schema.
        """
        self._pending[component] = migrations

    @asynccontextmanager
    async def connection(self, *, urgent: bool = False) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled autocommit connection, with the schema ready, used within the bounds above.

        When `max_size` is 2 or more, ordinary callers share all but one of
        the pool's connections, and `urgent` work (a lease renewal) may also
        take the last: however many callers wait, it never waits behind them.
        The process holds at most `max_size` connections either way.
        """
        pool = self._pool
        if pool is None or self._pending:
            pool = await self._ready()
        slots = self._slots
        # One bound for the whole checkout: the wait for a slot and for the pool.
        deadline = asyncio.get_running_loop().time() + self.checkout_timeout
        if urgent or slots is None:
            async with self._use(pool, deadline) as conn:
                yield conn
            return
        try:
            async with asyncio.timeout_at(deadline):
                await slots.acquire()
        except TimeoutError:
            raise self._crowded() from None
        try:
            async with self._use(pool, deadline) as conn:
                yield conn
        finally:
            slots.release()

    async def close(self) -> None:
        """Close the pool (if it was ever opened); later calls raise. Idempotent."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _crowded(self) -> StoreUnavailable:
        return StoreUnavailable(
            f"no pooled connection to PostgreSQL at {self._where} was free within "
            f"{self.checkout_timeout:g} s (max_size={self.max_size}, all busy)"
        )

    @functools.cached_property
    def _where(self) -> str:
        """`host:port` for messages (never the URL: it may carry a password)."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(self.url)
        except Exception:
            return "an unparsable URL"
        host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST")
        port = params.get("port") or os.environ.get("PGPORT") or 5432
        return f"{host or 'localhost'}:{port}"

    async def _ready(self) -> AsyncConnectionPool[Any]:
        async with self._lock:
            if self._closed:
                raise RuntimeError("PostgreSQL database is closed")
            if self._pool is None:
                # The first connection is made here rather than by the pool:
                # a pool that cannot connect only logs why and keeps trying,
                # while this tells the caller the cause at once.
                conn = await self._connect()
                try:
                    if self._pending:
                        async with self._guarded(conn):
                            await self._migrate(conn)
                finally:
                    await conn.close()
                pool = self._new_pool()
                await pool.open(wait=False)
                if self._closed:  # close() ran while the pool was opening
                    await pool.close()
                    raise RuntimeError("PostgreSQL database is closed")
                self._pool = pool
            elif self._pending:
                async with self._use(self._pool) as conn:
                    await self._migrate(conn)
            return self._pool

    def _new_pool(self) -> AsyncConnectionPool[Any]:
        from psycopg_pool import AsyncConnectionPool

        return AsyncConnectionPool(
            self.url,
            min_size=self.min_size,
            max_size=self.max_size,
            kwargs={"autocommit": True, "connect_timeout": self._libpq_connect_timeout},
            connection_class=connection_class(),
            configure=self._configure,
            # Checked in _checkout instead, where a wait for a free connection
            # and a check the server does not answer can be told apart.
            check=None,
            timeout=self.checkout_timeout,
            open=False,
            name="taskloom",
        )

    @property
    def _libpq_connect_timeout(self) -> int:
        # libpq counts whole seconds, at least 2; asyncio.timeout keeps the exact bound.
        return max(2, math.ceil(self.connect_timeout))

    async def _connect(self) -> AsyncConnection[Any]:
        """A configured connection made directly; `StoreUnavailable` says why not."""
        from psycopg import OperationalError

        try:
            async with asyncio.timeout(self.connect_timeout):
                conn = await connection_class().connect(
                    self.url, autocommit=True, connect_timeout=self._libpq_connect_timeout
                )
                await self._configure(conn)
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {self._where}: "
                f"no answer within {self.connect_timeout:g} s"
            ) from exc
        except OperationalError as exc:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {self._where}: {_one_line(exc)}"
            ) from exc
        return conn

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        """Put a new connection under the statement timeouts (the pool calls this too)."""
        if self.statement_timeout is None:
            return
        timeout = f"{max(1, round(self.statement_timeout * 1000))}ms"
        try:
            await conn.execute(
                "SELECT set_config('statement_timeout', %s, false),"
                " set_config('idle_in_transaction_session_timeout', %s, false)",
                (timeout, timeout),
            )
        except BaseException:
            await conn.close()
            raise

    async def _checkout(
        self, pool: AsyncConnectionPool[Any], deadline: float | None = None
    ) -> AsyncConnection[Any]:
        from psycopg import OperationalError
        from psycopg_pool import PoolTimeout

        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.checkout_timeout
        while True:
            try:
                conn: AsyncConnection[Any] = await pool.getconn(
                    timeout=max(deadline - loop.time(), 0.001)
                )
            except PoolTimeout:
                # Every connection is busy: say so, and open no other one.
                # Crowding is the caller's to bound (the runtime queues
                # children), never this process's to answer with more
                # connections than its pool.
                raise self._crowded() from None
            try:
                async with asyncio.timeout(max(deadline - loop.time(), 0.001)):
                    # A round trip: after a server restart or a dropped
                    # connection the caller gets a fresh one, not a dead one.
                    await conn.execute("")
                return conn
            except BaseException as exc:
                # Dead, silent or interrupted: no state is known to be safe
                # but closed, and the pool replaces it.
                await conn.close()
                await pool.putconn(conn)
                if isinstance(exc, TimeoutError):
                    break
                if not isinstance(exc, OperationalError):
                    raise
        # The server took a connection's check without answering. The
        # pool does not say why; connecting directly does, in the place of
        # the connection just closed, so the process still holds no more
        # than max_size.
        conn = await self._connect()
        await conn.close()
        raise StoreUnavailable(
            f"PostgreSQL at {self._where} answers, but a pooled connection's check got no "
            f"answer within {self.checkout_timeout:g} s"
        )

    @asynccontextmanager
    async def _use(
        self, pool: AsyncConnectionPool[Any], deadline: float | None = None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        from psycopg.pq import TransactionStatus

        conn = await self._checkout(pool, deadline)
        try:
            async with self._guarded(conn):
                yield conn
        finally:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                # Interrupted mid-statement or mid-transaction: no state is
                # known to be safe but closed, and the pool replaces it.
                await conn.close()
            await pool.putconn(conn)

    @asynccontextmanager
    async def _guarded(self, conn: AsyncConnection[Any]) -> AsyncIterator[None]:
        """Bound the use of `conn` client-side; turn connection failures into store errors."""
        from psycopg import OperationalError
        from psycopg.errors import QueryCanceled

        # The server's statement_timeout cannot fire for a statement the
        # server never received; this bound can.
        limit = None if self.statement_timeout is None else self.statement_timeout + SILENCE_MARGIN
        watchdog = Watchdog(limit)
        try:
            yield
        except asyncio.CancelledError as exc:
            if not watchdog.stop():
                raise
            raise StoreUnavailable(
                f"PostgreSQL at {self._where} did not answer within {limit:g} s"
            ) from exc
        except QueryCanceled as exc:
            raise StoreError(
                f"PostgreSQL at {self._where} cancelled a statement: {_one_line(exc)}"
            ) from exc
        except OperationalError as exc:
            if not conn.broken:
                raise
            raise StoreUnavailable(
                f"lost the connection to PostgreSQL at {self._where}: {_one_line(exc)}"
            ) from exc
        finally:
            watchdog.stop()

    async def _migrate(self, conn: AsyncConnection[Any]) -> None:
        pending = list(self._pending.items())
        names = _TableNames(self)
        versions = self.table("schema_version")
        async with conn.transaction():
            # Several processes may open a fresh database at once; CREATE ...
            # IF NOT EXISTS alone still races in the catalog, so first use is
            # serialised per schema by an advisory lock held to commit.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))",
                (f"taskloom.schema:{self.schema or ''}",),
            )
            if self.schema:
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {versions} "
                "(component text PRIMARY KEY, version integer NOT NULL)"
            )
            for component, migrations in pending:
                cur = await conn.execute(
                    f"SELECT version FROM {versions} WHERE component = %s", (component,)
                )
                row = await cur.fetchone()
                current = int(row[0]) if row else 0
                _check_version(component, current, len(migrations))
                for migration in migrations[current:]:
                    for statement in migration:
                        await conn.execute(statement.format_map(names))
                if current < len(migrations):
                    await conn.execute(
                        f"INSERT INTO {versions} (component, version) VALUES (%s, %s) "
                        "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
                        (component, len(migrations)),
                    )
        for component, migrations in pending:
            if self._pending.get(component) is migrations:
                del self._pending[component]


class _TableNames(dict[str, str]):
    """`{name}` in a PostgreSQL migration resolves to `db.table(name)`."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__()
        self._db = db

    def __missing__(self, name: str) -> str:
        return self._db.table(name)


def session_filters(
    placeholder: str, *, parent_id: str | None, agent: str | None
) -> tuple[list[str], list[object]]:
    """WHERE clauses and parameters for `SessionStore.list` filters (`?` or `%s`)."""
    where: list[str] = []
    params: list[object] = []
    if parent_id is not None:
        where.append(f"parent_id = {placeholder}")
        params.append(parent_id)
    if agent is not None:
        where.append(f"agent = {placeholder}")
        params.append(agent)
    return where, params
