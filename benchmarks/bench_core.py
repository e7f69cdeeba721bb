"""Core overheads of taskloom, printed as a table.

    python benchmarks/bench_core.py [--quick]

- CPU per tool round on the scripted model (and with the model's own cost
  subtracted, measured in the same run);
- what tracing costs per tool round: runtime CPU (a) with opentelemetry not
  importable, (b) imported but no tracer provider configured, (c) the SDK
  with an in-memory exporter (each in fresh processes, interleaved);
- Agent construction time and memory (1,000 agents with one tool);
- 10,000 concurrent runs of 3 tool rounds each: wall time, peak memory per run;
- `import taskloom` time as a ratio to `import pydantic, httpx2`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import time
import timeit
import tracemalloc
from typing import Any

from taskloom import Agent, Runtime, ToolEffect, Usage, tool
from taskloom.loop.ports import NO_WATCH, RunInfo
from taskloom.messages import Message, ToolCall
from taskloom.models import ModelRequest, ModelResponse, ScriptedModel, reply
from taskloom.tools import ToolOutput


@tool(effect=ToolEffect.READ_ONLY)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script(rounds: int) -> list[object]:
    usage = Usage(10, 5)
    return [reply(tool_calls=[("add", {"a": i, "b": 1})], usage=usage) for i in range(rounds)] + [
        reply("done", usage=usage)
    ]


async def _cpu_of_runs(runs: int, tool_rounds: int) -> tuple[float, float]:
    """(CPU seconds for `runs` runs of `tool_rounds` tool rounds + a final round,
    CPU seconds the scripted model alone takes for the same requests)."""
    runtime = Runtime()
    agents = [Agent("bench", ScriptedModel(script(tool_rounds)), tools=[add]) for _ in range(runs)]
    gc.collect()
    # As timeit does: the collector's pauses depend on everything else alive
    # in the process, not on the code measured.
    gc.disable()
    start = time.process_time()
    for agent in agents:
        session = await runtime.create_session(agent)
        await session.run("go")
    total = time.process_time() - start
    gc.enable()
    model = ScriptedModel(script(tool_rounds) * runs)
    request = ModelRequest(messages=(Message.user("go"),))
    start = time.process_time()
    for _ in range(runs * (tool_rounds + 1)):
        await model.request(request)
    return total, time.process_time() - start


async def cpu_per_round(runs: int) -> tuple[float, float, float]:
    """µs of CPU per model round: (in 3-tool-round runs, all costs included;
    the scripted model's share of that; the marginal cost of one more tool
    round, runtime only — the slope between runs of 3 and 13 tool rounds)."""
    short, short_model = await _cpu_of_runs(runs, 3)
    long, long_model = await _cpu_of_runs(runs, 13)
    per_round = short / (runs * 4) * 1e6
    model_share = short_model / (runs * 4) * 1e6
    marginal = ((long - long_model) - (short - short_model)) / (runs * 10) * 1e6
    return per_round, model_share, marginal


TRACING_CASES = {
    "a": "opentelemetry not importable",
    "b": "opentelemetry imported, no provider",
    "c": "SDK provider, in-memory exporter",
}


def _traced_as(case: str) -> Any:
    """Set this process up as tracing case `case`; returns the exporter to empty (c)."""
    if case == "a":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # import fails
        return None
    from opentelemetry import trace

    if case == "b":
        return None
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    return exporter


async def _tracing_case(case: str, runs: int, batches: int) -> tuple[float, float]:
    """(the least runtime CPU per round, µs, over `batches` batches of `runs`
    runs; µs the runtime's observer takes to decide whether to trace a run,
    for cases a and b, where it decides not to)."""
    exporter = _traced_as(case)
    best = float("inf")
    for _ in range(batches):
        total, model = await _cpu_of_runs(runs, 3)
        best = min(best, (total - model) / (runs * 4) * 1e6)
        if exporter is not None:
            exporter.clear()
    decide = 0.0
    if case != "c":
        observer = Runtime().observer
        info = RunInfo(Agent("bench", ScriptedModel([])), "session", "run")
        n = 100_000
        decide = min(timeit.repeat(lambda: observer.run(info), number=n, repeat=5)) / n * 1e6
    return best, decide


def tracing_overhead(runs: int, batches: int, processes: int) -> dict[str, float]:
    """Runtime CPU per round (µs) for each tracing case: the least over fresh
    processes run interleaved (a, b, c, a, b, c, ...), so load drifts hit
    every case alike; and `decide a` / `decide b`, µs per run to decide not
    to trace (the only code that differs between a and b)."""
    best = dict.fromkeys([*TRACING_CASES, "decide a", "decide b"], float("inf"))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    for _ in range(processes):
        for case in TRACING_CASES:
            command = [sys.executable, __file__, "--tracing-case", case]
            command += ["--runs", str(runs), "--batches", str(batches)]
            out = subprocess.run(
                command,
                check=True,
                capture_output=True,
                text=True,
                env=env,
            ).stdout.split()
            best[case] = min(best[case], float(out[-2]))
            if case != "c":
                best[f"decide {case}"] = min(best[f"decide {case}"], float(out[-1]))
    return best


def unobserved_hooks() -> float:
    """µs per tool round the loop spends in the watch hooks of an unobserved
    run (what the seam costs before any tracing decision)."""
    request, response = ModelRequest(messages=()), ModelResponse(Message.user("x"))
    call, output = ToolCall("c", "add", {}), ToolOutput("2")
    model = ScriptedModel([])

    def one_round() -> None:
        with NO_WATCH.model_call(model, request, streamed=False) as asked:
            asked.responded(response)
        with NO_WATCH.tool_call(call, None) as running:
            running.returned(output)

    n = 200_000
    return min(timeit.repeat(one_round, number=n, repeat=7)) / n * 1e6


def agent_construction(n: int = 1000) -> tuple[float, float]:
    """(µs per Agent(...) with one tool, bytes per agent)."""
    model = ScriptedModel([])
    for _ in range(1000):
        Agent("a", model, "instructions", [add])
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n * 20):
            Agent("a", model, "instructions", [add])
        timings.append((time.perf_counter() - start) / (n * 20))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    keep = [Agent("a", model, "instructions", [add]) for _ in range(n)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del keep
    return min(timings) * 1e6, size / n


async def concurrent_runs(n: int) -> tuple[float, float, int]:
    """(wall seconds, peak bytes per run, failures) for n concurrent 3-tool-round runs."""
    runtime = Runtime()
    agent_model = [ScriptedModel(script(3)) for _ in range(n)]
    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()

    async def one(model: ScriptedModel) -> bool:
        session = await runtime.create_session(Agent("c", model, tools=[add]))
        result = await session.run("go")
        return result.ok and result.rounds == 4

    outcomes = await asyncio.gather(*(one(m) for m in agent_model), return_exceptions=True)
    wall = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    failures = sum(1 for o in outcomes if o is not True)
    return wall, peak / n, failures


def import_ratio(repeats: int = 9) -> tuple[float, float, float]:
    """(ms import taskloom, ms import pydantic+httpx2, ratio), interpreter start-up subtracted."""

    def best(code: str) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    bare = best("pass")
    ours = best("import taskloom") - bare
    base = best("import pydantic, httpx2") - bare
    return ours * 1e3, base * 1e3, ours / base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--tracing-case", choices=TRACING_CASES, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=500, help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, default=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tracing_case:
        print(*asyncio.run(_tracing_case(args.tracing_case, args.runs, args.batches)))
        return
    runs = 300 if args.quick else 2000
    concurrent = 1000 if args.quick else 10_000

    per_round, model_share, marginal = asyncio.run(cpu_per_round(runs))
    traced = tracing_overhead(
        runs=200 if args.quick else 500,
        batches=3 if args.quick else 5,
        processes=2 if args.quick else 5,
    )
    hooks = unobserved_hooks()
    ctor_us, ctor_bytes = agent_construction()
    wall, per_run, failures = asyncio.run(concurrent_runs(concurrent))
    imp_ours, imp_base, imp_ratio = import_ratio()

    rows = [
        ("CPU per round, 3-tool-round runs (all in)", f"{per_round:.1f} µs", ""),
        ("  of which the scripted model", f"{model_share:.1f} µs", ""),
        ("  runtime only", f"{per_round - model_share:.1f} µs", "≤ 50 µs"),
        ("  one more tool round (marginal, runtime)", f"{marginal:.1f} µs", "≤ 50 µs"),
        ("runtime CPU per round, tracing (a) not importable", f"{traced['a']:.1f} µs", ""),
        ("  (b) imported, no provider", f"{traced['b']:.1f} µs", ""),
        ("  (b) − (a), end to end (noisy)", f"{traced['b'] - traced['a']:+.1f} µs", ""),
        (
            "  (b) − (a), from the per-run decision",
            f"{(traced['decide b'] - traced['decide a']) / 4:+.2f} µs",
            "≤ 2 µs",
        ),
        ("  (c) SDK, in-memory exporter", f"{traced['c']:.1f} µs", ""),
        ("  (c) − (a)", f"{traced['c'] - traced['a']:+.1f} µs", ""),
        ("  watch hooks of an unobserved round (in a and b)", f"{hooks:.2f} µs", ""),
        ("Agent(...) with one tool", f"{ctor_us:.2f} µs", "≤ 5 µs"),
        ("  memory per agent", f"{ctor_bytes:.0f} B", "≤ 4096 B"),
        (
            f"{concurrent:,} concurrent runs × 3 tool rounds",
            f"{wall:.2f} s, {failures} failed",
            "0 failed",
        ),
        ("  peak memory per run", f"{per_run / 1024:.1f} KiB", ""),
        ("import taskloom", f"{imp_ours:.0f} ms vs {imp_base:.0f} ms", "≤ 1.25×"),
        ("  ratio to import pydantic, httpx2", f"{imp_ratio:.2f}×", ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>26}  target")
    print("-" * (width + 40))
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>26}  {target}")


if __name__ == "__main__":
    main()
