"""A damaged snapshot is never trusted, on SQLite and on PostgreSQL.

A snapshot is a cache of a session's fold. Whatever happens to its rows (a
bit flipped, text cut short, fields swapped, a row moved to another
position, another session's row, valid JSON whose text was altered: "buy
mild" where the log says "buy milk"), opening the session gives the model
exactly the request a full replay of the log gives, the next run completes,
and the damaged rows are replaced by a snapshot that reads again.

The property test corrupts the rows of one session at random, over a
thousand seeded cases per store, reopening the session and running it once
per case; after each case the log is cut back to where it was, so every
case starts from the same session.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from pg import open_durable
from taskloom import Agent, Runtime, Session, ToolEffect, tool
from taskloom.backends import SnapshotStore
from taskloom.log import read_snapshot
from taskloom.models import ScriptedModel, reply
from taskloom.results import RunStatus

CASES = 1_000
EVERY = 7
"""Entries between two snapshot rows: the session below has four."""

Rows = list[tuple[int, str]]


@tool(effect=ToolEffect.READ_ONLY)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(*replies: Any) -> Agent:
    return Agent("main", ScriptedModel(list(replies)), tools=[add])


def _rounds(n: int, text: str) -> list[Any]:
    return [*(reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(n)), reply(text)]


async def _grow(runtime: Runtime) -> Session[Any, Any]:
    """A session of about forty entries: two runs of tool rounds and a steer."""
    session = await runtime.create_session(
        _agent(*_rounds(6, "noted: buy milk"), *_rounds(5, "and bread"))
    )
    assert (await session.run("buy milk")).status is RunStatus.COMPLETED
    await session.steer("also eggs, not mild cheese")
    assert (await session.run("what else?")).status is RunStatus.COMPLETED
    return session


def _snapshots(runtime: Runtime) -> SnapshotStore:
    snapshots = runtime.snapshots
    assert snapshots is not None
    return snapshots


async def _put_rows(runtime: Runtime, session_id: str, rows: Rows) -> None:
    snapshots = _snapshots(runtime)
    await snapshots.delete(session_id)
    for position, text in rows:
        await snapshots.write(session_id, position, text)


async def _cut_log(runtime: Runtime, schema: str, session_id: str, length: int) -> None:
    """Remove the entries after `length` (the test's next case starts from there)."""
    db: Any = _snapshots(runtime).database  # type: ignore[attr-defined]
    if schema == "-":
        sql = "DELETE FROM taskloom_entries WHERE session_id = ? AND position > ?"
        await db.run(lambda conn: conn.execute(sql, (session_id, length)))
    else:
        async with db.connection() as conn:
            await conn.execute(
                f"DELETE FROM {db.table('entries')} WHERE session_id = %s AND position > %s",
                (session_id, length),
            )


async def _next_request(runtime: Runtime, session_id: str) -> tuple[list[Any], int, RunStatus]:
    """(the messages of the next run's one request, the base the session
    opened from, the run's status)."""
    model = ScriptedModel([reply("done")])
    session = await runtime.open_session(session_id, Agent("main", model, tools=[add]))
    base = session.journal.log.base
    result = await session.run("next")
    assert len(model.requests) == 1
    return [m.to_dict() for m in model.requests[0].messages], base, result.status


class _Session:
    """One grown session, its twin, its rows and the request a full replay gives."""

    def __init__(self, store: Any, schema: str) -> None:
        self.store, self.schema = store, schema
        self.runtime = Runtime(store=store, snapshot_every=EVERY)
        self.full = Runtime(store=store, snapshot_every=0)

    async def start(self) -> None:
        session = await _grow(self.runtime)
        twin = await _grow(self.runtime)
        self.id = session.id
        self.length = session.journal.log.position
        self.rows = await _snapshots(self.runtime).read(self.id)
        self.twin_rows = await _snapshots(self.runtime).read(twin.id)
        assert len(self.rows) >= 4 and all(_redump(json.loads(t)) == t for _, t in self.rows)
        self.expected, base, status = await _next_request(self.full, self.id)
        assert base == 0 and status is RunStatus.COMPLETED
        assert any("buy milk" in json.dumps(m) for m in self.expected)
        await _cut_log(self.runtime, self.schema, self.id, self.length)

    async def attempt(self, rows: Rows) -> tuple[bool, RunStatus, int, Rows]:
        """Put `rows`, open and run once: (whether the model's request was
        the full replay's, the run's status, the base the session opened
        from, the rows afterwards); the log is cut back afterwards."""
        await _put_rows(self.runtime, self.id, rows)
        try:
            messages, base, status = await _next_request(self.runtime, self.id)
            after = await _snapshots(self.runtime).read(self.id)
            return messages == self.expected, status, base, after
        finally:
            await _cut_log(self.runtime, self.schema, self.id, self.length)

    async def check(self, rows: Rows) -> tuple[int, Rows]:
        """`attempt`, asserting the request and the run: (base, rows afterwards)."""
        right, status, base, after = await self.attempt(rows)
        assert status is RunStatus.COMPLETED
        assert right, "the model's request differs from the full replay's"
        return base, after


def _redump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# ------------------------------------------------------------ regressions


@pytest.fixture
async def grown(store_url: tuple[str, str]) -> Any:
    url, schema = store_url
    store = open_durable(url, schema)
    session = _Session(store, schema)
    await session.start()
    yield session
    await session.runtime.close()


async def test_a_snapshot_altered_to_buy_mild_is_not_trusted(
    grown: _Session, caplog: pytest.LogCaptureFixture
) -> None:
    altered = [(p, t.replace("buy milk", "buy mild")) for p, t in grown.rows]
    assert altered != grown.rows and all(json.loads(t) for _, t in altered)
    with caplog.at_level(logging.WARNING, logger="taskloom"):
        base, after = await grown.check(altered)
    assert base == 0  # replayed in full: the model saw "buy milk" (check() compared)
    rejected = [r.getMessage() for r in caplog.records if "snapshot" in r.getMessage()]
    assert rejected and all(grown.id in m for m in rejected)
    assert not any("milk" in m or "mild" in m for m in rejected)
    # Rewritten: one fresh row that reads again, none of the altered ones.
    assert [t for _, t in after if "buy mild" in t] == []
    snapshot = read_snapshot(after, session_id=grown.id)
    assert snapshot is not None and snapshot.position == after[-1][0] > grown.length


async def test_a_garbled_or_truncated_snapshot_does_not_fail_the_run(grown: _Session) -> None:
    # The messages inside a row no longer decode, while the row itself does.
    inner = [(p, t.replace('buy milk\\"', "buy milk", 1)) for p, t in grown.rows]
    assert inner != grown.rows and all(json.loads(t) for _, t in inner)
    cut = [(p, t[: len(t) // 2]) for p, t in grown.rows]
    last_cut = [*grown.rows[:-1], (grown.rows[-1][0], grown.rows[-1][1][:-40])]
    for rows in (inner, cut, last_cut):
        base, after = await grown.check(rows)
        assert base == 0
        snapshot = read_snapshot(after, session_id=grown.id)
        assert snapshot is not None and snapshot.position == after[-1][0]


async def test_a_row_of_bytes_that_are_not_utf8_is_rejected_on_sqlite(tmp_path: Any) -> None:
    session = _Session(open_durable(f"sqlite:///{tmp_path / 'bytes.db'}", "-"), "-")
    await session.start()
    position, text = session.rows[-1]
    raw = text.encode().replace(b"buy milk", b"buy m\xffk")
    db: Any = _snapshots(session.runtime).database  # type: ignore[attr-defined]
    sql = (
        "UPDATE taskloom_snapshots SET data = CAST(? AS TEXT) WHERE session_id = ? AND position = ?"
    )
    await db.run(lambda conn: conn.execute(sql, (raw, session.id, position)))
    messages, base, status = await _next_request(session.runtime, session.id)
    assert status is RunStatus.COMPLETED and messages == session.expected and base == 0
    await session.runtime.close()


# ------------------------------------------------------------ corruptions at random


def _flip(rng: random.Random, text: str) -> str:
    i = rng.randrange(len(text))
    code = ord(text[i]) ^ (1 << rng.randrange(8))
    # PostgreSQL text holds no NUL: flip another bit instead.
    code = code or ord(text[i]) ^ 1
    return text[:i] + chr(code) + text[i + 1 :]


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _set(value: Any, path: tuple[Any, ...], new: Any) -> None:
    _get(value, path[:-1])[path[-1]] = new


def _swap_fields(rng: random.Random, text: str) -> str:
    row = json.loads(text)
    paths = _leaves(row)
    a, b = rng.sample(paths, 2)
    va, vb = _get(row, a), _get(row, b)
    _set(row, a, vb)
    _set(row, b, va)
    return _redump(row)


def _alter_text(rng: random.Random, text: str) -> str:
    """Valid JSON, checksum untouched, one string of the history or state altered."""
    row = json.loads(text)
    inner = json.loads(row["row"]["messages"])
    body = row["row"]
    targets = [(inner, p) for p in _leaves(inner)] + [(body, p) for p in _leaves(body)]
    strings = [(doc, p) for doc, p in targets if isinstance(_get(doc, p), str) and _get(doc, p)]
    doc, path = rng.choice(strings)
    old = _get(doc, path)
    if "buy milk" in old:
        new = old.replace("buy milk", "buy mild")
    else:
        i = rng.randrange(len(old))
        new = old[:i] + ("x" if old[i] != "x" else "y") + old[i + 1 :]
    _set(doc, path, new)
    if doc is inner:
        row["row"]["messages"] = _redump(inner)
    return _redump(row)


def _one_row(change: Callable[[random.Random, str], str]) -> Callable[..., Rows]:
    def corrupt(rng: random.Random, rows: Rows, twin: Rows) -> Rows:
        if not rows:
            return rows
        i = rng.randrange(len(rows))
        out = list(rows)
        try:
            text = change(rng, rows[i][1])
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            # A row an earlier corruption of this case left unreadable.
            text = rows[i][1][:-1]
        out[i] = (rows[i][0], text)
        return out

    return corrupt


def _wrong_position(rng: random.Random, rows: Rows, twin: Rows) -> Rows:
    taken = {p for p, _ in rows}
    i = rng.randrange(len(rows))
    position = rng.choice([p for p in range(1, rows[-1][0] + 20) if p not in taken])
    out = [r for j, r in enumerate(rows) if j != i] + [(position, rows[i][1])]
    return sorted(out)


def _swap_rows(rng: random.Random, rows: Rows, twin: Rows) -> Rows:
    i, j = rng.sample(range(len(rows)), 2)
    out = list(rows)
    out[i], out[j] = (rows[i][0], rows[j][1]), (rows[j][0], rows[i][1])
    return out


def _duplicate_row(rng: random.Random, rows: Rows, twin: Rows) -> Rows:
    i, j = rng.sample(range(len(rows)), 2)
    out = list(rows)
    out[j] = (rows[j][0], rows[i][1])
    return out


def _drop_row(rng: random.Random, rows: Rows, twin: Rows) -> Rows:
    i = rng.randrange(len(rows))
    return [r for j, r in enumerate(rows) if j != i]


def _other_session(rng: random.Random, rows: Rows, twin: Rows) -> Rows:
    by_position = dict(twin)
    i = rng.randrange(len(rows))
    out = list(rows)
    out[i] = (rows[i][0], by_position.get(rows[i][0], twin[-1][1]))
    return out


def _other_version(rng: random.Random, text: str) -> str:
    row = json.loads(text)
    row["v"] = rng.choice([1, 3, 5, "4", None])
    return _redump(row)


def _garbage(rng: random.Random, text: str) -> str:
    size = rng.randrange(0, 60)
    return rng.choice(["", "{", "null", "[]", '{"v":4,"at":1}']) + "".join(
        chr(rng.randrange(32, 127)) for _ in range(size)
    )


def _splice(rng: random.Random, text: str) -> str:
    i = rng.randrange(len(text))
    j = min(len(text), i + rng.randrange(1, 40))
    return text[:i] + "".join(rng.choice('{}[]",:0a\\ ') for _ in range(j - i)) + text[j:]


KINDS: dict[str, Callable[..., Rows]] = {
    "bit flip": _one_row(_flip),
    "truncation": _one_row(lambda rng, t: t[: rng.randrange(len(t))]),
    "garbled span": _one_row(_splice),
    "garbage row": _one_row(_garbage),
    "swapped fields": _one_row(_swap_fields),
    "altered text, valid JSON": _one_row(_alter_text),
    "wrong position": _wrong_position,
    "swapped rows": _swap_rows,
    "duplicated row": _duplicate_row,
    "dropped row": _drop_row,
    "another session's row": _other_session,
    "another version": _one_row(_other_version),
}


async def test_random_corruptions_never_give_a_wrong_state_or_a_failed_run(
    grown: _Session, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(37)
    kinds: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    wrong = failed = unrepaired = 0
    failures: list[str] = []
    names = list(KINDS)
    last = grown.rows[-1][0]
    caplog.set_level(logging.WARNING, logger="taskloom")
    for case in range(CASES):
        rows = grown.rows
        # One corruption, now and then two or three at once.
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            kind = rng.choice(names)
            if len(rows) < 2:
                break
            kinds[kind] += 1
            rows = KINDS[kind](rng, rows, grown.twin_rows)
        try:
            right, status, base, after = await grown.attempt(rows)
        except Exception as exc:
            failed += 1
            failures.append(f"case {case}: {type(exc).__name__}")
            continue
        if status is not RunStatus.COMPLETED:
            failed += 1
            failures.append(f"case {case}: {status}")
        if not right:
            wrong += 1
            failures.append(f"case {case}: a request unlike the full replay's")
        outcomes[
            "whole snapshot" if base == last else "full replay" if base == 0 else "part of it"
        ] += 1
        # Whatever was damaged is gone: the rows read as one chain again.
        snapshot = read_snapshot(after, session_id=grown.id)
        if snapshot is None or snapshot.position != after[-1][0]:
            unrepaired += 1
    rejected = [r.getMessage() for r in caplog.records if "snapshot" in r.getMessage()]
    print(
        f"\n{CASES} cases: {wrong} wrong states, {failed} failed runs, {unrepaired} not rewritten"
    )
    print("corruptions: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    print("opened from: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())))
    print(f"warnings of a rejected snapshot: {len(rejected)}")
    assert wrong == failed == unrepaired == 0, failures[:10]
    assert not any("milk" in m or "mild" in m or "bread" in m for m in rejected)
    assert outcomes["full replay"] > CASES // 2
