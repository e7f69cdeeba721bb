"""Backends: one per database (memory, SQLite, PostgreSQL), each a `Backend`.

A backend holds everything taskloom keeps in its database — the session
store, the leases and fences that coordinate its writers, the activity
registry and notice inbox of background work, the snapshot rows beside the
log — built on one database object and, for PostgreSQL, one `PoolOptions`::

    backend = open_backend("postgresql://localhost/app", pool=PoolOptions(max_size=20))
    backend.store, backend.leases, backend.registry, backend.inbox, backend.snapshots

Each declares its `capabilities` (`Capability`); the contract suites in
`taskloom.testing` run what a backend declares. `Backend(store, ...)` makes
one of your own store. Every store taskloom ships knows its backend
(`store.backend`). `taskloom.stores` is the session-store face of the same
classes.

The SQLite and PostgreSQL backends import on first use (`SQLiteBackend`,
`PostgresBackend` and their parts here, or `taskloom.backends.sqlite` /
`taskloom.backends.postgres`): their drivers cost time to import.
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
from ._budgets import NANO, BudgetLedger, BudgetLeft, MemoryBudgets
from ._leases import (
    Clock,
    Fence,
    Lease,
    Leases,
    MemoryLeases,
    acquire_or_take_over,
    holder_is_gone,
    holder_name,
    session_lease_key,
    system_clock,
)
from ._open import open_backend
from ._pool import DEFAULT_MAX_SIZE, PoolOptions
from ._snapshots import SnapshotStore
from ._store import (
    MAX_SESSION_ID_LENGTH,
    Entry,
    EntryKind,
    SessionMeta,
    SessionStore,
    check_session_id,
)
from .memory import (
    MemoryActivityRegistry,
    MemoryBackend,
    MemoryNoticeInbox,
    MemorySnapshots,
    MemoryStore,
)

if TYPE_CHECKING:
    from .postgres import (
        PostgresActivityRegistry,
        PostgresBackend,
        PostgresBudgets,
        PostgresDatabase,
        PostgresLeases,
        PostgresNoticeInbox,
        PostgresSnapshots,
        PostgresStore,
    )
    from .sqlite import (
        SQLiteActivityRegistry,
        SQLiteBackend,
        SQLiteBudgets,
        SQLiteDatabase,
        SQLiteLeases,
        SQLiteNoticeInbox,
        SQLiteSnapshots,
        SQLiteStore,
    )

__all__ = [
    "DEFAULT_MAX_SIZE",
    "MAX_SESSION_ID_LENGTH",
    "NANO",
    "ActivityRegistry",
    "Backend",
    "BackgroundActivity",
    "BackgroundNotice",
    "BudgetLedger",
    "BudgetLeft",
    "Capability",
    "Clock",
    "Entry",
    "EntryKind",
    "Fence",
    "Lease",
    "Leases",
    "MemoryActivityRegistry",
    "MemoryBackend",
    "MemoryBudgets",
    "MemoryLeases",
    "MemoryNoticeInbox",
    "MemorySnapshots",
    "MemoryStore",
    "NoticeInbox",
    "NoticeStatus",
    "PoolOptions",
    "PostgresActivityRegistry",
    "PostgresBackend",
    "PostgresBudgets",
    "PostgresDatabase",
    "PostgresLeases",
    "PostgresNoticeInbox",
    "PostgresSnapshots",
    "PostgresStore",
    "SQLiteActivityRegistry",
    "SQLiteBackend",
    "SQLiteBudgets",
    "SQLiteDatabase",
    "SQLiteLeases",
    "SQLiteNoticeInbox",
    "SQLiteSnapshots",
    "SQLiteStore",
    "SessionMeta",
    "SessionStore",
    "SnapshotStore",
    "backend_of",
    "check_session_id",
    "acquire_or_take_over",
    "holder_is_gone",
    "holder_name",
    "session_lease_key",
    "open_backend",
    "snapshots_for",
    "system_clock",
]

__getattr__ = lazy_exports(
    __name__,
    {
        **{
            name: ".sqlite"
            for name in (
                "SQLiteActivityRegistry",
                "SQLiteBackend",
                "SQLiteBudgets",
                "SQLiteDatabase",
                "SQLiteLeases",
                "SQLiteNoticeInbox",
                "SQLiteSnapshots",
                "SQLiteStore",
            )
        },
        **{
            name: ".postgres"
            for name in (
                "PostgresActivityRegistry",
                "PostgresBackend",
                "PostgresBudgets",
                "PostgresDatabase",
                "PostgresLeases",
                "PostgresNoticeInbox",
                "PostgresSnapshots",
                "PostgresStore",
            )
        },
    },
)
