"""A run on the in-process store gives its lease up as it ends, and a
replaced or failing release there is still bounded and logged as on a
durable store."""

from __future__ import annotations

import asyncio
import logging

import pytest

from taskloom import Agent, RunStatus, Runtime
from taskloom.backends import Lease, session_lease_key
from taskloom.backends.memory import MemoryStore
from taskloom.errors import StoreUnavailable
from taskloom.models import FunctionModel, reply


def _agent() -> Agent:
    return Agent("a", FunctionModel(lambda request: reply("done")))


async def test_the_lease_is_free_as_the_run_returns() -> None:
    store = MemoryStore()
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(_agent())
        key = session_lease_key(session.id)
        assert (await session.run("x")).status is RunStatus.COMPLETED
        assert await store.leases.current(key) is None
        other = await runtime.open_session(session.id, _agent())
        assert (await other.run("y")).status is RunStatus.COMPLETED
        assert await store.leases.current(key) is None


async def test_a_replaced_release_that_fails_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()

    async def fails(lease: Lease) -> None:
        raise StoreUnavailable("the store stopped answering")

    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(_agent())
        store.leases.release = fails  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, logger="taskloom"):
            assert (await session.run("x")).status is RunStatus.COMPLETED
        assert f"releasing the lease of session {session.id} failed" in caplog.text


async def test_a_replaced_release_that_stalls_does_not_hold_the_run_up() -> None:
    store = MemoryStore()
    release = store.leases.release
    stalled = asyncio.Event()

    async def stalls(lease: Lease) -> None:
        await stalled.wait()
        await release(lease)

    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(_agent())
        key = session_lease_key(session.id)
        store.leases.release = stalls  # type: ignore[method-assign]
        assert (await session.run("x")).status is RunStatus.COMPLETED
        assert await store.leases.current(key) is not None  # still on its way
        stalled.set()
        while await store.leases.current(key) is not None:
            await asyncio.sleep(0)
