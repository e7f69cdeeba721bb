"""Tree budgets in the `taskloom_budgets` table of a SQLite backend."""

from __future__ import annotations

from ...results import BudgetLeft
from .._sql import Migration
from ._database import SQLiteDatabase

__all__ = ["SQLITE_BUDGET_MIGRATIONS", "SQLiteBudgets"]

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

_LEFT = "tokens_limit - tokens_used, usd_limit - usd_used"
_CHARGE = f"""
    UPDATE taskloom_budgets SET tokens_used = tokens_used + :t, usd_used = usd_used + :u
    WHERE tree_id = :id
      AND (tokens_limit IS NULL OR tokens_used + :t <= tokens_limit)
      AND (usd_limit IS NULL OR usd_used + :u <= usd_limit)
    RETURNING {_LEFT}"""


def _row(row: tuple[int | None, int | None] | None) -> BudgetLeft | None:
    return None if row is None else BudgetLeft(row[0], row[1])


class SQLiteBudgets:
    """A `BudgetLedger` on a SQLite database: a charge is one UPDATE, and
    SQLite's one writer at a time makes its condition atomic."""

    def __init__(self, database: SQLiteDatabase) -> None:
        self.database = self._db = database
        database.require("budgets", SQLITE_BUDGET_MIGRATIONS)

    async def open(self, tree_id: str, tokens: int | None, nano_usd: int | None) -> None:
        await self._db.execute(
            "INSERT INTO taskloom_budgets (tree_id, tokens_limit, usd_limit) VALUES (?, ?, ?)"
            " ON CONFLICT (tree_id) DO NOTHING",
            (tree_id, tokens, nano_usd),
        )

    async def charge(self, tree_id: str, tokens: int, nano_usd: int) -> BudgetLeft | None:
        params = {"id": tree_id, "t": tokens, "u": nano_usd}
        # Every row is read: an UPDATE ... RETURNING stepped only once stays
        # open, and with it (in autocommit) the write transaction.
        rows = await self._db.fetchall(_CHARGE, params)
        return _row(rows[0] if rows else None)

    async def refund(self, tree_id: str, tokens: int, nano_usd: int) -> None:
        # Never below nothing spent: a refund gives back at most what was charged.
        await self._db.execute(
            "UPDATE taskloom_budgets SET tokens_used = MAX(tokens_used - ?, 0),"
            " usd_used = MAX(usd_used - ?, 0) WHERE tree_id = ?",
            (tokens, nano_usd, tree_id),
        )

    async def left(self, tree_id: str) -> BudgetLeft | None:
        sql = f"SELECT {_LEFT} FROM taskloom_budgets WHERE tree_id = ?"
        return _row(await self._db.fetchone(sql, (tree_id,)))
