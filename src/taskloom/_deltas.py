"""The events a model adapter makes as an answer streams (`TextDelta`,
`ThinkingDelta`) and the base every event shares; their public home is
`taskloom.events`, which a run imports only once something subscribes to
its events (a plain run makes none, and building the other event classes
is a fixed cost of every process)."""

from __future__ import annotations

from dataclasses import dataclass

from ._codec import fast_init


@dataclass(frozen=True, slots=True, kw_only=True)
class EventBase:
    """What every event carries: the origin of a child's events ("" for the
    top agent's) and the session it came from."""

    origin: str = ""
    session_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(EventBase):
    """A piece of assistant text as it streams."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDelta(EventBase):
    """A piece of reasoning text as it streams."""

    text: str


for _event in (EventBase, TextDelta, ThinkingDelta):
    fast_init(_event)
del _event
