"""Comparing two sessions round by round: where did two runs part ways?

A *round* is one assistant message with what led to it and what answered it:
the user turns, steering, deferred items and notices the model read since the
previous round (`input`), the message itself (`message`: its text), its tool
calls' names and arguments (`tool_calls`), the results they got (`results`)
and what its request cost (`usage`, in logs that record it). Rounds are
numbered from 1 over the whole session and aligned by number; a round that
only one session has is a difference of aspect `rounds`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._codec import Stored
from .._offered import shown
from ..entries import Entry, MessageEntry, NoticeDeliveredEntry
from ..log import entry_messages

ASPECTS = ("input", "message", "tool_calls", "results", "usage", "rounds")
"""What a difference can be about, in the order a round unfolds."""


@dataclass(frozen=True, slots=True)
class Round:
    """One round of a session, as plain JSON-like values (see module docstring)."""

    number: int
    input: tuple[str, ...] = ()
    message: str = ""
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    results: tuple[Mapping[str, Any], ...] = ()
    usage: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Difference(Stored):
    """One place where two sessions differ: in round `round`, at `path` (e.g.
    `tool_calls[0].arguments.amount`) of aspect `aspect`, A has `a` and B `b`
    (None where one side has nothing there)."""

    round: int
    aspect: str
    path: str
    a: Any
    b: Any

    def describe(self) -> str:
        """One line for a reader: the round, the path and both values."""
        return f"round {self.round}: {self.path}: {shown(self.a, 80)} -> {shown(self.b, 80)}"


@dataclass(frozen=True, slots=True)
class SessionDiff:
    """Every difference between sessions `a` and `b`, round by round (in round
    order, and within a round in `ASPECTS` order)."""

    a: str
    b: str
    rounds_a: int
    rounds_b: int
    differences: tuple[Difference, ...] = field(default=())

    @property
    def identical(self) -> bool:
        """Whether the two sessions' rounds are the same in every aspect."""
        return not self.differences

    def first(self, aspect: str | None = None) -> Difference | None:
        """The earliest difference (of `aspect`, when given), or None."""
        for d in self.differences:
            if aspect is None or d.aspect == aspect:
                return d
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: both ids and round counts, the first
        difference of each aspect (null where none), and every difference."""
        return {
            "a": self.a,
            "b": self.b,
            "rounds": {"a": self.rounds_a, "b": self.rounds_b},
            "identical": self.identical,
            "first": {
                aspect: (d.to_dict() if (d := self.first(aspect)) is not None else None)
                for aspect in ASPECTS
            },
            "differences": [d.to_dict() for d in self.differences],
        }

    def render(self) -> str:
        """The diff for a reader: where each aspect first differs."""
        lines = [
            f"A {self.a}: {self.rounds_a} rounds",
            f"B {self.b}: {self.rounds_b} rounds",
        ]
        if self.identical:
            lines.append("identical in every round")
            return "\n".join(lines)
        for aspect in ASPECTS:
            d = self.first(aspect)
            if d is not None:
                lines.append(f"{_LABELS[aspect]} first differ at {d.describe()}")
            elif aspect != "rounds":
                lines.append(f"{_LABELS[aspect]}: the same in every round both have")
        return "\n".join(lines)


_LABELS = {
    "input": "inputs",
    "message": "model messages",
    "tool_calls": "tool calls",
    "results": "tool results",
    "usage": "usage",
    "rounds": "rounds",
}


def rounds_of(entries: Iterable[Entry]) -> list[Round]:
    """The rounds of a session's log (entries in position order)."""
    rounds: list[Round] = []
    pending_input: list[str] = []
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, NoticeDeliveredEntry):
            pending_input.append(payload.text)
        if not isinstance(payload, MessageEntry):
            continue
        for message in entry_messages(payload):
            if message.role == "user":
                pending_input.append(message.text)
            elif message.role == "tool" and rounds:
                results = tuple(
                    {"name": r.tool_name, "content": r.content, "is_error": r.is_error}
                    for r in message.results
                )
                rounds[-1] = replace(rounds[-1], results=rounds[-1].results + results)
            elif message.role == "assistant":
                rounds.append(
                    Round(
                        len(rounds) + 1,
                        tuple(pending_input),
                        message.text,
                        tuple(
                            {"name": c.name, "arguments": dict(c.arguments)}
                            for c in message.tool_calls
                        ),
                        (),
                        payload.usage.to_dict() if payload.usage is not None else None,
                    )
                )
                pending_input = []
    return rounds


def diff_sessions(
    a: Sequence[Entry], b: Sequence[Entry], *, a_id: str = "A", b_id: str = "B"
) -> SessionDiff:
    """Compare two sessions' logs round by round (see the module docstring).

    Tool call ids and times are left out: two runs of the same conversation
    differ in them by nature.
    """
    rounds_a, rounds_b = rounds_of(a), rounds_of(b)
    found: list[Difference] = []
    for ra, rb in zip(rounds_a, rounds_b, strict=False):
        for aspect in ASPECTS[:-1]:
            a_value, b_value = getattr(ra, aspect), getattr(rb, aspect)
            found.extend(_compare(ra.number, aspect, aspect, a_value, b_value))
    longer = rounds_a if len(rounds_a) > len(rounds_b) else rounds_b
    for extra in longer[min(len(rounds_a), len(rounds_b)) :]:
        only_a = longer is rounds_a
        present = {"message": extra.message, "tool_calls": list(extra.tool_calls)}
        in_a, in_b = (present, None) if only_a else (None, present)
        found.append(Difference(extra.number, "rounds", "exists", in_a, in_b))
    return SessionDiff(a_id, b_id, len(rounds_a), len(rounds_b), tuple(found))


def _compare(number: int, aspect: str, path: str, a: Any, b: Any) -> list[Difference]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out: list[Difference] = []
        for key in [*a, *(k for k in b if k not in a)]:
            out.extend(_compare(number, aspect, f"{path}.{key}", a.get(key), b.get(key)))
        return out
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        out = []
        for i in range(max(len(a), len(b))):
            ai = a[i] if i < len(a) else None
            bi = b[i] if i < len(b) else None
            out.extend(_compare(number, aspect, f"{path}[{i}]", ai, bi))
        return out
    if a == b and type(a) is type(b):
        return []
    return [Difference(number, aspect, path, _plain(a), _plain(b))]


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value
