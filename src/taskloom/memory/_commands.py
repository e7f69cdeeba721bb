"""The memory tool's six commands, run against one namespace of a `Memories`.

Every answer is the text Anthropic's documentation and SDK give for the
same command on a directory of files (`view` lists up to two levels with
sizes; a file comes back with line numbers; errors say what to fix), so a
model trained on the tool reads it as it expects.

Edits read the item and write it back with compare-and-set
(`put(if_version=<the version read>)`): when another writer got there first
the command is run again on what is there now, up to `EDIT_ATTEMPTS` times,
so no edit is ever lost, and one that cannot be redone (its `old_str` is
gone) is answered with the reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..backends import Memories, MemoryItem, MemoryValue, Namespace
from ..entries import Entry, MemoryEdited
from ..errors import UsageError, VersionConflict
from ..tools import ToolContext, ToolError
from ._open import digest
from ._paths import ROOT, key_of, path_of, reachable, shown

EDIT_ATTEMPTS = 8
"""How many times a command is run on fresh reads when other writers keep
changing what it edits, before it is answered "try again"."""

MAX_FILES = 10_000
"""The most items of the namespace a listing, a directory delete or rename reads."""

MAX_LISTED = 500
"""The most entries a `view` of a directory shows (the rest are counted)."""

LINE_NUMBER_WIDTH = 6
"""Line numbers are right-aligned to this width, as Anthropic's SDK writes them."""

_PAGE = 1000
_NO_VERSION = (
    2**62
)  # a version no item reaches: a write on it only asks whether its key was applied


