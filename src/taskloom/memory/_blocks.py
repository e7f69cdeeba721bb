"""What a host declares: `Block`s (small texts always in the prompt) and the
`Memory` a run reads and edits (its blocks, namespace and archive)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from ..backends import Memories, Namespace, check_namespace
from ..errors import ConfigurationError

__all__ = ["DEFAULT_BLOCK_LIMIT", "MAX_BLOCK_LIMIT", "Block", "Memory"]

DEFAULT_BLOCK_LIMIT = 2000
"""A block's size cap, in characters, unless it says otherwise."""
MAX_BLOCK_LIMIT = 32_000
"""The largest cap a block may have (its text is in every request)."""

_LABEL = re.compile(r"[a-z][a-z0-9_]{0,63}")


@dataclass(frozen=True, slots=True)
class Block:
    """A named text the agent always sees and edits through its memory tools.

    `label` (lower-case letters, digits and `_`, starting with a letter:
    "human", "persona") names it to the model and keys it in the store
    (`key`); `description` tells the model what belongs in it; `limit` caps
    its length in characters (an edit that would pass it is refused);
    `namespace` puts it somewhere else than its `Memory`'s (a block shared by
    every user, say); `read_only` shows it without letting the model edit
    it; `initial` is its text while the store has none.
    """

    label: str
    description: str = ""
    limit: int = DEFAULT_BLOCK_LIMIT
    namespace: Namespace | None = None
    read_only: bool = False
    initial: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not _LABEL.fullmatch(self.label):
            raise ConfigurationError(
                f"Block(label={self.label!r}): a label is 1-64 lower-case letters, digits "
                "or '_', starting with a letter"
            )
        if not isinstance(self.description, str) or not isinstance(self.initial, str):
            raise ConfigurationError(f"Block {self.label!r}: description and initial are str")
        limit = self.limit
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_BLOCK_LIMIT
        ):
            raise ConfigurationError(
                f"Block {self.label!r}: limit is an int from 1 to {MAX_BLOCK_LIMIT}, not {limit!r}"
            )
        if len(self.initial) > limit:
            raise ConfigurationError(f"Block {self.label!r}: initial text is over its limit")
        if self.namespace is not None:
            _check(self.namespace, f"Block {self.label!r}")

    @property
    def key(self) -> str:
        """The store key of the block's text: `"block:" + label`."""
        return "block:" + self.label


@dataclass(frozen=True, slots=True)
class Memory:
    """The long-term memory one run reads and edits.

    `blocks` are rendered into the agent's instructions at the start of
    every run (read fresh from the store) and edited with the tools
    `memory_replace`, `memory_append` and `memory_rewrite`; each lives in
    `namespace` (e.g. `("user", user_id)`) unless it names its own.
    `archive` adds `archive_save` and `archive_search` over many small
    notes: True keeps them in `namespace + ("archive",)`, a namespace puts
    them there, False offers no archive. `read_only` shows the blocks and
    searches the archive but offers no tool that writes. `children` is what
    a child run inline (a subagent, a spawned child) whose agent has no
    memory of its own gets of this one (a child sent through a dispatcher
    runs from its stored spec and gets none): "read" (the default: read-only),
    "write", or "none". `store` is the `Memories` to use; None: the
    runtime's backend's (`Backend.memory`).

    Give it as `Agent(memory=...)`, or per run as `RunOptions(memory=...)`
    (the host choosing the user's namespace for each run).
    """

    blocks: tuple[Block, ...] = ()
    namespace: Namespace = ()
    archive: bool | Namespace = True
    read_only: bool = False
    children: Literal["read", "write", "none"] = "read"
    store: Memories | None = field(default=None, compare=False)

    def __init__(
        self,
        blocks: Iterable[Block] = (),
        namespace: Namespace = (),
        *,
        archive: bool | Namespace = True,
        read_only: bool = False,
        children: Literal["read", "write", "none"] = "read",
        store: Memories | None = None,
    ) -> None:
        blocks = tuple(blocks)
        if not all(isinstance(b, Block) for b in blocks):
            raise ConfigurationError("Memory(blocks=...) takes taskloom.memory.Block objects")
        labels = [b.label for b in blocks]
        if len(set(labels)) != len(labels):
            raise ConfigurationError(f"Memory has two blocks with one label: {labels}")
        _check(namespace, "Memory(namespace=...)")
        if not (archive is True or archive is False):
            _check(archive, "Memory(archive=...)")
        if children not in ("read", "write", "none"):
            raise ConfigurationError(
                f"Memory(children={children!r}): one of 'read', 'write', 'none'"
            )
        if store is not None and not isinstance(store, Memories):
            raise ConfigurationError(f"Memory(store={store!r}): a taskloom.backends.Memories")
        s = object.__setattr__
        s(self, "blocks", blocks)
        s(self, "namespace", namespace)
        s(self, "archive", archive)
        s(self, "read_only", read_only)
        s(self, "children", children)
        s(self, "store", store)

    @property
    def archive_namespace(self) -> Namespace | None:
        """Where the archive's notes are kept (None: no archive)."""
        if self.archive is False:
            return None
        if self.archive is True:
            return (*self.namespace, "archive")
        return self.archive

    @property
    def namespaces(self) -> tuple[Namespace, ...]:
        """Every namespace this memory reads: its blocks' (in their order),
        then its archive's, each once (what a run's start records)."""
        found = dict.fromkeys(b.namespace or self.namespace for b in self.blocks)
        archive = self.archive_namespace
        if archive is not None:
            found[archive] = None
        return tuple(n for n in found if n)

    def for_child(self) -> Memory | None:
        """What a child run without a memory of its own gets of this one (see `children`)."""
        if self.children == "none":
            return None
        if self.children == "write":
            return self
        return replace(self, read_only=True)


def _check(namespace: object, where: str) -> None:
    try:
        check_namespace(namespace)
    except Exception as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
