"""A queued run continues the trace of whoever submitted it (`traceparent` in the job)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from queue_app import build

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus
from tracing_support import in_memory

pytestmark = [requires_postgres, pytest.mark.slow]


async def test_a_queued_run_continues_the_submitters_trace(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TLQ_EFFECTS", str(tmp_path / "effects.txt"))
    traced = next(in_memory())
    observer = traced.observer()
    host = build(PG_DSN, pg_schema, observer=observer)
    worker_runtime = build(PG_DSN, pg_schema, observer=observer)
    queue = worker_runtime.queue
    assert queue is not None
    worker = queue.worker(worker_runtime)  # type: ignore[attr-defined]
    # The worker's task starts outside the submitter's span: only the job's
    # traceparent can put the run into that trace.
    running = asyncio.create_task(worker.run())
    try:
        session = await host.create_session(host.agent_named("bot"))
        tracer = traced.tracer_provider.get_tracer("test")
        with tracer.start_as_current_span("submit") as submitter:
            await session.submit("hello")
        result = await session.wait(timeout=60)
        assert result.status is RunStatus.COMPLETED
    finally:
        worker.drain()
        await asyncio.wait_for(running, 30)
        await worker_runtime.close()
        await host.close()
    runs = traced.named("invoke_agent")
    assert len(runs) == 1
    run = runs[0]
    assert run.context is not None and run.parent is not None
    assert run.context.trace_id == submitter.get_span_context().trace_id
    assert run.parent.span_id == submitter.get_span_context().span_id
