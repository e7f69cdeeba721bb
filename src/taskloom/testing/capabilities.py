"""Capability flags in the contract suites: a test that needs a capability
carries `@requires(...)` and is skipped, with the reason, on a backend whose
`capabilities` fixture does not declare it (all flags unless overridden)::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def capabilities(self):
            return {Capability.FENCED_APPENDS}   # one process only, no snapshots
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from .._extras import needs_extra
from ..backends import Capability

with needs_extra("taskloom.testing's contract suites"):
    import pytest

__all__ = ["ALL_CAPABILITIES", "CapabilityGate", "missing", "requires"]

F = TypeVar("F", bound=Callable[..., object])

ALL_CAPABILITIES: frozenset[Capability] = frozenset(Capability)

_ATTRIBUTE = "__taskloom_requires__"


def requires(*capabilities: Capability) -> Callable[[F], F]:
    """Mark a contract test as needing `capabilities` (see the module docstring)."""

    def mark(test: F) -> F:
        setattr(test, _ATTRIBUTE, frozenset(capabilities))
        return test

    return mark


def missing(needed: Iterable[Capability], declared: Iterable[Capability | str]) -> list[str]:
    """The capabilities in `needed` that `declared` lacks, by name, sorted."""
    have = {Capability(flag) for flag in declared}
    return sorted(flag.value for flag in needed if flag not in have)


class CapabilityGate:
    """The `capabilities` fixture and the skip of tests a backend cannot run;
    `REQUIRES` is what every test of the suite needs, `@requires` adds per test."""

    REQUIRES: frozenset[Capability] = frozenset()

    @pytest.fixture
    def capabilities(self) -> Iterable[Capability | str]:
        """What the backend under test declares; override to declare less."""
        return ALL_CAPABILITIES

    @pytest.fixture(autouse=True)
    def _skip_undeclared(
        self, request: pytest.FixtureRequest, capabilities: Iterable[Capability | str]
    ) -> None:
        needed = self.REQUIRES | getattr(request.function, _ATTRIBUTE, frozenset())
        lacking = missing(needed, capabilities)
        if lacking:
            pytest.skip(f"the backend does not declare {', '.join(lacking)}")
