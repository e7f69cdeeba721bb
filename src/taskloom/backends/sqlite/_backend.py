"""`SQLiteBackend`: every part in one SQLite file, through one connection and one thread."""

from __future__ import annotations

import os
from typing import Literal

from .._backend import Capability, DatabaseBackend
from .._leases import Clock, system_clock
from .._semantic import Embedder, check_embedder
from ._background import SQLiteActivityRegistry, SQLiteNoticeInbox
from ._database import SQLiteDatabase
from ._ledgers import SQLiteBudgets
from ._memory import SQLiteMemories
from ._snapshots import SQLiteSnapshots
from ._store import SQLiteStore

SQLITE_CAPABILITIES = frozenset(Capability)
"""Every capability: the file is shared by every process that opens it."""


class SQLiteBackend(DatabaseBackend):
    """A `SQLiteStore`, its `SQLiteLeases`, a registry, an inbox, snapshots,
    tree budgets and long-term memory on one `SQLiteDatabase` (one file, one connection and its
    worker thread).

    `path` is the file (created with its parent folders on first use, mode
    0600, unless `create=False`: then it must exist); `busy_timeout`,
    `synchronous` and `create` are the database's (see `SQLiteDatabase`);
    `clock` measures leases; `embedder` is long-term memory's, for its
    semantic search (see `Embedder`). Opening does no I/O; `close()` closes the
    database, and with it every part.
    """

    store: SQLiteStore
    database: SQLiteDatabase
    part_types = (SQLiteActivityRegistry, SQLiteNoticeInbox, SQLiteSnapshots, SQLiteBudgets)
    memory_type = SQLiteMemories

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock = system_clock,
        busy_timeout: float = 30.0,
        synchronous: Literal["FULL", "NORMAL"] = "NORMAL",
        create: bool = True,
        embedder: Embedder | None = None,
    ) -> None:
        self._embedder = check_embedder(embedder)
        self.database = SQLiteDatabase(
            path, busy_timeout=busy_timeout, synchronous=synchronous, create=create
        )
        self._clock = clock
        super().__init__(SQLiteStore(self.database, clock=clock), capabilities=SQLITE_CAPABILITIES)
