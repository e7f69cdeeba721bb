"""The PostgreSQL backend: one database shared by any number of processes.

Every part (store, leases, activity registry, notice inbox, snapshots) works
through one `PostgresDatabase`: one lazily opened pool, sized and bounded by
one `PoolOptions`, with a connection kept for lease renewals
(`connection(urgent=True)`). `Migration` and `quote_ident` are for other
components that keep tables in the same database (the work queue).
"""

from __future__ import annotations

from ..._extras import needs_extra
from .._pool import PoolOptions
from .._sql import Migration, quote_ident

with needs_extra("taskloom.backends.postgres"):
    from ._backend import POSTGRES_CAPABILITIES, PostgresBackend
    from ._background import PostgresActivityRegistry, PostgresNoticeInbox
    from ._budgets import PostgresBudgets
    from ._database import PostgresDatabase
    from ._leases import PostgresLeases
    from ._snapshots import PostgresSnapshots
    from ._store import CHILDREN_PER_CONNECTION, PostgresStore

__all__ = [
    "CHILDREN_PER_CONNECTION",
    "POSTGRES_CAPABILITIES",
    "Migration",
    "PoolOptions",
    "PostgresActivityRegistry",
    "PostgresBackend",
    "PostgresBudgets",
    "PostgresDatabase",
    "PostgresLeases",
    "PostgresNoticeInbox",
    "PostgresSnapshots",
    "PostgresStore",
    "quote_ident",
]
