"""The contract every `SessionStore` must pass.

Subclass `StoreContract` in a test module and provide a `store` fixture; a
durable store also provides `reopen`, a factory for a second store over the
same data (a store kept in process memory leaves it out, and that case is
skipped with the reason)::

    import pytest
    from taskloom.testing.store_contract import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        async def store(self, tmp_path):
            store = MyStore(tmp_path / "sessions.db")
            yield store
            await store.close()

        @pytest.fixture
        def reopen(self, tmp_path):
            return lambda: MyStore(tmp_path / "sessions.db")

Fenced appends are tested against `store.leases`; override the `leases`
fixture if your store checks fences against leases kept elsewhere. With
pytest-asyncio in strict mode, decorate async fixtures with
`@pytest_asyncio.fixture`; the tests themselves carry the asyncio mark.

Tests of a capability the backend does not declare are skipped with the
reason (`taskloom.testing.capabilities`): the `capabilities` fixture reads
`store.backend.capabilities` when the store has a `Backend`, else declares
everything; override it to declare less (a store kept in one process
leaves out `Capability.SPANS_PROCESSES`, a store without fences
`Capability.FENCED_APPENDS`).

`assert_multiprocess_appends(url)` is the cross-process half of the
contract: it starts real processes appending to one session through
`open_backend(url).store` and checks that nothing was lost or reordered.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._extras import needs_extra
from ..backends import Backend, Capability, Fence, SessionMeta, SessionStore, open_backend
from ..entries import Entry, EntryKind
from ..errors import SessionNotFound, StaleLeaseError
from ._processes import race
from .capabilities import ALL_CAPABILITIES, CapabilityGate, requires

with needs_extra("taskloom.testing's contract suites"):
    import pytest

if TYPE_CHECKING:
    from ..backends import Leases

__all__ = ["StoreContract", "assert_multiprocess_appends"]

ENTRY_KINDS = tuple(value for name, value in vars(EntryKind).items() if name.isupper())

UNICODE_SAMPLES = (
    "héllo wörld",
    "日本語のテキスト",
    "مرحبا بالعالم",
    "שָׁלוֹם",
    "👩🏽‍💻🚀🦀",
    "🏳️‍🌈 flag sequence",
    "e\u0301 combining accent",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "line\u2028and\u2029paragraph separators",
    "tab\tnewline\ncarriage\rreturn",
    "\x01\x1f\x7f control characters",
    "quote \" backslash \\ slash / apostrophe '",
    "\U0001d11e \U0001d54f astral plane",
    "\uffff noncharacter",
    "",
)


def _payload(kind: str) -> dict[str, Any]:
    # Keys deliberately out of sorted order: the log must keep them as written.
    return {
        "zeta": kind,
        "alpha": {
            "list": [1, -2, 3.5, None, True, False, "s", {"deep": [[], {}]}],
            "empty_object": {},
            "empty_list": [],
            "none": None,
        },
        "ints": [0, -1, 2**31, 2**53 + 1, -(2**63), 2**63 - 1],
        "floats": [0.1, -2.5, 1.0, 3.141592653589793, 2.5e-8, 1e-300, 1e300, 5e-324, 1e16],
        "bools": [True, False],
        "text": "plain",
    }


def _assert_same_json(actual: object, expected: object, where: str = "data") -> None:
    """Assert `actual` equals `expected` down to types and object key order."""
    assert type(actual) is type(expected), f"{where}: {actual!r} is not {expected!r}"
    if isinstance(expected, dict):
        assert isinstance(actual, dict)
        assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
        for key, value in expected.items():
            _assert_same_json(actual[key], value, f"{where}[{key!r}]")
    elif isinstance(expected, list):
        assert isinstance(actual, list)
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _assert_same_json(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


async def _close(obj: object) -> None:
    close = getattr(obj, "close", None)
    if close is not None:
        await close()


def _new_id(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.mark.asyncio
class StoreContract(CapabilityGate):
    """Sessions, ordering, concurrency, JSON fidelity, listing, deletion and fencing."""

    @pytest.fixture
    def capabilities(self, store: SessionStore) -> frozenset[Capability]:
        """What the backend under test declares: `store.backend.capabilities`
        when the store has a backend, else everything; override to declare less."""
        backend = getattr(store, "backend", None)
        return backend.capabilities if isinstance(backend, Backend) else ALL_CAPABILITIES

    @pytest.fixture
    def store(self) -> SessionStore:
        """The implementation under test, fresh and empty; override it."""
        raise NotImplementedError("override the `store` fixture to test an implementation")

    @pytest.fixture
    def reopen(self) -> Callable[[], SessionStore]:
        """A factory for a second store over the same data; override for durable stores."""
        pytest.skip("no `reopen` fixture: a store kept in process memory has nothing to reopen")

    @pytest.fixture
    def leases(self, store: SessionStore) -> Leases:
        """The leases whose generations `append(..., fence=)` is checked against."""
        leases: Leases | None = getattr(store, "leases", None)
        if leases is None:
            pytest.skip("the store has no `leases`; override the `leases` fixture to test fencing")
        return leases

    # -- sessions -----------------------------------------------------------------

    async def test_implements_the_protocol(self, store: SessionStore) -> None:
        assert isinstance(store, SessionStore)

    async def test_create_then_get(self, store: SessionStore) -> None:
        meta = SessionMeta("s-1", "planner", None, 0.0, {"topic": "tests", "tags": ["a", "b"]})
        created = await store.create(meta)
        assert (created.id, created.agent, created.parent_id) == ("s-1", "planner", None)
        assert created.created_at > 0
        assert dict(created.metadata) == {"topic": "tests", "tags": ["a", "b"]}
        assert await store.get("s-1") == created

    async def test_create_keeps_given_timestamp_and_parent(self, store: SessionStore) -> None:
        await store.create(SessionMeta("parent", "planner"))
        meta = SessionMeta("child", "coder", "parent", 1234.5, {"depth": 1})
        assert await store.create(meta) == meta
        assert await store.get("child") == meta

    async def test_duplicate_create_raises_and_keeps_the_original(
        self, store: SessionStore
    ) -> None:
        original = await store.create(SessionMeta("s-1", "planner", None, 10.0))
        await store.append("s-1", Entry(EntryKind.MESSAGE, {"n": 1}))
        with pytest.raises(ValueError):
            await store.create(SessionMeta("s-1", "intruder", None, 20.0))
        assert await store.get("s-1") == original
        assert len(await store.load("s-1")) == 1

    async def test_unknown_session_raises_session_not_found(self, store: SessionStore) -> None:
        with pytest.raises(SessionNotFound):
            await store.get("missing")
        with pytest.raises(SessionNotFound):
            await store.append("missing", Entry(EntryKind.MESSAGE))
        with pytest.raises(SessionNotFound):
            await store.load("missing")
        with pytest.raises(KeyError):  # SessionNotFound is a KeyError too
            await store.load("missing", after=3)
        assert await store.list() == []

    # -- ordering -----------------------------------------------------------------

    async def test_positions_count_from_one_in_append_order(self, store: SessionStore) -> None:
        await store.create(SessionMeta("s-1"))
        positions = [
            await store.append("s-1", Entry(EntryKind.MESSAGE, {"n": n}, run_id=f"run-{n % 2}"))
            for n in range(1, 8)
        ]
        assert positions == list(range(1, 8))
        entries = await store.load("s-1")
        assert [e.position for e in entries] == positions
        assert [e.data["n"] for e in entries] == positions
        assert [e.run_id for e in entries] == [f"run-{n % 2}" for n in positions]
        assert all(e.kind == EntryKind.MESSAGE and e.created_at > 0 for e in entries)

    async def test_append_keeps_given_timestamp(self, store: SessionStore) -> None:
        await store.create(SessionMeta("s-1"))
        await store.append("s-1", Entry(EntryKind.STEER, {"text": "hi"}, created_at=42.25))
        [entry] = await store.load("s-1")
        assert entry == Entry(EntryKind.STEER, {"text": "hi"}, None, 1, 42.25)

    async def test_sessions_have_independent_positions(self, store: SessionStore) -> None:
        await store.create(SessionMeta("a"))
        await store.create(SessionMeta("b"))
        assert await store.append("a", Entry("x")) == 1
        assert await store.append("a", Entry("x")) == 2
        assert await store.append("b", Entry("y")) == 1
        assert [e.kind for e in await store.load("b")] == ["y"]

    async def test_load_after(self, store: SessionStore) -> None:
        await store.create(SessionMeta("s-1"))
        for n in range(1, 6):
            await store.append("s-1", Entry(EntryKind.MESSAGE, {"n": n}))
        assert [e.position for e in await store.load("s-1", after=2)] == [3, 4, 5]
        assert [e.position for e in await store.load("s-1", after=4)] == [5]
        assert await store.load("s-1", after=5) == []
        assert await store.load("s-1", after=50) == []
        assert [e.position for e in await store.load("s-1", after=0)] == [1, 2, 3, 4, 5]
        assert [e.position for e in await store.load("s-1", after=None)] == [1, 2, 3, 4, 5]

    async def test_empty_session_loads_empty(self, store: SessionStore) -> None:
        await store.create(SessionMeta("s-1"))
        assert await store.load("s-1") == []
        assert await store.load("s-1", after=3) == []

    async def test_concurrent_appends_lose_nothing(self, store: SessionStore) -> None:
        await store.create(SessionMeta("s-1"))
        writers, per_writer = 20, 10

        async def write(writer: int) -> list[int]:
            return [
                await store.append("s-1", Entry(EntryKind.MESSAGE, {"w": writer, "i": i}))
                for i in range(per_writer)
            ]

        returned = await asyncio.gather(*(write(w) for w in range(writers)))
        total = writers * per_writer
        assert sorted(p for ps in returned for p in ps) == list(range(1, total + 1))
        entries = await store.load("s-1")
        assert [e.position for e in entries] == list(range(1, total + 1))
        by_position = {e.position: e for e in entries}
        for writer, positions in enumerate(returned):
            assert positions == sorted(positions)
            assert [dict(by_position[p].data) for p in positions] == [
                {"w": writer, "i": i} for i in range(per_writer)
            ]

    async def test_concurrent_appends_to_many_sessions(self, store: SessionStore) -> None:
        ids = [f"s-{n}" for n in range(8)]
        await asyncio.gather(*(store.create(SessionMeta(sid)) for sid in ids))

        async def write(sid: str) -> list[int]:
            return [await store.append(sid, Entry("x", {"sid": sid, "i": i})) for i in range(6)]

        returned = await asyncio.gather(*(write(sid) for sid in ids))
        assert returned == [list(range(1, 7))] * len(ids)
        for sid in ids:
            assert [e.data["i"] for e in await store.load(sid)] == list(range(6))

    @requires(Capability.SPANS_PROCESSES)
    async def test_reopened_store_sees_everything(
        self, store: SessionStore, reopen: Callable[[], SessionStore]
    ) -> None:
        meta = await store.create(SessionMeta("s-1", "planner", None, 0.0, {"k": [1, 2]}))
        for n in range(3):
            await store.append("s-1", Entry(EntryKind.MESSAGE, {"n": n}, run_id="r"))
        before = await store.load("s-1")
        other = reopen()
        try:
            assert await other.get("s-1") == meta
            assert await other.load("s-1") == before
            assert await other.list() == [meta]
            assert await other.append("s-1", Entry(EntryKind.RUN_FINISHED)) == 4
            assert await store.append("s-1", Entry(EntryKind.RUN_STARTED)) == 5
            kinds = [e.kind for e in await other.load("s-1", after=3)]
            assert kinds == [EntryKind.RUN_FINISHED, EntryKind.RUN_STARTED]
        finally:
            await _close(other)

    # -- JSON fidelity ------------------------------------------------------------

    @pytest.mark.parametrize("kind", ENTRY_KINDS)
    async def test_every_entry_kind_round_trips(self, store: SessionStore, kind: str) -> None:
        await store.create(SessionMeta("s-1"))
        payload = _payload(kind)
        await store.append("s-1", Entry(kind, payload, run_id="run-1"))
        [entry] = await store.load("s-1")
        assert (entry.kind, entry.run_id, entry.position) == (kind, "run-1", 1)
        _assert_same_json(entry.data, payload)

    async def test_session_metadata_round_trips(self, store: SessionStore) -> None:
        metadata = _payload("metadata")
        await store.create(SessionMeta("s-1", "planner", None, 5.0, metadata))
        _assert_same_json((await store.get("s-1")).metadata, metadata, "metadata")
        [listed] = await store.list()
        _assert_same_json(listed.metadata, metadata, "metadata")

    async def test_large_entry(self, store: SessionStore) -> None:
        await store.create(SessionMeta("s-1"))
        text = ("0123456789abcdef" * 65536) + "🦀 end"  # 1 MiB and then some
        await store.append("s-1", Entry(EntryKind.MESSAGE, {"text": text, "n": 1}))
        await store.append("s-1", Entry(EntryKind.MESSAGE, {"n": 2}))
        first, second = await store.load("s-1")
        assert first.data["text"] == text
        assert second.data == {"n": 2}

    async def test_unicode_everywhere(self, store: SessionStore) -> None:
        sid = "séssion-🚀"
        await store.create(SessionMeta(sid, "agént-日本", None, 0.0, {"ключ": "значение"}))
        data: dict[str, object] = {sample or "empty": sample for sample in UNICODE_SAMPLES}
        data["list"] = list(UNICODE_SAMPLES)
        await store.append(sid, Entry("kïnd-✓", data, run_id="rün-👩🏽‍💻"))
        [entry] = await store.load(sid)
        assert (entry.kind, entry.run_id) == ("kïnd-✓", "rün-👩🏽‍💻")
        _assert_same_json(entry.data, data)
        meta = await store.get(sid)
        assert (meta.agent, dict(meta.metadata)) == ("agént-日本", {"ключ": "значение"})
        assert [m.id for m in await store.list(agent="agént-日本")] == [sid]

    # -- listing and deletion -----------------------------------------------------

    async def test_list_newest_first_with_filters(self, store: SessionStore) -> None:
        for meta in (
            SessionMeta("root", "planner", None, 1000.0),
            SessionMeta("c1", "coder", "root", 1001.0),
            SessionMeta("c2", "reviewer", "root", 1003.0),
            SessionMeta("c3", "coder", "root", 1002.0),
            SessionMeta("other", "coder", None, 1004.0, {"x": 1}),
        ):
            await store.create(meta)

        async def ids(**filters: Any) -> list[str]:
            return [m.id for m in await store.list(**filters)]

        assert await ids() == ["other", "c2", "c3", "c1", "root"]
        assert await ids(parent_id="root") == ["c2", "c3", "c1"]
        assert await ids(agent="coder") == ["other", "c3", "c1"]
        assert await ids(parent_id="root", agent="coder") == ["c3", "c1"]
        assert await ids(limit=2) == ["other", "c2"]
        assert await ids(parent_id="root", limit=1) == ["c2"]
        assert await ids(limit=0) == []
        assert await ids(parent_id="nobody") == []
        assert (await store.list(limit=1))[0] == SessionMeta(
            "other", "coder", None, 1004.0, {"x": 1}
        )

    async def test_delete_removes_session_and_log(self, store: SessionStore) -> None:
        await store.create(SessionMeta("gone", "a", None, 1.0))
        await store.create(SessionMeta("kept", "a", None, 2.0))
        for sid in ("gone", "kept"):
            await store.append(sid, Entry("x"))
            await store.append(sid, Entry("x"))
        await store.delete("gone")
        with pytest.raises(SessionNotFound):
            await store.get("gone")
        with pytest.raises(SessionNotFound):
            await store.load("gone")
        with pytest.raises(SessionNotFound):
            await store.append("gone", Entry("x"))
        assert [m.id for m in await store.list()] == ["kept"]
        assert len(await store.load("kept")) == 2
        await store.delete("gone")  # deleting again is not an error
        await store.delete("never-existed")

    async def test_recreated_session_starts_a_fresh_log(self, store: SessionStore) -> None:
        await store.create(SessionMeta("s-1", "first"))
        await store.append("s-1", Entry("old"))
        await store.append("s-1", Entry("old"))
        await store.delete("s-1")
        await store.create(SessionMeta("s-1", "second"))
        assert await store.load("s-1") == []
        assert await store.append("s-1", Entry("new")) == 1
        assert [e.kind for e in await store.load("s-1")] == ["new"]

    # -- fencing ------------------------------------------------------------------

    @requires(Capability.FENCED_APPENDS)
    async def test_fenced_append_with_current_generation(
        self, store: SessionStore, leases: Leases
    ) -> None:
        await store.create(SessionMeta("s-1"))
        lease = await leases.acquire("child:s-1", "worker-a", 30.0)
        assert lease is not None
        assert await store.append("s-1", Entry("x", {"n": 1}), fence=lease.fence) == 1
        # Releasing does not make a newer generation: the fence stays current.
        await leases.release(lease)
        assert await store.append("s-1", Entry("x", {"n": 2}), fence=lease.fence) == 2
        with pytest.raises(SessionNotFound):
            await store.append("missing", Entry("x"), fence=lease.fence)

    @requires(Capability.FENCED_APPENDS)
    async def test_stale_fence_is_refused_and_writes_nothing(
        self, store: SessionStore, leases: Leases
    ) -> None:
        await store.create(SessionMeta("s-1"))
        old = await leases.acquire("child:s-1", "worker-a", 30.0)
        assert old is not None
        await store.append("s-1", Entry("x", {"by": "old"}), fence=old.fence)
        await leases.release(old)
        new = await leases.acquire("child:s-1", "worker-b", 30.0)
        assert new is not None and new.generation > old.generation
        with pytest.raises(StaleLeaseError):
            await store.append("s-1", Entry("x", {"by": "old-again"}), fence=old.fence)
        assert [e.data["by"] for e in await store.load("s-1")] == ["old"]
        assert await store.append("s-1", Entry("x", {"by": "new"}), fence=new.fence) == 2
        # An unfenced write is not subject to any lease.
        assert await store.append("s-1", Entry("x", {"by": "unfenced"})) == 3

    @requires(Capability.FENCED_APPENDS)
    async def test_fence_for_a_key_never_leased_is_stale(
        self, store: SessionStore, leases: Leases
    ) -> None:
        await store.create(SessionMeta("s-1"))
        other = await leases.acquire("some-other-key", "worker-a", 30.0)
        assert other is not None
        with pytest.raises(StaleLeaseError):
            await store.append("s-1", Entry("x"), fence=Fence("never-leased", other.generation))
        assert await store.load("s-1") == []

    @requires(Capability.FENCED_APPENDS)
    async def test_no_stale_write_lands_after_takeover(
        self, store: SessionStore, leases: Leases
    ) -> None:
        await store.create(SessionMeta("s-1"))
        old = await leases.acquire("child:s-1", "worker-a", 30.0)
        assert old is not None

        async def stale_writer() -> int:
            written = 0
            while True:
                try:
                    await store.append("s-1", Entry("x", {"by": "old"}), fence=old.fence)
                except StaleLeaseError:
                    return written
                written += 1
                await asyncio.sleep(0)

        writer = asyncio.create_task(stale_writer())
        for _ in range(5):
            await asyncio.sleep(0)
        await leases.release(old)
        new = await leases.acquire("child:s-1", "worker-b", 30.0)
        assert new is not None
        await store.append("s-1", Entry("x", {"by": "new"}), fence=new.fence)
        old_writes = await asyncio.wait_for(writer, 30)
        by = [e.data["by"] for e in await store.load("s-1")]
        assert by == ["old"] * old_writes + ["new"]

    # -- an append with the inbox read beside it ------------------------------------
    #
    # `append_then_pending` is optional (a runtime appends a round's results
    # through it when the store has it): a store that has it appends exactly
    # as `append` does and returns the inbox's pending notices with it.

    @staticmethod
    def _inbox_of(store: SessionStore) -> Any:
        backend = getattr(store, "backend", None)
        inbox = backend.inbox if isinstance(backend, Backend) else None
        if inbox is None:
            from ..backends.memory import MemoryNoticeInbox

            inbox = MemoryNoticeInbox()
        return inbox

    async def _leased_session(
        self, store: SessionStore, leases: Leases
    ) -> tuple[Any, Any, str, Any]:
        """The store's `append_then_pending` (the test skipped when it has
        none), its inbox, a new session and a lease on it held by worker-a."""
        both = getattr(store, "append_then_pending", None)
        if both is None:
            pytest.skip("the store has no append_then_pending (it is optional)")
        sid = _new_id()
        await store.create(SessionMeta(sid))
        lease = await leases.acquire(f"session:{sid}", "worker-a", 30.0)
        assert lease is not None
        return both, self._inbox_of(store), sid, lease

    @requires(Capability.FENCED_APPENDS)
    async def test_append_then_pending_appends_and_reads_the_inbox(
        self, store: SessionStore, leases: Leases
    ) -> None:
        from ..backends import BackgroundNotice

        both, inbox, sid, lease = await self._leased_session(store, leases)
        assert await both(sid, Entry("x", {"n": 1}), inbox, fence=lease.fence) == (1, [])
        notices = [BackgroundNotice(f"n{i}", f"a{i}", "job", f"text {i}") for i in range(3)]
        for notice in notices:
            assert await inbox.push(sid, notice)
        await inbox.ack(sid, ["n1"])
        position, pending = await both(sid, Entry("x", {"n": 2}), inbox, fence=lease.fence)
        assert position == 2
        assert pending == [notices[0], notices[2]]
        # Unfenced too, and the read acknowledges nothing.
        position, pending = await both(sid, Entry("x", {"n": 3}), inbox)
        assert (position, pending) == (3, [notices[0], notices[2]])
        assert [e.data["n"] for e in await store.load(sid)] == [1, 2, 3]

    @requires(Capability.FENCED_APPENDS)
    async def test_append_then_pending_refuses_as_append_does(
        self, store: SessionStore, leases: Leases
    ) -> None:
        both, inbox, sid, old = await self._leased_session(store, leases)
        await both(sid, Entry("x", {"by": "old"}), inbox, fence=old.fence)
        await leases.release(old)
        new = await leases.acquire(f"session:{sid}", "worker-b", 30.0)
        assert new is not None
        with pytest.raises(StaleLeaseError):
            await both(sid, Entry("x", {"by": "old-again"}), inbox, fence=old.fence)
        with pytest.raises(SessionNotFound):
            await both(_new_id("missing"), Entry("x"), inbox, fence=new.fence)
        assert [e.data["by"] for e in await store.load(sid)] == ["old"]
        assert (await both(sid, Entry("x", {"by": "new"}), inbox, fence=new.fence))[0] == 2

    @requires(Capability.FENCED_APPENDS)
    async def test_append_all_appends_in_order_and_reads_the_inbox(
        self, store: SessionStore, leases: Leases
    ) -> None:
        many = getattr(store, "append_all", None)
        if many is None:
            pytest.skip("the store has no append_all (it is optional)")
        from ..backends import BackgroundNotice

        inbox = self._inbox_of(store)
        sid = _new_id()
        await store.create(SessionMeta(sid))
        assert await store.append(sid, Entry("x", {"n": 1})) == 1
        lease = await leases.acquire(f"session:{sid}", "worker-a", 30.0)
        assert lease is not None
        two = [Entry("x", {"n": 2}, "run-1"), Entry("y", {"n": 3})]
        assert await many(sid, two, fence=lease.fence) == (2, None)
        notices = [BackgroundNotice(f"n{i}", f"a{i}", "job", f"text {i}") for i in range(3)]
        for notice in notices:
            assert await inbox.push(sid, notice)
        await inbox.ack(sid, ["n1"])
        three = [Entry("x", {"n": n}) for n in (4, 5, 6)]
        first, pending = await many(sid, three, fence=lease.fence, inbox=inbox)
        assert first == 4
        assert pending == [notices[0], notices[2]]
        # Unfenced too, and the read acknowledges nothing.
        first, pending = await many(sid, [Entry("z", {"n": 7})], inbox=inbox)
        assert (first, pending) == (7, [notices[0], notices[2]])
        loaded = await store.load(sid)
        assert [e.data["n"] for e in loaded] == [1, 2, 3, 4, 5, 6, 7]
        assert [e.position for e in loaded] == [1, 2, 3, 4, 5, 6, 7]
        assert [e.kind for e in loaded[1:3]] == ["x", "y"]
        assert [e.run_id for e in loaded[1:3]] == ["run-1", None]
        # Data and times come back exactly as given.
        odd = {"big": 1e300, "tiny": 5e-324, "text": 'é \u0000 \ud800 "q"', "deep": [[{}]]}
        at = 1_700_000_000.123456
        first, _ = await many(sid, [Entry("x", odd, created_at=at), Entry("x", {})])
        back = (await store.load(sid, after=first - 1))[0]
        assert (back.data, back.created_at, back.position) == (odd, at, 8)

    @requires(Capability.FENCED_APPENDS)
    async def test_append_all_refuses_as_append_does_and_writes_none(
        self, store: SessionStore, leases: Leases
    ) -> None:
        many = getattr(store, "append_all", None)
        if many is None:
            pytest.skip("the store has no append_all (it is optional)")
        inbox = self._inbox_of(store)
        sid = _new_id()
        await store.create(SessionMeta(sid))
        old = await leases.acquire(f"session:{sid}", "worker-a", 30.0)
        assert old is not None
        await many(sid, [Entry("x", {"by": "old"})], fence=old.fence)
        await leases.release(old)
        new = await leases.acquire(f"session:{sid}", "worker-b", 30.0)
        assert new is not None
        stale = [Entry("x", {"by": "old-again"}), Entry("x", {"by": "old-again"})]
        with pytest.raises(StaleLeaseError):
            await many(sid, stale, fence=old.fence, inbox=inbox)
        with pytest.raises(SessionNotFound):
            await many(_new_id("missing"), [Entry("x"), Entry("x")], fence=new.fence)
        with pytest.raises(SessionNotFound):
            await many(_new_id("missing"), [Entry("x")])
        assert [e.data["by"] for e in await store.load(sid)] == ["old"]
        placed = [Entry("x", {"by": "new"}), Entry("x", {"by": "new"})]
        assert (await many(sid, placed, fence=new.fence))[0] == 2
        assert [e.position for e in await store.load(sid)] == [1, 2, 3]

    async def test_append_all_interleaves_whole_with_other_appends(
        self, store: SessionStore
    ) -> None:
        many = getattr(store, "append_all", None)
        if many is None:
            pytest.skip("the store has no append_all (it is optional)")
        sid = _new_id()
        await store.create(SessionMeta(sid))

        async def batch(w: int) -> None:
            for i in range(5):
                await many(sid, [Entry("x", {"w": w, "i": i, "k": k}) for k in range(3)])

        async def single(w: int) -> None:
            for i in range(5):
                await store.append(sid, Entry("x", {"w": w, "i": i, "k": 0}))

        await asyncio.gather(batch(0), batch(1), single(2))
        loaded = await store.load(sid)
        assert [e.position for e in loaded] == list(range(1, 36))
        # A batch's entries land next to each other, in their order.
        for n, e in enumerate(loaded):
            if e.data["w"] != 2 and e.data["k"] == 0:
                assert [x.data for x in loaded[n : n + 3]] == [
                    {"w": e.data["w"], "i": e.data["i"], "k": k} for k in range(3)
                ]


# -- several processes ------------------------------------------------------------


async def assert_multiprocess_appends(
    url: str,
    *,
    options: Mapping[str, Any] | None = None,
    processes: int = 4,
    appends: int = 25,
    timeout: float = 90.0,
) -> None:
    """Start `processes` real processes appending `appends` entries each to one session.

    Each process opens its own store with `open_backend(url, **options).store`, so
    `options` must be picklable. The processes start appending together;
    afterwards every entry must be present exactly once, positions must be
    dense from 1, each process's entries must keep its own order, and the
    position each append returned must be where its entry sits.
    """
    opts = dict(options or {})
    factory = functools.partial(open_backend, url, **opts)
    store = factory().store
    sid = _new_id("multiprocess")
    try:
        await store.create(SessionMeta(sid, "multiprocess"))
        # Connecting and migrating happen before the start line, so the
        # processes race each other's appends rather than their start-up.
        returned = await asyncio.to_thread(
            race, _append_many, factory, sid, [(w, appends) for w in range(processes)], timeout
        )

        entries = await store.load(sid)
        total = processes * appends
        assert [e.position for e in entries] == list(range(1, total + 1))
        written = [(e.data["writer"], e.data["seq"]) for e in entries]
        assert sorted(written) == [(w, i) for w in range(processes) for i in range(appends)]
        by_position = {e.position: (e.data["writer"], e.data["seq"]) for e in entries}
        for writer in range(processes):
            seqs = [seq for w, seq in written if w == writer]
            assert seqs == list(range(appends)), f"process {writer} entries out of order"
            assert [by_position[p] for p in returned[writer]] == [
                (writer, i) for i in range(appends)
            ]
    finally:
        try:
            await store.delete(sid)
        finally:
            await _close(store)


async def _append_many(
    backend: Backend, sid: str, job: tuple[int, int], ready: Callable[[], Awaitable[None]]
) -> list[int]:
    writer, appends = job
    await backend.store.get(sid)
    await ready()
    return [
        await backend.store.append(sid, Entry(EntryKind.MESSAGE, {"writer": writer, "seq": seq}))
        for seq in range(appends)
    ]
