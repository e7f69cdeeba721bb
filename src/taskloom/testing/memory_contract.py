"""The contract suite every `Memories` (a backend's `memory`) must pass.

Subclass it in a test module (name the subclass `Test...`) and provide the
store as the `memory` fixture::

    import functools, pytest
    from taskloom.testing.memory_contract import MemoriesContract

    class TestMyMemory(MemoriesContract):
        @pytest.fixture
        async def memory(self, tmp_path):
            backend = MyBackend(tmp_path / "db")
            yield backend.memory
            await backend.close()

        # Optional: a picklable factory of an equivalent backend (or store)
        # on the same data enables the check that races several processes.
        @pytest.fixture
        def memory_factory(self, tmp_path):
            return functools.partial(MyBackend, tmp_path / "db")

The suite needs the backend to declare `Capability.MEMORY`, and its
multi-process check `Capability.SPANS_PROCESSES`. Every test starts from an
empty store.

The `memory` fixture is a store given no embedder (one test checks that a
semantic search then says how to give one). The semantic search tests use
the `semantic_memory` fixture: by default the
same store given an `embedder` (a `HashingEmbedder`) through
`memory.with_embedder(embedder)`, skipped for a store without that method;
override it to give the embedder your own way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .._extras import needs_extra
from ..backends import (
    EMBED_BATCH,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_KEY_LENGTH,
    MAX_QUERY_WORDS,
    MAX_VALUE_BYTES,
    Capability,
    Memories,
    MemoryItem,
)
from ..errors import ConfigurationError, UsageError, VersionConflict
from ._processes import race
from .capabilities import CapabilityGate, requires
from .embedders import HashingEmbedder

with needs_extra("taskloom.testing's contract suites"):
    import pytest

__all__ = ["MemoriesContract", "edit_from_processes"]

USER = ("user", "u1")
OTHER = ("user", "u2")

CORPUS: dict[tuple[tuple[str, ...], str], Any] = {
    (USER, "backup"): "The postgres backup runs nightly at two",
    (USER, "database"): "We use postgres as the main database",
    (USER, "cat"): "The cat sleeps on the sofa all day",
    (USER, "prefs"): {"editor": "vim", "notes": ["likes tea", "dislikes meetings"]},
    (OTHER, "backup"): "Their postgres backup runs weekly",
}
"""A fixed small corpus: the search tests know which items each query must find first."""


async def _editing(
    made: Any, where: str, job: tuple[str, int], ready: Callable[[], Awaitable[None]]
) -> list[int]:
    name, edits = job
    memory = getattr(made, "memory", made)
    namespace, key = ("race",), where
    conflicts = 0
    await ready()
    for n in range(edits):
        while True:
            item = await memory.get(namespace, key)
            assert item is not None
            try:
                await memory.put(
                    namespace, key, [*item.value, f"{name}-{n}"], if_version=item.version
                )
                break
            except VersionConflict:
                conflicts += 1
    return [conflicts]


async def _keyed_append(
    made: Any, where: str, job: int, ready: Callable[[], Awaitable[None]]
) -> list[int]:
    memory = getattr(made, "memory", made)
    await ready()
    written = await memory.put(("race",), where, ["appended once"], idempotency_key="cross-process")
    return [written.version]


def edit_from_processes(
    factory: Callable[[], Any], key: str, processes: int, edits: int
) -> list[int]:
    """`processes` processes (started with "spawn") each make `edits` edits to
    the item `("race",)`/`key` (a JSON list, which must exist): read it, then
    put it with its own id appended and `if_version=` the version read,
    redoing the edit on `VersionConflict`. The conflicts each one met."""
    payloads = [(f"p{i}", edits) for i in range(processes)]
    return [conflicts for [conflicts] in race(_editing, factory, key, payloads)]


class MemoriesContract(CapabilityGate):
    """The `Memories` contract; needs a `memory` fixture."""

    REQUIRES = frozenset({Capability.MEMORY})

    @pytest.fixture
    def memory_factory(self) -> Callable[[], Any] | None:
        return None

    @pytest.fixture
    def embedder(self) -> HashingEmbedder:
        return HashingEmbedder()

    @pytest.fixture
    def semantic_memory(self, memory: Memories, embedder: HashingEmbedder) -> Memories:
        with_embedder = getattr(memory, "with_embedder", None)
        if with_embedder is None:
            pytest.skip("the store has no with_embedder(): override the semantic_memory fixture")
        return with_embedder(embedder)  # type: ignore[no-any-return]

    async def _corpus(self, memory: Memories) -> None:
        for (namespace, key), value in CORPUS.items():
            await memory.put(namespace, key, value)

    # ----- values and versions -----

    async def test_a_text_value_round_trips_with_version_one_and_its_times(
        self, memory: Memories
    ) -> None:
        assert await memory.get(USER, "name") is None
        put = await memory.put(USER, "name", "Ada \u00e9\U0001f600 \x00 \ud800")
        got = await memory.get(USER, "name")
        assert got == put
        assert got.value == "Ada \u00e9\U0001f600 \x00 \ud800"
        assert (got.namespace, got.key, got.version) == (USER, "name", 1)
        assert got.created_at == got.updated_at > 0

    async def test_json_objects_and_arrays_round_trip_as_such(self, memory: Memories) -> None:
        obj = {"a": [1, 2.5, None, True], "b": {"c": "d"}, "e": ""}
        await memory.put(USER, "obj", obj)
        await memory.put(USER, "arr", [obj, "x", 3])
        await memory.put(USER, "text", '{"looks": "like json"}')
        assert (await memory.get(USER, "obj")).value == obj  # type: ignore[union-attr]
        assert (await memory.get(USER, "arr")).value == [obj, "x", 3]  # type: ignore[union-attr]
        assert (await memory.get(USER, "text")).value == '{"looks": "like json"}'  # type: ignore[union-attr]

    async def test_each_write_adds_one_to_the_version_and_keeps_the_creation_time(
        self, memory: Memories
    ) -> None:
        first = await memory.put(USER, "k", "one")
        second = await memory.put(USER, "k", "two")
        third = await memory.put(USER, "k", ["three"])
        assert [first.version, second.version, third.version] == [1, 2, 3]
        got = await memory.get(USER, "k")
        assert got is not None and got.value == ["three"] and got.version == 3
        assert got.created_at == first.created_at and got.updated_at >= first.updated_at

    async def test_if_version_zero_creates_only_an_absent_item(self, memory: Memories) -> None:
        made = await memory.put(USER, "k", "mine", if_version=0)
        assert made.version == 1
        with pytest.raises(VersionConflict) as refused:
            await memory.put(USER, "k", "theirs", if_version=0)
        assert refused.value.current == made
        assert (await memory.get(USER, "k")) == made

    async def test_if_version_writes_on_a_match_and_refuses_a_mismatch_with_the_current_item(
        self, memory: Memories
    ) -> None:
        await memory.put(USER, "k", "v1")
        v2 = await memory.put(USER, "k", "v2", if_version=1)
        assert (v2.version, v2.value) == (2, "v2")
        for stale in (1, 3):
            with pytest.raises(VersionConflict) as refused:
                await memory.put(USER, "k", "lost", if_version=stale)
            current = refused.value.current
            assert isinstance(current, MemoryItem) and current == v2
        with pytest.raises(VersionConflict) as absent:
            await memory.put(USER, "nothing-here", "x", if_version=1)
        assert absent.value.current is None
        assert await memory.get(USER, "nothing-here") is None
        assert await memory.get(USER, "k") == v2

    async def test_delete_says_whether_there_was_an_item(self, memory: Memories) -> None:
        await memory.put(USER, "k", "v")
        assert await memory.delete(USER, "k") is True
        assert await memory.get(USER, "k") is None
        assert await memory.delete(USER, "k") is False
        again = await memory.put(USER, "k", "anew")
        assert again.version == 1  # a deleted item's versions start over

    async def test_delete_with_if_version_deletes_only_that_version(self, memory: Memories) -> None:
        await memory.put(USER, "k", "v1")
        v2 = await memory.put(USER, "k", "v2")
        with pytest.raises(VersionConflict) as refused:
            await memory.delete(USER, "k", if_version=1)
        assert refused.value.current == v2
        assert await memory.get(USER, "k") == v2
        assert await memory.delete(USER, "k", if_version=2) is True
        with pytest.raises(VersionConflict) as gone:
            await memory.delete(USER, "k", if_version=2)
        assert gone.value.current is None

    # ----- idempotent writes -----

    async def test_a_put_retried_with_its_key_writes_once_and_returns_the_first_item(
        self, memory: Memories
    ) -> None:
        first = await memory.put(USER, "k", "one", idempotency_key="call-1")
        again = await memory.put(USER, "k", "one", idempotency_key="call-1")
        assert again == first and first.version == 1
        # Even after the item moved on, the key answers what it first wrote.
        moved = await memory.put(USER, "k", "two")
        replay = await memory.put(USER, "k", "something else", idempotency_key="call-1")
        assert replay == first
        assert await memory.get(USER, "k") == moved
        other = await memory.put(USER, "k", "three", idempotency_key="call-2")
        assert (other.version, other.value) == (3, "three")

    async def test_a_keyed_put_with_if_version_replays_even_on_a_stale_version(
        self, memory: Memories
    ) -> None:
        base = await memory.put(USER, "log", ["a"])
        applied = await memory.put(
            USER, "log", ["a", "b"], if_version=base.version, idempotency_key="edit-b"
        )
        # The retry carries the version it first read, stale now: replayed, not refused.
        replay = await memory.put(
            USER, "log", ["a", "b"], if_version=base.version, idempotency_key="edit-b"
        )
        assert replay == applied
        item = await memory.get(USER, "log")
        assert item is not None and item.value == ["a", "b"] and item.version == 2

    async def test_a_refused_keyed_write_records_no_key_so_its_redo_applies(
        self, memory: Memories
    ) -> None:
        await memory.put(USER, "k", "v1")
        await memory.put(USER, "k", "v2")
        with pytest.raises(VersionConflict):
            await memory.put(USER, "k", "stale", if_version=1, idempotency_key="edit")
        with pytest.raises(VersionConflict):
            await memory.delete(USER, "k", if_version=1, idempotency_key="drop")
        redone = await memory.put(USER, "k", "redone", if_version=2, idempotency_key="edit")
        assert (redone.version, redone.value) == (3, "redone")
        assert await memory.delete(USER, "k", if_version=3, idempotency_key="drop") is True

    async def test_many_refused_keyed_writes_leave_every_statement_working(
        self, memory: Memories
    ) -> None:
        # Statements a store prepares after a few uses must outlive the
        # refusals between them (a rolled-back transaction may drop them).
        await memory.put(USER, "k", "v1")
        for n in range(20):
            with pytest.raises(VersionConflict):
                await memory.put(USER, "k", "stale", if_version=9, idempotency_key=f"r{n}")
            assert (await memory.get(USER, "k")).version == 1  # type: ignore[union-attr]
            assert [i.key for i in await memory.list(USER)] == ["k"]
        done = await memory.put(USER, "k", "v2", if_version=1, idempotency_key="r0")
        assert done.version == 2

    async def test_a_delete_retried_with_its_key_returns_what_it_first_returned(
        self, memory: Memories
    ) -> None:
        await memory.put(USER, "k", "v")
        assert await memory.delete(USER, "k", idempotency_key="del-1") is True
        await memory.put(USER, "k", "made again")
        assert await memory.delete(USER, "k", idempotency_key="del-1") is True
        assert (await memory.get(USER, "k")).value == "made again"  # type: ignore[union-attr]
        assert await memory.delete(USER, "absent", idempotency_key="del-2") is False
        await memory.put(USER, "absent", "now here")
        assert await memory.delete(USER, "absent", idempotency_key="del-2") is False
        assert await memory.get(USER, "absent") is not None

    async def test_a_key_reused_for_another_item_or_another_write_is_refused(
        self, memory: Memories
    ) -> None:
        await memory.put(USER, "k", "v", idempotency_key="once")
        with pytest.raises(UsageError, match="another memory item"):
            await memory.put(OTHER, "k", "v", idempotency_key="once")
        with pytest.raises(UsageError, match="applied by a put"):
            await memory.delete(USER, "k", idempotency_key="once")
        assert await memory.get(OTHER, "k") is None
        for bad in ("", "x" * (MAX_IDEMPOTENCY_KEY_LENGTH + 1), "a\x00b", 7):
            with pytest.raises(UsageError, match="idempotency_key"):
                await memory.put(USER, "k2", "v", idempotency_key=bad)  # type: ignore[arg-type]
        assert await memory.get(USER, "k2") is None

    async def test_concurrent_retries_of_one_keyed_edit_apply_it_once(
        self, memory: Memories
    ) -> None:
        await memory.put(USER, "log", [])
        item = await memory.get(USER, "log")
        assert item is not None

        async def retry() -> MemoryItem:
            return await memory.put(USER, "log", ["once"], idempotency_key="same-call")

        results = await asyncio.gather(*(retry() for _ in range(5)))
        assert len({r.version for r in results}) == 1
        final = await memory.get(USER, "log")
        assert final is not None and final.version == 2 and final.value == ["once"]

    @requires(Capability.SPANS_PROCESSES)
    async def test_a_key_applied_by_one_process_is_replayed_in_another(
        self, memory: Memories, memory_factory: Callable[[], Any] | None
    ) -> None:
        if memory_factory is None:
            pytest.skip("no memory_factory: the multi-process check needs one")
        await memory.put(("race",), "keyed", [])
        results = await asyncio.to_thread(race, _keyed_append, memory_factory, "keyed", [1, 2, 3])
        versions = {version for [version] in results}
        item = await memory.get(("race",), "keyed")
        assert item is not None and item.value == ["appended once"] and item.version == 2
        assert versions == {2}
        replay = await memory.put(("race",), "keyed", ["x"], idempotency_key="cross-process")
        assert replay.version == 2 and replay.value == ["appended once"]

    # ----- listing -----

    async def test_list_takes_a_prefix_of_parts_in_order_of_namespace_then_key(
        self, memory: Memories
    ) -> None:
        places = [
            (("user", "u1"), "b"),
            (("user", "u1"), "a"),
            (("user", "u1"), "B"),  # code point order: "B" < "a"
            (("user", "u1", "notes"), "a"),
            (("user", "u10"), "a"),
            (("user", "u1 x"), "a"),
            (("user",), "z"),
            (("agent", "helper"), "a"),
            (("users",), "a"),
        ]
        for namespace, key in places:
            await memory.put(namespace, key, f"{'/'.join(namespace)}:{key}")
        under_u1 = [(i.namespace, i.key) for i in await memory.list(("user", "u1"))]
        # ("user", "u10") and ("user", "u1 x") are not under ("user", "u1"): parts, not text.
        assert under_u1 == [
            (("user", "u1"), "B"),
            (("user", "u1"), "a"),
            (("user", "u1"), "b"),
            (("user", "u1", "notes"), "a"),
        ]
        every = [(i.namespace, i.key) for i in await memory.list(())]
        assert every == sorted(places)
        assert [i.namespace for i in await memory.list(("user",))] == [
            ("user",),
            ("user", "u1"),
            ("user", "u1"),
            ("user", "u1"),
            ("user", "u1", "notes"),
            ("user", "u1 x"),
            ("user", "u10"),
        ]
        assert await memory.list(("nobody",)) == []

    async def test_list_pages_with_limit_and_offset(self, memory: Memories) -> None:
        for n in range(7):
            await memory.put(USER, f"k{n}", n * "x" or "-")
        pages = [
            [i.key for i in await memory.list(USER, limit=3, offset=start)]
            for start in (0, 3, 6, 9)
        ]
        assert pages == [["k0", "k1", "k2"], ["k3", "k4", "k5"], ["k6"], []]
        assert await memory.list(USER, limit=0) == []

    async def test_list_takes_a_prefix_of_keys(self, memory: Memories) -> None:
        for key in ("dir/a", "dir/b", "dir", "dir0", "dir/sub/c", "di", "other/dir/x"):
            await memory.put(USER, key, key)
        await memory.put((*USER, "deeper"), "dir/z", "deeper")
        await memory.put(OTHER, "dir/a", "theirs")
        keyed = [(i.namespace, i.key) for i in await memory.list(USER, key_prefix="dir/")]
        # Text, not parts: "dir0" and "dir" are not under "dir/"; a deeper
        # namespace's keys are listed after the namespace's own, as in `list`.
        assert keyed == [
            (USER, "dir/a"),
            (USER, "dir/b"),
            (USER, "dir/sub/c"),
            ((*USER, "deeper"), "dir/z"),
        ]
        assert [i.key for i in await memory.list(USER, key_prefix="dir")] == [
            "dir",
            "dir/a",
            "dir/b",
            "dir/sub/c",
            "dir0",
            "dir/z",
        ]
        paged = [
            [i.key for i in await memory.list(USER, key_prefix="dir/", limit=2, offset=start)]
            for start in (0, 2, 4)
        ]
        assert paged == [["dir/a", "dir/b"], ["dir/sub/c", "dir/z"], []]
        assert await memory.list(USER, key_prefix="nothing/") == []
        # "%" and "_" are plain characters in a key prefix, never patterns.
        await memory.put(USER, "100%_done", "x")
        assert [i.key for i in await memory.list(USER, key_prefix="100%_")] == ["100%_done"]
        assert await memory.list(USER, key_prefix="1%") == []
        for bad in (7, None, "x" * (MAX_KEY_LENGTH + 1), "a\x00"):
            with pytest.raises(UsageError):
                await memory.list(USER, key_prefix=bad)  # type: ignore[arg-type]

    async def test_namespaces_are_each_listed_once_in_order(self, memory: Memories) -> None:
        await memory.put(("user", "u2"), "a", "x")
        await memory.put(("user", "u1"), "a", "x")
        await memory.put(("user", "u1"), "b", "x")
        await memory.put(("agent", "helper"), "a", "x")
        await memory.put(("user", "u1", "notes"), "a", "x")
        assert await memory.namespaces() == [
            ("agent", "helper"),
            ("user", "u1"),
            ("user", "u1", "notes"),
            ("user", "u2"),
        ]
        assert await memory.namespaces(("user", "u1")) == [("user", "u1"), ("user", "u1", "notes")]
        await memory.delete(("agent", "helper"), "a")
        assert ("agent", "helper") not in await memory.namespaces()

    async def test_namespaces_keep_their_items_apart(self, memory: Memories) -> None:
        await memory.put(USER, "k", "mine")
        await memory.put(OTHER, "k", "theirs")
        await memory.put(("user", "u1", "sub"), "k", "below")
        assert (await memory.get(USER, "k")).value == "mine"  # type: ignore[union-attr]
        assert (await memory.get(OTHER, "k")).value == "theirs"  # type: ignore[union-attr]
        await memory.put(USER, "k", "mine again")
        assert (await memory.get(OTHER, "k")).version == 1  # type: ignore[union-attr]
        assert await memory.delete(USER, "k") is True
        assert (await memory.get(OTHER, "k")).value == "theirs"  # type: ignore[union-attr]
        assert (await memory.get(("user", "u1", "sub"), "k")).value == "below"  # type: ignore[union-attr]

    # ----- search -----

    async def test_search_ranks_the_item_with_every_word_first(self, memory: Memories) -> None:
        await self._corpus(memory)
        hits = await memory.search(USER, "postgres backup")
        assert [h.item.key for h in hits] == ["backup", "database"]
        assert hits[0].score > hits[1].score
        assert hits[0].item.value == CORPUS[(USER, "backup")]

    async def test_search_is_case_insensitive_and_reads_the_strings_of_json_values(
        self, memory: Memories
    ) -> None:
        await self._corpus(memory)
        assert [h.item.key for h in await memory.search(USER, "TEA")] == ["prefs"]
        assert [h.item.key for h in await memory.search(USER, "sofa?!")] == ["cat"]
        # Keys of a JSON object are not searched, only its strings.
        assert await memory.search(USER, "editor") == []

    async def test_search_stays_under_its_prefix_and_sees_writes_and_deletes(
        self, memory: Memories
    ) -> None:
        await self._corpus(memory)
        assert [h.item.namespace for h in await memory.search(OTHER, "backup")] == [OTHER]
        assert {h.item.namespace for h in await memory.search(("user",), "backup")} == {USER, OTHER}
        await memory.put(USER, "cat", "the cat now runs the backup")
        assert "cat" in [h.item.key for h in await memory.search(USER, "backup")]
        assert await memory.search(USER, "sofa") == []
        await memory.delete(USER, "backup")
        assert [h.item.key for h in await memory.search(USER, "nightly")] == []

    async def test_search_without_words_or_matches_finds_nothing_and_honours_limit(
        self, memory: Memories
    ) -> None:
        await self._corpus(memory)
        assert await memory.search(USER, "") == []
        assert await memory.search(USER, '"( * - OR AND NEAR') == []
        assert await memory.search(USER, "zebra") == []
        assert len(await memory.search(("user",), "postgres", limit=2)) == 2
        assert await memory.search(USER, "postgres", limit=0) == []

    async def test_a_query_of_too_many_words_is_refused(self, memory: Memories) -> None:
        await self._corpus(memory)
        most = " ".join(f"w{n}" for n in range(MAX_QUERY_WORDS - 1)) + " postgres"
        assert [hit.item.key for hit in await memory.search(USER, most)]
        with pytest.raises(UsageError, match="at most 256 distinct words"):
            await memory.search(USER, most + " one-more")
        with pytest.raises(UsageError, match="characters"):
            await memory.search(USER, "postgres " * (MAX_VALUE_BYTES // 9 + 1))

    # ----- semantic search -----

    async def test_semantic_search_without_an_embedder_says_how_to_give_one(
        self, memory: Memories
    ) -> None:
        await self._corpus(memory)
        with pytest.raises(UsageError, match="embedder"):
            await memory.search(USER, "postgres", mode="semantic")
        with pytest.raises(UsageError, match="mode"):
            await memory.search(USER, "postgres", mode="vector")  # type: ignore[arg-type]
        # The default is full-text, as before.
        assert [h.item.key for h in await memory.search(USER, "sofa")] == ["cat"]

    async def test_semantic_search_ranks_by_similarity_under_its_prefix(
        self, semantic_memory: Memories
    ) -> None:
        await self._corpus(semantic_memory)
        hits = await semantic_memory.search(USER, "postgres backup", mode="semantic")
        assert [h.item.key for h in hits[:2]] == ["backup", "database"]
        assert [h.item.namespace for h in hits] == [USER] * 4
        assert hits[0].item.value == CORPUS[(USER, "backup")]
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True) and 0.5 < scores[0] <= 1.0 + 1e-6
        assert scores[2] == pytest.approx(0.0, abs=1e-6)  # no word shared with the query
        assert [h.item.key for h in await semantic_memory.search(OTHER, "x", mode="semantic")] == [
            "backup"
        ]
        found = await semantic_memory.search(("user",), "backup", limit=2, mode="semantic")
        assert {(h.item.namespace, h.item.key) for h in found} == {
            (USER, "backup"),
            (OTHER, "backup"),
        }
        assert await semantic_memory.search(USER, "  ", mode="semantic") == []
        assert await semantic_memory.search(USER, "tea", limit=0, mode="semantic") == []
        # A JSON value is embedded by its strings.
        tea = await semantic_memory.search(USER, "likes tea", limit=1, mode="semantic")
        assert [h.item.key for h in tea] == ["prefs"]

    async def test_items_put_with_an_embedder_are_embedded_once(
        self, semantic_memory: Memories, embedder: HashingEmbedder
    ) -> None:
        await self._corpus(semantic_memory)
        assert len(embedder.calls) == len(CORPUS)
        embedder.calls.clear()
        await semantic_memory.search(("user",), "postgres", mode="semantic")
        await semantic_memory.search(("user",), "backup", mode="semantic")
        assert embedder.calls == [["postgres"], ["backup"]]  # the queries, nothing more

    async def test_items_lacking_a_current_vector_are_embedded_at_search_in_batches(
        self, memory: Memories, semantic_memory: Memories, embedder: HashingEmbedder
    ) -> None:
        count = 2 * EMBED_BATCH + 3
        for n in range(count):
            await memory.put(USER, f"k{n:03}", f"note number{n}")
        assert embedder.calls == []  # written without the embedder
        hits = await semantic_memory.search(USER, "number7", limit=1, mode="semantic")
        assert [h.item.key for h in hits] == ["k007"]
        embedded = embedder.calls[1:]
        assert all(len(batch) <= EMBED_BATCH for batch in embedded)
        assert sorted(t for batch in embedded for t in batch) == sorted(
            f"note number{n}" for n in range(count)
        )
        embedder.calls.clear()
        await semantic_memory.search(USER, "number7", mode="semantic")
        assert embedder.calls == [["number7"]]  # stored: not embedded again
        # An edit by a writer without the embedder leaves a stale vector: made again.
        await memory.put(USER, "k001", "now about cheese")
        embedder.calls.clear()
        hits = await semantic_memory.search(USER, "cheese", limit=1, mode="semantic")
        assert [h.item.key for h in hits] == ["k001"]
        assert embedder.calls == [["cheese"], ["now about cheese"]]

    async def test_another_models_vectors_are_never_compared(
        self, semantic_memory: Memories, embedder: HashingEmbedder
    ) -> None:
        await self._corpus(semantic_memory)
        other = HashingEmbedder(name="another-model")
        elsewhere = semantic_memory.with_embedder(other)  # type: ignore[attr-defined]
        hits = await elsewhere.search(USER, "sofa", limit=1, mode="semantic")
        assert [h.item.key for h in hits] == ["cat"]
        assert sorted(t for batch in other.calls[1:] for t in batch) == sorted(
            CORPUS[(USER, k)] if k != "prefs" else "vim\nlikes tea\ndislikes meetings"
            for k in ("backup", "database", "cat", "prefs")
        )
        embedder.calls.clear()
        await semantic_memory.search(USER, "sofa", mode="semantic")
        assert embedder.calls == [["sofa"]]  # the first model's vectors are still there

    async def test_delete_removes_the_items_vector(
        self, memory: Memories, semantic_memory: Memories, embedder: HashingEmbedder
    ) -> None:
        await semantic_memory.put(USER, "k", "the cat sleeps")
        assert await semantic_memory.delete(USER, "k") is True
        assert await semantic_memory.search(USER, "cat", mode="semantic") == []
        await memory.put(USER, "k", "the cat sleeps")  # same text and version, no embedder
        embedder.calls.clear()
        hits = await semantic_memory.search(USER, "cat", mode="semantic")
        assert [h.item.key for h in hits] == ["k"]
        assert embedder.calls == [["cat"], ["the cat sleeps"]]  # the old vector was gone

    async def test_a_vector_made_while_its_item_is_deleted_is_not_kept(
        self, memory: Memories, semantic_memory: Memories, embedder: HashingEmbedder
    ) -> None:
        class DeletingMidway(HashingEmbedder):
            async def embed(self, texts: Any) -> list[list[float]]:
                # Another writer deletes the item while its vector is made.
                await memory.delete(USER, "k")
                return await super().embed(texts)

        racing = semantic_memory.with_embedder(DeletingMidway(name=embedder.name))  # type: ignore[attr-defined]
        await racing.put(USER, "k", "the cat sleeps")
        assert await memory.get(USER, "k") is None
        await memory.put(USER, "k", "the cat sleeps")  # same text and version, no embedder
        embedder.calls.clear()
        await semantic_memory.search(USER, "cat", mode="semantic")
        assert embedder.calls == [["cat"], ["the cat sleeps"]]  # no vector outlived its item

    async def test_an_embedder_failing_at_put_leaves_the_item_to_be_embedded_at_search(
        self, semantic_memory: Memories, embedder: HashingEmbedder
    ) -> None:
        class Failing(HashingEmbedder):
            async def embed(self, texts: Any) -> list[list[float]]:
                raise ConnectionError("embedding service down")

        class Short(HashingEmbedder):
            async def embed(self, texts: Any) -> list[list[float]]:
                return [[1.0, 2.0] for _ in texts]

        down = semantic_memory.with_embedder(Failing(name=embedder.name))  # type: ignore[attr-defined]
        item = await down.put(USER, "k", "the cat sleeps")
        assert (await semantic_memory.get(USER, "k")) == item
        with pytest.raises(ConnectionError):
            await down.search(USER, "cat", mode="semantic")
        hits = await semantic_memory.search(USER, "cat", mode="semantic")
        assert [h.item for h in hits] == [item]
        wrong = semantic_memory.with_embedder(Short(name="short"))  # type: ignore[attr-defined]
        with pytest.raises(ConfigurationError, match="dimensions"):
            await wrong.search(USER, "cat", mode="semantic")

        class Fewer(HashingEmbedder):
            async def embed(self, texts: Any) -> list[list[float]]:
                return []

        fewer = semantic_memory.with_embedder(Fewer(name="fewer"))  # type: ignore[attr-defined]
        with pytest.raises(ConfigurationError, match="0 vectors for 1 texts"):
            await fewer.search(USER, "cat", mode="semantic")
        with pytest.raises(UsageError, match="query"):
            await semantic_memory.search(USER, "cat " * 20_000, mode="semantic")

    async def test_vectors_of_another_length_under_one_name_are_made_again(
        self, semantic_memory: Memories
    ) -> None:
        class Tuples(HashingEmbedder):
            async def embed(self, texts: Any) -> Any:
                # Any sequence of sequences of numbers will do (a numpy array, say).
                return tuple(tuple(vector) for vector in await super().embed(texts))

        small = semantic_memory.with_embedder(Tuples(64, name="resized"))  # type: ignore[attr-defined]
        await small.put(USER, "cat", "the cat sleeps")
        await small.put(USER, "dog", "the dog barks")
        larger = Tuples(128, name="resized")
        hits = await semantic_memory.with_embedder(larger).search(  # type: ignore[attr-defined]
            USER, "barks", mode="semantic"
        )
        assert [h.item.key for h in hits] == ["dog", "cat"]
        assert sorted(t for batch in larger.calls[1:] for t in batch) == [
            "the cat sleeps",
            "the dog barks",
        ]

    # ----- refused input -----

    @pytest.mark.parametrize(
        "namespace",
        [(), ("",), ("user", ""), ["user", "u1"], "user", ("a\x1fb",), ("a\nb",), ("x",) * 17],
        ids=["empty", "empty-part", "empty-second", "list", "str", "separator", "newline", "deep"],
    )
    async def test_a_bad_namespace_is_refused(self, memory: Memories, namespace: Any) -> None:
        with pytest.raises(UsageError, match="namespace"):
            await memory.put(namespace, "k", "v")
        with pytest.raises(UsageError, match="namespace"):
            await memory.get(namespace, "k")
        assert await memory.list(()) == []

    async def test_bad_keys_values_versions_and_pages_are_refused(self, memory: Memories) -> None:
        bad_calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("key", lambda: memory.put(USER, "", "v")),
            ("key", lambda: memory.put(USER, "k" * (MAX_KEY_LENGTH + 1), "v")),
            ("key", lambda: memory.put(USER, "a\x00b", "v")),
            ("value", lambda: memory.put(USER, "k", 3)),  # type: ignore[arg-type]
            ("value", lambda: memory.put(USER, "k", None)),  # type: ignore[arg-type]
            ("value", lambda: memory.put(USER, "k", "x" * (MAX_VALUE_BYTES + 1))),
            ("JSON", lambda: memory.put(USER, "k", {"x": float("nan")})),
            ("JSON", lambda: memory.put(USER, "k", {"x": object()})),
            ("if_version", lambda: memory.put(USER, "k", "v", if_version=-1)),
            ("if_version", lambda: memory.delete(USER, "k", if_version=0)),
            ("limit", lambda: memory.list(USER, limit=-1)),
            ("offset", lambda: memory.list(USER, offset=-1)),
            ("query", lambda: memory.search(USER, None)),  # type: ignore[arg-type]
        ]
        for word, call in bad_calls:
            with pytest.raises(UsageError, match=word):
                await call()
        assert await memory.list(()) == []
        # Exactly at the bounds is taken.
        await memory.put(USER, "k" * MAX_KEY_LENGTH, "x" * (MAX_VALUE_BYTES - 2))

    # ----- races -----

    async def test_concurrent_edits_with_if_version_lose_nothing(self, memory: Memories) -> None:
        await memory.put(USER, "log", [])

        async def edit(name: str) -> None:
            for n in range(20):
                while True:
                    item = await memory.get(USER, "log")
                    assert item is not None
                    try:
                        await memory.put(
                            USER, "log", [*item.value, f"{name}{n}"], if_version=item.version
                        )
                        break
                    except VersionConflict:
                        await asyncio.sleep(0)

        await asyncio.gather(*(edit(name) for name in "abcd"))
        item = await memory.get(USER, "log")
        assert item is not None and item.version == 81
        assert sorted(item.value) == sorted(f"{c}{n}" for c in "abcd" for n in range(20))

    @requires(Capability.SPANS_PROCESSES)
    async def test_processes_editing_one_item_lose_no_edit(
        self, memory: Memories, memory_factory: Callable[[], Any] | None
    ) -> None:
        if memory_factory is None:
            pytest.skip("no memory_factory: the multi-process check needs one")
        await memory.put(("race",), "shared", [])
        conflicts = await asyncio.to_thread(edit_from_processes, memory_factory, "shared", 2, 100)
        print(f"version conflicts per process: {conflicts}")
        item = await memory.get(("race",), "shared")
        assert item is not None and item.version == 201
        assert sorted(item.value) == sorted(f"p{i}-{n}" for i in range(2) for n in range(100))
