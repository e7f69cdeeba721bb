"""`taskloom db migrate URL`: create or migrate every taskloom table in a
PostgreSQL database (sessions, leases, background work, snapshots, tree
budgets, long-term memory, the work queue).

Each component is migrated as on first use (versioned, in one transaction,
under the advisory lock that serialises processes): running it again, or
beside a process that opens the database, changes nothing.
"""

from __future__ import annotations

import asyncio
import importlib.util

from .._redact import safe_url
from ..errors import ConfigurationError, StoreError
from .common import Database
from .failures import with_hint

__all__ = ["migrate"]


def migrate(args: Database) -> int:
    """Apply the migrations; exit code 0."""
    if not args.url.startswith(("postgresql://", "postgres://")):
        raise with_hint(
            ConfigurationError(f"db migrate takes a postgresql:// URL, not {args.url!r}"),
            "SQLite stores migrate themselves on first use",
        )
    try:
        return asyncio.run(_migrate(args.url, args.schema))
    except StoreError as exc:
        raise with_hint(exc, "check the URL, and that PostgreSQL is up") from None


async def _probe(url: str) -> None:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from ..errors import StoreUnavailable

    try:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10)
    except psycopg.OperationalError as exc:
        info = conninfo_to_dict(url)
        where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}"
        raise StoreUnavailable(f"{where} cannot be reached: {' '.join(str(exc).split())}") from None
    await conn.close()


async def _migrate(url: str, schema: str | None) -> int:
    from ..backends import PostgresBackend

    await _probe(url)
    backend = PostgresBackend(url, schema=schema)
    try:
        # Each part asks for its tables when built; the first statement makes them all.
        for part in (backend.snapshots, backend.budgets, backend.memory):
            assert part is not None
        await backend.registry.list("")
        await backend.inbox.pending("")
    finally:
        await backend.close()
    done = ["sessions", "leases", "background", "snapshots", "budgets", "memory"]
    if importlib.util.find_spec("procrastinate") is not None:
        from ..distributed import WorkQueue

        queue = WorkQueue(url, schema=schema)
        try:
            await queue.apply_migrations()
        finally:
            await queue.close()
        done.append("queue")
    where = f" (schema {schema})" if schema else ""
    print(f"taskloom db migrate: {', '.join(done)} up to date in {safe_url(url)}{where}")
    return 0
