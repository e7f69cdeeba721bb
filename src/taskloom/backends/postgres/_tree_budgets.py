"""Tree budgets in the `taskloom_budgets` table of a PostgreSQL backend."""

from __future__ import annotations

from ...results import BudgetLeft
from .._sql import Migration
from ._database import PostgresDatabase

__all__ = ["POSTGRES_BUDGET_MIGRATIONS", "PostgresBudgets"]

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

_LEFT = "tokens_limit - tokens_used, usd_limit - usd_used"


def _row(row: tuple[int | None, int | None] | None) -> BudgetLeft | None:
    return None if row is None else BudgetLeft(row[0], row[1])


class PostgresBudgets:
    """A `BudgetLedger` on a PostgreSQL database: a charge is one UPDATE whose
    condition the row lock makes atomic against every other process."""

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = self._db = db = database
        db.require("budgets", POSTGRES_BUDGET_MIGRATIONS)
        table = db.table("budgets")
        self._sql_open = (
            f"INSERT INTO {table} (tree_id, tokens_limit, usd_limit) VALUES (%s, %s, %s)"
            " ON CONFLICT (tree_id) DO NOTHING"
        )
        # Under READ COMMITTED a waiting UPDATE re-checks its WHERE against
        # the row its predecessor committed: two charges never both pass.
        self._sql_charge = f"""
            UPDATE {table} SET tokens_used = tokens_used + %(t)s, usd_used = usd_used + %(u)s
            WHERE tree_id = %(id)s
              AND (tokens_limit IS NULL OR tokens_used + %(t)s <= tokens_limit)
              AND (usd_limit IS NULL OR usd_used + %(u)s <= usd_limit)
            RETURNING {_LEFT}"""
        # Never below nothing spent: a refund gives back at most what was charged.
        self._sql_refund = (
            f"UPDATE {table} SET tokens_used = GREATEST(tokens_used - %s, 0),"
            " usd_used = GREATEST(usd_used - %s, 0) WHERE tree_id = %s"
        )
        self._sql_left = f"SELECT {_LEFT} FROM {table} WHERE tree_id = %s"

    async def open(self, tree_id: str, tokens: int | None, nano_usd: int | None) -> None:
        await self._db.execute(self._sql_open, (tree_id, tokens, nano_usd))

    async def charge(self, tree_id: str, tokens: int, nano_usd: int) -> BudgetLeft | None:
        params = {"id": tree_id, "t": tokens, "u": nano_usd}
        return _row(await self._db.fetchone(self._sql_charge, params))

    async def refund(self, tree_id: str, tokens: int, nano_usd: int) -> None:
        await self._db.execute(self._sql_refund, (tokens, nano_usd, tree_id))

    async def left(self, tree_id: str) -> BudgetLeft | None:
        return _row(await self._db.fetchone(self._sql_left, (tree_id,)))
