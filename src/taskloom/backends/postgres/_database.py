"""The PostgreSQL database object of a backend: one lazily opened pool, every wait bounded.

Its store, leases, activity registry, notice inbox and snapshots all work
through one `PostgresDatabase`, so a backend holds one pool sized by one
`PoolOptions`.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import re
import select
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ...errors import StoreError, StoreUnavailable
from .._pool import PoolOptions, PoolSettings
from .._sql import Migration, check_version, quote_ident
from . import _lean
from ._bounds import SILENCE_MARGIN, Watchdog, Watchdogs, connection_class

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool
    from typing_extensions import Unpack


# `{sessions}` in a migration is `table("sessions")`; `{{` and `}}` are braces
# (as str.format reads them: the work queue's migrations escape procrastinate's SQL so).
_TABLE = re.compile(r"\{\{|\}\}|\{(\w+)\}")


# Every this many returns, a connection goes back through the pool rather
# than being kept at hand (see PostgresDatabase._give_back).
_POOL_EVERY = 64
# What a single statement returns (see PostgresDatabase._statement).
_ROWCOUNT, _ONE, _ALL = _lean.ROWCOUNT, _lean.ONE, _lean.ALL
# psycopg.pq's ConnStatus.OK and TransactionStatus.IDLE / ACTIVE, compared as ints
# so the hot path imports nothing.
_OK, _IDLE, _ACTIVE = 0, 0, 1
# The attribute a pooled connection carries: when it was last in use (`_now()`).
_USED_AT = "_taskloom_used_at"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class PostgresDatabase:
    """A PostgreSQL database reached through a lazily opened connection pool.

    `pool` (a `PoolOptions`, or its fields as keywords, which override it)
    sizes the pool and bounds its waits; `options` keeps what was chosen.
    `schema`, when given, holds every taskloom table (created if missing), so
    several tenants or tests can share one database without meeting; without
    it, tables resolve through the connection's `search_path`. Connections
    run in autocommit; multi-statement work opens an explicit transaction.
    `idle_clock` (seconds, monotonic) measures how long a pooled connection
    sat unused, against `check_after_idle` (a test passes a `FakeClock`).

    Every wait is bounded, so a slow, stalled or vanished server never holds
    a caller for long:

    - connecting gives up after `connect_timeout` seconds; failing to
      connect raises `StoreUnavailable` naming host, port and the cause
      (refused, timed out, authentication failed...);
    - waiting for a pooled connection gives up after `checkout_timeout`
      seconds with `StoreUnavailable`. A pooled connection idle longer than
      `check_after_idle` seconds (half a second unless told), or whose socket shows the server
      hung up, is checked (a round trip) before it is handed out, so after a
      server restart or a dropped connection the next call gets a fresh one
      rather than a dead one; a connection used more recently is handed out
      at once, and if the server went silent since, a statement it carries
      that gets no answer within `checkout_timeout` has the server looked at
      (one direct connection at a time beside the pool, bounded by
      `connect_timeout`): unreachable, it
      fails with `StoreUnavailable` naming the cause, as the check would have.
      No statement is ever sent twice: a connection found dead is replaced
      before it carries one, and a failure after a statement was sent (its
      commit may have reached the server) surfaces as below;
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
        pool: PoolOptions | None = None,
        *,
        idle_clock: Callable[[], float] = time.monotonic,
        **options: Unpack[PoolSettings],
    ) -> None:
        pool = (pool or PoolOptions()).replace(**options)
        self.url = url
        self.options = pool
        self.schema = schema = pool.schema
        self.min_size = pool.min_size
        self.max_size = max_size = pool.max_size
        self.connect_timeout = pool.connect_timeout
        self.checkout_timeout = pool.checkout_timeout
        self.statement_timeout = pool.statement_timeout
        self._check_after_idle = pool.check_after_idle
        self._prefix = f"{quote_ident(schema)}." if schema else ""
        self._pool: AsyncConnectionPool[Any] | None = None
        # The pool's loop and the bounds on its connections' uses, set as it opens.
        self._loop: asyncio.AbstractEventLoop
        self._watchdogs: Watchdogs
        # Ordinary work takes a slot first, so one connection is always left
        # for urgent work (lease renewals) and it never queues behind the rest.
        self._slots = asyncio.Semaphore(max_size - 1) if max_size > 1 else None
        self._lock = asyncio.Lock()
        self._pending: dict[str, Sequence[Migration]] = {}
        self._closed = False
        self._diagnosing = False
        self._in_use = 0  # connections checked out of the pool now
        # Connections returned by their last user, kept out of the pool for
        # the next one (most recent last): handing one out this way skips the
        # pool's own bookkeeping, a third of a statement's cost here.
        self._recent: list[AsyncConnection[Any]] = []
        self._returns = 0
        self._pool_waiters = 0  # callers waiting on the pool itself
        self._sweep: asyncio.TimerHandle | None = None
        self._sweeps: set[asyncio.Task[None]] = set()
        # When a connection was last in use, for check_after_idle.
        self._now = idle_clock

    def table(self, name: str) -> str:
        """The qualified name of the taskloom table `name` (e.g. `"sessions"`)."""
        return f"{self._prefix}taskloom_{name}"

    def _named(self, match: re.Match[str]) -> str:
        return match[0][0] if match[1] is None else self.table(match[1])

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

        Nothing done through it is repeated on a failure: the caller's
        statements may have reached the server.
        """
        async with self._held(urgent) as conn:
            yield conn

    @asynccontextmanager
    async def _held(
        self, urgent: bool, pool: AsyncConnectionPool[Any] | None = None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """`connection()`'s use of one connection; with `pool`, taken from it
        as it is (from within `_ready`, whose lock a fresh look would wait on)."""
        conn, slot, checked = await self._take(urgent, pool)
        try:
            watchdog = self._watch(conn, checked)
            try:
                yield conn
            except BaseException as exc:
                error = self._failure(exc, watchdog, conn)
                if error is None:
                    raise
                raise error from exc
            finally:
                watchdog.stop()
        finally:
            await self._give_back(conn, slot)

    async def execute(self, query: Any, params: Any = (), *, urgent: bool = False) -> int:
        """Run one statement (its own transaction); how many rows it changed."""
        return await self._statement(query, params, urgent, _ROWCOUNT)  # type: ignore[no-any-return]

    async def fetchone(self, query: Any, params: Any = (), *, urgent: bool = False) -> Any:
        """The first row one statement returns, or None."""
        return await self._statement(query, params, urgent, _ONE)

    async def fetchall(self, query: Any, params: Any = (), *, urgent: bool = False) -> list[Any]:
        """Every row one statement returns."""
        return await self._statement(query, params, urgent, _ALL)  # type: ignore[no-any-return]

    async def _statement(self, query: Any, params: Any, urgent: bool, result: int) -> Any:
        # connection() without its context manager: a single statement is
        # most of the store's work, and the layer's own cost is paid per call.
        conn, slot, checked = await self._take(urgent)
        try:
            watchdog = self._watch(conn, checked)
            try:
                return await _lean.statement(conn, query, params, result)
            except BaseException as exc:
                error = self._failure(exc, watchdog, conn)
                if error is None:
                    raise
                raise error from exc
            finally:
                watchdog.stop()
        finally:
            await self._give_back(conn, slot)

    async def close(self) -> None:
        """Close the pool (if it was ever opened); later calls raise. Idempotent."""
        self._closed = True
        pool, self._pool = self._pool, None
        recent, self._recent = self._recent, []
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if pool is not None:
            for conn in recent:
                await pool.putconn(conn)
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
                self._loop = loop = asyncio.get_running_loop()
                self._watchdogs = Watchdogs(
                    self._limit, loop, self._stall_probe, self.checkout_timeout
                )
                if self._closed:  # close() ran while the pool was opening
                    await pool.close()
                    raise RuntimeError("PostgreSQL database is closed")
                self._pool = pool
            elif self._pending:
                async with self._held(True, self._pool) as conn:
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
        setattr(conn, _USED_AT, self._now())
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

    async def _take(
        self, urgent: bool, pool: AsyncConnectionPool[Any] | None = None
    ) -> tuple[AsyncConnection[Any], asyncio.Semaphore | None, bool]:
        """A connection for one use, the slot it holds, and whether it was checked."""
        if pool is None:
            pool = self._pool
            if pool is None or self._pending:
                pool = await self._ready()
        slot = None if urgent else self._slots
        deadline = None
        if slot is not None:
            if slot.locked():
                # One bound for the whole checkout: the wait for a slot and for the pool.
                deadline = self._loop.time() + self.checkout_timeout
                try:
                    async with asyncio.timeout_at(deadline):
                        await slot.acquire()
                except TimeoutError:
                    raise self._crowded() from None
            else:
                await slot.acquire()  # free: taken at once, without a wait to bound
        try:
            conn, checked = await self._checkout(pool, deadline)
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        self._in_use += 1
        return conn, slot, checked

    async def _give_back(self, conn: AsyncConnection[Any], slot: asyncio.Semaphore | None) -> None:
        """Return `conn` to its pool (closed first if it was left mid-statement) and `slot`."""
        try:
            self._in_use -= 1
            if conn.pgconn.transaction_status != _IDLE:
                # Interrupted mid-statement or mid-transaction: no state is
                # known to be safe but closed, and the pool replaces it.
                await conn.close()
            else:
                setattr(conn, _USED_AT, self._now())
                self._returns += 1
                # Kept at hand for the next caller, unless someone waits on
                # the pool for it, or now and then so the pool can retire it
                # (max_lifetime) and count it as its own.
                if not self._pool_waiters and self._returns % _POOL_EVERY and not self._closed:
                    self._recent.append(conn)
                    if self._sweep is None:
                        self._sweep = self._loop.call_later(1.0, self._sweep_recent)
                    return
            pool = self._pool
            if pool is not None:
                await pool.putconn(conn)
            else:  # closed meanwhile
                await conn.close()
        finally:
            if slot is not None:
                slot.release()

    def _sweep_recent(self) -> None:
        """Give the pool back what was kept at hand but not used since (it may retire them)."""
        self._sweep = None
        recent = self._recent
        cutoff = self._now() - self._check_after_idle
        stale = 0
        while stale < len(recent) and getattr(recent[stale], _USED_AT) < cutoff:
            stale += 1
        if stale:
            task = self._loop.create_task(self._return_to_pool(recent[:stale]))
            del recent[:stale]
            self._sweeps.add(task)
            task.add_done_callback(self._sweeps.discard)
        if recent:
            self._sweep = self._loop.call_later(1.0, self._sweep_recent)

    async def _return_to_pool(self, conns: list[AsyncConnection[Any]]) -> None:
        """Put `conns` back into the pool (closed if the database was closed meanwhile)."""
        try:
            while conns:
                pool = self._pool
                if pool is None:
                    await conns[-1].close()
                else:
                    await pool.putconn(conns[-1])
                conns.pop()
        finally:
            # Interrupted: what was not given back is kept at hand, not lost.
            self._recent[:0] = conns

    async def _checkout(
        self, pool: AsyncConnectionPool[Any], deadline: float | None = None
    ) -> tuple[AsyncConnection[Any], bool]:
        """A connection from `pool` that is not known to be dead, and whether it was checked.

        A connection used within `check_after_idle` seconds is handed out
        without a round trip, unless its socket has something to read (an
        idle connection is sent nothing but the server's goodbye, or a
        reset): that one, or one idle longer, is checked with an empty
        statement first, and replaced if the check fails. So a connection
        the server already dropped never carries a caller's statement, and
        one that is merely idle costs nothing.
        """
        loop = self._loop
        if deadline is None:
            deadline = loop.time() + self.checkout_timeout
        recent = self._recent
        if recent:
            # The connection used last first: the busier a process, the
            # fewer connections it keeps warm, and none of them is checked.
            conn = recent.pop()
            pgconn = conn.pgconn
            if (
                pgconn.status == _OK
                and self._now() - getattr(conn, _USED_AT) <= self._check_after_idle
                and not select.select((pgconn.socket,), (), (), 0)[0]
            ):
                return conn, False
            # This one, and every one kept longer, goes back to the pool,
            # and comes out of it checked.
            recent.append(conn)
            self._recent = []
            await self._return_to_pool(recent)
        while True:
            self._pool_waiters += 1
            try:
                conn = await pool.getconn(timeout=max(deadline - loop.time(), 0.001))
            except Exception as exc:
                from psycopg_pool import PoolTimeout

                if not isinstance(exc, PoolTimeout):
                    raise
                raise await self._no_connection(pool) from None
            finally:
                self._pool_waiters -= 1
            pgconn = conn.pgconn
            if (
                pgconn.status == _OK
                and self._now() - getattr(conn, _USED_AT, -math.inf) <= self._check_after_idle
                and not select.select((pgconn.socket,), (), (), 0)[0]
            ):
                return conn, False
            try:
                async with asyncio.timeout(max(deadline - loop.time(), 0.001)):
                    # A round trip: after a server restart or a dropped
                    # connection the caller gets a fresh one, not a dead one.
                    await conn.execute("")
                return conn, True
            except BaseException as exc:
                from psycopg import OperationalError

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

    async def _no_connection(self, pool: AsyncConnectionPool[Any]) -> StoreUnavailable:
        """Why no pooled connection came in time."""
        # Counted here, not read from the pool: its size also counts the
        # connection attempts it keeps retrying against a server that is gone.
        size = self._in_use
        if size >= self.max_size or self._diagnosing:
            # Every connection is busy: say so, and open no other one.
            # Crowding is the caller's to bound (the runtime queues
            # children), never this process's to answer with more
            # connections than its pool.
            return self._crowded()
        # The pool holds fewer than max_size, so it could not open more:
        # connecting directly says why, in a place the pool left free (one
        # such attempt at a time, so the process stays within max_size).
        self._diagnosing = True
        try:
            conn = await self._connect()  # raises StoreUnavailable naming the cause
            await conn.close()
        finally:
            self._diagnosing = False
        return StoreUnavailable(
            f"PostgreSQL at {self._where} answers now, but the pool could not open a "
            f"connection within {self.checkout_timeout:g} s ({size} of {self.max_size} in use)"
        )

    def _watch(self, conn: AsyncConnection[Any], checked: bool) -> Watchdog:
        """The client-side bound on a use of `conn` (see `_failure`)."""
        # The server's statement_timeout cannot fire for a statement the
        # server never received; this bound can. A connection handed out
        # unchecked may be talking to a server that stopped answering since
        # its last use: a statement it carries that gets no answer within the
        # check's own bound (checkout_timeout) has the server looked at, as
        # the check would have.
        return self._watchdogs.watch(None if checked else conn)

    @functools.cached_property
    def _limit(self) -> float | None:
        return None if self.statement_timeout is None else self.statement_timeout + SILENCE_MARGIN

    def _failure(
        self, exc: BaseException, watchdog: Watchdog, conn: AsyncConnection[Any]
    ) -> BaseException | None:
        """The store error a failed use of `conn` raises instead of `exc`, or None for `exc`."""
        from psycopg import OperationalError
        from psycopg.errors import QueryCanceled

        if isinstance(exc, asyncio.CancelledError):
            if not watchdog.stop():
                return None
            if watchdog.error is not None:
                return watchdog.error
            return StoreUnavailable(
                f"PostgreSQL at {self._where} did not answer within {self._limit:g} s"
            )
        if isinstance(exc, QueryCanceled):
            return StoreError(
                f"PostgreSQL at {self._where} cancelled a statement: {_one_line(exc)}"
            )
        if isinstance(exc, OperationalError) and conn.broken:
            return StoreUnavailable(
                f"lost the connection to PostgreSQL at {self._where}: {_one_line(exc)}"
            )
        return None

    async def _stall_probe(self, conn: AsyncConnection[Any]) -> BaseException | None:
        """Whether a server that leaves `conn`'s statement unanswered can be reached at all."""
        while conn.pgconn.transaction_status != _ACTIVE:
            # The caller is between statements: nothing is waiting on the server.
            await asyncio.sleep(self.checkout_timeout)
        if self._diagnosing:
            return None
        # One direct connection at a time, bounded by connect_timeout; if it
        # connects the server is alive and the statement merely slow.
        self._diagnosing = True
        try:
            probe = await self._connect()
            await probe.close()
        except StoreUnavailable as exc:
            return exc
        finally:
            self._diagnosing = False
        return None

    @asynccontextmanager
    async def _guarded(self, conn: AsyncConnection[Any]) -> AsyncIterator[None]:
        """Bound a use of a connection made directly; connection failures become store errors."""
        watchdog = Watchdogs(self._limit, asyncio.get_running_loop()).watch()
        try:
            yield
        except BaseException as exc:
            error = self._failure(exc, watchdog, conn)
            if error is None:
                raise
            raise error from exc
        finally:
            watchdog.stop()

    async def _migrate(self, conn: AsyncConnection[Any]) -> None:
        pending = list(self._pending.items())
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
                check_version(component, current, len(migrations))
                for migration in migrations[current:]:
                    for statement in migration:
                        await conn.execute(_TABLE.sub(self._named, statement))
                if current < len(migrations):
                    await conn.execute(
                        f"INSERT INTO {versions} (component, version) VALUES (%s, %s) "
                        "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
                        (component, len(migrations)),
                    )
        for component, migrations in pending:
            if self._pending.get(component) is migrations:
                del self._pending[component]