@dataclass(slots=True)
class MemoryFiles:
    """One namespace of a store seen as the files under `/memories`.

    `ctx` is the call's context (None outside a run); `command` the command
    running; `writes` counts the current attempt's writes and `applied` those
    it applied; `epoch` counts the attempts before it that applied a write
    and then met another writer's change (their keys are spent).
    """

    store: Memories
    namespace: Namespace
    ctx: ToolContext | None = None
    command: str = ""
    writes: int = field(default=0)
    applied: int = field(default=0)
    epoch: int = field(default=0)

    def _key(self, key: str, delete: bool, epoch: int | None = None) -> str | None:
        """The idempotency key of a write: the call's, the attempt's epoch and
        what the write does (a put or a delete of `key`). A call run again
        after a crash makes each write it had made with the same key, and the
        store applies it once, whatever the writes before it found: a
        directory's delete or rename, cut off part way, goes on with the
        files left, its earlier writes answered or not made again."""
        if self.ctx is None:
            return None
        what = hashlib.sha256(f"{'delete' if delete else 'put'}\0{key}".encode()).hexdigest()
        return f"{self.ctx.idempotency_key}:{self.epoch if epoch is None else epoch}:{what[:32]}"

    async def write(
        self,
        key: str,
        value: MemoryValue | None,
        if_version: int,
        before: MemoryItem | None = None,
    ) -> MemoryItem | None:
        """The one place a command changes the store: `value` written at `key`
        (None: the item deleted), only if the item is still at `if_version`
        (0: absent), else `VersionConflict`; `before`, the item as read, is
        what the log's entry for the edit digests. The item as written (as an
        earlier try wrote it, when the store answers this write's key)."""
        self.writes += 1
        try:
            after = await self._store(key, value, if_version, self._key(key, value is None))
        except UsageError as exc:
            raise ToolError(
                f"The memory store refused the write of {path_of(key)}: {exc}"
            ) from None
        self.applied += 1
        await self._record(key, if_version, before, after)
        return after

    async def _record(
        self,
        key: str,
        if_version: int,
        before: MemoryItem | None,
        after: MemoryItem | None,
        replayed: bool | None = None,
    ) -> None:
        """The `memory_edited` entry of a write just applied (or replayed: the
        store answered a key applied by an earlier try of this call)."""
        if self.ctx is None:
            return
        if replayed is None:
            replayed = after is not None and after.version != if_version + 1
        read = before if before is not None and before.version == if_version else None
        entry = MemoryEdited(
            call_id=self.ctx.call_id,
            agent=self.ctx.agent.name,
            namespace=tuple(self.namespace),
            key=key,
            op=self.command,
            version_before=(after.version - 1 if after is not None else 0)
            if replayed
            else if_version,
            version_after=0 if after is None else after.version,
            digest_before="" if read is None or replayed else digest(read),
            digest_after=digest(after),
            replayed=replayed,
        )
        await self.ctx.record(Entry.of(entry, self.ctx.run_id))

    async def applied_before(self, arguments: Mapping[str, Any]) -> bool:
        """Whether an earlier try of this call (cut off by a crash) applied the
        command's first write: asked of the store with that write's key on a
        version no item reaches, which the store refuses, writing nothing,
        unless the key was applied."""
        if self.ctx is None:
            return False
        try:
            target = _first_target(self.command, arguments)
        except ToolError:
            return False
        if target is None:
            return False
        if self.command == "rename":
            # A rename's first write is a copy to the destination, or for a
            # directory the copy of each file below it.
            return await self.made_before(target, record=True)
        delete = self.command == "delete"
        after = await self._asked(target, delete)
        if isinstance(after, bool):
            return False
        await self._record(target, 0, None, after, replayed=True)
        return True

    async def _asked(self, key: str, delete: bool) -> MemoryItem | bool | None:
        """What an earlier try of this call (first attempt) wrote at `key` with
        a put (or a delete), asked of the store with that write's key on a
        version no item reaches, which the store refuses, writing nothing,
        unless the key was applied; False if it wrote nothing there."""
        value = None if delete else ""
        try:
            return await self._store(key, value, _NO_VERSION, self._key(key, delete, epoch=0))
        except (VersionConflict, UsageError):
            return False

    async def made_before(self, key: str, record: bool = False) -> bool:
        """Whether an earlier try of this call (cut off by a crash) made what
        is at `key` now: the file there, or every file below it, a copy that
        try put there (a rename's); only before the call's first write. With
        `record`, each copy is logged as replayed."""
        if self.ctx is None or self.writes:
            return False
        item = await self.file(key)
        found = [item] if item is not None else (await self.under(key))[0]
        made: list[MemoryItem] = []
        for each in found:
            after = await self._asked(each.key, delete=False)
            if not isinstance(after, MemoryItem):
                return False
            made.append(after)
        if record:
            for after in made:
                await self._record(after.key, 0, None, after, replayed=True)
        return bool(found)

    async def _store(
        self, key: str, value: MemoryValue | None, if_version: int, idempotency_key: str | None
    ) -> MemoryItem | None:
        """Put `value` at `key` (None: delete it) with compare-and-set on
        `if_version` and `idempotency_key`; the item as written (None: deleted)."""
        if value is None:
            await self.store.delete(
                self.namespace, key, if_version=if_version, idempotency_key=idempotency_key
            )
            return None
        return await self.store.put(
            self.namespace, key, value, if_version=if_version, idempotency_key=idempotency_key
        )

    async def file(self, key: str) -> MemoryItem | None:
        """The item at `key`, or None (the root is never a file)."""
        return None if not key else await self.store.get(self.namespace, key)

    async def under(self, key: str) -> tuple[list[MemoryItem], bool]:
        """The reachable items below directory `key` (`""`: all), in key
        order, at most `MAX_FILES` of them (the store lists them by key
        prefix, so a directory costs what it holds, not what the namespace
        holds); and whether there are more."""
        prefix = f"{key}/" if key else ""
        found: list[MemoryItem] = []
        for offset in range(0, MAX_FILES, _PAGE):
            page = await self.store.list(
                self.namespace, limit=_PAGE, offset=offset, key_prefix=prefix
            )
            # The namespace's own items come first: deeper namespaces sort after.
            own = [i for i in page if i.namespace == self.namespace]
            found.extend(i for i in own if reachable(i.key))
            if len(own) < _PAGE:
                return found, False
        return found, True


