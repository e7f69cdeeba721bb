"""Reading a Gemini answer: stream chunks or a whole body in, a response out.

Streamed or not, an answer is a list of parts; `StreamAssembler.add` folds them into
taskloom blocks as they arrive, yielding deltas:

- a thought part (`thought: true`) is a `ThinkingBlock`, a text part a
  `TextBlock` (consecutive ones merge: a stream splits them into chunks);
- a function call is a `ToolCall`, with Gemini's id or a fresh one. Its
  arguments come whole (`args`) or, with Vertex AI's
  `streamFunctionCallArguments`, as `partialArgs` over several parts
  (`_StreamedCall`) until a part without `willContinue` ends it;
- a `thoughtSignature` on a text or call part is kept as a `ThinkingBlock`
  with no text right before its part's block (on a thought part, it is that
  thought's); the request side puts each back on the part that follows it.

`StreamAssembler` reads `streamGenerateContent?alt=sse` chunks (usage is
cumulative: the last chunk's counts are the answer's) or a whole
`generateContent` body. A prompt Gemini blocked, and an answer blocked or
failed before it said anything, raise (see `_failure`); an answer blocked
partway is the part that came, with stop reason `content_filter`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._deltas import TextDelta, ThinkingDelta
from ..errors import InvalidRequest, ProviderError, TransportError
from ..messages import (
    MAX_ARGUMENT_DEPTH,
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from ._base import ModelRequest, ModelResponse, StopReason, StreamEvent, ToolCallDelta
from ._http import SSE, error_in_body, loads_event
from ._wire import answer_from_output_tool, arguments_json, estimated_usage, new_call_id

# Finish reasons that mean a filter stopped the answer: stop reason `content_filter`.
_BLOCKED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "MODEL_ARMOR",
    }
)

# Finish reasons of a sample gone wrong, which another sample may get right.
_RETRYABLE_FINISH = frozenset(
    {"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "MALFORMED_RESPONSE", "OTHER"}
)

_PATH_STEP = re.compile(r"\.([^.\[\]'\"]+)|\[(\d{1,9})\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")
"""One step of a `partialArgs` JSON path (RFC 9535's member and index selectors)."""


@dataclass(frozen=True, slots=True)
class OutputTool:
    """The function standing in for structured output, when the model cannot take
    both tools and a response schema: its call comes back as the JSON text answer
    (the value of its one `response` argument when `wrapped`)."""

    name: str
    wrapped: bool


class _Text(list[str]):
    """A string argument arriving in pieces; `more` while its last piece said
    `willContinue` (the next piece at its path extends it)."""

    __slots__ = ("more",)
    more: bool


class _StreamedCall:
    """A function call whose arguments arrive as `partialArgs`, assembled as
    Google's Gen AI SDK for Go does (a piece sets the value at its JSON path,
    never replacing an object or array nor reaching through a value; a string
    piece extends one left open by `willContinue`), except that an index
    past an array's end is refused, not padded: memory stays proportional to
    the bytes received. Paths are at most `MAX_ARGUMENT_DEPTH` steps deep."""

    __slots__ = ("args", "id", "name", "texts")

    def __init__(self, call: Mapping[str, Any], provider: str) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.args: dict[str, Any] = {}
        self.texts: list[tuple[Any, Any, _Text]] = []
        self.add(call, provider)

    def add(self, call: Mapping[str, Any], provider: str) -> None:
        """Fold in one part of the call (its name and id may come again)."""
        for key in ("id", "name"):
            value, held = call.get(key), getattr(self, key)
            if isinstance(value, str) and value:
                if held is not None and value != held:
                    raise _malformed(
                        f"a streamed function call's {key} changed mid-call: "
                        f"{held!r}, then {value!r}",
                        provider,
                    )
                setattr(self, key, value)
        args = call.get("args")
        if isinstance(args, Mapping):
            for name, value in args.items():
                self._put([str(name)], value, False, provider)
        pieces = call.get("partialArgs")
        for piece in pieces if isinstance(pieces, list) else ():
            if isinstance(piece, Mapping):
                path = _json_path(piece.get("jsonPath"), provider)
                self._put(
                    path, _piece_value(piece, provider), piece.get("willContinue") is True, provider
                )

    def _put(self, path: list[str | int], value: Any, more: bool, provider: str) -> None:
        parent: Any = self.args
        for step, following in itertools.pairwise(path):
            child = _child(parent, step, provider)
            if child is _MISSING:
                child = [] if isinstance(following, int) else {}
                _place(parent, step, child)
            elif type(child) is not (list if isinstance(following, int) else dict):
                raise _malformed(f"path {_shown(path)} reaches through a {_kind(child)}", provider)
            parent = child
        last = path[-1]
        held = _child(parent, last, provider)
        if type(held) is _Text and held.more:
            if not isinstance(value, str):
                raise _malformed(f"string at {_shown(path)} continued with a non-string", provider)
            held.append(value)
            held.more = more
            return
        if isinstance(held, (dict, list)) and type(held) is not _Text:
            raise _malformed(f"a value at {_shown(path)} would replace its {_kind(held)}", provider)
        if isinstance(value, str):
            value = _Text((value,))
            value.more = more
            self.texts.append((parent, last, value))
        _place(parent, last, value)

    def tool_call(self, provider: str) -> ToolCall:
        """The finished call (its strings joined)."""
        if not self.name:
            raise _malformed("a streamed function call came without a name", provider)
        for parent, key, text in self.texts:
            if parent[key] is text:
                parent[key] = "".join(text)
        return ToolCall(self.id or new_call_id(), self.name, self.args)


_MISSING: Any = object()


def _child(container: Any, step: str | int, provider: str) -> Any:
    if isinstance(step, int):
        if step > len(container):
            raise _malformed(
                f"array index {step} is past the array's end ({len(container)})", provider
            )
        return container[step] if step < len(container) else _MISSING
    return container.get(step, _MISSING)


def _place(container: Any, step: str | int, value: Any) -> None:
    if isinstance(step, int) and step == len(container):
        container.append(value)
    else:
        container[step] = value


def _kind(value: Any) -> str:
    return "object" if type(value) is dict else "array" if type(value) is list else "value"


def _shown(path: list[str | int]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _json_path(path: Any, provider: str) -> list[str | int]:
    """The steps of a `partialArgs` JSON path (`$.a.b`, `$['c d'][0]`)."""
    if not isinstance(path, str) or not path.startswith("$") or len(path) < 2:
        raise _malformed(f"unreadable partialArgs jsonPath {str(path)[:100]!r}", provider)
    steps: list[str | int] = []
    at = 1
    while at < len(path):
        found = _PATH_STEP.match(path, at)
        if found is None or len(steps) >= MAX_ARGUMENT_DEPTH:
            why = f"deeper than {MAX_ARGUMENT_DEPTH} steps" if found else "unreadable"
            raise _malformed(f"{why} partialArgs jsonPath {path[:100]!r}", provider)
        member, index, quoted, double = found.groups()
        steps.append(int(index) if index is not None else (member or quoted or double or ""))
        at = found.end()
    if isinstance(steps[0], int):
        raise _malformed(
            f"partialArgs jsonPath {path[:100]!r} indexes the arguments object", provider
        )
    return steps


def _piece_value(piece: Mapping[str, Any], provider: str) -> Any:
    for key, kinds in (("stringValue", str), ("numberValue", (int, float)), ("boolValue", bool)):
        if key in piece:
            value = piece[key]
            if not isinstance(value, kinds) or (kinds is not bool and isinstance(value, bool)):
                raise _malformed(f"partialArgs {key} {str(value)[:100]!r}", provider)
            return value
    return None  # nullValue, or a piece naming no value


def _malformed(why: str, provider: str) -> ProviderError:
    # Another sample may well stream a readable call: retryable, as
    # Gemini's own MALFORMED_FUNCTION_CALL finish is.
    return ProviderError(
        f"Gemini streamed function call arguments that cannot be assembled: {why}",
        status=200,
        error_type="MALFORMED_FUNCTION_CALL",
        provider=provider,
        retryable=True,
    )


def _tool_call(call: Mapping[str, Any]) -> ToolCall:
    name, call_id, args = call.get("name"), call.get("id"), call.get("args")
    if not isinstance(call_id, str) or not call_id:
        call_id = new_call_id()
    name = name if isinstance(name, str) else ""
    if args is None:
        return ToolCall(call_id, name, {})
    if isinstance(args, dict):
        return ToolCall(call_id, name, args)
    return ToolCall(call_id, name, {}, raw_arguments=json.dumps(args))


@dataclass(slots=True, eq=False)
class StreamAssembler:
    """Folds `streamGenerateContent` chunks (or one whole answer) into deltas and,
    at the end, the response."""

    provider: str
    model_name: str
    request: ModelRequest
    output_tool: OutputTool | None
    emit: bool
    finish_reason: str | None = None
    finish_message: Any = None
    usage: Any = None
    model: Any = None
    response_id: Any = None
    feedback: Any = None
    # [kind, ...]: ["thought", pieces, signature], ["text", pieces],
    # ["signature", signature], ["call", ToolCall]; mutable while streaming.
    entries: list[list[Any]] = field(default_factory=list)
    calls: int = 0
    # The call whose arguments are still arriving, and its ["call", None] entry.
    streaming: tuple[_StreamedCall, list[Any]] | None = None

    def feed(self, sse: SSE) -> list[StreamEvent]:
        """Take one chunk; return the deltas it carried (an `error` chunk raises)."""
        chunk = loads_event(sse, self.provider)
        return self.take(chunk) if isinstance(chunk, dict) else []

    def take(self, chunk: Mapping[str, Any]) -> list[StreamEvent]:
        if "error" in chunk:
            raise error_in_body(chunk, self.provider)
        events: list[StreamEvent] | None = [] if self.emit else None
        usage = chunk.get("usageMetadata")
        if usage:
            self.usage = usage
        if self.response_id is None:
            self.response_id = chunk.get("responseId")
            self.model = chunk.get("modelVersion")
        if "promptFeedback" in chunk:
            self.feedback = chunk["promptFeedback"]
        candidates = chunk.get("candidates")
        if candidates:
            # Only the first candidate is ours: taskloom never asks for more.
            candidate = candidates[0]
            content = candidate.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            if parts:
                add = self.add
                for part in parts:
                    if isinstance(part, dict):
                        add(part, events)
            if candidate.get("finishReason"):
                self.finish_reason = str(candidate["finishReason"])
                self.finish_message = candidate.get("finishMessage")
        return events or []

    def finish(self, *, whole: bool = False) -> ModelResponse:
        """The whole response; a stream cut before its finish reason raises
        `TransportError` (a `whole` answer may come without one)."""
        reason = self.finish_reason
        if reason is None:
            blocked = _prompt_blocked(self.feedback, self.provider)
            if blocked is not None:
                raise blocked
            if not whole:
                raise TransportError(
                    "stream ended before the response finished", provider=self.provider
                )
        blocks = self.blocks()
        tool = self.output_tool
        if tool is not None:
            blocks = answer_from_output_tool(
                blocks, tool.name, unwrap=tool.wrapped, ensure_ascii=False
            )[0]
        has_calls = any(type(b) is ToolCall for b in blocks)
        if not has_calls and not any(type(b) is TextBlock and b.text for b in blocks):
            failure = _failure(reason, self.finish_message, self.provider)
            if failure is not None:
                raise failure
        message = Message("assistant", tuple(blocks), provider=self.provider, model=self.model_name)
        usage = usage_of(self.usage)
        model, response_id = self.model, self.response_id
        return ModelResponse(
            message=message,
            usage=estimated_usage(self.request, message) if usage is None else usage,
            stop_reason=_stop_reason(reason, has_calls),
            model=model if isinstance(model, str) else None,
            provider=self.provider,
            response_id=response_id if isinstance(response_id, str) else None,
        )

    def add(self, part: Mapping[str, Any], events: list[StreamEvent] | None) -> None:
        """Fold one part into the blocks (see the module docstring)."""
        signature = part.get("thoughtSignature")
        if not isinstance(signature, str) or not signature:
            signature = None
        text = part.get("text")
        entries = self.entries
        last = entries[-1] if entries else None
        if part.get("thought") is True:
            text = text if isinstance(text, str) else ""
            if last is not None and last[0] == "thought" and last[2] is None:
                last[1].append(text)
                last[2] = signature
            else:
                entries.append(["thought", [text], signature])
            if text and events is not None:
                events.append(ThinkingDelta(text=text))
        elif isinstance(text, str):
            if signature is not None:
                entries.append(["signature", signature])
                last = None
            if text:
                if last is not None and last[0] == "text":
                    last[1].append(text)
                else:
                    entries.append(["text", [text]])
                if events is not None:
                    events.append(TextDelta(text=text))
        elif isinstance(part.get("functionCall"), Mapping):
            function_call = part["functionCall"]
            streamed = self.streaming is not None or (
                function_call.get("willContinue") is True or "partialArgs" in function_call
            )
            if not streamed and not function_call:
                return  # an empty call: the end marker of a streamed one, none open
            # A signature comes on a call's first part (a later one's would
            # land after the call's block, on the wrong part).
            if signature is not None and self.streaming is None:
                entries.append(["signature", signature])
            if self.streaming is None:
                entry = ["call", None]
                entries.append(entry)
                if not streamed:
                    self._called(_tool_call(function_call), entry, events)
                    return
                self.streaming = (_StreamedCall(function_call, self.provider), entry)
            else:
                self.streaming[0].add(function_call, self.provider)
            if function_call.get("willContinue") is not True:
                call, entry = self.streaming
                self.streaming = None
                self._called(call.tool_call(self.provider), entry, events)
        # Other parts (server-side tools, code execution, media) are not this
        # adapter's to read.

    def _called(self, call: ToolCall, entry: list[Any], events: list[StreamEvent] | None) -> None:
        entry[1] = call
        if events is not None:
            events.append(ToolCallDelta(self.calls, call.id, call.name, arguments_json(call)))
        self.calls += 1

    def blocks(self) -> list[Block]:
        if self.streaming is not None:
            name = self.streaming[0].name
            raise _malformed(
                f"the answer ended while function call {name!r} was still streaming its "
                "arguments (no part ended it: willContinue stayed true)",
                self.provider,
            )
        out: list[Block] = []
        provider = self.provider
        for entry in self.entries:
            kind = entry[0]
            if kind == "text":
                out.append(TextBlock("".join(entry[1])))
            elif kind == "call":
                out.append(entry[1])
            elif kind == "thought":
                out.append(ThinkingBlock("".join(entry[1]), entry[2], provider=provider))
            else:
                out.append(ThinkingBlock("", entry[1], provider=provider))
        return out


def _prompt_blocked(feedback: Any, provider: str) -> ProviderError | None:
    """The error for a prompt Gemini refused to answer (`promptFeedback.blockReason`)."""
    if not isinstance(feedback, Mapping) or not feedback.get("blockReason"):
        return None
    reason = str(feedback["blockReason"])
    message = feedback.get("blockReasonMessage") or f"the prompt was blocked ({reason})"
    return InvalidRequest(
        str(message),
        status=200,
        error_type=reason,
        provider=provider,
        retryable=False,
        body={"promptFeedback": dict(feedback)},
    )


def _stop_reason(finish: str | None, has_calls: bool) -> StopReason | str:
    if finish in (None, "STOP", "FINISH_REASON_UNSPECIFIED"):
        return "tool_use" if has_calls else "end_turn"
    if finish == "MAX_TOKENS":
        return "max_tokens"
    if finish in _BLOCKED:
        return "content_filter"
    return finish.lower()


def _failure(finish: str | None, message: Any, provider: str) -> ProviderError | None:
    """The error for an answer that ended with nothing said, when its finish
    reason makes that a failure (a filter, a malformed call) rather than an
    empty answer (STOP) or a cut one (MAX_TOKENS)."""
    if finish in (None, "STOP", "FINISH_REASON_UNSPECIFIED", "MAX_TOKENS"):
        return None
    what = "was blocked" if finish in _BLOCKED else "failed"
    return ProviderError(
        str(message or f"the answer {what} ({finish})"),
        status=200,
        error_type=finish,
        provider=provider,
        retryable=finish in _RETRYABLE_FINISH,
        body={"finishReason": finish, "finishMessage": message},
    )


def _int(meta: Mapping[str, Any], key: str) -> int:
    value = meta.get(key)
    return value if type(value) is int else 0


def usage_of(meta: Any) -> Usage | None:
    """Usage from `usageMetadata` (None without counts): thinking
    (`thoughtsTokenCount`) is output too, and server-side tools' prompt tokens input."""
    if not isinstance(meta, Mapping) or not (
        "promptTokenCount" in meta or "candidatesTokenCount" in meta
    ):
        return None
    thoughts = _int(meta, "thoughtsTokenCount")
    return Usage(
        _int(meta, "promptTokenCount") + _int(meta, "toolUsePromptTokenCount"),
        _int(meta, "candidatesTokenCount") + thoughts,
        _int(meta, "cachedContentTokenCount"),
        0,
        thoughts,
        1,
    )
