"""Runtime (the services a set of sessions share) and Session (a persistent conversation).

A `Session` object is a cache of its log in the store: every decision it
makes (what is pending, which model, what was approved) is derived from the
entries, so another process holding only the session id reaches the same
answers.

A session has one writer at a time. Every run, resume and wake-up holds the
session's lease (`session_lease_key`); each entry the run appends carries the
lease's fencing generation, and the store refuses a stale one in the append's
own transaction. A second caller gets `SessionBusy` (or waits, `wait=True`).
Decisions, steering, stop requests and deferred items are written by anyone,
without the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

from .agent import Agent, AgentDepsT, AgentOutputT
from .entries import (
    ApprovalDecision,
    CompactionEntry,
    Entry,
    ModelChange,
    Payload,
    Steer,
    StopRequest,
    SubagentLink,
)
from .errors import ApprovalConflict, CorruptEntry, SessionBusy, UsageError
from .events import Event, origin_label
from .loop import (
    NO_OBSERVER,
    NoticesPort,
    PendingCall,
    RunLoop,
    RunObserver,
    RunOptions,
    RunResult,
    RunStream,
    SessionLog,
)
from .loop._log import summary_message
from .messages import Message
from .models._base import Model, ModelSettings, ReasoningOptions
from .results import ToolSpec
from .stores import SessionStore, open_store
from .stores._base import SessionMeta
from .stores._leases import Lease, holder_is_gone, holder_name
from .tools import ToolCatalog

if TYPE_CHECKING:
    from .tools import Tool

__all__ = ["HeldLease", "Runtime", "Session", "session_lease_key"]

logger = logging.getLogger("taskloom")

T = TypeVar("T")

LEASE_TTL = 30.0
"""Seconds a session lease lasts without renewal (renewed every third of it)."""


RELEASE_WAIT = 1.0
"""Seconds a lease release may wait for the store before it is left to lapse."""


def session_lease_key(session_id: str) -> str:
    """The lease whoever runs the session holds (a run, a resume, a child's runner)."""
    return f"session:{session_id}"


class Runtime:
    """The services sessions share: a store, known agents and models, background work.

    `store` is a `SessionStore` or a URL (`memory://` — the default —,
    `sqlite:///path`, `postgresql://...`). `agents` (agents, or a mapping by
    name) and `models` (model instances, registered by spec) are what a
    process that did not create a session rebuilds it from; `tools` (a
    mapping by name, or tools) is the registry a background-child worker
    rebuilds children from. With `wake_on_notice`, a background notice for
    an idle session of this runtime starts a follow-up run by itself (an
    always-on agent), at most `max_wakeups` times in a row before a user
    turn. `lease_ttl` is how long a run's session lease lasts unrenewed: a
    writer that vanishes without releasing it blocks the session that long
    (on Linux a dead holder on the same machine is taken over at once).

    Runs are traced (OpenTelemetry GenAI spans and metrics) while a tracer
    provider is configured, or through `observer` when one is given;
    `trace_content` records prompts, completions and tool arguments and
    results in them (as does `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).

    Two runtimes never share anything.
    """

    default_background: ClassVar[Callable[[Runtime], NoticesPort] | None] = None
    """Builds a runtime's background service when none was given (installed by
    the `taskloom` package, which knows the background layer)."""

    default_observer: ClassVar[Callable[[Runtime], RunObserver] | None] = None
    """Builds a runtime's run observer when none was given (installed by the
    `taskloom` package: tracing, which sits above the runtime)."""

    def __init__(
        self,
        store: SessionStore | str | None = None,
        *,
        agents: Mapping[str, Agent[Any, Any]] | Iterable[Agent[Any, Any]] | None = None,
        models: Mapping[str, Model] | Iterable[Model] | None = None,
        tools: Mapping[str, Tool] | Iterable[Tool] | None = None,
        background: NoticesPort | None = None,
        wake_on_notice: bool = False,
        max_wakeups: int = 8,
        lease_ttl: float = LEASE_TTL,
        trace_content: bool = False,
        observer: RunObserver | None = None,
    ) -> None:
        self.store: SessionStore = open_store(store)
        self.agents: dict[str, Agent[Any, Any]] = _by_name(agents, lambda a: a.name)
        self._models: dict[str, Model] = _by_name(models, lambda m: m.spec)
        self.tools: dict[str, Tool] = _by_name(tools, lambda t: t.name)
        self._background = background
        self.wake_on_notice = wake_on_notice
        self.max_wakeups = max_wakeups
        self.lease_ttl = lease_ttl
        self.trace_content = trace_content
        self._observer = observer
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        self._services: dict[type[Any], Any] = {}
        self._sessions: weakref.WeakValueDictionary[str, Session[Any, Any]] = (
            weakref.WeakValueDictionary()
        )
        self._wake_tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

    @property
    def background(self) -> Any:
        """Background work (activity registry, notice inbox) on this runtime's
        backend: a `taskloom.background.BackgroundService` unless one was given."""
        if self._background is None:
            make = Runtime.default_background
            if make is None:
                raise UsageError("no background service: pass Runtime(background=...)")
            self._background = make(self)
        return self._background

    @property
    def observer(self) -> RunObserver:
        """Who watches this runtime's runs (tracing), made on first use."""
        if self._observer is None:
            make = Runtime.default_observer
            self._observer = NO_OBSERVER if make is None else make(self)
        return self._observer

    def service(self, kind: type[T], make: Callable[[Runtime], T]) -> T:
        """The runtime's one instance of `kind`, made by `make(runtime)` on first
        use: how packages above the runtime keep per-runtime state.

        `close()` closes the services that have an async `close()` method (the
        newest first), so a service may own connections or processes."""
        found = self._services.get(kind)
        if found is None:
            found = self._services[kind] = make(self)
        return found  # type: ignore[no-any-return]

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
            close = getattr(self._background, "close", None)
            if close is not None:
                await close()
        close = getattr(self.store, "close", None)
        if close is not None:
            await close()

    # ------------------------------------------------------------ models

    def register_model(self, model: Model) -> None:
        """Make `model.spec` resolve to this instance in this runtime."""
        self._models[model.spec] = model

    def resolve_model(self, spec: Model | str) -> Model:
        """A model from a registered instance or a `"provider:model"` spec."""
        if not isinstance(spec, str):
            return spec
        found = self._models.get(spec)
        if found is None:
            from .models import resolve_model

            found = resolve_model(spec)
            self._models[spec] = found
        return found

    # ------------------------------------------------------------ sessions

    async def create_session(
        self,
        agent: Agent[AgentDepsT, AgentOutputT],
        *,
        session_id: str | None = None,
        parent_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Session[AgentDepsT, AgentOutputT]:
        """A new, empty session for `agent` in the store."""
        sid = uuid.uuid4().hex if session_id is None else session_id
        await self.store.create(SessionMeta(sid, agent.name, parent_id, 0.0, dict(metadata or {})))
        return Session(self, sid, agent)

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
        meta = await self.store.get(session_id)
        if agent is None:
            agent = self.agent_named(meta.agent)
        session = Session(self, session_id, agent)
        await session.sync()
        return session

    def agent_named(self, name: str) -> Agent[Any, Any]:
        """The agent registered under `name` (`Runtime(agents=...)`)."""
        from .errors import ConfigurationError

        found = self.agents.get(name)
        if found is None:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ConfigurationError(
                f"this runtime has no agent named {name!r} (registered: {known}); "
                "pass it in Runtime(agents=[...])"
            )
        return found

    async def push_deferred(self, session_id: str, entry: Entry) -> int:
        """Append a deferred item's entry (no lease needed) and wake the session."""
        position = await self.store.append(session_id, entry)
        self.notify(session_id)
        return position

    def on_notice(self, session_id: str) -> None:
        """A background notice was written for the session (in this process)."""
        self.notify(session_id)
        if not self.wake_on_notice or self._closing:
            return
        session = self._sessions.get(session_id)
        if session is None or session.is_running or session._wakeups >= self.max_wakeups:
            # A running run delivers it at its next boundary; past the limit,
            # it waits for the next run.
            return
        session._wakeups += 1
        task = asyncio.get_running_loop().create_task(self._wake(session))
        self._wake_tasks.add(task)
        task.add_done_callback(self._wake_tasks.discard)

    async def _wake(self, session: Session[Any, Any]) -> None:
        try:
            # A wake-up has no caller to give it deps: its tools see None.
            await session._run(None, None, resume=False, origin="", emit=None, wait=False)
        except SessionBusy:
            pass  # a run holds the session; it delivers the notice at its next boundary
        except Exception:
            # The run recorded its failure in the session's log; nobody awaits
            # a wake-up, so say it here too.
            logger.warning("wake-up run of session %s failed", session.id, exc_info=True)

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


def _by_name(items: Mapping[str, T] | Iterable[T] | None, name: Callable[[T], str]) -> dict[str, T]:
    if items is None:
        return {}
    if isinstance(items, Mapping):
        return dict(items)
    return {name(item): item for item in items}


class HeldLease:
    """A session lease this process holds (`Session.hold`), renewed on a timer
    while held; `on_lost` and `on_renewed` hook into its beat."""

    __slots__ = ("_beat", "_lost", "_renewed", "_timer", "lease", "session", "ttl")

    def __init__(self, session: Session[Any, Any], lease: Lease, ttl: float) -> None:
        self.session = session
        self.lease = lease
        self.ttl = ttl
        self._lost: list[Callable[[], None]] = []
        self._renewed: list[Callable[[], Awaitable[object]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._beat: asyncio.Task[None] | None = None
        self._schedule()

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` if a renewal finds the lease taken over; returns the undo."""
        self._lost.append(callback)
        return lambda: self._lost.remove(callback) if callback in self._lost else None

    def on_renewed(self, callback: Callable[[], Awaitable[object]]) -> None:
        """Await `callback()` after every renewal: keeps something else alive
        on the lease's beat (a failure there is logged, not fatal)."""
        self._renewed.append(callback)

    def _schedule(self) -> None:
        # A timer, not a task: most runs end long before their first renewal.
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.ttl / 3, self._fire)

    def _fire(self) -> None:
        self._beat = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        leases = self.session.runtime.store.leases
        try:
            renewed = await leases.renew(self.lease, self.ttl)
        except Exception:
            logger.warning(
                "renewing the lease of session %s failed", self.session.id, exc_info=True
            )
            self._schedule()  # the lease may still be ours; try again on the next beat
            return
        if renewed is None:
            logger.warning("session %s was taken over by another writer", self.session.id)
            for callback in list(self._lost):
                callback()
            return
        self.lease = renewed
        for keep_alive in self._renewed:
            try:
                await keep_alive()
            except Exception:
                logger.warning("keep-alive of session %s failed", self.session.id, exc_info=True)
        self._schedule()

    async def release(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._beat is not None and not self._beat.done():
            self._beat.cancel()
            await asyncio.wait([self._beat])
        # A release that cannot reach the store is harmless (the lease lapses
        # on its own); it must not hold up a run that already ended.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(RELEASE_WAIT):
                await self.session.runtime.store.leases.release(self.lease)


class Session(Generic[AgentDepsT, AgentOutputT]):
    """A persistent conversation of one agent; see the module docstring.

    Its runs take the agent's `deps` (`run(..., deps=...)`, also `stream`,
    `resume`): per run, in memory only, never written to the log.
    """

    def __init__(
        self, runtime: Runtime, session_id: str, agent: Agent[AgentDepsT, AgentOutputT]
    ) -> None:
        self.runtime = runtime
        self.id = session_id
        self.agent = agent
        self.log = SessionLog()
        self._held: HeldLease | None = None
        self._running = False
        self._wakeups = 0
        self._specs: tuple[ToolSpec, ...] | None = None
        self._catalog: ToolCatalog | None = None
        # A model instance chosen in this process, and the log position of the
        # model change that chose it: instances keep their identity here even
        # when two share a spec (other processes resolve the spec).
        self._chosen: tuple[int, Model] | None = None
        runtime._sessions[session_id] = self

    def __repr__(self) -> str:
        return f"Session({self.id!r}, agent={self.agent.name!r})"

    # ------------------------------------------------------------ derived state

    @property
    def is_running(self) -> bool:
        """Whether this Session object is running a run now (in this process)."""
        return self._running

    @property
    def host(self) -> Runtime:
        """The runtime, as tools reach it."""
        return self.runtime

    @property
    def notices(self) -> NoticesPort:
        """Background notices of the runtime, as the loop reaches them."""
        return self.runtime.background  # type: ignore[no-any-return]

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools this session offers, by name: the agent's own, and its
        toolsets' as of the last `refresh_tools()`."""
        catalog = self._catalog
        return self.agent.tool_map if catalog is None else catalog.tools

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about the tools (rebuilt only when they change)."""
        catalog = self._catalog
        if catalog is not None:
            return catalog.specs
        if self._specs is None:
            self._specs = tuple(t.spec for t in self.agent.tools)
        return self._specs

    async def refresh_tools(self) -> None:
        """Re-read the agent's toolsets (an MCP server's current tools); the
        loop calls it at round boundaries, so a tool list never changes
        within a round. Free for an agent without toolsets."""
        toolsets = self.agent.toolsets
        if not toolsets:
            return
        catalog = self._catalog
        if catalog is None:
            catalog = ToolCatalog(self.agent.name, self.agent.tools, toolsets)
        await catalog.refresh(self.runtime)
        self._catalog = catalog

    @property
    def model(self) -> Model:
        """The model the next request goes to (the persisted choice, else the agent's)."""
        log = self.log
        if log.model_spec is None:
            return self.runtime.resolve_model(self.agent.model)
        chosen = self._chosen
        if chosen is not None and chosen[0] == log.model_position:
            return chosen[1]
        agent_model = self.agent.model
        if not isinstance(agent_model, str) and agent_model.spec == log.model_spec:
            return agent_model
        return self.runtime.resolve_model(log.model_spec)

    @property
    def settings(self) -> ModelSettings:
        """The agent's settings with the session's persisted reasoning choice."""
        base = self.agent.settings
        if not self.log.reasoning_set:
            return base
        return replace(base, reasoning=self.log.reasoning)

    # ------------------------------------------------------------ the log

    async def sync(self) -> None:
        """Fold in entries other tasks or processes appended since our last look.

        Raises `CorruptEntry` naming the session and position of an entry
        that cannot be read.
        """
        for entry in await self.runtime.store.load(self.id, after=self.log.position):
            try:
                self.log.apply(entry)
            except CorruptEntry as exc:
                raise CorruptEntry(f"session {self.id!r}: {exc}") from None

    async def append(self, entry: Entry, message: Message | None = None) -> int:
        """Append `entry` and fold it in; returns its position.

        While this Session holds the session's lease (it is running), the
        append carries the lease's fencing token: the store refuses it with
        `StaleLeaseError` once another writer took the session over.
        """
        held = self._held
        fence = held.lease.fence if held is not None else None
        position = await self.runtime.store.append(self.id, entry, fence=fence)
        if position == self.log.position + 1:
            self.log.apply(entry, message, position)
        else:
            # Someone else appended in between: read the gap (ours included).
            await self.sync()
        return position

    async def record(self, payload: Payload, run_id: str | None = None) -> int:
        """Append a typed entry (see `append`)."""
        return await self.append(Entry.of(payload, run_id))

    async def entries(self) -> list[Entry]:
        """Every entry of this session's log, in order."""
        await self.sync()
        return list(self.log.entries)

    async def transcript(
        self, include_children: bool = False, *, mark_compactions: bool = False
    ) -> list[Message]:
        """The whole conversation, every message the log holds (compaction only
        shortens what requests send). With `include_children`, each child's
        messages follow its link, tagged with its origin; with
        `mark_compactions`, each compaction's summary stands where it was
        made, as a user message with origin `"compaction"`."""
        await self.sync()
        if not include_children and not mark_compactions:
            return list(self.log.messages)
        store = self.runtime.store if include_children else None
        return await _transcript(store, list(self.log.entries), "", mark_compactions)

    async def pending(self) -> list[PendingCall]:
        """The calls of the parked turn that wait for a decision, with their full
        arguments (empty when the session is not parked)."""
        await self.sync()
        log = self.log
        return [
            PendingCall(c.id, c.name, c.arguments, r.reason)
            for c in log.parked()
            if (r := log.request(c.id)) is not None and log.decision(c.id) is None
        ]

    # ------------------------------------------------------------ the lease

    @contextlib.asynccontextmanager
    async def hold(
        self, *, wait: bool | float = False, ttl: float | None = None
    ) -> AsyncIterator[HeldLease]:
        """Hold the session's lease for the block: this Session becomes the
        session's one writer, and its appends are fenced.

        Raises `SessionBusy` when another writer holds it; with `wait=True`
        (or a number of seconds) waits for it instead. A holder on this
        machine that is known to be dead is taken over at once. Re-entrant
        for this Session object: an inner hold shares the outer lease. `ttl`
        overrides the runtime's `lease_ttl` for this hold.
        """
        if self._held is not None:
            yield self._held
            return
        ttl = self.runtime.lease_ttl if ttl is None else ttl
        lease = await self._acquire(wait, ttl)
        held = self._held = HeldLease(self, lease, ttl)
        try:
            yield held
        finally:
            self._held = None
            await held.release()

    async def _acquire(self, wait: bool | float, ttl: float) -> Lease:
        leases = self.runtime.store.leases
        key = session_lease_key(self.id)
        me = holder_name()
        loop = asyncio.get_running_loop()
        give_up = None if wait is True else loop.time() + (0.0 if wait is False else float(wait))
        delay = 0.02
        while True:
            lease = await leases.acquire(key, me, ttl)
            if lease is not None:
                return lease
            current = await leases.current(key)
            if current is not None and holder_is_gone(current.holder):
                lease = await leases.take_over(current, me, ttl)
                if lease is not None:
                    logger.info("session %s: took over the lease of %s", self.id, current.holder)
                    return lease
            if current is None:
                continue  # released between the two calls: try again at once
            if give_up is not None and loop.time() >= give_up:
                raise SessionBusy(self.id, current.holder)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # ------------------------------------------------------------ running

    async def _run(
        self,
        user: Message | None,
        options: RunOptions | None,
        *,
        resume: bool,
        origin: str,
        emit: Callable[[Event], None] | None,
        wait: bool | float,
        deps: object = None,
    ) -> RunResult[AgentOutputT]:
        if self._running:
            raise SessionBusy(self.id, "a run of this Session object")
        options = options if options is not None else RunOptions()
        self._running = True
        try:
            async with self.hold(wait=wait) as held:
                if user is not None:
                    self._wakeups = 0  # a user turn ends a chain of wake-ups
                undo = held.on_lost(lambda: options.stop.set("the session was taken over"))
                try:
                    loop = RunLoop(self, options, emit, origin, self.runtime.observer, deps=deps)
                    return await loop.run(user, resume=resume)
                finally:
                    undo()
        finally:
            self._running = False

    async def run(
        self,
        input: str | Message | None = None,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        emit: Callable[[Event], None] | None = None,
        origin: str = "",
        wait: bool | float = False,
    ) -> RunResult[AgentOutputT]:
        """Append `input` as a user turn and run the loop to an end status.

        `deps` reach the tools as `ctx.deps` (see `Agent`). `emit` receives
        every event as it happens (it must not block); `stream` is the
        iterator form. Raises `SessionBusy` if another run holds the session,
        unless `wait` (True, or seconds) says to wait.
        """
        self.agent.check_deps(deps)
        return await self._run(
            _as_user(input), options, resume=False, origin=origin, emit=emit, wait=wait, deps=deps
        )

    def stream(
        self,
        input: str | Message | None = None,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        wait: bool | float = False,
    ) -> RunStream[AgentOutputT]:
        """Run like `run`, yielding events; `stream.result` holds the result after."""
        self.agent.check_deps(deps)
        user = _as_user(input)
        return RunStream(
            lambda emit: self._run(
                user, options, resume=False, origin="", emit=emit, wait=wait, deps=deps
            )
        )

    async def resume(
        self,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        emit: Callable[[Event], None] | None = None,
        wait: bool | float = False,
    ) -> RunResult[AgentOutputT]:
        """Continue a run parked for approval: approved calls run, denied ones
        get an error result carrying the note, then the loop goes on. Raises
        `ApprovalsMissing` if some parked call has no decision yet. The
        parked run's deps were never stored: pass them again."""
        self.agent.check_deps(deps)
        return await self._run(
            None, options, resume=True, origin="", emit=emit, wait=wait, deps=deps
        )

    def stream_resume(
        self,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        wait: bool | float = False,
    ) -> RunStream[AgentOutputT]:
        """`resume`, yielding events."""
        self.agent.check_deps(deps)
        return RunStream(
            lambda emit: self._run(
                None, options, resume=True, origin="", emit=emit, wait=wait, deps=deps
            )
        )

    # ------------------------------------------------------------ decisions

    async def approve(self, call_id: str, note: str | None = None) -> None:
        """Approve a call of the parked turn (write-once, bound to the turn and
        the call's exact arguments; see `taskloom.loop._approvals`)."""
        await self._decide(call_id, True, note)

    async def deny(self, call_id: str, note: str | None = None) -> None:
        """Deny a call of the parked turn; the model gets an error result with the note."""
        await self._decide(call_id, False, note)

    async def _decide(self, call_id: str, approved: bool, note: str | None) -> None:
        await self.sync()
        log = self.log
        request = log.request(call_id)
        if request is None:
            raise UsageError(
                f"session {self.id} has no approval request for call {call_id!r} in its parked turn"
            )
        existing = log.decision(call_id)
        if existing is not None:
            _check_same(existing, approved, call_id)
            return
        decision = ApprovalDecision(call_id, approved, request.hash, log.turn, note)
        # Decisions need no lease: anyone may decide while the run is parked.
        await self.runtime.store.append(self.id, Entry.of(decision))
        await self.sync()
        # Another process may have decided first: the log order says who won.
        winner = log.decision(call_id)
        assert winner is not None
        _check_same(winner, approved, call_id)

    async def steer(self, text: str) -> None:
        """Fold `text` in as a user turn at the next round boundary (of the
        running run, or the next run). Works from any process sharing the store."""
        if not text:
            raise UsageError("steer needs non-empty text")
        await self.runtime.store.append(self.id, Entry.of(Steer(text)))
        self.runtime.notify(self.id)

    async def request_stop(self, reason: str | None = None) -> None:
        """Ask the session's running run to stop at its next boundary, from any
        process sharing the store (the run ends STOPPED; later runs are unaffected)."""
        await self.runtime.store.append(self.id, Entry.of(StopRequest(reason)))
        self.runtime.notify(self.id)

    async def set_model(self, model: Model | str) -> None:
        """Use another model from the next request on; persisted on the session.

        An instance is used as given in this process (even if another has
        the same spec); other processes resolve its spec.
        """
        spec = model if isinstance(model, str) else model.spec
        position = await self.record(ModelChange(model=spec, model_changed=True))
        if isinstance(model, str):
            self._chosen = None
        else:
            self._chosen = (position, model)
            self.runtime._models.setdefault(spec, model)

    def resolve_model(self, spec: Model | str) -> Model:
        """A model instance for a spec, through the runtime's registry."""
        return self.runtime.resolve_model(spec)

    async def set_reasoning(self, reasoning: ReasoningOptions | None) -> None:
        """Set (or clear, with None) reasoning options; persisted on the session."""
        await self.record(
            ModelChange(
                reasoning=reasoning.to_dict() if reasoning else None, reasoning_changed=True
            )
        )


def _check_same(existing: ApprovalDecision, approved: bool, call_id: str) -> None:
    if existing.approved != approved:
        first = "approved" if existing.approved else "denied"
        raise ApprovalConflict(f"call {call_id!r} was already {first}")


def _as_user(input: str | Message | None) -> Message | None:
    if input is None or isinstance(input, Message):
        return input
    return Message.user(input)


async def _transcript(
    store: SessionStore | None, entries: list[Entry], origin: str, marks: bool
) -> list[Message]:
    out: list[Message] = []
    log = SessionLog()
    for entry in entries:
        before = len(log.messages)
        log.apply(entry)
        for m in log.messages[before:]:
            out.append(replace(m, origin=origin) if origin else m)
        payload = entry.payload
        if marks and isinstance(payload, CompactionEntry):
            out.append(replace(summary_message(payload.summary), origin="compaction"))
        elif store is not None and isinstance(payload, SubagentLink):
            child_id = payload.child_session_id
            child_origin = origin_label(payload.name, child_id, origin)
            child_entries = await store.load(child_id)
            out.extend(await _transcript(store, child_entries, child_origin, marks))
    return out


# Used by type checkers only: the Session is the loop's SessionPort.
if TYPE_CHECKING:
    from .loop import SessionPort

    def _is_port(session: Session[Any, Any]) -> SessionPort:
        return session
