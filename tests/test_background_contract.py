"""The background contract suites on memory, SQLite and PostgreSQL, plus the values."""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from taskloom.backends import (
    BackgroundActivity,
    BackgroundNotice,
    NoticeStatus,
    PostgresBackend,
    SQLiteBackend,
)
from taskloom.backends.memory import MemoryActivityRegistry, MemoryNoticeInbox
from taskloom.backends.postgres import PostgresActivityRegistry, PostgresNoticeInbox
from taskloom.backends.sqlite import SQLiteActivityRegistry, SQLiteNoticeInbox
from taskloom.testing.background_contract import ActivityRegistryContract, NoticeInboxContract
from taskloom.testing.clock import FakeClock

PG_DSN = "host=127.0.0.1 port=5432 dbname=test user=postgres"


@pytest.fixture(scope="module")
def pg_schema() -> Iterator[str]:
    """A schema of its own for this module's run, dropped afterwards."""
    try:
        psycopg.connect(PG_DSN, connect_timeout=3).close()
    except psycopg.Error as exc:
        reason = f"PostgreSQL unreachable at 127.0.0.1:5432 ({exc})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires it")
        pytest.skip(reason)
    schema = f"taskloom_bg_{uuid.uuid4().hex[:10]}"
    yield schema
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# ---------------------------------------------------------------- values


def test_activity_round_trips_through_json() -> None:
    act = BackgroundActivity(
        "a1", "shell", "pytest -q", 1_700_000_000.5, run_id="r1", metadata={"pid": 42}
    )
    assert BackgroundActivity.from_dict(json.loads(json.dumps(act.to_dict()))) == act
    minimal = BackgroundActivity.from_dict({"id": "a2", "kind": "shell"})
    assert (minimal.description, minimal.run_id, dict(minimal.metadata)) == ("", None, {})


def test_notice_round_trips_through_json() -> None:
    notice = BackgroundNotice(
        "n1", "a1", "shell", "exit 1", NoticeStatus.FAILED, 1_700_000_001.0, {"code": 1}
    )
    assert BackgroundNotice.from_dict(json.loads(json.dumps(notice.to_dict()))) == notice
    minimal = BackgroundNotice.from_dict({"id": "n2", "activity_id": "a1", "kind": "shell"})
    assert (minimal.text, minimal.status, dict(minimal.data)) == ("", NoticeStatus.DONE, {})


def test_values_are_frozen_and_hashable() -> None:
    act = BackgroundActivity("a1", "shell", "x", 0.0, metadata={"k": 1})
    with pytest.raises(AttributeError):
        act.kind = "other"  # type: ignore[misc]
    assert len({act, BackgroundActivity("a1", "shell", "x", 0.0, metadata={"k": 1})}) == 1


# ---------------------------------------------------------------- memory


class TestMemoryActivityRegistry(ActivityRegistryContract):
    @pytest.fixture
    def registry(self, clock: FakeClock) -> MemoryActivityRegistry:
        return MemoryActivityRegistry(clock=clock)


class TestMemoryNoticeInbox(NoticeInboxContract):
    @pytest.fixture
    def inbox(self) -> MemoryNoticeInbox:
        return MemoryNoticeInbox()


# ---------------------------------------------------------------- SQLite


class TestSQLiteActivityRegistry(ActivityRegistryContract):
    @pytest.fixture
    async def registry(
        self, clock: FakeClock, tmp_path: Path
    ) -> AsyncIterator[SQLiteActivityRegistry]:
        registry_backend = SQLiteBackend(tmp_path / "bg.db", clock=clock)
        registry = registry_backend.registry
        yield registry
        await registry_backend.close()

    @pytest.fixture
    def registry_factory(self, tmp_path: Path) -> Callable[[], SQLiteActivityRegistry]:
        return functools.partial(SQLiteBackend, tmp_path / "bg.db")

    async def test_data_outlives_the_connection(self, clock: FakeClock, tmp_path: Path) -> None:
        first_backend = SQLiteBackend(tmp_path / "bg.db", clock=clock)
        first = first_backend.registry
        act = BackgroundActivity("a1", "shell", "x", 1.0)
        assert await first.add("s", act, 30.0)
        await first_backend.close()
        second_backend = SQLiteBackend(tmp_path / "bg.db", clock=clock)
        second = second_backend.registry
        try:
            assert await second.list("s") == [act]
        finally:
            await second_backend.close()


class TestSQLiteNoticeInbox(NoticeInboxContract):
    @pytest.fixture
    async def inbox(self, tmp_path: Path) -> AsyncIterator[SQLiteNoticeInbox]:
        inbox_backend = SQLiteBackend(tmp_path / "bg.db")
        inbox = inbox_backend.inbox
        yield inbox
        await inbox_backend.close()

    @pytest.fixture
    def inbox_factory(self, tmp_path: Path) -> Callable[[], SQLiteNoticeInbox]:
        return functools.partial(SQLiteBackend, tmp_path / "bg.db")


# ---------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
class TestPostgresActivityRegistry(ActivityRegistryContract):
    @pytest.fixture
    async def registry(
        self, clock: FakeClock, pg_schema: str
    ) -> AsyncIterator[PostgresActivityRegistry]:
        registry_backend = PostgresBackend(PG_DSN, schema=pg_schema, clock=clock)
        registry = registry_backend.registry
        yield registry
        await registry_backend.close()

    @pytest.fixture
    def registry_factory(self, pg_schema: str) -> Callable[[], PostgresActivityRegistry]:
        return functools.partial(PostgresBackend, PG_DSN, schema=pg_schema)


@pytest.mark.postgres
class TestPostgresNoticeInbox(NoticeInboxContract):
    @pytest.fixture
    async def inbox(self, pg_schema: str) -> AsyncIterator[PostgresNoticeInbox]:
        inbox_backend = PostgresBackend(PG_DSN, schema=pg_schema)
        inbox = inbox_backend.inbox
        yield inbox
        await inbox_backend.close()

    @pytest.fixture
    def inbox_factory(self, pg_schema: str) -> Callable[[], PostgresNoticeInbox]:
        return functools.partial(PostgresBackend, PG_DSN, schema=pg_schema)
