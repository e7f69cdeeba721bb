"""A queued run continues the trace of whoever submitted it (`traceparent` in
the job); the host's `submit` and `wait` are spans of that trace."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from queue_app import build

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus
from tracing_support import in_memory, parent_of, span_id, trace_id

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
    [submit] = traced.named("submit queued run")
    assert submit.parent is not None
    assert submit.parent.span_id == submitter.get_span_context().span_id
    assert run.parent.span_id == submit.context.span_id  # type: ignore[union-attr]


async def test_submit_and_wait_are_spans_linked_to_the_workers_run(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TLQ_EFFECTS", str(tmp_path / "effects.txt"))
    traced = next(in_memory())
    host = build(PG_DSN, pg_schema, observer=traced.observer())
    worker_runtime = build(PG_DSN, pg_schema, observer=traced.observer())
    queue = worker_runtime.queue
    assert queue is not None
    worker = queue.worker(worker_runtime)  # type: ignore[attr-defined]
    running = asyncio.create_task(worker.run())
    try:
        session = await host.create_session(host.agent_named("bot"))
        # No span around the host's calls: its own spans start the trace.
        await session.submit("hello")
        result = await session.wait(timeout=60)
        assert result.status is RunStatus.COMPLETED
    finally:
        worker.drain()
        await asyncio.wait_for(running, 30)
        await worker_runtime.close()
        await host.close()
    [run] = traced.named("invoke_agent")
    [submit] = traced.named("submit queued run")
    [wait] = traced.named("wait queued run")
    assert submit.kind is SpanKind.PRODUCER and submit.parent is None
    assert trace_id(run) == trace_id(submit) and parent_of(run) == span_id(submit)
    assert dict(submit.attributes or {})["gen_ai.conversation.id"] == session.id
    [link] = wait.links
    assert link.context.span_id == span_id(run) and link.context.trace_id == trace_id(run)
    assert dict(link.attributes or {}) == {"taskloom.link": "waited_on"}
