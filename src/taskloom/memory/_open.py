"""A `Memory` opened for one run: its blocks read and rendered, its tools.

Every edit is a compare-and-set on the version this run last saw of the
block (rendered at the start, or answered since): a block another run
changed meanwhile is not overwritten; the tool refuses and answers with the
current text, whose version the run then remembers, so the model's redo
applies. Each write carries the call's idempotency key, so a call cut off by
a crash and run again applies its edit once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape

from ..backends import Memories, MemoryItem, Namespace
from ..entries import Entry, MemoryEdited
from ..errors import UsageError, VersionConflict
from ..tools import Tool, ToolContext, ToolEffect, ToolError, tool
from ._blocks import Block, Memory

__all__ = ["OpenMemory", "open_memory"]

MAX_SEARCH_HITS = 20
"""The most notes one `archive_search` answers with."""
MAX_NOTE_CHARS = 4000
"""The longest note `archive_save` keeps, in characters."""
_NO_VERSION = 2**62
"""A version no item reaches: a write on it only finds out whether its key was applied."""


def digest(item: MemoryItem | None) -> str:
    """sha256 hex of an item's stored text ("" when absent)."""
    if item is None:
        return ""
    return hashlib.sha256(_text(item).encode("utf-8", "surrogatepass")).hexdigest()


def _text(item: MemoryItem | None) -> str:
    if item is None:
        return ""
    value = item.value
    return value if isinstance(value, str) else str(value)


@dataclass(slots=True)
class _Seen:
    text: str
    version: int  # 0: absent


