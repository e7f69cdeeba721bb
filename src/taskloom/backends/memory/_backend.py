"""`MemoryBackend`: every part in process memory; nothing outlives the process."""

from __future__ import annotations

from .._backend import Backend, Capability
from .._leases import Clock, system_clock
from .._ledgers import MemoryBudgets
from .._memories import MemoryMemories
from .._semantic import Embedder
from ._background import MemoryActivityRegistry, MemoryNoticeInbox
from ._store import MemorySnapshots, MemoryStore

MEMORY_CAPABILITIES = frozenset(
    {
        Capability.FENCED_APPENDS,
        Capability.SNAPSHOTS,
        Capability.ACTIVITY_REGISTRY,
        Capability.NOTICE_INBOX,
        Capability.TREE_BUDGETS,
        Capability.MEMORY,
    }
)
"""Everything but `SPANS_PROCESSES`: another process never sees this memory."""


class MemoryBackend(Backend):
    """A `MemoryStore` (of sessions), its `MemoryLeases`, a memory registry,
    inbox, snapshots, tree budgets and long-term memory (`MemoryMemories`).

    `clock` measures leases (store and registry); `store=` builds the
    backend around an existing `MemoryStore`; `embedder` is long-term
    memory's, for its semantic search (see `Embedder`).
    """

    store: MemoryStore

    def __init__(
        self,
        *,
        clock: Clock = system_clock,
        store: MemoryStore | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        store = store if store is not None else MemoryStore(clock=clock)
        super().__init__(
            store,
            registry=MemoryActivityRegistry(clock=clock),
            inbox=MemoryNoticeInbox(),
            snapshots=MemorySnapshots(store.leases),
            budgets=MemoryBudgets(),
            memory=MemoryMemories(clock=clock, embedder=embedder),
            capabilities=MEMORY_CAPABILITIES,
        )
