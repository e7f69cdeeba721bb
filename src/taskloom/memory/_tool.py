"""`MemoryTool`: Anthropic's memory tool, backed by a namespace of a `Memories`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..backends import Memories, Namespace
from ..errors import ConfigurationError
from ..tools import Tool, ToolContext, ToolEffect, ToolError
from ._commands import COMMANDS, MemoryFiles, run_command
from ._paths import ROOT

if TYPE_CHECKING:
    from ..tools import ApprovalRule

ANTHROPIC_DEFINITION = {"type": "memory_20250818", "name": "memory"}
"""How the tool is offered to Anthropic: its native, client-executed memory tool."""

DESCRIPTION = (
    f"Your memory: a directory of text files under {ROOT} that persists between "
    "conversations. View it before you start a task, and record what you learn that "
    "will matter later (facts, preferences, decisions, progress). Commands: `view` a "
    "directory or a file (`view_range`: [first, last] lines, last -1 for the end); "
    "`create` a file with `file_text`; `str_replace` the unique `old_str` of a file with "
    "`new_str`; `insert` `insert_text` after line `insert_line` (0: at the top); `delete` "
    "a file or directory; `rename` `old_path` to `new_path`."
)

_TEXT = {"type": "string"}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "enum": list(COMMANDS)},
        "path": {"type": "string", "description": f"A path under {ROOT}."},
        "view_range": {"type": "array", "items": {"type": "integer"}},
        "file_text": _TEXT,
        "old_str": _TEXT,
        "new_str": _TEXT,
        "insert_line": {"type": "integer"},
        "insert_text": _TEXT,
        "old_path": _TEXT,
        "new_path": _TEXT,
    },
    "required": ["command"],
    "additionalProperties": False,
}
"""The arguments as a function tool takes them: Anthropic's command fields."""


class _HasBackend(Protocol):
    @property
    def backend(self) -> Any: ...


class MemoryTool(Tool):
    """Anthropic's memory tool (`memory_20250818`), its files kept as items
    of one `namespace` of a `Memories` store.

    To Anthropic it is offered natively (`{"type": "memory_20250818",
    "name": "memory"}`, the beta turned on for that request); to every other
    provider as a function tool named `memory` with the same arguments. Each
    call runs one command (`view`, `create`, `str_replace`, `insert`,
    `delete`, `rename`) on the files under `/memories`: the path
    `/memories/notes/user.md` is the item keyed `notes/user.md` in
    `namespace`, a directory a key prefix. Paths that could reach elsewhere
    are refused before the store is touched. Edits are compare-and-set on
    the version read, rerun on fresh reads when another writer got there
    first, so no edit is lost; each write carries the call's idempotency
    key, so a call run again after a crash applies its edit once; each
    applied write is a `memory_edited` entry in the session's log.

    `store` is the `Memories` to use; without it the tool uses the memory
    of the runtime that offers it (`Runtime(...).backend.memory`), bound
    when the runtime is made. `needs_approval` and `timeout` are `Tool`'s.
    """

    __slots__ = ("__weakref__", "namespace", "store")

    def __init__(
        self,
        namespace: Namespace,
        store: Memories | None = None,
        *,
        needs_approval: ApprovalRule = False,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(namespace, tuple) or not namespace:
            raise ConfigurationError(
                f"MemoryTool's namespace is a non-empty tuple of strings, not {namespace!r}"
            )
        if not all(isinstance(part, str) and part for part in namespace):
            raise ConfigurationError(
                f"MemoryTool's namespace parts are non-empty strings: {namespace!r}"
            )
        super().__init__(
            "memory",
            DESCRIPTION,
            SCHEMA,
            effect=ToolEffect.WRITE,
            # Each write carries the call's idempotency key: a call cut off by
            # a crash runs again and the store applies its edit once.
            idempotent=True,
            needs_approval=needs_approval,
            timeout=timeout,
            native={"anthropic": ANTHROPIC_DEFINITION},
        )
        self.namespace = namespace
        self.store = store

    def __repr__(self) -> str:
        return f"MemoryTool({self.namespace!r})"

    def bind_runtime(self, runtime: _HasBackend) -> MemoryTool:
        """This tool on `runtime`'s memory (itself when it was given a store);
        `ConfigurationError` when the runtime's backend keeps no memory."""
        if self.store is not None:
            return self
        memory = runtime.backend.memory
        if memory is None:
            raise ConfigurationError(
                f"MemoryTool({self.namespace!r}) needs a store with long-term memory, and "
                "this runtime's backend has none: give MemoryTool a store="
            )
        return MemoryTool(
            self.namespace, memory, needs_approval=self.needs_approval, timeout=self.timeout
        )

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        """Run the command the arguments name; its answer text (`ToolError` for an error)."""
        if self.store is None:
            raise ToolError(
                "the memory tool has no store: it runs as a runtime offers it, or given store="
            )
        return await run_command(MemoryFiles(self.store, self.namespace, ctx), arguments)
