"""Tree budgets in the `taskloom_budgets` table of a PostgreSQL backend."""

from __future__ import annotations

from .._sql import Migration, SQLBudgets
from ._database import PostgresDatabase

POSTGRES_BUDGET_MIGRATIONS: tuple[Migration, ...] = (
    (
        """CREATE TABLE IF NOT EXISTS {budgets} (
            tree_id text PRIMARY KEY,
            tokens_limit bigint,
            usd_limit bigint,
            tokens_used bigint NOT NULL DEFAULT 0,
            usd_used bigint NOT NULL DEFAULT 0,
            created_at timestamptz NOT NULL DEFAULT now()
        )""",
    ),
)


class PostgresBudgets(SQLBudgets):
    """A `BudgetLedger` on a PostgreSQL database: a charge is one UPDATE whose
    condition the row lock makes atomic against every other process."""

    MIGRATIONS = POSTGRES_BUDGET_MIGRATIONS

    def __init__(self, database: PostgresDatabase) -> None:
        super().__init__(database, database.table("budgets"))
