"""The SQLite backend: one file, safe for several processes at once.

Every part (store, leases, activity registry, notice inbox, snapshots) works
through one `SQLiteDatabase`: one connection, used on the caller's thread
when a call can finish at once and on one worker thread when it would wait,
lease renewals ahead of queued work (`run(fn, urgent=True)`).
"""

from __future__ import annotations

from ._backend import SQLITE_CAPABILITIES, SQLiteBackend
from ._background import SQLiteActivityRegistry, SQLiteNoticeInbox
from ._budgets import SQLiteBudgets
from ._database import SQLiteDatabase, immediate
from ._leases import SQLiteLeases
from ._snapshots import SQLiteSnapshots
from ._store import SQLITE_CHILD_CONCURRENCY, SQLiteStore

__all__ = [
    "SQLITE_CAPABILITIES",
    "SQLITE_CHILD_CONCURRENCY",
    "SQLiteActivityRegistry",
    "SQLiteBackend",
    "SQLiteBudgets",
    "SQLiteDatabase",
    "SQLiteLeases",
    "SQLiteNoticeInbox",
    "SQLiteSnapshots",
    "SQLiteStore",
    "immediate",
]
