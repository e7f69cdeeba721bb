"""The budget ledger contract on every backend taskloom ships."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import BudgetLedger, MemoryBackend, PostgresBackend, SQLiteBackend
from taskloom.backends.memory import MEMORY_CAPABILITIES
from taskloom.testing.budget_contract import BudgetLedgerContract


class TestMemoryBudgets(BudgetLedgerContract):
    @pytest.fixture
    def capabilities(self) -> Any:
        return MEMORY_CAPABILITIES

    @pytest.fixture
    def ledger(self) -> BudgetLedger:
        return MemoryBackend().budgets


class TestSQLiteBudgets(BudgetLedgerContract):
    @pytest.fixture
    async def ledger(self, tmp_path: Path) -> AsyncIterator[BudgetLedger]:
        backend = SQLiteBackend(tmp_path / "b.db")
        yield backend.budgets
        await backend.close()

    @pytest.fixture
    def ledger_factory(self, tmp_path: Path) -> Callable[[], Any]:
        return functools.partial(SQLiteBackend, tmp_path / "b.db")


@requires_postgres
class TestPostgresBudgets(BudgetLedgerContract):
    @pytest.fixture
    async def ledger(self, pg_schema: str) -> AsyncIterator[BudgetLedger]:  # noqa: F811
        backend = PostgresBackend(PG_DSN, schema=pg_schema)
        yield backend.budgets
        await backend.close()

    @pytest.fixture
    def ledger_factory(self, pg_schema: str) -> Callable[[], Any]:  # noqa: F811
        return functools.partial(PostgresBackend, PG_DSN, schema=pg_schema)
