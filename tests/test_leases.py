"""The lease contract on memory, SQLite and PostgreSQL leases."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import Leases, MemoryLeases
from taskloom.stores import PostgresLeases, SQLiteLeases, SQLiteStore
from taskloom.testing.clock import FakeClock
from taskloom.testing.lease_contract import LeaseContract


class TestMemoryLeases(LeaseContract):
    @pytest.fixture
    def leases(self, clock: FakeClock) -> Leases:
        return MemoryLeases(clock)


class TestSQLiteLeases(LeaseContract):
    @pytest.fixture
    def path(self, tmp_path: Path) -> Path:
        return tmp_path / "leases.db"

    @pytest.fixture
    async def leases(self, clock: FakeClock, path: Path) -> AsyncIterator[Leases]:
        leases = SQLiteLeases(path, clock=clock)
        yield leases
        await leases.close()

    @pytest.fixture
    def reopen(self, clock: FakeClock, path: Path) -> Callable[[], Leases]:
        return lambda: SQLiteLeases(path, clock=clock)


class TestSQLiteStoreLeases(LeaseContract):
    """The leases a `SQLiteStore` checks fences against, sharing its connection."""

    @pytest.fixture
    async def leases(self, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Leases]:
        store = SQLiteStore(tmp_path / "taskloom.db", clock=clock)
        yield store.leases
        await store.leases.close()  # shared: must leave the store usable
        assert await store.list() == []
        await store.close()


@pytest.mark.postgres
@requires_postgres
class TestPostgresLeases(LeaseContract):
    @pytest.fixture
    async def leases(self, clock: FakeClock, pg_schema: str) -> AsyncIterator[Leases]:  # noqa: F811
        leases = PostgresLeases(PG_DSN, clock=clock, schema=pg_schema, max_size=4)
        yield leases
        await leases.close()

    @pytest.fixture
    def reopen(self, clock: FakeClock, pg_schema: str) -> Callable[[], Leases]:  # noqa: F811
        return lambda: PostgresLeases(PG_DSN, clock=clock, schema=pg_schema, max_size=2)
