"""The lease of a run with a deadline: its release is bounded, an outer hold's is not.

A run with a deadline releases the lease it took without waiting past
deadline + STORE_GRACE; a run inside an outer `session.hold()` uses the
hold's lease, and the hold's exit still gives it up before returning,
however late that is.
"""

from __future__ import annotations

import asyncio

from taskloom import Agent, RunOptions, RunStatus, Runtime
from taskloom.backends.memory import MemoryStore
from taskloom.loop.ports import STORE_GRACE
from taskloom.models import ScriptedModel, reply


def _slow_release(store: MemoryStore) -> MemoryStore:
    """A store whose lease release takes a moment, as one over a network does."""
    release = store.leases.release

    async def slowly(lease: object) -> None:
        await asyncio.sleep(0.05)
        await release(lease)  # type: ignore[arg-type]

    store.leases.release = slowly  # type: ignore[method-assign]
    return store


async def test_an_outer_hold_gives_the_lease_up_on_exit_after_a_run_with_a_deadline() -> None:
    store = _slow_release(MemoryStore())
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("a", ScriptedModel([reply("hi")])))
        key = f"session:{session.id}"
        async with session.hold():
            result = await session.run("x", options=RunOptions(deadline=0.01))
            assert result.status is RunStatus.COMPLETED
            await asyncio.sleep(STORE_GRACE + 0.1)  # past the run's own bound
            assert await store.leases.current(key) is not None  # still the hold's
        assert await store.leases.current(key) is None  # given up, not left to finish


async def test_a_run_with_a_deadline_gives_its_own_lease_up_before_returning() -> None:
    store = _slow_release(MemoryStore())
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(Agent("a", ScriptedModel([reply("hi")])))
        result = await session.run("x", options=RunOptions(deadline=30))
        assert result.status is RunStatus.COMPLETED
        assert await store.leases.current(f"session:{session.id}") is None
