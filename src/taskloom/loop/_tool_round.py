"""Step 6a of a round: a turn's tool calls parked for approval, or run and
their results committed; and the turns a run takes up where an earlier one
left them (calls cut off by a crash, a turn parked for approval)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..entries import CallsStarted
from ..log import SessionLog
from ..messages import Message, ToolCall, ToolResult
from ..results import RunStatus
from ..tools import IDEMPOTENT_RETRIES, Tool
from ._approvals import Gate, requests_for, resolve_parked_turn
from ._boundary import RoundBoundary
from ._execute import CutShort, ToolCalls, step_count
from ._result import End
from ._scope import RunState, append_message, append_results


def to_run_again(
    log: SessionLog, cut_off: Sequence[ToolCall], tools: Mapping[str, Tool]
) -> list[ToolCall]:
    """The cut-off calls that run again: those of idempotent tools, not denied,
    started again fewer than `IDEMPOTENT_RETRIES` times (a call that never
    started runs now, as the turn would have run it)."""
    return [
        c
        for c in cut_off
        if (t := tools.get(c.name)) is not None
        and t.idempotent
        and log.retryable(c, IDEMPOTENT_RETRIES)
    ]


def cut_off_results(log: SessionLog, cut_off: Sequence[ToolCall]) -> list[ToolResult]:
    """The result each cut-off call gets when it does not run again."""
    return [log.cut_off_result(c) for c in cut_off]


class ToolRound:
    """The tool calls of one run's turns: gated, run, committed."""

    __slots__ = ("_calls", "_run")

    def __init__(self, run: RunState) -> None:
        self._run = run
        self._calls = ToolCalls(run)

    async def park(self, gated: Sequence[Gate]) -> End:
        """Ask for decisions on the turn's gated calls; the run ends
        AWAITING_APPROVAL."""
        # One entry for the whole turn: a crash leaves every gated call of
        # the turn requested, or none (and then none runs: see resume).
        scope = self._run.scope
        await self._run.journal.record(requests_for(self._run.log.turn, gated), scope.run_id)
        for g in gated:
            c = g.call
            scope.event(
                "ApprovalRequested",
                call_id=c.id,
                name=c.name,
                arguments=c.arguments,
                reason=g.reason,
            )
        return End(RunStatus.AWAITING_APPROVAL)

    async def run(
        self,
        calls: Sequence[ToolCall],
        tools: Mapping[str, Tool],
        decided: Mapping[str, ToolResult] | None = None,
    ) -> list[ToolResult] | End:
        """One result per call, in call order, committed (`commit`): `decided`
        ones as given, the rest run; or the run's end. Calls cut short by the
        budget or the deadline end the run, once every call's result is
        committed.

        A turn run in several steps (calls that run alone: see `step_count`)
        records each step before it starts, so that after a crash a call no
        step record names is known not to have run (`SessionLog.never_started`);
        a turn once run in steps records every later pass of it too. A turn
        of one step records nothing: a crash leaves every call of it "may
        have run", as it should."""
        log = self._run.log
        to_run = calls if not decided else [c for c in calls if c.id not in decided]
        stepped = log.in_steps or (len(to_run) > 1 and step_count(to_run, tools) > 1)
        try:
            results = await self._calls.run(
                calls, tools, decided, self._record_step if stepped else None
            )
        except CutShort as cut:
            answers = Message.tool_results(cut.results)
            await append_message(self._run.journal, self._run.scope.run_id, answers)
            return End(cut.status, cut.error)
        return await self.commit(results) or results

    async def _record_step(self, calls: Sequence[ToolCall]) -> None:
        ids = tuple(c.id for c in calls)
        await self._run.journal.record(
            CallsStarted(self._run.log.turn, ids, step=True), self._run.scope.run_id
        )

    async def not_run(self, calls: Sequence[ToolCall], end: End) -> End:
        """Answer every call of the turn as not run, the run having been
        stopped before its tools started; the run ends as `end` says."""
        why = "cancelled" if end.error else "stopped"
        text = f"not run: the run was {why} before its tools started"
        return await self.commit([ToolResult(c.id, text, True, c.name) for c in calls]) or end

    async def commit(self, results: list[ToolResult]) -> End | None:
        """Append the turn's results, then acknowledge the notices a tool
        showed the model itself (they are persisted with the results).

        A call that waits on a child parked on escalated calls (an inline
        escalation: `SessionLog.held_calls`) gets no result: the others'
        are committed and the run ends AWAITING_APPROVAL, the turn parked on
        it until a resume runs the call again (which takes up the child)."""
        run = self._run
        scope = run.scope
        held = run.log.held_calls()
        if held and any(r.tool_call_id in held for r in results):
            done = [r for r in results if r.tool_call_id not in held]
            if done:
                await append_message(run.journal, scope.run_id, Message.tool_results(done))
            return End(RunStatus.AWAITING_APPROVAL)
        # The next boundary's inbox read goes with the results: one round trip.
        await append_results(run.journal, scope.run_id, Message.tool_results(results))
        # Notices a tool showed the model itself (background_wait, read_agent)
        # are acknowledged now that the results carrying them are persisted.
        seen = run.notices.take_seen()
        if seen:
            await run.ports.notices.ack(scope.session_id, seen)
        scope.round_committed(run.counters, RoundBoundary.TOOL_RESULTS_COMMITTED)
        return None

    async def run_again(
        self, cut_off: Sequence[ToolCall], again: Sequence[ToolCall], tools: Mapping[str, Tool]
    ) -> list[ToolResult] | End:
        """Run the `again` calls of a turn whose calls were cut off and commit a
        result for every cut-off call; the results (or the run's end)."""
        log = self._run.log
        # Durably "started" again before it runs, so a call that keeps taking
        # its process down stops being retried after IDEMPOTENT_RETRIES. A
        # call that never started is not retried but run for the first time:
        # no retry is counted (its step record says it started).
        retried = tuple(c.id for c in again if not log.never_started(c))
        if retried:
            await self._run.journal.record(CallsStarted(log.turn, retried), self._run.scope.run_id)
        ids = {c.id for c in again}
        decided = {
            r.tool_call_id: r for r in cut_off_results(log, cut_off) if r.tool_call_id not in ids
        }
        return await self.run(cut_off, tools, decided)

    async def resume_parked(self, tools: Mapping[str, Tool]) -> list[ToolResult] | End:
        """Run the parked (or `reopened`) turn's approved calls, answer its
        denied ones, commit; the results (or the run's end). Gated calls
        nobody was asked about are asked about now."""
        log = self._run.log
        parked = log.parked() or log.reopened()
        plan = resolve_parked_turn(log, parked, tools)
        if plan.unasked:
            # Gated calls nobody was asked about are asked about now, never run.
            return await self.park(plan.unasked)
        if plan.run:
            # Durably "started" before anything runs: a crash from here on
            # takes these calls up as cut off (the turn is parked no more),
            # answered "interrupted" or, idempotent ones, run again.
            await self._run.journal.record(
                CallsStarted(log.turn, tuple(c.id for c in plan.run)), self._run.scope.run_id
            )
        return await self.run(parked, tools, plan.decided)
