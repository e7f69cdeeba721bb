"""Semantic search in a memory store: the `Embedder` protocol, and vectors kept beside the items.

A store given an embedder (the backend's `embedder=` option, or
`memory.with_embedder(e)`) embeds an item's text when the item is put, and
keeps the vector beside it, keyed by namespace, key and the embedder's
`name`, with the item's version and a digest of the text embedded. A vector
is current for an item while its model is the embedder's and its digest is
that of the item's text now; any other (written by a process without the
embedder, by another model, or left behind by a race) is ignored, and the
item is embedded again when a search meets it, in batches of `EMBED_BATCH`,
and the vector stored. Vectors are kept normalised, so a score is the
cosine similarity of the query and the item.

A semantic search reads the items under its prefix in pages, in the order
`list` gives, and scores at most `MAX_SEMANTIC_ITEMS` of them: a prefix with
more items is searched in its first `MAX_SEMANTIC_ITEMS` only. It is a brute
force scan (no vector index needed on the database): fine for thousands of
items, not for millions.
"""

from __future__ import annotations

import array
import copy
import hashlib
import logging
import math
import operator
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from ..errors import ConfigurationError, UsageError

if TYPE_CHECKING:
    from ._memories import MemoryHit, MemoryItem

__all__ = ["EMBED_BATCH", "MAX_SEMANTIC_ITEMS", "Embedder", "SearchMode"]

logger = logging.getLogger("taskloom")

SearchMode: TypeAlias = Literal["text", "semantic"]
"""How `Memories.search` matches: `"text"` (full-text, the default) or `"semantic"` (by embedding)."""

MAX_SEMANTIC_ITEMS = 10_000
"""The most items one semantic search scores: those first under its prefix, in `list` order."""

EMBED_BATCH = 32
"""The most texts handed to `Embedder.embed` in one call."""

MAX_QUERY_LENGTH = 64 * 1024
"""The longest query a semantic search embeds, in characters (as long as a value may be)."""

PAGE = 500
"""Items read from the database at a time during a semantic search: what it holds at once."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors for semantic search.

    `name` identifies the model (vectors made under another name are never
    compared with this one's: they are made again); `dimensions` is the
    length of every vector `embed` returns. `embed(texts)` returns one vector
    per text, in order; it is called with at most `EMBED_BATCH` texts. The
    vectors need not be normalised.
    """

    name: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector of `dimensions` floats per text of `texts`, in order."""
        ...


def check_embedder(embedder: object) -> Embedder | None:
    """`embedder` (None passes), or `UsageError` unless it looks like an `Embedder`."""
    if embedder is None:
        return None
    name = getattr(embedder, "name", None)
    dimensions = getattr(embedder, "dimensions", None)
    if not callable(getattr(embedder, "embed", None)):
        raise UsageError(f"an embedder has an async embed(texts) method: {embedder!r}")
    if not isinstance(name, str) or not name or len(name) > 256:
        raise UsageError(
            f"an embedder's name is a non-empty str of at most 256 characters: {name!r}"
        )
    if (
        not isinstance(dimensions, int)
        or isinstance(dimensions, bool)
        or not 0 < dimensions <= 65536
    ):
        raise UsageError(f"an embedder's dimensions is an int in 1..65536, not {dimensions!r}")
    return embedder  # type: ignore[return-value]


def check_mode(mode: object) -> SearchMode:
    """`mode`, or `UsageError` unless it is `"text"` or `"semantic"`."""
    if mode not in ("text", "semantic"):
        raise UsageError(f"a search mode is 'text' or 'semantic', not {mode!r}")
    return mode  # type: ignore[return-value]


def no_embedder() -> UsageError:
    """The error of a semantic search on a store given no embedder."""
    return UsageError(
        "semantic search needs an embedder: open the backend with one "
        "(open_backend(url, embedder=e), SQLiteBackend(path, embedder=e), ...) "
        "or search memory.with_embedder(e)"
    )


def digest(text: str) -> str:
    """What a vector records of the text it was made from (a BLAKE2b hex digest)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


async def embed_texts(embedder: Embedder, texts: Sequence[str]) -> list[bytes]:
    """The normalised vector of each text, as little-endian float32 bytes;
    `ConfigurationError` if the embedder answers with the wrong count, length or a non-finite value."""
    answer = await embedder.embed(list(texts))
    try:  # a list, or any sequence of vectors (a numpy array, say)
        vectors = list(answer)
    except TypeError:
        vectors = None
    if vectors is None or isinstance(answer, str | bytes) or len(vectors) != len(texts):
        count = type(answer).__name__ if vectors is None else len(vectors)
        raise ConfigurationError(
            f"embedder {embedder.name!r} returned {count} vectors for {len(texts)} texts"
        )
    return [_pack(embedder, vector) for vector in vectors]


def _pack(embedder: Embedder, vector: Sequence[float]) -> bytes:
    try:
        values = array.array("f", [float(x) for x in vector])
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"embedder {embedder.name!r} returned a non-numeric vector"
        ) from None
    if len(values) != embedder.dimensions:
        raise ConfigurationError(
            f"embedder {embedder.name!r} returned a vector of {len(values)} dimensions,"
            f" not the {embedder.dimensions} it declares"
        )
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise ConfigurationError(f"embedder {embedder.name!r} returned a non-finite vector")
    if norm:
        values = array.array("f", [x / norm for x in values])
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def unpack(blob: bytes) -> array.array[float]:
    """The floats of a stored vector (`embed_texts`' bytes)."""
    values = array.array("f")
    values.frombytes(blob)
    if sys.byteorder == "big":
        values.byteswap()
    return values


