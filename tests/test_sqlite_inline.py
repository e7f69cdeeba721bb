"""SQLite calls that can finish at once run on the caller's thread; the rest wait on the worker.

What must hold: a call runs inline only when nothing is queued on the
worker; a call that meets another writer's lock goes to the worker, lands
exactly once, and never blocks the event loop while it waits; with
`synchronous="FULL"` nothing runs inline; the write-ahead log is still
checkpointed although no commit checkpoints it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from taskloom.backends.sqlite import SQLiteDatabase, immediate
from taskloom.errors import StoreUnavailable


def _thread(conn: sqlite3.Connection) -> int:
    return threading.get_ident()


async def _with_table(db: SQLiteDatabase) -> None:
    await db.run(lambda conn: conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"))


async def test_a_call_with_nothing_queued_runs_on_the_callers_thread(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "inline.db")
    try:
        first = await db.run(_thread)  # opens the file: on the worker
        assert first != threading.get_ident()
        assert await db.run(_thread) == threading.get_ident()
    finally:
        await db.close()


async def test_a_call_behind_a_queued_one_waits_its_turn_on_the_worker(tmp_path: Path) -> None:
    path = tmp_path / "queued.db"
    db = SQLiteDatabase(path, busy_timeout=10)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await _with_table(db)
        other.execute("BEGIN IMMEDIATE")  # so the first write waits on the worker
        first = asyncio.ensure_future(
            db.run(lambda conn: conn.execute("INSERT INTO t (v) VALUES ('x')").rowcount)
        )
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(db.run(_thread))
        await asyncio.sleep(0.05)
        assert not first.done() and not second.done()  # it did not overtake the call before it
        other.execute("COMMIT")
        assert await first == 1
        assert await second != threading.get_ident()
        assert await db.run(_thread) == threading.get_ident()  # the queue is empty again
    finally:
        other.close()
        await db.close()


async def test_a_call_that_meets_another_writers_lock_waits_on_the_worker_and_lands_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    db = SQLiteDatabase(path, busy_timeout=10)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        await _with_table(db)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        ran_on: list[int] = []

        def insert(conn: sqlite3.Connection) -> int:
            ran_on.append(threading.get_ident())
            with immediate(conn):
                return int(
                    conn.execute("INSERT INTO t (v) VALUES ('x') RETURNING id").fetchone()[0]
                )

        write = asyncio.ensure_future(db.run(insert))
        ticks = 0
        while ticks < 20:  # the loop keeps running while the write waits
            await asyncio.sleep(0.005)
            ticks += 1
        assert not write.done()
        other.execute("COMMIT")
        assert await write == 1
        rows = await db.run(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0])
        assert rows == 1
        # Tried once inline, then called again (and run) on the worker.
        assert ran_on[0] == threading.get_ident() and ran_on[-1] != threading.get_ident()
        print(f"{ticks} ticks of the loop while the write waited; calls: {len(ran_on)}")
    finally:
        other.close()
        await db.close()


async def test_a_lock_held_past_busy_timeout_still_fails_with_store_unavailable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stuck.db"
    db = SQLiteDatabase(path, busy_timeout=0.2)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await _with_table(db)
        other.execute("BEGIN IMMEDIATE")

        def insert(conn: sqlite3.Connection) -> None:
            with immediate(conn):
                conn.execute("INSERT INTO t (v) VALUES ('x')")

        with pytest.raises(StoreUnavailable, match="stayed locked"):
            await db.run(insert)
        other.execute("ROLLBACK")
        await db.run(insert)
        assert await db.run(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0]) == 1
    finally:
        other.close()
        await db.close()


async def test_with_synchronous_full_every_call_runs_on_the_worker(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "full.db", synchronous="FULL")
    try:
        for _ in range(3):
            assert await db.run(_thread) != threading.get_ident()
    finally:
        await db.close()


async def test_the_log_is_checkpointed_although_no_commit_does_it(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    db = SQLiteDatabase(path)
    row = "x" * 4000
    try:
        await _with_table(db)
        autocheckpoint = await db.run(
            lambda conn: conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        )
        assert autocheckpoint == 0  # so no commit on the caller's thread checkpoints
        for _ in range(2048):  # about 8 MB through the log

            def insert(conn: sqlite3.Connection) -> None:
                with immediate(conn):
                    conn.execute("INSERT INTO t (v) VALUES (?)", (row,))

            await db.run(insert)
        await db.run(lambda conn: None)  # behind the last checkpoint handed to the worker
        wal = await asyncio.to_thread(os.path.getsize, f"{path}-wal")
        print(f"write-ahead log after ~8 MB of rows: {wal / 1e6:.1f} MB")
        # Without checkpoints it would hold every row written (over 8 MB).
        assert wal < 4_000_000
    finally:
        await db.close()


async def test_a_call_from_another_thread_goes_to_the_worker(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "threads.db")
    try:
        assert await db.run(_thread) != threading.get_ident()  # opens on the worker
        mine = threading.get_ident()
        assert await db.run(_thread) == mine  # the first caller's thread runs inline

        def elsewhere() -> tuple[int, int]:
            async def call() -> int:
                return await db.run(_thread)

            return threading.get_ident(), asyncio.run(call())

        other, ran_on = await asyncio.to_thread(elsewhere)
        assert ran_on not in (other, mine)  # the worker's, never a second caller's
    finally:
        await db.close()


async def test_a_call_marked_large_goes_to_the_worker(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "large.db")
    try:
        await db.run(_thread)
        assert await db.run(_thread, inline=False) != threading.get_ident()
    finally:
        await db.close()


async def test_a_close_whose_caller_gives_up_still_closes(tmp_path: Path) -> None:
    path = tmp_path / "close.db"
    before = set(threading.enumerate())
    db = SQLiteDatabase(path, busy_timeout=10)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        await _with_table(db)
        other.execute("BEGIN IMMEDIATE")
        write = asyncio.ensure_future(
            db.run(lambda conn: conn.execute("INSERT INTO t (v) VALUES ('x')").rowcount)
        )
        await asyncio.sleep(0.05)  # the write waits on the worker for the lock
        workers = {t for t in set(threading.enumerate()) - before if t.name == "taskloom-sqlite"}
        assert len(workers) == 1
        closing = asyncio.ensure_future(db.close())
        await asyncio.sleep(0.05)
        closing.cancel()  # the caller gives up while the close waits its turn
        other.execute("COMMIT")
        assert await write == 1
        for worker in workers:  # the disconnect ran after all, and the worker stopped
            await asyncio.to_thread(worker.join, 10)
            assert not worker.is_alive()
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()
