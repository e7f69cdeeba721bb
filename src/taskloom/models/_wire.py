"""What the wire adapters share beyond HTTP: context windows, token estimates,
tool call ids and arguments, memoized encodings, `extra` merging and replayed
deltas.

Estimates take about four characters a token, the rule every adapter (and
`ScriptedModel`) uses, so estimates add up; an estimate is marked as one on
`Usage.estimated`. Context windows are the providers' documented ones (in
tokens, input and output together); the longest matching prefix wins, so a
dated snapshot (`gpt-4.1-mini-2025-04-14`) finds its family.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from json.encoder import encode_basestring as _STRING  # how `_BODY` writes a string
from typing import Any, TypeVar

from .._deltas import TextDelta, ThinkingDelta
from .._ids import uuid4_hex
from ..messages import Block, Message, TextBlock, ThinkingBlock, ToolCall, ToolResult, Usage
from ._base import ModelRequest, StreamEvent, ToolCallDelta

CHARS_PER_TOKEN = 4

_T = TypeVar("_T")

KNOWN_CONTEXT_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    # Anthropic
    "claude-": 200_000,
    # Google (the input limit; Gemini counts its output apart)
    "gemini-": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    # Common open models as OpenAI-compatible servers name them
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "qwen3": 40_960,
    "qwen2.5": 32_768,
    "mistral": 32_768,
    "gemma3": 131_072,
    "deepseek-chat": 65_536,
    "deepseek-reasoner": 65_536,
}


def known_context_window(model_name: str) -> int | None:
    """The context window of a well-known model by name (or its family), else None."""
    # Looked up on every streamed request: the table's walk is made once a name.
    try:
        return _KNOWN_BY_NAME[model_name]
    except KeyError:
        pass
    if len(_KNOWN_BY_NAME) >= _KNOWN_NAMES_KEPT:
        _KNOWN_BY_NAME.clear()
    window = _KNOWN_BY_NAME[model_name] = _known_window(model_name)
    return window


_KNOWN_BY_NAME: dict[str, int | None] = {}
_KNOWN_NAMES_KEPT = 1024


def _known_window(model_name: str) -> int | None:
    name = model_name.lower().rsplit("/", 1)[-1]
    best: str | None = None
    for prefix in KNOWN_CONTEXT_WINDOWS:
        if name.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return None if best is None else KNOWN_CONTEXT_WINDOWS[best]


def estimate_tokens(chars: int) -> int:
    """Tokens for `chars` characters of text, rounded up (0 for none)."""
    return -(-max(0, chars) // CHARS_PER_TOKEN)


def _message_chars(messages: Iterable[Message], *, thinking: bool) -> int:
    total = 0
    for message in messages:
        for block in message.blocks:
            if isinstance(block, TextBlock) or (thinking and isinstance(block, ThinkingBlock)):
                total += len(block.text)
            elif isinstance(block, ToolResult):
                total += len(block.content)
            elif isinstance(block, ToolCall):
                total += len(block.name) + len(
                    block.raw_arguments
                    if block.raw_arguments is not None
                    else json.dumps(block.arguments)
                )
    return total


def request_chars(request: ModelRequest) -> int:
    """The characters of everything a request puts before the model: system
    prompt, messages (earlier thinking and images aside) and tool specs."""
    total = len(request.system or "") + _message_chars(request.messages, thinking=False)
    for tool in request.tools:
        total += len(tool.name) + len(tool.description) + len(json.dumps(tool.input_schema))
    if request.output_schema is not None:
        total += len(json.dumps(request.output_schema))
    return total


def estimated_usage(request: ModelRequest, answer: Message) -> Usage:
    """The usage of one request estimated from its text and the answer's (marked estimated)."""
    return Usage(
        input_tokens=estimate_tokens(request_chars(request)),
        output_tokens=estimate_tokens(_message_chars((answer,), thinking=True)),
        requests=1,
        estimated=True,
    )


def new_call_id() -> str:
    """A fresh id for a tool call the server sent without one."""
    return f"call_{uuid4_hex()[:24]}"


