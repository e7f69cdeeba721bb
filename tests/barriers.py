"""Waiting for what happened, not for the clock: a counter and a barrier for tests.

A test that sleeps for "long enough" is slow when it passes and flaky on a
busy machine; one that compares elapsed seconds to a threshold is both.
These wait for the event itself, bounded by a generous timeout, so that a
regression fails the test (with a message saying what never happened)
instead of hanging it::

    from barriers import Overlap, Tally
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["GENEROUS", "Overlap", "Tally", "set_within"]

GENEROUS = 10.0
"""Seconds to wait for something that takes milliseconds when the code works."""


async def set_within(event: asyncio.Event, timeout: float = GENEROUS) -> bool:
    """Whether `event` is set within `timeout` seconds.

    Never raises TimeoutError: code under test that treats a TimeoutError of
    its own specially (a tool's timeout) must not see the test's.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


class Tally:
    """A count the code under test raises (`add`) and a test waits on (`reached`)."""

    def __init__(self) -> None:
        self.count = 0
        self._waiters: list[tuple[int, asyncio.Event]] = []

    def add(self, n: int = 1) -> int:
        """Count `n` more and wake whoever waits for a count reached now."""
        self.count += n
        for target, event in self._waiters:
            if self.count >= target:
                event.set()
        return self.count

    async def reached(self, n: int, timeout: float = GENEROUS) -> None:
        """Return once the count is at least `n`; AssertionError after `timeout` seconds."""
        if self.count >= n:
            return
        waiter = (n, asyncio.Event())
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter[1].wait()
        except TimeoutError:
            raise AssertionError(
                f"the count stayed at {self.count}; it never reached {n}"
            ) from None
        finally:
            self._waiters.remove(waiter)


class Overlap:
    """Proves that `n` calls run at the same time.

    Each call runs its body in `async with overlap.inside(label):`, which
    records `enter:label`, waits until all `n` calls have entered, and
    records `leave:label` when the body ends. Calls that run one after
    another never all get in: the first gives up waiting after `timeout`,
    later ones no longer wait, and `overlapped` is False.
    """

    def __init__(self, n: int, timeout: float = GENEROUS) -> None:
        self.n = n
        self.timeout = timeout
        self.log: list[str] = []
        self._entered = Tally()
        self._gave_up = False

    @contextlib.asynccontextmanager
    async def inside(self, label: str) -> AsyncIterator[None]:
        """Enter, wait for the others, run the body, leave (see the class docstring)."""
        self.log.append(f"enter:{label}")
        self._entered.add()
        if not self._gave_up:
            try:
                await self._entered.reached(self.n, self.timeout)
            except AssertionError:
                self._gave_up = True
        try:
            yield
        finally:
            self.log.append(f"leave:{label}")

    @property
    def overlapped(self) -> bool:
        """Whether all `n` calls entered before any of them left."""
        entered = [i for i, step in enumerate(self.log) if step.startswith("enter:")]
        left = [i for i, step in enumerate(self.log) if step.startswith("leave:")]
        return len(entered) == self.n and all(i < j for i in entered for j in left)
