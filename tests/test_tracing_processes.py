"""Traces across processes, and the default observer of a runtime, with real processes.

A traced child process exports its spans as JSON lines to a file (the SDK's
console exporter); this process keeps its own in memory. Both share a
SQLite store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskloom import Agent, RunStatus, Runtime
from taskloom.delegation import ChildSpec, ChildStatus, Spawner
from taskloom.entries import RunStartedEntry
from taskloom.models import FunctionModel, ModelRequest, reply
from tracing_agents import deployer, note, scribe
from tracing_support import Traced, in_memory, parent_of, span_id, trace_id

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("tracing_child.py")


@pytest.fixture
def traced() -> Iterator[Traced]:
    yield from in_memory()


def run_child(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def exported(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def hex_id(value: int, width: int) -> str:
    return f"0x{value:0{width}x}"


async def test_an_approval_resumed_in_another_process_links_to_the_parked_run(
    tmp_path: Path, traced: Traced
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    spans_file = tmp_path / "parked.jsonl"
    out = run_child("park", url, str(spans_file))
    session_id = out.split("SESSION ")[1].split()[0]
    (parked,) = [s for s in exported(spans_file) if s["name"] == "invoke_agent deployer"]
    assert parked["attributes"]["taskloom.run.status"] == "awaiting_approval"

    runtime = Runtime(url, observer=traced.observer())
    try:
        session = await runtime.open_session(session_id, deployer(resuming=True))
        (call,) = await session.pending()
        await session.approve(call.id)
        result = await session.resume()
        assert result.status is RunStatus.COMPLETED and result.text == "Deployed."
        started = [e.payload for e in await session.entries() if e.kind == "run_started"]
    finally:
        await runtime.close()

    # the parked run recorded its trace context in the log
    first, second = started
    assert isinstance(first, RunStartedEntry) and isinstance(second, RunStartedEntry)
    context = parked["context"]
    assert first.traceparent is not None
    assert first.traceparent.split("-")[1:3] == [context["trace_id"][2:], context["span_id"][2:]]

    (resumed,) = traced.named("invoke_agent")
    attributes = dict(resumed.attributes or {})
    assert attributes["taskloom.run.resume"] is True
    assert attributes["gen_ai.conversation.id"] == session_id
    assert attributes["gen_ai.agent.id"] == parked["attributes"]["gen_ai.agent.id"]
    (link,) = resumed.links
    assert hex_id(link.context.trace_id, 32) == context["trace_id"]
    assert hex_id(link.context.span_id, 16) == context["span_id"]
    # the resume is a trace of its own, which the link ties to the parked one
    assert hex_id(trace_id(resumed), 32) != context["trace_id"]
    assert second.traceparent is not None and second.traceparent.split("-")[2] == (
        f"{span_id(resumed):016x}"
    )
    (deploy_call,) = traced.named("execute_tool deploy")
    assert parent_of(deploy_call) == span_id(resumed)


class Queue:
    """A dispatcher that only records specs: another process runs them."""

    def __init__(self) -> None:
        self.specs: list[str] = []

    async def dispatch(self, spec: ChildSpec) -> None:
        self.specs.append(spec.to_json())


async def lead(request: ModelRequest) -> Any:
    if len(request.messages) == 1:
        task = {"name": "scribe", "task": "note the plan", "tools": ["note"], "mode": "background"}
        return reply(tool_calls=[("spawn_agent", task)])
    return reply("A scribe is on it.")


async def test_a_background_child_in_another_process_continues_the_spawning_trace(
    tmp_path: Path, traced: Traced
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    queue = Queue()
    spawner = Spawner(scribe(), tools=[note], dispatcher=queue)
    runtime = Runtime(url, observer=traced.observer())
    try:
        session = await runtime.create_session(
            Agent("lead", FunctionModel(lead, name="lead"), tools=[spawner.tool()])
        )
        result = await session.run("Plan, and have it noted.")
        assert result.status is RunStatus.COMPLETED
    finally:
        await runtime.close()
    (spec_json,) = queue.specs
    spec = ChildSpec.from_json(spec_json)
    (spawn,) = traced.named("execute_tool spawn_agent")
    assert spec.traceparent is not None
    assert spec.traceparent.split("-")[1:3] == [f"{trace_id(spawn):032x}", f"{span_id(spawn):016x}"]

    spans_file = tmp_path / "worker.jsonl"
    out = run_child("worker", url, str(spans_file), spec_json)
    assert f"RESULT {ChildStatus.DONE.value}" in out
    worker_spans = exported(spans_file)
    (child_run,) = [s for s in worker_spans if s["name"] == "invoke_agent scribe"]
    # one trace across both processes: the child's run hangs under the spawn call
    assert child_run["context"]["trace_id"] == hex_id(trace_id(spawn), 32)
    assert child_run["parent_id"] == hex_id(span_id(spawn), 16)
    assert child_run["attributes"]["gen_ai.conversation.id"] == spec.child_session_id
    assert {s["context"]["trace_id"] for s in worker_spans} == {hex_id(trace_id(spawn), 32)}
    by_id = {s["context"]["span_id"]: s for s in worker_spans}
    names = sorted(
        s["name"] for s in worker_spans if s["parent_id"] == child_run["context"]["span_id"]
    )
    assert names == ["chat scribe", "chat scribe", "execute_tool note"]
    assert all(s["parent_id"] in by_id or s is child_run for s in worker_spans)


def test_a_runtime_traces_only_once_a_provider_is_configured() -> None:
    out = json.loads(run_child("default").strip().splitlines()[-1])
    # untraced: nothing recorded, and opentelemetry was not even imported
    assert out["untraced"] is None
    assert out["imported_after_untraced_run"] == []
    # imported, no provider: still nothing
    assert out["no_provider"] is None
    # a provider: spans, and the run's trace context in its log
    assert out["traced"] is not None and out["traced"].startswith("00-")
    assert out["traced_spans"] == ["chat scripted", "invoke_agent a"]
    # content only when the runtime asks for it
    assert out["plain_content"] == []
    assert out["asked_content"] == ["gen_ai.input.messages", "gen_ai.output.messages"]