class OpenMemory:
    """One run's view of a `Memory` (`open_memory`, which a runtime calls at
    each run's start): what it last saw of each block, the instructions it
    renders and the tools it offers."""

    def __init__(self, memory: Memory, store: Memories) -> None:
        self.memory = memory
        self.store = store
        self._blocks = {b.label: b for b in memory.blocks}
        self._seen: dict[str, _Seen] = {}

    def _where(self, block: Block) -> Namespace:
        return block.namespace if block.namespace is not None else self.memory.namespace

    async def read(self) -> None:
        """Read every block fresh from the store (the run's start)."""
        for block in self.memory.blocks:
            item = await self.store.get(self._where(block), block.key)
            self._saw(block, item)

    def _saw(self, block: Block, item: MemoryItem | None) -> None:
        text = block.initial if item is None else _text(item)
        self._seen[block.label] = _Seen(text, 0 if item is None else item.version)

    def render(self) -> str:
        """The blocks as the model reads them: one XML-ish section each, with
        its description and how many of its characters are used. A block's
        text is shown with each `</` written `&lt;/`, so no stored text can
        close its section (or the memory's) and read as instructions; a text
        another writer made longer than its block's limit is shown cut at
        the limit, so the limit bounds what a block adds to every request."""
        if not self.memory.blocks:
            return ""
        lines = [
            "<memory_blocks>",
            "Your long-term memory: these blocks persist across sessions."
            + (
                " Keep them current with memory_replace, memory_append and memory_rewrite."
                if self._editable()
                else " They are read-only in this run."
            ),
        ]
        for block in self.memory.blocks:
            seen = self._seen.get(block.label, _Seen(block.initial, 0))
            attrs = f'chars="{len(seen.text)}/{block.limit}"'
            if block.description:
                attrs = f'description="{escape(block.description)}" {attrs}'
            if block.read_only and not self.memory.read_only:
                attrs += ' read_only="true"'
            lines += [f"<{block.label} {attrs}>", _shown(block, seen.text), f"</{block.label}>"]
        lines.append("</memory_blocks>")
        return "\n".join(lines)

    def instructions(self, base: str | None) -> str:
        """`base` (the agent's instructions) followed by the rendered blocks."""
        rendered = self.render()
        if not base:
            return rendered
        return f"{base}\n\n{rendered}" if rendered else base

    def tools(self) -> list[Tool]:
        """The tools this run offers: block edits unless read-only, the
        archive's search, and its save unless read-only."""
        offered: list[Tool] = []
        if self._editable():
            offered += _BLOCK_TOOLS
        if self.memory.archive_namespace is not None:
            offered.append(archive_search)
            if not self.memory.read_only:
                offered.append(archive_save)
        return offered

    def _editable(self) -> bool:
        return not self.memory.read_only and any(not b.read_only for b in self.memory.blocks)

    @contextmanager
    def serving(self, run_id: str) -> Iterator[None]:
        """Have the memory tools' calls of run `run_id` reach this memory
        while the block is open."""
        _OPEN[run_id] = self
        try:
            yield
        finally:
            _OPEN.pop(run_id, None)

    # ----- edits -----

    def _block(self, label: str) -> Block:
        block = self._blocks.get(label)
        if block is None:
            names = ", ".join(self._blocks) or "none"
            raise ToolError(f"no memory block {label!r} (blocks: {names})")
        if block.read_only or self.memory.read_only:
            raise ToolError(f"memory block {label!r} is read-only")
        return block

    async def edit(
        self, ctx: ToolContext, label: str, op: str, change: Callable[[str], str]
    ) -> str:
        """Apply `change` to the text of block `label` as this run last saw
        it, if the store still holds that version; the answer for the model."""
        block = self._block(label)
        where = self._where(block)
        seen = self._seen[label]
        try:
            new = _changed(block, seen.text, change)
        except ToolError:
            # A call run again after a crash may find its own edit applied
            # (the old passage gone, say): the store answers its key.
            written = await self._applied(ctx, block, where)
            if written is None:
                raise
            return await self._edited(ctx, block, op, seen, written)
        try:
            written = await self.store.put(
                where,
                block.key,
                new,
                if_version=seen.version,
                idempotency_key=ctx.idempotency_key,
            )
        except VersionConflict as conflict:
            current = conflict.current if isinstance(conflict.current, MemoryItem) else None
            self._saw(block, current)
            raise ToolError(
                f"memory block {label!r} changed since you read it; nothing was written. "
                f"Its current text:\n{self._seen[label].text}\n"
                "Redo your edit on this text."
            ) from None
        except UsageError as exc:
            # Within the block's limit in characters, but over what the store
            # holds (its bound counts a non-ASCII character as its escape).
            raise ToolError(
                f"the memory store refused the edit of block {label!r}: {exc}. "
                "Nothing was written: shorten the text and try again"
            ) from None
        return await self._edited(ctx, block, op, seen, written)

    async def _applied(self, ctx: ToolContext, block: Block, where: Namespace) -> MemoryItem | None:
        """The item this call's key wrote already, or None (nothing written):
        a write on a version no item reaches is refused unless the key was
        applied, and a refused write records nothing."""
        try:
            return await self.store.put(
                where, block.key, "", if_version=_NO_VERSION, idempotency_key=ctx.idempotency_key
            )
        except VersionConflict:
            return None

    async def _edited(
        self, ctx: ToolContext, block: Block, op: str, seen: _Seen, written: MemoryItem
    ) -> str:
        """Remember and record the edit `written`; the answer for the model."""
        # Any other version: the store answered a key applied before (a
        # call run again after a crash), whose write may be older than what
        # this run saw.
        replayed = written.version != seen.version + 1
        if written.version > seen.version:
            self._saw(block, written)
        before = None if seen.version == 0 or replayed else seen
        await _record(ctx, self._where(block), block.key, op, before, written, replayed)
        used = len(_text(written))
        return f"memory block {block.label!r} updated ({used}/{block.limit} characters)"

    async def save_note(self, ctx: ToolContext, text: str) -> str:
        """Save `text` as a new archive note; its key."""
        where = self.memory.archive_namespace
        assert where is not None
        if not text.strip():
            raise ToolError("archive_save needs some text")
        if len(text) > MAX_NOTE_CHARS:
            raise ToolError(f"a note is at most {MAX_NOTE_CHARS} characters, not {len(text)}")
        key = "note:" + ctx.idempotency_key
        try:
            written = await self.store.put(
                where, key, text, if_version=0, idempotency_key=ctx.idempotency_key
            )
        except VersionConflict:
            # This call's note, saved by a run cut off before its answer
            # (and its key pruned since): saved once all the same.
            return f"saved to the archive as {key}"
        except UsageError as exc:
            raise ToolError(str(exc)) from None
        await _record(ctx, where, key, "archive_save", None, written)
        return f"saved to the archive as {key}"

    async def search(self, query: str, limit: int) -> str:
        """The archive's notes matching `query`, as text for the model."""
        where = self.memory.archive_namespace
        assert where is not None
        limit = max(1, min(int(limit), MAX_SEARCH_HITS))
        hits = await self.store.search(where, query, limit=limit)
        if not hits:
            return "no archived note matches"
        return "\n".join(f"- [{hit.item.key}] {_text(hit.item)}" for hit in hits)


