"""A traced process for tests/test_tracing_processes.py.

    python tracing_child.py park STORE_URL SPANS_FILE
    python tracing_child.py worker STORE_URL SPANS_FILE SPEC_JSON
    python tracing_child.py default

`park` and `worker` configure the global tracer provider (the SDK, exporting
each span as a JSON line to SPANS_FILE), so the runtime traces through its
default observer. `park` runs an agent until it parks for approval and
prints `SESSION <id>`; `worker` runs a background child from its spec and
prints `RESULT <status>`. `default` prints, as JSON, what a runtime without
an observer does before and after a provider is configured.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

MODE = sys.argv[1]


def traced_to(path: str) -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = open(path, "a")  # noqa: SIM115 (open for the life of the process)
    provider = TracerProvider()
    exporter = ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


async def park(url: str) -> None:
    from taskloom import Runtime
    from tracing_agents import deployer

    runtime = Runtime(url)
    try:
        session = await runtime.create_session(deployer())
        result = await session.run("Ship it.")
        assert result.status.value == "awaiting_approval", result
        print(f"SESSION {session.id}", flush=True)
    finally:
        await runtime.close()


async def worker(url: str, spec: str) -> None:
    from taskloom import Runtime
    from taskloom.delegation import ChildWorker
    from tracing_agents import note, scribe

    model = scribe()
    runtime = Runtime(url, tools={"note": note}, models={model.spec: model})
    try:
        status = await ChildWorker(runtime).run(spec)
        print(f"RESULT {status.value if status else 'none'}", flush=True)
    finally:
        await runtime.close()


async def default() -> None:
    from taskloom import Agent, Runtime
    from taskloom.entries import RunStartedEntry
    from taskloom.models import ScriptedModel, reply

    async def traceparent(runtime: Runtime) -> str | None:
        session = await runtime.create_session(Agent("a", ScriptedModel([reply("hi")]), "Be kind."))
        await session.run("hello")
        (started,) = [e.payload for e in await session.entries() if e.kind == "run_started"]
        assert isinstance(started, RunStartedEntry)
        return started.traceparent

    out: dict[str, Any] = {}
    out["untraced"] = await traceparent(Runtime())
    out["imported_after_untraced_run"] = sorted(m for m in sys.modules if "opentelemetry" in m)

    from opentelemetry import trace

    out["no_provider"] = await traceparent(Runtime())

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    out["traced"] = await traceparent(Runtime())
    out["traced_spans"] = [s.name for s in exporter.get_finished_spans()]
    out["plain_content"] = sorted(
        k for s in exporter.get_finished_spans() for k in (s.attributes or {}) if "messages" in k
    )
    exporter.clear()
    await traceparent(Runtime(trace_content=True))
    out["asked_content"] = sorted(
        {k for s in exporter.get_finished_spans() for k in (s.attributes or {}) if "messages" in k}
    )
    print(json.dumps(out), flush=True)


def main() -> None:
    if MODE == "default":
        asyncio.run(default())
        return
    url, spans = sys.argv[2], sys.argv[3]
    provider = traced_to(spans)
    try:
        if MODE == "park":
            asyncio.run(park(url))
        else:
            asyncio.run(worker(url, sys.argv[4]))
    finally:
        provider.shutdown()


main()
