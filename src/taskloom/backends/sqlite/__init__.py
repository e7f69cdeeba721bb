"""The SQLite backend: one file, safe for several processes at once.

`SQLiteBackend` builds every part (store, leases, activity registry, notice
inbox, snapshots, tree budgets) on one `SQLiteDatabase`: one connection,
used on the caller's thread when a call can finish at once and on one
worker thread when it would wait, lease renewals ahead of queued work
(`run(fn, urgent=True)`).
"""

from __future__ import annotations

from ._backend import SQLiteBackend
from ._background import SQLiteActivityRegistry, SQLiteNoticeInbox
from ._database import SQLiteDatabase, immediate
from ._leases import SQLiteLeases
from ._store import SQLiteStore

__all__ = [
    "SQLiteActivityRegistry",
    "SQLiteBackend",
    "SQLiteDatabase",
    "SQLiteLeases",
    "SQLiteNoticeInbox",
    "SQLiteStore",
    "immediate",
]