def text_of(item: MemoryItem) -> str:
    """The file content of an item: its text, or its JSON value written out."""
    value = item.value
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def _size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes}B"
    for unit, scale in (("K", 1024), ("M", 1024**2)):
        if nbytes < scale * 1024:
            value = nbytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{nbytes / 1024**3:.1f}G"


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{n:>{LINE_NUMBER_WIDTH}}\t{line}" for n, line in enumerate(lines, first))


def _required(arguments: Mapping[str, Any], name: str, command: str) -> Any:
    value = arguments.get(name)
    if value is None:
        raise ToolError(f"The `{name}` parameter is required for the `{command}` command")
    return value


def _missing(path: str) -> ToolError:
    return ToolError(f"The path {path} does not exist. Please provide a valid path.")


def _editable(item: MemoryItem | None, path: str) -> str:
    if item is None:
        raise _missing(path)
    if not isinstance(item.value, str):
        raise ToolError(f"The file {path} holds a JSON value, which this tool does not edit")
    return item.value


# ----- view -----


async def view(files: MemoryFiles, arguments: Mapping[str, Any]) -> str:
    """A directory's files up to two levels deep, or a file with line numbers."""
    key = key_of(_required(arguments, "path", "view"))
    path = path_of(key)
    item = await files.file(key)
    if item is not None:
        return _view_file(path, text_of(item), arguments.get("view_range"))
    items, more = await files.under(key)
    if key and not items:
        raise _missing(shown(path))
    return _listing(path, key, items, more)


def _view_file(path: str, text: str, view_range: object) -> str:
    lines = text.split("\n")
    first = 1
    if view_range is not None:
        first, last = _range(view_range, len(lines))
        lines = lines[first - 1 : last]
    return f"Here's the content of {path} with line numbers:\n" + _numbered(lines, first)


def _range(view_range: object, count: int) -> tuple[int, int]:
    if (
        not isinstance(view_range, list)
        or len(view_range) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
    ):
        raise ToolError("Invalid `view_range` parameter: it should be a list of two integers")
    start, end = view_range
    if not 1 <= start <= count:
        raise ToolError(
            f"Invalid `view_range` parameter: {view_range}. Its first element `{start}` should be "
            f"within the range of lines of the file: [1, {count}]"
        )
    if end == -1:
        return start, count
    if not start <= end <= count:
        raise ToolError(
            f"Invalid `view_range` parameter: {view_range}. Its second element `{end}` should be "
            f"-1 or within [{start}, {count}]"
        )
    return start, end


def _listing(path: str, key: str, items: list[MemoryItem], more: bool) -> str:
    prefix = f"{key}/" if key else ""
    sizes: dict[str, int] = {}
    total = 0
    for item in items:
        parts = item.key[len(prefix) :].split("/")
        if any(p.startswith(".") for p in parts):
            continue  # hidden, as on a filesystem: neither shown nor descended into
        size = len(text_of(item).encode())
        total += size
        # Each directory on the way, to two levels, and the file if it is that shallow.
        for depth in range(1, min(len(parts), 2) + 1):
            name = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
            sizes[name] = sizes.get(name, 0) + size
    entries = sorted(sizes, key=lambda n: n.rstrip("/").split("/"))
    lines = [f"{_size(total)}\t{path}"]
    lines += [f"{_size(sizes[n])}\t{path}/{n}" for n in entries[:MAX_LISTED]]
    hidden = len(entries) - MAX_LISTED
    if hidden > 0 or more:
        lines.append(f"(and {'more' if more else hidden} entries not shown: view a subdirectory)")
    header = (
        f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:"
    )
    return header + "\n" + "\n".join(lines)


# ----- create, str_replace, insert -----


async def _check_parents(files: MemoryFiles, key: str) -> None:
    parts = key.split("/")
    for depth in range(1, len(parts)):
        parent = "/".join(parts[:depth])
        if await files.file(parent) is not None:
            raise ToolError(f"The path {path_of(parent)} is a file, not a directory")


