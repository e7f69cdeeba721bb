"""Stores refuse ids they could not keep alike, and name a corrupt entry when they meet one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from store_backends import Backend, backend  # noqa: F401 (fixture)
from taskloom import Agent, Runtime
from taskloom.backends import (
    MAX_SESSION_ID_LENGTH,
    PostgresBackend,
    SessionMeta,
    SQLiteBackend,
    check_session_id,
)
from taskloom.backends.postgres import PostgresStore
from taskloom.backends.sqlite import SQLiteStore
from taskloom.entries import Entry
from taskloom.errors import ConfigurationError, CorruptEntry, StoreError
from taskloom.models import ScriptedModel

BAD_IDS = ["", " \n", "a\nb", "tab\there", "nul\x00", "esc\x1b[31m", "x" * 256, "\ud800", "del\x7f"]
GOOD_IDS = ["a", "session-1", "x" * MAX_SESSION_ID_LENGTH, "spaces are fine", "émoji 😀", "a/b:c"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_check_session_id_refuses_with_one_message(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="session id must be"):
        check_session_id(bad)


def test_check_session_id_refuses_non_strings() -> None:
    with pytest.raises(ConfigurationError, match="session id must be"):
        check_session_id(42)  # type: ignore[arg-type]


async def test_every_store_refuses_the_same_ids(backend: Backend) -> None:  # noqa: F811
    store = backend.open()
    for bad in BAD_IDS:
        with pytest.raises(ConfigurationError, match="session id must be"):
            await store.create(SessionMeta(bad, "agent"))
    for good in GOOD_IDS:
        created = await store.create(SessionMeta(good, "agent"))
        assert (await store.get(good)).id == created.id == good
        await store.append(good, Entry("note", {"n": 1}))
        assert [e.data["n"] for e in await store.load(good)] == [1]
    runtime = Runtime(store=store)
    agent = Agent("a", ScriptedModel([]))
    with pytest.raises(ConfigurationError, match="session id must be"):
        await runtime.create_session(agent, session_id="a\nb")


async def test_create_session_refuses_an_empty_id() -> None:
    with pytest.raises(ConfigurationError, match="session id must be"):
        await Runtime().create_session(Agent("a", ScriptedModel([])), session_id="")


# -- corrupt entries ---------------------------------------------------------------


async def _three_entries(store: SQLiteStore | PostgresStore) -> None:
    await store.create(SessionMeta("s1", "agent"))
    for n in range(3):
        await store.append("s1", Entry("note", {"n": n}))


def _assert_names_session_and_position(exc: CorruptEntry) -> None:
    assert isinstance(exc, StoreError)
    assert "'s1'" in str(exc) and "position 2" in str(exc)


@pytest.mark.parametrize("data", ["{not json", "", '{"a": 1', "[1, 2]", '"text"', "null"])
async def test_sqlite_corrupt_entry_names_session_and_position(tmp_path: Path, data: str) -> None:
    store = SQLiteBackend(tmp_path / "t.db").store
    try:
        await _three_entries(store)
        with sqlite3.connect(tmp_path / "t.db") as conn:
            conn.execute(
                "UPDATE taskloom_entries SET data = ? WHERE session_id = 's1' AND position = 2",
                (data,),
            )
        with pytest.raises(CorruptEntry) as info:
            await store.load("s1")
        _assert_names_session_and_position(info.value)
        assert [e.data["n"] for e in await store.load("s1", after=2)] == [2]
    finally:
        await store.close()


@pytest.mark.postgres
@requires_postgres
@pytest.mark.parametrize("data", ["[1, 2]", '"text"', "null", "[" * 5000 + "]" * 5000])
async def test_postgres_corrupt_entry_names_session_and_position(
    pg_schema: str,  # noqa: F811
    data: str,
) -> None:
    store = PostgresBackend(PG_DSN, schema=pg_schema, max_size=2).store
    try:
        await _three_entries(store)
        # The json column refuses text that is not JSON at all; what it does
        # take and Python cannot use is valid JSON of the wrong shape or depth.
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{pg_schema}".taskloom_entries SET data = %s::json '
                "WHERE session_id = 's1' AND position = 2",
                (data,),
            )
        with pytest.raises(CorruptEntry) as info:
            await store.load("s1")
        _assert_names_session_and_position(info.value)
        assert [e.data["n"] for e in await store.load("s1", after=2)] == [2]
    finally:
        await store.close()


async def test_sqlite_keeps_every_string_as_ascii_json(tmp_path: Path) -> None:
    # Escaped, a lone surrogate and a NUL fit a column of UTF-8 text.
    store = SQLiteBackend(tmp_path / "t.db").store
    try:
        await store.create(SessionMeta("s1", "agent"))
        await store.append("s1", Entry("note", {"s": "\ud800\x00"}))
        with sqlite3.connect(tmp_path / "t.db") as conn:
            (stored,) = conn.execute("SELECT data FROM taskloom_entries").fetchone()
        assert stored == '{"s":"\\ud800\\u0000"}'
        assert [e.data for e in await store.load("s1")] == [{"s": "\ud800\x00"}]
    finally:
        await store.close()


async def test_an_entry_without_its_kinds_shape_names_the_session_and_position() -> None:
    from taskloom import Agent, Runtime
    from taskloom.entries import Entry
    from taskloom.errors import CorruptEntry
    from taskloom.models import ScriptedModel

    runtime = Runtime()
    session = await runtime.create_session(Agent("c", ScriptedModel(["hi"])), session_id="s-bad")
    await runtime.store.append("s-bad", Entry("approval_decision", {"approved": True}))
    with pytest.raises(CorruptEntry, match=r"session 's-bad': entry 1 \(approval_decision\)"):
        await session.journal.sync()
