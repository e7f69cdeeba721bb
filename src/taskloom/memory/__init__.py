"""Memory an agent keeps across sessions, over a backend's `Memories` store.

`MemoryTool` is Anthropic's memory tool (`memory_20250818`): files under
`/memories` kept as the items of one namespace, offered natively to
Anthropic and as a function tool to every other provider.
"""

from __future__ import annotations

from ._commands import EDIT_ATTEMPTS, MAX_FILES, MAX_LISTED
from ._paths import MAX_PATH_LENGTH, ROOT
from ._tool import MemoryTool

__all__ = [
    "EDIT_ATTEMPTS",
    "MAX_FILES",
    "MAX_LISTED",
    "MAX_PATH_LENGTH",
    "ROOT",
    "MemoryTool",
]
