"""`taskloom memory list|show|search|namespaces`: read a store's long-term memory.

They work on `--store` (default: the embedded store) or on the store of the
Runtime `--app` returns, and create nothing: a SQLite store that is not
there is an error naming it. What an item holds is data: every namespace,
key and value is printed with its control characters spelled out (see
`taskloom.cli.text`), and cut where it passes the store's own bounds, so a
tampered database can neither drive the terminal nor flood it. A store's URL
is printed without its credentials.

On the command line a namespace is its parts joined by `/`, with `%2F` and
`%25` for a `/` or `%` inside a part (`NAMESPACE_SYNTAX` in the parser);
namespaces are printed in the same form, so they can be pasted back.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from .._redact import safe_url
from ..backends import (
    MAX_KEY_LENGTH,
    MAX_NAMESPACE_DEPTH,
    MAX_NAMESPACE_PART_LENGTH,
    MAX_VALUE_BYTES,
    Memories,
    MemoryHit,
    MemoryItem,
    Namespace,
)
from ..errors import StoreError, UsageError
from .common import MemoryArgs, Where, open_runtime
from .failures import with_hint
from .summary import to_json
from .text import visible

__all__ = ["format_namespace", "memory_command", "parse_namespace"]

_SYNTAX_HINT = (
    "write a namespace as its parts joined by /, e.g. user/u1 "
    "(inside a part, %2F for / and %25 for %); see taskloom memory --help"
)
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")

# The longest a namespace or key can be in a store that checks what it takes:
# longer ones (a tampered database) are cut when printed.
_MAX_NAMESPACE_SHOWN = MAX_NAMESPACE_DEPTH * (3 * MAX_NAMESPACE_PART_LENGTH + 1)
_VALUE_COLUMN = 80
"""How much of a value a row of `list` or `search` shows (`show` prints it whole)."""


def parse_namespace(text: str, *, prefix: bool) -> Namespace:
    """The namespace `text` writes (parts joined by `/`, `%2F` and `%25`
    inside a part; one leading and one trailing `/` are dropped); with
    `prefix`, `""` and `/` are `()`, every namespace. `UsageError` for an
    empty part or a `%` that starts no escape."""
    body = text.removeprefix("/").removesuffix("/")
    if not body:
        if prefix:
            return ()
        raise with_hint(UsageError("a memory namespace needs at least one part"), _SYNTAX_HINT)
    parts = body.split("/")
    if "" in parts:
        raise with_hint(UsageError(f"memory namespace {text!r} has an empty part"), _SYNTAX_HINT)
    if _ESCAPE.search(body):
        raise with_hint(
            UsageError(f"memory namespace {text!r} has a % that is not %XX"), _SYNTAX_HINT
        )
    return tuple(_unquote(part, text) for part in parts)


def _unquote(part: str, text: str) -> str:
    # Each %XX is a byte of the part's UTF-8, as in a URL.
    try:
        return unquote(part, errors="strict")
    except UnicodeDecodeError:
        raise with_hint(
            UsageError(f"memory namespace {text!r}: its %XX escapes are not UTF-8"), _SYNTAX_HINT
        ) from None


def format_namespace(namespace: Namespace) -> str:
    """`namespace` as the command line writes it (`parse_namespace` reads it
    back): parts joined by `/`, each `%` and `/` inside a part escaped."""
    return "/".join(part.replace("%", "%25").replace("/", "%2F") for part in namespace)


def _cell(text: str, limit: int) -> str:
    """`text` on one line: every control character spelled out (newlines and
    tabs too), cut to `limit` characters with an ellipsis."""
    # Cut first: a tampered row may hold far more than is shown.
    one = visible(text[: limit + 1]).replace("\n", "\\n").replace("\t", "\\t")
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _value_text(item: MemoryItem) -> str:
    if isinstance(item.value, str):
        return item.value
    return json.dumps(item.value, ensure_ascii=False, default=str)


def _when(stamp: float) -> str:
    try:
        return datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError, TypeError):
        return visible(repr(stamp))  # a tampered row: shown, not trusted


def _to_dict(item: MemoryItem) -> dict[str, Any]:
    return {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "version": item.version,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
    }


def _store_name(where: Where) -> str:
    """The store for a message: never its credentials."""
    return safe_url(where.named())


def _options(where: Where) -> str:
    """` --store URL` (credentials left out) or ` --app REF`, for a printed command."""
    words = where.options()
    if words[:1] == ["--store"]:
        words = ["--store", safe_url(words[1])]
    return "".join(f" {shlex.quote(visible(word))}" for word in words)


def _rows(header: list[str], rows: list[list[str]]) -> None:
    """Print a table: columns padded to their widest cell, the last one left as is."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header[:-1])]

    def line(cells: list[str]) -> str:
        padded = [c.ljust(w) for c, w in zip(cells, widths, strict=False)]
        return "  ".join([*padded, cells[-1]])

    print(line(header))
    for row in rows:
        print(line(row))


def _item_row(item: MemoryItem) -> list[str]:
    return [
        _cell(format_namespace(item.namespace), _MAX_NAMESPACE_SHOWN),
        _cell(item.key, MAX_KEY_LENGTH),
        str(item.version),
        _when(item.updated_at),
        _cell(_value_text(item), _VALUE_COLUMN),
    ]


def _more(what: str) -> None:
    print(what, file=sys.stderr)


