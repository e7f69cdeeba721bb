"""`MemoryBackend`: every part in process memory; nothing outlives the process."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .._backend import Backend, Capability
from .._leases import Clock, system_clock
from .._ledgers import MemoryBudgets
from ._background import MemoryActivityRegistry, MemoryNoticeInbox
from ._store import MemorySnapshots, MemoryStore

if TYPE_CHECKING:
    from .._memories import MemoryMemories
    from .._semantic import Embedder

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
        if embedder is not None:
            # Checked where it was given, though the memory is built at first use.
            from .._semantic import check_embedder

            check_embedder(embedder)
        store = store if store is not None else MemoryStore(clock=clock)
        super().__init__(
            store,
            registry=MemoryActivityRegistry(clock=clock),
            inbox=MemoryNoticeInbox(),
            snapshots=MemorySnapshots(store.leases),
            budgets=MemoryBudgets(),
            capabilities=MEMORY_CAPABILITIES,
        )
        self._clock = clock
        self._embedder = embedder

    @functools.cached_property
    def memory(self) -> MemoryMemories:
        """The long-term memory in this process (built, and its module
        imported, at the first read: a plain run never reads it)."""
        from .._memories import MemoryMemories

        return MemoryMemories(clock=self._clock, embedder=self._embedder)
