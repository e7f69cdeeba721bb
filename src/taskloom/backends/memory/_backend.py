"""`MemoryBackend`: every part in process memory; nothing outlives the process."""

from __future__ import annotations

from .._backend import Backend, Capability
from .._leases import Clock, system_clock
from .._ledgers import MemoryBudgets
from ._background import MemoryActivityRegistry, MemoryNoticeInbox
from ._store import MemorySnapshots, MemoryStore

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
        super().__init__(
            store,
            registry=MemoryActivityRegistry(clock=clock),
            inbox=MemoryNoticeInbox(),
            snapshots=MemorySnapshots(store.leases),
            budgets=MemoryBudgets(),
            capabilities=MEMORY_CAPABILITIES,
        )
