"""What a taskloom run adds to an MCP tool call, against the bare SDK.

The same stdio server (`mcp-server-time`, `get_current_time`) answers both:

- bare: `ClientSession.call_tool` in a loop, on a connection opened once;
- taskloom: runs whose scripted model asks for one MCP call per round (10
  rounds a run), in a runtime whose connection is already open (the first
  listing is not timed);
- loop: the same runs with a plain read-only tool answering as much text:
  the loop's own round cost (model request, appends, events), which any
  tool pays;
- waiting: the same with a plain tool that waits 3 ms first (for reference:
  a round whose tool waits costs the event loop more CPU, MCP or not).

The issue's goal: (taskloom - loop) per call at most 1.2x the bare call.
Wall time is what a run waits; CPU is this process's own time
(`time.process_time`; the server is another process). Trials alternate so
that load on the machine hits all three alike, and the collector is paused
while they run, as `timeit` does.

    python benchmarks/bench_mcp.py [--calls 300] [--trials 5]

Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from typing import Any

from mcp import Client, StdioServerParameters
from taskloom import Agent, Runtime, ToolEffect, tool
from taskloom.mcp import MCPServer
from taskloom.models import ScriptedModel, reply

ARGS = {"timezone": "Europe/Oslo"}
TARGET = 1.2
ROUNDS = 10
"""Tool rounds per run (each run ends with one more, final, round)."""
SAME_SIZE = '{"timezone":"Europe/Oslo","datetime":"2026-11-30T12:00:00+01:00","day_of_week":"Monday","is_dst":false}'


@tool(effect=ToolEffect.READ_ONLY)
async def plain_clock(timezone: str) -> str:
    """A plain tool answering at once, as much text as the server's answer
    (the loop's own cost: a longer transcript costs every later round)."""
    return SAME_SIZE


Cost = tuple[float, float]
"""(wall seconds, this process's CPU seconds) per call."""


@tool(effect=ToolEffect.READ_ONLY)
async def napping_clock(timezone: str) -> str:
    """A plain tool that waits 3 ms, as a call to a server does: what the
    loop costs when a tool waits, whatever it waits for."""
    await asyncio.sleep(0.003)
    return SAME_SIZE


async def bare(client: Client, calls: int) -> Cost:
    session = client.session
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        result = await session.call_tool("get_current_time", ARGS)
        assert not result.is_error
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


async def through_a_run(runtime: Runtime, tools: list[Any], name: str, calls: int) -> Cost:
    # Runs of ROUNDS rounds: a run's request carries its whole transcript, so
    # the loop's cost per round grows with the length of the session.
    wall = cpu = 0.0
    runs = calls // ROUNDS
    for _ in range(runs):
        turns = [reply(tool_calls=[(name, ARGS)]) for _ in range(ROUNDS)]
        model = ScriptedModel([*turns, reply("done")])
        session = await runtime.create_session(Agent("bench", model, tools=tools))
        await session.refresh_tools()  # the connection and listing exist already
        started, used = time.perf_counter(), time.process_time()
        result = await session.run("go")
        wall += time.perf_counter() - started
        cpu += time.process_time() - used
        assert result.ok and result.tool_calls == ROUNDS, result
    return wall / (runs * ROUNDS), cpu / (runs * ROUNDS)


async def main(calls: int, trials: int) -> None:
    command = [sys.executable, "-m", "mcp_server_time"]
    server = MCPServer.stdio(command[0], command[1:])
    rows: dict[str, list[Cost]] = {"bare": [], "taskloom": [], "loop": [], "waiting": []}
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(params) as client, Runtime() as runtime:
        await server.current_tools(runtime)  # opens taskloom's own connection
        await bare(client, 20)  # warm-up
        await through_a_run(runtime, [server], "get_current_time", 20)
        # As timeit does: the collector's pauses depend on everything else
        # alive in the process, not on the code measured.
        gc.collect()
        gc.disable()
        for _ in range(trials):
            rows["bare"].append(await bare(client, calls))
            rows["taskloom"].append(
                await through_a_run(runtime, [server], "get_current_time", calls)
            )
            rows["loop"].append(await through_a_run(runtime, [plain_clock], "plain_clock", calls))
            rows["waiting"].append(
                await through_a_run(runtime, [napping_clock], "napping_clock", calls)
            )
            gc.collect()
        gc.enable()
    print(f"{calls} calls x {trials} trials; medians of the trials, per call")
    print(f"{'':40} {'wall µs':>10} {'CPU µs':>10}")
    median: dict[str, list[float]] = {}
    for key, label in (
        ("bare", "bare ClientSession.call_tool"),
        ("taskloom", "taskloom run, one MCP call per round"),
        ("loop", "taskloom run, one plain call per round"),
        ("waiting", "... a plain call that waits 3 ms"),
    ):
        median[key] = [statistics.median(c[i] for c in rows[key]) for i in (0, 1)]
        print(f"{label:40} {median[key][0] * 1e6:10.0f} {median[key][1] * 1e6:10.0f}")
    added = [median["taskloom"][i] - median["loop"][i] for i in (0, 1)]
    print(f"{'MCP call in a run, minus the loop':40} {added[0] * 1e6:10.0f} {added[1] * 1e6:10.0f}")
    ratios = [added[i] / median["bare"][i] for i in (0, 1)]
    print(
        f"ratio to bare: wall {ratios[0]:.2f}x, CPU {ratios[1]:.2f}x "
        f"(goal: at most {TARGET}x plus the loop's round)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--trials", type=int, default=5)
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.trials))