async def create(files: MemoryFiles, arguments: Mapping[str, Any]) -> str:
    """A new file; refused where a file or directory already is."""
    key = key_of(_required(arguments, "path", "create"))
    text = _required(arguments, "file_text", "create")
    path = shown(path_of(key))
    if not key or await files.file(key) is not None or (await files.under(key))[0]:
        raise ToolError(f"File {path} already exists")
    await _check_parents(files, key)
    await files.write(key, text, 0)
    return f"File created successfully at: {path}"


async def str_replace(files: MemoryFiles, arguments: Mapping[str, Any]) -> str:
    """Replace the one occurrence of `old_str` in a file with `new_str`."""
    key = key_of(_required(arguments, "path", "str_replace"))
    old = _required(arguments, "old_str", "str_replace")
    new = arguments.get("new_str") or ""
    path = shown(path_of(key))
    item = await files.file(key)
    if item is None and (await files.under(key))[0]:
        raise ToolError(f"The path {path} is not a file.")
    content = _editable(item, path)
    assert item is not None
    if not old:
        raise ToolError("The `old_str` parameter must not be empty")
    lines = _occurrences(content, old)
    if len(lines) > 1:
        shown_lines = ", ".join(map(str, lines[:50]))
        raise ToolError(
            f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: "
            f"{shown_lines}. Please ensure it is unique"
        )
    if not lines:
        raise ToolError(
            f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
        )
    changed = content.replace(old, new, 1)
    await files.write(key, changed, item.version, item)
    at = lines[0] - 1
    new_lines = changed.split("\n")
    start, end = max(0, at - 2), min(len(new_lines), at + 3)
    return (
        "The memory file has been edited. Here is the snippet showing the change "
        "(with line numbers):\n" + _numbered(new_lines[start:end], start + 1)
    )


def _occurrences(content: str, old: str) -> list[int]:
    """The line (from 1) of each occurrence of `old` in `content`, overlapping ones too."""
    lines: list[int] = []
    at = content.find(old)
    while at != -1:
        lines.append(content.count("\n", 0, at) + 1)
        at = content.find(old, at + 1)
    return lines


async def insert(files: MemoryFiles, arguments: Mapping[str, Any]) -> str:
    """Insert `insert_text` after line `insert_line` (0: at the top)."""
    key = key_of(_required(arguments, "path", "insert"))
    at = _required(arguments, "insert_line", "insert")
    text = _required(arguments, "insert_text", "insert")
    path = shown(path_of(key))
    item = await files.file(key)
    if item is None and (await files.under(key))[0]:
        raise ToolError(f"The path {path} is not a file.")
    content = _editable(item, path)
    assert item is not None
    lines = content.splitlines()
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= len(lines):
        raise ToolError(
            f"Invalid `insert_line` parameter: {at}. It should be within the range "
            f"[0, {len(lines)}]."
        )
    lines.insert(at, text.rstrip("\n"))
    await files.write(key, "\n".join(lines) + "\n", item.version, item)
    return f"The file {path} has been edited."


# ----- delete, rename -----


async def delete(files: MemoryFiles, arguments: Mapping[str, Any]) -> str:
    """Delete a file, or a directory and every file below it."""
    key = key_of(_required(arguments, "path", "delete"))
    path = shown(path_of(key))
    if not key:
        raise ToolError(f"Cannot delete the {ROOT} directory itself")
    item = await files.file(key)
    doomed = [item] if item is not None else (await files.under(key))[0]
    if not doomed:
        raise ToolError(f"The path {path} does not exist")
    for each in doomed:
        await files.write(each.key, None, each.version, each)
    return f"Successfully deleted {path}"


