"""One statement on a pooled connection at the cost of libpq, not of psycopg's cursor.

Most of the store's work is one statement at a time (`PostgresDatabase._statement`).
Through `AsyncConnection.execute` each costs 30-60 µs of CPU in psycopg's
cursor, generator and wait machinery on top of what libpq itself needs;
here the statement goes through the connection's own `pgconn` (psycopg's
public `psycopg.pq` layer), with psycopg's `Transformer` dumping the
parameters and loading the rows, so values, types and errors are psycopg's.

What it keeps of `execute` (and what the database's promises rest on):

- the same placeholders (`%s`, `%b`, `%t`, `%(name)s`, `%%`), converted
  once per query text; a query or parameters it does not take (a
  `psycopg.sql` object, a mismatch, a connection whose client encoding
  is not UTF-8) go through the cursor, which also
  raises psycopg's own errors for them, and so does a statement without
  parameters (psycopg sends it by the simple protocol, which also runs
  several statements; rare in the store, and the pool's tests watch such
  statements pass through `AsyncConnection.execute`);
- the same errors: a server error is `psycopg.errors.error_from_result`
  (the class its SQLSTATE names), a lost connection psycopg's
  `OperationalError` (from libpq, leaving `conn.broken` true);
- the same cancellation: the caller cancelled mid-statement sends the
  server a cancel request (the connection's bounded `cancel_safe`) and
  waits for the statement's end at most 5 s, else closes the connection,
  so a connection is left idle or closed, never mid-statement;
- preparation as psycopg's: a statement run `PREPARE_THRESHOLD` times on one
  connection (with the same parameter types) is prepared there under a
  name of its own; the names live on the connection, so a
  replacement connection prepares afresh, and no name is used twice on one;
- a statement is sent once: nothing here sends again after a failure, but
  for one the server refused before running it because its prepared name
  is gone. psycopg sends `DEALLOCATE ALL` after rolling back a transaction
  on a connection where it prepared statements of its own, which drops
  these too; the statement is then sent again unprepared (the connection is
  idle, so nothing ran and no transaction was aborted) and preparation
  starts over.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from psycopg import errors as e
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.abc import Buffer
    from psycopg.pq.abc import PGconn, PGresult

logger = logging.getLogger(__name__)

ROWCOUNT, ONE, ALL = 0, 1, 2
"""What `statement` returns: the rows changed, the first row (or None), every row."""

PREPARE_THRESHOLD = 2
"""Uses of one statement on one connection before it is prepared there,
while the connection holds fewer than `_PREPARED_EARLY` prepared statements.

psycopg waits for a fifth use, so that a statement run once or twice is not
prepared for nothing. The statements this path carries are the store's and
the queue's own, each run again and again on every connection; the four
uses before a fifth each cost the server a parse and a plan (for an append,
as much CPU as running it), on every new connection of a pool."""

_PREPARED_MAX = 100  # prepared statements per connection (psycopg's default too)
# Prepared statements are never dropped here: past this many, a statement
# waits for psycopg's fifth use, so that statements run twice early in a
# connection's life cannot take every place from those that come later.
_PREPARED_EARLY = 50
_PREPARE_LATE = 5
_QUERIES_MAX = 1024  # converted query texts kept

_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_EMPTY_QUERY = pq.ExecStatus.EMPTY_QUERY
_FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
_FINE = (_TUPLES_OK, _COMMAND_OK, _EMPTY_QUERY)
_COPY = (pq.ExecStatus.COPY_IN, pq.ExecStatus.COPY_OUT, pq.ExecStatus.COPY_BOTH)
_ACTIVE = pq.TransactionStatus.ACTIVE
_INTERRUPTED = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)
_FORMATS = {"s": PyFormat.AUTO, "b": PyFormat.BINARY, "t": PyFormat.TEXT}
# psycopg's placeholder grammar: %(name)x, %x or %%.
_PLACEHOLDER = re.compile(r"%(?:\(([^)]+)\))?(.)", re.DOTALL)
_STATE = "_taskloom_lean"
_NAME_GONE = "26000"  # invalid_sql_statement_name: no prepared statement of that name


class _Query:
    """A query text converted to PostgreSQL's `$n` placeholders."""

    __slots__ = ("formats", "names", "text")

    def __init__(self, text: bytes, names: list[str] | None, formats: list[PyFormat]) -> None:
        self.text = text
        self.names = names  # in $n order, for a mapping of parameters; None for a sequence
        self.formats = formats


