"""Backends: one per database, built by `open_backend`, every part on one database object."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (fixture)
from taskloom import Runtime
from taskloom.backends import (
    DEFAULT_MAX_SIZE,
    Backend,
    BackgroundActivity,
    BackgroundNotice,
    Capability,
    MemoryBackend,
    PoolOptions,
    PostgresBackend,
    SessionMeta,
    SessionStore,
    SQLiteBackend,
    open_backend,
    snapshots_for,
)
from taskloom.backends.memory import MemoryActivityRegistry, MemoryNoticeInbox, MemoryStore
from taskloom.backends.postgres import PostgresDatabase
from taskloom.backends.sqlite import SQLiteStore
from taskloom.background import BackgroundService
from taskloom.entries import Entry
from taskloom.errors import ConfigurationError
from taskloom.testing.capabilities import requires
from taskloom.testing.store_contract import StoreContract

ACTIVITY = BackgroundActivity("a1", "shell", "pytest -q", 1_700_000_000.0)
NOTICE = BackgroundNotice("a1:end", "a1", "shell", "exit 0")

# ---------------------------------------------------------------- open_backend


async def test_memory_url_opens_a_memory_backend() -> None:
    backend = open_backend("memory://")
    assert isinstance(backend, MemoryBackend)
    assert isinstance(backend.store, MemoryStore)
    assert backend.store.backend is backend
    assert backend.leases is backend.store.leases
    assert Capability.SPANS_PROCESSES not in backend.capabilities
    assert backend.supports("fenced_appends") and backend.supports(Capability.SNAPSHOTS)
    assert snapshots_for(backend.store) is backend.snapshots is not None
    assert isinstance(open_backend(), MemoryBackend)


async def test_sqlite_url_opens_one_database_for_every_part(tmp_path: Path) -> None:
    backend = open_backend(f"sqlite:///{tmp_path}/app.db")
    assert isinstance(backend, SQLiteBackend)
    try:
        db = backend.database
        assert backend.store.database is db
        assert backend.store.backend is backend
        assert backend.capabilities == frozenset(Capability)
        for part in (backend.registry, backend.inbox):
            assert getattr(part, "database", None) is db
        await backend.store.create(SessionMeta("s", "agent"))
        lease = await backend.leases.acquire("child:s", "me", 30.0)
        assert await backend.store.append("s", Entry("x"), fence=lease.fence) == 1
        assert backend.registry is not None and backend.inbox is not None
        assert await backend.registry.add("s", ACTIVITY, 30.0)
        assert await backend.inbox.push("s", NOTICE)
        assert backend.snapshots is not None
        await backend.snapshots.write("s", 1, "{}", fence=lease.fence)
        assert await backend.snapshots.read("s") == [(1, "{}")]
    finally:
        await backend.close()


async def test_postgres_url_opens_without_io_and_takes_pool_options() -> None:
    backend = open_backend(
        "postgresql://nobody@127.0.0.1:1/none", pool=PoolOptions(max_size=3), schema="x"
    )
    assert isinstance(backend, PostgresBackend)
    assert backend.options == PoolOptions(schema="x", max_size=3)
    assert backend.store.database is backend.database
    assert backend.store.concurrency == 2 * 4
    await backend.close()


@pytest.mark.parametrize(
    "url",
    ["no-scheme", "ftp://host/x", "mysql://localhost/db", "://nothing"],
)
def test_a_bad_url_says_which_urls_work(url: str) -> None:
    with pytest.raises(ConfigurationError, match="valid store URLs are memory://"):
        open_backend(url)
    with pytest.raises(ConfigurationError, match="valid store URLs are memory://"):
        _ = open_backend(url).store


def test_a_url_that_is_not_a_string_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="must be a string"):
        open_backend(42)  # type: ignore[arg-type]


def test_open_store_gives_the_backends_store(tmp_path: Path) -> None:
    store = open_backend(f"sqlite:///{tmp_path}/s.db").store
    assert isinstance(store, SQLiteStore)
    assert isinstance(store.backend, SQLiteBackend) and store.backend.store is store
    mine = MemoryStore()
    assert open_backend(mine).store is mine


# ---------------------------------------------------------------- PoolOptions


def test_pool_options_have_one_documented_default() -> None:
    options = PoolOptions()
    assert options.max_size == DEFAULT_MAX_SIZE == 10
    assert (options.min_size, options.schema, options.statement_timeout) == (1, None, 30.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_size = 2  # type: ignore[misc]
    assert options.replace(max_size=4) == PoolOptions(max_size=4)
    assert options.replace() is options
    assert PoolOptions(statement_timeout=None).statement_timeout is None


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"max_size": 0}, "max_size must be a positive integer"),
        ({"min_size": 0}, "min_size must be a positive integer"),
        ({"max_size": 2.5}, "max_size must be a positive integer"),
        ({"max_size": True}, "max_size must be a positive integer"),
        ({"min_size": 5, "max_size": 4}, "min_size .5. must not be more than max_size .4."),
        ({"connect_timeout": 0}, "connect_timeout must be a positive number of seconds"),
        ({"checkout_timeout": -1.0}, "checkout_timeout must be a positive number"),
        ({"statement_timeout": 0}, "statement_timeout must be a positive number"),
        ({"connect_timeout": None}, "connect_timeout must be a positive number"),
        ({"schema": "a\x00b"}, "schema must be a name without NUL"),
    ],
)
def test_pool_options_refuse_bad_values(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        PoolOptions(**changes)


def test_every_postgres_part_takes_the_same_options() -> None:

    url = "postgresql://nobody@127.0.0.1:1/none"
    pool = PoolOptions(schema="tenant", max_size=6, connect_timeout=2.0)
    databases = [
        PostgresBackend(url, pool=pool).store.database,
        PostgresBackend(url, pool=pool).registry.database,
        PostgresBackend(url, pool=pool).inbox.database,
        PostgresDatabase(url, pool),
    ]
    assert {db.options for db in databases} == {pool}
    assert PostgresBackend(url, pool=pool, max_size=2).leases.database.options == pool.replace(
        max_size=2
    )


@requires_postgres
async def test_a_postgres_backend_holds_one_pool_for_every_part(pg_schema: str) -> None:  # noqa: F811
    pool = PoolOptions(schema=pg_schema, max_size=3)
    name = f"taskloom-{pg_schema}"  # how the server tells this backend's connections
    backend = open_backend(f"{PG_DSN}?application_name={name}", pool=pool)
    assert isinstance(backend, PostgresBackend)
    db = backend.database
    try:
        assert backend.options is pool
        assert backend.store.database is db
        assert backend.store.leases.database is db
        for part in (backend.registry, backend.inbox, backend.snapshots, backend.budgets):
            assert part is not None and part.database is db
        await backend.store.create(SessionMeta("s", "agent"))
        lease = await backend.leases.acquire("child:s", "me", 30.0)
        assert await backend.store.append("s", Entry("x"), fence=lease.fence) == 1
        assert backend.registry is not None and backend.inbox is not None
        assert await backend.registry.add("s", ACTIVITY, 30.0)
        assert await backend.inbox.push("s", NOTICE)
        assert backend.snapshots is not None
        await backend.snapshots.write("s", 1, "{}", fence=lease.fence)
        assert await backend.leases.renew(lease, 30.0)
        # Everything went through one pool, never past its size.
        with psycopg.connect(PG_DSN) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchone()
        assert row is not None and 0 < row[0] <= 3
    finally:
        await backend.close()


# ---------------------------------------------------------------- finding the backend


async def test_background_service_uses_the_stores_backend(tmp_path: Path) -> None:
    store = SQLiteBackend(tmp_path / "t.db").store
    service = BackgroundService.for_store(store)
    assert service.registry is store.backend.registry
    assert service.inbox is store.backend.inbox
    assert getattr(service.registry, "database", None) is store.database
    await service.close()
    await store.close()


async def test_runtime_on_a_store_shares_its_backend(tmp_path: Path) -> None:
    runtime = Runtime(store=f"sqlite:///{tmp_path}/rt.db")
    try:
        store = runtime.store
        assert isinstance(store, SQLiteStore)
        assert runtime.background.registry is store.backend.registry
    finally:
        await runtime.close()


class _ToyStore:
    """A user's own store: a `MemoryStore`'s behaviour, its own `Backend`."""

    def __init__(self, capabilities: set[Capability]) -> None:
        self._inner = MemoryStore()
        self.leases = self._inner.leases
        self.backend = Backend(self, capabilities=capabilities)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_store_of_your_own_gets_memory_background_work() -> None:
    plain = BackgroundService.for_store(object())
    assert isinstance(plain.registry, MemoryActivityRegistry)
    toy = _ToyStore({Capability.FENCED_APPENDS})
    service = BackgroundService.for_store(toy)
    assert isinstance(service.registry, MemoryActivityRegistry)
    assert isinstance(service.inbox, MemoryNoticeInbox)
    assert toy.backend.snapshots is None and snapshots_for(toy) is None  # type: ignore[arg-type]


def test_a_backend_refuses_an_unknown_capability() -> None:
    with pytest.raises(ValueError):
        Backend(MemoryStore(), capabilities={"time_travel"})


# ---------------------------------------------------------------- capability-driven skips


class TestToyBackendStoreContract(StoreContract):
    """The store contract on a backend that does not span processes: the
    reopen test would fail here (a fresh memory store sees nothing), so it
    passing as skipped proves the capability gate."""

    @pytest.fixture
    def store(self) -> SessionStore:
        return _ToyStore({Capability.FENCED_APPENDS})  # type: ignore[return-value]

    @pytest.fixture
    def reopen(self) -> Callable[[], SessionStore]:
        return lambda: _ToyStore({Capability.FENCED_APPENDS})  # type: ignore[return-value]


class _NeedsEverything:
    @requires(Capability.SNAPSHOTS, Capability.SPANS_PROCESSES)
    def test_marked(self) -> None: ...


def test_requires_marks_what_a_test_needs() -> None:
    from taskloom.testing.capabilities import missing

    needed = _NeedsEverything.test_marked.__taskloom_requires__  # type: ignore[attr-defined]
    assert needed == {Capability.SNAPSHOTS, Capability.SPANS_PROCESSES}
    assert missing(needed, {"snapshots"}) == ["spans_processes"]
    assert missing(needed, Capability) == []


@pytest.mark.slow
def test_undeclared_capabilities_skip_with_the_reason() -> None:
    test = f"{__file__}::TestToyBackendStoreContract"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs", test],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    skipped = [line for line in out.splitlines() if " SKIPPED" in line and "::" in line]
    assert len(skipped) == 1, out
    assert "test_reopened_store_sees_everything" in skipped[0]
    reasons = [line for line in out.splitlines() if line.startswith("SKIPPED [")]
    assert len(reasons) == 1 and "the backend does not declare spans_processes" in reasons[0]
    # Fencing is declared: those tests ran.
    assert "test_stale_fence_is_refused_and_writes_nothing PASSED" in out
