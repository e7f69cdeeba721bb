"""Executing one assistant turn's tool calls.

Consecutive calls that are safe to overlap (all `READ_ONLY`, or tools built
`concurrent=True` such as delegation tools) run concurrently; any other call
runs alone. Results come back in the model's call order whatever the
finishing order, one per call. Each call runs inside its watch (its tracing
span is current while the tool runs), so overlapping calls are siblings.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from .._lazy import LazyModule
from .._run_controls import Aborted, CancelScope
from ..messages import ToolCall, ToolResult
from ..results import RunStatus
from ..tools import Tool, ToolContext, ToolEffect, ToolOutput
from ._scope import RunScope, RunState

if TYPE_CHECKING:
    from .. import events
    from ..events import Event
else:
    # Imported once something subscribes: a plain run makes no event.
    events = LazyModule("taskloom.events")

BeforeStep = Callable[[Sequence[ToolCall]], Awaitable[None]]
"""Awaited before each step of a batch starts, with the step's calls."""


CANCELLED = "not finished: the run was cancelled; it may have partly run"
"""The result of a call the run's cancel cut off."""

NOT_RUN_CANCELLED = "not run: the run was cancelled"
"""The result of a call the run was cancelled before it started."""


def _overlaps(tool: Tool | None) -> bool:
    return tool is not None and (tool.concurrent or tool.effect is ToolEffect.READ_ONLY)


def step_count(calls: Sequence[ToolCall], tools: Mapping[str, Tool]) -> int:
    """How many steps `execute_calls` runs `calls` in: each call that runs
    alone is one, each group of consecutive calls that overlap is one."""
    count = 0
    grouping = False
    for call in calls:
        overlaps = _overlaps(tools.get(call.name))
        if not (overlaps and grouping):
            count += 1
        grouping = overlaps
    return count


def result_for_unrunnable(call: ToolCall, tools: Mapping[str, Tool]) -> ToolOutput | None:
    """The in-band error for a call that cannot run at all, else None."""
    tool = tools.get(call.name)
    if tool is None:
        names = ", ".join(sorted(tools)) or "(none)"
        return ToolOutput(f"Unknown tool {call.name!r}. Available tools: {names}.", is_error=True)
    if call.raw_arguments is not None:
        return ToolOutput(
            f"The arguments for tool {call.name!r} are not a valid JSON object: "
            f"{call.raw_arguments[:500]!r}. Send a JSON object following this schema: "
            f"{json.dumps(tool.input_schema)}",
            is_error=True,
        )
    return None


async def run_one(
    call: ToolCall,
    tools: Mapping[str, Tool],
    make_ctx: Callable[[ToolCall], ToolContext],
    scope: RunScope,
) -> ToolResult:
    """Run one call inside its watch, with its started and finished events."""
    emit = scope.emit
    if emit is not None:
        emit(
            events.ToolCallStarted(
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                origin=scope.origin,
                session_id=scope.session_id,
            )
        )
    started = time.monotonic()
    with scope.watch.tool_call(call, tools.get(call.name)) as span:
        output = result_for_unrunnable(call, tools)
        if output is None:
            tool = tools[call.name]
            context = make_ctx(call) if tool.takes_context else None
            output = await tool.call(call.arguments, context)
        span.returned(output)
    if emit is not None:
        emit(
            events.ToolCallFinished(
                call_id=call.id,
                name=call.name,
                content=output.content,
                is_error=output.is_error,
                duration=time.monotonic() - started,
                origin=scope.origin,
                session_id=scope.session_id,
            )
        )
    return ToolResult(call.id, output.content, output.is_error, call.name)


class BatchProgress:
    """How far a batch of calls got: each call's result once it finished, and
    whether it started (both in call order)."""

    __slots__ = ("results", "started")

    def __init__(self, n: int) -> None:
        self.results: list[ToolResult | None] = [None] * n
        self.started = [False] * n


async def execute_calls(
    calls: Sequence[ToolCall],
    tools: Mapping[str, Tool],
    make_ctx: Callable[[ToolCall], ToolContext],
    scope: RunScope,
    progress: BatchProgress,
    before_step: BeforeStep | None = None,
) -> None:
    """Run `calls`, filling `progress` as each starts and finishes, awaiting
    `before_step`, if given, before each step (see `step_count`) starts.

    Filling in place lets the caller keep the results that finished when a
    deadline or a cancel cuts the batch short, and tell the calls that never
    started.
    """
    results, started = progress.results, progress.started
    i = 0
    n = len(calls)
    while i < n:
        j = i + 1
        if _overlaps(tools.get(calls[i].name)):
            while j < n and _overlaps(tools.get(calls[j].name)):
                j += 1
        if before_step is not None:
            await before_step(calls[i:j])
        started[i:j] = [True] * (j - i)
        if j - i == 1:
            results[i] = await run_one(calls[i], tools, make_ctx, scope)
        else:

            async def run_at(k: int) -> None:
                results[k] = await run_one(calls[k], tools, make_ctx, scope)

            async with asyncio.TaskGroup() as group:
                for k in range(i, j):
                    group.create_task(run_at(k))
        i = j