@dataclass(slots=True)
class Candidate:
    """An item a semantic search reads, with the vector stored for it under
    the embedder's name (its `digest` and `vector` bytes), if any."""

    item: MemoryItem
    digest: str | None
    vector: bytes | None


class VectorSource(Protocol):
    """What a store gives `semantic_search`: its items with their vectors, and a place for new ones."""

    async def candidates(
        self, start: str, after: tuple[str, str] | None, model: str, limit: int
    ) -> list[Candidate]:
        """At most `limit` items under the stored prefix `start`, after the
        stored `(namespace, key)` `after`, in `list` order, each with its vector under `model`."""
        ...

    async def keep_vectors(self, model: str, made: list[tuple[MemoryItem, str, bytes]]) -> None:
        """Store each `(item, digest, vector)` under `model`, replacing the one there."""
        ...


async def semantic_search(
    source: VectorSource, embedder: Embedder, start: str, query: str, limit: int
) -> list[MemoryHit]:
    """The `limit` items under `start` closest to `query` (see the module)."""
    from ._memories import SEP, MemoryHit

    if len(query) > MAX_QUERY_LENGTH:
        raise UsageError(
            f"a semantic search query is at most {MAX_QUERY_LENGTH} characters, not {len(query)}"
        )
    if not query.strip() or not limit:
        return []
    [wanted] = [unpack(blob) for blob in await embed_texts(embedder, [query])]
    best: list[tuple[float, MemoryItem]] = []
    after: tuple[str, str] | None = None
    scanned = 0
    while scanned < MAX_SEMANTIC_ITEMS:
        page = await source.candidates(
            start, after, embedder.name, min(PAGE, MAX_SEMANTIC_ITEMS - scanned)
        )
        if not page:
            break
        scanned += len(page)
        last = page[-1].item
        after = ("".join(part + SEP for part in last.namespace), last.key)
        await _refresh(source, embedder, page)
        scored = [(_dot(wanted, unpack(c.vector or b"")), c.item) for c in page]
        best = sorted(best + scored, key=_rank)[:limit]
    return [MemoryHit(item, score) for score, item in best]


def _rank(hit: tuple[float, MemoryItem]) -> tuple[float, tuple[str, ...], str]:
    return -hit[0], hit[1].namespace, hit[1].key


def _dot(a: array.array[float], b: array.array[float]) -> float:
    # map/operator.mul: about three times math.fsum's speed, and float32
    # vectors need no more precision than a plain sum gives.
    return float(sum(map(operator.mul, a, b)))


async def _refresh(source: VectorSource, embedder: Embedder, page: list[Candidate]) -> None:
    """Embed (and store) the items of `page` that lack a current vector."""
    from ._memories import searchable_text

    stale = []
    for candidate in page:
        text = searchable_text(candidate.item.value)
        now = digest(text)
        # A vector of another length (a corrupt row, or a model whose
        # dimensions changed under one name) is made again, as a stale one.
        size = 4 * embedder.dimensions
        if candidate.vector is None or candidate.digest != now or len(candidate.vector) != size:
            stale.append((candidate, text, now))
    for start in range(0, len(stale), EMBED_BATCH):
        batch = stale[start : start + EMBED_BATCH]
        vectors = await embed_texts(embedder, [text for _, text, _ in batch])
        for (candidate, _, now), vector in zip(batch, vectors, strict=True):
            candidate.digest, candidate.vector = now, vector
        await source.keep_vectors(
            embedder.name, [(c.item, now, v) for (c, _, now), v in zip(batch, vectors, strict=True)]
        )


_S = TypeVar("_S", bound="SemanticStore")


class SemanticStore:
    """What the built-in stores share for semantic search: the `embedder`
    they were given, `with_embedder`, and the vector written after a put."""

    embedder: Embedder | None = None
    """The embedder of this store's semantic search and of the vectors
    written at each put, or None (a semantic search then raises `UsageError`)."""

    def with_embedder(self: _S, embedder: Embedder | None) -> _S:
        """This store (the same items, on the same database) with `embedder`
        for semantic search and for the vectors of the items put through it;
        None: without one."""
        view = copy.copy(self)
        view.embedder = check_embedder(embedder)
        return view

    async def _semantic(self, start: str, query: str, limit: int) -> list[MemoryHit]:
        if self.embedder is None:
            raise no_embedder()
        return await semantic_search(self, self.embedder, start, query, limit)  # type: ignore[arg-type]

    async def _embed_put(self, item: MemoryItem) -> None:
        """Store the vector of an item just put, when this store has an embedder.

        The item is written already: an embedder that fails here is logged,
        not raised, and the item is embedded when a search next meets it.
        """
        from ._memories import searchable_text

        embedder = self.embedder
        if embedder is None:
            return
        text = searchable_text(item.value)
        try:
            [vector] = await embed_texts(embedder, [text])
            await self.keep_vectors(embedder.name, [(item, digest(text), vector)])  # type: ignore[attr-defined]
        except Exception as exc:  # the put succeeded: see the docstring
            logger.warning(
                "memory item %r/%r is written but its vector is not (%s: %s); "
                "it is embedded at the next semantic search",
                item.namespace,
                item.key,
                type(exc).__name__,
                exc,
            )
