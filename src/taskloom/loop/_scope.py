"""Who a run is and what it has used: its scope (ids, origin, events, watch)
and its counters, held with the rest of the run in one `RunState` that each
part of the loop is handed instead of loose values."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple

from .._lazy import LazyModule
from .._run_controls import UsageMeter
from ..entries import MessageEntry
from ..messages import Message, Usage
from ._boundary import RoundBoundary
from ._port import NO_WATCH, AgentSpec, Delivery, Journal, RunNoticesPort, RunPorts, RunWatch

if TYPE_CHECKING:
    from .. import events
    from ..events import Event
else:
    # Imported once something subscribes: a plain run makes no event.
    events = LazyModule("taskloom.events")

if TYPE_CHECKING:
    from .._run_controls import RunControls
    from ..log import SessionLog
    from ._options import RunOptions
    from ._output import FinalOutput

RUN_BY: ContextVar[str] = ContextVar("taskloom_run_by", default="")
"""Who runs the runs started in this context, recorded in their
`RunStartedEntry.by` (a queue worker sets it to itself and the job); "" says nothing."""


def new_run_id() -> str:
    """A fresh run id: as random as `uuid4().hex`, at a third of its cost."""
    return os.urandom(16).hex()


class RunScope(NamedTuple):
    """One run's identity, fixed for the run: the session and run ids
    (`new_run_id`), the origin its events are tagged with (a child's, "" for
    the top), where they go (`emit`, None: nobody listens) and the watch of
    its observer. (A tuple rather than a frozen dataclass: made at a quarter
    of the cost, on every run.)"""

    session_id: str
    run_id: str
    origin: str = ""
    emit: Callable[[Event], None] | None = None
    watch: RunWatch = NO_WATCH

    def event(self, kind: str, **fields: Any) -> None:
        """Emit an event of this run (tagged with its origin and session): the
        class of `taskloom.events` that `kind` names, made only for a listener
        (by name, so that a run nobody listens to never imports the events)."""
        if self.emit is not None:
            cls = getattr(events, kind)
            self.emit(cls(origin=self.origin, session_id=self.session_id, **fields))

    def round_committed(self, counters: RunCounters, boundary: RoundBoundary) -> None:
        """Emit `RoundCommitted` for the round `counters` are at (built only for a subscriber)."""
        if self.emit is not None:
            self.event(
                "RoundCommitted", run_id=self.run_id, round=counters.round, boundary=boundary.value
            )


class RunCounters:
    """What a run has used so far: rounds, model requests (retries included),
    transport retries, tool calls, and its usage meter (shared with its
    children's)."""

    __slots__ = (
        "meter",
        "model_requests",
        "round_base",
        "rounds",
        "tool_calls",
        "transport_retries",
    )

    def __init__(self, meter: UsageMeter) -> None:
        self.rounds = self.model_requests = self.transport_retries = self.tool_calls = 0
        # Rounds of earlier runs of the session: events number rounds on from them.
        self.round_base = 0
        self.meter = meter

    @property
    def round(self) -> int:
        """The session's latest round, counted over all its runs (events carry it)."""
        return self.round_base + self.rounds


class RunState(NamedTuple):
    """One run as the parts of the loop share it: who it is (`scope`), what
    it runs (`agent`, its final `output`), what it talks to (`ports`, the
    session's `journal` and its `log`, the run's `notices`), its options and
    their bound `controls`, what it has used (`counters`), and the `deps`
    its tools get."""

    scope: RunScope
    agent: AgentSpec
    ports: RunPorts
    journal: Journal
    log: SessionLog
    opts: RunOptions
    controls: RunControls
    counters: RunCounters
    notices: RunNoticesPort
    output: FinalOutput
    deps: object


def append_message(
    journal: Journal,
    run_id: str,
    message: Message,
    delivered: Delivery | None = None,
    folds: Sequence[int] = (),
    usage: Usage | None = None,
) -> Awaitable[int]:
    """Append a message of run `run_id` with the notices it carried
    (`delivered`) and the steering or deferred entries it folds in; awaited,
    its position."""
    return journal.record(message_entry(message, delivered, folds, usage), run_id, message)


def message_entry(
    message: Message,
    delivered: Delivery | None = None,
    folds: Sequence[int] = (),
    usage: Usage | None = None,
) -> MessageEntry:
    """The entry of `message` with the notices it carried (`delivered`) and
    the steering or deferred entries it folds in."""
    return MessageEntry(
        message,
        delivered.text if delivered is not None else None,
        delivered.ack_ids if delivered is not None else (),
        tuple(folds),
        usage,
    )


def append_results(journal: Journal, run_id: str, message: Message) -> Awaitable[int]:
    """Append a round's tool results (`message`) of run `run_id`, reading the
    session's pending notices in the same call for the next boundary (see
    `Journal.record`'s `read_inbox`); awaited, its position."""
    payload = MessageEntry(message, None, (), (), None)
    return journal.record(payload, run_id, message, read_inbox=True)
