"""RunNotices: what one run tells the model about background work, on memory and SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from taskloom.backends import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    NoticeInbox,
    NoticeStatus,
    SQLiteBackend,
)
from taskloom.backends.memory import MemoryActivityRegistry, MemoryNoticeInbox
from taskloom.background import RunNotices
from taskloom.loop.ports import Delivery
from taskloom.testing.clock import FakeClock

SESSION = "s1"


@dataclass
class Backend:
    registry: ActivityRegistry
    inbox: NoticeInbox

    def run(self, tools: tuple[str, ...] = ("background_wait", "background_status")) -> RunNotices:
        return RunNotices(self.registry, self.inbox, SESSION, tools)

    async def start(self, activity_id: str, description: str = "") -> None:
        act = BackgroundActivity(activity_id, "shell", description or f"cmd {activity_id}", 1.0)
        assert await self.registry.add(SESSION, act, 60.0)

    async def push(
        self, activity_id: str, text: str = "exit 0", status: str = NoticeStatus.DONE
    ) -> str:
        notice = BackgroundNotice(f"n-{activity_id}", activity_id, "shell", text, status)
        assert await self.inbox.push(SESSION, notice)
        return notice.id

    async def finish(self, activity_id: str, text: str = "exit 0") -> str:
        notice_id = await self.push(activity_id, text)
        await self.registry.remove(SESSION, activity_id)
        return notice_id


@pytest.fixture(params=["memory", "sqlite"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    clock = FakeClock()
    if request.param == "memory":
        yield Backend(MemoryActivityRegistry(clock=clock), MemoryNoticeInbox())
        return
    registry_backend = SQLiteBackend(tmp_path / "bg.db", clock=clock)
    registry = registry_backend.registry
    inbox_backend = SQLiteBackend(tmp_path / "bg.db")
    inbox = inbox_backend.inbox
    yield Backend(registry, inbox)
    await registry_backend.close()
    await inbox_backend.close()


def delivered(delivery: Delivery | None) -> Delivery:
    assert delivery is not None
    return delivery


# ---------------------------------------------------------------- round_start


async def test_first_boundary_says_what_is_still_running(backend: Backend) -> None:
    await backend.start("a1", "pytest -q")
    await backend.start("a2", "npm run build")
    notices = backend.run()
    first = delivered(await notices.round_start())
    assert first.text == (
        "[background] still running: shell a1 (pytest -q); shell a2 (npm run build)"
    )
    # Nothing to acknowledge, and only the first boundary says it.
    assert first.ack_ids == ()
    assert await notices.round_start() is None


async def test_nothing_running_and_nothing_pending_is_none(backend: Backend) -> None:
    notices = backend.run()
    assert await notices.round_start() is None
    assert await notices.before_final() is None


async def test_an_item_with_a_notice_is_not_still_running(backend: Backend) -> None:
    await backend.start("a1")
    await backend.start("a2")
    # Pushed but not yet unregistered: the window a finish passes through.
    notice_id = await backend.push("a1")
    first = delivered(await backend.run().round_start())
    assert first.text.splitlines() == [
        "[background] still running: shell a2 (cmd a2)",
        "[background] shell a1 finished: exit 0",
    ]
    assert first.ack_ids == (notice_id,)


async def test_completions_are_delivered_once_in_push_order(backend: Backend) -> None:
    notices = backend.run()
    assert await notices.round_start() is None
    ids = [
        await backend.push("a2", "exit 1", NoticeStatus.FAILED),
        await backend.push("a1", "exit 0"),
        await backend.push("a3", "", NoticeStatus.TIMED_OUT),
        await backend.push("a4", "killed", NoticeStatus.STOPPED),
        await backend.push("a5", "?", "lost"),
    ]
    delivery = delivered(await notices.round_start())
    assert delivery.text.splitlines() == [
        "[background] shell a2 failed: exit 1",
        "[background] shell a1 finished: exit 0",
        "[background] shell a3 timed out",
        "[background] shell a4 was stopped: killed",
        "[background] shell a5 ended (lost): ?",
    ]
    assert delivery.ack_ids == tuple(ids)
    # Not acknowledged yet, but this run has shown them: not again.
    assert await notices.round_start() is None
    assert await notices.before_final() is None
    assert len(await backend.inbox.pending(SESSION)) == 5


async def test_multiline_results_are_indented(backend: Backend) -> None:
    await backend.push("a1", "line one\n[background] not a notice")
    delivery = delivered(await backend.run().round_start())
    assert delivery.text == (
        "[background] shell a1 finished: line one\n  [background] not a notice"
    )


async def test_ack_spares_what_arrived_after_the_delivery(backend: Backend) -> None:
    notices = backend.run()
    await backend.push("a1")
    delivery = delivered(await notices.round_start())
    late = await backend.push("a2", "late")
    # The loop acks once the assistant message carrying the delivery is persisted.
    await backend.inbox.ack(SESSION, delivery.ack_ids)
    assert [n.id for n in await backend.inbox.pending(SESSION)] == [late]
    assert delivered(await notices.round_start()).ack_ids == (late,)


# ---------------------------------------------------------------- mark_seen / take_seen


async def test_marked_notices_are_not_delivered_and_are_taken_once(backend: Backend) -> None:
    notices = backend.run()
    waited = await backend.push("a1", "seen through a tool result")
    other = await backend.push("a2")
    notices.mark_seen(waited)
    notices.mark_seen(waited)
    delivery = delivered(await notices.round_start())
    assert delivery.ack_ids == (other,)
    assert "a1" not in delivery.text
    assert notices.take_seen() == [waited]
    assert notices.take_seen() == []
    # Delivered ids are acknowledged through their Delivery, never via take_seen.
    assert other not in notices.take_seen()


# ---------------------------------------------------------------- before_final


async def test_before_final_reminds_once_per_item_this_run_started(backend: Backend) -> None:
    await backend.start("old")  # started by an earlier run
    notices = backend.run()
    assert delivered(await notices.round_start()).text.startswith("[background] still running")
    await backend.start("a1", "pytest -q")
    notices.mark_started("a1")
    await backend.start("a2")
    notices.mark_started("a2")
    reminder = delivered(await notices.before_final())
    lines = reminder.text.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[background] shell a1 (pytest -q) is still running.")
    assert (
        "You may wait for it (background_wait) or check its status (background_status)"
        " before you finish" in lines[0]
    )
    assert lines[1].startswith("[background] shell a2 (cmd a2) is still running.")
    assert "old" not in reminder.text
    assert reminder.ack_ids == ()
    assert await notices.before_final() is None


async def test_a_reminder_suggests_only_the_tools_the_agent_has(backend: Backend) -> None:
    texts = {}
    for tools in [(), ("background_status",), ("background_wait",)]:
        notices = backend.run(tools)
        await backend.start(f"a{len(texts)}")
        notices.mark_started(f"a{len(texts)}")
        texts[tools] = delivered(await notices.before_final()).text
    assert texts[()].endswith("is still running. Its result arrives as a notice in a later turn.")
    assert "background_wait" not in texts[()] and "status" not in texts[()]
    assert "You may check its status (background_status) before" in texts[("background_status",)]
    assert "wait" not in texts[("background_status",)]
    assert "You may wait for it (background_wait) before" in texts[("background_wait",)]
    assert "status" not in texts[("background_wait",)]


async def test_before_final_delivers_a_completion_instead_of_a_reminder(
    backend: Backend,
) -> None:
    notices = backend.run()
    await backend.start("a1")
    notices.mark_started("a1")
    await backend.start("a2")
    notices.mark_started("a2")
    done = await backend.finish("a1", "all green")
    still = await backend.push("a2", "just now")  # still registered, but finished
    delivery = delivered(await notices.before_final())
    assert delivery.text.splitlines() == [
        "[background] shell a1 finished: all green",
        "[background] shell a2 finished: just now",
    ]
    assert delivery.ack_ids == (done, still)


async def test_reminder_then_completion_in_the_same_run(backend: Backend) -> None:
    notices = backend.run()
    await backend.start("a1")
    notices.mark_started("a1")
    assert "still running" in delivered(await notices.before_final()).text
    done = await backend.finish("a1")
    assert delivered(await notices.round_start()).ack_ids == (done,)
    assert await notices.before_final() is None


# ---------------------------------------------------------------- crash redelivery


async def test_unacknowledged_notices_reach_the_next_run_again(backend: Backend) -> None:
    first_id = await backend.push("a1")
    crashed = delivered(await backend.run().round_start())
    # The run died before its assistant message was persisted: nothing acked.
    retry = delivered(await backend.run().round_start())
    assert retry.text == crashed.text
    assert retry.ack_ids == (first_id,)
    await backend.inbox.ack(SESSION, retry.ack_ids)
    assert await backend.run().round_start() is None


# ---------------------------------------------------------------- cost


class CountingRegistry:
    def __init__(self, inner: ActivityRegistry) -> None:
        self.inner = inner
        self.lists = 0

    async def add(
        self, session: str, activity: BackgroundActivity, lease: float, kind_cap: int | None = None
    ) -> bool:
        return await self.inner.add(session, activity, lease, kind_cap)

    async def list(self, session: str) -> list[BackgroundActivity]:
        self.lists += 1
        return await self.inner.list(session)

    async def renew(self, session: str, activity_id: str, lease: float) -> bool:
        return await self.inner.renew(session, activity_id, lease)

    async def remove(self, session: str, activity_id: str) -> None:
        await self.inner.remove(session, activity_id)

    async def clear(self, session: str) -> None:
        await self.inner.clear(session)


class CountingInbox:
    def __init__(self, inner: NoticeInbox) -> None:
        self.inner = inner
        self.pendings = 0

    async def push(self, session: str, notice: BackgroundNotice) -> bool:
        return await self.inner.push(session, notice)

    async def pending(self, session: str) -> list[BackgroundNotice]:
        self.pendings += 1
        return await self.inner.pending(session)

    async def ack(self, session: str, ids: Iterable[str]) -> None:
        await self.inner.ack(session, ids)

    async def clear(self, session: str) -> None:
        await self.inner.clear(session)


async def test_an_idle_round_costs_one_pending_call(backend: Backend) -> None:
    registry, inbox = CountingRegistry(backend.registry), CountingInbox(backend.inbox)
    notices = RunNotices(registry, inbox, SESSION)
    await notices.round_start()
    assert (inbox.pendings, registry.lists) == (1, 1)
    for _ in range(5):
        assert await notices.round_start() is None
    assert (inbox.pendings, registry.lists) == (6, 1)
    assert await notices.before_final() is None
    assert (inbox.pendings, registry.lists) == (7, 1)
    # Once every started item has had its reminder, the registry is not read.
    await backend.start("a1")
    notices.mark_started("a1")
    assert await notices.before_final() is not None
    assert await notices.before_final() is None
    assert (inbox.pendings, registry.lists) == (9, 2)
