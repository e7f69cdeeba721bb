"""Counting the SQL statements a process sends, and its round trips to the
server, for the benchmarks' tables.

PostgreSQL: every query psycopg sends, prepared or not, through its cursor
or through taskloom's lean single-statement path (including transaction
control and the pool's connection checks, which show as "(empty)"; a
statement's first preparation is not counted apart). A round trip is a wait
for the server's answer: a statement sent outside a pipeline is one, and so
is each sync of a pipeline (its exit included) or a fetch that has to flush
one, whatever the number of statements it carries. SQLite: every statement
run on a `sqlite3` connection, counted by the connection's trace callback
(no server, no round trips).
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
    round_trips: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    @property
    def checks(self) -> int:
        """The pool's connection checks ("(empty)" statements) and its new
        connections' configuration (their statement timeouts), a round trip
        each: what the pool spends on its connections, whenever it opens or
        checks one, not what the work counted sends."""
        return self.by_kind["(empty)"] + self.by_kind[CONFIGURE]

    def add(self, sql: str) -> None:
        words = sql.split()
        self.by_kind[" ".join(words[:3]) if words else "(empty)"] += 1


CONFIGURE = "SELECT set_config('statement_timeout', $1,"
"""How a new pooled connection's configuration shows in `by_kind`."""

_active: list[Statements] = []


def _sent(sql: str, pipelined: bool) -> None:
    for s in _active:
        s.add(sql)
        if not pipelined:
            s.round_trips += 1


def _waited() -> None:
    for s in _active:
        s.round_trips += 1


def _patch_psycopg() -> None:
    try:
        from psycopg import _connection_base, _cursor_base, _pipeline_base, cursor_async
    except ImportError:
        return
    cursor = _cursor_base.BaseCursor
    if getattr(cursor, "_taskloom_counted", False):
        return
    execute_send = cursor._execute_send
    exec_command = _connection_base.BaseConnection._exec_command

    def send(self: Any, query: Any, **kwargs: Any) -> Any:
        _sent(bytes(query.query).decode(errors="replace"), bool(self._conn._pipeline))
        return execute_send(self, query, **kwargs)

    def command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        text = command if isinstance(command, str | bytes) else str(command)
        _sent(text.decode() if isinstance(text, bytes) else text, bool(self._pipeline))
        return exec_command(self, command, *args, **kwargs)

    send_prepared = cursor._send_query_prepared

    def prepared(self: Any, name: bytes, query: Any, **kwargs: Any) -> Any:
        _sent(bytes(query.query).decode(errors="replace"), bool(self._conn._pipeline))
        return send_prepared(self, name, query, **kwargs)

    enqueue_sync = _pipeline_base.BasePipeline._enqueue_sync

    def sync(self: Any) -> None:
        _waited()
        enqueue_sync(self)

    fetch_pipeline = cursor_async.AsyncCursor._fetch_pipeline

    async def fetch(self: Any) -> None:
        # A fetch before the pipeline's sync flushes and waits: a round trip of its own.
        if self._execmany_returning is not False and not self.pgresult and self._conn._pipeline:
            _waited()
        await fetch_pipeline(self)

    try:
        # taskloom's PostgreSQL database sends most single statements on the
        # connection's libpq layer, past the cursor (each a round trip).
        from taskloom.backends.postgres import _lean
    except ImportError:
        pass
    else:
        lean_send = _lean.send

        def lean(pgconn: Any, text: bytes, *args: Any) -> None:
            _sent(text.decode(errors="replace"), False)
            lean_send(pgconn, text, *args)

        _lean.send = lean  # type: ignore[assignment]

    _pipeline_base.BasePipeline._enqueue_sync = sync  # type: ignore[method-assign]
    cursor_async.AsyncCursor._fetch_pipeline = fetch  # type: ignore[method-assign]

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
