"""The ports the round loop talks through: the session's journal, model
choice and tool board, background notices, and whoever observes its runs.

The loop defines what it needs as small protocols; the runtime (for the
session's parts), the background service (for notices) and the tracing
package (for observers) implement them, and `RunPorts` hands them to a run.
So the loop knows nothing of runtimes, stores, background work or
OpenTelemetry, and a test can drive it with anything that has these methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Self

from .._codec import fast_init
from ..entries import Entry, Payload
from ..messages import Message, ToolCall
from ..models import Model, ModelRequest, ModelResponse, ModelSettings, ReasoningOptions
from ..results import RunResult, ToolSpec
from ..tools import AgentView, Tool, ToolHost, ToolOutput

if TYPE_CHECKING:
    from .._output_type import OutputType
    from .._run_controls import BudgetLedger
    from ..log import SessionLog
    from ._compact import Compaction


@dataclass(frozen=True, slots=True)
class Delivery:
    """Text for the model and the notice ids to ack once it is persisted.

    `ack_ids` may be empty: a line about running work acknowledges nothing.
    """

    text: str
    ack_ids: tuple[str, ...] = ()

    def merged(self, other: Delivery) -> Delivery:
        """One delivery carrying both texts and both sets of ids."""
        return Delivery(self.text + "\n" + other.text, (*self.ack_ids, *other.ack_ids))


class AgentSpec(AgentView, Protocol):
    """What the loop reads of the agent definition (a `taskloom.Agent`)."""

    @property
    def instructions(self) -> str | None:
        """The system prompt."""
        ...

    @property
    def fixes(self) -> int:
        """Corrective rounds allowed for an answer that fails the output schema."""
        ...

    @property
    def output(self) -> OutputType | None:
        """The output type (None: the answer's text)."""
        ...

    @property
    def compaction(self) -> Compaction | None:
        """When and how long sessions are compacted (None: never)."""
        ...


class RunNoticesPort(Protocol):
    """What one run delivers about background work, and when (see `RunNotices`)."""

    async def round_start(
        self, pending: Sequence[Any] | None = None, running: Sequence[Any] | None = None
    ) -> Delivery | None:
        """Notices for the start of a round; `pending`: the inbox's pending
        notices as just read (None: read them now); `running`: the session's
        registered activities read with them (None: list them now, where
        the round needs them)."""
        ...

    async def before_final(self, pending: Sequence[Any] | None = None) -> Delivery | None:
        """Unseen completions and reminders before the run may end; `pending`:
        the inbox's pending notices as just read (None: read them now)."""
        ...

    def take_seen(self) -> list[str]:
        """Notice ids a tool showed the model itself, to ack with its results."""
        ...

    def may_remind(self) -> bool:
        """Whether `before_final` may have something to say with nothing
        pending in the inbox (work this run started, not yet reminded of)."""
        ...


class NoticesPort(Protocol):
    """Background notices of a runtime, as the loop sees them."""

    def run_notices(
        self,
        session_id: str,
        run_id: str,
        tools: Collection[str] = (),
        *,
        offered: Mapping[str, Tool] | None = None,
    ) -> RunNoticesPort:
        """The notices of one run; `tools` are the names of the tools the run
        offers the model (what a reminder may suggest), `offered` the tools
        themselves (with which work whose process died may be taken up again)."""
        ...

    async def ack(self, session_id: str, ids: Sequence[str]) -> None:
        """Acknowledge notices the model has now seen (persisted)."""
        ...

    def run_ended(self, run_id: str) -> None:
        """Forget the run's per-run state."""
        ...

    def running(self, session_id: str) -> Sequence[asyncio.Future[Any]]:
        """The session's work running in this process (to wait for before
        forgetting the session)."""
        ...

    async def forget(self, session_id: str) -> None:
        """Drop what is kept for a session being deleted (activities, notices)."""
        ...


class Journal(Protocol):
    """The session's log as a run reads and writes it.

    `append` and `record` are for the run's own entries: they carry the
    fencing token of the lease the run holds, and the store refuses them
    once another writer took the session over.
    """

    @property
    def log(self) -> SessionLog:
        """The session's log as folded so far (a cache of the store): one
        object for the journal's life, which a run may keep (what is folded
        into it changes, never the object)."""
        ...

    async def sync(self, *, fresh: float = 0.0) -> None:
        """Fold in entries other tasks or processes appended since the last look.

        With `fresh`, the read may be skipped when this journal's own last
        append landed right after everything it knew, less than `fresh`
        seconds ago: the log is then known whole up to that instant.
        """
        ...

    async def append(self, entry: Entry, message: Message | None = None) -> int:
        """Append an entry (fenced) and fold it in; returns its position.

        `message` is the already-built message of a message entry.
        """
        ...

    async def record(
        self,
        payload: Payload,
        run_id: str | None = None,
        message: Message | None = None,
        *,
        read_inbox: bool = False,
        list_running: bool = False,
    ) -> int:
        """`append` of the entry storing `payload` (built once, where it will land).

        With `read_inbox`, the session's pending notices are read with the
        append (in one round trip where the store can): `take_inbox` hands
        them to the next boundary. With `list_running` too, the session's
        registered activities are read in the same statement where the store
        can (`take_running`), else not at all."""
        ...

    async def record_ending(
        self,
        payload: Payload,
        run_id: str | None,
        message: Message | None,
        ending: Callable[[], Payload | None],
    ) -> bool:
        """`record(payload, run_id, message, read_inbox=True)` of a run's final
        answer, with the run's end (`ending()`, None: not this time) written
        in the same statement where the store can, landing only if the inbox
        has no pending notice and nothing came into the log since the last
        look: True when it landed (the run has ended), False when the answer
        landed alone."""
        ...

    def stage(self, payload: Payload, run_id: str | None = None) -> None:
        """Hold an entry to be written (fenced) with the next append, in the
        same round trip where the store can; written before any read of the
        store, and not in `log` until written."""
        ...

    def take_inbox(self, fresh: float) -> Sequence[Any] | None:
        """The pending notices read with the last append, if nothing was
        appended since and it was less than `fresh` seconds ago; else None."""
        ...

    def take_running(self) -> Sequence[Any] | None:
        """The registered activities read with the notices the last
        `take_inbox` handed out, if that read listed them; else None (list
        them now). Handed out once."""
        ...


class ModelChoice(Protocol):
    """Which model a run's next request goes to, and with which settings."""

    @property
    def model(self) -> Model:
        """The model the next request goes to."""
        ...

    @property
    def settings(self) -> ModelSettings:
        """The model settings for the next request."""
        ...

    def resolve_model(self, spec: Model | str) -> Model:
        """A model instance for a spec (a summarizer named by spec, ...)."""
        ...

    async def set_model(self, model: Model | str) -> None:
        """Persist a model change."""
        ...

    async def set_reasoning(self, reasoning: ReasoningOptions | None) -> None:
        """Persist a reasoning change."""
        ...


class ToolBoard(Protocol):
    """The tools a run offers, and the runtime they reach."""

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools offered, by name (as of the last `refresh_tools`)."""
        ...

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about the tools."""
        ...

    async def refresh_tools(self) -> None:
        """Re-read the agent's toolsets; called at round boundaries only."""
        ...

    @property
    def host(self) -> ToolHost:
        """The runtime, as tools reach it."""
        ...


class RunPorts(NamedTuple):
    """Everything a run talks to, each through the small port it needs: the
    session's journal, its model choice and tool board, the runtime's
    background notices, budget ledger and observer. (A record that never
    changes: a tuple, made at a quarter of a frozen dataclass's cost.)"""

    journal: Journal
    models: ModelChoice
    tools: ToolBoard
    notices: NoticesPort
    budgets: BudgetLedger
    observer: RunObserver


@fast_init
@dataclass(frozen=True, slots=True)
class RunInfo:
    """What an observer learns when a run starts.

    `resumes` is the trace context the run that parked this turn recorded
    (`RunStartedEntry.traceparent`), when this run resumes one.
    """

    agent: AgentSpec
    session_id: str
    run_id: str
    resume: bool = False
    resumes: str | None = None


class _Watch(Protocol):
    def __enter__(self) -> Self:
        """Starts the watch (a tracer makes its span current here)."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Ends the watch; an exception passing through is how the watched step failed."""
        ...


class ModelCallWatch(_Watch, Protocol):
    """One model request (with its transport retries), entered around it."""

    def retrying(self, attempt: int, delay: float, error: BaseException) -> None:
        """Attempt `attempt` failed with `error`; the next starts in `delay` seconds."""
        ...

    def responded(self, response: ModelResponse) -> None:
        """The request produced `response`."""
        ...


class ToolCallWatch(_Watch, Protocol):
    """One tool call, entered around its execution (the tool runs inside it)."""

    def returned(self, output: ToolOutput) -> None:
        """The call's one result (an in-band error has `is_error`)."""
        ...


class RunWatch(_Watch, Protocol):
    """One run, entered around everything the run does after it started."""

    @property
    def traceparent(self) -> str | None:
        """The run's trace context (a W3C `traceparent`), recorded in its
        `RunStartedEntry` so a later resume can link to it; None untraced."""
        ...

    def model_call(self, model: Model, request: ModelRequest, *, streamed: bool) -> ModelCallWatch:
        """The watch of one model request of this run."""
        ...

    def tool_call(self, call: ToolCall, tool: Tool | None) -> ToolCallWatch:
        """The watch of one tool call of this run (`tool` None: unknown name)."""
        ...

    def finished(self, result: RunResult) -> None:
        """The run ended with `result` (a run that raises ends through `__exit__`)."""
        ...


class QueueWatch(_Watch, Protocol):
    """A host's `Session.submit` or `wait` of a queued run, entered around it
    (a tracer makes its span current: the job carries it to the worker)."""

    def ran(self, traceparent: str | None) -> None:
        """The run waited on recorded `traceparent` (its `RunStartedEntry`): link to it."""
        ...


class RunObserver(Protocol):
    """Watches runs as they happen: how tracing plugs into the loop.

    The loop enters a `RunWatch` per run, a `ModelCallWatch` per model
    request and a `ToolCallWatch` per tool call, nested as they run (tools
    execute inside their watch, so work they start is under it). The
    runtime holds one observer for all its runs; `NO_OBSERVER` costs a few
    method calls per round.
    """

    def run(self, info: RunInfo) -> RunWatch:
        """The watch of a run that starts now."""
        ...

    def current_traceparent(self) -> str | None:
        """The trace context of the step running now (a W3C `traceparent`), for
        work that continues it elsewhere (a background child); None untraced."""
        ...

    def continue_trace(self, traceparent: str | None) -> AbstractContextManager[object]:
        """A block in which runs continue the trace `traceparent` names (a child
        run in a worker process); no-op for None."""
        ...

    def queued(self, operation: str, session_id: str) -> QueueWatch:
        """The watch of a host's `submit` or `wait` (`operation`) of a queued
        run of session `session_id`."""
        ...


class _Unobserved:
    """Observes nothing: every watch is this object, every hook does nothing."""

    __slots__ = ()

    traceparent: str | None = None

    def run(self, info: RunInfo) -> _Unobserved:
        return self

    def current_traceparent(self) -> str | None:
        return None

    def continue_trace(self, traceparent: str | None) -> _Unobserved:
        return self

    def queued(self, operation: str, session_id: str) -> _Unobserved:
        return self

    def ran(self, traceparent: str | None) -> None:
        return None

    def __enter__(self) -> _Unobserved:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def model_call(self, model: Model, request: ModelRequest, *, streamed: bool) -> _Unobserved:
        return self

    def tool_call(self, call: ToolCall, tool: Tool | None) -> _Unobserved:
        return self

    def retrying(self, attempt: int, delay: float, error: BaseException) -> None:
        return None

    def responded(self, response: ModelResponse) -> None:
        return None

    def returned(self, output: ToolOutput) -> None:
        return None

    def finished(self, result: RunResult) -> None:
        return None


_NOTHING = _Unobserved()

NO_OBSERVER: RunObserver = _NOTHING
"""The observer of a runtime without tracing: watches nothing."""

NO_WATCH: RunWatch = _NOTHING
"""The watch of an unobserved run."""
