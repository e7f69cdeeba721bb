"""One fixture for tests that must hold on every session store.

`backend` is parametrised over memory, SQLite and PostgreSQL. It gives a
`Backend` whose `open()` returns a new store on the same database (for the
durable stores, a true reopen: a fresh connection that has to decode what the
first one wrote); for memory, every `open()` returns the one store. Stores
are closed after the test::

    from store_backends import Backend, backend  # noqa: F401 (fixture)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pg import PG_DSN
from taskloom.backends import PostgresBackend, SessionStore, SQLiteBackend
from taskloom.backends.memory import MemoryStore

__all__ = ["Backend", "backend"]


class Backend:
    """A way to (re)open one session database."""

    def __init__(self, name: str, tmp_path: Path, schema: str | None) -> None:
        self.name = name
        self.durable = name != "memory"
        self.path = tmp_path / "taskloom.db"
        self.schema = schema
        self._memory = MemoryStore()
        self._opened: list[SessionStore] = []

    def open(self) -> SessionStore:
        """A store on this backend's database (the same one every time for memory)."""
        store: SessionStore
        if self.name == "memory":
            store = self._memory
        elif self.name == "sqlite":
            store = SQLiteBackend(self.path).store
        else:
            store = PostgresBackend(PG_DSN, schema=self.schema, max_size=2).store
        self._opened.append(store)
        return store

    async def close(self) -> None:
        for store in self._opened:
            await store.close()  # type: ignore[attr-defined]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=[pytest.mark.postgres])])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Memory, SQLite or PostgreSQL (in a private schema), fresh for the test."""
    schema = request.getfixturevalue("pg_schema") if request.param == "postgres" else None
    b = Backend(request.param, tmp_path, schema)
    yield b
    await b.close()
