"""The SQLite database object of a backend: one file, one connection, one worker thread.

sqlite3 blocks, and the event loop must not: a call that would wait (for
another writer's lock, for the disk, behind other calls) runs on the
database's own thread, urgent work (lease renewals and releases) ahead of
the queue. A call that can finish at once runs at once, on the caller's
thread: handing it to the thread and back costs about 100 µs of CPU, ten
times the statements.
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

from ...errors import StoreNotFound, StoreUnavailable
from .._sql import VERSION_TABLE, Migration, check_version

T = TypeVar("T")

CHECKPOINT_EVERY = 256
"""Calls between two checkpoints of the write-ahead log, run on the worker thread."""

_MISSED: Any = object()  # an inline call met another writer's lock


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
    """One SQLite file (or `":memory:"`), one connection, and a worker thread for calls that wait.

    The connection is opened on the worker at first use, in WAL mode so
    readers in other processes never wait for a writer, with `busy_timeout`
    so concurrent writers queue rather than fail.
    `synchronous="NORMAL"` (the default, WAL's usual pairing) survives a
    crashed or killed process; `"FULL"` also survives power loss, at the
    price of a disk sync per commit (5-20x slower appends).

    With `"NORMAL"`, a commit only writes the log to the operating system,
    so a call finds out at once whether it can run: when nothing is queued
    and no other process holds the write lock, it runs on the caller's
    thread; otherwise it goes to the worker, which waits for the lock. The
    log is checkpointed into the file on the worker, never on the caller's
    thread. With `"FULL"` every call goes to the worker.

    With `create=True` (the default) a missing file is created with its
    parent directories, readable and writable by its owner only (0600, as
    SQLite then makes its -wal and -shm files); an existing file keeps its
    mode. With `create=False` the file must exist: first use raises
    `StoreNotFound` naming it, and nothing is created, neither the file nor
    a directory.

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
        create: bool = True,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self.path: str | Path = path if path == ":memory:" else Path(path).expanduser()
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._create = create
        self._executor: _Worker | None = None
        # Used by one thread at a time: the worker's, or the caller's when
        # no call is queued on or running in the worker (`_queued == 0`).
        self._conn: sqlite3.Connection | None = None
        self._pending: dict[str, Sequence[Migration]] = {}
        self._closed = False
        self._inline = synchronous == "NORMAL"
        self._queued = 0  # calls handed to the worker and not done yet
        self._count_lock = threading.Lock()  # the worker's thread decrements it
        self._calls = 0  # since the last checkpoint
        self._owner: int | None = None  # the thread whose calls may run inline

    def require(self, component: str, migrations: Sequence[Migration]) -> None:
        """Have `component`'s migrations applied before the next statement runs (no I/O now)."""
        self._pending[component] = migrations

    async def run(
        self, fn: Callable[[sqlite3.Connection], T], *, urgent: bool = False, inline: bool = True
    ) -> T:
        """Call `fn(connection)` and return its result.

        It runs on the caller's thread when it can finish at once: nothing is
        queued on the worker, and the caller is the thread that first used
        this database. `inline=False` sends it to the worker anyway, for a
        read that may be large (a whole log, every session), so the event
        loop is not held while it runs.

        `fn` must be one statement or one transaction (`immediate`), so that
        when it fails on another writer's lock it has left nothing behind:
        it is then called again on the worker thread, which waits for the
        lock up to `busy_timeout`.

        Calls run in the order they came, except that `urgent` ones (lease
        renewals and releases) go before every ordinary call still waiting: a
        renewal must not wait behind a thousand children's writes.

        Cancelling the caller withdraws `fn` if it has not started; once
        started it runs to its end, so a transaction inside it either commits
        or rolls back whole, whether or not anyone still awaits it.
        """
        if self._closed:
            raise RuntimeError(f"SQLite database {str(self.path)!r} is closed")
        if self._owner is None:
            self._owner = threading.get_ident()
        if (
            inline
            and self._queued == 0
            and self._inline
            and self._conn is not None
            and not self._pending
            # One thread only besides the worker: two event loops in two
            # threads would otherwise use the connection at once.
            and threading.get_ident() == self._owner
        ):
            result = self._call_inline(self._conn, fn)
            if result is not _MISSED:
                return result  # type: ignore[no-any-return]
        return await asyncio.wrap_future(self._submit(functools.partial(self._call, fn), urgent))

    async def execute(self, sql: str, params: Any = (), *, urgent: bool = False) -> int:
        """Run one statement (its own transaction); how many rows it changed."""
        return await self.run(lambda conn: conn.execute(sql, params).rowcount, urgent=urgent)

    async def fetchone(self, sql: str, params: Any = ()) -> Any:
        """The first row one query returns, or None."""
        return await self.run(lambda conn: conn.execute(sql, params).fetchone())

    async def fetchall(
        self, sql: str, params: Any = (), *, urgent: bool = False, inline: bool = True
    ) -> list[Any]:
        """Every row one statement returns (all read, so a write in it commits)."""
        return await self.run(
            lambda conn: conn.execute(sql, params).fetchall(), urgent=urgent, inline=inline
        )

    async def close(self) -> None:
        """Close the connection and stop the worker; later calls raise. Idempotent."""
        if self._closed:
            return
        self._closed = True
        executor = self._executor
        if executor is None:
            return
        # Queued behind any work already submitted, so that work finishes first;
        # the worker then stops. Shielded: a caller that gives up waiting must
        # not withdraw the disconnect and leave the thread and file open.
        done = self._submit(self._disconnect)
        self._executor = None
        executor.shutdown()
        await asyncio.shield(asyncio.wrap_future(done))

    def _submit(self, fn: Callable[[], T], urgent: bool = False) -> Future[T]:
        if self._executor is None:
            self._executor = _Worker("taskloom-sqlite")
        with self._count_lock:
            self._queued += 1
        done = self._executor.submit(fn, urgent=urgent)
        # Run, failed or withdrawn: the worker no longer needs the connection for it.
        done.add_done_callback(self._worker_done)
        return done

    def _worker_done(self, _: object) -> None:
        with self._count_lock:
            self._queued -= 1

    def _call_inline(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        # The connection waits for no lock here (busy_timeout is 0 outside
        # the worker): a call that meets one is handed to the worker instead.
        try:
            result = fn(conn)
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return _MISSED  # type: ignore[no-any-return]
        self._counted()
        return result

    def _counted(self) -> None:
        self._calls += 1
        if self._calls >= CHECKPOINT_EVERY and self._inline:
            self._calls = 0
            self._submit(self._checkpoint)

    def _checkpoint(self) -> None:
        # PASSIVE never waits for readers or writers; what it cannot copy
        # now, a later checkpoint will.
        conn = self._conn
        if conn is not None:
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error:
                pass

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            conn = self._conn if self._conn is not None else self._connect()
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(
                f"cannot open SQLite database {str(self.path)!r}: {exc}"
            ) from exc
        try:
            with self._patient(conn):
                if self._pending:
                    self._migrate(conn)
                result = fn(conn)
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            raise StoreUnavailable(
                f"SQLite database {str(self.path)!r} stayed locked by another writer "
                f"past busy_timeout ({self._busy_timeout:g} s): {exc}"
            ) from exc
        self._counted()
        return result

    @contextmanager
    def _patient(self, conn: sqlite3.Connection) -> Iterator[None]:
        """On the worker: wait for another writer's lock up to busy_timeout."""
        if not self._inline:
            yield  # the connection always waits
            return
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        try:
            yield
        finally:
            conn.execute("PRAGMA busy_timeout = 0")

    @functools.cached_property
    def _busy_ms(self) -> int:
        return max(0, round(self._busy_timeout * 1000))

    def _connect(self) -> sqlite3.Connection:
        target: str | Path = self.path
        uri = False
        if isinstance(self.path, Path):
            if self._create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _create_private(self.path)
            elif not self.path.is_file():
                raise StoreNotFound(f"SQLite database {str(self.path)!r} does not exist")
            else:
                # mode=rw: SQLite never creates the file, even one removed since.
                target, uri = f"{self.path.absolute().as_uri()}?mode=rw", True
        conn = sqlite3.connect(
            target,
            uri=uri,
            timeout=self._busy_timeout,
            isolation_level=None,
            cached_statements=256,
            check_same_thread=False,  # the caller's thread too, never at once (see run)
        )
        try:
            self._enter_wal(conn)
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            if self._inline:
                # Checkpoints run on the worker (`_checkpoint`), not inside a
                # commit on the caller's thread, and only the worker waits.
                conn.execute("PRAGMA wal_autocheckpoint = 0")
                conn.execute("PRAGMA busy_timeout = 0")
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
                if not _busy(exc) or time.monotonic() + delay > give_up:
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


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether `exc` is another writer's lock (what waiting or the worker can get past)."""
    return exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _create_private(path: Path) -> None:
    """Create `path` empty with mode 0600 unless it exists.

    Sessions hold prompts, tool results and approvals: other local users must
    not read them. Made before SQLite opens it, the file carries the mode
    SQLite gives the -wal and -shm files it creates beside it; the process's
    umask is left alone (other threads create files too).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


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
