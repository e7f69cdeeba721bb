"""What a run did to long-term memory: one entry per edit a memory tool applied."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .._codec import stored
from ._base import EntryKind, Payload


@stored(omit=("replayed",))
@dataclass(frozen=True, slots=True)
class MemoryEdited(Payload):
    """A memory tool's edit, as applied to the store: the call (`call_id`)
    of the run (the entry's `run_id`) of `agent`, the item edited
    (`namespace`, `key`), the edit (`op`: a block's "replace", "append",
    "rewrite", "archive_save"; the memory tool's command, "create",
    "str_replace", "insert", "delete", "rename") and the item's version and
    text digest (sha256 hex of the stored text; "" when absent) before and
    after it (a deleted item: version 0).

    `replayed` marks the answer of a call run again after a crash, whose
    edit the store had applied already (its key's write, not a second
    one): an entry for the same `call_id` may precede it, and its
    `digest_before` is "" (unknown)."""

    KIND: ClassVar[str] = EntryKind.MEMORY_EDITED
    call_id: str
    agent: str
    namespace: tuple[str, ...]
    key: str
    op: str
    version_before: int
    version_after: int
    digest_before: str
    digest_after: str
    replayed: bool = False
