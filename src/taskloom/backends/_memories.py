"""Long-term memory: items in namespaces, written with compare-and-set.

A `Memories` keeps items an agent (or its host) remembers across
sessions. An item is addressed by a namespace, a tuple of strings such as
`("user", "u1")`, and a key; it holds a value (text, or a JSON object or
array) and a version that starts at 1 and rises by one at every write.
`put(..., if_version=n)` writes only if the item is still at version `n`
(0: only if absent) and otherwise raises `VersionConflict` with the
current item, so two writers editing one item never lose an edit: each
either writes on the version it read or is told to redo its edit.

A write may carry an `idempotency_key` (a tool call's
`ctx.idempotency_key`): the store records the key in the same transaction
as the write, and a later write with the key writes nothing and returns
what the first returned, so a write retried after a crash applies once.
Applied keys are kept `IDEMPOTENCY_KEEP_SECONDS` (7 days) after their
write, then pruned by later keyed writes: a retry must come within that.

The memory backend's store (`MemoryMemories`) is here; the SQLite and
PostgreSQL ones are built by their backends on their database.
"""

from __future__ import annotations

import builtins
import json
import math
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

from ..errors import UsageError, VersionConflict
from ._semantic import Candidate, Embedder, SearchMode, SemanticStore, check_embedder, check_mode
from ._sql import dump_json

__all__ = [
    "IDEMPOTENCY_KEEP_SECONDS",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_KEY_LENGTH",
    "MAX_NAMESPACE_DEPTH",
    "MAX_NAMESPACE_PART_LENGTH",
    "MAX_QUERY_WORDS",
    "MAX_VALUE_BYTES",
    "MemoryHit",
    "MemoryItem",
    "MemoryMemories",
    "Memories",
    "MemoryValue",
    "Namespace",
]

Namespace: TypeAlias = tuple[str, ...]
"""Where an item lives: a tuple of non-empty strings, e.g. `("user", "u1")`."""

MemoryValue: TypeAlias = str | dict[str, Any] | list[Any]
"""What an item holds: a text (`str`), or a JSON object (`dict`) or array (`list`)."""

MAX_NAMESPACE_DEPTH = 16
"""The most parts a namespace may have."""
MAX_NAMESPACE_PART_LENGTH = 256
"""The longest a namespace part may be, in characters."""
MAX_KEY_LENGTH = 512
"""The longest a key may be, in characters."""
MAX_VALUE_BYTES = 64 * 1024
"""The largest a value may be, measured as the compact ASCII JSON text it is stored as."""

SEP = "\x1f"
"""Ends every namespace part in the stored form. Below every character a part
may hold, so the stored forms sort as the tuples do and a prefix of parts is a
prefix of text."""

IDEMPOTENCY_KEEP_SECONDS = 7 * 24 * 3600.0
"""How long a store remembers an applied idempotency key (seconds after its
write, by the store's clock); older keys are pruned by later keyed writes."""
MAX_IDEMPOTENCY_KEY_LENGTH = 256
"""The longest an idempotency key may be, in characters."""

MAX_QUERY_WORDS = 256
"""The most distinct words a search query may have (its cost grows with them)."""

