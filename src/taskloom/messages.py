"""Provider-neutral messages, content blocks and token usage.

Values only: nothing here knows a wire format, a run or a store. Every value
round-trips through plain JSON (`to_dict` / `from_dict`) so that a session log
can be written by one process and read by another.

Blocks are checked where they are built, so nothing a tool, a model or a user
produced can make a session unreplayable: text is valid UTF-8 (lone
surrogates become U+FFFD, and a tool result says so), and tool-call arguments
JSON cannot carry (NaN, infinities, nesting deeper than `MAX_ARGUMENT_DEPTH`,
non-JSON values) are kept as text in `raw_arguments`, which the loop answers
with an error result.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ._codec import Stored, stored

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "Block",
    "CompactionBlock",
    "ImageBlock",
    "Message",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolResult",
    "Usage",
    "arguments_problem",
    "valid_result_text",
    "valid_text",
]

Role: TypeAlias = Literal["user", "assistant", "tool"]

MAX_ARGUMENT_DEPTH = 64
"""How deeply tool-call arguments may nest; the arguments object is level 1."""

_REPLACED_NOTE = "\n[note: invalid characters were replaced with U+FFFD]"


def valid_text(text: str) -> str:
    """`text` as valid UTF-8: lone surrogates become U+FFFD (a surrogate pair
    written as two code points becomes the one character it encodes)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def valid_result_text(text: str) -> str:
    """`valid_text` for a tool result: a note at the end says when characters were replaced."""
    fixed = valid_text(text)
    return fixed if fixed is text else fixed + _REPLACED_NOTE


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_plain(value: Any, depth: int) -> bool:
    """Whether `value` is JSON as it stands: the common case, checked cheaply.

    Strings and integers, the usual leaves, are checked inline: this runs for
    every tool call a model makes and every one a log replays.
    """
    t = type(value)
    if t is str:
        return value.isascii() or _is_utf8(value)
    if t is int or t is bool or value is None:
        return True
    if t is float:
        return math.isfinite(value)
    if depth > MAX_ARGUMENT_DEPTH:
        return False
    if t is dict:
        for k, v in value.items():
            if type(k) is not str or not (k.isascii() or _is_utf8(k)):
                return False
            tv = type(v)
            if tv is str:
                if not (v.isascii() or _is_utf8(v)):
                    return False
            elif tv is not int and not _is_plain(v, depth + 1):
                return False
        return True
    if t is list:
        return all(_is_plain(v, depth + 1) for v in value)
    return False


