"""What the SQL backends share: JSON as they store it, migrations, queries.

Each component (`"sessions"`, `"leases"`, ...) registers its migrations with
its database's `require`; `taskloom_schema_version` records how far each one
got. A migration is a tuple of statements, applied in order, never edited
once released: a schema change is a new migration at the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..entries import Entry
from ..errors import CorruptEntry
from ..results import BudgetLeft
from ._activities import BackgroundActivity, BackgroundNotice
from ._leases import Clock, Lease, system_clock

Migration = tuple[str, ...]
"""The statements of one schema step, applied in one transaction with the others pending."""


def _json_default(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _encoder() -> Callable[[object], str]:
    """`json.dumps(value, separators=(",", ":"), allow_nan=False, default=...)`,
    its encoder built once rather than at every call (an append's JSON costs
    a third less). Without the C encoder, the pure one built once."""
    from json import encoder

    make = getattr(encoder, "c_make_encoder", None)
    if make is None:
        return json.JSONEncoder(
            separators=(",", ":"), allow_nan=False, default=_json_default
        ).encode
    # Arguments: markers (None: no cycle check; a cycle ends in RecursionError,
    # refused like nesting too deep), default, string encoder, indent,
    # separators, sort_keys, skipkeys, allow_nan.
    chunks = make(
        None, _json_default, encoder.encode_basestring_ascii, None, ":", ",", False, False, False
    )

    def encode(value: object) -> str:
        if isinstance(value, str):
            return encoder.encode_basestring_ascii(value)
        return "".join(chunks(value, 0))

    return encode


_encode = _encoder()


def dump_json(value: object) -> str:
    """`value` as compact JSON text, exactly as the durable stores keep it.

    ASCII-only on purpose: escaping keeps every Python string storable,
    including lone surrogates and NUL, which neither SQLite's UTF-8 text nor
    PostgreSQL text could otherwise take. NaN and infinities are refused
    because no JSON reader is obliged to accept them; so is nesting too deep
    to read back. Either way the `ValueError` says what was refused.
    """
    try:
        return _encode(value)
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


class SQLLeases:
    """`Leases` on a SQL database, one statement per operation; a subclass
    gives the statements (named parameters) and the `"leases"` migrations.

    A released lease keeps its row (holder cleared): the row also carries the
    key's generation, which must keep rising across releases for fencing.
    Time comes from the clock, passed in as a parameter, never read from the
    database, so every backend and every test agrees on "now".
    """

    MIGRATIONS: tuple[Migration, ...]
    _acquire: str
    _renew: str
    _release: str
    _take_over: str
    _current: str

    def __init__(self, database: Any, *, clock: Clock = system_clock) -> None:
        self.database = self._db = database
        self._clock = clock
        database.require("leases", self.MIGRATIONS)

    async def acquire(self, key: str, holder: str, ttl: float) -> Lease | None:
        now = self._clock()
        params = {"key": key, "holder": holder, "expires_at": now + ttl, "now": now}
        rows = await self._db.fetchall(self._acquire, params)
        return Lease(key, holder, int(rows[0][0]), now + ttl) if rows else None

    async def renew(self, lease: Lease, ttl: float) -> Lease | None:
        now = self._clock()
        params = {"key": lease.key, "generation": lease.generation, "expires_at": now + ttl}
        # Ahead of the holder's other work: a renewal queued behind its own
        # children's writes could come too late and lose the lease.
        if not await self._db.fetchall(self._renew, {**params, "now": now}, urgent=True):
            return None
        return Lease(lease.key, lease.holder, lease.generation, now + ttl)

    async def release(self, lease: Lease) -> None:
        # Ahead of queued writes too: a release waiting behind them locks the
        # session for everyone else until it lands.
        params = {"key": lease.key, "generation": lease.generation}
        await self._db.execute(self._release, params, urgent=True)

    async def take_over(self, lease: Lease, holder: str, ttl: float) -> Lease | None:
        expires_at = self._clock() + ttl
        params = {"key": lease.key, "generation": lease.generation, "old": lease.holder}
        rows = await self._db.fetchall(
            self._take_over, {**params, "holder": holder, "expires_at": expires_at}
        )
        return Lease(lease.key, holder, int(rows[0][0]), expires_at) if rows else None

    async def current(self, key: str) -> Lease | None:
        rows = await self._db.fetchall(self._current, {"key": key, "now": self._clock()})
        return Lease(key, rows[0][0], int(rows[0][1]), float(rows[0][2])) if rows else None


class SQLBudgets:
    """A `BudgetLedger` on a SQL database's `table`: a charge is one UPDATE,
    whose condition holds against every other process (SQLite has one writer
    at a time; under PostgreSQL's READ COMMITTED a waiting UPDATE re-checks
    its WHERE against the row its predecessor committed). `colon_params`
    writes the statements with `:name` parameters (SQLite), else `%(name)s`."""

    MIGRATIONS: tuple[Migration, ...]
    GREATEST = "GREATEST"

    def __init__(self, database: Any, table: str, *, colon_params: bool = False) -> None:
        self.database = self._db = database
        database.require("budgets", self.MIGRATIONS)
        left = "tokens_limit - tokens_used, usd_limit - usd_used"
        most = self.GREATEST
        statements: tuple[str, ...] = (
            f"INSERT INTO {table} (tree_id, tokens_limit, usd_limit)"
            " VALUES (%(id)s, %(t)s, %(u)s) ON CONFLICT (tree_id) DO NOTHING",
            f"""UPDATE {table} SET tokens_used = tokens_used + %(t)s, usd_used = usd_used + %(u)s
            WHERE tree_id = %(id)s
              AND (tokens_limit IS NULL OR tokens_used + %(t)s <= tokens_limit)
              AND (usd_limit IS NULL OR usd_used + %(u)s <= usd_limit)
            RETURNING {left}""",
            # Never below nothing spent: a refund gives back at most what was charged.
            f"UPDATE {table} SET tokens_used = {most}(tokens_used - %(t)s, 0),"
            f" usd_used = {most}(usd_used - %(u)s, 0) WHERE tree_id = %(id)s",
            f"SELECT {left} FROM {table} WHERE tree_id = %(id)s",
        )
        if colon_params:
            statements = tuple(re.sub(r"%\((\w+)\)s", r":\1", s) for s in statements)
        self._open, self._charge, self._refund, self._left = statements

    async def open(self, tree_id: str, tokens: int | None, nano_usd: int | None) -> None:
        await self._db.execute(self._open, {"id": tree_id, "t": tokens, "u": nano_usd})

    async def charge(self, tree_id: str, tokens: int, nano_usd: int) -> BudgetLeft | None:
        # Every row is read: an UPDATE ... RETURNING stepped only once stays
        # open, and with it (in SQLite's autocommit) the write transaction.
        rows = await self._db.fetchall(self._charge, {"id": tree_id, "t": tokens, "u": nano_usd})
        return BudgetLeft(rows[0][0], rows[0][1]) if rows else None

    async def refund(self, tree_id: str, tokens: int, nano_usd: int) -> None:
        await self._db.execute(self._refund, {"id": tree_id, "t": tokens, "u": nano_usd})

    async def left(self, tree_id: str) -> BudgetLeft | None:
        rows = await self._db.fetchall(self._left, {"id": tree_id})
        return BudgetLeft(rows[0][0], rows[0][1]) if rows else None


def _same(value: Any) -> Any:
    return value


class _Background:
    """A background part on a SQL database; a subclass gives the `"background"`
    migrations, the statements (named parameters) and how bodies are stored."""

    MIGRATIONS: tuple[Migration, ...]
    _sql_clear: str
    _dump: Callable[[Any], Any] = staticmethod(_same)
    _load: Callable[[Any], Any] = staticmethod(_same)

    def __init__(self, database: Any) -> None:
        self.database = self._db = database
        database.require("background", self.MIGRATIONS)

    async def clear(self, session: str) -> None:
        await self._db.execute(self._sql_clear, {"session": session})


class SQLActivities(_Background):
    """`ActivityRegistry.list`, `renew`, `remove` and `clear` on a SQL database
    (the subclass adds `add`); `clock` measures leases."""

    _sql_list: str
    _sql_renew: str
    _sql_remove: str

    def __init__(self, database: Any, *, clock: Clock = system_clock) -> None:
        super().__init__(database)
        self._clock = clock

    async def list(self, session: str) -> list[BackgroundActivity]:
        rows = await self._db.fetchall(self._sql_list, {"session": session, "now": self._clock()})
        return [BackgroundActivity.from_dict(self._load(b)) for (b,) in rows]

    async def renew(self, session: str, activity_id: str, lease: float) -> bool:
        now = self._clock()
        params = {"session": session, "id": activity_id, "expires_at": now + lease, "now": now}
        return int(await self._db.execute(self._sql_renew, params)) == 1

    async def remove(self, session: str, activity_id: str) -> None:
        await self._db.execute(self._sql_remove, {"session": session, "id": activity_id})


class SQLNotices(_Background):
    """A `NoticeInbox` on a SQL database. Acknowledged notices stay (marked)
    until `clear`, so a late duplicate of a report the model already saw is
    still recognised and refused."""

    _sql_push: str
    _sql_pending: str
    _sql_pending_column: str
    _sql_ack: str
    _dump_ids: Callable[[list[str]], Any] = staticmethod(_same)

    async def push(self, session: str, notice: BackgroundNotice) -> bool:
        # The unique key decides the race: exactly one writer of an id
        # inserts, whichever connection or process it is on.
        body = self._dump(notice.to_dict())
        params = {"session": session, "id": notice.id, "body": body}
        return int(await self._db.execute(self._sql_push, params)) == 1

    async def pending(self, session: str) -> list[BackgroundNotice]:
        rows = await self._db.fetchall(self._sql_pending, {"session": session})
        return self.decode(rows)

    def pending_column(self, database: object) -> str | None:
        """A scalar SQL expression of the session's pending notices, for a
        store on `database` to return beside its own columns (one statement);
        None when this inbox is on another database. `{session}` in it stands
        for the session id: the caller puts its own parameter there.
        `from_column` reads its value."""
        return self._sql_pending_column if database is self._db else None

    def from_column(self, value: Any) -> list[BackgroundNotice]:
        """The notices `pending_column`'s value holds, in `pending`'s order."""
        raise NotImplementedError

    def decode(self, rows: Iterable[Sequence[Any]]) -> list[BackgroundNotice]:
        """The notices of rows of `pending`'s statement, in their order."""
        load = self._load
        return [BackgroundNotice.from_dict(load(b)) for (b,) in rows]

    async def ack(self, session: str, ids: Iterable[str]) -> None:
        wanted = list(ids)
        if wanted:
            params = {"session": session, "ids": self._dump_ids(wanted)}
            await self._db.execute(self._sql_ack, params)