MAX_LIMIT = 10_000
"""The most items one `list` or `search` returns."""


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One remembered item: where it is (`namespace`, `key`), what it holds
    (`value`), its `version` (1 when created, one more at each write) and
    when it was created and last written (`created_at`, `updated_at`:
    seconds since the epoch, from the store's clock)."""

    namespace: Namespace
    key: str
    value: MemoryValue
    version: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class MemoryHit:
    """A search result: the `item` and its `score` (higher is more relevant;
    scores compare only within one search and differ between backends)."""

    item: MemoryItem
    score: float


@runtime_checkable
class Memories(Protocol):
    """Items in namespaces with versions and compare-and-set writes (see the module).

    Every write is atomic against every other writer the store's database
    serves (other processes too, on SQLite and PostgreSQL): a write with
    `if_version` checks and writes in one statement or transaction.

    Bounds, refused with `UsageError`: a namespace has 1 to
    `MAX_NAMESPACE_DEPTH` parts, each a non-empty string of at most
    `MAX_NAMESPACE_PART_LENGTH` characters with no control character; a key is
    a non-empty string of at most `MAX_KEY_LENGTH` characters with no NUL; a
    value is a `str`, `dict` or `list` (JSON-serialisable, no NaN) whose
    stored JSON is at most `MAX_VALUE_BYTES` (64 KiB; non-ASCII characters
    are stored escaped, up to 12 bytes each).
    """

    async def get(self, namespace: Namespace, key: str) -> MemoryItem | None:
        """The item at `namespace`/`key`, or None."""
        ...

    async def put(
        self,
        namespace: Namespace,
        key: str,
        value: MemoryValue,
        *,
        if_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> MemoryItem:
        """Write `value`, creating the item (version 1) or replacing its value
        (version + 1); the item as written.

        With `if_version=n` the write happens only if the item is at version
        `n` now (`0`: only if it is absent); otherwise nothing is written and
        `VersionConflict` is raised, carrying the current item (None if absent).

        With `idempotency_key`, a key a write of this item applied already
        (within `IDEMPOTENCY_KEEP_SECONDS`) writes nothing and returns the
        item as that write wrote it, whatever happened to it since; a key
        applied to another item is a `UsageError`. A refused write records
        no key.
        """
        ...

    async def delete(
        self,
        namespace: Namespace,
        key: str,
        *,
        if_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> bool:
        """Delete the item; whether there was one to delete.

        With `if_version=n` (n >= 1) it is deleted only at version `n`;
        otherwise (another version, or no item) `VersionConflict` is raised,
        carrying the current item or None. `idempotency_key` as for `put`:
        a key applied already deletes nothing and returns what it returned.
        """
        ...

    async def list(
        self, prefix: Namespace = (), *, limit: int = 100, offset: int = 0, key_prefix: str = ""
    ) -> list[MemoryItem]:
        """Items whose namespace starts with the parts of `prefix` (`()`: every
        item) and whose key starts with the text `key_prefix` (`""`: any key),
        ordered by namespace (part by part) then key, by code point; `offset`
        skips that many first, `limit` (at most 10,000) caps how many. A
        `key_prefix` that is not a string of at most `MAX_KEY_LENGTH`
        characters is refused with `UsageError`."""
        ...

    async def namespaces(self, prefix: Namespace = ()) -> builtins.list[Namespace]:
        """Every namespace that holds an item and starts with `prefix`, sorted as `list` sorts."""
        ...

    async def search(
        self, prefix: Namespace, query: str, *, limit: int = 10, mode: SearchMode = "text"
    ) -> builtins.list[MemoryHit]:
        """Search the items under `prefix`, most relevant first, at most `limit`.

        `mode="text"` (full-text): the items whose value holds at least one
        word of `query` (case-insensitive; the words of a JSON value are
        those of its strings). A query without words finds nothing; one of
        more than `MAX_QUERY_WORDS` distinct words, or longer than
        `MAX_VALUE_BYTES` characters, is refused with `UsageError`.

        `mode="semantic"`: the items whose text (as full-text reads it) is
        closest in meaning to `query`, by the cosine similarity of their
        embeddings (the `score`), whether or not they share a word with it.
        Every item scored is ranked, so up to `limit` come back however
        unrelated: compare scores to cut. It needs a store given an
        `Embedder` (else `UsageError`), scores only the first
        `MAX_SEMANTIC_ITEMS` items under `prefix` (in `list` order), and
        embeds the items lacking a current vector. A blank query finds nothing.
        """
        ...


# ----- checks and encodings every implementation shares -----


def check_namespace(namespace: object, *, prefix: bool = False) -> str:
    """`namespace` in its stored form (each part followed by `SEP`), or
    `UsageError` saying what is wrong; `prefix=True` allows `()`."""
    if not isinstance(namespace, tuple):
        raise UsageError(
            f"a memory namespace is a tuple of strings, not {type(namespace).__name__}"
        )
    if not namespace and not prefix:
        raise UsageError("a memory namespace needs at least one part")
    if len(namespace) > MAX_NAMESPACE_DEPTH:
        raise UsageError(
            f"a memory namespace has at most {MAX_NAMESPACE_DEPTH} parts, not {len(namespace)}"
        )
    for part in namespace:
        if not isinstance(part, str) or not part:
            raise UsageError(f"memory namespace parts are non-empty strings: {namespace!r}")
        if len(part) > MAX_NAMESPACE_PART_LENGTH:
            raise UsageError(
                f"a memory namespace part is at most {MAX_NAMESPACE_PART_LENGTH} characters,"
                f" not {len(part)}"
            )
        if any(ord(c) < 0x20 for c in part) or not _encodable(part):
            raise UsageError(
                f"a memory namespace part holds a control character or a lone surrogate: {part!r}"
            )
    return "".join(part + SEP for part in namespace)


def parse_namespace(stored: str) -> Namespace:
    """The tuple a stored namespace (`check_namespace`'s result) stands for."""
    return tuple(stored.split(SEP)[:-1])


def check_key(key: object) -> str:
    """`key`, or `UsageError` if it is not a key a memory store takes."""
    if not isinstance(key, str) or not key:
        raise UsageError(f"a memory key is a non-empty string, not {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise UsageError(f"a memory key is at most {MAX_KEY_LENGTH} characters, not {len(key)}")
    if "\x00" in key or not _encodable(key):
        raise UsageError(f"a memory key holds a NUL or a lone surrogate: {key!r}")
    return key


def check_key_prefix(key_prefix: object) -> str:
    """`key_prefix` (`""` or the start of a key), or `UsageError` if it is not
    one a listing takes."""
    if key_prefix == "" and isinstance(key_prefix, str):
        return key_prefix
    if not isinstance(key_prefix, str):
        raise UsageError(f"a key prefix is a string, not {key_prefix!r}")
    return check_key(key_prefix)


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def encode_value(value: object) -> str:
    """`value` as the JSON text stored, or `UsageError` (wrong type, not JSON, too large)."""
    if not isinstance(value, str | dict | list):
        raise UsageError(
            f"a memory value is a str, or a JSON object (dict) or array (list), "
            f"not {type(value).__name__}"
        )
    try:
        text = dump_json(value)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"a memory value must be JSON: {exc}") from None
    if len(text) > MAX_VALUE_BYTES:
        raise UsageError(
            f"a memory value is at most {MAX_VALUE_BYTES} bytes as stored JSON, not {len(text)}"
        )
    return text


def decode_value(text: str) -> MemoryValue:
    """The value stored as `text`."""
    return json.loads(text)  # type: ignore[no-any-return]


def check_version(if_version: object, *, deleting: bool = False) -> int | None:
    """`if_version`, or `UsageError` if it is not None or an int >= 0 (>= 1 to delete)."""
    if if_version is None:
        return None
    if not isinstance(if_version, int) or isinstance(if_version, bool) or if_version < 0:
        raise UsageError(f"if_version is None or an int >= 0, not {if_version!r}")
    if deleting and if_version == 0:
        raise UsageError("delete(if_version=0) would delete only an absent item: pass None or >= 1")
    return if_version


def check_idempotency_key(key: object) -> str | None:
    """`key`, or `UsageError` unless it is None or a non-empty str of at most
    `MAX_IDEMPOTENCY_KEY_LENGTH` characters with no NUL."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
        raise UsageError(
            f"an idempotency_key is None or a non-empty str of at most "
            f"{MAX_IDEMPOTENCY_KEY_LENGTH} characters, not {key!r:.80}"
        )
    if "\x00" in key or not _encodable(key):
        raise UsageError(f"an idempotency_key holds a NUL or a lone surrogate: {key!r:.80}")
    return key


def applied_record(outcome: MemoryItem | bool) -> str:
    """What a store keeps of a keyed write's outcome (the item put, or the
    bool a delete returned), as JSON text; `applied_outcome` reads it back."""
    if isinstance(outcome, bool):
        return dump_json({"deleted": outcome})
    return dump_json(
        {
            "value": encode_value(outcome.value),
            "version": outcome.version,
            "created_at": outcome.created_at,
            "updated_at": outcome.updated_at,
        }
    )


def applied_outcome(namespace: Namespace, key: str, text: str) -> MemoryItem | bool:
    """The outcome `applied_record` kept as `text`, for the item `namespace`/`key`."""
    data = json.loads(text)
    if "deleted" in data:
        return bool(data["deleted"])
    return MemoryItem(
        namespace,
        key,
        decode_value(data["value"]),
        int(data["version"]),
        float(data["created_at"]),
        float(data["updated_at"]),
    )


def replayed(
    idem: str, wanted: tuple[str, str], applied: tuple[str, str], namespace: Namespace, text: str
) -> MemoryItem | bool:
    """The outcome of the write that applied key `idem` (stored as `text`, on
    the stored namespace and key `applied`), for a retry of it on `wanted`;
    `UsageError` if that write was of another item."""
    if applied != wanted:
        raise UsageError(
            f"idempotency_key {idem!r:.80} was applied to another memory item "
            f"({parse_namespace(applied[0])!r}/{applied[1]!r}): a key names one write"
        )
    return applied_outcome(namespace, wanted[1], text)


def as_put(outcome: MemoryItem | bool, idem: str) -> MemoryItem:
    """A replayed `put`'s item, or `UsageError` if the key was applied by a delete."""
    if isinstance(outcome, bool):
        raise UsageError(f"idempotency_key {idem!r:.80} was applied by a delete, not a put")
    return outcome


def as_delete(outcome: MemoryItem | bool, idem: str) -> bool:
    """A replayed `delete`'s bool, or `UsageError` if the key was applied by a put."""
    if not isinstance(outcome, bool):
        raise UsageError(f"idempotency_key {idem!r:.80} was applied by a put, not a delete")
    return outcome


def check_page(limit: object, offset: object = 0) -> tuple[int, int]:
    """`(limit, offset)`, or `UsageError` unless both are ints in range."""
    for name, given, top in (("limit", limit, MAX_LIMIT), ("offset", offset, None)):
        if not isinstance(given, int) or isinstance(given, bool) or given < 0:
            raise UsageError(f"{name} is an int >= 0, not {given!r}")
        if top is not None and given > top:
            raise UsageError(f"{name} is at most {top}, not {given}")
    return limit, offset  # type: ignore[return-value]


def searchable_text(value: MemoryValue) -> str:
    """The text full-text search reads in `value`: the text itself, or every
    string inside a JSON value (keys of objects are left out), one per line."""
    if isinstance(value, str):
        return value
    strings: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, str):
            strings.append(node)
        elif isinstance(node, dict):
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(value)
    return "\n".join(strings)


_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """The words of `text`, case-folded with accents removed (as SQLite's
    unicode61 tokenizer reads them): what search matches on."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(c for c in folded if not unicodedata.combining(c))
    return _WORD.findall(plain)


def index_text(value: MemoryValue) -> str:
    """The words of `value` (`words(searchable_text(value))`) joined by spaces:
    what the SQL backends index, so every backend matches the same words."""
    return " ".join(words(searchable_text(value)))


def check_query(query: object) -> list[str]:
    """The distinct words of a search `query`, in order, or `UsageError` if it
    is not a str or has more than `MAX_QUERY_WORDS` distinct words."""
    if not isinstance(query, str):
        raise UsageError(f"a search query is a str, not {type(query).__name__}")
    # Bounded before the words are split: a search's cost grows with its
    # words times the items it ranks.
    if len(query) > MAX_VALUE_BYTES:
        raise UsageError(
            f"a search query is at most {MAX_VALUE_BYTES} characters, not {len(query)}"
        )
    found = list(dict.fromkeys(words(query)))
    if len(found) > MAX_QUERY_WORDS:
        raise UsageError(
            f"a search query has at most {MAX_QUERY_WORDS} distinct words, not {len(found)}"
        )
    return found


def conflict(
    namespace: Namespace, key: str, wanted: int, current: MemoryItem | None
) -> VersionConflict:
    """The `VersionConflict` for a write that expected version `wanted`."""
    found = "absent" if current is None else f"at version {current.version}"
    expected = "absent" if wanted == 0 else f"at version {wanted}"
    return VersionConflict(
        f"memory item {namespace!r}/{key!r} is {found}, not {expected}: read it and redo the edit",
        current,
    )


# ----- the memory backend's store -----


@dataclass(slots=True)
class _Row:
    text: str
    version: int
    created_at: float
    updated_at: float
    words: Counter[str]


class MemoryMemories(SemanticStore):
    """A `Memories` in process memory (the memory backend's; one process).

    Search scores with BM25 over the words of the items under the prefix;
    semantic search needs `embedder`. `clock` gives the items' times.
    """

    def __init__(
        self, *, clock: Callable[[], float] = time.time, embedder: Embedder | None = None
    ) -> None:
        self._clock = clock
        self.embedder = check_embedder(embedder)
        # stored namespace -> key -> row; no await between a check and its write,
        # so each method is atomic on the event loop.
        self._items: dict[str, dict[str, _Row]] = {}
        # idempotency key -> (stored namespace, key, applied at, outcome record)
        self._applied: dict[str, tuple[str, str, float, str]] = {}
        # (stored namespace, key) -> embedder name -> (digest, vector)
        self._vectors: dict[tuple[str, str], dict[str, tuple[str, bytes]]] = {}

    def _item(self, ns: str, key: str, row: _Row) -> MemoryItem:
        return MemoryItem(
            parse_namespace(ns),
            key,
            decode_value(row.text),
            row.version,
            row.created_at,
            row.updated_at,
        )

    async def get(self, namespace: Namespace, key: str) -> MemoryItem | None:
        ns, key = check_namespace(namespace), check_key(key)
        row = self._items.get(ns, {}).get(key)
        return None if row is None else self._item(ns, key, row)

    async def put(
        self,
        namespace: Namespace,
        key: str,
        value: MemoryValue,
        *,
        if_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> MemoryItem:
        ns, key, text = check_namespace(namespace), check_key(key), encode_value(value)
        wanted = check_version(if_version)
        idem = check_idempotency_key(idempotency_key)
        if idem is not None and idem in self._applied:
            return as_put(self._replay(idem, ns, key, namespace), idem)
        keys = self._items.setdefault(ns, {})
        row = keys.get(key)
        if wanted is not None and (row.version if row else 0) != wanted:
            if not keys:
                del self._items[ns]
            raise conflict(
                namespace, key, wanted, None if row is None else self._item(ns, key, row)
            )
        now = self._clock()
        found = Counter(words(searchable_text(value)))
        if row is None:
            row = keys[key] = _Row(text, 1, now, now, found)
        else:
            row.text, row.version, row.updated_at, row.words = text, row.version + 1, now, found
        item = self._item(ns, key, row)
        self._remember(idem, ns, key, item)
        await self._embed_put(item)
        return item

    async def delete(
        self,
        namespace: Namespace,
        key: str,
        *,
        if_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> bool:
        ns, key = check_namespace(namespace), check_key(key)
        wanted = check_version(if_version, deleting=True)
        idem = check_idempotency_key(idempotency_key)
        if idem is not None and idem in self._applied:
            return as_delete(self._replay(idem, ns, key, namespace), idem)
        keys = self._items.get(ns, {})
        row = keys.get(key)
        if wanted is not None and (row is None or row.version != wanted):
            raise conflict(
                namespace, key, wanted, None if row is None else self._item(ns, key, row)
            )
        if row is not None:
            del keys[key]
            self._vectors.pop((ns, key), None)
            if not keys:
                del self._items[ns]
        self._remember(idem, ns, key, row is not None)
        return row is not None

    def _replay(self, idem: str, ns: str, key: str, namespace: Namespace) -> MemoryItem | bool:
        applied_ns, applied_key, _, text = self._applied[idem]
        return replayed(idem, (ns, key), (applied_ns, applied_key), namespace, text)

    def _remember(self, idem: str | None, ns: str, key: str, outcome: MemoryItem | bool) -> None:
        if idem is None:
            return
        now = self._clock()
        applied = self._applied
        # Kept in the order written: the oldest are first, pruned from there.
        while applied:
            oldest = next(iter(applied))
            if applied[oldest][2] >= now - IDEMPOTENCY_KEEP_SECONDS:
                break
            del applied[oldest]
        applied[idem] = (ns, key, now, applied_record(outcome))

    def _under(self, prefix: Namespace, key_prefix: str = "") -> Iterable[tuple[str, str, _Row]]:
        start = check_namespace(prefix, prefix=True)
        for ns in sorted(n for n in self._items if n.startswith(start)):
            keys = self._items[ns]
            for key in sorted(k for k in keys if k.startswith(key_prefix)):
                yield ns, key, keys[key]

    async def list(
        self, prefix: Namespace = (), *, limit: int = 100, offset: int = 0, key_prefix: str = ""
    ) -> list[MemoryItem]:
        key_prefix = check_key_prefix(key_prefix)
        limit, offset = check_page(limit, offset)
        rows = list(self._under(prefix, key_prefix))[offset : offset + limit]
        return [self._item(ns, key, row) for ns, key, row in rows]

    async def namespaces(self, prefix: Namespace = ()) -> builtins.list[Namespace]:
        start = check_namespace(prefix, prefix=True)
        return [parse_namespace(ns) for ns in sorted(self._items) if ns.startswith(start)]

    async def search(
        self, prefix: Namespace, query: str, *, limit: int = 10, mode: SearchMode = "text"
    ) -> builtins.list[MemoryHit]:
        limit, _ = check_page(limit)
        terms = check_query(query)
        if check_mode(mode) == "semantic":
            return await self._semantic(check_namespace(prefix, prefix=True), query, limit)
        rows = list(self._under(prefix))
        scored = bm25(terms, [row.words for _, _, row in rows])
        ranked = sorted(
            ((score, i) for i, score in enumerate(scored) if score > 0), key=lambda s: (-s[0], s[1])
        )
        return [
            MemoryHit(self._item(rows[i][0], rows[i][1], rows[i][2]), score)
            for score, i in ranked[:limit]
        ]

    async def candidates(
        self, start: str, after: tuple[str, str] | None, model: str, limit: int
    ) -> builtins.list[Candidate]:
        """Items under `start` after `after`, with their vectors under `model` (for semantic search)."""
        page: builtins.list[Candidate] = []
        for ns in sorted(n for n in self._items if n.startswith(start)):
            keys = self._items[ns]
            for key in sorted(keys):
                if after is not None and (ns, key) <= after:
                    continue
                stored = self._vectors.get((ns, key), {}).get(model)
                made = (None, None) if stored is None else stored
                page.append(Candidate(self._item(ns, key, keys[key]), *made))
                if len(page) >= limit:
                    return page
        return page

    async def keep_vectors(
        self, model: str, made: builtins.list[tuple[MemoryItem, str, bytes]]
    ) -> None:
        """Store each item's vector under `model` (while the item exists)."""
        for item, digest, vector in made:
            ns = check_namespace(item.namespace)
            if item.key in self._items.get(ns, {}):
                self._vectors.setdefault((ns, item.key), {})[model] = (digest, vector)


def bm25(terms: Iterable[str], documents: Sequence[Counter[str]]) -> list[float]:
    """Okapi BM25 (k1 = 1.2, b = 0.75, as SQLite FTS5) of each document's
    word counts for `terms`; 0 for a document that holds none of them."""
    count = len(documents)
    if not count:
        return []
    lengths = [sum(doc.values()) for doc in documents]
    average = sum(lengths) / count or 1.0
    scores = [0.0] * count
    for term in set(terms):
        holding = sum(1 for doc in documents if term in doc)
        if not holding:
            continue
        idf = math.log(1 + (count - holding + 0.5) / (holding + 0.5))
        for i, doc in enumerate(documents):
            tf = doc.get(term, 0)
            if tf:
                norm = 1.2 * (0.25 + 0.75 * lengths[i] / average)
                scores[i] += idf * tf * 2.2 / (tf + norm)
    return scores
