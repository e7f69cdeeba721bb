"""PostgreSQL for tests: where it is, whether to skip, and a private schema per test.

`PG_DSN` is `$TASKLOOM_TEST_POSTGRES` or the local server (127.0.0.1:5432,
database `test`, trust auth). `requires_postgres` skips a test when the
server is unreachable, except under `CI=true`, where the test runs and fails,
because CI must never pass by skipping. The `pg_schema` fixture gives each
test a fresh, uniquely named schema and drops it afterwards, so tests (and
engineers running them side by side) never see each other's tables::

    from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (fixture)

    @requires_postgres
    async def test_it(pg_schema):
        store = PostgresBackend(PG_DSN, schema=pg_schema).store

A test that must hold on both durable stores takes the `store_url` fixture
(registered for every test by conftest.py), a `(url, schema)` pair for SQLite
and for PostgreSQL (which skips like the rest), and opens it with
`open_durable(url, schema)`; a child process given the pair opens the same
database.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskloom.backends import SessionStore, open_backend

__all__ = [
    "IN_CI",
    "PG_DSN",
    "open_durable",
    "pg_schema",
    "postgres_reachable",
    "requires_postgres",
    "store_url",
]

PG_DSN = os.environ.get("TASKLOOM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() == "true"


@functools.cache
def postgres_reachable() -> str | None:
    """None when the server answers; otherwise why it could not be reached."""
    import psycopg

    try:
        with psycopg.connect(PG_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return None


def _skip_reason() -> str:
    problem = postgres_reachable()
    return f"PostgreSQL unreachable at {PG_DSN} ({problem}); set CI=true to make this a failure"


requires_postgres = pytest.mark.skipif(
    not IN_CI and postgres_reachable() is not None, reason=_skip_reason()
)
"""Skip unless PostgreSQL answers; under CI=true never skip (the test then fails)."""


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh schema name for this test, created now and dropped (with its tables) after."""
    import psycopg

    problem = postgres_reachable()
    if problem is not None:
        message = f"PostgreSQL unreachable at {PG_DSN}: {problem}"
        if IN_CI:
            pytest.fail(message + " (CI=true: PostgreSQL tests must run)")
        pytest.skip(message)
    schema = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=requires_postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`(url, schema)` of a durable store: a SQLite file in `tmp_path` (schema `"-"`),
    or PostgreSQL with a private schema (the test module must import `pg_schema`)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'taskloom.db'}", "-"
    else:
        yield PG_DSN, request.getfixturevalue("pg_schema")


def open_durable(url: str, schema: str, **options: Any) -> SessionStore:
    """The store at a `store_url` pair; `options` go to `open_backend`."""
    if schema != "-":
        options["schema"] = schema
    return open_backend(url, **options).store
