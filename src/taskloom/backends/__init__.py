"""Backends: one per database (memory, SQLite, PostgreSQL), each a `Backend`.

A backend holds everything taskloom keeps in its database — the session
store, the leases and fences that coordinate its writers, the activity
registry and notice inbox of background work, the snapshot rows beside the
log, the tree budgets and long-term memory (`Memories`, searched by meaning
with an `Embedder`) — built and closed by the backend on one database
object and, for PostgreSQL, one `PoolOptions`::

    backend = open_backend("postgresql://localhost/app", pool=PoolOptions(max_size=20))
    backend.store, backend.leases, backend.registry, backend.inbox, backend.snapshots
    backend.budgets, backend.memory

Each declares its `capabilities` (`Capability`); the contract suites in
`taskloom.testing` run what a backend declares. `Backend(store, ...)` makes
one of your own store. The parts of each built-in backend are in
`taskloom.backends.memory`, `.sqlite` and `.postgres`; the SQLite and
PostgreSQL backends import on first use: their drivers cost time to import;
so do long-term memory's names and `PoolOptions`, which a run on the memory
store does not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._activities import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    NoticeInbox,
    NoticeStatus,
)
from ._backend import Backend, Capability, backend_of, snapshots_for
from ._leases import (
    Clock,
    Fence,
    Lease,
    Leases,
    acquire_or_take_over,
    holder_is_gone,
    holder_name,
    session_lease_key,
    system_clock,
)
from ._ledgers import BudgetLedger
from ._open import open_backend
from ._snapshots import SnapshotStore
from ._store import MAX_SESSION_ID_LENGTH, SessionMeta, SessionStore, check_session_id
from .memory import MemoryBackend

if TYPE_CHECKING:
    from ._embedders import SentenceTransformerEmbedder
    from ._memories import (
        IDEMPOTENCY_KEEP_SECONDS,
        MAX_IDEMPOTENCY_KEY_LENGTH,
        MAX_KEY_LENGTH,
        MAX_NAMESPACE_DEPTH,
        MAX_NAMESPACE_PART_LENGTH,
        MAX_QUERY_WORDS,
        MAX_VALUE_BYTES,
        Memories,
        MemoryHit,
        MemoryItem,
        MemoryValue,
        Namespace,
        check_namespace,
    )
    from ._pool import DEFAULT_MAX_SIZE, PoolOptions
    from ._semantic import EMBED_BATCH, MAX_SEMANTIC_ITEMS, Embedder, SearchMode
    from .postgres import PostgresBackend
    from .sqlite import SQLiteBackend

__all__ = [
    "DEFAULT_MAX_SIZE",
    "EMBED_BATCH",
    "IDEMPOTENCY_KEEP_SECONDS",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_KEY_LENGTH",
    "MAX_NAMESPACE_DEPTH",
    "MAX_NAMESPACE_PART_LENGTH",
    "MAX_QUERY_WORDS",
    "MAX_SEMANTIC_ITEMS",
    "MAX_SESSION_ID_LENGTH",
    "MAX_VALUE_BYTES",
    "ActivityRegistry",
    "Backend",
    "BackgroundActivity",
    "BackgroundNotice",
    "BudgetLedger",
    "Capability",
    "Clock",
    "Embedder",
    "Fence",
    "Lease",
    "Leases",
    "MemoryBackend",
    "MemoryHit",
    "MemoryItem",
    "Memories",
    "MemoryValue",
    "Namespace",
    "NoticeInbox",
    "NoticeStatus",
    "PoolOptions",
    "PostgresBackend",
    "SearchMode",
    "SentenceTransformerEmbedder",
    "SQLiteBackend",
    "SessionMeta",
    "SessionStore",
    "SnapshotStore",
    "acquire_or_take_over",
    "backend_of",
    "check_namespace",
    "check_session_id",
    "holder_is_gone",
    "holder_name",
    "open_backend",
    "session_lease_key",
    "snapshots_for",
    "system_clock",
]

# Long-term memory (its search by meaning too) and the PostgreSQL pool's
# options load at first use: a plain run on the memory store names neither.
_MEMORIES = (
    "MAX_QUERY_WORDS",
    "check_namespace",
    "IDEMPOTENCY_KEEP_SECONDS",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_KEY_LENGTH",
    "MAX_NAMESPACE_DEPTH",
    "MAX_NAMESPACE_PART_LENGTH",
    "MAX_VALUE_BYTES",
    "Memories",
    "MemoryHit",
    "MemoryItem",
    "MemoryValue",
    "Namespace",
)
__getattr__ = lazy_exports(
    __name__,
    {
        "SQLiteBackend": ".sqlite",
        "PostgresBackend": ".postgres",
        "DEFAULT_MAX_SIZE": "._pool",
        "PoolOptions": "._pool",
        **dict.fromkeys(_MEMORIES, "._memories"),
        **dict.fromkeys(
            ("EMBED_BATCH", "MAX_SEMANTIC_ITEMS", "Embedder", "SearchMode"), "._semantic"
        ),
        "SentenceTransformerEmbedder": "._embedders",
    },
)