async def _list(memory: Memories, args: MemoryArgs) -> int:
    prefix = parse_namespace(args.prefix, prefix=True)
    items = await memory.list(prefix, limit=args.limit, offset=args.offset)
    # One item past the page says whether there are more.
    more = await memory.list(prefix, limit=1, offset=args.offset + args.limit)
    if args.json:
        print(to_json([_to_dict(item) for item in items]))
    elif not items:
        under = f" under {_cell(format_namespace(prefix), _MAX_NAMESPACE_SHOWN)}" if prefix else ""
        print(f"no memory items{under} in {_store_name(args.where)}")
    else:
        _rows(["NAMESPACE", "KEY", "VERSION", "UPDATED", "VALUE"], [_item_row(i) for i in items])
    if more:
        _more(f"more items follow: --offset {args.offset + args.limit} shows the next ones")
    return 0


async def _show(memory: Memories, args: MemoryArgs) -> int:
    namespace = parse_namespace(args.namespace, prefix=False)
    item = await memory.get(namespace, args.key)
    if item is None:
        written = _cell(format_namespace(namespace), _MAX_NAMESPACE_SHOWN)
        raise with_hint(
            UsageError(
                f"no memory item with key '{_cell(args.key, MAX_KEY_LENGTH)}' in namespace {written} "
                f"of {_store_name(args.where)}"
            ),
            f"see the keys there with: taskloom memory list {written}{_options(args.where)}",
        )
    if args.json:
        print(to_json(_to_dict(item)))
        return 0
    kind = (
        f"text, {len(item.value)} characters"
        if isinstance(item.value, str)
        else f"JSON {'object' if isinstance(item.value, dict) else 'array'}"
    )
    for name, said in (
        ("namespace", _cell(format_namespace(item.namespace), _MAX_NAMESPACE_SHOWN)),
        ("key", _cell(item.key, MAX_KEY_LENGTH)),
        ("version", str(item.version)),
        ("created", _when(item.created_at)),
        ("updated", _when(item.updated_at)),
        ("value", kind),
    ):
        print(f"{name:<10} {said}")
    print()
    _print_value(item)
    return 0


def _print_value(item: MemoryItem) -> None:
    """The value in full (JSON indented), control characters spelled out; a
    value past what a store takes (a tampered row) is cut, saying so."""
    text = (
        item.value
        if isinstance(item.value, str)
        else json.dumps(item.value, indent=2, ensure_ascii=False, default=str)
    )
    shown = visible(text[:MAX_VALUE_BYTES])
    print(shown)
    if len(text) > MAX_VALUE_BYTES:
        _more(f"… {len(text) - MAX_VALUE_BYTES} more characters not shown (--json prints them)")


def _hit_row(hit: MemoryHit) -> list[str]:
    return [f"{hit.score:.3f}", *_item_row(hit.item)]


async def _search(memory: Memories, args: MemoryArgs) -> int:
    prefix = parse_namespace(args.prefix, prefix=True)
    hits = await memory.search(prefix, args.query, limit=args.limit)
    if args.json:
        print(to_json([{"score": hit.score, **_to_dict(hit.item)} for hit in hits]))
    elif not hits:
        query = _cell(args.query, 200)
        print(f"no memory item matches '{query}' in {_store_name(args.where)}")
    else:
        header = ["SCORE", "NAMESPACE", "KEY", "VERSION", "UPDATED", "VALUE"]
        _rows(header, [_hit_row(hit) for hit in hits])
    return 0


async def _namespaces(memory: Memories, args: MemoryArgs) -> int:
    found = await memory.namespaces(parse_namespace(args.prefix, prefix=True))
    shown = found[: args.limit]
    if args.json:
        print(to_json([list(namespace) for namespace in shown]))
    elif not shown:
        print(f"no memory namespaces in {_store_name(args.where)}")
    else:
        for namespace in shown:
            print(_cell(format_namespace(namespace), _MAX_NAMESPACE_SHOWN))
    if len(found) > len(shown):
        _more(f"{len(found) - len(shown)} more namespaces: --limit N shows more")
    return 0


_ACTIONS: dict[str, Callable[[Memories, MemoryArgs], Awaitable[int]]] = {
    "list": _list,
    "show": _show,
    "search": _search,
    "namespaces": _namespaces,
}


async def _memory_command(args: MemoryArgs) -> int:
    if (args.where.store or "").startswith("memory:"):
        _more(
            "note: a memory:// store lives inside one process, so this command's is new "
            "and empty; name the SQLite or PostgreSQL store your host writes"
        )
    async with await open_runtime(args.where, create=False) as runtime:
        memory = runtime.backend.memory
        if memory is None:
            raise with_hint(
                UsageError(f"the store {_store_name(args.where)} keeps no long-term memory"),
                "name a memory://, sqlite:/// or postgresql:// store (--store)",
            )
        try:
            return await _ACTIONS[args.action](memory, args)
        except UsageError as exc:
            if not getattr(exc, "__notes__", None):
                with_hint(exc, "check the namespace and key; see taskloom memory --help")
            raise
        except json.JSONDecodeError as exc:
            # What taskloom writes is JSON: this row was written by something else.
            raise with_hint(
                StoreError(f"the store holds a memory item whose value is not JSON ({exc})"),
                "the database was changed outside taskloom: fix or delete that row",
            ) from exc


def memory_command(args: MemoryArgs) -> int:
    """Run one of the memory commands; returns the exit code."""
    return asyncio.run(_memory_command(args))
