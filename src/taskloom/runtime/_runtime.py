"""The Runtime: the services a set of sessions share."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from .. import entries as log_entries
from .._run_controls import StopSignal
from ..agent import Agent, AgentDepsT, AgentOutputT, set_default_runtime
from ..backends import (
    Backend,
    BudgetLedger,
    SessionMeta,
    SessionStore,
    SnapshotStore,
    open_backend,
    session_lease_key,
)
from ..backends.memory import MemoryBudgets, MemoryLeases
from ..entries import Entry
from ..errors import ConfigurationError, SessionBusy, UsageError
from ..loop.ports import RunObserver
from ..models import Model, resolve_model
from ..tools import Tool, ToolCatalog

if TYPE_CHECKING:
    from ..background import BackgroundService

from ._live_runs import LiveRuns
from ._run_queue import RunQueue
from ._session import Session, wake_up
from ._session_lease import LEASE_TTL

SNAPSHOT_EVERY = 500
"""Entries between two snapshots of a session's fold, by default."""

logger = logging.getLogger("taskloom")

T = TypeVar("T")
BoundT_co = TypeVar("BoundT_co", covariant=True)


class BindsRuntime(Protocol[BoundT_co]):
    """A tool (or toolset) that needs the services of the runtime offering it
    (its store, its background service, its connections), and gets them by
    being bound to it: a runtime offers `bind_runtime(runtime)`'s result in
    its place (see `Runtime.tools_for`).

    A runtime binds each such object once and keeps the bound copy as long
    as the object lives (weakly: a class that binds allows weak references),
    so every session of the runtime offers the same copy and a round pays
    nothing for it. The bound copy should not refer back to the object it
    was bound from, or it lives as long as the runtime does.

    The tools of the runtime's `agents` are bound as the runtime is made,
    perhaps before any event loop runs: binding is synchronous, cheap and
    does no I/O (what it registers with the runtime, such as a decision
    hook, is the point of binding early; connections open at first use).
    """

    def bind_runtime(self, runtime: Runtime) -> BoundT_co:
        """This object as `runtime` offers it."""
        ...


