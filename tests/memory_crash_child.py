"""A process for the memory crash test: runs an agent whose model appends to a
memory block, and hangs right after the store applied the edit (before the
tool's result reaches the log), so the test can SIGKILL it there.

    python memory_crash_child.py STORE_URL SCHEMA SESSION_ID OP

OP is `append` (appends PASSAGE) or `replace` (replaces "nine" by "ten") on a
memory block, or `tool-insert` / `tool-str_replace`, the same through the
memory tool (`MemoryTool`) on the file `/memories/notes.md`, or `tool-rename`,
which moves that file to `/memories/moved.md` (killed after its copy, before
its delete), or `tool-rmdir`, which deletes the directory `/memories/dir`
(killed after its first file's delete), or `tool-mvdir`, which moves it to
`/memories/done` (killed after its third write: its first file moved, the
second copied but not yet deleted).

It prints `READY after-memory-write` once the store has applied the edit.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from taskloom import Agent, Runtime
from taskloom.backends import MemoryItem, open_backend
from taskloom.memory import Block, Memory, MemoryTool
from taskloom.models import ScriptedModel, reply

URL, SCHEMA, SESSION_ID, OP = sys.argv[1:5]
USER = ("user", "u1")
PASSAGE = "Prefers meetings after ten."


class HangingAfterWrites:
    """The backend's memory store; hangs once `writes` puts or deletes have been applied."""

    def __init__(self, inner: Any, writes: int = 1) -> None:
        self._inner = inner
        self._left = writes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def put(self, *args: Any, **kwargs: Any) -> MemoryItem:
        item: MemoryItem = await self._inner.put(*args, **kwargs)
        await self._written()
        return item

    async def delete(self, *args: Any, **kwargs: Any) -> None:
        await self._inner.delete(*args, **kwargs)
        await self._written()

    async def _written(self) -> None:
        self._left -= 1
        if self._left:
            return
        sys.stdout.write("READY after-memory-write\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)


def memory(store: Any = None) -> Memory:
    """The memory of the agent here and in the test that resumes it."""
    return Memory([Block("human", "What you know of the user")], USER, store=store)


TOOL_CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "tool-insert": (
        "memory",
        {
            "command": "insert",
            "path": "/memories/notes.md",
            "insert_line": 1,
            "insert_text": PASSAGE,
        },
    ),
    "tool-str_replace": (
        "memory",
        {
            "command": "str_replace",
            "path": "/memories/notes.md",
            "old_str": "nine",
            "new_str": "ten",
        },
    ),
    "tool-rename": (
        "memory",
        {"command": "rename", "old_path": "/memories/notes.md", "new_path": "/memories/moved.md"},
    ),
    "tool-rmdir": ("memory", {"command": "delete", "path": "/memories/dir"}),
    "tool-mvdir": (
        "memory",
        {"command": "rename", "old_path": "/memories/dir", "new_path": "/memories/done"},
    ),
}
WRITES_BEFORE_THE_KILL = {"tool-mvdir": 3}


async def main() -> None:
    backend = open_backend(URL, **({} if SCHEMA == "-" else {"schema": SCHEMA}))
    if OP in TOOL_CALLS:
        model = ScriptedModel([reply(tool_calls=[TOOL_CALLS[OP]]), "noted"])
        hanging = HangingAfterWrites(backend.memory, WRITES_BEFORE_THE_KILL.get(OP, 1))
        tool = MemoryTool(USER, hanging)  # type: ignore[arg-type]
        runtime = Runtime(backend)
        session = await runtime.open_session(SESSION_ID, Agent("assistant", model, tools=[tool]))
        await session.run("note it")
        return
    call = (
        ("memory_append", {"block": "human", "text": PASSAGE})
        if OP == "append"
        else ("memory_replace", {"block": "human", "old": "nine", "new": "ten"})
    )
    model = ScriptedModel([reply(tool_calls=[call]), "noted"])
    agent = Agent("assistant", model, memory=memory(HangingAfterWrites(backend.memory)))
    runtime = Runtime(backend)
    session = await runtime.open_session(SESSION_ID, agent)
    await session.run("I prefer meetings after ten")


if __name__ == "__main__":
    asyncio.run(main())