_queries: dict[str, _Query | None] = {}


def _convert(query: str) -> _Query | None:
    """`query` with `$n` placeholders, or None if the cursor should take it."""
    names: dict[str, int] = {}
    formats: list[PyFormat] = []
    positional = 0
    parts: list[str] = []
    last = 0
    for match in _PLACEHOLDER.finditer(query):
        name, kind = match.group(1), match.group(2)
        parts.append(query[last : match.start()])
        last = match.end()
        if kind == "%" and name is None:
            parts.append("%")
            continue
        fmt = _FORMATS.get(kind)
        if fmt is None:
            return None
        if name is None:
            positional += 1
            formats.append(fmt)
            parts.append(f"${len(formats)}")
        elif name in names:
            index = names[name]
            if formats[index] != fmt:
                return None
            parts.append(f"${index + 1}")
        else:
            names[name] = len(formats)
            formats.append(fmt)
            parts.append(f"${len(formats)}")
    if positional and names:
        return None
    parts.append(query[last:])
    return _Query("".join(parts).encode(), list(names) if names else None, formats)


class _State:
    """What the lean path keeps on one connection."""

    __slots__ = ("made", "prepared", "tx", "uses", "utf8")

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.tx = Transformer(conn)
        # Query texts are converted to UTF-8 bytes once for every connection.
        self.utf8 = self.tx.encoding == "utf-8"
        self.uses: dict[tuple[bytes, Any], int] = {}
        self.prepared: dict[tuple[bytes, Any], bytes] = {}
        # Names ever made on the connection: a name is never used twice, so
        # one dropped behind this path's back can never name another statement.
        self.made = 0


async def statement(conn: AsyncConnection[Any], query: Any, params: Any, result: int) -> Any:
    """Run one statement on `conn` (autocommit, idle) and return what `result` asks for.

    The same values, errors and connection state as `conn.execute(query,
    params)` followed by `fetchone()`, `fetchall()` or `rowcount`.
    """
    converted = _queries.get(query) if type(query) is str else None
    if converted is None and type(query) is str and query not in _queries:
        if len(_queries) >= _QUERIES_MAX:
            _queries.clear()
        converted = _queries[query] = _convert(query)
    args: Sequence[Any] | None = None
    pgconn = conn.pgconn
    state: _State | None = getattr(conn, _STATE, None)
    if state is None and pgconn.status == pq.ConnStatus.OK:
        state = _State(conn)
        setattr(conn, _STATE, state)
    if converted is not None and converted.formats and state is not None and state.utf8:
        if converted.names is None:
            if isinstance(params, (tuple, list)) and len(params) == len(converted.formats):
                args = params
        elif isinstance(params, Mapping) and all(name in params for name in converted.names):
            args = [params[name] for name in converted.names]
    if args is None:
        # Not a query the lean path takes (see the module's docstring).
        cursor = await conn.execute(query, params)
        if result == ONE:
            return await cursor.fetchone()
        if result == ALL:
            return await cursor.fetchall()
        return cursor.rowcount
    assert converted is not None and state is not None
    if pgconn.status != pq.ConnStatus.OK:
        raise e.OperationalError("the connection is closed")
    tx = state.tx
    values = tx.dump_sequence(args, converted.formats)
    types, formats = tx.types, tx.formats
    key = (converted.text, types)
    name = state.prepared.get(key)
    if name is None:
        uses = state.uses.get(key, 0) + 1
        held = len(state.prepared)
        wanted = PREPARE_THRESHOLD if held < _PREPARED_EARLY else _PREPARE_LATE
        if uses >= wanted and held < _PREPARED_MAX:
            name = f"_taskloom_{state.made}".encode()
            state.made += 1
            pgconn.send_prepare(name, converted.text, param_types=types)
            _check(await _results(conn), tx.encoding)
            state.prepared[key] = name
            state.uses.pop(key, None)
        else:
            if len(state.uses) >= _QUERIES_MAX:
                state.uses.clear()
            state.uses[key] = uses
    send(pgconn, converted.text, name, values, (types, formats))
    results = await _results(conn)
    if name is not None and _name_gone(results, pgconn):
        state.prepared.clear()
        state.uses.clear()
        send(pgconn, converted.text, None, values, (types, formats))
        results = await _results(conn)
    _check(results, tx.encoding)
    res = results[0]
    if result == ROWCOUNT:
        if res.status == _TUPLES_OK:
            return res.ntuples
        count = res.command_tuples
        return -1 if count is None else count
    if res.status != _TUPLES_OK:
        status = res.command_status
        detail = f" (command status: {status.decode()})" if status else ""
        raise e.ProgrammingError(f"the last operation didn't produce records{detail}")
    tx.set_pgresult(res)
    if result == ONE:
        return tx.load_row(0, tuple) if res.ntuples else None
    return tx.load_rows(0, res.ntuples, tuple)


