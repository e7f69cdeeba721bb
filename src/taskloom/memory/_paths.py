"""Paths of Anthropic's memory tool (`/memories/...`) as keys of one namespace.

`/memories` is the root directory; `/memories/notes/user.md` is the item
keyed `notes/user.md`, and a directory is a key prefix (`notes/`). Whatever
could reach outside the root or read two ways is refused before the store
is touched: another root, `.` and `..` segments (also written with full-width
or other look-alike characters, or percent-encoded), empty segments,
backslashes, control characters (NUL among them), lone surrogates and paths
longer than a key may be.
"""

from __future__ import annotations

import json
import re
import unicodedata

from ..backends import MAX_KEY_LENGTH
from ..tools import ToolError

ROOT = "/memories"
"""The directory every path of the memory tool lives under."""

MAX_PATH_LENGTH = len(ROOT) + 1 + MAX_KEY_LENGTH
"""The longest path taken, in characters: the root, a slash and the longest key."""

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_SHOWN = 200
_ESCAPES = "it would escape /memories"


def shown(path: str) -> str:
    """`path` as an answer quotes it: at most 200 characters, control
    characters escaped, so a hostile path never reaches the model whole."""
    cut = path[:_SHOWN]
    text = json.dumps(cut, ensure_ascii=False)[1:-1]
    return text + ("..." if len(path) > _SHOWN else "")


def segment_problem(segment: str) -> str | None:
    """Why `segment` cannot be one part of a memory path, or None.

    Checked after NFKC normalisation too: a full-width `．．` or `／` reads
    as `..` or `/` to anything that normalises, so it is refused here."""
    if not segment:
        return "it has an empty segment (`//`)"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in segment):
        return "it holds a control character"
    if "\\" in segment:
        return "it holds a backslash"
    if _PERCENT_ESCAPE.search(segment):
        return "it holds a percent-encoded character"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in segment):
        return "it holds a lone surrogate"
    folded = unicodedata.normalize("NFKC", segment)
    if folded.strip() in (".", "..") or "/" in folded or "\\" in folded:
        return _ESCAPES
    return None


def key_of(path: object, name: str = "path") -> str:
    """The key a memory path stands for (`""`: the root, `/memories`), or
    `ToolError` saying why the path is refused. One trailing slash is allowed."""
    if not isinstance(path, str):
        raise ToolError(f"The `{name}` parameter is a string starting with {ROOT}")
    if len(path) > MAX_PATH_LENGTH:
        raise ToolError(
            f"The path {shown(path)} is longer than {MAX_PATH_LENGTH} characters: use a shorter one"
        )
    if path in (ROOT, ROOT + "/"):
        return ""
    if not path.startswith(ROOT + "/"):
        raise ToolError(f"Path must start with {ROOT}, got: {shown(path)}")
    rest = path[len(ROOT) + 1 :]
    if rest.endswith("/"):
        rest = rest[:-1]
    for segment in rest.split("/"):
        problem = segment_problem(segment)
        if problem == _ESCAPES:
            raise ToolError(f"Path {shown(path)} would escape {ROOT} directory")
        if problem is not None:
            raise ToolError(f"The path {shown(path)} is refused: {problem}")
    return rest


def path_of(key: str) -> str:
    """The memory path of `key` (`/memories` for the root, `""`)."""
    return f"{ROOT}/{key}" if key else ROOT


def reachable(key: str) -> bool:
    """Whether `key` (an item of the namespace) is a file the tool can name:
    items written otherwise under keys no path stands for stay out of view."""
    return len(key) <= MAX_KEY_LENGTH and all(segment_problem(s) is None for s in key.split("/"))