class ToolCalls:
    """Runs the calls of one run's turns, within its tool-call budget and
    deadline, counting them."""

    __slots__ = ("_run",)

    def __init__(self, run: RunState) -> None:
        self._run = run

    def _context(self, call: ToolCall) -> ToolContext:
        run = self._run
        scope = run.scope
        return ToolContext(
            run_id=scope.run_id,
            session_id=scope.session_id,
            call_id=call.id,
            agent=run.agent,
            runtime=run.ports.tools.host,
            controls=run.controls,
            emit=self._emit,
            record=run.journal.append,
            origin=scope.origin,
            deps=run.deps,
            turn=run.log.turn,
        )

    def _emit(self, event: Event) -> None:
        emit = self._run.scope.emit
        if emit is not None:
            emit(event)

    async def run(
        self,
        calls: Sequence[ToolCall],
        tools: Mapping[str, Tool],
        decided: Mapping[str, ToolResult] | None = None,
        before_step: BeforeStep | None = None,
    ) -> list[ToolResult]:
        """One result per call, in call order: `decided` ones as given, the rest
        run (`before_step` awaited before each step starts). Raises `CutShort`
        with every call's result when calls were past the budget, or the
        deadline or the run's cancel cut the batch short."""
        run = self._run
        controls = run.controls
        stop = controls.stop
        if (
            len(calls) == 1
            and before_step is None
            and not decided
            and run.opts.max_tool_calls is None
            and controls.deadline_at is None
        ):
            # The common turn (one call, nothing to cut it short but a cancel):
            # no batch to plan.
            run.counters.tool_calls += 1
            call = calls[0]
            started = False
            try:
                with CancelScope(stop):
                    started = True
                    result = await run_one(call, tools, self._context, run.scope)
            except Aborted:
                text = CANCELLED if started else NOT_RUN_CANCELLED
                result = ToolResult(call.id, text, True, call.name)
            if stop.is_cancelled:
                raise CutShort([result], RunStatus.STOPPED, stop.cancel_reason)
            return [result]
        decided = decided or {}
        to_run = [c for c in calls if c.id not in decided]
        results_run, end = await self._batch(to_run, tools, before_step)
        it = iter(results_run)
        results = [decided.get(c.id) or next(it) for c in calls]
        if end is not None:
            error = stop.cancel_reason if end is RunStatus.STOPPED else None
            raise CutShort(results, end, error)
        return results

    async def _batch(
        self, calls: Sequence[ToolCall], tools: Mapping[str, Tool], before_step: BeforeStep | None
    ) -> tuple[list[ToolResult], RunStatus | None]:
        limit = self._run.opts.max_tool_calls
        counters = self._run.counters
        stop = self._run.controls.stop
        if stop.is_cancelled:
            not_run = [ToolResult(c.id, NOT_RUN_CANCELLED, True, c.name) for c in calls]
            return not_run, RunStatus.STOPPED
        runnable = (
            list(calls) if limit is None else list(calls[: max(0, limit - counters.tool_calls)])
        )
        progress = BatchProgress(len(runnable))
        done, started = progress.results, progress.started
        status: RunStatus | None = None
        batch = execute_calls(
            runnable, tools, self._context, self._run.scope, progress, before_step
        )
        deadline_at = self._run.controls.deadline_at
        unfinished = "not finished: the run's deadline passed; it may have partly run"
        try:
            with CancelScope(stop):
                if deadline_at is None:
                    await batch
                else:
                    async with asyncio.timeout_at(deadline_at):
                        await batch
        except TimeoutError:
            status = RunStatus.DEADLINE
        except Aborted:
            status, unfinished = RunStatus.STOPPED, CANCELLED
        if status is None and stop.is_cancelled:
            status = RunStatus.STOPPED  # every call finished, and the run ends here
        counters.tool_calls += len(runnable)
        if status is RunStatus.STOPPED:
            # A cancel tells the calls it kept from starting.
            done = [
                r if r or ran else ToolResult(c.id, NOT_RUN_CANCELLED, True, c.name)
                for c, r, ran in zip(runnable, done, started, strict=True)
            ]
        results = [
            r or ToolResult(c.id, unfinished, True, c.name)
            for c, r in zip(runnable, done, strict=True)
        ]
        over = calls[len(runnable) :]
        if over:
            if status is RunStatus.STOPPED:
                results += [ToolResult(c.id, NOT_RUN_CANCELLED, True, c.name) for c in over]
            else:
                note = f"not run: the run's tool-call budget ({limit}) is exhausted"
                results += [ToolResult(c.id, note, True, c.name) for c in over]
                status = status or RunStatus.BUDGET_EXHAUSTED
        return results, status


class CutShort(Exception):
    """A turn's calls were cut short (by the tool-call budget, the deadline or
    the run's cancel): every call has its one `results` entry, and the run
    ends with `status` (and `error`, for the result)."""

    def __init__(
        self, results: list[ToolResult], status: RunStatus, error: str | None = None
    ) -> None:
        super().__init__(status.value)
        self.results = results
        self.status = status
        self.error = error
