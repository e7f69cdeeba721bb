"""The memory backend: the default, and the reference for every contract."""

from __future__ import annotations

from .._leases import MemoryLeases
from .._ledgers import MemoryBudgets
from .._memories import MemoryMemories
from ._backend import MEMORY_CAPABILITIES, MemoryBackend
from ._background import MemoryActivityRegistry, MemoryNoticeInbox
from ._store import MemoryStore

__all__ = [
    "MEMORY_CAPABILITIES",
    "MemoryActivityRegistry",
    "MemoryBackend",
    "MemoryBudgets",
    "MemoryLeases",
    "MemoryMemories",
    "MemoryNoticeInbox",
    "MemoryStore",
]
