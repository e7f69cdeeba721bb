"""The contract suite every `BudgetLedger` (a backend's `budgets`) must pass.

Subclass it in a test module (name the subclass `Test...`) and provide the
ledger as the `ledger` fixture::

    import functools, pytest
    from taskloom.testing.budget_contract import BudgetLedgerContract

    class TestMyLedger(BudgetLedgerContract):
        @pytest.fixture
        async def ledger(self, tmp_path):
            backend = MyBackend(tmp_path / "db")
            yield backend.budgets
            await backend.close()

        # Optional: a picklable factory of an equivalent backend (or ledger)
        # on the same data enables the check that races several processes.
        @pytest.fixture
        def ledger_factory(self, tmp_path):
            return functools.partial(MyBackend, tmp_path / "db")

Every test uses a fresh tree id (`tree` fixture). The suite needs the
backend to declare `Capability.TREE_BUDGETS`, and its multi-process check
`Capability.SPANS_PROCESSES`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .._extras import needs_extra
from ..backends import BudgetLedger, Capability
from ..results import NANO
from ._processes import race
from .capabilities import CapabilityGate, requires

with needs_extra("taskloom.testing's contract suites"):
    import pytest

__all__ = ["BudgetLedgerContract", "charge_from_processes"]


async def _charging(
    made: Any, tree: str, job: tuple[int, int], ready: Callable[[], Awaitable[None]]
) -> list[int]:
    times, tokens = job
    ledger = getattr(made, "budgets", made)
    await ready()
    return [sum([await ledger.charge(tree, tokens, 0) is not None for _ in range(times)])]


def charge_from_processes(
    factory: Callable[[], Any], tree: str, processes: int, times: int, tokens: int
) -> list[int]:
    """How many of `times` charges of `tokens` each took, per process, when
    `processes` processes (started with "spawn") charge the tree at once."""
    return [took for [took] in race(_charging, factory, tree, [(times, tokens)] * processes)]


class BudgetLedgerContract(CapabilityGate):
    """The `BudgetLedger` contract; needs a `ledger` fixture."""

    REQUIRES = frozenset({Capability.TREE_BUDGETS})

    @pytest.fixture
    def tree(self) -> str:
        return f"tree-{uuid.uuid4().hex}"

    @pytest.fixture
    def ledger_factory(self) -> Callable[[], Any] | None:
        return None

    async def test_a_charge_within_the_ceilings_takes_and_says_what_is_left(
        self, ledger: BudgetLedger, tree: str
    ) -> None:
        await ledger.open(tree, 1000, 2 * NANO)
        left = await ledger.charge(tree, 300, NANO // 2)
        assert left is not None and (left.tokens, left.nano_usd) == (700, 3 * NANO // 2)
        assert await ledger.left(tree) == left

    async def test_a_charge_past_either_ceiling_takes_nothing(
        self, ledger: BudgetLedger, tree: str
    ) -> None:
        await ledger.open(tree, 1000, NANO)
        assert await ledger.charge(tree, 1001, 0) is None
        assert await ledger.charge(tree, 1, NANO + 1) is None
        left = await ledger.left(tree)
        assert left is not None and (left.tokens, left.nano_usd) == (1000, NANO)
        assert await ledger.charge(tree, 1000, NANO) is not None  # exactly to the ceiling
        assert await ledger.charge(tree, 1, 0) is None

    async def test_no_ceiling_means_no_limit_on_that_measure(
        self, ledger: BudgetLedger, tree: str
    ) -> None:
        await ledger.open(tree, None, NANO)
        left = await ledger.charge(tree, 10**12, 0)
        assert left is not None and left.tokens is None and left.nano_usd == NANO

    async def test_a_refund_gives_back_and_opening_again_keeps_the_ceilings(
        self, ledger: BudgetLedger, tree: str
    ) -> None:
        await ledger.open(tree, 500, None)
        await ledger.charge(tree, 400, 0)
        await ledger.refund(tree, 250, 0)
        await ledger.open(tree, 10, None)  # already open: nothing changes
        left = await ledger.left(tree)
        assert left is not None and left.tokens == 350

    async def test_a_refund_never_takes_back_more_than_was_charged(
        self, ledger: BudgetLedger, tree: str
    ) -> None:
        await ledger.open(tree, 1000, NANO)
        await ledger.charge(tree, 100, 10)
        await ledger.refund(tree, 1_000_000, 2 * NANO)  # a provider's negative usage, say
        left = await ledger.left(tree)
        assert left is not None and (left.tokens, left.nano_usd) == (1000, NANO)
        assert await ledger.charge(tree, 1001, 0) is None  # the ceiling stands

    async def test_an_unknown_tree_takes_no_charge(self, ledger: BudgetLedger, tree: str) -> None:
        assert await ledger.charge(tree, 1, 0) is None
        assert await ledger.left(tree) is None

    async def test_concurrent_charges_never_pass_the_ceiling(
        self, ledger: BudgetLedger, tree: str
    ) -> None:
        await ledger.open(tree, 1000, None)
        took = await asyncio.gather(*(ledger.charge(tree, 300, 0) for _ in range(10)))
        assert sum(t is not None for t in took) == 3

    @requires(Capability.SPANS_PROCESSES)
    async def test_processes_charging_at_once_never_pass_the_ceiling(
        self, ledger: BudgetLedger, tree: str, ledger_factory: Callable[[], Any] | None
    ) -> None:
        if ledger_factory is None:
            pytest.skip("no ledger_factory: the multi-process check needs one")
        await ledger.open(tree, 10_000, None)
        took = await asyncio.to_thread(charge_from_processes, ledger_factory, tree, 4, 40, 100)
        print(f"charges taken per process: {took} (100 fit)")
        assert sum(took) == 100  # every charge that fit, and not one more
        left = await ledger.left(tree)
        assert left is not None and left.tokens == 0
