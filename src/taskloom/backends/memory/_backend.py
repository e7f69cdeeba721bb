"""`MemoryBackend`: every part in process memory; nothing outlives the process."""

from __future__ import annotations

import functools

from .._backend import Backend, Capability
from .._budgets import MemoryBudgets
from .._leases import Clock, system_clock
from ._background import MemoryActivityRegistry, MemoryNoticeInbox
from ._snapshots import MemorySnapshots
from ._store import MemoryStore

__all__ = ["MEMORY_CAPABILITIES", "MemoryBackend"]

MEMORY_CAPABILITIES = frozenset(
    {
        Capability.FENCED_APPENDS,
        Capability.SNAPSHOTS,
        Capability.ACTIVITY_REGISTRY,
        Capability.NOTICE_INBOX,
        Capability.TREE_BUDGETS,
    }
)
"""Everything but `SPANS_PROCESSES`: another process never sees this memory."""


class MemoryBackend(Backend):
    """A `MemoryStore`, its `MemoryLeases`, a memory registry, inbox and snapshots.

    `clock` measures leases (store and registry); `store=` builds the
    backend around an existing `MemoryStore`.
    """

    store: MemoryStore

    def __init__(self, *, clock: Clock = system_clock, store: MemoryStore | None = None) -> None:
        store = store if store is not None else MemoryStore(clock=clock)
        super().__init__(store, capabilities=MEMORY_CAPABILITIES)
        self._clock = clock
        store.backend = self

    @functools.cached_property
    def registry(self) -> MemoryActivityRegistry:
        """The activity registry on this backend's database (built on first use)."""
        return MemoryActivityRegistry(clock=self._clock)

    @functools.cached_property
    def inbox(self) -> MemoryNoticeInbox:
        """The notice inbox on this backend's database (built on first use)."""
        return MemoryNoticeInbox()

    @functools.cached_property
    def snapshots(self) -> MemorySnapshots:
        """The snapshot rows on this backend's database (built on first use)."""
        return MemorySnapshots(self.store)

    @functools.cached_property
    def budgets(self) -> MemoryBudgets:
        """The tree budgets on this backend's database (built on first use)."""
        return MemoryBudgets()
