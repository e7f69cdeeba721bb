"""A tool's result: `ToolOutput`, `ToolError`, and the text a value becomes
(`to_content`); error text is capped like output and never a traceback."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from .._codec import fast_init
from ..messages import valid_result_text

if TYPE_CHECKING:
    import pydantic

DEFAULT_MAX_OUTPUT_CHARS = 50_000


def _is_model(value: Any) -> TypeGuard[pydantic.BaseModel]:
    """Whether `value` is a pydantic model. There is none before pydantic's
    models module is imported, so a process that never needed pydantic does
    not import it to find out."""
    models = sys.modules.get("pydantic.main")
    return models is not None and isinstance(value, models.BaseModel)


class ToolError(Exception):
    """Raise from a tool to answer the model with an error result carrying `message`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@fast_init
@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result when the tool wants to say more than a return value:
    `is_error` marks it as an error result the model should act on. `content`
    is made valid UTF-8 (a note at the end says when characters were replaced).
    """

    content: str
    is_error: bool = False

    def __post_init__(self) -> None:
        if not self.content.isascii():
            object.__setattr__(self, "content", valid_result_text(self.content))


def cap_output(text: str, limit: int) -> str:
    """Keep the head and tail of `text` within `limit` characters, saying what was cut."""
    if limit <= 0 or len(text) <= limit:
        return text
    omitted = len(text) - limit
    note = f"\n[... output truncated: {omitted} characters omitted ...]\n"
    head = max(0, (limit * 2) // 3)
    tail = max(0, limit - head)
    return text[:head] + note + (text[-tail:] if tail else "")


def to_content(value: Any) -> str:
    """A tool's return value as the text the model reads: JSON when it is
    JSON data, else its `str`. A value nested too deeply to encode raises
    `ToolError` (an error result) rather than a `RecursionError`."""
    t = type(value)
    if t is str:
        return value  # type: ignore[no-any-return]
    if t is int:
        return int.__repr__(value)  # what JSON writes, without building an encoder
    if value is None:
        return "(no output)"
    if isinstance(value, str):
        return value
    try:
        if _is_model(value):
            try:
                return value.model_dump_json()
            except ValueError:
                return str(value)
        try:
            return _ENCODER.encode(value)
        except (TypeError, ValueError):
            return str(value)
    except RecursionError:
        depth = _nesting(value)
        if depth < _DEEP:
            # The recursion was in the value's own `__str__`, not in its nesting.
            why = "could not be turned into text: its conversion recursed endlessly"
            raise ToolError(f"the tool's result {why}") from None
        raise ToolError(
            f"the tool's result nests {depth} levels deep (lists and objects within each "
            "other), too deep to encode as text; return a flatter value"
        ) from None


_DEEP = 100
"""Below this many levels a `RecursionError` is not the nesting's doing."""


def _nesting(value: Any) -> int:
    """How many levels of lists, tuples, mappings and pydantic models `value`
    nests (without recursing: this runs on values too deep for recursion)."""
    deepest = 0
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if _is_model(item):
            item = item.__dict__
        if not isinstance(item, list | tuple | Mapping) or id(item) in seen:
            continue
        seen.add(id(item))
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, Mapping) else item
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _json_default(value: Any) -> Any:
    if _is_model(value):
        return value.model_dump(mode="json")
    return str(value)


# One encoder for every result: `json.dumps` with options builds a new one a call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=_json_default)


def describe_error(exc: BaseException) -> str:
    """`Type: message` for the model; an exception whose `str` fails is named alone."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message could not be read)"
    return f"{type(exc).__name__}: {text}"
