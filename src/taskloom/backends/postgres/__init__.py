"""The PostgreSQL backend: one database shared by any number of processes.

`PostgresBackend` builds every part (store, leases, activity registry,
notice inbox, snapshots, tree budgets) on one `PostgresDatabase`: one
lazily opened pool, sized and bounded by one `PoolOptions`, with a
connection kept for lease renewals (`connection(urgent=True)`).
`Migration` and `quote_ident` are for other components that keep tables in
the same database (the work queue).
"""

from __future__ import annotations

from ..._extras import needs_extra
from .._sql import Migration, quote_ident

with needs_extra("taskloom.backends.postgres"):
    from ._backend import PostgresBackend
    from ._background import PostgresActivityRegistry, PostgresNoticeInbox
    from ._database import PostgresDatabase
    from ._leases import PostgresLeases
    from ._store import PostgresStore

__all__ = [
    "Migration",
    "PostgresActivityRegistry",
    "PostgresBackend",
    "PostgresDatabase",
    "PostgresLeases",
    "PostgresNoticeInbox",
    "PostgresStore",
    "quote_ident",
]
