"""The memory backend: the default, and the reference for every contract."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports
from .._leases import MemoryLeases
from .._ledgers import MemoryBudgets
from ._backend import MEMORY_CAPABILITIES, MemoryBackend
from ._background import MemoryActivityRegistry, MemoryNoticeInbox
from ._store import MemoryStore

if TYPE_CHECKING:
    from .._memories import MemoryMemories

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

# Long-term memory loads at first use (`MemoryBackend.memory` builds it then).
__getattr__ = lazy_exports(__name__, {"MemoryMemories": ".._memories"})
