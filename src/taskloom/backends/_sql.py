"""What the SQL backends share: JSON as they store it, migrations, queries.

Each component (`"sessions"`, `"leases"`, ...) registers its migrations with
its database's `require`; `taskloom_schema_version` records how far each one
got. A migration is a tuple of statements, applied in order, never edited
once released: a schema change is a new migration at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..entries import Entry
from ..errors import CorruptEntry

__all__ = [
    "VERSION_TABLE",
    "Migration",
    "check_version",
    "dump_json",
    "list_query",
    "load_entries",
    "quote_ident",
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


def load_entries(rows: Iterable[Sequence[Any]], session_id: str) -> list[Entry]:
    """Entries from `(kind, data, run_id, position, created_at)` rows, the data
    decoded from its stored JSON; `CorruptEntry` names the entry that failed."""
    return [
        Entry(kind, _entry_data(data, session_id, pos), run_id, pos, at)
        for kind, data, run_id, pos, at in rows
    ]


def _entry_data(text: str | bytes, session_id: str, position: int) -> Mapping[str, Any]:
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


def list_query(
    select: str,
    order: str,
    placeholder: str,
    unlimited: object,
    parent_id: str | None,
    agent: str | None,
    limit: int | None,
) -> tuple[str, list[object]]:
    """`select` filtered, ordered and limited as `SessionStore.list` asks (`?`
    or `%s` placeholders); `unlimited` is the LIMIT that means no limit."""
    given = {"parent_id": parent_id, "agent": agent}
    where = [f"{name} = {placeholder}" for name, value in given.items() if value is not None]
    params: list[object] = [value for value in given.values() if value is not None]
    params.append(unlimited if limit is None else max(limit, 0))
    query = select + (" WHERE " + " AND ".join(where) if where else "")
    return f"{query} ORDER BY {order} LIMIT {placeholder}", params
