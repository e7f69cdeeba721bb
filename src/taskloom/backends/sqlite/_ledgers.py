"""Tree budgets in the `taskloom_budgets` table of a SQLite backend."""

from __future__ import annotations

from .._sql import Migration, SQLBudgets
from ._database import SQLiteDatabase

SQLITE_BUDGET_MIGRATIONS: tuple[Migration, ...] = (
    (
        """CREATE TABLE IF NOT EXISTS taskloom_budgets (
            tree_id TEXT PRIMARY KEY,
            tokens_limit INTEGER,
            usd_limit INTEGER,
            tokens_used INTEGER NOT NULL DEFAULT 0,
            usd_used INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
        )""",
    ),
)


class SQLiteBudgets(SQLBudgets):
    """A `BudgetLedger` on a SQLite database: a charge is one UPDATE, and
    SQLite's one writer at a time makes its condition atomic."""

    MIGRATIONS = SQLITE_BUDGET_MIGRATIONS
    GREATEST = "MAX"

    def __init__(self, database: SQLiteDatabase) -> None:
        super().__init__(database, "taskloom_budgets", colon_params=True)