def _shown(block: Block, text: str) -> str:
    over = len(text) - block.limit
    if over <= 0:
        return _inert(text)
    return _inert(text[: block.limit]) + (
        f"\n[{over} more characters not shown: this block is over its limit;"
        " shorten it with memory_rewrite]"
    )


def _inert(text: str) -> str:
    # Only closing tags are neutralised: the rest of the text (which the
    # model quotes back in its edits) is shown as stored.
    return text.replace("</", "&lt;/")


def _changed(block: Block, text: str, change: Callable[[str], str]) -> str:
    new = change(text)
    if len(new) > block.limit:
        raise ToolError(
            f"memory block {block.label!r} would hold {len(new)} characters, over its limit "
            f"of {block.limit}: shorten it (memory_rewrite) and try again"
        )
    return new


async def _record(
    ctx: ToolContext,
    where: Namespace,
    key: str,
    op: str,
    before: _Seen | None,
    after: MemoryItem,
    replayed: bool = False,
) -> None:
    entry = MemoryEdited(
        call_id=ctx.call_id,
        agent=ctx.agent.name,
        namespace=tuple(where),
        key=key,
        op=op,
        version_before=(after.version - 1 if replayed else 0) if before is None else before.version,
        version_after=after.version,
        digest_before=""
        if before is None
        else hashlib.sha256(before.text.encode("utf-8", "surrogatepass")).hexdigest(),
        digest_after=digest(after),
        replayed=replayed,
    )
    await ctx.record(Entry.of(entry, ctx.run_id))


def _replace(old: str, new: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        if not old:
            raise ToolError("memory_replace needs the old text to replace (not empty)")
        found = text.count(old)
        if found == 0:
            raise ToolError(
                "the old text is not in the block (it must match exactly); the block holds:\n"
                + text
            )
        if found > 1:
            raise ToolError(
                f"the old text occurs {found} times in the block: give more of it, so it is unique"
            )
        return text.replace(old, new, 1)

    return change


# The tools are made once (a tool's schema costs more to build than a run
# without memory takes); each call finds its run's `OpenMemory` by run id.
_OPEN: dict[str, OpenMemory] = {}


def _running(ctx: ToolContext) -> OpenMemory:
    opened = _OPEN.get(ctx.run_id)
    if opened is None:
        raise ToolError("long-term memory is not open in this run")
    return opened


@tool(idempotent=True)
async def memory_replace(block: str, old: str, new: str, ctx: ToolContext) -> str:
    """Replace one exact passage `old` of a memory block with `new` (empty `new` deletes it)."""
    return await _running(ctx).edit(ctx, block, "replace", _replace(old, new))


@tool(idempotent=True)
async def memory_append(block: str, text: str, ctx: ToolContext) -> str:
    """Add `text` at the end of a memory block, on a new line."""
    return await _running(ctx).edit(
        ctx, block, "append", lambda current: f"{current}\n{text}" if current else text
    )


@tool(idempotent=True)
async def memory_rewrite(block: str, text: str, ctx: ToolContext) -> str:
    """Replace the whole text of a memory block with `text` (to reorganise or shorten it)."""
    return await _running(ctx).edit(ctx, block, "rewrite", lambda _: text)


@tool(idempotent=True)
async def archive_save(text: str, ctx: ToolContext) -> str:
    """Save a note to the long-term archive (facts too detailed for the memory blocks)."""
    return await _running(ctx).save_note(ctx, text)


@tool(effect=ToolEffect.READ_ONLY)
async def archive_search(query: str, ctx: ToolContext, limit: int = 5) -> str:
    """Search the long-term archive's notes by words; the best matches first."""
    return await _running(ctx).search(query, limit)


_BLOCK_TOOLS: tuple[Tool, ...] = (memory_replace, memory_append, memory_rewrite)


async def open_memory(memory: Memory, store: Memories) -> OpenMemory:
    """`memory` opened for one run on `store`: its blocks read fresh."""
    opened = OpenMemory(memory, store)
    await opened.read()
    return opened
