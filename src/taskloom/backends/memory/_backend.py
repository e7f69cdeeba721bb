"""`MemoryBackend`: every part in process memory; nothing outlives the process."""

from __future__ import annotations

from .._activities import ActivityRegistry, NoticeInbox
from .._backend import Backend, Capability
from .._leases import Clock, system_clock
from .._snapshots import SnapshotStore
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
    }
)
"""Everything but `SPANS_PROCESSES`: another process never sees this memory."""


class MemoryBackend(Backend):
    """A `MemoryStore`, its `MemoryLeases`, a memory registry, inbox and snapshots.

    `clock` measures leases (store and registry). `store=` wraps an existing
    `MemoryStore` (that is what `MemoryStore.backend` does).
    """

    store: MemoryStore

    def __init__(self, *, clock: Clock = system_clock, store: MemoryStore | None = None) -> None:
        store = store if store is not None else MemoryStore(clock=clock)
        super().__init__(store, capabilities=MEMORY_CAPABILITIES)
        self._clock = clock
        store._backend = self

    def _make_registry(self) -> ActivityRegistry:
        return MemoryActivityRegistry(clock=self._clock)

    def _make_inbox(self) -> NoticeInbox:
        return MemoryNoticeInbox()

    def _make_snapshots(self) -> SnapshotStore:
        return MemorySnapshots(self.store)
