"""Contract suites every `ActivityRegistry` and `NoticeInbox` must pass.

An implementation is done when it passes these, not before. Subclass a suite
in a test module (name the subclass `Test...`) and provide its backend as a
fixture built on the suite's `clock` fixture, a `FakeClock` the tests
advance instead of sleeping::

    import functools, pytest
    from taskloom.testing.background_contract import (
        ActivityRegistryContract, NoticeInboxContract)

    class TestMyRegistry(ActivityRegistryContract):
        @pytest.fixture
        async def registry(self, clock, tmp_path):
            registry = MyRegistry(tmp_path / "bg.db", clock=clock)
            yield registry
            await registry.close()

        # Optional: a picklable factory of an equivalent backend (same data,
        # default wall clock) enables the checks that race several processes.
        @pytest.fixture
        def registry_factory(self, tmp_path):
            return functools.partial(MyRegistry, tmp_path / "bg.db")

    class TestMyInbox(NoticeInboxContract):
        @pytest.fixture
        def inbox(self): ...            # and optionally `inbox_factory`

Every test uses a fresh session id (`session` fixture), so a backend may
keep its data between tests. The tests are async and carry the asyncio
marker, so they run under pytest-asyncio in auto or strict mode (in strict
mode, declare async fixtures with `pytest_asyncio.fixture`).

The suites need the backend to declare `Capability.ACTIVITY_REGISTRY` or
`Capability.NOTICE_INBOX`, and their multi-process checks
`Capability.SPANS_PROCESSES`; override the `capabilities` fixture to declare
less, and those tests are skipped with the reason.

`push_from_processes` and `add_from_processes` are the helpers the
multi-process checks use; they start processes with the "spawn" method, so
factories must be picklable (e.g. `functools.partial` of a class).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._extras import needs_extra
from ..backends import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    Capability,
    NoticeInbox,
)
from ._processes import race
from .capabilities import CapabilityGate, requires
from .clock import FakeClock

with needs_extra("taskloom.testing's contract suites"):
    import pytest

__all__ = [
    "ActivityRegistryContract",
    "NoticeInboxContract",
    "add_from_processes",
    "push_from_processes",
]


def _activity(activity_id: str, kind: str = "shell", **extra: Any) -> BackgroundActivity:
    return BackgroundActivity(activity_id, kind, f"work {activity_id}", 1_700_000_000.0, **extra)


def _notice(notice_id: str, text: str = "", **extra: Any) -> BackgroundNotice:
    return BackgroundNotice(
        notice_id, f"act-{notice_id}", "shell", text or f"result {notice_id}", **extra
    )


# ---------------------------------------------------------------- processes


def push_from_processes(
    factory: Callable[[], Any],
    session: str,
    notices: Sequence[BackgroundNotice],
    processes: int = 3,
) -> list[list[bool]]:
    """Push every notice from each of `processes` processes at once; `factory`
    makes a `NoticeInbox`, or a `Backend` whose `inbox` is used.

    Returns, per process, what each of its pushes returned (in `notices`
    order). Blocking: call it through `asyncio.to_thread` from async tests.
    """
    return race(_push_all, factory, session, [list(notices)] * processes)


def add_from_processes(
    factory: Callable[[], Any],
    session: str,
    activities: Sequence[Sequence[BackgroundActivity]],
    lease: float,
    kind_cap: int | None,
) -> list[list[bool]]:
    """Add `activities[i]` from process i, all processes at once; `factory`
    makes an `ActivityRegistry`, or a `Backend` whose `registry` is used.

    Returns, per process, what each of its adds returned. Blocking: call it
    through `asyncio.to_thread` from async tests.
    """
    return race(_add_all, factory, session, [(list(a), lease, kind_cap) for a in activities])


async def _push_all(
    made: Any,
    session: str,
    notices: list[BackgroundNotice],
    ready: Callable[[], Awaitable[None]],
) -> list[bool]:
    inbox: NoticeInbox = getattr(made, "inbox", made)  # a backend, or the inbox itself
    await inbox.pending(session)
    await ready()
    return list(await asyncio.gather(*(inbox.push(session, n) for n in notices)))


async def _add_all(
    made: Any,
    session: str,
    payload: tuple[list[BackgroundActivity], float, int | None],
    ready: Callable[[], Awaitable[None]],
) -> list[bool]:
    registry: ActivityRegistry = getattr(made, "registry", made)  # a backend, or the registry
    activities, lease, kind_cap = payload
    await registry.list(session)
    await ready()
    return list(
        await asyncio.gather(*(registry.add(session, a, lease, kind_cap) for a in activities))
    )


# ---------------------------------------------------------------- suites


class _Contract(CapabilityGate):
    pytestmark = [pytest.mark.asyncio]

    @pytest.fixture
    def clock(self) -> FakeClock:
        """The clock the backend under test must read; tests advance it."""
        return FakeClock()

    @pytest.fixture
    def session(self) -> str:
        """A session id no other test uses."""
        return f"contract-{uuid.uuid4().hex[:12]}"


class ActivityRegistryContract(_Contract):
    """The `ActivityRegistry` contract; needs a `registry` fixture on `clock`.

    Override `registry_factory` to return a picklable factory of an
    equivalent registry to run the multi-process cap check (skipped if None).
    """

    REQUIRES = frozenset({Capability.ACTIVITY_REGISTRY})

    @pytest.fixture
    def registry_factory(self) -> Callable[[], ActivityRegistry] | None:
        return None

    async def test_added_activity_is_listed_as_given(
        self, registry: ActivityRegistry, session: str
    ) -> None:
        act = _activity("a1", run_id="run-1", metadata={"argv": ["ls", "-l"], "n": 3})
        assert await registry.add(session, act, 30.0, None) is True
        assert await registry.list(session) == [act]

    async def test_list_keeps_add_order_and_sessions_apart(
        self, registry: ActivityRegistry, session: str
    ) -> None:
        ids = [f"a{i}" for i in range(6)]
        random.Random(7).shuffle(ids)
        for activity_id in ids:
            assert await registry.add(session, _activity(activity_id), 30.0)
        other = session + "-other"
        assert await registry.add(other, _activity("x"), 30.0)
        assert [a.id for a in await registry.list(session)] == ids
        assert [a.id for a in await registry.list(other)] == ["x"]
        assert await registry.list(session + "-never-used") == []

    async def test_kind_cap_refuses_past_the_cap(
        self, registry: ActivityRegistry, session: str
    ) -> None:
        assert await registry.add(session, _activity("a"), 30.0, 2)
        assert await registry.add(session, _activity("b"), 30.0, 2)
        assert await registry.add(session, _activity("c"), 30.0, 2) is False
        # The cap is per kind and per session.
        assert await registry.add(session, _activity("d", kind="subagent"), 30.0, 2)
        assert await registry.add(session + "-other", _activity("e"), 30.0, 2)
        assert [a.id for a in await registry.list(session)] == ["a", "b", "d"]

    async def test_removing_frees_a_slot(self, registry: ActivityRegistry, session: str) -> None:
        assert await registry.add(session, _activity("a"), 30.0, 1)
        assert not await registry.add(session, _activity("b"), 30.0, 1)
        await registry.remove(session, "a")
        assert await registry.add(session, _activity("b"), 30.0, 1)
        assert [a.id for a in await registry.list(session)] == ["b"]

    async def test_readding_an_id_replaces_it_in_its_own_slot(
        self, registry: ActivityRegistry, session: str
    ) -> None:
        assert await registry.add(session, _activity("a"), 30.0, 2)
        assert await registry.add(session, _activity("b"), 30.0, 2)
        changed = BackgroundActivity("a", "shell", "changed", 1_700_000_001.0)
        assert await registry.add(session, changed, 30.0, 2)
        assert await registry.list(session) == [changed, _activity("b")]
        assert not await registry.add(session, _activity("c"), 30.0, 2)

    async def test_concurrent_adds_never_exceed_the_cap(
        self, registry: ActivityRegistry, session: str
    ) -> None:
        acts = [_activity(f"a{i}") for i in range(25)]
        added = await asyncio.gather(*(registry.add(session, a, 30.0, 3) for a in acts))
        winners = {a.id for a, ok in zip(acts, added, strict=True) if ok}
        assert len(winners) == 3
        assert {a.id for a in await registry.list(session)} == winners

    async def test_expired_lease_drops_out_of_list_and_cap(
        self, registry: ActivityRegistry, clock: FakeClock, session: str
    ) -> None:
        assert await registry.add(session, _activity("a"), 10.0, 1)
        clock.advance(9.5)
        assert [a.id for a in await registry.list(session)] == ["a"]
        clock.advance(1.0)
        assert await registry.list(session) == []
        assert await registry.renew(session, "a", 10.0) is False
        assert await registry.add(session, _activity("b"), 10.0, 1)
        assert [a.id for a in await registry.list(session)] == ["b"]

    async def test_renew_extends_the_lease(
        self, registry: ActivityRegistry, clock: FakeClock, session: str
    ) -> None:
        assert await registry.add(session, _activity("a"), 10.0)
        assert await registry.add(session, _activity("b"), 10.0)
        clock.advance(8.0)
        assert await registry.renew(session, "a", 10.0) is True
        clock.advance(8.0)  # 16 s in: past the first lease, inside the renewed one
        assert [a.id for a in await registry.list(session)] == ["a"]
        clock.advance(3.0)
        assert await registry.list(session) == []

    async def test_renew_of_an_unknown_activity_is_false(
        self, registry: ActivityRegistry, session: str
    ) -> None:
        assert await registry.add(session, _activity("a"), 10.0)
        assert await registry.renew(session, "nope", 10.0) is False
        assert await registry.renew(session + "-other", "a", 10.0) is False

    async def test_remove_forgets_only_that_activity(
        self, registry: ActivityRegistry, session: str
    ) -> None:
        for activity_id in ("a", "b", "c"):
            assert await registry.add(session, _activity(activity_id), 30.0)
        await registry.remove(session, "b")
        await registry.remove(session, "not-there")
        await registry.remove(session + "-other", "a")
        assert [a.id for a in await registry.list(session)] == ["a", "c"]
        assert await registry.renew(session, "b", 30.0) is False

    async def test_clear_forgets_the_session_only(
        self, registry: ActivityRegistry, session: str
    ) -> None:
        other = session + "-other"
        for s in (session, other):
            assert await registry.add(s, _activity("a"), 30.0)
            assert await registry.add(s, _activity("b"), 30.0)
        await registry.clear(session)
        assert await registry.list(session) == []
        assert [a.id for a in await registry.list(other)] == ["a", "b"]

    @requires(Capability.SPANS_PROCESSES)
    async def test_adds_from_several_processes_never_exceed_the_cap(
        self,
        registry: ActivityRegistry,
        registry_factory: Callable[[], ActivityRegistry] | None,
        session: str,
    ) -> None:
        if registry_factory is None:
            pytest.skip("no registry_factory: the backend does not span processes")
        batches = [[_activity(f"p{p}-{i}") for i in range(6)] for p in range(3)]
        results = await asyncio.to_thread(
            add_from_processes, registry_factory, session, batches, 3600.0, 4
        )
        winners = {
            a.id
            for batch, outcome in zip(batches, results, strict=True)
            for a, ok in zip(batch, outcome, strict=True)
            if ok
        }
        assert len(winners) == 4
        assert {a.id for a in await registry.list(session)} == winners


class NoticeInboxContract(_Contract):
    """The `NoticeInbox` contract; needs an `inbox` fixture.

    Override `inbox_factory` to return a picklable factory of an equivalent
    inbox to run the multi-process push check (skipped if None).
    """

    REQUIRES = frozenset({Capability.NOTICE_INBOX})

    @pytest.fixture
    def inbox_factory(self) -> Callable[[], NoticeInbox] | None:
        return None

    async def test_first_push_wins(self, inbox: NoticeInbox, session: str) -> None:
        first = _notice("n1", "first")
        assert await inbox.push(session, first) is True
        assert await inbox.push(session, _notice("n1", "second")) is False
        assert await inbox.pending(session) == [first]

    async def test_concurrent_pushes_of_one_id_store_it_once(
        self, inbox: NoticeInbox, session: str
    ) -> None:
        rivals = [_notice("n1", f"writer {i}") for i in range(30)]
        pushed = await asyncio.gather(*(inbox.push(session, n) for n in rivals))
        assert sum(pushed) == 1
        assert await inbox.pending(session) == [rivals[pushed.index(True)]]

    async def test_pending_is_in_push_order(self, inbox: NoticeInbox, session: str) -> None:
        ids = [f"n{i}" for i in range(12)]
        random.Random(3).shuffle(ids)
        for notice_id in ids:
            assert await inbox.push(session, _notice(notice_id))
        assert [n.id for n in await inbox.pending(session)] == ids
        assert await inbox.pending(session + "-never-used") == []

    async def test_notice_keeps_every_field(self, inbox: NoticeInbox, session: str) -> None:
        notice = BackgroundNotice(
            "n1",
            "act-9",
            "subagent",
            "line one\nline two",
            status="timed_out",
            created_at=1_700_000_123.25,
            data={"exit": None, "tail": ["a", "b"], "ok": False},
        )
        assert await inbox.push(session, notice)
        assert await inbox.pending(session) == [notice]

    async def test_ack_acknowledges_only_the_ids_given(
        self, inbox: NoticeInbox, session: str
    ) -> None:
        for notice_id in ("a", "b", "c"):
            assert await inbox.push(session, _notice(notice_id))
        await inbox.ack(session, ["b"])
        await inbox.ack(session, ["unknown"])
        await inbox.ack(session, [])
        assert [n.id for n in await inbox.pending(session)] == ["a", "c"]

    async def test_ack_spares_what_arrived_after_delivery(
        self, inbox: NoticeInbox, session: str
    ) -> None:
        assert await inbox.push(session, _notice("a"))
        delivered = [n.id for n in await inbox.pending(session)]
        assert await inbox.push(session, _notice("b"))
        await inbox.ack(session, delivered)
        assert [n.id for n in await inbox.pending(session)] == ["b"]

    async def test_acked_id_is_not_stored_again(self, inbox: NoticeInbox, session: str) -> None:
        assert await inbox.push(session, _notice("a"))
        await inbox.ack(session, ["a"])
        assert await inbox.push(session, _notice("a", "redelivered report")) is False
        assert await inbox.pending(session) == []

    async def test_sessions_are_apart(self, inbox: NoticeInbox, session: str) -> None:
        other = session + "-other"
        assert await inbox.push(session, _notice("a"))
        # The same id is a different notice in another session.
        assert await inbox.push(other, _notice("a", "other"))
        await inbox.ack(other, ["a"])
        assert [n.text for n in await inbox.pending(session)] == ["result a"]
        assert await inbox.pending(other) == []

    async def test_clear_forgets_the_session_only(self, inbox: NoticeInbox, session: str) -> None:
        other = session + "-other"
        for s in (session, other):
            assert await inbox.push(s, _notice("a"))
            assert await inbox.push(s, _notice("b"))
        await inbox.ack(session, ["a"])
        await inbox.clear(session)
        assert await inbox.pending(session) == []
        assert [n.id for n in await inbox.pending(other)] == ["a", "b"]

    @requires(Capability.SPANS_PROCESSES)
    async def test_pushes_from_several_processes_store_each_once(
        self,
        inbox: NoticeInbox,
        inbox_factory: Callable[[], NoticeInbox] | None,
        session: str,
    ) -> None:
        if inbox_factory is None:
            pytest.skip("no inbox_factory: the backend does not span processes")
        notices = [_notice(f"n{i}") for i in range(15)]
        results = await asyncio.to_thread(push_from_processes, inbox_factory, session, notices, 3)
        for i, notice in enumerate(notices):
            writers = [outcome[i] for outcome in results]
            assert writers.count(True) == 1, f"{notice.id}: {writers}"
        pending = await inbox.pending(session)
        assert sorted(n.id for n in pending) == sorted(n.id for n in notices)
