"""The SQLite append is one statement whose work does not grow with the log.

Counted in SQLite's own virtual-machine steps (its progress handler), not
in time: an append at position 3,000 must cost what one at position 10
does, and refusals must still say why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from taskloom.backends import BackgroundNotice, Fence, SessionMeta
from taskloom.backends.sqlite import SQLiteBackend
from taskloom.entries import Entry
from taskloom.errors import SessionNotFound, StaleLeaseError


async def _append_steps(backend: SQLiteBackend, session_id: str) -> int:
    """SQLite's virtual-machine steps for one append to `session_id`, on the store's own connection."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    database = backend.database
    # On the worker, behind whatever is queued there (a checkpoint): only the append is counted.
    await database.run(lambda conn: conn.set_progress_handler(count, 1), inline=False)
    try:
        await backend.store.append(session_id, Entry("note", {}))
    finally:
        await database.run(lambda conn: conn.set_progress_handler(None, 1), inline=False)
    return steps


async def test_an_appends_work_does_not_grow_with_the_log(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "cost.db")
    store = backend.store
    try:
        for sid, n in (("short", 10), ("long", 3000)):
            await store.create(SessionMeta(sid, "a"))
            for i in range(n):
                await store.append(sid, Entry("note", {"i": i}))
        short = await _append_steps(backend, "short")
        long = await _append_steps(backend, "long")
    finally:
        await backend.close()
    print(f"VM steps of one append: after 10 entries {short}, after 3,000 entries {long}")
    assert 0 < long <= short * 1.5


async def test_a_refused_append_says_why_and_writes_nothing(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "refused.db")
    store = backend.store
    try:
        with pytest.raises(SessionNotFound):
            await store.append("nobody", Entry("note", {}))
        await store.create(SessionMeta("s", "a"))
        lease = await backend.leases.acquire("s", "me", ttl=60)
        assert lease is not None
        fence = Fence(lease.key, lease.generation)
        assert await store.append("s", Entry("note", {"n": 1}), fence=fence) == 1
        taken = await backend.leases.take_over(lease, "other", ttl=60)
        assert taken is not None
        with pytest.raises(StaleLeaseError, match=f"current {taken.generation}"):
            await store.append("s", Entry("note", {"n": 2}), fence=fence)
        assert await store.append("s", Entry("note", {"n": 3})) == 2
        assert [e.data for e in await store.load("s")] == [{"n": 1}, {"n": 3}]
    finally:
        await backend.close()


async def _appended(backend: SQLiteBackend, append: Any) -> tuple[Any, list[str]]:
    """What `append()` returned, and the statements it ran on the store's
    connection (not the worker's own pragmas around the tracing calls)."""
    ran: list[str] = []
    database = backend.database
    await database.run(lambda conn: conn.set_trace_callback(ran.append), inline=False)
    try:
        result = await append()
    finally:
        await database.run(lambda conn: conn.set_trace_callback(None), inline=False)
    return result, [" ".join(sql.split()) for sql in ran if not sql.startswith("PRAGMA")]


async def test_an_append_placed_where_it_lands_is_one_single_row_insert(tmp_path: Path) -> None:
    # A journal places each entry at the position it expects (Entry.position):
    # when that is the next one, the append is a plain INSERT ... VALUES,
    # which SQLite runs without the temporary table an INSERT ... SELECT
    # from the same table costs it.
    backend = SQLiteBackend(tmp_path / "placed.db")
    store = backend.store
    inbox = backend.inbox
    try:
        await store.create(SessionMeta("s", "a"))
        lease = await backend.leases.acquire("s", "me", ttl=60)
        assert lease is not None
        fence = Fence(lease.key, lease.generation)
        assert await store.append("s", Entry("note", {"n": 1}), fence=fence) == 1
        position, ran = await _appended(
            backend, lambda: store.append("s", Entry("note", {"n": 2}, None, 2), fence=fence)
        )
        assert position == 2
        assert len(ran) == 1 and ran[0].startswith("INSERT INTO taskloom_entries")
        assert " VALUES " in ran[0] and " SELECT ?1," not in ran[0]
        # The session is checked by the entries' foreign key, not read again.
        assert "taskloom_sessions" not in ran[0]
        # With the inbox read beside it: while nothing is pending, the same
        # single-row INSERT, returning nothing (RETURNING costs SQLite a
        # temporary table per statement).
        (position, pending), ran = await _appended(
            backend,
            lambda: store.append_then_pending(
                "s", Entry("note", {"n": 3}, None, 3), inbox, fence=fence
            ),
        )
        assert (position, pending) == (3, [])
        assert len(ran) == 1 and " VALUES " in ran[0] and "RETURNING" not in ran[0]
        # A pending notice refuses the placed INSERT (nothing written); the
        # general append lands the entry and returns the notice with it.
        notice = BackgroundNotice("n1", "a1", "shell", "exit 0")
        assert await inbox.push("s", notice)
        (position, pending), ran = await _appended(
            backend,
            lambda: store.append_then_pending(
                "s", Entry("note", {"n": 4}, None, 4), inbox, fence=fence
            ),
        )
        assert (position, [n.id for n in pending]) == (4, ["n1"])
        assert len(ran) == 2 and " VALUES " in ran[0] and "RETURNING" in ran[1]
        assert [e.data for e in await store.load("s")] == [{"n": i} for i in range(1, 5)]
    finally:
        await backend.close()


@pytest.mark.parametrize("then_pending", [False, True])
async def test_a_placed_append_elsewhere_or_refused_is_the_general_one(
    tmp_path: Path, then_pending: bool
) -> None:
    """An expected position that is not the next one (behind: someone else
    appended; ahead: it would leave a gap) lands at the next one; a refusal
    says why and writes nothing, as an append without a position does."""
    backend = SQLiteBackend(tmp_path / "elsewhere.db")
    store = backend.store
    inbox = backend.inbox

    async def append(sid: str, n: int, at: int, fence: Fence | None = None) -> int:
        entry = Entry("note", {"n": n}, None, at)
        if not then_pending:
            return await store.append(sid, entry, fence=fence)
        position, pending = await store.append_then_pending(sid, entry, inbox, fence=fence)
        assert [notice.id for notice in pending] == ["n1"]
        return position

    try:
        with pytest.raises(SessionNotFound):
            await append("nobody", 0, 1)
        await store.create(SessionMeta("s", "a"))
        await inbox.push("s", BackgroundNotice("n1", "a1", "shell", "exit 0"))
        assert await append("s", 1, 1) == 1
        assert await append("s", 2, 1) == 2  # behind
        assert await append("s", 3, 7) == 3  # ahead
        lease = await backend.leases.acquire("s", "me", ttl=60)
        assert lease is not None
        fence = Fence(lease.key, lease.generation)
        assert await append("s", 4, 4, fence) == 4
        taken = await backend.leases.take_over(lease, "other", ttl=60)
        assert taken is not None
        with pytest.raises(StaleLeaseError, match=f"current {taken.generation}"):
            await append("s", 5, 5, fence)
        assert await append("s", 6, 5, Fence(taken.key, taken.generation)) == 5
        assert [e.data["n"] for e in await store.load("s")] == [1, 2, 3, 4, 6]
        assert [e.position for e in await store.load("s")] == [1, 2, 3, 4, 5]
    finally:
        await backend.close()
