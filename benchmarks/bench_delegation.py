"""Delegation overheads, printed as a table.

    python benchmarks/bench_delegation.py [--quick]

- an inline delegation (a parent's tool call running a SubAgent child) vs
  running the same child agent directly: the CPU the delegation adds;
- 1,000 children fanned out from one parent in one turn: wall time, peak
  memory per child.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc

from taskloom import Agent, RunOptions, Runtime, ToolEffect, Usage, tool
from taskloom.delegation import SubAgent
from taskloom.models import ModelRequest, ScriptedModel, reply


@tool(effect=ToolEffect.READ_ONLY)
async def look(q: str) -> str:
    """Look something up."""
    return q


def child_script() -> list[object]:
    return [
        reply(tool_calls=[("look", {"q": "x"})], usage=Usage(10, 2)),
        reply("found", usage=Usage(10, 2)),
    ]


async def direct(runs: int) -> float:
    """CPU seconds for `runs` direct runs of the child agent."""
    runtime = Runtime()
    agents = [Agent("child", ScriptedModel(child_script()), tools=[look]) for _ in range(runs)]
    gc.collect()
    gc.disable()
    start = time.process_time()
    for agent in agents:
        session = await runtime.create_session(agent)
        await session.run("task")
    gc.enable()
    return time.process_time() - start


async def delegated(runs: int) -> tuple[float, float]:
    """CPU seconds for `runs` parent runs that each delegate once, and the
    CPU of the parent's own two rounds measured alone (same shape, no child)."""

    @tool
    async def noop(task: str) -> str:
        """Stand-in for the delegation tool."""
        return '{"answer": "found", "tokens": 24}'

    runtime = Runtime()
    pairs = []
    for _ in range(runs):
        sub = SubAgent("child", "A child.", ScriptedModel(child_script()), tools=[look])
        lead = ScriptedModel(
            [reply(tool_calls=[("child", {"task": "task"})], usage=Usage(10, 2)), reply("ok")]
        )
        pairs.append(Agent("lead", lead, tools=[sub]))
    bare = [
        Agent(
            "lead",
            ScriptedModel(
                [reply(tool_calls=[("noop", {"task": "task"})], usage=Usage(10, 2)), reply("ok")]
            ),
            tools=[noop],
        )
        for _ in range(runs)
    ]
    gc.collect()
    gc.disable()
    start = time.process_time()
    for agent in pairs:
        session = await runtime.create_session(agent)
        await session.run("go")
    with_child = time.process_time() - start
    start = time.process_time()
    for agent in bare:
        session = await runtime.create_session(agent)
        await session.run("go")
    parent_alone = time.process_time() - start
    gc.enable()
    return with_child, parent_alone


async def fan_out(n: int) -> tuple[float, float, int]:
    """(wall seconds, peak bytes per child, failed children) for n children in one turn."""

    def child(request: ModelRequest) -> object:
        return reply("done", usage=Usage(5, 1))

    from taskloom.models import FunctionModel

    sub = SubAgent("worker", "Works.", FunctionModel(child))
    lead = ScriptedModel(
        [reply(tool_calls=[("worker", {"task": f"t{i}"}) for i in range(n)]), reply("all done")]
    )
    runtime = Runtime()
    session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()
    result = await session.run("go", options=RunOptions(max_rounds=3))
    wall = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    failed = sum(1 for r in lead.requests[1].messages[-1].results if r.is_error)
    assert result.ok
    return wall, peak / n, failed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = 300 if args.quick else 2000
    children = 200 if args.quick else 1000

    child_alone = asyncio.run(direct(runs))
    with_child, parent_alone = asyncio.run(delegated(runs))
    added = (with_child - parent_alone - child_alone) / runs
    wall, per_child, failed = asyncio.run(fan_out(children))

    rows = [
        ("child run directly (2 rounds)", f"{child_alone / runs * 1e6:.0f} µs"),
        ("parent delegating to it, whole", f"{with_child / runs * 1e6:.0f} µs"),
        ("parent alone, same shape", f"{parent_alone / runs * 1e6:.0f} µs"),
        ("CPU a delegation adds", f"{added * 1e6:.0f} µs"),
        (
            "  ratio (delegated child vs direct child)",
            f"{(child_alone + added * runs) / child_alone:.2f}x",
        ),
        (f"{children:,} children fanned out in one turn", f"{wall:.2f} s, {failed} failed"),
        ("  peak memory per child", f"{per_child / 1024:.1f} KiB"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  value")
    print("-" * (width + 24))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