async def rename(files: MemoryFiles, arguments: Mapping[str, Any]) -> str:
    """Move a file or a directory (each file below it) to a path that is free."""
    old_key = key_of(_required(arguments, "old_path", "rename"), "old_path")
    new_key = key_of(_required(arguments, "new_path", "rename"), "new_path")
    old, new = shown(path_of(old_key)), shown(path_of(new_key))
    if not old_key or not new_key:
        raise ToolError(f"Cannot rename the {ROOT} directory itself")
    if new_key.startswith(old_key + "/"):
        raise ToolError(f"Cannot move {old} into itself")
    taken = await files.file(new_key) is not None or bool((await files.under(new_key))[0])
    if taken and not await files.made_before(new_key):
        # (A file this call copied there before a crash cut it off: the
        # rename goes on, the store answering the copy's key.)
        raise ToolError(f"The destination {new} already exists")
    item = await files.file(old_key)
    moving = [item] if item is not None else (await files.under(old_key))[0]
    if not moving:
        raise ToolError(f"The path {old} does not exist")
    await _check_parents(files, new_key)
    for done, each in enumerate(moving):
        try:
            await _move(files, each, new_key + each.key[len(old_key) :])
        except VersionConflict:
            if item is not None:
                raise  # one file, nothing moved: the command reruns
            raise ToolError(
                f"Moved {done} of the {len(moving)} files of {old} to {new}, then "
                f"{path_of(each.key)} changed meanwhile and was left in place: view both "
                "directories and move the rest"
            ) from None
    return f"Successfully renamed {old} to {new}"


async def _move(files: MemoryFiles, item: MemoryItem, target: str) -> None:
    """Copy `item` to `target` (which must be free), then delete it at the
    version read; when it changed meanwhile, take the stale copy back."""
    copied = await files.write(target, item.value, 0)
    if copied is not None and copied.value != item.value:
        # An earlier try's copy, of what the file held then.
        raise ToolError(
            f"{path_of(item.key)} changed after an earlier try of this call copied it to "
            f"{path_of(target)}: view both and finish the move"
        )
    try:
        await files.write(item.key, None, item.version, item)
    except VersionConflict:
        await files.write(target, None, 1)
        raise


COMMANDS: Mapping[str, Callable[[MemoryFiles, Mapping[str, Any]], Awaitable[str]]] = {
    "view": view,
    "create": create,
    "str_replace": str_replace,
    "insert": insert,
    "delete": delete,
    "rename": rename,
}
"""The commands of Anthropic's memory tool (`memory_20250818`), by name."""


async def run_command(files: MemoryFiles, arguments: Mapping[str, Any]) -> str:
    """Run the command `arguments` name on `files`: its answer, or `ToolError`.

    A write refused because another writer changed the item since this
    command read it reruns the command on fresh reads."""
    command = arguments.get("command")
    run = COMMANDS.get(command) if isinstance(command, str) else None
    if run is None or not isinstance(command, str):
        raise ToolError(f"Unknown command {command!r}: use one of {', '.join(COMMANDS)}")
    files.command = command
    files.epoch = 0
    for _ in range(EDIT_ATTEMPTS):
        files.writes = 0
        files.applied = 0
        try:
            return await run(files, arguments)
        except VersionConflict:
            if files.applied:
                # The keys of the writes this attempt applied are spent: the
                # store would answer the rerun's writes with theirs unwritten.
                files.epoch += 1
            continue
        except ToolError:
            # Run again after a crash, a command finds its own edit made (its
            # file created, its old_str gone): the store knows its key.
            if files.writes == 0 and await files.applied_before(arguments):
                return (
                    f"The {command} command was already applied by an earlier try of this "
                    "call (cut off before its answer); nothing more was changed"
                )
            raise
    raise ToolError(
        "Other writers kept changing this memory while the command ran; nothing more was "
        "changed by it: view the file and try again"
    )


def _first_target(command: str, arguments: Mapping[str, Any]) -> str | None:
    """The key of the item a command's first write changes, where the
    arguments alone name it (None for `view`)."""
    if command in ("create", "str_replace", "insert", "delete"):
        return key_of(_required(arguments, "path", command)) or None
    if command == "rename":
        return key_of(_required(arguments, "new_path", "rename"), "new_path") or None
    return None
