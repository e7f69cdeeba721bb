"""Session: a persistent conversation of one agent, a cache of its log."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..agent import Agent, AgentDepsT, AgentOutputT
from ..backends import BudgetLedger, Fence, Lease, SessionStore, holder_is_gone, holder_name
from ..entries import (
    ApprovalDecision,
    CompactionEntry,
    Entry,
    InputAnswer,
    ModelChange,
    Payload,
    SubagentLink,
)
from ..errors import (
    ApprovalConflict,
    ApprovalsMissing,
    CorruptEntry,
    SessionBusy,
    StaleLeaseError,
    StoreError,
    UsageError,
)
from ..events import Event, origin_label
from ..loop import (
    NoticesPort,
    PendingCall,
    RunLoop,
    RunOptions,
    RunResult,
    RunStream,
    SessionLog,
    encode_snapshot,
    read_snapshot,
    summary_message,
)
from ..messages import Message
from ..models import Model, ModelSettings, ReasoningOptions
from ..results import PendingInput, ToolSpec
from ..tools import ToolCatalog

if TYPE_CHECKING:
    from ..tools import Tool

from ._fork import fork_session
from ._input import (
    check_answer,
    ended_activities,
    pending,
    pending_inputs,
    read_inputs,
    same_answer,
)
from ._lease import HeldLease, session_lease_key

if TYPE_CHECKING:
    from ._runtime import RunQueue, Runtime

__all__ = ["Session"]

logger = logging.getLogger("taskloom")

T = TypeVar("T")


class Session(Generic[AgentDepsT, AgentOutputT]):
    """A persistent conversation of one agent; see the module docstring.

    Its runs take the agent's `deps` (`run(..., deps=...)`, also `stream`,
    `resume`): per run, in memory only, never written to the log. With
    `new`, its first read of the log looks for no snapshot (a session just
    created, or one known to be short) and folds every entry.
    """

    def __init__(
        self,
        runtime: Runtime,
        session_id: str,
        agent: Agent[AgentDepsT, AgentOutputT],
        *,
        new: bool = False,
    ) -> None:
        self.runtime = runtime
        self.id = session_id
        self.agent = agent
        self.log = SessionLog()
        # The first sync of an existing session starts from its snapshot; a
        # session just created has none to look for.
        self._restorable = not new
        self._held: HeldLease | None = None
        # (position, monotonic time) of an own append known to follow every
        # entry before it; see sync(fresh=).
        self._whole: tuple[int, float] | None = None
        self._running = False
        self._wakeups = 0
        self._catalog: ToolCatalog | None = None
        self._tools = runtime.tools_for(agent)
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
        return self.runtime.background

    @property
    def budgets(self) -> BudgetLedger:
        """Where the runtime keeps delegation trees' budgets, as the loop reaches them."""
        return self.runtime.budgets

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools this session offers, by name: the agent's own, and its
        toolsets' as of the last `refresh_tools()`."""
        catalog = self._catalog
        return self._tools if catalog is None else catalog.tools

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about the tools (rebuilt only when they change)."""
        catalog = self._catalog
        if catalog is not None:
            return catalog.specs
        return self.agent.tool_specs

    async def refresh_tools(self) -> None:
        """Re-read the agent's toolsets (an MCP server's current tools); the
        loop calls it at round boundaries, so a tool list never changes
        within a round. Free for an agent without toolsets."""
        toolsets = self.agent.toolsets
        if not toolsets:
            return
        catalog = self._catalog
        if catalog is None:
            catalog = self.runtime.catalog_for(self.agent)
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

    async def sync(self, *, fresh: float = 0.0) -> None:
        """Fold in entries other tasks or processes appended since our last look.

        With `fresh` (seconds), the read is skipped when this Session's own
        append of the log's last entry landed where expected (nobody wrote
        in between) less than `fresh` seconds ago. Raises `CorruptEntry`
        naming the session and position of an entry that cannot be read.
        """
        if fresh and self._whole is not None:
            position, at = self._whole
            if position == self.log.position and time.monotonic() - at < fresh:
                return
        read_at = time.monotonic()
        restored = False
        if self._restorable:
            self._restorable = False
            restored = self.log.position == 0 and await self._restore()
        if not restored:
            self._fold(await self.runtime.store.load(self.id, after=self.log.position))
        self._whole = (self.log.position, read_at)

    def _fold(self, entries: list[Entry]) -> None:
        for entry in entries:
            try:
                self.log.apply(entry)
            except CorruptEntry as exc:
                raise CorruptEntry(f"session {self.id!r}: {exc}") from None

    async def _restore(self) -> bool:
        """Start the log from the session's snapshot and the entries after it;
        False (nothing done) when there is no usable snapshot."""
        snapshots = self.runtime.snapshots
        if snapshots is None:
            return False
        snapshot = read_snapshot(await snapshots.read(self.id))
        if snapshot is None:
            return False
        # From the snapshot's last entry on: it proves the log is the one the
        # snapshot was made from.
        entries = await self.runtime.store.load(self.id, after=snapshot.position - 1)
        if not entries or not snapshot.matches(entries[0]):
            return False
        try:
            log = snapshot.restore()
        except (KeyError, TypeError, ValueError, AttributeError, CorruptEntry):
            logger.warning("session %s: ignoring an unreadable snapshot", self.id)
            return False
        self.log = log
        self._fold(entries[1:])
        return True

    async def _snapshot(self, fence: Fence) -> None:
        """Write a snapshot row of the log as it is now (the lease holder only)."""
        snapshots = self.runtime.snapshots
        if snapshots is None:
            return
        log = self.log
        position, since = log.position, log.snapshot_at
        data = encode_snapshot(log)
        try:
            await snapshots.write(self.id, position, data, fence=fence)
            if since == 0:
                # A chain starting afresh: the rows before it are dead weight.
                await snapshots.prune(self.id, position)
        except (StoreError, StaleLeaseError) as exc:
            # A cache: the log stays correct without it; the next one retries
            # (and a writer that lost the lease learns it at its next append).
            logger.warning("session %s: could not write a snapshot: %s", self.id, exc)
            return
        log.snapshot_at = position

    async def append(self, entry: Entry, message: Message | None = None) -> int:
        """Append `entry` and fold it in; returns its position.

        While this Session holds the session's lease (it is running), the
        append carries the lease's fencing token: the store refuses it with
        `StaleLeaseError` once another writer took the session over.
        """
        expected = self.log.position + 1
        if entry.position != expected or not entry.created_at:
            entry = Entry(
                entry.kind, entry.data, entry.run_id, expected, entry.created_at or time.time()
            )
        return await self._append_placed(entry, message)

    async def record(
        self, payload: Payload, run_id: str | None = None, message: Message | None = None
    ) -> int:
        """Append a typed entry (see `append`; `message`: the payload's message)."""
        entry = Entry(payload.KIND, payload.to_data(), run_id, self.log.position + 1, time.time())
        return await self._append_placed(entry, message)

    async def _append_placed(self, entry: Entry, message: Message | None) -> int:
        # The entry is placed where it will most likely land, so neither the
        # store nor the log has to copy it again; a store that puts it
        # elsewhere says so by the position it returns.
        held = self._held
        fence = held.fence if held is not None else None
        position = await self.runtime.store.append(self.id, entry, fence=fence)
        log = self.log
        if position == entry.position:
            log.apply(entry, message)
            # The log is whole up to here: the store put this entry right
            # after the last one this Session knew.
            self._whole = (position, time.monotonic())
        else:
            # Someone else appended in between: read the gap (ours included).
            await self.sync()
        every = self.runtime.snapshot_every
        if fence is not None and every and log.position - log.snapshot_at >= every:
            await self._snapshot(fence)
        return position

    async def entries(self) -> list[Entry]:
        """Every entry of this session's log, in order."""
        await self.sync()
        log = self.log
        if log.base:
            # Restored from a snapshot: the older entries are only in the store.
            return await self.runtime.store.load(self.id)
        return list(log.entries)

    async def transcript(
        self, include_children: bool = False, *, mark_compactions: bool = False
    ) -> list[Message]:
        """The whole conversation, every message the log holds (compaction only
        shortens what requests send). With `include_children`, each child's
        messages follow its link, tagged with its origin; with
        `mark_compactions`, each compaction's summary stands where it was
        made, as a user message with origin `"compaction"`."""
        if not include_children and not mark_compactions:
            await self.sync()
            return list(self.log.messages)
        store = self.runtime.store if include_children else None
        return await _transcript(store, await self.entries(), "", mark_compactions)

    async def fork(
        self,
        at: int | Message | None = None,
        *,
        round: int | None = None,
        runtime: Runtime | None = None,
        agent: Agent[Any, Any] | None = None,
        session_id: str | None = None,
    ) -> Session[Any, Any]:
        """A new session whose history is this one's up to a cut; this one is
        only read.

        The cut is `at` (keep entries up to that position, or up to the entry
        holding that message), or `round` (keep what came before round
        `round`'s assistant message, counted from 1 over the session, so the
        model answers that round afresh), or the whole log. The fork starts
        at rest, never parked, with no leases, background work or queued
        jobs; calls the cut left open get one result each (see
        `taskloom.runtime.fork_session`). It lives in `runtime`'s store (this
        one's by default), runs `agent` (this one's by default), and names
        its origin in its metadata under `"forked_from"`.
        """
        await self.sync()
        if isinstance(at, Message):
            # The very object, found in this Session's log (the store's copy
            # is another object, equal to every message that reads the same).
            log = self.log
            same = [p for m, p in zip(log.messages, log.positions, strict=True) if m is at]
            if same:
                at = same[0]
        target = self.runtime if runtime is None else runtime
        chosen = self.agent if agent is None else agent
        meta = await fork_session(
            self.runtime.store,
            self.id,
            at,
            round=round,
            into=target.store,
            new_id=session_id,
            agent=chosen.name,
        )
        return Session(target, meta.id, chosen, new=True)

    async def pending(self) -> list[PendingCall]:
        """The calls of the parked turn that wait for a decision, with their full
        arguments (empty when the session is not parked); then the calls its
        children escalated to it and nobody decided yet (`on_approval=
        "escalate"`), each naming the child (`session_id`, `origin`)."""
        await self.sync()
        calls = self.log.pending_calls(undecided=True)
        for child_id, escalated in self.log.escalated.items():
            child_log = await _folded(self.runtime.store, child_id)
            calls += child_log.pending_calls(
                undecided=True, session_id=child_id, origin=origin_label(escalated.name, child_id)
            )
        return calls

    # ------------------------------------------------------------ the lease

    def hold(self, *, wait: bool | float = False, ttl: float | None = None) -> _Hold:
        """Hold the session's lease for an `async with` block: this Session
        becomes the session's one writer, and its appends are fenced.

        Raises `SessionBusy` when another writer holds it; with `wait=True`
        (or a number of seconds) waits for it instead. A holder on this
        machine that is known to be dead is taken over at once. Re-entrant
        for this Session object: an inner hold shares the outer lease. `ttl`
        overrides the runtime's `lease_ttl` for this hold.
        """
        return _Hold(self, wait, ttl)

    async def _acquire(self, wait: bool | float, ttl: float) -> Lease:
        leases = self.runtime.store.leases
        key = session_lease_key(self.id)
        me = holder_name()
        loop = asyncio.get_running_loop()
        # Waiting is settled on the first refusal: most acquisitions succeed at once.
        give_up: float | None = None
        delay = 0.02
        while True:
            lease = await leases.acquire(key, me, ttl)
            if lease is not None:
                return lease
            if give_up is None:
                give_up = math.inf if wait is True else loop.time() + float(wait)
            current = await leases.current(key)
            if current is not None and holder_is_gone(current.holder):
                lease = await leases.take_over(current, me, ttl)
                if lease is not None:
                    logger.info("session %s: took over the lease of %s", self.id, current.holder)
                    return lease
            if current is None:
                continue  # released between the two calls: try again at once
            if loop.time() >= give_up:
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
            hold = self.hold(wait=wait)
            async with hold as held:
                if user is not None:
                    self._wakeups = 0  # a user turn ends a chain of wake-ups
                undo = held.on_lost(lambda: options.stop.set("the session was taken over"))
                loop = RunLoop(self, options, emit, origin, self.runtime.observer, deps=deps)
                # Only a lease this run took is released by its bound; an
                # outer hold's release waits as that hold's exit always does.
                hold.release_by = loop.returns_by
                try:
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
        origin: str = "",
        wait: bool | float = False,
    ) -> RunResult[AgentOutputT]:
        """Continue a run parked for approval: approved calls run, denied ones
        get an error result carrying the note, then the loop goes on. Raises
        `ApprovalsMissing` if some parked call has no decision yet. The
        parked run's deps were never stored: pass them again. `origin` tags
        its events as `run`'s does."""
        self.agent.check_deps(deps)
        return await self._run(
            None, options, resume=True, origin=origin, emit=emit, wait=wait, deps=deps
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

    # ------------------------------------------------------------ queued runs

    def _run_queue(self) -> RunQueue:
        queue = self.runtime.queue
        if queue is None:
            raise UsageError(
                "this runtime has no queue: pass Runtime(queue=taskloom.distributed.WorkQueue(url))"
            )
        return queue

    async def submit(self, input: str | None = None, *, options: RunOptions | None = None) -> str:
        """Queue a run of the session for a worker and return its job id at once.

        `input` is written to the log now, as steering: durable before the job
        exists, folded in as the user turn of the next run (a run already in
        flight takes it at its next boundary). A second `submit` while one is
        queued joins that job. Without input the job runs the session even if
        nothing new was written. Only limits cross the queue in `options`
        (rounds, requests, tool calls, tokens, deadline), and no `deps`: the
        worker's tools see `ctx.deps` None. `wait()` awaits the end.
        """
        queue = self._run_queue()
        await self.sync()
        if self.log.parked():
            raise UsageError(
                f"session {self.id} is awaiting approval: approve or deny, then submit_resume()"
            )
        if input is not None:
            await self.steer(input)
        return await queue.submit_run(
            self.id,
            reason="submit",
            explicit=input is None,
            options=options,
            traceparent=self.runtime.observer.current_traceparent(),
        )

    async def submit_resume(self, *, options: RunOptions | None = None) -> str:
        """Queue the resume of a parked run whose calls are all decided; returns the job id."""
        queue = self._run_queue()
        undecided = [c.id for c in await self.pending()]
        if not self.log.parked():
            raise UsageError(f"session {self.id} has no turn parked for approval to resume")
        if undecided:
            raise ApprovalsMissing(undecided)
        return await queue.submit_run(
            self.id,
            reason="resume",
            explicit=False,
            options=options,
            traceparent=self.runtime.observer.current_traceparent(),
        )

    async def wait(self, timeout: float | None = None) -> RunResult:
        """The result of the session's latest run, once no job of it is queued or
        running (from any process; woken by the database, not by polling): the
        `RunResult` the run returned in its worker, read from the log (see
        `SessionLog.finished_result`).

        A run a worker could not start (e.g. it lacks the session's agent) is
        FAILED with the error it wrote to the log. Raises `TimeoutError` after
        `timeout` seconds, `UsageError` when the session never finished a run.
        """
        await self._run_queue().wait_idle(self.id, timeout)
        await self.sync()
        result = self.log.finished_result(self.id, self.agent)
        if result is None:
            raise UsageError(f"session {self.id} has not finished a run yet")
        return result

    def latest_result(self) -> RunResult | None:
        """The result of the session's latest finished run, as the run returned
        it, from the log as last synced (`sync()` first to see other
        processes' runs); None before any run finished."""
        return self.log.finished_result(self.id, self.agent)

    # ------------------------------------------------------------ decisions

    async def approve(
        self, call_id: str, note: str | None = None, *, session_id: str | None = None
    ) -> None:
        """Approve a call of the parked turn: write-once, and bound to the turn
        and the call's exact arguments, so a decision never applies to another
        call or to changed arguments (see "Durability and approvals" in the docs).

        A call a child escalated to this session is decided in the child's log
        (`session_id` names the child when the call id is not enough); once
        none of the child's calls waits, the child is resumed (see
        `BackgroundService.decided`)."""
        await self._decide(call_id, True, note, session_id)

    async def deny(
        self, call_id: str, note: str | None = None, *, session_id: str | None = None
    ) -> None:
        """Deny a call of the parked turn (or one a child escalated, as for
        `approve`); the model gets an error result with the note."""
        await self._decide(call_id, False, note, session_id)

    async def _decide(
        self, call_id: str, approved: bool, note: str | None, session_id: str | None = None
    ) -> None:
        await self.sync()
        target = await self._deciding(call_id, session_id)
        own = target == self.id
        log = self.log if own else await _folded(self.runtime.store, target)

        async def resync() -> None:
            if own:
                await self.sync()
                return
            for entry in await self.runtime.store.load(target, after=log.position):
                log.apply(entry)

        request = log.request(call_id)
        if request is None:
            raise UsageError(
                f"session {target} has no approval request for call {call_id!r} in its parked turn"
            )
        existing = log.decision(call_id)
        if existing is not None:
            _check_same(existing, approved, call_id)
            return
        decision = ApprovalDecision(call_id, approved, request.hash, log.turn, note)
        # Decisions need no lease: anyone may decide while the run is parked.
        await self.runtime.store.append(target, Entry.of(decision))
        await resync()
        # Another process may have decided first: the log order says who won.
        winner = log.decision(call_id)
        assert winner is not None
        _check_same(winner, approved, call_id)
        if not log.pending_calls(undecided=True):
            # Every call of the turn is decided: whoever runs the session's
            # kind of work may go on with it (a child escalated, say).
            await self.runtime.background.decided(target, self.agent.tool_map)

    async def _deciding(self, call_id: str, session_id: str | None) -> str:
        """Whose parked turn `call_id` is decided in: this session's, or a child's
        that escalated to it."""
        escalated = self.log.escalated
        if session_id is not None and session_id != self.id:
            if session_id not in escalated:
                raise UsageError(f"session {session_id} escalated no approval to session {self.id}")
            return session_id
        if session_id is not None or self.log.request(call_id) is not None or not escalated:
            return self.id
        found = [
            child_id
            for child_id in escalated
            if any(
                c.id == call_id
                for c in (await _folded(self.runtime.store, child_id)).pending_calls(undecided=True)
            )
        ]
        if len(found) > 1:
            raise UsageError(
                f"call {call_id!r} waits in {len(found)} children of session {self.id}: "
                f"name one with session_id= ({', '.join(found)})"
            )
        return found[0] if found else self.id

    # ------------------------------------------------------------ input

    async def pending_input(self) -> list[PendingInput]:
        """The questions the session's work asked a person and nobody answered
        yet (an MCP server asking for input during a task a call started),
        oldest first; read from the log, so from any process."""
        # The whole log, not the folded one: a snapshot may have left early
        # entries out of it.
        return pending_inputs(await self.runtime.store.load(self.id))

    async def answer(
        self,
        input_id: str,
        content: Mapping[str, Any] | None = None,
        *,
        action: str = "accept",
    ) -> None:
        """Answer a pending question: `content` (checked against the schema it
        asked for) with `action="accept"`, or `action="decline"` / `"cancel"`
        with none. Write-once, as approvals: the first answer in the log is
        the answer, the same again is a no-op, another raises
        `AnswerConflict`. The answer is written to the log; whoever polls the
        task (this process, another, or the session's next run) sends it to
        the server, and the task goes on."""
        entries = await self.runtime.store.load(self.id)
        asked, answered = read_inputs(entries)
        request = asked.get(input_id)
        if request is None:
            raise UsageError(f"session {self.id} asked no question {input_id!r}")
        question = pending(request)
        given = check_answer(question, action, content)
        existing = answered.get(input_id)
        if existing is not None:
            same_answer(existing, action, given)
            return
        if request.activity_id in ended_activities(entries):
            raise UsageError(f"the work that asked {input_id!r} ended: nobody waits for the answer")
        # Answers need no lease: anyone may answer while the task waits.
        await self.runtime.store.append(self.id, Entry.of(InputAnswer(input_id, action, given)))
        # Another process may have answered first: the log order says whose counts.
        after = entries[-1].position if entries else None
        _, answered = read_inputs(entries + await self.runtime.store.load(self.id, after=after))
        same_answer(answered[input_id], action, given)
        self.runtime.notify(self.id)

    async def steer(self, text: str) -> None:
        """Fold `text` in as a user turn at the next round boundary (of the
        running run, or the next run). Works from any process sharing the store."""
        await self.runtime.steer(self.id, text)

    async def request_stop(self, reason: str | None = None) -> None:
        """Ask the session's running run to stop at its next boundary, from any
        process sharing the store (the run ends STOPPED; later runs are unaffected)."""
        await self.runtime.request_stop(self.id, reason)

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


async def _folded(store: SessionStore, session_id: str) -> SessionLog:
    """Another session's log, folded (to read or decide its parked turn)."""
    return SessionLog.folded(await store.load(session_id))


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
    from ..loop import SessionPort

    def _is_port(session: Session[Any, Any]) -> SessionPort:
        return session


class _Hold:
    """`Session.hold()`: the lease for an `async with` block (re-entrant)."""

    __slots__ = ("_held", "_session", "_ttl", "_wait", "release_by")

    def __init__(self, session: Session[Any, Any], wait: bool | float, ttl: float | None) -> None:
        self._session = session
        self._wait = wait
        self._ttl = ttl
        self._held: HeldLease | None = None
        # Loop time past which the release, if this hold took the lease, does
        # not hold its caller up (a run with a deadline returns by then).
        self.release_by: float | None = None

    async def __aenter__(self) -> HeldLease:
        session = self._session
        if session._held is not None:
            return session._held  # an inner hold: the outer one releases
        ttl = session.runtime.lease_ttl if self._ttl is None else self._ttl
        lease = await session._acquire(self._wait, ttl)
        # The last holder may have written since this Session last looked.
        session._whole = None
        held = self._held = session._held = HeldLease(session, lease, ttl)
        return held

    async def __aexit__(self, *exc: object) -> None:
        held = self._held
        if held is not None:
            self._held = self._session._held = None
            await held.release(self.release_by)
