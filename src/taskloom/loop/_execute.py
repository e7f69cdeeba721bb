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
from collections.abc import Callable, Mapping, Sequence

from ..events import Event, ToolCallFinished, ToolCallStarted
from ..messages import ToolCall, ToolResult
from ..results import RunStatus
from ..tools import Tool, ToolContext, ToolEffect, ToolOutput
from ._port import NO_WATCH, RunWatch

__all__ = ["execute_calls", "result_for_unrunnable", "run_batch", "run_one"]


def _overlaps(tool: Tool | None) -> bool:
    return tool is not None and (tool.concurrent or tool.effect is ToolEffect.READ_ONLY)


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
    emit: Callable[[Event], None] | None,
    origin: str,
    session_id: str,
    watch: RunWatch,
) -> ToolResult:
    """Run one call inside its watch, with its started and finished events."""
    if emit is not None:
        emit(
            ToolCallStarted(
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                origin=origin,
                session_id=session_id,
            )
        )
    started = time.monotonic()
    with watch.tool_call(call, tools.get(call.name)) as span:
        output = result_for_unrunnable(call, tools)
        if output is None:
            tool = tools[call.name]
            context = make_ctx(call) if tool.takes_context else None
            output = await tool.call(call.arguments, context)
        span.returned(output)
    if emit is not None:
        emit(
            ToolCallFinished(
                call_id=call.id,
                name=call.name,
                content=output.content,
                is_error=output.is_error,
                duration=time.monotonic() - started,
                origin=origin,
                session_id=session_id,
            )
        )
    return ToolResult(call.id, output.content, output.is_error, call.name)


async def execute_calls(
    calls: Sequence[ToolCall],
    tools: Mapping[str, Tool],
    make_ctx: Callable[[ToolCall], ToolContext],
    emit: Callable[[Event], None] | None,
    *,
    results: list[ToolResult | None],
    origin: str = "",
    session_id: str = "",
    watch: RunWatch = NO_WATCH,
) -> None:
    """Run `calls`, filling `results` (same length, call order) as each finishes.

    Filling in place lets the caller keep the results that finished when a
    deadline cuts the batch short.
    """
    i = 0
    n = len(calls)
    while i < n:
        if not _overlaps(tools.get(calls[i].name)):
            results[i] = await run_one(calls[i], tools, make_ctx, emit, origin, session_id, watch)
            i += 1
            continue
        j = i
        while j < n and _overlaps(tools.get(calls[j].name)):
            j += 1
        if j - i == 1:
            results[i] = await run_one(calls[i], tools, make_ctx, emit, origin, session_id, watch)
        else:

            async def run_at(k: int) -> None:
                results[k] = await run_one(
                    calls[k], tools, make_ctx, emit, origin, session_id, watch
                )

            async with asyncio.TaskGroup() as group:
                for k in range(i, j):
                    group.create_task(run_at(k))
        i = j


async def run_batch(
    calls: Sequence[ToolCall],
    tools: Mapping[str, Tool],
    make_ctx: Callable[[ToolCall], ToolContext],
    emit: Callable[[Event], None] | None,
    *,
    budget: int | None,
    used: int,
    deadline_at: float | None,
    origin: str = "",
    session_id: str = "",
    watch: RunWatch = NO_WATCH,
) -> tuple[list[ToolResult], RunStatus | None, int]:
    """One turn's calls within the tool-call budget and the deadline.

    Returns a result per call (in call order), the status the run must end
    with (BUDGET_EXHAUSTED when calls were past the budget, DEADLINE when it
    cut the batch short) or None, and how many calls ran. Calls past the
    budget, or cut off by the deadline, get an error result saying so.
    """
    runnable = list(calls) if budget is None else list(calls[: max(0, budget - used)])
    done: list[ToolResult | None] = [None] * len(runnable)
    status: RunStatus | None = None
    batch = execute_calls(
        runnable,
        tools,
        make_ctx,
        emit,
        results=done,
        origin=origin,
        session_id=session_id,
        watch=watch,
    )
    try:
        if deadline_at is None:
            await batch
        else:
            async with asyncio.timeout_at(deadline_at):
                await batch
    except TimeoutError:
        status = RunStatus.DEADLINE
    results = [
        r
        or ToolResult(
            c.id, "not finished: the run's deadline passed; it may have partly run", True, c.name
        )
        for c, r in zip(runnable, done, strict=True)
    ]
    over = calls[len(runnable) :]
    if over:
        note = f"not run: the run's tool-call budget ({budget}) is exhausted"
        results += [ToolResult(c.id, note, True, c.name) for c in over]
        status = status or RunStatus.BUDGET_EXHAUSTED
    return results, status, len(runnable)
