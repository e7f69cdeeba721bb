"""Leases with fencing tokens.

A lease gives one holder a key for a while. Every acquisition after the
previous lease lapsed (or was released) bumps the key's `generation`; writes
made on behalf of a holder carry `Fence(key, generation)` and a store refuses
them once a newer generation exists. A worker that stalls past its lease and
wakes up therefore cannot write over its successor.

Time comes from an injectable clock so tests never sleep for expiry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..stores.base import Fence

__all__ = ["Clock", "Lease", "Leases", "MemoryLeases", "system_clock"]

Clock = Callable[[], float]


def system_clock() -> float:
    """Wall-clock seconds (leases are shared between processes)."""
    return time.time()


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease: who holds `key`, under which generation, until when."""

    key: str
    holder: str
    generation: int
    expires_at: float

    @property
    def fence(self) -> Fence:
        """The fencing token every write of this holder carries."""
        from ..stores.base import Fence

        return Fence(self.key, self.generation)


@runtime_checkable
class Leases(Protocol):
    """Time-limited exclusive ownership of keys, with fencing generations."""

    async def acquire(self, key: str, holder: str, ttl: float) -> Lease | None:
        """Take the key if it is free or its lease lapsed; None if someone holds it."""
        ...

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a lease still held under the same generation; None if lost."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give the key up (no effect if the lease was already lost)."""
        ...

    async def current(self, key: str) -> Lease | None:
        """The live lease on the key, if any."""
        ...


class MemoryLeases:
    """In-process leases; `generation(key)` is read by `MemoryStore` for fencing."""

    def __init__(self, clock: Clock = system_clock) -> None:
        self._clock = clock
        self._leases: dict[str, Lease] = {}
        self._generations: dict[str, int] = {}

    def generation(self, key: str) -> int:
        """The newest generation ever granted for the key (0 if none)."""
        return self._generations.get(key, 0)

    async def acquire(self, key: str, holder: str, ttl: float) -> Lease | None:
        now = self._clock()
        held = self._leases.get(key)
        if held is not None and held.expires_at > now:
            return None
        generation = self._generations.get(key, 0) + 1
        self._generations[key] = generation
        lease = Lease(key, holder, generation, now + ttl)
        self._leases[key] = lease
        return lease

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        now = self._clock()
        held = self._leases.get(lease.key)
        if held is None or held.generation != lease.generation or held.expires_at <= now:
            return None
        renewed = Lease(lease.key, lease.holder, lease.generation, now + ttl)
        self._leases[lease.key] = renewed
        return renewed

    async def release(self, lease: Lease) -> None:
        held = self._leases.get(lease.key)
        if held is not None and held.generation == lease.generation:
            del self._leases[lease.key]

    async def current(self, key: str) -> Lease | None:
        held = self._leases.get(key)
        if held is None or held.expires_at <= self._clock():
            return None
        return held
