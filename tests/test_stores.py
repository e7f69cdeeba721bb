"""The store contract on every backend, plus what only the durable stores promise."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest

from barriers import Tally
from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import (
    PostgresBackend,
    SessionMeta,
    SessionStore,
    SQLiteBackend,
    open_backend,
)
from taskloom.backends.memory import MemoryStore
from taskloom.backends.postgres import PostgresStore
from taskloom.backends.sqlite import SQLiteStore
from taskloom.entries import Entry
from taskloom.errors import StaleLeaseError
from taskloom.testing.store_contract import StoreContract, assert_multiprocess_appends

# -- the contract on each backend --------------------------------------------------


class TestMemoryStore(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[SessionStore]:
        store = MemoryStore()
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self) -> Callable[[], SessionStore]:
        pytest.skip("MemoryStore keeps sessions in process memory: nothing survives a reopen")


class TestSQLiteStore(StoreContract):
    @pytest.fixture
    def path(self, tmp_path: Path) -> Path:
        return tmp_path / "nested" / "dirs" / "taskloom.db"

    @pytest.fixture
    async def store(self, path: Path) -> AsyncIterator[SessionStore]:
        store = SQLiteBackend(path).store
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, path: Path) -> Callable[[], SessionStore]:
        return lambda: SQLiteBackend(path).store


@pytest.mark.postgres
@requires_postgres
class TestPostgresStore(StoreContract):
    @pytest.fixture
    async def store(self, pg_schema: str) -> AsyncIterator[SessionStore]:  # noqa: F811
        store = PostgresBackend(PG_DSN, schema=pg_schema, max_size=4).store
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, pg_schema: str) -> Callable[[], SessionStore]:  # noqa: F811
        return lambda: PostgresBackend(PG_DSN, schema=pg_schema, max_size=2).store


# -- both durable stores -----------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres])])
async def durable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    """A SQLite or PostgreSQL store, fresh for the test."""
    store: SQLiteStore | PostgresStore
    if request.param == "sqlite":
        store = SQLiteBackend(tmp_path / "taskloom.db").store
    else:
        schema = request.getfixturevalue("pg_schema")
        store = PostgresBackend(PG_DSN, schema=schema, max_size=2).store
    yield store
    await store.close()


async def test_strings_text_columns_could_not_hold_round_trip(durable: SessionStore) -> None:
    await durable.create(SessionMeta("s-1"))
    data = {"nul": "a\x00b", "lone_surrogate": "\ud83d half an emoji", "\x00key": 1}
    await durable.append("s-1", Entry("message", data))
    [entry] = await durable.load("s-1")
    assert entry.data == data


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
async def test_non_json_numbers_are_refused(durable: SessionStore, bad: float) -> None:
    await durable.create(SessionMeta("s-1"))
    with pytest.raises(ValueError, match="cannot store"):
        await durable.append("s-1", Entry("message", {"x": bad}))
    assert await durable.load("s-1") == []


async def test_nesting_too_deep_to_read_back_is_refused(durable: SessionStore) -> None:
    await durable.create(SessionMeta("s-1"))
    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested"):
        await durable.append("s-1", Entry("message", {"x": deep}))
    assert await durable.load("s-1") == []


async def test_closed_store_refuses_work(durable: SessionStore) -> None:
    await durable.create(SessionMeta("s-1"))
    await durable.close()  # type: ignore[attr-defined]
    await durable.close()  # type: ignore[attr-defined]  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await durable.get("s-1")


# -- SQLite ------------------------------------------------------------------------


async def test_sqlite_opening_does_no_io(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "taskloom.db"
    store = SQLiteBackend(path).store
    assert not (tmp_path / "a").exists()
    await store.create(SessionMeta("s-1"))
    assert path.exists()
    await store.close()


async def test_sqlite_file_is_wal_with_recorded_schema_versions(tmp_path: Path) -> None:
    path = tmp_path / "taskloom.db"
    store = SQLiteBackend(path).store
    await store.list()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        versions = dict(raw.execute("SELECT component, version FROM taskloom_schema_version"))
    assert versions == {"sessions": 1, "leases": 1}
    await store.close()
    # A second opener finds the schema in place and changes nothing.
    again = SQLiteBackend(path).store
    await again.list()
    await again.close()
    with sqlite3.connect(path) as raw:
        assert (
            dict(raw.execute("SELECT component, version FROM taskloom_schema_version")) == versions
        )


async def test_sqlite_refuses_a_schema_newer_than_it_knows(tmp_path: Path) -> None:
    path = tmp_path / "taskloom.db"
    store = SQLiteBackend(path).store
    await store.list()
    await store.close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE taskloom_schema_version SET version = 99 WHERE component = 'sessions'")
    newer = SQLiteBackend(path).store
    with pytest.raises(RuntimeError, match="newer"):
        await newer.list()
    await newer.close()


async def test_sqlite_close_releases_the_connection(tmp_path: Path) -> None:
    path = tmp_path / "taskloom.db"
    store = SQLiteBackend(path).store
    await store.create(SessionMeta("s-1"))
    await store.append("s-1", Entry("x"))
    wal = path.with_name(path.name + "-wal")
    assert wal.exists()
    await store.close()
    # SQLite folds and removes the write-ahead log when its last connection closes.
    assert not wal.exists()


async def test_sqlite_waits_for_a_locked_file_without_blocking_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "taskloom.db"
    store = SQLiteBackend(path).store
    await store.create(SessionMeta("s-1"))
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    ticks = Tally()

    async def ticker() -> None:
        while True:
            ticks.add()
            await asyncio.sleep(0.01)

    append = asyncio.create_task(store.append("s-1", Entry("x")))
    ticking = asyncio.create_task(ticker())
    # A blocked loop could not tick: thirty turns of another task while the
    # append waits show it waits off the loop.
    await ticks.reached(30)
    assert not append.done()
    raw.execute("ROLLBACK")
    raw.close()
    assert await asyncio.wait_for(append, 10) == 1
    ticking.cancel()
    await store.close()


async def test_sqlite_fence_sees_leases_taken_through_another_connection(tmp_path: Path) -> None:
    path = tmp_path / "taskloom.db"
    store = SQLiteBackend(path).store
    other_backend = SQLiteBackend(path)
    other = other_backend.leases
    await store.create(SessionMeta("s-1"))
    old = await store.leases.acquire("child:s-1", "worker-a", 30.0)
    assert old is not None
    await other.release(old)
    new = await other.acquire("child:s-1", "worker-b", 30.0)
    assert new is not None and new.generation > old.generation
    with pytest.raises(StaleLeaseError):
        await store.append("s-1", Entry("x"), fence=old.fence)
    assert await store.append("s-1", Entry("x"), fence=new.fence) == 1
    await other_backend.close()
    await store.close()


def test_open_store_maps_sqlite_urls(tmp_path: Path) -> None:
    store = open_backend(f"sqlite:///{tmp_path}/x.db").store
    assert isinstance(store, SQLiteStore)
    assert Path(store.path) == tmp_path / "x.db"


# -- PostgreSQL --------------------------------------------------------------------


def _tables(schema: str) -> set[str]:
    with psycopg.connect(PG_DSN) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.postgres
@requires_postgres
async def test_postgres_opening_does_no_io(pg_schema: str) -> None:  # noqa: F811
    store = PostgresBackend(PG_DSN, schema=pg_schema).store
    assert _tables(pg_schema) == set()
    await store.list()
    assert {"taskloom_sessions", "taskloom_entries", "taskloom_leases"} <= _tables(pg_schema)
    await store.close()


@pytest.mark.postgres
@requires_postgres
async def test_postgres_concurrent_first_use_migrates_once(pg_schema: str) -> None:  # noqa: F811
    stores = [PostgresBackend(PG_DSN, schema=pg_schema, max_size=1).store for _ in range(4)]
    try:
        await asyncio.gather(
            *(store.create(SessionMeta(f"s-{i}")) for i, store in enumerate(stores))
        )
        assert len(await stores[0].list()) == 4
    finally:
        await asyncio.gather(*(store.close() for store in stores))
    with psycopg.connect(PG_DSN) as conn:
        rows = conn.execute(
            f'SELECT component, version FROM "{pg_schema}".taskloom_schema_version'
        ).fetchall()
    assert dict(rows) == {"sessions": 1, "leases": 1}


# -- several processes -------------------------------------------------------------


@pytest.mark.slow
async def test_sqlite_appends_from_several_processes(tmp_path: Path) -> None:
    await assert_multiprocess_appends(f"sqlite:///{tmp_path}/shared.db", processes=4, appends=40)


@pytest.mark.slow
@pytest.mark.postgres
@requires_postgres
async def test_postgres_appends_from_several_processes(pg_schema: str) -> None:  # noqa: F811
    await assert_multiprocess_appends(
        PG_DSN, options={"schema": pg_schema, "max_size": 2}, processes=4, appends=40
    )
