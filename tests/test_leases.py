"""The lease contract on memory, SQLite and PostgreSQL leases."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import Leases, PostgresBackend, SQLiteBackend
from taskloom.backends.memory import MemoryLeases
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
        leases_backend = SQLiteBackend(path, clock=clock)
        leases = leases_backend.leases
        yield leases
        await leases_backend.close()

    @pytest.fixture
    def reopen(self, clock: FakeClock, path: Path) -> Callable[[], Leases]:
        return lambda: SQLiteBackend(path, clock=clock)  # type: ignore[return-value]


class TestSQLiteStoreLeases(LeaseContract):
    """The leases a `SQLiteStore` checks fences against, sharing its connection."""

    @pytest.fixture
    async def leases(self, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Leases]:
        store = SQLiteBackend(tmp_path / "taskloom.db", clock=clock).store
        yield store.leases
        assert await store.list() == []
        await store.close()


@pytest.mark.postgres
@requires_postgres
class TestPostgresLeases(LeaseContract):
    @pytest.fixture
    async def leases(self, clock: FakeClock, pg_schema: str) -> AsyncIterator[Leases]:  # noqa: F811
        leases_backend = PostgresBackend(PG_DSN, clock=clock, schema=pg_schema, max_size=4)
        leases = leases_backend.leases
        yield leases
        await leases_backend.close()

    @pytest.fixture
    def reopen(self, clock: FakeClock, pg_schema: str) -> Callable[[], Leases]:  # noqa: F811
        return lambda: PostgresBackend(PG_DSN, clock=clock, schema=pg_schema, max_size=2)  # type: ignore[return-value]
