"""The SQLite database object of a backend: one file, one connection, one worker thread.

sqlite3 blocks, and the event loop must not: every statement runs on the
database's own thread, urgent work (lease renewals) ahead of the queue.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

from ...errors import StoreUnavailable
from .._sql import VERSION_TABLE, Migration, check_version

__all__ = ["SQLiteDatabase", "immediate"]

T = TypeVar("T")


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
                f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
                "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            for component, migrations in pending:
                row = conn.execute(
                    f"SELECT version FROM {VERSION_TABLE} WHERE component = ?", (component,)
                ).fetchone()
                current = int(row[0]) if row else 0
                check_version(component, current, len(migrations))
                for migration in migrations[current:]:
                    for statement in migration:
                        conn.execute(statement)
                if current < len(migrations):
                    conn.execute(
                        f"INSERT INTO {VERSION_TABLE} (component, version) VALUES (?, ?) "
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
