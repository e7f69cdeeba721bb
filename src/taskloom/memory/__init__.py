"""Memory an agent keeps across sessions: blocks in its prompt, an archive it
searches, and Anthropic's memory tool, over a backend's `Memories` store.

A `Memory` names the blocks (`Block`: small, size-capped texts, such as
what the agent knows of the user) and the namespace of the store they live
in. At the start of every run its blocks are read fresh from the store and
rendered into the agent's instructions; the model edits them with
`memory_replace`, `memory_append` and `memory_rewrite`, and keeps longer
notes with `archive_save` / `archive_search`.

No edit is lost and none applies twice: an edit is written only on the
version of the block the run last saw (else the tool answers with the
current text, and the model redoes its edit), and carries its call's
idempotency key, so a call run again after a crash applies once. Each
applied edit is recorded in the session's log (`MemoryEdited`).

Give a memory as `Agent(memory=Memory(...))`, or per run with
`RunOptions(memory=...)` (the host choosing the user's namespace); a child
run inline gets its parent's read-only unless `Memory(children="write")`.

`MemoryTool` is Anthropic's memory tool (`memory_20250818`): files under
`/memories` kept as the items of one namespace, offered natively to
Anthropic and as a function tool to every other provider.
"""

from __future__ import annotations

from ._blocks import DEFAULT_BLOCK_LIMIT, MAX_BLOCK_LIMIT, Block, Memory
from ._commands import EDIT_ATTEMPTS, MAX_FILES, MAX_LISTED
from ._open import OpenMemory, open_memory
from ._paths import MAX_PATH_LENGTH, ROOT
from ._tool import MemoryTool

__all__ = [
    "DEFAULT_BLOCK_LIMIT",
    "EDIT_ATTEMPTS",
    "MAX_BLOCK_LIMIT",
    "MAX_FILES",
    "MAX_LISTED",
    "MAX_PATH_LENGTH",
    "ROOT",
    "Block",
    "Memory",
    "MemoryTool",
    "OpenMemory",
    "open_memory",
]
