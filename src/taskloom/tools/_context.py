"""What a running tool can reach: its identity, the run's controls, its log,
and `Deferred` handles that deliver results after the call returned."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol

from typing_extensions import TypeVar

from .. import entries as log_entries
from .._ids import uuid4_hex
from .._lazy import LazyModule
from .._run_controls import RunControls, StopSignal
from ..entries import Entry

if TYPE_CHECKING:
    from .. import events
    from ..entries import DeferredItem
    from ..events import Event
else:
    # Imported once a tool reports progress: a plain run makes no event.
    events = LazyModule("taskloom.events")

if TYPE_CHECKING:
    from ._tool import Tool

DepsT = TypeVar("DepsT", default=Any)
"""The type of a run's dependencies (`Agent(deps_type=...)`, `run(deps=...)`)."""


class AgentView(Protocol):
    """What a tool sees of the agent it runs for (a `taskloom.Agent`)."""

    @property
    def name(self) -> str:
        """The agent's name."""
        ...

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The agent's tools."""
        ...


class BackgroundStarter(Protocol):
    """The part of a runtime's background service a tool starts work through."""

    async def start(
        self,
        ctx: ToolContext,
        kind: str,
        description: str,
        work: Any,
        *,
        lease: float | None = None,
        kind_cap: int | None = None,
        activity_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Start `work`; its result reaches the model as a notice later. Returns its id."""
        ...


class ToolHost(Protocol):
    """What a tool reaches of the runtime that runs it (a `taskloom.Runtime`)."""

    @property
    def background(self) -> BackgroundStarter:
        """The runtime's background work."""
        ...

    async def push_deferred(self, session_id: str, entry: Entry) -> int:
        """Append a deferred item's entry to the session's log (no lease needed)
        and wake whoever waits on the session; returns its position."""
        ...


class Deferred:
    """A handle a tool can keep after it returned, to deliver items later.

    Items are written to the session's log at once (durable) and applied at
    the run's next round boundary, in push order, before the model is asked.
    `push(item)` starts the write at once (a forgotten `await` still delivers);
    `push_nowait(item)` does the same from any thread. The handle pickles to
    its identity only; after unpickling, `bind(runtime)` reconnects it.
    """

    __slots__ = ("_host", "_loop", "id", "run_id", "session_id")

    def __init__(
        self,
        session_id: str,
        *,
        runtime: ToolHost | None = None,
        id: str | None = None,
        run_id: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.id = id or uuid4_hex()
        self.run_id = run_id
        self._host: ToolHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        if runtime is not None:
            self.bind(runtime)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_deferred, (self.session_id, self.id, self.run_id))

    def bind(self, runtime: ToolHost) -> Deferred:
        """Attach the runtime whose store the items go to (and its event loop,
        when called from inside it)."""
        self._host = runtime
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        return self

    def _write(self, item: DeferredItem | str) -> Awaitable[int]:
        if self._host is None:
            raise RuntimeError("this Deferred is not bound to a runtime: call bind(runtime) first")
        if isinstance(item, str):
            item = log_entries.DeferredItem.context(item)
        entry = Entry.of(log_entries.DeferredEntry(self.id, item), self.run_id)
        return self._host.push_deferred(self.session_id, entry)

    def push(self, item: DeferredItem | str) -> asyncio.Task[int]:
        """Write the item to the session log; await the result for its position.

        The write starts now, whether or not the result is awaited.
        """
        return asyncio.ensure_future(self._write(item))

    def push_nowait(self, item: DeferredItem | str) -> concurrent.futures.Future[int]:
        """`push` from any thread: the write is scheduled on the runtime's event
        loop; the returned future resolves to the item's position."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError(
                "this Deferred has no running event loop to write through: bind it "
                "inside the runtime's loop (tools get bound handles from ctx.deferred())"
            )

        async def write() -> int:
            return await self._write(item)

        return asyncio.run_coroutine_threadsafe(write(), loop)

    def __repr__(self) -> str:
        return f"Deferred(session_id={self.session_id!r}, id={self.id!r})"


def _rebuild_deferred(session_id: str, id: str, run_id: str | None) -> Deferred:
    return Deferred(session_id, id=id, run_id=run_id)


class ToolContext(Generic[DepsT]):
    """Injected into a tool when a parameter is annotated `ToolContext` (or
    `ToolContext[Deps]`).

    `run_id`, `session_id`, `call_id` identify the call; `agent` is the agent
    it runs for, `runtime` the runtime running it, `controls` the run's stop
    signal, deadline and usage meter, `origin` the run's origin label in
    events, `turn` the log position of the message that asked for the call.
    `deps` are the run's dependencies (`run(..., deps=...)`; None without),
    held in memory only, never written to the log.
    """

    __slots__ = (
        "_emit",
        "_loop",
        "_record",
        "_thread",
        "agent",
        "call_id",
        "controls",
        "deps",
        "origin",
        "run_id",
        "runtime",
        "session_id",
        "turn",
    )

    def __init__(
        self,
        *,
        run_id: str,
        session_id: str,
        call_id: str,
        agent: AgentView,
        runtime: ToolHost,
        controls: RunControls,
        emit: Callable[[Event], None],
        record: Callable[[Entry], Awaitable[int]],
        origin: str = "",
        deps: DepsT = None,  # type: ignore[assignment]
        turn: int = 0,
    ) -> None:
        self.deps: DepsT = deps
        self.turn = turn
        self.run_id = run_id
        self.session_id = session_id
        self.call_id = call_id
        self.agent = agent
        self.runtime = runtime
        self.controls = controls
        self.origin = origin
        self._emit = emit
        self._record = record
        # Sync tools run in a worker thread; events they emit must reach the
        # subscribers through the event loop, not from that thread.
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    @property
    def idempotency_key(self) -> str:
        """A key for this one call, the same however often it runs (after a
        crash, on resume, on another worker): 32 hex digits from the session,
        the turn and the call id, for an API's `Idempotency-Key` or an upsert
        (see `Tool`'s `idempotent`)."""
        ident = f"{self.session_id}\0{self.turn}\0{self.call_id}".encode()
        return hashlib.sha256(ident).hexdigest()[:32]

    @property
    def stop(self) -> StopSignal:
        """The run's stop signal (set when the run is asked to stop)."""
        return self.controls.stop

    def emit(self, event: Event) -> None:
        """Send an event to the run's subscribers (safe from a sync tool's thread)."""
        if threading.get_ident() == self._thread:
            self._emit(event)
        else:
            self._loop.call_soon_threadsafe(self._emit, event)

    def progress(self, message: str, **data: Any) -> None:
        """Report progress to subscribers at once; never causes a model round."""
        self.emit(
            events.ToolProgress(
                call_id=self.call_id,
                message=message,
                data=data,
                origin=self.origin,
                session_id=self.session_id,
            )
        )

    async def record(self, entry: Entry) -> int:
        """Append `entry` to this session's log as part of the run (fenced by the
        run's session lease: refused once another run took the session over)."""
        return await self._record(entry)

    def deferred(self) -> Deferred:
        """A handle to deliver results to this session after the call returned."""
        return Deferred(self.session_id, runtime=self.runtime, run_id=self.run_id)

    async def start_background(self, kind: str, description: str, work: Any, **options: Any) -> str:
        """Start background work whose result reaches the model as a notice at a
        later round boundary; returns the activity id at once."""
        return await self.runtime.background.start(self, kind, description, work, **options)
