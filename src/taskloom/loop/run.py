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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import TaskloomError
from ..events import (
    ApprovalRequested,
    Event,
    NoticeDelivered,
    RoundCommitted,
    RunFinished,
    RunStarted,
)
from ..messages import Message, ToolCall, ToolResult
from ..models.base import ModelRequest
from ..stores.base import Entry, EntryKind
from .approvals import resolve_parked_turn
from .ask import ask_model
from .context import ToolContext
from .execute import run_batch
from .log import fold_text
from .options import RunOptions
from .result import EndRun, PendingCall, RunResult, RunStatus
from .strategy import RoundAdjustment, RoundBoundary, RoundContext, RoundDecision, RoundToolResult

if TYPE_CHECKING:
    from ..background.notices import Delivery
    from ..runtime import Session

__all__ = ["RunLoop"]

_PROCEED = RoundDecision.proceed()


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
        self.rounds = self.model_requests = self.transport_retries = self.tool_calls = 0
        self.fixes_used = 0
        self.output: Any = None
        self.start_position = 0
        self.background = session.runtime.background
        self.notices = self.background.run_notices(session.id, self.run_id)
        self._held: Delivery | None = None

    def _event(self, cls: type[Any], **fields: Any) -> None:
        if self.emit is not None:
            self.emit(cls(origin=self.origin, session_id=self.session.id, **fields))

    # ------------------------------------------------------------ the run

    async def run(self, user: Message | None, *, resume: bool = False) -> RunResult:
        """Run to an end status; provider and configuration errors propagate."""
        try:
            return await self._run(user, resume)
        finally:
            self.background.run_ended(self.run_id)

    async def _run(self, user: Message | None, resume: bool) -> RunResult:
        session = self.session
        await session._sync()
        parked = session.log.parked()
        if parked and not resume:
            raise TaskloomError(
                f"session {session.id} is awaiting approval for "
                f"{', '.join(c.id for c in parked)}: approve or deny, then resume()"
            )
        if resume and not parked:
            raise TaskloomError(f"session {session.id} has no turn parked for approval to resume")
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
                await session._sync()
                self._check_limits()
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
            folds = [e.position for e in pending]
            await session._append_message(
                Message.user(fold_text(pending)), self.run_id, folds=folds
            )
        # 3. background notices (and a reminder held from the last boundary)
        delivery = await self.notices.round_start()
        if self._held is not None:
            delivery = self._held if delivery is None else self._held.merged(delivery)
            self._held = None
        # 4. ask the model
        if delivery is not None:
            self._event(NoticeDelivered, text=delivery.text, notice_ids=tuple(delivery.ack_ids))
        response = await ask_model(
            session.model,
            self._request(delivery),
            opts=self.opts,
            counters=self,
            emit=self.emit,
            origin=self.origin,
            session_id=session.id,
        )
        # 5. commit the assistant message with the notices it carried, then ack them
        message = response.message
        await session._append_message(message, self.run_id, delivered=delivery)
        if delivery is not None:
            await self.background.ack(session.id, delivery)
        self.rounds += 1
        self.opts._meter.add(response.usage)  # type: ignore[union-attr]
        calls = message.tool_calls
        if calls:
            await self._tool_round(calls)  # 6a
        else:
            await self._final_round(message)  # 6b

    async def _tool_round(self, calls: list[ToolCall]) -> None:
        gated = [c for c in calls if self._needs_approval(c)]
        if gated:
            for c in gated:
                await self.session._request_approval(c, self.run_id)
                self._event(ApprovalRequested, call_id=c.id, name=c.name, arguments=c.arguments)
            raise EndRun(RunStatus.AWAITING_APPROVAL)
        await self._decide(await self._commit_results(await self._execute(calls)))

    async def _final_round(self, message: Message) -> None:
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
                session_id=self.session.id,
                run_id=self.run_id,
            )
        )
        if decision.action != "continue":
            await self._decide(decision)
            return
        await self._apply_adjust(decision.adjust)
        # A run does not return while something it started has an answer the
        # model has not seen: steering or deferred items that landed, unseen
        # completions, or a first reminder of work still running.
        await self.session._sync()
        if self.session.log.pending:
            return
        final = await self.notices.before_final()
        if final is not None:
            # Held for the next round: it rides on that round's assistant
            # entry and is acknowledged only once that entry is persisted.
            self._held = final
            return
        await self._check_output(message)

    # ------------------------------------------------------------ tools

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
        self, calls: Sequence[ToolCall], decided: Mapping[str, ToolResult] | None = None
    ) -> list[ToolResult]:
        """One result per call, in call order: `decided` ones as given, the rest run."""
        decided = decided or {}
        results_run, end, ran = await run_batch(
            [c for c in calls if c.id not in decided],
            self.session.tools,
            self._context,
            self.emit,
            budget=self.opts.max_tool_calls,
            used=self.tool_calls,
            deadline_at=self.opts._deadline_at,
            origin=self.origin,
            session_id=self.session.id,
        )
        self.tool_calls += ran
        it = iter(results_run)
        results = [decided.get(c.id) or next(it) for c in calls]
        if end is not None:
            # Every call still gets its one result before the run ends.
            await self.session._append_message(Message.tool_results(results), self.run_id)
            raise EndRun(end)
        return results

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
        # Notices a tool showed the model itself (background_wait, read_agent)
        # are acknowledged now that the results carrying them are persisted.
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
        decided = resolve_parked_turn(self.session, parked)
        return await self._commit_results(await self._execute(parked, decided))

    # ------------------------------------------------------------ decisions

    async def _strategy(self, ctx: RoundContext) -> RoundDecision:
        strategy = self.opts.strategy
        return _PROCEED if strategy is None else await strategy.on_round(ctx)

    async def _decide(self, decision: RoundDecision) -> None:
        await self._apply_adjust(decision.adjust)
        if decision.action == "inject":
            await self.session._append_message(Message.user(decision.content or ""), self.run_id)
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
        if o.stop.is_set or self.session.log.stop_position > self.start_position:
            raise EndRun(RunStatus.STOPPED)
        remaining = o.remaining
        if remaining is not None and remaining <= 0:
            raise EndRun(RunStatus.DEADLINE)
        if o.max_rounds is not None and self.rounds >= o.max_rounds:
            raise EndRun(RunStatus.BUDGET_EXHAUSTED, f"max_rounds ({o.max_rounds}) reached")
        if o.max_model_requests is not None and self.model_requests >= o.max_model_requests:
            raise EndRun(
                RunStatus.BUDGET_EXHAUSTED, f"max_model_requests ({o.max_model_requests}) reached"
            )
        if (
            o.token_budget is not None
            and o._meter is not None
            and o._meter.root_tokens >= o.token_budget
        ):
            raise EndRun(RunStatus.BUDGET_EXHAUSTED, f"token_budget ({o.token_budget}) reached")

    async def _check_output(self, message: Message) -> None:
        agent = self.session.agent
        if agent.output_schema is None:
            raise EndRun(RunStatus.COMPLETED)
        try:
            self.output = agent.parse_output(message.text)
        except ValueError as exc:
            if self.fixes_used >= agent.fixes:
                raise EndRun(
                    RunStatus.FAILED, f"the answer did not match the output schema: {exc}"
                ) from None
            self.fixes_used += 1
            fix = (
                f"Your answer did not match the required output schema: {exc}\n"
                "Reply again with only a JSON value that follows the schema."
            )
            await self.session._append_message(Message.user(fix), self.run_id)
            return
        raise EndRun(RunStatus.COMPLETED)

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

    # ------------------------------------------------------------ the end

    async def _finish(self, status: RunStatus, error: str | None) -> RunResult:
        log = self.session.log
        pending: tuple[PendingCall, ...] = ()
        if status is RunStatus.AWAITING_APPROVAL:
            pending = tuple(
                PendingCall(c.id, c.name, c.arguments) for c in log.parked() if c.id in log.requests
            )
        result = RunResult(
            status=status,
            text=log.last_assistant_text(),
            output=self.output,
            usage=self.opts._meter.total,  # type: ignore[union-attr]
            pending=pending,
            session_id=self.session.id,
            run_id=self.run_id,
            rounds=self.rounds,
            model_requests=self.model_requests,
            tool_calls=self.tool_calls,
            transport_retries=self.transport_retries,
            error=error,
        )
        record = {
            "status": status.value,
            "error": error,
            "usage": result.usage.to_dict(),
            "rounds": self.rounds,
            "model_requests": self.model_requests,
            "output": _jsonable(self.output),
        }
        await self.session._append(Entry(EntryKind.RUN_FINISHED, record, self.run_id))
        self._event(RunFinished, result=result)
        return result

    async def _record_failure(self, exc: BaseException) -> None:
        # Best effort: a run that failed is visible in the log.
        try:
            record = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            await self.session._append(Entry(EntryKind.RUN_FINISHED, record, self.run_id))
        except Exception:
            pass


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)
