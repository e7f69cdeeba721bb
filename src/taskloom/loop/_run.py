"""The round loop. It reads like the order of operations in DESIGN.md:

    1. check stop signal, deadline, budgets; re-read toolsets (a changed
       tool list is offered from here on, never within a round)
    2. apply deferred items and steering, in the order they arrived
    3. deliver background notices
    4. ask the model (transport retries counted)
    5. commit the assistant message (and ack the notices it carried)
    6a. tool calls: gate approvals, or execute and commit results; strategy
    6b. no tool calls: strategy; pending work keeps the run going; else done
        (an answer with no text either is told: `EmptyAnswer`)

Nothing is written for a turn until its response is complete, so cancelling
the task discards the turn in flight and leaves the log consistent. Every
append goes through the session port, fenced by the run's session lease.
The run, each model request and each tool call happen inside a watch of the
runtime's observer (tracing), entered in that order of nesting.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .._control import let_go, wait_until
from ..entries import (
    CallsStarted,
    MessageEntry,
    Payload,
    RunFinishedEntry,
    RunStartedEntry,
)
from ..errors import ContextWindowExceeded, UsageError
from ..events import (
    ApprovalRequested,
    EmptyAnswer,
    Event,
    NoticeDelivered,
    RoundCommitted,
    RunFinished,
    RunStarted,
)
from ..messages import Message, ToolCall, ToolResult, Usage
from ..models import Model, ModelRequest, ModelResponse
from ..results import BudgetLeft, PendingCall, RunResult, RunStatus
from ..tools import IDEMPOTENT_RETRIES, Tool, ToolContext
from ._approvals import Gate, gated_calls, requests_for, resolve_parked_turn
from ._ask import ask_model
from ._budget import BudgetSpent, InputBound, TreeBudget
from ._compact import Compactor
from ._execute import run_batch, run_one
from ._log import fold_text, with_unique_call_ids
from ._options import RunOptions
from ._output import FinalOutput, to_jsonable
from ._port import NO_OBSERVER, NO_WATCH, Delivery, RunInfo, RunObserver, SessionPort
from ._result import EndRun
from ._strategy import RoundAdjustment, RoundBoundary, RoundContext, RoundDecision, RoundToolResult

__all__ = ["STORE_GRACE", "RunLoop"]

logger = logging.getLogger("taskloom")

_PROCEED = RoundDecision.proceed()

STORE_GRACE = 1.0
"""Seconds past the deadline a run waits for the store before it gives up:
a run with a deadline returns by deadline + STORE_GRACE, lease release
included, however the store behaves."""


FRESH_BOUNDARY = 0.05
"""Seconds after the run's own append during which a round boundary skips
re-reading the log: longer than a boundary's own work, far shorter than a
model round."""


class RunLoop:
    """One run of a session: owns the counters, talks to the session port."""

    def __init__(
        self,
        session: SessionPort,
        options: RunOptions | None,
        emit: Callable[[Event], None] | None,
        origin: str = "",
        observer: RunObserver = NO_OBSERVER,
        *,
        deps: object = None,
    ) -> None:
        self.session = session
        self.opts = options or RunOptions()
        self.controls = self.opts.bind()
        self.emit = emit
        self.origin = origin
        self.deps = deps
        self.run_id = os.urandom(16).hex()  # as random as uuid4().hex, at a third of its cost
        self.rounds = self.model_requests = self.transport_retries = self.tool_calls = 0
        # Rounds of earlier runs of the session: events number rounds on from them.
        self.round_base = 0
        self.output = FinalOutput(session.agent)
        self._tools_source: Mapping[str, Tool] = session.tools
        self._tools = self.output.tools(self._tools_source)
        self.start_position = 0
        self.background = session.notices
        self.notices = self.background.run_notices(
            session.id, self.run_id, tuple(self.tools), offered=self.tools
        )
        self.compactor = Compactor(self, session.agent.compaction)
        self._held: Delivery | None = None
        self.observer = observer
        self.watch = NO_WATCH
        # Adapters keep their wire encoding of this run's messages here.
        self.memo: dict[Any, Any] = {}
        self._input_bound = InputBound()
        self._budget_left: BudgetLeft | None = None

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools calls of this run may use: the session's current ones (its
        toolsets refresh between rounds), plus the final-answer tool if any."""
        return self._tools

    async def _refresh_tools(self) -> None:
        # A round boundary: a toolset's changed list takes effect here, never
        # within a round.
        await self.session.refresh_tools()
        source = self.session.tools
        if source is not self._tools_source:
            self._tools_source = source
            self._tools = self.output.tools(source)

    def event(self, cls: type[Any], **fields: Any) -> None:
        """Emit an event of this run (tagged with its origin and session)."""
        if self.emit is not None:
            self.emit(cls(origin=self.origin, session_id=self.session.id, **fields))

    _event = event

    async def record(self, payload: Payload) -> int:
        """Append an entry of this run (fenced, through the session port)."""
        return await self.session.record(payload, self.run_id)

    _append = record

    def resolve_model(self, spec: Model | str) -> Model:
        """A model instance for a spec (through the session's runtime)."""
        return self.session.resolve_model(spec)

    async def ask(self, model: Model, request: ModelRequest) -> ModelResponse:
        """Ask a model under this run's retry policy, budgets and deadline; its
        usage counts in the run's (and, with a tree budget, in the tree's)."""
        tree: TreeBudget | None = self.controls.tree
        if tree is None:
            response = await self._ask(model, request)
            self.controls.meter.add(response.usage)
            return response
        try:
            request, charge = await tree.reserve(
                model.name, request, self._input_bound.of(request), model.provider
            )
        except BudgetSpent as spent:
            raise EndRun(RunStatus.BUDGET_EXHAUSTED, str(spent)) from None
        try:
            response = await self._ask(model, request)
        except BaseException:
            # Failed requests are taken as unbilled; a process that dies
            # here leaves the worst case charged, which is never too little.
            await tree.settle(charge, None)
            raise
        self.controls.meter.add(response.usage)
        self._input_bound.reported(response.usage)
        await tree.settle(charge, response.usage)
        return response

    async def _ask(self, model: Model, request: ModelRequest) -> ModelResponse:
        return await ask_model(
            model,
            request,
            opts=self.opts,
            controls=self.controls,
            counters=self,
            emit=self.emit,
            origin=self.origin,
            session_id=self.session.id,
            watch=self.watch,
        )

    async def _append_message(
        self,
        message: Message,
        delivered: Delivery | None = None,
        folds: Sequence[int] = (),
        usage: Usage | None = None,
    ) -> int:
        payload = MessageEntry(
            message,
            delivered.text if delivered is not None else None,
            delivered.ack_ids if delivered is not None else (),
            tuple(folds),
            usage,
        )
        return await self.session.record(payload, self.run_id, message)

    # ------------------------------------------------------------ the run

    async def run(self, user: Message | None, *, resume: bool = False) -> RunResult:
        """Run to an end status; provider and configuration errors propagate.

        The model and tools are cut at the deadline; a store that stalls past
        it gets `STORE_GRACE` more seconds before the run ends DEADLINE
        unrecorded (the next run reads whatever the store kept).
        """
        deadline_at = self.controls.deadline_at
        if deadline_at is None:
            try:
                return await self._run(user, resume)
            finally:
                self.background.run_ended(self.run_id)
        return await self._within(deadline_at + STORE_GRACE, user, resume)

    @property
    def returns_by(self) -> float | None:
        """Loop time by which `run` returns, whatever the store does (None: no deadline)."""
        deadline_at = self.controls.deadline_at
        return None if deadline_at is None else deadline_at + STORE_GRACE

    async def _within(self, end: float, user: Message | None, resume: bool) -> RunResult:
        # In a task of its own, so that a store which does not answer by
        # `end` is not waited for at all: cancelling a statement on a silent
        # server (its cancel request, the connection's close) takes time of
        # its own, which the run's caller must not pay.
        run = asyncio.ensure_future(self._run(user, resume))
        # The run's notices end with the run itself, however long it winds down.
        run.add_done_callback(lambda _: self.background.run_ended(self.run_id))
        try:
            await wait_until(run, end)
            if run.done():
                return run.result()
            run.cancel()
            # Writes it had under way may still land; the next run reads them.
            return self._result(RunStatus.DEADLINE, "the store did not answer by the deadline")
        except asyncio.CancelledError:
            # The caller's own cancel: the run winds down whole, as without
            # a deadline, before the cancel goes on.
            run.cancel()
            await asyncio.wait({run})
            raise
        finally:
            if not run.done():
                let_go(run)  # cancelled, or the caller cancelled twice

    async def _run(self, user: Message | None, resume: bool) -> RunResult:
        session = self.session
        # A resume must see every decision written elsewhere; a fresh run may
        # trust a look taken under its lease an instant ago.
        await session.sync(fresh=0.0 if resume else FRESH_BOUNDARY)
        parked = session.log.parked()
        if parked and not resume:
            raise UsageError(
                f"session {session.id} is awaiting approval for "
                f"{', '.join(c.id for c in parked)}: approve or deny, then resume()"
            )
        if resume and not parked:
            raise UsageError(f"session {session.id} has no turn parked for approval to resume")
        # Calls cut off by a crash or a cancellation get their one result;
        # those of idempotent tools get it by running again, in this run.
        cut_off = session.log.cut_off()
        if cut_off:
            await self._refresh_tools()  # toolsets' tools too may be idempotent
        again = self._to_run_again(cut_off)
        if cut_off and not again:
            await self._append_message(Message.tool_results(self._cut_off_results(cut_off)))
        if self.opts.budget is not None and self.controls.tree is None:
            # A root run's budget: the tree every run under it charges.
            tree = TreeBudget(session.budgets, f"tree-{self.run_id}", self.opts.budget)
            await tree.open()
            self.controls.tree = tree
        # Stop requests written before this run started are not for it.
        self.start_position = session.log.position
        self.round_base = session.log.assistant_turns
        self.watch = self.observer.run(
            RunInfo(
                session.agent,
                session.id,
                self.run_id,
                resume,
                session.log.run_traceparent() if resume else None,
            )
        )
        with self.watch:
            await self._append(RunStartedEntry(session.agent.name, resume, self.watch.traceparent))
            self._event(RunStarted, run_id=self.run_id, agent=session.agent.name)
            try:
                if again:
                    await self._run_again(cut_off, again)
                if user is not None:
                    await self._append_message(user)
                if resume:
                    # The parked turn's calls run with the tools as they are now.
                    await self._refresh_tools()
                    await self._after_tools(await self._resume_parked())
                while True:
                    # A boundary right after the run's own append needs no
                    # read: that append's position proved nothing came in
                    # between, and what lands in the next instant is folded
                    # at the next boundary, as if it landed a moment later.
                    await session.sync(fresh=FRESH_BOUNDARY)
                    self._check_limits()
                    await self._refresh_tools()
                    await self._round()
            except EndRun as end:
                return await self._finish(end.status, end.error)
            except BaseException as exc:
                if not isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                    await self._record_failure(exc)
                raise

    async def _round(self) -> None:
        session = self.session
        # 2. deferred items and steering, in arrival order
        pending = session.log.pending
        if pending:
            await self._append_message(
                Message.user(fold_text(pending)), folds=[e.position for e in pending]
            )
        # 3. background notices (and a reminder held from the last boundary)
        delivery = await self.notices.round_start()
        if self._held is not None:
            delivery = self._held if delivery is None else self._held.merged(delivery)
            self._held = None
        # 4. ask the model (compacting the view first if it grew too long)
        if delivery is not None:
            self._event(NoticeDelivered, text=delivery.text, notice_ids=tuple(delivery.ack_ids))
        response = await self._ask_with_compaction(delivery)
        # 5. commit the assistant message with the notices it carried, then ack
        # them. Call ids a provider reuses are made unique first, so results
        # and decisions always pair with this turn's calls.
        message = with_unique_call_ids(response.message, session.log.call_ids)
        await self._append_message(message, delivered=delivery, usage=response.usage)
        if delivery is not None and delivery.ack_ids:
            await self.background.ack(session.id, delivery.ack_ids)
        self.rounds += 1
        calls = message.tool_calls
        if calls:
            await self._tool_round(calls)  # 6a
        else:
            await self._final_round(message)  # 6b

    async def _ask_with_compaction(self, delivery: Delivery | None) -> ModelResponse:
        compactor = self.compactor
        if compactor.policy is None:
            model = self.session.model
            return await self.ask(model, self._request(model, delivery))
        extra = delivery.text if delivery is not None else ""
        await compactor.before_request(extra)
        for attempt in (1, 2):
            chars = compactor.request_chars(extra)
            model = self.session.model
            try:
                response = await self.ask(model, self._request(model, delivery))
            except ContextWindowExceeded as exc:
                # The provider counted what we estimated: compact once, retry once.
                if attempt == 2 or not await compactor.compact(forced=True):
                    raise EndRun(RunStatus.FAILED, self._overflow_error(exc)) from None
                continue
            u = response.usage
            compactor.estimate.observe(
                chars, u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
            )
            return response
        raise AssertionError("unreachable")

    def _overflow_error(self, exc: ContextWindowExceeded) -> str:
        window = self.compactor.window()
        size = self.compactor.tokens()
        limit = f"the model's window of {window} tokens" if window else "the model's window"
        return (
            f"the request (about {size} tokens) does not fit {limit}, even after compacting "
            f"({exc}); lower Compaction(keep_recent=...), shorten tool outputs "
            "(max_output_chars), or use a model with a larger window"
        )

    async def _tool_round(self, calls: list[ToolCall]) -> None:
        gated = gated_calls(calls, self.tools)
        if gated:
            await self._park(gated)
        await self._after_tools(await self._commit_results(await self._execute(calls)))

    async def _after_tools(self, decision: RoundDecision) -> None:
        # A final answer given through the tool ends the run like a final
        # message would, once the strategy lets it and nothing is pending.
        answered = self.output.after_tools()
        if decision is not _PROCEED:
            await self._decide(decision)
        if answered and decision.action == "continue":
            await self._may_complete()

    async def _park(self, gated: list[Gate]) -> None:
        # One entry for the whole turn: a crash leaves every gated call of
        # the turn requested, or none (and then none runs: see resume).
        await self._append(requests_for(self.session.log.turn, gated))
        for g in gated:
            c = g.call
            self._event(
                ApprovalRequested, call_id=c.id, name=c.name, arguments=c.arguments, reason=g.reason
            )
        raise EndRun(RunStatus.AWAITING_APPROVAL)

    def _round_committed(self, boundary: RoundBoundary) -> None:
        if self.emit is not None:  # built only for a subscriber
            self._event(
                RoundCommitted,
                run_id=self.run_id,
                round=self.round_base + self.rounds,
                boundary=boundary.value,
            )

    async def _final_round(self, message: Message) -> None:
        self._round_committed(RoundBoundary.ASSISTANT_MESSAGE_COMMITTED)
        if not message.text:
            # No text and no calls: an answer of nothing is told, never passed
            # off as a short one.
            self._event(EmptyAnswer, run_id=self.run_id, round=self.round_base + self.rounds)
        if self.opts.strategy is None:
            await self._may_complete(message)
            return
        decision = await self._strategy(
            RoundContext(
                RoundBoundary.ASSISTANT_MESSAGE_COMMITTED,
                self.rounds,
                self.model_requests,
                self.transport_retries,
                assistant_message=message,
                session_id=self.session.id,
                run_id=self.run_id,
            )
        )
        if decision.action != "continue":
            await self._decide(decision)
            return
        await self._apply_adjust(decision.adjust)
        await self._may_complete(message)

    async def _may_complete(self, message: Message | None = None) -> None:
        """End the run COMPLETED, unless something it started has an answer the
        model has not seen (steering or deferred items that landed, unseen
        completions, a first reminder of work still running) or the final
        `message` needs correcting."""
        await self.session.sync()
        if self.session.log.pending:
            return
        final = await self.notices.before_final()
        if final is not None:
            # Held for the next round: it rides on that round's assistant
            # entry and is acknowledged only once that entry is persisted.
            self._held = final
            return
        if message is not None:
            fix = self.output.check_text(message.text)
            if fix is not None:
                await self._append_message(Message.user(fix))
                return
        raise EndRun(RunStatus.COMPLETED)

    # ------------------------------------------------------------ tools

    async def _execute(
        self, calls: Sequence[ToolCall], decided: Mapping[str, ToolResult] | None = None
    ) -> list[ToolResult]:
        """One result per call, in call order: `decided` ones as given, the rest run."""
        if (
            len(calls) == 1
            and not decided
            and self.opts.max_tool_calls is None
            and self.controls.deadline_at is None
        ):
            # The common turn (one call, nothing to cut it short): no batch to plan.
            self.tool_calls += 1
            return [
                await run_one(
                    calls[0],
                    self.tools,
                    self._context,
                    self.emit,
                    self.origin,
                    self.session.id,
                    self.watch,
                )
            ]
        decided = decided or {}
        results_run, end, ran = await run_batch(
            [c for c in calls if c.id not in decided],
            self.tools,
            self._context,
            self.emit,
            budget=self.opts.max_tool_calls,
            used=self.tool_calls,
            deadline_at=self.controls.deadline_at,
            origin=self.origin,
            session_id=self.session.id,
            watch=self.watch,
        )
        self.tool_calls += ran
        it = iter(results_run)
        results = [decided.get(c.id) or next(it) for c in calls]
        if end is not None:
            # Every call still gets its one result before the run ends.
            await self._append_message(Message.tool_results(results))
            raise EndRun(end)
        return results

    def _context(self, call: ToolCall) -> ToolContext:
        s = self.session
        return ToolContext(
            run_id=self.run_id,
            session_id=s.id,
            call_id=call.id,
            agent=s.agent,
            runtime=s.host,
            controls=self.controls,
            emit=self._emit_from_tool,
            record=s.append,
            origin=self.origin,
            deps=self.deps,
            turn=s.log.turn,
        )

    def _emit_from_tool(self, event: Event) -> None:
        if self.emit is not None:
            self.emit(event)

    async def _commit_results(self, results: list[ToolResult]) -> RoundDecision:
        await self._append_message(Message.tool_results(results))
        # Notices a tool showed the model itself (background_wait, read_agent)
        # are acknowledged now that the results carrying them are persisted.
        seen = self.notices.take_seen()
        if seen:
            await self.background.ack(self.session.id, seen)
        self._round_committed(RoundBoundary.TOOL_RESULTS_COMMITTED)
        if self.opts.strategy is None:
            return _PROCEED
        return await self._strategy(
            RoundContext(
                RoundBoundary.TOOL_RESULTS_COMMITTED,
                self.rounds,
                self.model_requests,
                self.transport_retries,
                tool_results=tuple(
                    RoundToolResult(r.tool_call_id, r.tool_name, r.is_error) for r in results
                ),
                session_id=self.session.id,
                run_id=self.run_id,
            )
        )

    def _to_run_again(self, cut_off: list[ToolCall]) -> list[ToolCall]:
        log, tools = self.session.log, self.tools
        return [
            c
            for c in cut_off
            if (t := tools.get(c.name)) is not None
            and t.idempotent
            and log.retryable(c, IDEMPOTENT_RETRIES)
        ]

    def _cut_off_results(self, cut_off: list[ToolCall]) -> list[ToolResult]:
        return [self.session.log.cut_off_result(c) for c in cut_off]

    async def _run_again(self, cut_off: list[ToolCall], again: list[ToolCall]) -> None:
        log = self.session.log
        # Durably "started" again before it runs, so a call that keeps taking
        # its process down stops being retried after IDEMPOTENT_RETRIES.
        await self._append(CallsStarted(log.turn, tuple(c.id for c in again)))
        ids = {c.id for c in again}
        decided = {
            r.tool_call_id: r for r in self._cut_off_results(cut_off) if r.tool_call_id not in ids
        }
        await self._after_tools(await self._commit_results(await self._execute(cut_off, decided)))

    async def _resume_parked(self) -> RoundDecision:
        log = self.session.log
        parked = log.parked()
        plan = resolve_parked_turn(log, parked, self.tools)
        if plan.unasked:
            # Gated calls nobody was asked about are asked about now, never run.
            await self._park(plan.unasked)
        if plan.run:
            # Durably "started" before anything runs: a crash from here on
            # answers these calls "interrupted", it never runs them again.
            await self._append(CallsStarted(log.turn, tuple(c.id for c in plan.run)))
        return await self._commit_results(await self._execute(parked, plan.decided))

    # ------------------------------------------------------------ decisions

    async def _strategy(self, ctx: RoundContext) -> RoundDecision:
        strategy = self.opts.strategy
        if strategy is None:
            return _PROCEED
        if self.compactor.policy is not None:
            ctx = replace(
                ctx, context_tokens=self.compactor.tokens(), context_window=self.compactor.window()
            )
        decision = await strategy.on_round(ctx)
        if decision.compaction != "auto":
            self.compactor.hint = decision.compaction
        return decision

    async def _decide(self, decision: RoundDecision) -> None:
        await self._apply_adjust(decision.adjust)
        if decision.action == "inject":
            await self._append_message(Message.user(decision.content or ""))
        elif decision.action == "stop":
            raise EndRun(RunStatus.STOPPED)

    async def _apply_adjust(self, adjust: RoundAdjustment | None) -> None:
        if adjust is None:
            return
        if adjust.model is not None:
            await self.session.set_model(adjust.model)
        if adjust.reasoning is not None:
            await self.session.set_reasoning(adjust.reasoning.reasoning)

    def _check_limits(self) -> None:
        o = self.opts
        c = self.controls
        if c.stop.is_set or self.session.log.stop_position > self.start_position:
            raise EndRun(RunStatus.STOPPED)
        remaining = c.remaining
        if remaining is not None and remaining <= 0:
            raise EndRun(RunStatus.DEADLINE)
        if o.max_rounds is not None and self.rounds >= o.max_rounds:
            raise EndRun(RunStatus.BUDGET_EXHAUSTED, f"max_rounds ({o.max_rounds}) reached")
        if o.max_model_requests is not None and self.model_requests >= o.max_model_requests:
            raise EndRun(
                RunStatus.BUDGET_EXHAUSTED, f"max_model_requests ({o.max_model_requests}) reached"
            )
        if c.token_budget is not None and c.meter.root_tokens >= c.token_budget:
            raise EndRun(RunStatus.BUDGET_EXHAUSTED, f"token_budget ({c.token_budget}) reached")

    def _request(self, model: Model, delivery: Delivery | None) -> ModelRequest:
        s = self.session
        # A view, not a copy: copying the history made every round cost in
        # proportion to the session's length.
        messages = s.log.view(Message.user(delivery.text) if delivery is not None else None)
        agent = s.agent
        output_schema, output_tool = self.output.ask(model)
        return ModelRequest(
            messages=messages,
            system=agent.instructions,
            tools=(*s.tool_specs, *output_tool) if output_tool else s.tool_specs,
            settings=s.settings,
            output_schema=output_schema,
            output_name=agent.output_name,
            memo=self.memo,
        )

    # ------------------------------------------------------------ the end

    def _result(self, status: RunStatus, error: str | None) -> RunResult:
        log = self.session.log
        pending: tuple[PendingCall, ...] = ()
        if status is RunStatus.AWAITING_APPROVAL:
            pending = tuple(log.pending_calls())
        output = self.output
        completed = status is RunStatus.COMPLETED and output.accepted
        return RunResult(
            status=status,
            text=output.text
            if completed and output.text is not None
            else log.last_assistant_text(),
            output=output.value if completed else None,
            usage=self.controls.meter.total,
            own_usage=self.controls.meter.own,
            pending=pending,
            session_id=self.session.id,
            run_id=self.run_id,
            rounds=self.rounds,
            model_requests=self.model_requests,
            tool_calls=self.tool_calls,
            transport_retries=self.transport_retries,
            error=error,
            empty_answer=status is RunStatus.COMPLETED and log.last_answer_is_empty(),
            budget_left=self._budget_left,
        )

    async def _finish(self, status: RunStatus, error: str | None) -> RunResult:
        tree: TreeBudget | None = self.controls.tree
        if tree is not None:
            try:
                self._budget_left = await tree.left()
            except Exception:
                # What is left is for show: the run's end is what must be recorded.
                logger.warning("reading what tree budget %s has left failed", tree.tree_id)
        result = self._result(status, error)
        text = result.text
        # Everything the result reports, so a reader of the log (`wait()` in
        # another process) rebuilds this very result (`finished_result`).
        await self._append(
            RunFinishedEntry(
                status,
                error,
                result.usage,
                self.rounds,
                self.model_requests,
                to_jsonable(result.output) if self.output.is_structured else None,
                result.budget_left,
                result.tool_calls,
                result.transport_retries,
                result.own_usage,
                # Always: read back while a later run goes on, the log's last
                # assistant text would be that run's, not this one's.
                text,
            )
        )
        self._event(RunFinished, result=result)
        self.watch.finished(result)
        return result

    async def _record_failure(self, exc: BaseException) -> None:
        # Best effort: a run that failed is visible in the log as FAILED.
        error = f"{type(exc).__name__}: {exc}"
        try:
            await self._append(
                RunFinishedEntry(
                    RunStatus.FAILED,
                    error,
                    self.controls.meter.total,
                    self.rounds,
                    self.model_requests,
                    tool_calls=self.tool_calls,
                    transport_retries=self.transport_retries,
                    own_usage=self.controls.meter.own,
                )
            )
        except Exception:  # the store itself may be what failed
            pass
