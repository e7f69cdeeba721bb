"""The round loop. It reads like the order of operations in DESIGN.md:

    1. check stop signal, deadline, budgets; re-read toolsets (a changed
       tool list is offered from here on, never within a round)
    2. apply deferred items and steering, in the order they arrived
    3. deliver background notices
    4. ask the model (transport retries counted; `Requests`)
    5. commit the assistant message (and ack the notices it carried)
    6a. tool calls: gate approvals, or execute and commit results
        (`ToolRound`); strategy (`Decisions`)
    6b. no tool calls: strategy; pending work keeps the run going; else done
        (an answer with no text either is told: `EmptyAnswer`)

Each step returns the run's end (an `End`) or None to go on; the loop checks
it in one place. Only an end found deep inside a step (a model request, an
answer out of fixes) is raised (`EndRun`).

Nothing is written for a turn until its response is complete, so cancelling
the task (or `StopSignal.cancel`, which records the run's end too) discards
the turn in flight and leaves the log consistent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from .. import entries as log_entries
from .._offered import offer
from .._redact import redact_value
from .._run_controls import let_go, wait_until
from ..entries import MessageEntry, RunFinishedEntry, RunStartedEntry
from ..errors import StaleLeaseError, UsageError
from ..log import fold_text, with_unique_call_ids
from ..messages import Message, ToolCall, ToolResult
from ..results import RunResult, RunStatus
from ..tools import Tool
from ._approvals import gated_calls
from ._ask import Requests
from ._boundary import RoundBoundary
from ._finish import (
    completed_on,
    finish,
    finish_cancelled,
    finished_entry,
    record_failure,
    run_result,
)
from ._options import RunOptions
from ._output import FinalOutput
from ._port import AgentSpec, Delivery, RunInfo, RunPorts, RunWatch
from ._result import End, EndRun
from ._scope import RUN_BY, RunCounters, RunScope, RunState, append_message, message_entry
from ._tool_round import ToolRound, cut_off_results, to_run_again
from ._tree_budget import Budget, TreeBudget

if TYPE_CHECKING:
    from ._decide import Decisions

logger = logging.getLogger("taskloom")

STORE_GRACE = 1.0
"""Seconds past the deadline a run waits for the store before it gives up:
a run with a deadline returns by deadline + STORE_GRACE, lease release
included, however the store behaves."""


FRESH_BOUNDARY = 0.05
"""Seconds after the run's own append during which a round boundary skips
re-reading the log: longer than a boundary's own work, far shorter than a
model round."""


class RunLoop:
    """One run of a session (`run`): started afresh or resuming a parked
    turn, then rounds until an end status."""

    def __init__(
        self,
        agent: AgentSpec,
        ports: RunPorts,
        scope: RunScope,
        options: RunOptions | None = None,
        deps: object = None,
    ) -> None:
        opts = options or RunOptions()
        controls = opts.bind()
        output = FinalOutput(agent)
        # The tools calls of this run may use: the session's current ones (its
        # toolsets refresh between rounds), plus the final-answer tool if any.
        self._tools_source: Mapping[str, Tool] = ports.tools.tools
        self._tools = output.tools(self._tools_source)
        notices = ports.notices.run_notices(
            scope.session_id, scope.run_id, tuple(self._tools), offered=self._tools
        )
        # The journal's log is one object for the journal's life: kept, not
        # looked up every round.
        self._run = RunState(
            scope,
            agent,
            ports,
            ports.journal,
            ports.journal.log,
            opts,
            controls,
            RunCounters(controls.meter),
            notices,
            output,
            deps,
        )
        self._held: Delivery | None = None
        # Stop requests written before this run started are not for it.
        self._start_position = 0
        # The tools were read at the run's start and no call ran since.
        self._tools_fresh = False
        # The run's result, once its end is written with its final answer, or
        # may be (its write raised and the log could not be read to tell):
        # no failure is then recorded after it.
        self._ended: RunResult | None = None

    @property
    def returns_by(self) -> float | None:
        """Loop time by which the run returns, whatever the store does (None: no deadline)."""
        deadline_at = self._run.controls.deadline_at
        return None if deadline_at is None else deadline_at + STORE_GRACE

    async def _refresh_tools(self) -> None:
        # A round boundary: a toolset's changed list takes effect here, never
        # within a round.
        board = self._run.ports.tools
        await board.refresh_tools()
        source = board.tools
        if source is not self._tools_source:
            self._tools_source = source
            self._tools = self._run.output.tools(source)

    def run(
        self, user: Message | None = None, *, resume: bool = False
    ) -> Coroutine[Any, Any, RunResult]:
        """The run to an end status: with `user` (if any) as the next user
        turn, or (`resume`) of the session's parked turn, its calls all
        decided; provider and configuration errors propagate. A session
        parked for approval raises `UsageError` unless resumed, one not
        parked if resumed.

        The model and tools are cut at the deadline; a store that stalls past
        it gets `STORE_GRACE` more seconds before the run ends DEADLINE
        unrecorded (the next run reads whatever the store kept).
        """
        if self._run.controls.deadline_at is None:
            # No bound to keep: the run's own coroutine, one level fewer on
            # every step of the run.
            return self._go(user, resume, end_notices=True)
        return self._bounded(self._go(user, resume))

    async def _tools_now(self) -> None:
        if not self._tools_fresh:
            await self._refresh_tools()
        self._tools_fresh = False

    async def _resume_parked(self) -> End | None:
        # The parked turn's calls run with the tools as they are now.
        await self._tools_now()
        return await self._after_tools(await self._turns.resume_parked(self._tools))

    async def _bounded(self, work: Coroutine[Any, Any, RunResult]) -> RunResult:
        deadline_at = self._run.controls.deadline_at
        assert deadline_at is not None
        # In a task of its own, so that a store which does not answer by
        # `returns_by` is not waited for at all: cancelling a statement on a
        # silent server (its cancel request, the connection's close) takes
        # time of its own, which the run's caller must not pay.
        run = asyncio.ensure_future(work)
        # The run's notices end with the run itself, however long it winds down.
        run.add_done_callback(lambda _: self._run.ports.notices.run_ended(self._run.scope.run_id))
        try:
            await wait_until(run, deadline_at + STORE_GRACE)
            if run.done():
                return run.result()
            run.cancel()
            # Writes it had under way may still land; the next run reads them.
            stalled = End(RunStatus.DEADLINE, "the store did not answer by the deadline")
            return run_result(stalled, self._run)
        except asyncio.CancelledError:
            # The caller's own cancel: the run winds down whole, as without
            # a deadline, before the cancel goes on.
            run.cancel()
            await asyncio.wait({run})
            raise
        finally:
            if not run.done():
                let_go(run)  # cancelled, or the caller cancelled twice

    async def _go(self, user: Message | None, resume: bool, end_notices: bool = False) -> RunResult:
        """Open the run (its checks, calls cut off by a crash, the tree budget,
        the watch), take its first step, then rounds until an end status. A
        run with no new input after a run cut off between its final answer
        and its end decides that answer first; with `end_notices`, the run's
        notices end with it (a bounded run's end them when its task does)."""
        try:
            run = self._run
            journal, ports, log, scope = run.journal, run.ports, run.log, run.scope
            # A resume must see every decision written elsewhere; a fresh run may
            # trust a look taken under its lease an instant ago.
            await journal.sync(fresh=0.0 if resume else FRESH_BOUNDARY)
            parked = log.parked()
            if resume and not parked:
                raise UsageError(
                    f"session {scope.session_id} has no turn parked for approval to resume"
                )
            if parked and not resume:
                raise UsageError(
                    f"session {scope.session_id} is awaiting approval for "
                    f"{', '.join(c.id for c in parked)}: approve or deny, then resume()"
                )
            resumes = log.run_traceparent() if resume else None
            info = RunInfo(self._run.agent, scope.session_id, scope.run_id, resume, resumes)
            # Read before this run's own start entry makes it the latest run.
            answer = log.unended_answer() if user is None and not resume else None
            # Calls cut off by a crash or a cancellation get their one result;
            # those of idempotent tools get it by running again, in this run.
            cut_off = log.cut_off()
            # Read now, for the start entry's record of what the run offers (and
            # as toolsets' tools too may be idempotent): the first round boundary
            # needs no second read unless tools run before it. Tools that cannot
            # be read now are read again by the first round, whose failure is
            # recorded as the run's; calls cut off need them now.
            fresh = True
            try:
                await self._refresh_tools()
            except Exception:
                if cut_off:
                    raise
                fresh = False
            again = to_run_again(log, cut_off, self._tools) if cut_off else []
            self._tools_fresh = fresh and not again
            if cut_off and not again:
                answers = Message.tool_results(cut_off_results(log, cut_off))
                await append_message(journal, scope.run_id, answers)
            if self._run.controls.tree is None:
                await self._open_tree()
            tree: TreeBudget | None = self._run.controls.tree
            self._start_position = log.position
            self._run.counters.round_base = log.assistant_turns
            watch = ports.observer.run(info)
            self._open(watch)
            scope = self._run.scope
            with watch:
                name = self._run.agent.name
                tree_data = tree.to_dict() if tree is not None else None
                memory = self._run.controls.memory
                started = RunStartedEntry(
                    name,
                    resume,
                    watch.traceparent,
                    self._offer(),
                    RUN_BY.get(),
                    tree_data,
                    () if memory is None else memory.namespaces,
                )
                # A plain user turn is the run's whole first step: the start
                # entry goes with it in one write, which also reads the inbox
                # for the first boundary.
                plain = (
                    user is not None
                    and not again
                    and answer is None
                    and not resume
                    and not log.reopened()
                )
                if plain:
                    assert user is not None
                    journal.stage(started, scope.run_id)
                    await journal.record(
                        message_entry(user), scope.run_id, user, read_inbox=True, list_running=True
                    )
                else:
                    await journal.record(started, scope.run_id)
                scope.event("RunStarted", run_id=scope.run_id, agent=name)
                try:
                    end = None if plain else await self._first(user, resume, cut_off, again, answer)
                    while end is None:
                        # A boundary right after the run's own append needs no
                        # read: that append's position proved nothing came in
                        # between, and what lands in the next instant is folded
                        # at the next boundary, as if it landed a moment later.
                        await journal.sync(fresh=FRESH_BOUNDARY)
                        end = self._check_limits()
                        if end is None:
                            await self._tools_now()
                            end = await self._round()
                except EndRun as raised:
                    end = raised.end
                except asyncio.CancelledError:
                    if self._run.controls.stop.is_cancelled:
                        # Cancelled, and the task with it (a parent cancelled too,
                        # whose abort reached the task running this child): the
                        # run still ends whole before the cancellation goes on;
                        # as its end landed with its answer, if it did (told,
                        # not written again), and not at all if it may have
                        # (`_record_answer`).
                        if self._ended is None:
                            await finish_cancelled(self._stopped(), self._run, tree)
                        elif not self._run.log.run_open:
                            await finish(End(RunStatus.COMPLETED), self._run, tree, self._ended)
                    raise
                except BaseException as exc:
                    # A run whose end landed (or may have) with its answer ends
                    # once: what raised after is the caller's, not the log's.
                    if not isinstance(exc, KeyboardInterrupt) and self._ended is None:
                        await record_failure(exc, self._run)
                    raise
                return await finish(end, self._run, tree, self._ended)
        finally:
            if end_notices:
                self._run.ports.notices.run_ended(self._run.scope.run_id)

    async def _first(
        self,
        user: Message | None,
        resume: bool,
        cut_off: list[ToolCall],
        again: list[ToolCall],
        answer: MessageEntry | None,
    ) -> End | None:
        """The run's first step: the cut-off calls run `again`, the unended
        `answer` decided, then `user`'s turn appended or the parked turn taken
        up; the run's end, if it ends here."""
        if again:
            end = await self._after_tools(await self._turns.run_again(cut_off, again, self._tools))
            if end is not None:
                return end
        if answer is not None:
            # Its run only had to ack the notices the answer carried and
            # decide whether it completes (5, 6b): done here as there, so a
            # crash in between costs no second request and no second answer.
            # What would have kept that run going (steering, unseen
            # completions, a strategy's turn, a fix) keeps this one going.
            if answer.delivered_ids:
                await self._run.ports.notices.ack(self._run.scope.session_id, answer.delivered_ids)
            end = await self._answered(answer.message)
            if end is not None:
                return end
        if resume:
            return await self._resume_parked()
        if self._run.log.reopened():
            # A fork's turn that was parked at its cut, taken up as a resume
            # takes up a parked turn. It may park again: the input waits as
            # steering, folded in once the turn is answered.
            if user is not None:
                await self._run.journal.record(log_entries.Steer(user.text), self._run.scope.run_id)
            return await self._resume_parked()
        if user is not None:
            await append_message(self._run.journal, self._run.scope.run_id, user)
        return None

    def _offer(self) -> dict[str, Any]:
        # Compared with the latest run's, before this run's start entry is.
        latest = self._run.log.last_run_started
        previous = None if latest is None else RunStartedEntry.from_data(latest.data).offered
        offered = offer(self._run.agent.instructions, self._run.ports.tools.tool_specs, previous)
        # A remote tool's description or schema may quote what it was sent.
        secrets = {s for tool in self._run.ports.tools.tools.values() for s in tool.secrets}
        if secrets and "tools" in offered:
            offered = redact_value(offered, tuple(sorted(secrets, key=len, reverse=True)))
        return offered

    def _stopped(self) -> End:
        return End(RunStatus.STOPPED, self._run.controls.stop.cancel_reason)

    def _stop_requested(self) -> bool:
        run = self._run
        return run.controls.stop.is_set or run.log.stop_position > self._start_position

    async def _open_tree(self) -> None:
        """The tree this run charges, when no parent gave it one: the tree of
        the session's latest run if that run has no end (cut off by a crash,
        or parked for approval: this run goes on with it), whatever budget
        this run was given; else a new tree for this run's own budget."""
        log, budget = self._run.log, self._run.opts.budget
        started = log.last_run_started
        joined = None
        if started is not None and (log.run_open or log.parked()):
            joined = RunStartedEntry.from_data(started.data).tree
        if joined is not None:
            if budget is not None and budget.to_dict() != joined["budget"]:
                logger.warning(
                    "session %s: a run going on with tree %s keeps that tree's budget, "
                    "not the one it was given",
                    self._run.scope.session_id,
                    joined["tree"],
                )
            tree = TreeBudget(
                self._run.ports.budgets, joined["tree"], Budget.from_dict(joined["budget"])
            )
        elif budget is not None:
            # A root run's budget: the tree every run under it charges.
            tree = TreeBudget(self._run.ports.budgets, f"tree-{self._run.scope.run_id}", budget)
        else:
            return
        # A tree joined is in its ledger already (its row keeps what was spent).
        await tree.open()
        self._run.controls.tree = tree

    def _open(self, watch: RunWatch) -> None:
        """The run's parts, made once its watch is known (their events and
        calls happen inside it)."""
        run = self._run
        if watch is not run.scope.watch:  # an observed run (an unobserved one's is NO_WATCH)
            run = self._run = run._replace(scope=run.scope._replace(watch=watch))
        self._requests = Requests(run)
        self._turns = ToolRound(run)
        strategy = self._run.opts.strategy
        # Without a strategy every boundary proceeds: nothing to decide (and
        # the strategies' module is never imported).
        self._decisions: Decisions | None = None
        if strategy is not None:
            from ._decide import Decisions

            self._decisions = Decisions(strategy, run, self._requests.compactor)

    def _check_limits(self) -> End | None:
        run = self._run
        o, c = run.opts, run.controls
        if self._stop_requested():
            return self._stopped()
        remaining = c.remaining
        if remaining is not None and remaining <= 0:
            return End(RunStatus.DEADLINE)
        rounds, requests = run.counters.rounds, run.counters.model_requests
        if o.max_rounds is not None and rounds >= o.max_rounds:
            return End(RunStatus.BUDGET_EXHAUSTED, f"max_rounds ({o.max_rounds}) reached")
        if o.max_model_requests is not None and requests >= o.max_model_requests:
            return End(
                RunStatus.BUDGET_EXHAUSTED, f"max_model_requests ({o.max_model_requests}) reached"
            )
        if c.token_budget is not None and c.meter.root_tokens >= c.token_budget:
            return End(RunStatus.BUDGET_EXHAUSTED, f"token_budget ({c.token_budget}) reached")
        return None

    async def _round(self) -> End | None:
        run = self._run
        journal, scope, log, counters = run.journal, run.scope, run.log, run.counters
        # 2. deferred items and steering, in arrival order
        pending = log.pending
        if pending:
            folded = Message.user(fold_text(pending))
            await append_message(journal, scope.run_id, folded, folds=[e.position for e in pending])
        # 3. background notices (and a reminder held from the last boundary)
        # Read with the results that ended the last round, when nothing came since.
        inbox = journal.take_inbox(FRESH_BOUNDARY)
        delivery = await run.notices.round_start(inbox, journal.take_running())
        held = self._held
        if held is not None:
            delivery = held if delivery is None else held.merged(delivery)
            self._held = None
        # 4. ask the model (compacting the view first if it grew too long)
        if delivery is not None:
            scope.event("NoticeDelivered", text=delivery.text, notice_ids=tuple(delivery.ack_ids))
        response = await self._requests.ask(delivery)
        # 5. commit the assistant message with the notices it carried, then ack
        # them. Call ids a provider reuses are made unique first, so results
        # and decisions always pair with this turn's calls.
        message = with_unique_call_ids(response.message, log.call_ids)
        # A final answer reads the inbox with it, for the check before the
        # run completes (`_may_complete`); where nothing the run knows of
        # would keep it going, the run's end is written with it, landing
        # only if the inbox has nothing either (all or nothing: a crash
        # before it costs the model's answer, never a half-ended run).
        entry = message_entry(message, delivery, usage=response.usage)
        calls = message.tool_calls
        if calls:
            await journal.record(entry, scope.run_id, message)
        elif await self._record_answer(entry, message):
            counters.rounds += 1
            if delivery is not None and delivery.ack_ids:
                await run.ports.notices.ack(scope.session_id, delivery.ack_ids)
            scope.round_committed(counters, RoundBoundary.ASSISTANT_MESSAGE_COMMITTED)
            if not message.text:
                scope.event("EmptyAnswer", run_id=scope.run_id, round=counters.round)
            return End(RunStatus.COMPLETED)
        self._ended = None  # not written: the run goes on as after any answer
        if delivery is not None and delivery.ack_ids:
            await run.ports.notices.ack(scope.session_id, delivery.ack_ids)
        counters.rounds += 1
        if self._stop_requested():
            # Asked to stop while the model answered: the answer is kept, and
            # its calls do not start (each is answered as not run).
            if calls:
                return await self._turns.not_run(calls, self._stopped())
            scope.round_committed(counters, RoundBoundary.ASSISTANT_MESSAGE_COMMITTED)
            return self._stopped()
        if not calls:  # 6b
            scope.round_committed(counters, RoundBoundary.ASSISTANT_MESSAGE_COMMITTED)
            if not message.text:
                # No text and no calls: an answer of nothing is told, never
                # passed off as a short one.
                scope.event("EmptyAnswer", run_id=scope.run_id, round=counters.round)
            return await self._answered(message)
        # 6a
        gated = gated_calls(calls, self._tools)
        if gated:
            return await self._turns.park(gated)
        return await self._after_tools(await self._turns.run(calls, self._tools))

    async def _record_answer(self, entry: MessageEntry, message: Message) -> bool:
        """Record the final answer, with the run's end where it may go with it
        (`record_ending`): whether the end landed too."""
        journal, log = self._run.journal, self._run.log
        before = log.position
        try:
            return await journal.record_ending(
                entry, self._run.scope.run_id, message, self._ending(message)
            )
        except asyncio.CancelledError:
            # Folded in, the answer landed alone: the run did not end. Not
            # folded (cancelled again while the statement was out), it may
            # have: `_ended` stays, and no other end is written beside it.
            if log.position != before and log.run_open:
                self._ended = None
            raise
        except StaleLeaseError:
            self._ended = None
            raise  # refused: nothing was written
        except Exception as exc:
            if self._ended is None:
                raise
            # Raised at or after the statement (a connection lost once it
            # committed): whether the end landed is the log's to say, and a
            # run that ended is not failed after it. Unread, it may have:
            # `_ended` stays, and the next take-up reads the log.
            try:
                await journal.sync()
            except Exception:
                raise exc from None
            finished = self._run.log.last_finished
            if finished is None or finished.run_id != self._run.scope.run_id:
                self._ended = None
                raise
            return True

    def _ending(self, message: Message) -> Callable[[], RunFinishedEntry | None]:
        """What `record_ending` writes with the final `message`: the run's
        end, when nothing this run knows of would keep it going (no strategy
        to ask, steering or deferred items, a stop, work to remind of, an
        output to check, a tree budget to read); else None."""

        def end() -> RunFinishedEntry | None:
            run = self._run
            if (
                self._decisions is not None
                or run.output.is_structured
                or run.controls.tree is not None
                or run.log.pending
                or self._stop_requested()
                or run.notices.may_remind()
            ):
                return None
            self._ended = completed_on(message.text, run)
            return finished_entry(self._ended, run)

        return end

    async def _after_tools(self, results: list[ToolResult] | End) -> End | None:
        """The decision once a turn's results are committed (`results`; an
        `End` passes through)."""
        if isinstance(results, End):
            return results
        decisions = self._decisions
        # A final answer given through the tool ends the run like a final
        # message would, once the strategy lets it and nothing is pending.
        if decisions is None:
            # Without a strategy the decision is always to proceed.
            return await self._may_complete() if self._run.output.after_tools() else None
        decision = await decisions.after_results(results)
        answered = self._run.output.after_tools()
        if not decisions.proceeds(decision):
            end = await decisions.apply(decision)
            if end is not None:
                return end
        if answered and decision.action == "continue":
            return await self._may_complete()
        return None

    async def _answered(self, message: Message) -> End | None:
        """6b's decision on the final `message`: the strategy's, then
        `_may_complete`'s."""
        decisions = self._decisions
        if decisions is not None:
            decision = await decisions.after_answer(message)
            if decision.action != "continue":
                return await decisions.apply(decision)
            await decisions.adjust(decision.adjust)
        return await self._may_complete(message)

    async def _may_complete(self, message: Message | None = None) -> End | None:
        """End the run COMPLETED, unless something it started has an answer the
        model has not seen (steering or deferred items that landed, unseen
        completions, a first reminder of work still running) or the final
        `message` needs correcting."""
        journal = self._run.journal
        # Right after the run's own append, as at a round boundary, no read:
        # what lands in the next instant is for the next boundary, or the
        # next run, as if it landed a moment later. A strategy's decision
        # (awaited in between) may take longer, and steer: then read.
        await journal.sync(fresh=FRESH_BOUNDARY if self._decisions is None else 0.0)
        if self._run.log.pending:
            return None
        final = await self._run.notices.before_final(journal.take_inbox(FRESH_BOUNDARY))
        if final is not None:
            # Held for the next round: it rides on that round's assistant
            # entry and is acknowledged only once that entry is persisted.
            self._held = final
            return None
        if message is not None:
            fix = self._run.output.check_text(message.text)
            if fix is not None:
                await append_message(journal, self._run.scope.run_id, Message.user(fix))
                return None
        return End(RunStatus.COMPLETED)
