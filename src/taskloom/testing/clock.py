"""A clock for tests of anything leased: it moves only when told to."""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """`clock()` is now (seconds); `advance(s)` moves it forward and returns the new now.

    Pass it as `clock=` to stores, leases and registries so lease expiry is
    tested without sleeping.
    """

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move time forward by `seconds` and return the new now."""
        self.now += seconds
        return self.now