# `json.dumps` with options builds an encoder a call; this one is built once.
_ARGUMENTS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def arguments_json(call: ToolCall) -> str:
    """The arguments string a call goes out with (what the model sent, when kept)."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    return _ARGUMENTS.encode(call.arguments)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def arguments_object(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as a JSON object: what the model sent when only that
    was kept, {} when that is no object (or holds NaN or Infinity)."""
    if call.arguments or call.raw_arguments is None:
        return dict(call.arguments)
    try:
        parsed = json.loads(call.raw_arguments, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def memoized(
    memo: dict[Any, Any] | None, key: Any, source: Any, build: Callable[..., _T], *args: Any
) -> _T:
    """`build(*args)`, kept in a request's `memo` under `key` for as long as the
    same `source` object (a run's tuple of tool specs, say) comes back."""
    kept = memo.get(key) if memo is not None else None
    if kept is not None and kept[0] is source:
        return kept[1]  # type: ignore[no-any-return]
    value = build(*args)
    if memo is not None:
        memo[key] = (source, value)
    return value


def present(**fields: Any) -> dict[str, Any]:
    """`fields` without the None ones, in order (a body's optional settings)."""
    return {k: v for k, v in fields.items() if v is not None}


def merge_extra(body: dict[str, Any], extra: Mapping[str, Any], *, drop_nested_none: bool) -> None:
    """`settings.extra` merged into `body` last: a None value removes that key,
    a mapping merges one level deep into a dict already there (its None values
    dropped too with `drop_nested_none`), anything else replaces."""
    for key, value in extra.items():
        if value is None:
            body.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(body.get(key), dict):
            merged = {**body[key], **value}
            if drop_nested_none:
                merged = {k: v for k, v in merged.items() if v is not None}
            body[key] = merged
        else:
            body[key] = value


def replayed_deltas(message: Message) -> list[StreamEvent]:
    """The deltas a stream of `message` would have carried, block by block."""
    events: list[StreamEvent] = []
    calls = 0
    for block in message.blocks:
        if isinstance(block, ThinkingBlock | TextBlock):
            if block.text:
                kind = ThinkingDelta if isinstance(block, ThinkingBlock) else TextDelta
                events.append(kind(text=block.text))
        elif isinstance(block, ToolCall):
            events.append(ToolCallDelta(calls, block.id, block.name, arguments_json(block)))
            calls += 1
    return events


def answer_from_output_tool(
    blocks: Iterable[Block], name: str, *, unwrap: bool = False, ensure_ascii: bool = True
) -> tuple[list[Block], bool]:
    """The first call of the tool standing in for structured output turned into
    the JSON text answer it stands for (its `response` argument's value with
    `unwrap`), and whether there was one."""
    out: list[Block] = []
    answered = False
    for block in blocks:
        if type(block) is ToolCall and block.name == name and not answered:
            answered = True
            value: Any = block.arguments.get("response") if unwrap else block.arguments
            text = block.raw_arguments or json.dumps(value, ensure_ascii=ensure_ascii)
            out.append(TextBlock(text))
        else:
            out.append(block)
    return out, answered


# As httpx2 encodes a `json=` body (`json.dumps` with these options), built once.
_BODY = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _c_encoder() -> Any:
    # `_BODY.encode` makes the C encoder anew at every call (a few Python
    # calls each time); these are made once each and reused.
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        return make({}, _BODY.default, _STRING, None, ":", ",", False, False, False)
    except TypeError:  # another signature: `_BODY.encode` does it
        return None


# Idle C encoders. One is taken for an encoding and given back after it: its
# cycle check's record of open containers is its own while in use (another
# thread may encode meanwhile, when Python code inside this encoding lets it
# in), and one that failed is dropped (that record is left dirty then).
_ENCODERS: list[Any] = []
_C_ENCODING = _c_encoder() is not None


def _encode(value: Any) -> str:
    """`value` as `_BODY.encode(value)` writes it."""
    if not _C_ENCODING or type(value) is str:
        return _BODY.encode(value)
    try:
        encoder = _ENCODERS.pop()
    except IndexError:
        encoder = _c_encoder()
    text = "".join(encoder(value, 0))
    _ENCODERS.append(encoder)
    return text


_KEPT_JSON = "json"  # a `ModelRequest.memo` key, with the body's key


def json_body(
    body: Mapping[str, Any], memo: dict[Any, Any] | None, lists: tuple[str, ...]
) -> bytes:
    """`body` encoded as httpx2's `json=` encodes it, byte for byte, with the
    `lists` (top-level arrays such as a conversation's messages) encoded item
    by item and each item's text kept in `memo`: an item that is the very
    object it was at the same index of the last body (an adapter keeps the
    wire form of messages already sent) is not encoded again. The kept items
    are never changed once sent (they are the run's wire forms)."""
    parts: list[str] = []
    pending: dict[str, Any] = {}
    for key, value in body.items():
        if type(value) is list and key in lists and memo is not None:
            if pending:
                parts.append(_members(pending))
                pending = {}
            parts.append(_STRING(key) + ":" + _kept_list(value, memo, (_KEPT_JSON, key)))
        else:
            pending[key] = value
    if pending:
        parts.append(_members(pending))
    return ("{" + ",".join(parts) + "}").encode()


def _members(members: dict[str, Any]) -> str:
    # Keys and values in order, as inside the whole object's braces.
    if len(members) == 1:
        ((key, value),) = members.items()
        if type(key) is str and type(value) is str:
            return _STRING(key) + ":" + _STRING(value)
    return _encode(members)[1:-1]


def _kept_list(items: list[Any], memo: dict[Any, Any], key: tuple[str, str]) -> str:
    kept = memo.get(key)
    before, texts = (kept[0], kept[1]) if kept is not None else ((), ())
    known = min(len(before), len(items))
    encode = _encode
    now = [
        texts[i] if i < known and before[i] is item else encode(item)
        for i, item in enumerate(items)
    ]
    # The items themselves are kept: while kept, none of their ids is reused.
    memo[key] = (tuple(items), now)
    return "[" + ",".join(now) + "]"
