"""What the SQL backends share: JSON as they store it, migrations, filters.

`SQLiteDatabase` (`backends.sqlite`) owns one SQLite file through one
connection that lives on one worker thread: sqlite3 blocks, and the event loop
must not. `PostgresDatabase` (`backends.postgres`) owns a psycopg connection
pool, opened on first use, and bounds every wait on the server (connecting,
checkout, statements, cancellation). Both do no I/O until first use, apply
each component's versioned migrations before the first statement runs, and
are shared by every part of their backend (store, leases, registry, inbox,
snapshots), so a fenced append can check the lease in the same transaction
that writes the entry.

Each component (`"sessions"`, `"leases"`, ...) registers its migrations with
`require`; `taskloom_schema_version` records how far each one got. A
migration is a tuple of statements, applied in order, never edited once
released: a schema change is a new migration at the end.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import CorruptEntry

__all__ = [
    "VERSION_TABLE",
    "Migration",
    "check_version",
    "dump_json",
    "load_entry_data",
    "quote_ident",
    "session_filters",
]

Migration = tuple[str, ...]
"""The statements of one schema step, applied in one transaction with the others pending."""


def _json_default(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dump_json(value: object) -> str:
    """`value` as compact JSON text, exactly as the durable stores keep it.

    ASCII-only on purpose: escaping keeps every Python string storable,
    including lone surrogates and NUL, which neither SQLite's UTF-8 text nor
    PostgreSQL text could otherwise take. NaN and infinities are refused
    because no JSON reader is obliged to accept them; so is nesting too deep
    to read back. Either way the `ValueError` says what was refused.
    """
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=_json_default)
    except RecursionError:
        raise ValueError("cannot store JSON nested this deeply") from None
    except ValueError as exc:
        raise ValueError(f"cannot store as JSON: {exc}") from None


def load_entry_data(text: str | bytes, session_id: str, position: int) -> Mapping[str, Any]:
    """An entry's data decoded from its stored JSON; `CorruptEntry` names what failed."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        problem = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise CorruptEntry(
            f"session {session_id!r}: the entry at position {position} is not valid JSON "
            f"({problem})"
        ) from None
    if not isinstance(data, dict):
        raise CorruptEntry(
            f"session {session_id!r}: the entry at position {position} holds a "
            f"{type(data).__name__}, not a JSON object"
        )
    return data


def quote_ident(name: str) -> str:
    """`name` as a quoted SQL identifier (safe for any string without NUL)."""
    return '"' + name.replace('"', '""') + '"'


VERSION_TABLE = "taskloom_schema_version"


def check_version(component: str, current: int, known: int) -> None:
    if current > known:
        raise RuntimeError(
            f"the database has schema version {current} for {component!r}, newer than "
            f"the {known} this taskloom knows; upgrade taskloom to use it"
        )


def session_filters(
    placeholder: str, *, parent_id: str | None, agent: str | None
) -> tuple[list[str], list[object]]:
    """WHERE clauses and parameters for `SessionStore.list` filters (`?` or `%s`)."""
    where: list[str] = []
    params: list[object] = []
    if parent_id is not None:
        where.append(f"parent_id = {placeholder}")
        params.append(parent_id)
    if agent is not None:
        where.append(f"agent = {placeholder}")
        params.append(agent)
    return where, params
