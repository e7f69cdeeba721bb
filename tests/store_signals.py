"""A memory store that tells a test what happened to it, so the test can wait for it.

`SignalingStore` counts the runs whose end it wrote and, per lease key, the
attempts to take the lease and its releases; each count is a `Tally` a test
awaits (`await store.leases.released[key].reached(2)`) instead of sleeping
until a run has probably ended::

    from store_signals import SignalingStore
"""

from __future__ import annotations

from collections import defaultdict

from barriers import Tally
from taskloom.backends import Clock, Fence, Lease, system_clock
from taskloom.backends.memory import MemoryLeases, MemoryStore
from taskloom.entries import Entry, EntryKind

__all__ = ["SignalingLeases", "SignalingStore"]


class SignalingLeases(MemoryLeases):
    """Memory leases counting, per key, the attempts to acquire and the releases."""

    def __init__(self, clock: Clock = system_clock) -> None:
        super().__init__(clock)
        self.attempts: defaultdict[str, Tally] = defaultdict(Tally)
        self.released: defaultdict[str, Tally] = defaultdict(Tally)

    async def acquire(self, key: str, holder: str, ttl: float) -> Lease | None:
        lease = await super().acquire(key, holder, ttl)
        self.attempts[key].add()
        return lease

    async def release(self, lease: Lease) -> None:
        await super().release(lease)
        self.released[lease.key].add()


class SignalingStore(MemoryStore):
    """A `MemoryStore` with `SignalingLeases` that also counts the runs it saw end."""

    def __init__(self, *, clock: Clock = system_clock) -> None:
        super().__init__(clock=clock)
        self.leases: SignalingLeases = SignalingLeases(clock)
        self.runs_finished = Tally()

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        position = await super().append(session_id, entry, fence=fence)
        if entry.kind == EntryKind.RUN_FINISHED:
            self.runs_finished.add()
        return position
