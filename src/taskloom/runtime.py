"""Runtime (the services a set of sessions share) and Session (a persistent conversation).

A `Session` object is a cache of its log in the store: every decision it
makes (what is pending, which model, what was approved) is derived from the
entries, so another process holding only the session id reaches the same
answers.
"""

from __future__ import annotations

import asyncio
import re
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .agent import Agent
from .errors import ApprovalConflict, TaskloomError
from .events import Event
from .loop.log import SessionLog, interrupted_results
from .loop.options import RunOptions, StopSignal
from .loop.result import RunResult, arguments_digest
from .loop.run import RunLoop
from .loop.stream import RunStream
from .messages import Message, ToolCall
from .models.base import Model, ModelSettings, ReasoningOptions, ToolSpec
from .stores import SessionStore, open_store
from .stores.base import Entry, EntryKind, Fence, SessionMeta

if TYPE_CHECKING:
    from .background.notices import Delivery
    from .background.service import BackgroundService
    from .tools import Tool

__all__ = ["Runtime", "Session"]


class Runtime:
    """The services sessions share: a store, known models, background work.

    `store` is a `SessionStore` or a URL (`memory://` — the default —,
    `sqlite:///path`, `postgresql://...`). `models` registers model instances
    by spec so a persisted model choice resolves to them; `tools` (a mapping
    by name, or tools) is the registry a background-child worker rebuilds
    children from.
    With `wake_on_notice`, a background notice for an idle session of this
    runtime starts a follow-up run by itself (an always-on agent), at most
    `max_wakeups` times in a row before a user turn. Two runtimes never
    share anything.
    """

    def __init__(
        self,
        store: SessionStore | str | None = None,
        *,
        models: Mapping[str, Model] | None = None,
        tools: Mapping[str, Tool] | Iterable[Tool] | None = None,
        background: BackgroundService | None = None,
        wake_on_notice: bool = False,
        max_wakeups: int = 8,
    ) -> None:
        self.store: SessionStore = open_store(store)
        self._models: dict[str, Model] = dict(models or {})
        self.tools: dict[str, Tool] = (
            dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools or ()}
        )
        self._background = background
        self.wake_on_notice = wake_on_notice
        self.max_wakeups = max_wakeups
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        # Stop signals of children running in this process, for stop_agent.
        self._live_children: dict[str, StopSignal] = {}
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._wake_tasks: set[asyncio.Task[Any]] = set()

    @property
    def background(self) -> BackgroundService:
        """Background work (activity registry, notice inbox) on this runtime's backend."""
        if self._background is None:
            from .background.service import BackgroundService

            self._background = BackgroundService.for_store(self.store, runtime=self)
        return self._background

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop background work this runtime started and release the store."""
        for task in list(self._wake_tasks):
            task.cancel()
        await asyncio.gather(*self._wake_tasks, return_exceptions=True)
        if self._background is not None:
            await self._background.close()
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
        agent: Agent,
        *,
        session_id: str | None = None,
        parent_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Session:
        """A new, empty session for `agent` in the store."""
        sid = session_id or uuid.uuid4().hex
        await self.store.create(SessionMeta(sid, agent.name, parent_id, 0.0, dict(metadata or {})))
        return Session(self, sid, agent)

    async def open_session(self, session_id: str, agent: Agent) -> Session:
        """An existing session (raises `SessionNotFound`), its log loaded."""
        await self.store.get(session_id)
        session = Session(self, session_id, agent)
        await session._sync()
        return session

    def _on_notice(self, session_id: str) -> None:
        """A background notice was written for the session (in this process)."""
        self._notify(session_id)
        if not self.wake_on_notice:
            return
        session = self._sessions.get(session_id)
        if session is None or session._running or session._wakeups >= self.max_wakeups:
            # A running run delivers it at its next boundary; past the limit,
            # it waits for the next run.
            return
        session._wakeups += 1
        task = asyncio.get_running_loop().create_task(self._wake(session))
        self._wake_tasks.add(task)
        task.add_done_callback(self._wake_tasks.discard)

    async def _wake(self, session: Session) -> None:
        try:
            await session._start(None, None, False, "")(None)
        except TaskloomError:
            pass  # a run started meanwhile; it delivers the notice

    def _notify(self, session_id: str) -> None:
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


class Session:
    """A persistent conversation of one agent; see the module docstring."""

    def __init__(self, runtime: Runtime, session_id: str, agent: Agent) -> None:
        self.runtime = runtime
        self.id = session_id
        self.agent = agent
        self.log = SessionLog()
        self._running = False
        self._wakeups = 0
        self._specs: tuple[ToolSpec, ...] | None = None
        # Set while a lease holder (a background child's worker) writes: every
        # append carries it, and the store refuses it once the lease moved on.
        self.fence: Fence | None = None
        runtime._sessions[session_id] = self

    def __repr__(self) -> str:
        return f"Session({self.id!r}, agent={self.agent.name!r})"

    # ------------------------------------------------------------ derived state

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The agent's tools by name."""
        return self.agent.tool_map

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about the agent's tools (built once per session)."""
        if self._specs is None:
            self._specs = tuple(t.spec for t in self.agent.tools)
        return self._specs

    @property
    def model(self) -> Model:
        """The model the next request goes to (the persisted choice, else the agent's)."""
        spec = self.log.model_spec
        if spec is not None:
            agent_model = self.agent.model
            if not isinstance(agent_model, str) and agent_model.spec == spec:
                return agent_model
            return self.runtime.resolve_model(spec)
        return self.runtime.resolve_model(self.agent.model)

    @property
    def settings(self) -> ModelSettings:
        """The agent's settings with the session's persisted reasoning choice."""
        base = self.agent.settings
        if not self.log.reasoning_set:
            return base
        return ModelSettings(
            base.temperature, base.top_p, base.max_tokens, base.stop, self.log.reasoning, base.extra
        )

    # ------------------------------------------------------------ the log

    async def _sync(self) -> None:
        """Fold in entries other tasks or processes appended since our last look."""
        for entry in await self.runtime.store.load(self.id, after=self.log.position):
            self.log.apply(entry)

    async def _append(self, entry: Entry, message: Message | None = None) -> int:
        position = await self.runtime.store.append(self.id, entry, fence=self.fence)
        if position == self.log.position + 1:
            self.log.apply(entry, message, position)
        else:
            # Someone else appended in between: read the gap (ours included).
            await self._sync()
        return position

    async def _append_message(
        self,
        message: Message,
        run_id: str | None,
        *,
        delivered: Delivery | None = None,
        folds: list[int] | None = None,
    ) -> int:
        data: dict[str, Any] = {"message": message.to_dict()}
        if delivered is not None:
            data["delivered"] = {"text": delivered.text, "ids": list(delivered.ack_ids)}
        if folds:
            data["folds"] = folds
        return await self._append(Entry(EntryKind.MESSAGE, data, run_id), message)

    async def _repair_interrupted(self, run_id: str) -> None:
        """Give calls cut off by a crash or cancellation their one result."""
        open_calls = self.log.open_calls()
        if open_calls and not any(c.id in self.log.requests for c in open_calls):
            await self._append_message(interrupted_results(open_calls), run_id)

    async def _request_approval(self, call: ToolCall, run_id: str) -> None:
        data = {
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "hash": arguments_digest(call.arguments),
        }
        await self._append(Entry(EntryKind.APPROVAL_REQUEST, data, run_id))

    async def entries(self) -> list[Entry]:
        """Every entry of this session's log, in order."""
        await self._sync()
        return list(self.log.entries)

    async def transcript(self, include_children: bool = False) -> list[Message]:
        """The conversation; with `include_children`, each child's messages
        follow its link, tagged with its origin."""
        await self._sync()
        if not include_children:
            return list(self.log.messages)
        return await _transcript_with_children(self.runtime.store, list(self.log.entries), "")

    # ------------------------------------------------------------ running

    def _start(
        self, user: Message | None, options: RunOptions | None, resume: bool, origin: str
    ) -> Callable[[Callable[[Event], None] | None], Any]:
        async def start(emit: Callable[[Event], None] | None) -> RunResult:
            if self._running:
                raise TaskloomError(f"session {self.id} already has a run in progress")
            self._running = True
            if user is not None:
                self._wakeups = 0  # a user turn ends a chain of wake-ups
            try:
                return await RunLoop(self, options, emit, origin).run(user, resume=resume)
            finally:
                self._running = False

        return start

    async def run(
        self,
        input: str | Message | None = None,
        *,
        options: RunOptions | None = None,
        emit: Callable[[Event], None] | None = None,
        origin: str = "",
    ) -> RunResult:
        """Append `input` as a user turn and run the loop to an end status.

        `emit` receives every event as it happens (it must not block);
        `stream` is the iterator form.
        """
        return await self._start(_as_user(input), options, False, origin)(emit)  # type: ignore[no-any-return]

    def stream(
        self, input: str | Message | None = None, *, options: RunOptions | None = None
    ) -> RunStream:
        """Run like `run`, yielding events; `stream.result` holds the result after."""
        return RunStream(self._start(_as_user(input), options, False, ""))

    async def resume(
        self,
        *,
        options: RunOptions | None = None,
        emit: Callable[[Event], None] | None = None,
    ) -> RunResult:
        """Continue a run parked for approval: approved calls run, denied ones
        get an error result carrying the note, then the loop goes on. Raises
        `ApprovalsMissing` if some parked call has no decision yet."""
        return await self._start(None, options, True, "")(emit)  # type: ignore[no-any-return]

    def stream_resume(self, *, options: RunOptions | None = None) -> RunStream:
        """`resume`, yielding events."""
        return RunStream(self._start(None, options, True, ""))

    # ------------------------------------------------------------ decisions

    async def approve(self, call_id: str, note: str | None = None) -> None:
        """Approve a parked call (write-once; see `taskloom.loop.approvals`)."""
        await self._decide(call_id, True, note)

    async def deny(self, call_id: str, note: str | None = None) -> None:
        """Deny a parked call; the model gets an error result with the note."""
        await self._decide(call_id, False, note)

    async def _decide(self, call_id: str, approved: bool, note: str | None) -> None:
        await self._sync()
        request = self.log.requests.get(call_id)
        if request is None:
            raise TaskloomError(f"session {self.id} has no approval request for call {call_id!r}")
        existing = self.log.decisions.get(call_id)
        if existing is not None:
            _check_same(existing, approved, call_id)
            return
        await self._append(
            Entry(
                EntryKind.APPROVAL_DECISION,
                {"call_id": call_id, "approved": approved, "note": note, "hash": request["hash"]},
            )
        )
        # Another process may have decided first: the log order says who won.
        _check_same(self.log.decisions[call_id], approved, call_id)

    async def steer(self, text: str) -> None:
        """Fold `text` in as a user turn at the next round boundary (of the
        running run, or the next run). Works from any process sharing the store."""
        if not text:
            raise ValueError("steer needs non-empty text")
        await self.runtime.store.append(self.id, Entry(EntryKind.STEER, {"text": text}))
        self.runtime._notify(self.id)

    async def request_stop(self, reason: str | None = None) -> None:
        """Ask the session's running run to stop at its next boundary, from any
        process sharing the store (the run ends STOPPED; later runs are unaffected)."""
        await self.runtime.store.append(self.id, Entry(EntryKind.STOP_REQUEST, {"reason": reason}))
        self.runtime._notify(self.id)

    async def set_model(self, model: Model | str) -> None:
        """Use another model from the next request on; persisted on the session."""
        if isinstance(model, str):
            spec = model
        else:
            spec = model.spec
            self.runtime._models[spec] = model
        await self._append(Entry(EntryKind.MODEL_CHANGE, {"model": spec, "model_changed": True}))

    async def set_reasoning(self, reasoning: ReasoningOptions | None) -> None:
        """Set (or clear, with None) reasoning options; persisted on the session."""
        await self._append(
            Entry(
                EntryKind.MODEL_CHANGE,
                {
                    "reasoning": reasoning.to_dict() if reasoning else None,
                    "reasoning_changed": True,
                    "model_changed": False,
                },
            )
        )


