"""The end of a run: its `RunResult`, and the `RunFinishedEntry` that lets any
reader of the log rebuild that very result (`SessionLog.finished_result`)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from .._run_controls import let_go
from ..entries import RunFinishedEntry
from ..results import BudgetLeft, PendingCall, RunResult, RunStatus
from ._output import to_jsonable
from ._result import End
from ._scope import RunState, append_message
from ._tree_budget import TreeBudget

logger = logging.getLogger("taskloom")


def run_result(end: End, run: RunState, budget_left: BudgetLeft | None = None) -> RunResult:
    """The result of a run that ends as `end` says, its log as it is now."""
    log, output, counters = run.log, run.output, run.counters
    status = end.status
    pending: tuple[PendingCall, ...] = ()
    if status is RunStatus.AWAITING_APPROVAL:
        pending = tuple(log.pending_calls())
    completed = status is RunStatus.COMPLETED and output.accepted
    meter = counters.meter
    return RunResult(
        status=status,
        text=output.text if completed and output.text is not None else log.last_assistant_text(),
        output=output.value if completed else None,
        usage=meter.total,
        own_usage=meter.own,
        pending=pending,
        session_id=run.scope.session_id,
        run_id=run.scope.run_id,
        rounds=counters.rounds,
        model_requests=counters.model_requests,
        tool_calls=counters.tool_calls,
        transport_retries=counters.transport_retries,
        error=end.error,
        empty_answer=status is RunStatus.COMPLETED and log.last_answer_is_empty(),
        budget_left=budget_left,
    )


def completed_on(text: str, run: RunState) -> RunResult:
    """The result of a run of unstructured output completing on its final
    answer `text`, before that answer is in the log: what `run_result` reads
    once it is (its text, the round it ends, whether it is empty)."""
    run.output.check_text(text)
    result = run_result(End(RunStatus.COMPLETED), run)
    return replace(result, text=text, rounds=run.counters.rounds + 1, empty_answer=not text)


def finished_entry(result: RunResult, run: RunState) -> RunFinishedEntry:
    """The entry recording the run's end as `result`: everything the result
    reports, so a reader of the log (`wait()` in another process) rebuilds
    this very result (`finished_result`)."""
    output = run.output
    return RunFinishedEntry(
        result.status,
        result.error,
        result.usage,
        result.rounds,
        result.model_requests,
        to_jsonable(result.output) if output.is_structured else None,
        result.budget_left,
        result.tool_calls,
        result.transport_retries,
        result.own_usage,
        # Always: read back while a later run goes on, the log's last
        # assistant text would be that run's, not this one's.
        result.text,
    )


async def finish(
    end: End, run: RunState, tree: TreeBudget | None, recorded: RunResult | None = None
) -> RunResult:
    """Record the end of the run (`tree`: the budget whose remainder it
    reports) and return its result; `recorded`: the result whose entry was
    written already (with the final answer)."""
    scope = run.scope
    result = recorded
    if result is None:
        budget_left: BudgetLeft | None = None
        if tree is not None:
            try:
                budget_left = await tree.left()
            except Exception:
                # What is left is for show: the run's end is what must be recorded.
                logger.warning("reading what tree budget %s has left failed", tree.tree_id)
        result = run_result(end, run, budget_left)
        await run.journal.record(finished_entry(result, run), scope.run_id)
    scope.event("RunFinished", result=result)
    scope.watch.finished(result)
    return result


async def finish_cancelled(end: End, run: RunState, tree: TreeBudget | None) -> None:
    """Record the end of a run whose task is being cancelled along with its stop
    signal: the calls its turn left open answered in band, then its end (as
    `finish`). Done whole even if the caller is cancelled again meanwhile
    (it then goes on by itself); best effort, as the store may have failed."""

    async def record() -> None:
        answers = run.log.cut_off_results()
        if answers is not None:
            await append_message(run.journal, run.scope.run_id, answers)
        await finish(end, run, tree)

    task = asyncio.ensure_future(record())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        let_go(task)
        raise
    except Exception:
        logger.warning(
            "recording the end of cancelled run %s failed", run.scope.run_id, exc_info=True
        )


async def record_failure(exc: BaseException, run: RunState) -> None:
    """Record that the run failed with `exc`, best effort: the store itself
    may be what failed."""
    counters = run.counters
    meter = counters.meter
    entry = RunFinishedEntry(
        RunStatus.FAILED,
        f"{type(exc).__name__}: {exc}",
        meter.total,
        counters.rounds,
        counters.model_requests,
        tool_calls=counters.tool_calls,
        transport_retries=counters.transport_retries,
        own_usage=meter.own,
    )
    try:
        await run.journal.record(entry, run.scope.run_id)
    except Exception:  # the store itself may be what failed
        pass