class _Unstorable(Exception):
    """Arguments JSON cannot carry; `path` is filled in on the way out."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str | int] = []


def _clean(value: Any, depth: int) -> Any:
    """`value` rebuilt as plain JSON data (dicts, lists, valid text).

    Raises `_Unstorable` for what JSON cannot carry. The recursion is bounded
    by `MAX_ARGUMENT_DEPTH`, never by the interpreter's stack.
    """
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _Unstorable(f"{_float_name(value)} is not a finite number")
    if value is None or isinstance(value, int | float):
        return value
    if not isinstance(value, Mapping | list | tuple):
        raise _Unstorable(f"a {type(value).__name__} is not a JSON value")
    if depth > MAX_ARGUMENT_DEPTH:
        raise _Unstorable(f"nested deeper than {MAX_ARGUMENT_DEPTH} levels")
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unstorable(f"the key {key!r} is not a string")
            out[valid_text(key)] = _clean_at(key, item, depth)
        return out
    return [_clean_at(i, item, depth) for i, item in enumerate(value)]


def _clean_at(where: str | int, value: Any, depth: int) -> Any:
    try:
        return _clean(value, depth + 1)
    except _Unstorable as exc:
        exc.path.append(where)
        raise


def _float_name(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _render(value: Any, depth: int) -> str:
    """JSON text for `value`, with what JSON cannot carry shown as `<...>` markers."""
    if isinstance(value, str):
        return json.dumps(valid_text(value), ensure_ascii=False)
    if value is None or isinstance(value, bool | int):
        return json.dumps(value)
    if isinstance(value, float):
        return json.dumps(value) if math.isfinite(value) else f"<{_float_name(value)}>"
    if isinstance(value, Mapping | list | tuple):
        if depth > MAX_ARGUMENT_DEPTH:
            return f"<nested deeper than {MAX_ARGUMENT_DEPTH} levels>"
        if isinstance(value, Mapping):
            return (
                "{"
                + ",".join(
                    f"{_render(str(k), depth)}:{_render(v, depth + 1)}" for k, v in value.items()
                )
                + "}"
            )
        return "[" + ",".join(_render(v, depth + 1) for v in value) + "]"
    return f"<{type(value).__name__}>"


def _problem_text(exc: _Unstorable, root: str = "arguments") -> str:
    path = root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in reversed(exc.path))
    return f"{path}: {exc.problem}"


def arguments_problem(arguments: Any) -> str | None:
    """Why `arguments` cannot be tool-call arguments as JSON, or None when they can.

    Refused: NaN and infinities, nesting deeper than `MAX_ARGUMENT_DEPTH`
    (the arguments object is level 1), keys that are not strings, and
    values that are not JSON (sets, bytes, objects). The answer names where.
    """
    if not isinstance(arguments, Mapping):
        return f"arguments: a {type(arguments).__name__} is not a JSON object"
    if _is_plain(arguments, 1):
        return None
    try:
        _clean(arguments, 1)
    except _Unstorable as exc:
        return _problem_text(exc)
    return None


@stored()
@dataclass(frozen=True, slots=True)
class TextBlock(Stored):
    """Plain text."""

    text: str
    type: Literal["text"] = field(default="text", init=False)

    def __post_init__(self) -> None:
        if not self.text.isascii():
            object.__setattr__(self, "text", valid_text(self.text))


@stored(omit=("signature", "redacted", "data", "provider", "id"))
@dataclass(frozen=True, slots=True)
class ThinkingBlock(Stored):
    """Reasoning the model produced.

    `signature` (Anthropic's signature, or OpenAI Responses' encrypted
    reasoning content) and `data` (a redacted block's opaque payload) are kept
    verbatim. `provider` names the wire API that produced the block: adapters
    replay thinking only to that same provider and drop it for any other.
    """

    text: str = ""
    signature: str | None = None
    redacted: bool = False
    data: str | None = None
    provider: str | None = None
    id: str | None = None
    type: Literal["thinking"] = field(default="thinking", init=False)

    def __post_init__(self) -> None:
        if not self.text.isascii():
            object.__setattr__(self, "text", valid_text(self.text))


@stored(omit=("raw_arguments", "provider_id"))
@dataclass(frozen=True, slots=True)
class ToolCall(Stored):
    """A call the model asked for.

    `arguments` is the parsed JSON object. When the model sent arguments that
    are not a JSON object, `arguments` is empty and `raw_arguments` keeps what
    it sent, so the loop can answer with an error the model can act on. The
    same holds for arguments JSON cannot carry (see `arguments_problem`):
    they are kept as text with `<NaN>`-style markers where JSON has no
    spelling, so the call stays storable and replayable. Text is made valid
    UTF-8. `provider_id` keeps a provider's own item id (OpenAI Responses)
    apart from the call id used to pair results.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    provider_id: str | None = None
    type: Literal["tool_call"] = field(default="tool_call", init=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not self.id.isascii():
            set_(self, "id", valid_text(self.id))
        if not self.name.isascii():
            set_(self, "name", valid_text(self.name))
        raw = self.raw_arguments
        if raw is not None and not raw.isascii():
            set_(self, "raw_arguments", valid_text(raw))
        if self.provider_id is not None and not self.provider_id.isascii():
            set_(self, "provider_id", valid_text(self.provider_id))
        arguments = self.arguments
        if type(arguments) is dict and _is_plain(arguments, 1):
            return
        try:
            if not isinstance(arguments, Mapping):
                raise _Unstorable(f"a {type(arguments).__name__} is not a JSON object")
            set_(self, "arguments", _clean(arguments, 1))
        except _Unstorable:
            # Kept as text, the call is stored and replayed like any other
            # call whose arguments were not a JSON object: answered in band.
            set_(self, "arguments", {})
            if raw is None:
                set_(self, "raw_arguments", _render(arguments, 1))


@stored(omit=("is_error",))
@dataclass(frozen=True, slots=True)
class ToolResult(Stored):
    """The one result a tool call gets; `is_error` marks in-band errors.

    `content` is made valid UTF-8; when characters had to be replaced, a
    short note at the end says so.
    """

    tool_call_id: str
    content: str
    is_error: bool = False
    tool_name: str = ""
    type: Literal["tool_result"] = field(default="tool_result", init=False)

    def __post_init__(self) -> None:
        if not self.content.isascii():
            object.__setattr__(self, "content", valid_result_text(self.content))
        if not self.tool_call_id.isascii():
            object.__setattr__(self, "tool_call_id", valid_text(self.tool_call_id))
        if not self.tool_name.isascii():
            object.__setattr__(self, "tool_name", valid_text(self.tool_name))


@stored(omit=("data", "url"))
@dataclass(frozen=True, slots=True)
class ImageBlock(Stored):
    """An image, either inline bytes (`data` + `media_type`) or a `url`."""

    data: bytes | None = None
    media_type: str = "image/png"
    url: str | None = None
    type: Literal["image"] = field(default="image", init=False)

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("ImageBlock takes exactly one of data= or url=")

    @property
    def base64(self) -> str:
        """The inline bytes as base64 text (empty for a URL image)."""
        return base64.b64encode(self.data).decode("ascii") if self.data is not None else ""


@dataclass(frozen=True, slots=True)
class CompactionBlock(Stored):
    """A provider's own compaction of the conversation before it, kept verbatim.

    Where a wire API compacts on its side (Anthropic's `compaction` content
    blocks, OpenAI Responses' `compaction` items), what it returned is kept
    whole in `data`, exactly as it came (a JSON object, its `type` included).
    `provider` names that wire API: adapters replay the block unchanged, in
    place, only to it, and drop it for any other, as they do thinking. The
    provider reads the block in place of what came before it; the session
    log still holds every message. (taskloom's own compaction is a
    `compaction` log entry, not a block.)

    `data` must be JSON (it is copied, and text made valid UTF-8); anything
    else raises `ValueError`.
    """

    provider: str
    data: dict[str, Any]
    type: Literal["compaction"] = field(default="compaction", init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.data, Mapping):
            raise ValueError(f"CompactionBlock data must be a JSON object, not {self.data!r:.60}")
        try:
            object.__setattr__(self, "data", _clean(self.data, 1))
        except _Unstorable as exc:
            raise ValueError(f"CompactionBlock {_problem_text(exc, 'data')}") from None
        if not self.provider.isascii():
            object.__setattr__(self, "provider", valid_text(self.provider))

    @property
    def summary(self) -> str | None:
        """The readable summary, when the provider gives one (Anthropic's `content`)."""
        content = self.data.get("content")
        return content if isinstance(content, str) else None


Block: TypeAlias = TextBlock | ThinkingBlock | ToolCall | ToolResult | ImageBlock | CompactionBlock


@stored(omit=("provider", "model", "origin"))
@dataclass(frozen=True, slots=True)
class Message(Stored):
    """One turn of a conversation: a role and its blocks.

    Roles: `user`, `assistant`, and `tool` (a message carrying only
    `ToolResult` blocks, answering the previous assistant turn). `provider`
    and `model` name who produced an assistant message.
    """

    role: Role
    blocks: tuple[Block, ...]
    provider: str | None = None
    model: str | None = None
    origin: str = ""

    @classmethod
    def user(cls, content: str | Iterable[Block]) -> Message:
        """A user turn from text or blocks."""
        if isinstance(content, str):
            return cls("user", (TextBlock(content),))
        return cls("user", tuple(content))

    @classmethod
    def assistant(
        cls,
        text: str | None = None,
        *,
        tool_calls: Sequence[ToolCall] = (),
        thinking: Sequence[ThinkingBlock] = (),
        provider: str | None = None,
        model: str | None = None,
    ) -> Message:
        """An assistant turn: thinking first, then text, then tool calls."""
        blocks: list[Block] = list(thinking)
        if text:
            blocks.append(TextBlock(text))
        blocks.extend(tool_calls)
        return cls("assistant", tuple(blocks), provider=provider, model=model)

    @classmethod
    def tool_results(cls, results: Iterable[ToolResult]) -> Message:
        """The results answering one assistant turn, in call order."""
        return cls("tool", tuple(results))

    @property
    def text(self) -> str:
        """The text blocks joined (thinking excluded)."""
        parts = [b.text for b in self.blocks if isinstance(b, TextBlock)]
        return parts[0] if len(parts) == 1 else "".join(parts)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls, in the order the model made them."""
        return [b for b in self.blocks if isinstance(b, ToolCall)]

    @property
    def results(self) -> list[ToolResult]:
        """The tool results this message carries."""
        return [b for b in self.blocks if isinstance(b, ToolResult)]

    @property
    def thinking(self) -> list[ThinkingBlock]:
        """The thinking blocks this message carries."""
        return [b for b in self.blocks if isinstance(b, ThinkingBlock)]


@stored(omit=("estimated",))
@dataclass(frozen=True, slots=True)
class Usage(Stored):
    """Token counts of one or more model requests; `+` adds them up.

    Figures are as the provider reports them (and its SDK parses them):
    OpenAI's input includes cached tokens, Anthropic's `input_tokens` excludes
    cache reads and writes, which are counted apart in `cache_read_tokens` and
    `cache_write_tokens`. `requests` counts model requests.

    `estimated` is true when some of the figures were not reported by the
    provider but estimated from the length of the text (about four characters
    a token), as for a server that streams no usage; token budgets count the
    estimate. A sum is estimated when any of its parts is.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.requests + other.requests,
            self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens: what token budgets count."""
        return self.input_tokens + self.output_tokens
