"""The memory store contract on every backend taskloom ships."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import (
    IDEMPOTENCY_KEEP_SECONDS,
    Backend,
    Capability,
    Memories,
    MemoryBackend,
    PostgresBackend,
    SessionMeta,
    SQLiteBackend,
)
from taskloom.backends.memory import MEMORY_CAPABILITIES
from taskloom.backends.memory import MemoryStore as SessionMemoryStore
from taskloom.testing.clock import FakeClock
from taskloom.testing.memory_contract import MemoriesContract


class TestMemoryMemories(MemoriesContract):
    @pytest.fixture
    def capabilities(self) -> Any:
        return MEMORY_CAPABILITIES

    @pytest.fixture
    def memory(self) -> Memories:
        memory = MemoryBackend().memory
        assert memory is not None
        return memory


class TestSQLiteMemories(MemoriesContract):
    @pytest.fixture
    async def memory(self, tmp_path: Path) -> AsyncIterator[Memories]:
        backend = SQLiteBackend(tmp_path / "m.db")
        yield backend.memory
        await backend.close()

    @pytest.fixture
    def memory_factory(self, tmp_path: Path) -> Callable[[], Any]:
        return functools.partial(SQLiteBackend, tmp_path / "m.db")


@requires_postgres
class TestPostgresMemories(MemoriesContract):
    @pytest.fixture
    async def memory(self, pg_schema: str) -> AsyncIterator[Memories]:  # noqa: F811
        backend = PostgresBackend(PG_DSN, schema=pg_schema)
        yield backend.memory
        await backend.close()

    @pytest.fixture
    def memory_factory(self, pg_schema: str) -> Callable[[], Any]:  # noqa: F811
        return functools.partial(PostgresBackend, PG_DSN, schema=pg_schema)


def test_a_backend_built_without_memory_has_none_and_does_not_declare_it() -> None:
    backend = Backend(SessionMemoryStore())
    assert backend.memory is None and not backend.supports(Capability.MEMORY)
    assert MemoryBackend().supports(Capability.MEMORY)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)])
def backend_on_clock(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[FakeClock], Any]:
    if request.param == "memory":
        return lambda clock: MemoryBackend(clock=clock)
    if request.param == "sqlite":
        return lambda clock: SQLiteBackend(tmp_path / "m.db", clock=clock)
    schema = request.getfixturevalue("pg_schema")
    return lambda clock: PostgresBackend(PG_DSN, schema=schema, clock=clock)


async def test_item_times_come_from_the_backends_clock(
    backend_on_clock: Callable[[FakeClock], Any],
) -> None:
    clock = FakeClock(1_700_000_000.25)
    backend = backend_on_clock(clock)
    assert backend.supports(Capability.MEMORY)
    try:
        made = await backend.memory.put(("user", "u1"), "k", "v1")
        clock.advance(60)
        edited = await backend.memory.put(("user", "u1"), "k", "v2")
        assert (made.created_at, made.updated_at) == (1_700_000_000.25, 1_700_000_000.25)
        assert (edited.created_at, edited.updated_at) == (1_700_000_000.25, 1_700_000_060.25)
        assert await backend.memory.get(("user", "u1"), "k") == edited
    finally:
        await backend.close()


async def test_sqlite_memory_outlives_its_backend_and_shares_the_sessions_file(
    tmp_path: Path,
) -> None:
    first = SQLiteBackend(tmp_path / "m.db")
    await first.memory.put(("user", "u1"), "prefs", {"drink": "green tea"})
    await first.store.create(SessionMeta("s1", agent="a"))
    await first.close()
    again = SQLiteBackend(tmp_path / "m.db", create=False)
    try:
        item = await again.memory.get(("user", "u1"), "prefs")
        assert item is not None and item.value == {"drink": "green tea"} and item.version == 1
        assert [s.id for s in await again.store.list()] == ["s1"]
        hits = await again.memory.search(("user",), "tea")
        assert [h.item for h in hits] == [item]  # the index outlived the backend too
    finally:
        await again.close()


async def test_applied_idempotency_keys_are_pruned_after_they_are_kept(
    backend_on_clock: Callable[[FakeClock], Any],
) -> None:
    clock = FakeClock(1_700_000_000.0)
    backend = backend_on_clock(clock)
    memory = backend.memory
    try:
        await memory.put(("user", "u1"), "k", "first", idempotency_key="old")
        clock.advance(IDEMPOTENCY_KEEP_SECONDS - 1)
        kept = await memory.put(("user", "u1"), "k", "again", idempotency_key="old")
        assert kept.version == 1  # still remembered: replayed
        clock.advance(2)
        # A later keyed write prunes the expired key; its retry then applies anew.
        await memory.put(("user", "u1"), "other", "x", idempotency_key="new")
        anew = await memory.put(("user", "u1"), "k", "again", idempotency_key="old")
        assert (anew.version, anew.value) == (2, "again")
    finally:
        await backend.close()
