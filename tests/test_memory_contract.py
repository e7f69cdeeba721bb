"""The memory store contract on every backend taskloom ships."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import MemoryBackend, MemoryStore, PostgresBackend, SQLiteBackend
from taskloom.backends.memory import MEMORY_CAPABILITIES
from taskloom.testing.memory_contract import MemoryStoreContract


class TestMemoryMemories(MemoryStoreContract):
    @pytest.fixture
    def capabilities(self) -> Any:
        return MEMORY_CAPABILITIES

    @pytest.fixture
    def memory(self) -> MemoryStore:
        memory = MemoryBackend().memory
        assert memory is not None
        return memory


class TestSQLiteMemories(MemoryStoreContract):
    @pytest.fixture
    async def memory(self, tmp_path: Path) -> AsyncIterator[MemoryStore]:
        backend = SQLiteBackend(tmp_path / "m.db")
        yield backend.memory
        await backend.close()

    @pytest.fixture
    def memory_factory(self, tmp_path: Path) -> Callable[[], Any]:
        return functools.partial(SQLiteBackend, tmp_path / "m.db")


@requires_postgres
class TestPostgresMemories(MemoryStoreContract):
    @pytest.fixture
    async def memory(self, pg_schema: str) -> AsyncIterator[MemoryStore]:  # noqa: F811
        backend = PostgresBackend(PG_DSN, schema=pg_schema)
        yield backend.memory
        await backend.close()

    @pytest.fixture
    def memory_factory(self, pg_schema: str) -> Callable[[], Any]:  # noqa: F811
        return functools.partial(PostgresBackend, PG_DSN, schema=pg_schema)