def _check_same(existing: Mapping[str, Any], approved: bool, call_id: str) -> None:
    if bool(existing.get("approved")) != approved:
        first = "approved" if existing.get("approved") else "denied"
        raise ApprovalConflict(f"call {call_id!r} was already {first}")


def _as_user(input: str | Message | None) -> Message | None:
    if input is None or isinstance(input, Message):
        return input
    return Message.user(input)


_LABEL_UNSAFE = re.compile(r"[#>\s]+")


def origin_label(name: str, child_session_id: str, parent_origin: str = "") -> str:
    """`label#<first 8 of child id>`, nested origins joined with `>`."""
    label = _LABEL_UNSAFE.sub("-", name).strip("-")[:32] or "agent"
    own = f"{label}#{child_session_id[:8]}"
    return f"{parent_origin}>{own}" if parent_origin else own


async def _transcript_with_children(
    store: SessionStore, entries: list[Entry], origin: str
) -> list[Message]:
    from dataclasses import replace

    out: list[Message] = []
    log = SessionLog()
    for entry in entries:
        before = len(log.messages)
        log.apply(entry)
        for m in log.messages[before:]:
            out.append(replace(m, origin=origin) if origin else m)
        if entry.kind == EntryKind.SUBAGENT:
            child_id = str(entry.data["child_session_id"])
            child_origin = origin_label(str(entry.data.get("name", "agent")), child_id, origin)
            child_entries = await store.load(child_id)
            out.extend(await _transcript_with_children(store, child_entries, child_origin))
    return out
