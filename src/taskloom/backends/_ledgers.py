"""Tree budget ledgers: one ceiling shared by a root run and every run under it.

A `BudgetLedger` keeps, per tree, its ceilings (tokens, and USD in
nano-dollars so sums are exact integers on every database) and what has
been charged against them. A run charges the worst case of a model request
before sending it (`charge`: all or nothing, refused when the sum would pass
a ceiling, atomic against every other process on the database) and gives
back the difference once the actual usage is known (`refund`). A request
whose outcome is never known (its process died) stays charged at its worst
case: the ceiling may be reached early, never passed by charges
(see `taskloom.loop.ports.TreeBudget` for what a run's usage may add).
"""

from __future__ import annotations

from .._run_controls import BudgetLedger
from ..results import BudgetLeft

__all__ = ["BudgetLedger", "MemoryBudgets"]


def _left(limit: int | None, used: int) -> int | None:
    return None if limit is None else limit - used


class MemoryBudgets:
    """A `BudgetLedger` in process memory (the memory backend's; one process)."""

    def __init__(self) -> None:
        # tree id -> [tokens limit, nano-usd limit, tokens used, nano-usd used]
        self._trees: dict[str, list[int | None]] = {}

    async def open(self, tree_id: str, tokens: int | None, nano_usd: int | None) -> None:
        self._trees.setdefault(tree_id, [tokens, nano_usd, 0, 0])

    async def charge(self, tree_id: str, tokens: int, nano_usd: int) -> BudgetLeft | None:
        row = self._trees.get(tree_id)
        if row is None:
            return None
        t_limit, u_limit, t_used, u_used = row
        assert isinstance(t_used, int) and isinstance(u_used, int)
        if t_limit is not None and t_used + tokens > t_limit:
            return None
        if u_limit is not None and u_used + nano_usd > u_limit:
            return None
        row[2], row[3] = t_used + tokens, u_used + nano_usd
        return BudgetLeft(_left(t_limit, t_used + tokens), _left(u_limit, u_used + nano_usd))

    async def refund(self, tree_id: str, tokens: int, nano_usd: int) -> None:
        row = self._trees.get(tree_id)
        if row is not None:
            assert isinstance(row[2], int) and isinstance(row[3], int)
            # Never below nothing spent: a refund gives back at most what was charged.
            row[2] = max(row[2] - tokens, 0)
            row[3] = max(row[3] - nano_usd, 0)

    async def left(self, tree_id: str) -> BudgetLeft | None:
        row = self._trees.get(tree_id)
        if row is None:
            return None
        t_limit, u_limit, t_used, u_used = row
        assert isinstance(t_used, int) and isinstance(u_used, int)
        return BudgetLeft(_left(t_limit, t_used), _left(u_limit, u_used))
