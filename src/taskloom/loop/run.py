"""The round loop. It reads like the order of operations in DESIGN.md:

    1. check stop signal, deadline, budgets
    2. apply deferred items and steering, in the order they arrived
    3. deliver background notices
    4. ask the model (transport retries counted)
    5. commit the assistant message (and ack the notices it carried)
    6a. tool calls: gate approvals, or execute and commit results; strategy
    6b. no tool calls: strategy; pending work keeps the run going; else done

Nothing is written for a turn until its response is complete, so cancelling
the task discards the turn in flight and leaves the log consistent.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import TaskloomError
from ..events import (
    ApprovalRequested,
    Event,
    ModelRequestStarted,
    NoticeDelivered,
    RetryAttempt,
    RoundCommitted,
    RunFinished,
    RunStarted,
    TextDelta,
    ThinkingDelta,
)
from ..messages import Message, ToolCall, ToolResult, Usage
from ..models.base import ModelRequest, ModelResponse, ResponseCompleted
from ..stores.base import Entry, EntryKind
from .approvals import resolve_parked_turn
from .context import ToolContext
from .execute import execute_calls
from .log import fold_text
from .options import RunOptions
from .result import PendingCall, RunResult, RunStatus
from .strategy import RoundAdjustment, RoundBoundary, RoundContext, RoundDecision, RoundToolResult

if TYPE_CHECKING:
    from ..background.notices import Delivery
    from ..runtime import Session

__all__ = ["RunLoop"]

_PROCEED = RoundDecision.proceed()


class _Ended(Exception):
    """Internal: the run ends with this status at the current point."""

    def __init__(self, status: RunStatus, error: str | None = None) -> None:
        self.status = status
        self.error = error


class RunLoop:
    """One run of a session: owns the counters, talks to the session's log."""

    def __init__(
        self,
        session: Session,
        options: RunOptions | None,
        emit: Callable[[Event], None] | None,
        origin: str = "",
    ) -> None:
        self.session = session
        self.opts = (options or RunOptions()).bind()
        self.emit = emit
        self.origin = origin
        self.run_id = uuid.uuid4().hex
        self.rounds = 0
        self.model_requests = 0
        self.transport_retries = 0
        self.tool_calls = 0
        self.fixes_used = 0
        self.output: Any = None
        self._held: Delivery | None = None
        self.start_position = 0
        self.background = session.runtime.background
        self.notices = self.background.run_notices(session.id, self.run_id)

    # ------------------------------------------------------------ events

    def _event(self, cls: type[Any], **fields: Any) -> None:
        if self.emit is not None:
            self.emit(cls(origin=self.origin, session_id=self.session.id, **fields))

    # ------------------------------------------------------------ entry points

    async def run(self, user: Message | None, *, resume: bool = False) -> RunResult:
        """Run to an end status; provider and configuration errors propagate."""
        try:
            return await self._run(user, resume)
        finally:
            self.background.run_ended(self.run_id)

    async def _run(self, user: Message | None, resume: bool) -> RunResult:
        session = self.session
        await session._sync()
        if not resume:
            parked = session.log.parked()
            if parked:
                raise TaskloomError(
                    f"session {session.id} is awaiting approval for "
                    f"{', '.join(c.id for c in parked)}: approve or deny, then resume()"
                )
        await session._repair_interrupted(self.run_id)
        # Stop requests written before this run started are not for it.
        self.start_position = session.log.position
        await session._append(
            Entry(
                EntryKind.RUN_STARTED, {"agent": session.agent.name, "resume": resume}, self.run_id
            )
        )
        self._event(RunStarted, run_id=self.run_id, agent=session.agent.name)
        if user is not None:
            await session._append_message(user, self.run_id)
        try:
            if resume:
                await self._decide(await self._resume_parked())
            while True:
                # A round boundary is a scheduling point: with a model that
                # never waits (scripted, cached), background work and other
                # runs on this loop still get their turn.
                await asyncio.sleep(0)
                # 1. limits, after folding in what other processes wrote
                await session._sync()
                self._check_limits()
                await self._round()
        except _Ended as end:
            return await self._finish(end.status, end.error)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                # Best effort: a failed run is visible in the log.
                try:
                    await session._append(
                        Entry(
                            EntryKind.RUN_FINISHED,
                            {"status": "error", "error": f"{type(exc).__name__}: {exc}"},
                            self.run_id,
                        )
                    )
                except Exception:
                    pass
            raise

    # ------------------------------------------------------------ one round

    async def _round(self) -> None:
        session = self.session
        # 2. deferred items and steering, in arrival order
        await self._fold_pending()
        # 3. background notices
        delivery = await self.notices.round_start()
        if self._held is not None:
            delivery = self._held if delivery is None else _merge(self._held, delivery)
            self._held = None
        # 4. ask the model
        response = await self._ask(delivery)
        # 5. commit the assistant message with the notices it carried
        message = response.message
        await session._append_message(message, self.run_id, delivered=delivery)
        if delivery is not None:
            await self.background.ack(session.id, delivery)
        self.rounds += 1
        self.opts._meter.add(response.usage)  # type: ignore[union-attr]
        calls = message.tool_calls
        if calls:
            await self._tool_round(calls)
            return
        self._event(
            RoundCommitted,
            run_id=self.run_id,
            round=self.rounds,
            boundary=RoundBoundary.ASSISTANT_MESSAGE_COMMITTED.value,
        )
        decision = await self._strategy(
            RoundContext(
                RoundBoundary.ASSISTANT_MESSAGE_COMMITTED,
                self.rounds,
                self.model_requests,
                self.transport_retries,
                assistant_message=message,
                session_id=session.id,
                run_id=self.run_id,
            )
        )
        if decision.action != "continue":
            await self._decide(decision)
            return
        await self._apply_adjust(decision.adjust)
        # A run does not return while something it started has an answer
        # the model has not seen.
        await session._sync()
        if session.log.pending:
            return
        final = await self.notices.before_final()
        if final is not None:
            # Held for the next round: it rides on that round's assistant
            # entry and is acknowledged only once that entry is persisted.
            self._held = final
            return
        await self._check_output(message)

    async def _tool_round(self, calls: list[ToolCall]) -> None:
        session = self.session
        gated = [c for c in calls if self._needs_approval(c)]
        if gated:
            for c in gated:
                await session._request_approval(c, self.run_id)
                self._event(ApprovalRequested, call_id=c.id, name=c.name, arguments=c.arguments)
            raise _Ended(RunStatus.AWAITING_APPROVAL)
        results = await self._execute(calls)
        decision = await self._commit_results(results)
        await self._decide(decision)

    def _needs_approval(self, call: ToolCall) -> bool:
        tool = self.session.tools.get(call.name)
        if tool is None or not tool.is_gated or call.raw_arguments is not None:
            return False
        try:
            return tool.requires_approval(call.arguments)
        except Exception:
            # A predicate that cannot judge the arguments errs on the side of asking.
            return True

    async def _execute(
        self, calls: Sequence[ToolCall], allowed: set[str] | None = None
    ) -> list[ToolResult]:
        """Run calls within the tool-call budget and deadline; one result each."""
        budget = self.opts.max_tool_calls
        runnable: list[ToolCall] = []
        results: list[ToolResult | None] = [None] * len(calls)
        over = False
        for i, c in enumerate(calls):
            if budget is not None and self.tool_calls + len(runnable) >= budget:
                over = True
                results[i] = ToolResult(
                    c.id,
                    f"not run: the run's tool-call budget ({budget}) is exhausted",
                    True,
                    c.name,
                )
            else:
                runnable.append(c)
        index = [i for i, r in enumerate(results) if r is None]
        sub: list[ToolResult | None] = [None] * len(runnable)
        ended: _Ended | None = None
        run = execute_calls(
            runnable,
            self.session.tools,
            self._context,
            self.emit,
            results=sub,
            origin=self.origin,
            session_id=self.session.id,
        )
        try:
            if self.opts._deadline_at is None:
                await run
            else:
                async with asyncio.timeout_at(self.opts._deadline_at):
                    await run
        except TimeoutError:
            ended = _Ended(RunStatus.DEADLINE)
        for k, i in enumerate(index):
            c = calls[i]
            results[i] = sub[k] or ToolResult(
                c.id,
                "not finished: the run's deadline passed; it may have partly run",
                True,
                c.name,
            )
        self.tool_calls += len(runnable)
        final = [r for r in results if r is not None]
        if ended is not None:
            await self.session._append_message(Message.tool_results(final), self.run_id)
            raise ended
        if over:
            await self.session._append_message(Message.tool_results(final), self.run_id)
            raise _Ended(RunStatus.BUDGET_EXHAUSTED)
        return final

    def _context(self, call: ToolCall) -> ToolContext:
        s = self.session
        return ToolContext(
            run_id=self.run_id,
            session_id=s.id,
            call_id=call.id,
            agent=s.agent,
            runtime=s.runtime,
            session=s,
            options=self.opts,
            emit=self._emit_from_tool,
            origin=self.origin,
        )

    def _emit_from_tool(self, event: Event) -> None:
        if self.emit is not None:
            self.emit(event)

    async def _commit_results(self, results: list[ToolResult]) -> RoundDecision:
        await self.session._append_message(Message.tool_results(results), self.run_id)
        # Notices a tool showed the model itself (e.g. background_wait) are
        # acknowledged now that the results carrying them are persisted.
        seen = self.notices.take_seen()
        if seen:
            await self.background.inbox.ack(self.session.id, seen)
        self._event(
            RoundCommitted,
            run_id=self.run_id,
            round=self.rounds,
            boundary=RoundBoundary.TOOL_RESULTS_COMMITTED.value,
        )
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

    async def _resume_parked(self) -> RoundDecision:
        parked = self.session.log.parked()
        if not parked:
            return _PROCEED
        decided, to_run = resolve_parked_turn(self.session, parked)
        ran = iter(await self._execute(to_run)) if to_run else iter(())
        results = [decided.get(c.id) or next(ran) for c in parked]
        return await self._commit_results(results)

    # ------------------------------------------------------------ decisions

    async def _strategy(self, ctx: RoundContext) -> RoundDecision:
        strategy = self.opts.strategy
        if strategy is None:
            return _PROCEED
        return await strategy.on_round(ctx)

    async def _decide(self, decision: RoundDecision) -> None:
        await self._apply_adjust(decision.adjust)
        if decision.action == "inject":
            await self.session._append_message(Message.user(decision.content or ""), self.run_id)
        elif decision.action == "stop":
            raise _Ended(RunStatus.STOPPED)

    async def _apply_adjust(self, adjust: RoundAdjustment | None) -> None:
        if adjust is None:
            return
        if adjust.model is not None:
            await self.session.set_model(adjust.model)
        if adjust.reasoning is not None:
            await self.session.set_reasoning(adjust.reasoning.reasoning)

    def _check_limits(self) -> None:
        o = self.opts
        if o.stop.is_set or self.session.log.stop_position > self.start_position:
            raise _Ended(RunStatus.STOPPED)
        remaining = o.remaining
        if remaining is not None and remaining <= 0:
            raise _Ended(RunStatus.DEADLINE)
        if o.max_rounds is not None and self.rounds >= o.max_rounds:
            raise _Ended(RunStatus.BUDGET_EXHAUSTED, f"max_rounds ({o.max_rounds}) reached")
        if o.max_model_requests is not None and self.model_requests >= o.max_model_requests:
            raise _Ended(
                RunStatus.BUDGET_EXHAUSTED, f"max_model_requests ({o.max_model_requests}) reached"
            )
        if (
            o.token_budget is not None
            and o._meter is not None
            and o._meter.root_tokens >= o.token_budget
        ):
            raise _Ended(RunStatus.BUDGET_EXHAUSTED, f"token_budget ({o.token_budget}) reached")

    async def _fold_pending(self) -> None:
        pending = self.session.log.pending
        if pending:
            await self.session._append_message(
                Message.user(fold_text(pending)), self.run_id, folds=[e.position for e in pending]
            )

    async def _check_output(self, message: Message) -> None:
        agent = self.session.agent
        if agent.output_schema is None:
            raise _Ended(RunStatus.COMPLETED)
        try:
            self.output = agent.parse_output(message.text)
        except ValueError as exc:
            if self.fixes_used >= agent.fixes:
                raise _Ended(
                    RunStatus.FAILED, f"the answer did not match the output schema: {exc}"
                ) from None
            self.fixes_used += 1
            await self.session._append_message(
                Message.user(
                    f"Your answer did not match the required output schema: {exc}\n"
                    "Reply again with only a JSON value that follows the schema."
                ),
                self.run_id,
            )
            return
        raise _Ended(RunStatus.COMPLETED)

    # ------------------------------------------------------------ the model

    def _request(self, delivery: Delivery | None) -> ModelRequest:
        s = self.session
        messages: Sequence[Message] = tuple(s.log.messages)
        if delivery is not None:
            messages = (*messages, Message.user(delivery.text))
        agent = s.agent
        return ModelRequest(
            messages=messages,
            system=agent.instructions,
            tools=s.tool_specs,
            settings=s.settings,
            output_schema=agent.output_json_schema,
            output_name=agent.output_name,
        )

    async def _ask(self, delivery: Delivery | None) -> ModelResponse:
        request = self._request(delivery)
        if delivery is not None:
            self._event(NoticeDelivered, text=delivery.text, notice_ids=tuple(delivery.ack_ids))
        model = self.session.model
        policy = self.opts.retry
        retries = 0
        while True:
            if (
                self.opts.max_model_requests is not None
                and self.model_requests >= self.opts.max_model_requests
            ):
                raise _Ended(
                    RunStatus.BUDGET_EXHAUSTED, "max_model_requests reached while retrying"
                )
            self.model_requests += 1
            self._event(
                ModelRequestStarted,
                run_id=self.run_id,
                round=self.rounds + 1,
                model=model.name,
                attempt=retries + 1,
            )
            try:
                if self.opts._deadline_at is None:
                    return await self._attempt(model, request)
                async with asyncio.timeout_at(self.opts._deadline_at):
                    return await self._attempt(model, request)
            except TimeoutError:
                raise _Ended(RunStatus.DEADLINE) from None
            except Exception as exc:
                if not policy.should_retry(exc, retries):
                    raise
                retries += 1
                self.transport_retries += 1
                delay = policy.delay(retries, exc)
                self._event(
                    RetryAttempt,
                    attempt=retries,
                    delay=delay,
                    error=str(exc),
                    status=getattr(exc, "status", None),
                )
                remaining = self.opts.remaining
                if remaining is not None and remaining <= delay:
                    raise _Ended(RunStatus.DEADLINE) from None
                await asyncio.sleep(delay)

    async def _attempt(self, model: Any, request: ModelRequest) -> ModelResponse:
        emit = self.emit
        if emit is None:
            return await model.request(request)  # type: ignore[no-any-return]
        response: ModelResponse | None = None
        async for ev in model.stream(request):
            if isinstance(ev, ResponseCompleted):
                response = ev.response
            elif isinstance(ev, TextDelta):
                emit(TextDelta(text=ev.text, origin=self.origin, session_id=self.session.id))
            elif isinstance(ev, ThinkingDelta):
                emit(ThinkingDelta(text=ev.text, origin=self.origin, session_id=self.session.id))
        if response is None:
            raise RuntimeError(f"model {model.name!r} stream ended without a response")
        return response

    # ------------------------------------------------------------ the end

    async def _finish(self, status: RunStatus, error: str | None) -> RunResult:
        s = self.session
        log = s.log
        pending: tuple[PendingCall, ...] = ()
        if status is RunStatus.AWAITING_APPROVAL:
            pending = tuple(
                PendingCall(c.id, c.name, c.arguments) for c in log.parked() if c.id in log.requests
            )
        meter = self.opts._meter
        usage = meter.total if meter is not None else None
        result = RunResult(
            status=status,
            text=log.last_assistant_text(),
            output=self.output,
            usage=usage if usage is not None else Usage(),
            pending=pending,
            session_id=s.id,
            run_id=self.run_id,
            rounds=self.rounds,
            model_requests=self.model_requests,
            tool_calls=self.tool_calls,
            transport_retries=self.transport_retries,
            error=error,
        )
        await s._append(
            Entry(
                EntryKind.RUN_FINISHED,
                {
                    "status": status.value,
                    "error": error,
                    "usage": result.usage.to_dict(),
                    "rounds": self.rounds,
                    "model_requests": self.model_requests,
                    "output": _jsonable(self.output),
                },
                self.run_id,
            )
        )
        self._event(RunFinished, result=result)
        return result


def _merge(first: Delivery, second: Delivery) -> Delivery:
    return type(first)(first.text + "\n" + second.text, (*first.ack_ids, *second.ack_ids))


def _jsonable(value: Any) -> Any:
    if value is None:
        return None
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)
