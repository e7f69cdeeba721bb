"""Counting the SQL statements a process sends, for the benchmarks' tables.

PostgreSQL: every query psycopg sends, prepared or not (including transaction
control and the pool's connection checks, which show as "(empty)"; a
statement's first preparation is not counted apart). SQLite: every statement run on a `sqlite3`
connection, counted by the connection's trace callback.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Statements:
    """Statements sent while counting, by their first words."""

    by_kind: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def add(self, sql: str) -> None:
        words = sql.split()
        self.by_kind[" ".join(words[:3]) if words else "(empty)"] += 1


_active: list[Statements] = []


def _patch_psycopg() -> None:
    try:
        from psycopg import _connection_base, _cursor_base
    except ImportError:
        return
    cursor = _cursor_base.BaseCursor
    if getattr(cursor, "_taskloom_counted", False):
        return
    execute_send = cursor._execute_send
    exec_command = _connection_base.BaseConnection._exec_command

    def send(self: Any, query: Any, **kwargs: Any) -> Any:
        for s in _active:
            s.add(bytes(query.query).decode(errors="replace"))
        return execute_send(self, query, **kwargs)

    def command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        text = command if isinstance(command, str | bytes) else str(command)
        for s in _active:
            s.add(text.decode() if isinstance(text, bytes) else text)
        return exec_command(self, command, *args, **kwargs)

    send_prepared = cursor._send_query_prepared

    def prepared(self: Any, name: bytes, query: Any, **kwargs: Any) -> Any:
        for s in _active:
            s.add(bytes(query.query).decode(errors="replace"))
        return send_prepared(self, name, query, **kwargs)

    cursor._execute_send = send  # type: ignore[method-assign]
    cursor._send_query_prepared = prepared  # type: ignore[method-assign]
    _connection_base.BaseConnection._exec_command = command  # type: ignore[method-assign]
    cursor._taskloom_counted = True  # type: ignore[attr-defined]


_sqlite_connect = sqlite3.connect


def _traced_connect(*args: object, **kwargs: object) -> sqlite3.Connection:
    conn = _sqlite_connect(*args, **kwargs)  # type: ignore[arg-type]

    def trace(sql: str) -> None:
        for s in _active:
            s.add(sql)

    conn.set_trace_callback(trace)
    return conn


@contextlib.contextmanager
def count_statements() -> Iterator[Statements]:
    """Count the statements sent inside the block (from any task or thread)."""
    _patch_psycopg()
    sqlite3.connect = _traced_connect  # type: ignore[assignment]
    found = Statements()
    _active.append(found)
    try:
        yield found
    finally:
        _active.remove(found)
