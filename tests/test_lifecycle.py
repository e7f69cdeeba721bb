"""Lifecycle (the safe orders of background work) and Listeners, on memory and SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from taskloom.backends import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    NoticeInbox,
    SQLiteBackend,
)
from taskloom.backends.memory import MemoryActivityRegistry, MemoryNoticeInbox
from taskloom.background import Lifecycle, Listeners, Reopen
from taskloom.errors import DeleteRefused
from taskloom.events import WorkFinished
from taskloom.testing.clock import FakeClock

SESSION = "s1"


@dataclass
class Backend:
    registry: ActivityRegistry
    inbox: NoticeInbox
    clock: FakeClock


@pytest.fixture(params=["memory", "sqlite"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    clock = FakeClock()
    if request.param == "memory":
        yield Backend(MemoryActivityRegistry(clock=clock), MemoryNoticeInbox(), clock)
        return
    registry_backend = SQLiteBackend(tmp_path / "bg.db", clock=clock)
    registry = registry_backend.registry
    inbox_backend = SQLiteBackend(tmp_path / "bg.db")
    inbox = inbox_backend.inbox
    yield Backend(registry, inbox, clock)
    await registry_backend.close()
    await inbox_backend.close()


def activity(activity_id: str = "a1", kind: str = "shell") -> BackgroundActivity:
    return BackgroundActivity(activity_id, kind, f"run {activity_id}", 1_700_000_000.0)


def notice(activity_id: str = "a1", text: str = "exit 0") -> BackgroundNotice:
    return BackgroundNotice(f"done-{activity_id}", activity_id, "shell", text)


async def listed(registry: ActivityRegistry, session: str = SESSION) -> list[str]:
    return [a.id for a in await registry.list(session)]


class FlakyInbox:
    """An inbox whose first `failures` pushes raise, as a lost connection would."""

    def __init__(self, inner: NoticeInbox, failures: int = 1) -> None:
        self.inner = inner
        self.failures = failures

    async def push(self, session: str, notice: BackgroundNotice) -> bool:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("inbox unreachable")
        return await self.inner.push(session, notice)

    async def pending(self, session: str) -> list[BackgroundNotice]:
        return await self.inner.pending(session)

    async def ack(self, session: str, ids: Iterable[str]) -> None:
        await self.inner.ack(session, ids)

    async def clear(self, session: str) -> None:
        await self.inner.clear(session)


# ---------------------------------------------------------------- begin / alive


async def test_begin_registers_before_it_starts(backend: Backend) -> None:
    life = Lifecycle(backend.registry, backend.inbox)
    seen_at_start: list[list[str]] = []

    async def start() -> None:
        seen_at_start.append(await listed(backend.registry))

    assert await life.begin(SESSION, activity(), start) is True
    assert seen_at_start == [["a1"]]
    assert await listed(backend.registry) == ["a1"]


async def test_failed_start_removes_the_registration_and_reraises(backend: Backend) -> None:
    life = Lifecycle(backend.registry, backend.inbox, kind_caps={"shell": 1})

    def start() -> None:
        raise OSError("no such command")

    with pytest.raises(OSError, match="no such command"):
        await life.begin(SESSION, activity("a1"), start)
    assert await listed(backend.registry) == []
    # The slot under the cap is free again.
    assert await life.begin(SESSION, activity("a2"), lambda: None)


async def test_begin_at_the_kind_cap_refuses_without_starting(backend: Backend) -> None:
    life = Lifecycle(backend.registry, backend.inbox, kind_caps={"shell": 1})
    started: list[str] = []
    assert await life.begin(SESSION, activity("a1"), lambda: started.append("a1"))
    assert await life.begin(SESSION, activity("a2"), lambda: started.append("a2")) is False
    assert await life.begin(SESSION, activity("a3"), lambda: started.append("a3"), kind_cap=2)
    assert started == ["a1", "a3"]
    assert await listed(backend.registry) == ["a1", "a3"]


async def test_alive_renews_and_keeps_the_session_alive(backend: Backend) -> None:
    kept: list[str] = []

    async def keep_alive(session: str) -> None:
        kept.append(session)

    life = Lifecycle(backend.registry, backend.inbox, lease=10.0, keep_alive=keep_alive)
    assert await life.begin(SESSION, activity(), lambda: None)
    backend.clock.advance(8.0)
    assert await life.alive(SESSION, "a1") is True
    assert kept == [SESSION]
    backend.clock.advance(8.0)
    assert await listed(backend.registry) == ["a1"]
    backend.clock.advance(3.0)
    assert await listed(backend.registry) == []
    assert await life.alive(SESSION, "a1") is False
    assert kept == [SESSION]


# ---------------------------------------------------------------- finish / discard


async def test_finish_pushes_then_emits_then_unregisters(backend: Backend) -> None:
    observed: list[tuple[str, list[str], list[str]]] = []

    async def emit(event: WorkFinished) -> None:
        pending = [n.id for n in await backend.inbox.pending(SESSION)]
        observed.append((event.activity_id, pending, await listed(backend.registry)))

    life = Lifecycle(backend.registry, backend.inbox, emit)
    assert await life.begin(SESSION, activity(), lambda: None)
    assert await life.finish(SESSION, notice()) is True
    # At emit time the notice is stored and the registration not yet removed.
    assert observed == [("a1", ["done-a1"], ["a1"])]
    assert await listed(backend.registry) == []
    assert [n.text for n in await backend.inbox.pending(SESSION)] == ["exit 0"]


async def test_failed_push_keeps_the_registration_and_finish_can_retry(
    backend: Backend,
) -> None:
    events: list[WorkFinished] = []
    life = Lifecycle(backend.registry, FlakyInbox(backend.inbox), events.append)
    assert await life.begin(SESSION, activity(), lambda: None)
    with pytest.raises(ConnectionError):
        await life.finish(SESSION, notice())
    assert await listed(backend.registry) == ["a1"]
    assert events == []
    assert await life.finish(SESSION, notice()) is True
    assert await listed(backend.registry) == []
    assert [e.activity_id for e in events] == ["a1"]
    assert len(await backend.inbox.pending(SESSION)) == 1


async def test_repeated_finish_emits_once(backend: Backend) -> None:
    events: list[WorkFinished] = []
    life = Lifecycle(backend.registry, backend.inbox, events.append)
    assert await life.begin(SESSION, activity(), lambda: None)
    assert await life.finish(SESSION, notice(text="first")) is True
    assert await life.finish(SESSION, notice(text="second")) is False
    assert events == [
        WorkFinished(session_id=SESSION, activity_id="a1", kind="shell", text="first")
    ]
    assert [n.text for n in await backend.inbox.pending(SESSION)] == ["first"]


async def test_concurrent_finishes_write_one_notice_and_one_event(backend: Backend) -> None:
    events: list[WorkFinished] = []
    life = Lifecycle(backend.registry, backend.inbox, events.append)
    assert await life.begin(SESSION, activity(), lambda: None)
    wrote = await asyncio.gather(*(life.finish(SESSION, notice(text=f"t{i}")) for i in range(6)))
    assert sum(wrote) == 1
    assert len(events) == 1
    pending = await backend.inbox.pending(SESSION)
    assert [n.text for n in pending] == [events[0].text]
    assert await listed(backend.registry) == []


async def test_finish_after_the_lease_lapsed_still_delivers(backend: Backend) -> None:
    events: list[WorkFinished] = []
    life = Lifecycle(backend.registry, backend.inbox, events.append, lease=5.0)
    assert await life.begin(SESSION, activity(), lambda: None)
    backend.clock.advance(6.0)
    assert await life.alive(SESSION, "a1") is False
    assert await life.finish(SESSION, notice()) is True
    assert len(events) == 1
    assert [n.id for n in await backend.inbox.pending(SESSION)] == ["done-a1"]


async def test_discard_unregisters_without_a_notice(backend: Backend) -> None:
    events: list[WorkFinished] = []
    life = Lifecycle(backend.registry, backend.inbox, events.append)
    assert await life.begin(SESSION, activity("a1"), lambda: None)
    assert await life.begin(SESSION, activity("a2"), lambda: None)
    await life.discard(SESSION, "a1")
    assert await listed(backend.registry) == ["a2"]
    assert await backend.inbox.pending(SESSION) == []
    assert events == []


# ---------------------------------------------------------------- Listeners


async def fill(backend: Backend, session: str) -> None:
    assert await backend.registry.add(session, activity(), 30.0)
    assert await backend.inbox.push(session, notice())


async def test_delete_runs_every_hook_then_clears_registry_and_inbox(backend: Backend) -> None:
    await fill(backend, SESSION)
    await fill(backend, "other")
    listeners = Listeners(backend.registry, backend.inbox)
    seen: list[tuple[str, list[str], int]] = []

    for name in ("shells", "children"):

        async def hook(session: str, name: str = name) -> None:
            # Hooks run while the session's work is still visible.
            pending = await backend.inbox.pending(session)
            seen.append((name, await listed(backend.registry, session), len(pending)))

        listeners.on_delete(hook)

    await listeners.delete(SESSION)
    assert seen == [("shells", ["a1"], 1), ("children", ["a1"], 1)]
    assert await listed(backend.registry) == []
    assert await backend.inbox.pending(SESSION) == []
    assert await listed(backend.registry, "other") == ["a1"]
    assert len(await backend.inbox.pending("other")) == 1


async def test_refused_delete_reopens_what_was_closed_and_clears_nothing(
    backend: Backend,
) -> None:
    await fill(backend, SESSION)
    listeners = Listeners(backend.registry, backend.inbox)
    journal: list[str] = []

    def closer(name: str) -> None:
        @listeners.on_delete
        async def close(session: str) -> Reopen:
            journal.append(f"close {name}")

            async def reopen() -> None:
                journal.append(f"reopen {name}")

            return reopen

    closer("shells")

    @listeners.on_delete
    async def nothing_to_close(session: str) -> None:
        journal.append("look")

    closer("children")

    @listeners.on_delete
    async def refuse(session: str) -> None:
        raise DeleteRefused("a child is writing its report")

    @listeners.on_delete
    async def never(session: str) -> None:
        journal.append("never")

    with pytest.raises(DeleteRefused, match="writing its report"):
        await listeners.delete(SESSION)
    assert journal == ["close shells", "look", "close children", "reopen children", "reopen shells"]
    assert await listed(backend.registry) == ["a1"]
    assert len(await backend.inbox.pending(SESSION)) == 1


async def test_failing_reopen_still_reopens_the_rest(backend: Backend) -> None:
    listeners = Listeners(backend.registry, backend.inbox)
    reopened: list[str] = []

    async def reopen_ok() -> None:
        reopened.append("ok")

    async def reopen_broken() -> None:
        raise RuntimeError("cannot reopen")

    async def first(session: str) -> Reopen:
        return reopen_ok

    async def second(session: str) -> Reopen:
        return reopen_broken

    async def refuse(session: str) -> None:
        raise DeleteRefused("no")

    listeners.on_delete(first)
    listeners.on_delete(second)
    listeners.on_delete(refuse)
    with pytest.raises(DeleteRefused) as refused:
        await listeners.delete(SESSION)
    assert reopened == ["ok"]
    assert any("cannot reopen" in note for note in refused.value.__notes__)


async def test_stop_runs_every_hook_even_when_one_fails(backend: Backend) -> None:
    listeners = Listeners(backend.registry, backend.inbox)
    stopped: list[str] = []

    @listeners.on_stop
    async def broken(session: str) -> None:
        raise RuntimeError("kill failed")

    @listeners.on_stop
    async def record(session: str) -> None:
        stopped.append(session)

    with pytest.raises(RuntimeError, match="kill failed"):
        await listeners.stop(SESSION)
    assert stopped == [SESSION]

    listeners.on_stop(broken)
    with pytest.raises(ExceptionGroup) as group:
        await listeners.stop(SESSION)
    assert len(group.value.exceptions) == 2