class Runtime:
    """The services sessions share: a store, known agents and models, background work.

    `store` is a URL (`memory://` — the default —, `sqlite:///path`,
    `postgresql://...`), a `Backend` or a `SessionStore` (see
    `open_backend`); `backend` is what it opened, and `close()` closes it.
    `agents` (agents, or a mapping by name) and `models` (model instances,
    registered by spec) are what a process that did not create a session
    rebuilds it from (their tools are bound to this runtime as it is made:
    see `BindsRuntime`); `tools` (a mapping by name, or tools) is the
    registry a background-child worker rebuilds children from. With
    `wake_on_notice`, a background notice for an idle session of this
    runtime starts a follow-up run by itself (an always-on agent), at most
    `max_wakeups` times in a row before a user turn. `lease_ttl` is how
    long a run's session lease lasts unrenewed: a writer that vanishes
    without releasing it blocks the session that long (on Linux a dead
    holder on the same machine is taken over at once).
    `child_concurrency` is how many child agents this runtime runs at once
    (inline, and background children run in this process); more wait their
    turn rather than crowd the store. By default it is what the store says it
    can carry (`store.concurrency`: a few per pooled PostgreSQL connection,
    32 on SQLite), unbounded on memory; None there, or `0`, means unbounded.
    `queue` (a `RunQueue`, e.g. `taskloom.distributed.WorkQueue`) lets
    sessions `submit` runs to worker processes; with it, `wake_on_notice`
    queues the wake-ups instead of running them here.

    A running session writes a snapshot of its log's fold every
    `snapshot_every` entries (0: never), beside the log in the store, so
    opening it later folds only what came after; a snapshot is a cache and
    never changes what a session reads (see `taskloom.log.Snapshot`).

    Runs are traced (OpenTelemetry GenAI spans and metrics) while a tracer
    provider is configured, or through `observer` when one is given;
    `trace_content` records prompts, completions and tool arguments and
    results in them (as does `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).

    Tools that need the runtime's services (`BindsRuntime`: delegation,
    background commands, MCP servers) are bound to it, once, and its
    sessions offer the bound copies (`tools_for`).

    Two runtimes never share anything.
    """

    def __init__(
        self,
        store: str | Backend | SessionStore | None = None,
        *,
        agents: Mapping[str, Agent[Any, Any]] | Iterable[Agent[Any, Any]] | None = None,
        models: Mapping[str, Model] | Iterable[Model] | None = None,
        tools: Mapping[str, Tool] | Iterable[Tool] | None = None,
        background: BackgroundService | None = None,
        wake_on_notice: bool = False,
        max_wakeups: int = 8,
        lease_ttl: float = LEASE_TTL,
        trace_content: bool = False,
        observer: RunObserver | None = None,
        queue: RunQueue | None = None,
        child_concurrency: int | None = None,
        snapshot_every: int = SNAPSHOT_EVERY,
    ) -> None:
        if snapshot_every < 0:
            raise ConfigurationError(f"snapshot_every must be 0 or more, not {snapshot_every!r}")
        self.backend = open_backend(store)
        self.store: SessionStore = self.backend.store
        self.snapshot_every = snapshot_every
        if child_concurrency is None:
            child_concurrency = getattr(self.store, "concurrency", None)
        if child_concurrency is not None and child_concurrency < 0:
            raise UsageError(f"child_concurrency must be 0 or more, not {child_concurrency}")
        self.child_concurrency: int | None = child_concurrency or None
        # Per event loop: a runtime may serve one asyncio.run after another,
        # and places held in a loop that ended are gone with it.
        self._child_slots: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Semaphore
        ] = weakref.WeakKeyDictionary()
        self.agents: dict[str, Agent[Any, Any]] = _by_name(agents, lambda a: a.name)
        self._models: dict[str, Model] = _by_name(models, lambda m: m.spec)
        self.tools: dict[str, Tool] = _by_name(tools, lambda t: t.name)
        self._background = background
        self.wake_on_notice = wake_on_notice
        self.max_wakeups = max_wakeups
        self.lease_ttl = lease_ttl
        self.trace_content = trace_content
        self._observer = observer
        self.queue = queue
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        self._services: dict[type[Any], Any] = {}
        # Unbound object -> its copy bound to this runtime (see BindsRuntime).
        self._bound: weakref.WeakKeyDictionary[object, Any] = weakref.WeakKeyDictionary()
        self._sessions: weakref.WeakValueDictionary[str, Session[Any, Any]] = (
            weakref.WeakValueDictionary()
        )
        # The runs of this runtime's sessions in progress in this process.
        self._live_runs = LiveRuns()
        self._wake_tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._closer: AsyncGenerator[None, None] | None = None
        if background is not None:
            self._cancel_on_delete(background)
        # Bound now, not at a session's first run: what a tool brings to the
        # runtime it is bound to (delegation resuming the children decided
        # through it) serves a process that only decides, too.
        for agent in self.agents.values():
            self.tools_for(agent)

    @functools.cached_property
    def snapshots(self) -> SnapshotStore | None:
        """Where sessions' snapshots are kept (beside the store), or None when
        they are off (`snapshot_every=0`) or the backend keeps none."""
        return self.backend.snapshots if self.snapshot_every else None

    @functools.cached_property
    def budgets(self) -> BudgetLedger:
        """Where delegation trees' budgets are kept: the backend's ledger, so a
        tree's ceiling holds across every process on the database; for a store
        without one, this runtime's memory (one process)."""
        return self.backend.budgets or MemoryBudgets()

    @property
    def background(self) -> BackgroundService:
        """Background work (activity registry, notice inbox) on this runtime's
        backend, made on first use unless one was given."""
        if self._background is None:
            # Imported on first use: `import taskloom` does not pay for it.
            from ..background import BackgroundService

            self._background = BackgroundService.for_store(self.store, runtime=self)
            self._cancel_on_delete(self._background)
        return self._background

    def _cancel_on_delete(self, background: BackgroundService) -> None:
        async def cancel_runs(session_id: str) -> None:
            await self.cancel_runs(session_id, "the session was deleted")

        # Deleting a session (`background.listeners.delete`, from this process)
        # cancels its run here: a deleted session's run has no one to answer.
        background.listeners.on_delete(cancel_runs)

    @property
    def observer(self) -> RunObserver:
        """Who watches this runtime's runs (tracing while a tracer provider is
        configured, unless an observer was given), made on first use."""
        if self._observer is None:
            from ..tracing import WhenConfigured

            self._observer = WhenConfigured(self.trace_content)
        return self._observer

    def tools_for(self, agent: Agent[Any, Any]) -> Mapping[str, Tool]:
        """The agent's own tools by name, as this runtime's sessions offer them:
        each that needs the runtime (`BindsRuntime`) bound to this one, the
        others as they are (the agent's own map when none binds)."""
        own = agent.tool_map
        offered: dict[str, Tool] | None = None
        for name, tool in own.items():
            bound = self._bound_to(tool)
            if bound is not tool:
                if offered is None:
                    offered = dict(own)
                offered[name] = bound
        return own if offered is None else offered

    def catalog_for(self, agent: Agent[Any, Any]) -> ToolCatalog:
        """The catalog of the agent's tools and toolsets, bound as `tools_for` binds them."""
        return ToolCatalog(
            agent.name,
            tuple(self.tools_for(agent).values()),
            tuple(self._bound_to(toolset) for toolset in agent.toolsets),
        )

    def _bound_to(self, item: T) -> T:
        # An attribute, not an isinstance on the protocol: cheap for the
        # many tools that do not bind.
        bind = getattr(item, "bind_runtime", None)
        if bind is None:
            return item
        found: T | None = self._bound.get(item)
        if found is None:
            found = bind(self)
            self._bound[item] = found
        return found

    def service(self, kind: type[T], make: Callable[[Runtime], T]) -> T:
        """The runtime's one instance of `kind`, made by `make(runtime)` on first
        use: how packages above the runtime keep per-runtime state.

        `close()` closes the services that have an async `close()` method (the
        newest first), so a service may own connections or processes."""
        found = self._services.get(kind)
        if found is None:
            found = self._services[kind] = make(self)
        return found  # type: ignore[no-any-return]

    @contextlib.asynccontextmanager
    async def child_slot(self) -> AsyncGenerator[None, None]:
        """Hold one of the runtime's `child_concurrency` places for a child's
        whole run; waits, first come first served, while all are taken."""
        limit = self.child_concurrency
        if limit is None:
            yield
            return
        loop = asyncio.get_running_loop()
        slots = self._child_slots.get(loop)
        if slots is None:
            slots = self._child_slots[loop] = asyncio.Semaphore(limit)
        async with slots:
            yield

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop background work this runtime started, close its services
        (`service`), and release the store."""
        # Work stopped below writes its notices; they must not wake anyone now.
        self._closing = True
        for task in list(self._wake_tasks):
            task.cancel()
        await asyncio.gather(*self._wake_tasks, return_exceptions=True)
        services = list(self._services.values())
        self._services.clear()
        for service in reversed(services):
            close = getattr(service, "close", None)
            if close is not None and inspect.iscoroutinefunction(close):
                await close()
        if self._background is not None:
            await self._background.close()
        if self.queue is not None:
            await self.queue.close()
        await self.backend.close()

    def register_model(self, model: Model) -> None:
        """Make `model.spec` resolve to this instance in this runtime."""
        self._models[model.spec] = model

    def adopt_model(self, model: Model) -> None:
        """Make `model.spec` resolve to this instance in this runtime, unless
        it already resolves to another (a session chose `model` by instance)."""
        self._models.setdefault(model.spec, model)

    def resolve_model(self, spec: Model | str) -> Model:
        """A model from a registered instance or a `"provider:model"` spec."""
        if not isinstance(spec, str):
            return spec
        found = self._models.get(spec)
        if found is None:
            found = resolve_model(spec)
            self._models[spec] = found
        return found

    async def create_session(
        self,
        agent: Agent[AgentDepsT, AgentOutputT],
        *,
        session_id: str | None = None,
        parent_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Session[AgentDepsT, AgentOutputT]:
        """A new, empty session for `agent` in the store."""
        sid = os.urandom(16).hex() if session_id is None else session_id
        await self.store.create(SessionMeta(sid, agent.name, parent_id, 0.0, dict(metadata or {})))
        return Session(self, sid, agent, new=True)

    @overload
    async def open_session(
        self, session_id: str, agent: Agent[AgentDepsT, AgentOutputT]
    ) -> Session[AgentDepsT, AgentOutputT]: ...

    @overload
    async def open_session(self, session_id: str, agent: None = None) -> Session[Any, Any]: ...

    async def open_session(
        self, session_id: str, agent: Agent[Any, Any] | None = None
    ) -> Session[Any, Any]:
        """An existing session (raises `SessionNotFound`), its log loaded.

        Without `agent`, the agent the session recorded is looked up in
        `Runtime(agents=...)`; a name it lacks raises `ConfigurationError`.
        """
        if agent is None:
            agent = self.agent_named((await self.store.get(session_id)).agent)
        session = Session(self, session_id, agent)
        await session.journal.sync()  # raises SessionNotFound for an unknown id
        return session

    def register_session(self, session: Session[Any, Any]) -> None:
        """Keep `session` (weakly) as this process's object for its id: news
        written for it wakes it (`wake_on_notice`)."""
        self._sessions[session.id] = session

    async def forget_session(self, session_id: str) -> None:
        """Delete a session whose run has ended, with its child sessions: their
        logs, background activities and notices, and (in memory) their leases.

        A run of the session still in progress in this process is cancelled
        first (`cancel_runs`). Work of theirs still running in this process
        is waited for first, in a task of the runtime's own, so this returns
        at once. What `Agent.run` does with its one-off session on the
        default runtime; a session held by a `Session` object that runs
        again must not be forgotten.
        """
        if session_id in self._live_runs:
            await self.cancel_runs(session_id, "the session was deleted")
        if self._background is not None and self._background.running(session_id):
            self._track(self._forget_when_settled(session_id))
            return
        for child in await self.store.list(parent_id=session_id):
            await self.forget_session(child.id)
        if self._background is not None:
            await self._background.forget(session_id)
        await self.store.delete(session_id)
        snapshots = self.snapshots
        if snapshots is not None:
            await snapshots.delete(session_id)
        leases = self.store.leases
        if isinstance(leases, MemoryLeases):  # durable stores keep lease rows by design
            leases.forget(session_lease_key(session_id))

    async def _forget_when_settled(self, session_id: str) -> None:
        assert self._background is not None
        while running := self._background.running(session_id):
            await asyncio.wait(running)
        await self.forget_session(session_id)

    def agent_named(self, name: str) -> Agent[Any, Any]:
        """The agent registered under `name` (`Runtime(agents=...)`)."""
        found = self.agents.get(name)
        if found is None:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ConfigurationError(
                f"this runtime has no agent named {name!r} (registered: {known}); "
                "pass it in Runtime(agents=[...])"
            )
        return found

    async def push_deferred(self, session_id: str, entry: Entry) -> int:
        """Append a deferred item's entry (no lease needed) and wake the session
        (with a queue and `wake_on_notice`, a queued wake-up)."""
        position = await self.store.append(session_id, entry)
        self.notify(session_id)
        if self.wake_on_notice and self.queue is not None:
            await self._queue_wake(session_id)
        return position

    async def steer(self, session_id: str, text: str) -> None:
        """Fold `text` into the session as a user turn at its next round
        boundary (of the running run, or the next run). Needs no lease, so it
        works from any process sharing the store."""
        if not text:
            raise UsageError("steer needs non-empty text")
        await self.store.append(session_id, Entry.of(log_entries.Steer(text)))
        self.notify(session_id)

    async def request_stop(self, session_id: str, reason: str | None = None) -> None:
        """Ask the session's running run to stop at its next boundary, from any
        process sharing the store (the run ends STOPPED; later runs are unaffected)."""
        await self.store.append(session_id, Entry.of(log_entries.StopRequest(reason)))
        self.notify(session_id)

    def run_started(self, session_id: str, stop: StopSignal) -> Callable[[], None]:
        """Count a run of the session, stopped by `stop`, as in progress in this
        process (what `cancel_runs` reaches) until the returned callable is
        called. A `Session`'s runs do it themselves."""
        return self._live_runs.started(session_id, stop)

    async def cancel_runs(self, session_id: str, reason: str | None = None) -> int:
        """Cancel the session's runs in progress in this process and wait until
        they ended (`CANCEL_WAIT` seconds at most); how many there were.

        Each run's stop signal is cancelled (`StopSignal.cancel`): the run
        aborts its model request and tool calls in flight, answers its open
        calls in band, records its end and returns STOPPED, its `error`
        saying it was cancelled (and `reason`). Its inline children are
        cancelled with it. A run in another process is not reached: ask it
        to stop at its next boundary with `request_stop`. Deleting a
        session (`background.listeners.delete`, `forget_session`) cancels
        its runs here this way.
        """
        return await self._live_runs.cancel(session_id, reason)

    def on_notice(self, session_id: str) -> None:
        """A background notice was written for the session (in this process)."""
        self.notify(session_id)
        if not self.wake_on_notice or self._closing:
            return
        if self.queue is not None:
            # A worker decides whether the session is idle: it takes the lease.
            self._track(self._queue_wake(session_id))
            return
        session = self._sessions.get(session_id)
        # A running run delivers it at its next boundary; past the limit, it
        # waits for the next run.
        run = None if session is None else wake_up(session, self.max_wakeups)
        if run is not None:
            self._track(self._wake(session_id, run))

    def _track(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._wake_tasks.add(task)
        task.add_done_callback(self._wake_tasks.discard)

    async def _queue_wake(self, session_id: str) -> None:
        assert self.queue is not None
        try:
            await self.queue.wake(session_id)
        except Exception:
            # What was written stays in the log; the session's next run reads it.
            logger.warning("queueing a wake-up of session %s failed", session_id, exc_info=True)

    async def _wake(self, session_id: str, run: Awaitable[object]) -> None:
        try:
            await run
        except SessionBusy:
            pass  # a run holds the session; it delivers the notice at its next boundary
        except Exception:
            # The run recorded its failure in the session's log; nobody awaits
            # a wake-up, so say it here too.
            logger.warning("wake-up run of session %s failed", session_id, exc_info=True)

    def notify(self, session_id: str) -> None:
        """Wake whoever watches the session in this process (`watch`)."""
        for wake in self._watchers.get(session_id, ()):
            wake()

    def watch(self, session_id: str, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake()` whenever something is written for the session in this
        process (a notice, a deferred item, a steer); returns the unwatch."""
        self._watchers.setdefault(session_id, []).append(wake)

        def unwatch() -> None:
            watchers = self._watchers.get(session_id, [])
            if wake in watchers:
                watchers.remove(wake)
            if not watchers:
                self._watchers.pop(session_id, None)

        return unwatch


_defaults: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Runtime] = (
    weakref.WeakKeyDictionary()
)


def default_runtime() -> Runtime:
    """The running event loop's default runtime: in memory, made on first use.

    `Agent.run` and `Agent.stream` run on it when given no runtime, so a
    process does not build a runtime per run; each such run's session is
    forgotten once the run and the work it started have ended
    (`Runtime.forget_session`). It is closed when the loop shuts down its
    async generators, which `asyncio.run` does as it ends; a loop closed
    otherwise just drops it.
    """
    loop = asyncio.get_running_loop()
    runtime = _defaults.get(loop)
    if runtime is None or runtime._closing:
        runtime = _defaults[loop] = Runtime()
        runtime._closer = _closer(runtime)
    return runtime


async def _closes(runtime: Runtime) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await runtime.close()


def _closer(runtime: Runtime) -> AsyncGenerator[None, None]:
    closer = _closes(runtime)
    # Its first step, taken here inside the loop, registers the generator with
    # the loop's async-generator hooks: `loop.shutdown_asyncgens()` (the last
    # step of `asyncio.run`) closes it, and so closes the runtime. The runtime
    # keeps it referenced: the loop's own reference is weak.
    with contextlib.suppress(StopIteration):
        closer.asend(None).send(None)
    return closer


def _by_name(items: Mapping[str, T] | Iterable[T] | None, name: Callable[[T], str]) -> dict[str, T]:
    if items is None:
        return {}
    if isinstance(items, Mapping):
        return dict(items)
    return {name(item): item for item in items}


set_default_runtime(default_runtime)
