"""The PostgreSQL backend: one database shared by any number of processes.

`PostgresBackend` builds every part (store, leases, activity registry,
notice inbox, snapshots, tree budgets) on one `PostgresDatabase`: one
lazily opened pool, sized and bounded by one `PoolOptions`, with a
connection kept for lease renewals (`connection(urgent=True)`).
`Migration` and `quote_ident` are for other components that keep tables in
the same database (the work queue), and so is `one_statement`: one statement
on an open psycopg connection at the cost of libpq (what the store's own
single statements go through), returning `ROWCOUNT`, `ONE_ROW` or `ALL_ROWS`.
"""

from __future__ import annotations

from ..._extras import needs_extra
from .._sql import Migration, quote_ident

with needs_extra("taskloom.backends.postgres"):
    from ._backend import PostgresBackend
    from ._background import PostgresActivityRegistry, PostgresNoticeInbox
    from ._database import PostgresDatabase
    from ._lean import ALL as ALL_ROWS
    from ._lean import ONE as ONE_ROW
    from ._lean import ROWCOUNT
    from ._lean import statement as one_statement
    from ._leases import PostgresLeases
    from ._store import PostgresStore

__all__ = [
    "ALL_ROWS",
    "ONE_ROW",
    "ROWCOUNT",
    "Migration",
    "PostgresActivityRegistry",
    "PostgresBackend",
    "PostgresDatabase",
    "PostgresLeases",
    "PostgresNoticeInbox",
    "PostgresStore",
    "one_statement",
    "quote_ident",
]
