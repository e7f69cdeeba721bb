"""The request view: a window on a log's messages, and how many characters
messages and a compaction's summary put before the model."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import overload

from ..messages import Message, TextBlock, ToolCall, ToolResult


class MessageView(Sequence[Message]):
    """A read-only window on a log's messages: `head`, then `messages[start:stop]`,
    then `tail` (each end optional). Building one copies nothing; the list it
    reads is only appended to, so the window never changes. Compares equal to
    any sequence of the same messages in order, like a tuple.
    """

    __slots__ = ("_head", "_messages", "_start", "_stop", "_tail")

    def __init__(
        self,
        messages: list[Message],
        start: int,
        stop: int,
        head: Message | None = None,
        tail: Message | None = None,
    ) -> None:
        self._messages = messages
        self._start = start
        self._stop = stop
        self._head = head
        self._tail = tail

    def __len__(self) -> int:
        return self._stop - self._start + (self._head is not None) + (self._tail is not None)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...

    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("message index out of range")
        if self._head is not None:
            if i == 0:
                return self._head
            i -= 1
        i += self._start
        if i < self._stop:
            return self._messages[i]
        assert self._tail is not None
        return self._tail

    def __iter__(self) -> Iterator[Message]:
        if self._head is not None:
            yield self._head
        yield from islice(self._messages, self._start, self._stop)
        if self._tail is not None:
            yield self._tail

    def __reversed__(self) -> Iterator[Message]:
        if self._tail is not None:
            yield self._tail
        messages = self._messages
        for i in range(self._stop - 1, self._start - 1, -1):
            yield messages[i]
        if self._head is not None:
            yield self._head

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"MessageView({list(self)!r})"


SUMMARY_HEADING = "[Summary of the earlier conversation, written when it was compacted]"


def summary_message(summary: str) -> Message:
    """The user turn that stands for the compacted part of the conversation."""
    return Message.user(f"{SUMMARY_HEADING}\n{summary}")


def summary_chars(summary: str) -> int:
    """The characters a compaction's summary puts before the model (none
    when it is empty: the view then has no summary turn)."""
    return len(SUMMARY_HEADING) + 1 + len(summary) if summary else 0


def message_chars(message: Message) -> int:
    """The characters a message puts before the model (text, calls, results)."""
    total = 0
    for block in message.blocks:
        if isinstance(block, TextBlock):
            total += len(block.text)
        elif isinstance(block, ToolResult):
            total += len(block.content)
        elif isinstance(block, ToolCall):
            raw = block.raw_arguments
            total += len(block.name) + len(raw if raw is not None else json.dumps(block.arguments))
    return total
