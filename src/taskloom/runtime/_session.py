"""Session: a persistent conversation of one agent, its verbs for the user.

What a run needs of the session is not here but in its parts, each the
loop's port for one concern: the session's `journal` (its log, a cache of
the store, and its fenced appends), its model choice (`SessionModel`) and
its tool board (`SessionTools`), handed to each run together as `RunPorts`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Generic

from .. import entries as log_entries
from .._lazy import LazyModule
from ..agent import Agent, AgentDepsT, AgentOutputT
from ..backends import Lease
from ..entries import Entry
from ..errors import ApprovalsMissing, SessionBusy, UsageError
from ..log import ended_activities, pending_input, pending_inputs, read_inputs
from ..log import transcript as read_transcript
from ..loop import RunOptions, RunStream
from ..loop.ports import RunLoop, RunPorts, RunScope, new_run_id
from ..messages import Message
from ..models import Model, ReasoningOptions
from ..results import PendingCall, PendingInput, RunResult, RunStatus
from ._decisions import (
    check_answer,
    check_same,
    folded,
    requested,
    resume_decided,
    same_answer,
)
from ._fork import fork_session
from ._journal import SessionJournal
from ._run_queue import RunDemand
from ._session_lease import SessionHold
from ._session_parts import SessionModel, SessionTools

if TYPE_CHECKING:
    from .. import events
    from ..events import Event
    from ..tools import Tool
    from ._run_queue import RunQueue
    from ._runtime import Runtime
else:
    # Imported for a child's escalated calls: a plain run makes no event.
    events = LazyModule("taskloom.events")

GO_ON_WAIT = 30.0
"""Seconds a decision that leaves nothing to decide waits for the session's
lease to resume its run (the run that parked it may hold it a moment more)."""


class Session(Generic[AgentDepsT, AgentOutputT]):
    """A persistent conversation of one agent; see the module docstring.

    Its runs take the agent's `deps` (`run(..., deps=...)`, also `stream`,
    `resume`): per run, in memory only, never written to the log. `journal`
    is the session's log as this object has folded it. With `new`, its
    first read of the log looks for no snapshot (a session just created, or
    one known to be short) and folds every entry.
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
        self.journal = SessionJournal(runtime, session_id, new=new)
        self._model = SessionModel(runtime, agent, self.journal)
        self._tools = SessionTools(runtime, agent)
        self._run_ports: RunPorts | None = None
        self._running = False
        self._wakeups = 0
        # The resume a decision started (`resume()` joins it).
        self._going_on: asyncio.Task[RunResult | None] | None = None
        runtime.register_session(self)

    def __repr__(self) -> str:
        return f"Session({self.id!r}, agent={self.agent.name!r})"

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools this session offers, by name: the agent's own, and its
        toolsets' as its last run read them (an MCP server's, say)."""
        return self._tools.tools

    async def run(
        self,
        input: str | Message | None = None,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        emit: Callable[[Event], None] | None = None,
        origin: str = "",
        wait: float | None = None,
    ) -> RunResult[AgentOutputT]:
        """Append `input` as a user turn and run the loop to an end status.

        `deps` reach the tools as `ctx.deps` (see `Agent`). `emit` receives
        every event as it happens (it must not block); `stream` is the
        iterator form. Raises `SessionBusy` if another run holds the session,
        unless `wait` (seconds, `math.inf` for as long as it takes) says to
        wait for it.
        """
        self.agent.check_deps(deps)
        return await self._run(
            _as_user(input), options=options, emit=emit, origin=origin, wait=wait, deps=deps
        )

    def stream(
        self,
        input: str | Message | None = None,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        wait: float | None = None,
    ) -> RunStream[AgentOutputT]:
        """Run like `run`, yielding events; `stream.result` holds the result after."""
        self.agent.check_deps(deps)
        user = _as_user(input)
        return RunStream(
            lambda emit: self._run(user, options=options, emit=emit, wait=wait, deps=deps)
        )

    async def resume(
        self,
        *,
        deps: AgentDepsT = None,  # type: ignore[assignment]
        options: RunOptions | None = None,
        emit: Callable[[Event], None] | None = None,
        origin: str = "",
        wait: float | None = None,
    ) -> RunResult[AgentOutputT]:
        """Continue a run parked for approval: approved calls run, denied ones
        get an error result carrying the note, then the loop goes on. Raises
        `ApprovalsMissing` if some parked call has no decision yet. The
        parked run's deps were never stored: pass them again. `emit` and
        `origin` are `run`'s; to iterate over the events instead, wrap it:
        `RunStream(lambda emit: session.resume(emit=emit))`.

        A decision through this object that left nothing to decide in a turn
        parked on a child's escalated calls resumed the run already (see
        `approve`): the first `resume()` after it returns that run's result."""
        self.agent.check_deps(deps)
        going_on, self._going_on = self._going_on, None
        if going_on is not None and (result := await going_on) is not None:
            return result
        return await self._run(
            None, resume=True, options=options, emit=emit, origin=origin, wait=wait, deps=deps
        )

    async def _run(
        self,
        user: Message | None,
        *,
        resume: bool = False,
        options: RunOptions | None = None,
        emit: Callable[[Event], None] | None = None,
        origin: str = "",
        wait: float | None = None,
        deps: object = None,
    ) -> RunResult[AgentOutputT]:
        if self._running:
            raise SessionBusy(self.id, "a run of this Session object")
        options = options if options is not None else RunOptions()
        self._running = True
        # Counted from before the lease to after its release: a cancel
        # (`Runtime.cancel_runs`) returns once the session is free again.
        ended = self.runtime.run_started(self.id, options.stop)
        try:
            hold = self.hold(wait=wait)
            async with hold as held:
                scope = RunScope(self.id, new_run_id(), origin, emit)
                agent, ports, run_options = self.agent, self._ports(), options
                serving: AbstractContextManager[None] = nullcontext()
                if (
                    options.memory is not None
                    or agent.memory is not None
                    or options.parent_memory is not None
                ):
                    # Loaded for a run with memory only. Read within the
                    # lease: the blocks as the store holds them now.
                    from ._memory_run import with_memory

                    agent, ports, run_options, serving = await with_memory(
                        self.runtime, agent, ports, options, scope.run_id
                    )
                undo = held.on_lost(lambda: options.stop.set("the session was taken over"))
                loop = RunLoop(agent, ports, scope, run_options, deps)
                # Only a lease this run took is released by its bound; an
                # outer hold's release waits as that hold's exit always does.
                hold.release_by = loop.returns_by
                if user is not None:
                    self._wakeups = 0  # a user turn ends a chain of wake-ups
                try:
                    with serving:
                        result = await loop.run(user, resume=resume)
                finally:
                    undo()
                return await self._parked_on_children(result)
        finally:
            self._running = False
            ended()

    def _ports(self) -> RunPorts:
        ports = self._run_ports
        if ports is None:
            # Made on the first run: the runtime makes its background service
            # and observer on first use.
            runtime = self.runtime
            ports = self._run_ports = RunPorts(
                self.journal,
                self._model,
                self._tools,
                runtime.background,
                runtime.budgets,
                runtime.observer,
            )
        return ports

    def hold(
        self, *, wait: float | None = None, ttl: float | None = None, lease: Lease | None = None
    ) -> SessionHold:
        """Hold the session's lease for an `async with` block: this Session
        becomes the session's one writer, and its appends are fenced.

        Raises `SessionBusy` when another writer holds it, after waiting up
        to `wait` seconds for it (None: not at all; `math.inf`: as long as
        it takes). A holder on this machine that is known to be dead is
        taken over at once. Re-entrant for this Session object: an inner
        hold shares the outer lease. `ttl` overrides the runtime's
        `lease_ttl` for this hold. `lease`, the session's lease already taken
        (the follower of a background child holds it), is used rather than
        taken; it is renewed while held, and its taker releases it.
        """
        runtime = self.runtime
        lease_ttl = runtime.lease_ttl if ttl is None else ttl
        return SessionHold(self.journal, runtime.store.leases, wait, lease_ttl, lease)

    async def entries(self) -> list[Entry]:
        """Every entry of this session's log, in order."""
        return await self.journal.entries()

    async def transcript(
        self, include_children: bool = False, *, mark_compactions: bool = False
    ) -> list[Message]:
        """The whole conversation, every message the log holds (compaction only
        shortens what requests send). With `include_children`, each child's
        messages follow its link, tagged with its origin; with
        `mark_compactions`, each compaction's summary stands where it was
        made, as a user message with origin `"compaction"`."""
        if not include_children and not mark_compactions:
            await self.journal.sync()
            return list(self.journal.log.messages)
        load = self.runtime.store.load if include_children else None
        return await read_transcript(
            await self.entries(), load=load, mark_compactions=mark_compactions
        )

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
        model answers that round afresh), or the whole log; positions and
        rounds are whole numbers of at least 1 (else `UsageError`). The
        fork's history is exactly this one's up to the cut, then a link to
        it: nothing is pending in it, and it has no leases, background work
        or queued jobs; its first run answers the calls the cut left open as
        a resume would (see `taskloom.runtime.fork_session`). It lives in
        `runtime`'s store (this one's by default), runs `agent` (this one's
        by default), and names its origin in its metadata under
        `"forked_from"`.
        """
        await self.journal.sync()
        if isinstance(at, Message):
            # The very object, found in this Session's log (the store's copy
            # is another object, equal to every message that reads the same).
            log = self.journal.log
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
        await self.journal.sync()
        calls = self.journal.log.undecided_calls()
        for child_id, escalated in self.journal.log.escalated.items():
            child_log = await folded(self.runtime.store, child_id)
            calls += child_log.undecided_calls(
                child_id, events.origin_label(escalated.name, child_id)
            )
        return calls

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
        await self.journal.sync()
        if self.journal.log.parked():
            raise UsageError(
                f"session {self.id} is awaiting approval: approve or deny, then submit_resume()"
            )
        if input is not None:
            await self.steer(input)
        demand = RunDemand.ALWAYS if input is None else RunDemand.IF_NEEDED
        return await self._submit(queue, demand, "submit", options)

    async def _submit(
        self, queue: RunQueue, demand: RunDemand, reason: str, options: RunOptions | None
    ) -> str:
        # Under the submit span (when traced): the job carries it, and the
        # worker's run continues that trace.
        observer = self.runtime.observer
        with observer.queued("submit", self.id):
            return await queue.submit_run(
                self.id,
                demand,
                reason=reason,
                options=options,
                traceparent=observer.current_traceparent(),
            )

    async def submit_resume(self, *, options: RunOptions | None = None) -> str:
        """Queue the resume of a parked run whose calls are all decided; returns the job id."""
        queue = self._run_queue()
        undecided = [c.id for c in await self.pending()]
        if not self.journal.log.parked():
            raise UsageError(f"session {self.id} has no turn parked for approval to resume")
        if undecided:
            raise ApprovalsMissing(undecided)
        return await self._submit(queue, RunDemand.IF_NEEDED, "resume", options)

    async def wait(self, timeout: float | None = None) -> RunResult:
        """The result of the session's latest run, once no job of it is queued or
        running (from any process; woken by the database, not by polling): the
        `RunResult` the run returned in its worker, read from the log (see
        `SessionLog.finished_result`).

        A run a worker could not start (e.g. it lacks the session's agent) is
        FAILED with the error it wrote to the log. Raises `TimeoutError` after
        `timeout` seconds, `UsageError` when the session never finished a run.
        """
        with self.runtime.observer.queued("wait", self.id) as watch:
            await self._run_queue().wait_idle(self.id, timeout)
            await self.journal.sync()
            watch.ran(self.journal.log.run_traceparent())
        result = self.journal.log.finished_result(self.id, self.agent)
        if result is None:
            raise UsageError(f"session {self.id} has not finished a run yet")
        return await self._parked_on_children(result)

    async def _parked_on_children(self, result: RunResult) -> RunResult:
        """`result`, whose `pending` are, for a turn parked on children's
        escalated calls (an inline escalation), those calls (`pending()`)."""
        if result.status is RunStatus.AWAITING_APPROVAL and self.journal.log.held_calls():
            return dataclasses.replace(result, pending=tuple(await self.pending()))
        return result

    async def approve(
        self, call_id: str, note: str | None = None, *, session_id: str | None = None
    ) -> None:
        """Approve a call of the parked turn: write-once, and bound to the turn
        and the call's exact arguments, so a decision never applies to another
        call or to changed arguments (see "Durability and approvals" in the docs).

        A call a child escalated to this session is decided in the child's log
        (`session_id` names the child when the call id is not enough); once
        none of the child's calls waits, the child is resumed (see
        `BackgroundService.decided`). When this session's turn is parked on
        that child (an inline escalation), its run goes on: queued with
        `Runtime(queue=...)`, else resumed in the background here if this
        object's agent offers the delegation (`resume_decided`), running the
        child on and then itself; `resume()` returns its result."""
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
        await self.journal.sync()
        target = await self._deciding(call_id, session_id)
        own = target == self.id
        log = self.journal.log if own else await folded(self.runtime.store, target)

        async def resync() -> None:
            if own:
                await self.journal.sync()
                return
            for entry in await self.runtime.store.load(target, after=log.position):
                log.apply(entry)

        request = log.request(call_id)
        earlier = None if request is not None or own else requested(log, call_id)
        if earlier is not None and earlier[1] is not None:
            # Decided in a turn the child has gone on from: the same decision
            # again is a no-op, another a conflict.
            check_same(earlier[1], approved, call_id)
            return
        if request is None:
            raise UsageError(
                f"session {target} has no approval request for call {call_id!r} in its parked turn"
            )
        existing = log.decision(call_id)
        if existing is not None:
            check_same(existing, approved, call_id)
            if not own and not log.undecided_calls():
                # The same decision again: a no-op, except that the child goes
                # on if whoever decided first could not make it (the hooks
                # leave alone a child that runs or has ended).
                await self.runtime.background.decided(target, self._tools.tools)
                await self._go_on(target)
            return
        decision = log_entries.ApprovalDecision(call_id, approved, request.hash, log.turn, note)
        # Decisions need no lease: anyone may decide while the run is parked.
        await self.runtime.store.append(target, Entry.of(decision))
        await resync()
        # Another process may have decided first: the log order says who won.
        winner = log.decision(call_id)
        assert winner is not None
        check_same(winner, approved, call_id)
        if not log.undecided_calls():
            # Every call of the turn is decided: whoever runs the session's
            # kind of work may go on with it (a child escalated, say).
            await self.runtime.background.decided(target, self._tools.tools)
            if not own:
                await self._go_on(target)

    async def _go_on(self, child_id: str) -> None:
        """Go on with this session's run if its turn is parked on `child_id`,
        whose calls are all decided now (see `approve`)."""
        await self.journal.sync()
        log = self.journal.log
        held = [c.name for c in log.parked() if log.held_calls().get(c.id) == child_id]
        if not held or ((going_on := self._going_on) is not None and not going_on.done()):
            return
        queue = self.runtime.queue
        if queue is not None:
            await queue.submit_run(self.id, RunDemand.IF_NEEDED, reason="resume", options=None)
        elif all(name in self._tools.tools for name in held):
            # Another object: it waits for the lease the run that parked may
            # still hold; this one stays the process's object for its id.
            fresh = Session(self.runtime, self.id, self.agent)
            self.runtime.register_session(self)
            self._going_on = self.runtime.background.keep(resume_decided(fresh, wait=GO_ON_WAIT))

    async def _deciding(self, call_id: str, session_id: str | None) -> str:
        """Whose parked turn `call_id` is decided in: this session's, or a child's
        that escalated to it."""
        escalated = self.journal.log.escalated
        if session_id is not None and session_id != self.id:
            if session_id not in escalated:
                raise UsageError(f"session {session_id} escalated no approval to session {self.id}")
            return session_id
        if session_id is not None or self.journal.log.request(call_id) is not None or not escalated:
            return self.id
        # Decided calls count too: deciding one again is a no-op (or a
        # conflict), whichever process decided it first.
        found = [
            child_id
            for child_id in escalated
            if requested(await folded(self.runtime.store, child_id), call_id) is not None
        ]
        if len(found) > 1:
            raise UsageError(
                f"call {call_id!r} waits in {len(found)} children of session {self.id}: "
                f"name one with session_id= ({', '.join(found)})"
            )
        return found[0] if found else self.id

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
        question = pending_input(request)
        given = check_answer(question, action, content)
        existing = answered.get(input_id)
        if existing is not None:
            same_answer(existing, action, given)
            return
        if request.activity_id in ended_activities(entries):
            raise UsageError(f"the work that asked {input_id!r} ended: nobody waits for the answer")
        # Answers need no lease: anyone may answer while the task waits.
        await self.runtime.store.append(
            self.id, Entry.of(log_entries.InputAnswer(input_id, action, given))
        )
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
        await self._model.set_model(model)

    async def set_reasoning(self, reasoning: ReasoningOptions | None) -> None:
        """Set (or clear, with None) reasoning options; persisted on the session."""
        await self._model.set_reasoning(reasoning)


def wake_up(session: Session[Any, Any], limit: int) -> Coroutine[Any, Any, RunResult[Any]] | None:
    """A run of `session` with no input, for news written for it while this
    Session object was idle (a notice, a deferred item); None while it runs,
    or once it was woken `limit` times in a row since its last user turn.

    A wake-up has no caller to give it deps: its tools see None.
    """
    if session._running or session._wakeups >= limit:
        return None
    session._wakeups += 1
    return session._run(None)


def _as_user(input: str | Message | None) -> Message | None:
    if input is None or isinstance(input, Message):
        return input
    return Message.user(input)