def send(
    pgconn: PGconn,
    text: bytes,
    name: bytes | None,
    values: Sequence[Buffer | None],
    types: tuple[Sequence[int] | None, Sequence[pq.Format] | None],
) -> None:
    """Send one statement: `text`, or the statement prepared as `name` (`types`: oids, formats).

    The one place a statement leaves here (the benchmarks' statement counter wraps it).
    """
    oids, formats = types
    if name is None:
        pgconn.send_query_params(text, values, param_types=oids, param_formats=formats)
    else:
        pgconn.send_query_prepared(name, values, param_formats=formats)


def _name_gone(results: list[PGresult], pgconn: PGconn) -> bool:
    """Whether the server refused a prepared statement, on an idle
    connection, because no statement of its name exists (so nothing ran)."""
    if len(results) != 1 or results[0].status != _FATAL_ERROR:
        return False
    code = results[0].error_field(pq.DiagnosticField.SQLSTATE)
    return code == _NAME_GONE.encode() and pgconn.transaction_status == pq.TransactionStatus.IDLE


def _check(results: list[PGresult], encoding: str) -> None:
    """Raise what psycopg's cursor raises for `results` (see its `_check_results`)."""
    if not results:
        raise e.InternalError("got no result from the query")
    for res in results:
        status = res.status
        if status in _FINE:
            continue
        if status == _FATAL_ERROR:
            raise e.error_from_result(res, encoding=encoding)
        if status in _COPY:
            raise e.ProgrammingError("COPY cannot be used with this method; use copy() instead")
        raise e.InternalError(f"unexpected result status from query: {pq.ExecStatus(status).name}")


async def _results(conn: AsyncConnection[Any]) -> list[PGresult]:
    """The results of the statement just sent on `conn`, cancelling it if interrupted."""
    pgconn = conn.pgconn
    try:
        return await _communicate(pgconn)
    except _INTERRUPTED:
        # As psycopg's own wait does: a statement left running would leave
        # the connection ACTIVE, so the server is asked to cancel it, and
        # the connection closed if that does not end it soon.
        if pgconn.transaction_status == _ACTIVE:
            try:
                try:
                    await conn.cancel_safe(timeout=5.0)
                except Exception as ex:
                    logger.warning("query cancellation failed: %s", ex)
                async with asyncio.timeout(5.0):
                    await _communicate(pgconn)
            except TimeoutError:
                logger.warning("query not terminated after cancellation: closing connection")
                pgconn.finish()
            except BaseException as ex:
                pgconn.finish()
                if not isinstance(ex, Exception):
                    raise
        raise


async def _communicate(pgconn: PGconn) -> list[PGresult]:
    """Flush what was sent and collect every result, waiting on the socket in the loop."""
    loop = asyncio.get_running_loop()
    fd = pgconn.socket
    while pgconn.flush():  # only a statement larger than the socket's buffer
        await _ready(loop, fd, write=True)
        pgconn.consume_input()
    results: list[PGresult] = []
    while True:
        try:
            while pgconn.is_busy():
                await _ready(loop, fd)
                pgconn.consume_input()
        except e.DatabaseError:
            # An error the server sent before dropping the connection (an
            # idle-in-transaction timeout, say) is the one to raise.
            if any(res.status == _FATAL_ERROR for res in results):
                break
            raise
        while notify := pgconn.notifies():
            if pgconn.notify_handler:
                pgconn.notify_handler(notify)
        res = pgconn.get_result()
        if res is None:
            break
        results.append(res)
        if res.status in _COPY:
            break
    return results


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, write: bool = False) -> None:
    """Until `fd` is readable (or also writable, with `write`)."""
    future = loop.create_future()
    loop.add_reader(fd, _wake, future)
    if write:
        loop.add_writer(fd, _wake, future)
    try:
        await future
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)
