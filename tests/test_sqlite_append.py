"""The SQLite append is one statement whose work does not grow with the log.

Counted in SQLite's own virtual-machine steps (its progress handler), not
in time: an append at position 3,000 must cost what one at position 10
does, and refusals must still say why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from taskloom.backends import Fence, SessionMeta
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
