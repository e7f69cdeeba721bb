"""`PostgresBackend`: every part in one PostgreSQL database, through one pool."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._backend import Capability, DatabaseBackend
from .._leases import Clock, system_clock
from .._pool import PoolOptions, PoolSettings
from .._semantic import Embedder, check_embedder
from ._background import PostgresActivityRegistry, PostgresNoticeInbox
from ._database import PostgresDatabase
from ._ledgers import PostgresBudgets
from ._memory import PostgresMemories
from ._snapshots import PostgresSnapshots
from ._store import PostgresStore

if TYPE_CHECKING:
    from typing_extensions import Unpack

POSTGRES_CAPABILITIES = frozenset(Capability)
"""Every capability: any number of processes share the database."""


class PostgresBackend(DatabaseBackend):
    """A `PostgresStore`, its `PostgresLeases`, a registry, an inbox, snapshots,
    tree budgets and long-term memory on one `PostgresDatabase`: one pool, sized and bounded
    once by `pool` (a `PoolOptions`, or its fields as keywords, which
    override it).

    `url` is a libpq URL; `clock` measures leases; `embedder` is long-term
    memory's, for its semantic search (see `Embedder`). The pool opens, and the
    tables are created or migrated, on first use; `close()` closes the pool,
    and with it every part.
    """

    store: PostgresStore
    database: PostgresDatabase
    part_types = (PostgresActivityRegistry, PostgresNoticeInbox, PostgresSnapshots, PostgresBudgets)
    memory_type = PostgresMemories

    def __init__(
        self,
        url: str,
        *,
        clock: Clock = system_clock,
        pool: PoolOptions | None = None,
        embedder: Embedder | None = None,
        **options: Unpack[PoolSettings],
    ) -> None:
        self._embedder = check_embedder(embedder)
        self.database = PostgresDatabase(url, pool, **options)
        self._clock = clock
        super().__init__(
            PostgresStore(self.database, clock=clock), capabilities=POSTGRES_CAPABILITIES
        )

    @property
    def options(self) -> PoolOptions:
        """The pool options every part of this backend shares."""
        return self.database.options
