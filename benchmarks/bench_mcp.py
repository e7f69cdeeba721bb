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

Then, what polling an MCP task costs (`--tasks N`, 0 to skip), on a
SQLite store, against `tests/mcp/napping_server.py` over stdio (its tool
`nap` sleeps; a call with `seconds > 0` is a 2026-07-28 task, one with
`seconds: 0` is answered inline; the server suggests polling every 50 ms):

- inline: a session's two runs, the first calling `nap(seconds=0)`, the
  second a plain round (the baseline: the same model work as a task's);
- task, end to end: N sessions, each starting a 2-second `nap` task that
  goes to the background at once, the tasks polled until they end, and each
  session's next run bringing the result to the model;
- one poll: N tasks that never end, polled for 3 seconds: this process's
  CPU over that window per `tasks/get` the server saw.

Wall time is what a run waits; CPU is this process's own time
(`time.process_time`; the server is another process). Trials alternate so
that load on the machine hits all three alike, and the collector is paused
while they run, as `timeit` does.

    python benchmarks/bench_mcp.py [--calls 300] [--trials 5] [--tasks 20]

Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from taskloom import Agent, Runtime, ToolEffect, tool
from taskloom.events import WorkFinished
from taskloom.mcp import MCPServer
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply
from taskloom.runtime import SessionTools

sys.path.insert(0, os.path.dirname(__file__))
from _statements import count_statements

NAPPING = Path(__file__).resolve().parents[1] / "tests" / "mcp" / "napping_server.py"
POLL_MS = 50
TASK_SECONDS = 2.0
POLL_WINDOW = 3.0

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
        # The connection and listing exist already.
        await SessionTools(runtime, session.agent).refresh_tools()
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
        await server.bind_runtime(runtime).current_tools(runtime)  # opens taskloom's own connection
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


def napping(marker: Path, tasks: str) -> MCPServer:
    return MCPServer.stdio(
        sys.executable,
        [str(NAPPING), str(marker), "--stdio"],
        env={"NAPPING_POLL_MS": str(POLL_MS)},
        name="napping",
        approval="never",
        tasks=tasks,  # type: ignore[arg-type]
    )


def napper(seconds: float, label: str) -> Any:
    """A model that calls `nap` once, waits (a reminder brings it back once
    while the task runs), and says "got it" once the result is in."""

    def answer(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            return reply(tool_calls=[("nap", {"seconds": seconds, "label": label})])
        said = [m.text for m in request.messages]
        said += [r.content for m in request.messages for r in m.results]
        if any("woke:" in text for text in said):
            return reply("got it")
        return reply("waiting")

    return answer


def gets(marker: Path) -> int:
    return sum(1 for line in marker.read_text().splitlines() if '"event": "get"' in line)


Measured = tuple[float, float, float]
"""(this process's CPU seconds, statements, tasks/get polls) per unit."""


async def inline_pairs(store: str, marker: Path, n: int) -> tuple[Measured, Measured]:
    """(the run that calls nap(0), both runs) per session."""
    server = napping(marker, "auto")
    with count_statements() as statements:
        async with Runtime(store=store) as runtime:
            await server.bind_runtime(runtime).current_tools(runtime)
            sessions = []
            for i in range(n + 1):
                model = FunctionModel(napper(0, f"n{i}"))
                sessions.append(await runtime.create_session(Agent("b", model, tools=[server])))
            await sessions[0].run("warm up")
            gc.collect()
            calling = both = 0.0
            said = [0, 0]
            for session in sessions[1:]:
                cpu, counted = time.process_time(), statements.total
                await session.run("nap")
                middle = time.process_time()
                calling += middle - cpu
                said[0] += statements.total - counted
                result = await session.run("news?")
                both += time.process_time() - cpu
                said[1] += statements.total - counted
                assert result.text == "got it", result.text
    return (calling / n, said[0] / n, 0.0), (both / n, said[1] / n, 0.0)


async def task_pairs(store: str, marker: Path, n: int) -> Measured:
    server = napping(marker, "always")
    done = asyncio.Event()
    ended: list[object] = []

    def seen(event: object) -> None:
        if isinstance(event, WorkFinished):
            ended.append(event)
            if len(ended) == n:
                done.set()

    with count_statements() as statements:
        async with Runtime(store=store) as runtime:
            runtime.background.emit = seen
            await server.bind_runtime(runtime).current_tools(runtime)
            sessions = []
            for i in range(n):
                model = FunctionModel(napper(TASK_SECONDS, f"t{i}"))
                sessions.append(await runtime.create_session(Agent("b", model, tools=[server])))
            before = gets(marker)
            gc.collect()
            cpu, counted = time.process_time(), statements.total
            for session in sessions:
                await session.run("nap")
            await asyncio.wait_for(done.wait(), 60 + TASK_SECONDS * 3)
            for session in sessions:
                result = await session.run("news?")
                assert result.text == "got it", result.text
            used = time.process_time() - cpu
            said = statements.total - counted
            polls = gets(marker) - before
    return used / n, said / n, polls / n


async def idle_polls(store: str, marker: Path, n: int) -> Measured:
    server = napping(marker, "always")
    with count_statements() as statements:
        async with Runtime(store=store) as runtime:
            await server.bind_runtime(runtime).current_tools(runtime)
            for i in range(n):
                model = FunctionModel(napper(-1, f"f{i}"))
                session = await runtime.create_session(Agent("b", model, tools=[server]))
                await session.run("nap")
            await asyncio.sleep(POLL_MS / 1000 * 3)
            before = gets(marker)
            cpu, counted = time.process_time(), statements.total
            await asyncio.sleep(POLL_WINDOW)
            used = time.process_time() - cpu
            said = statements.total - counted
            polls = gets(marker) - before
    return used / polls, said / polls, polls / n


async def polling(n: int) -> None:
    gc.collect()
    gc.disable()
    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / "napping.jsonl"
        inline = await inline_pairs(f"sqlite:///{tmp}/inline.db", marker, n)
        task = await task_pairs(f"sqlite:///{tmp}/tasks.db", marker, n)
        poll = await idle_polls(f"sqlite:///{tmp}/idle.db", marker, n)
        started = [json.loads(line) for line in marker.read_text().splitlines()]
        assert sum(e["event"] == "start" for e in started) == 2 * n
    gc.enable()
    calling, both = inline
    print()
    print(
        f"MCP task polling: {n} tasks on SQLite, the server suggesting {POLL_MS} ms "
        f"between polls; per unit, CPU of this process"
    )
    print(f"{'':48} {'CPU µs':>8} {'ratio':>7} {'statements':>11} {'polls':>6}")
    rows = (
        ("inline nap(0): the run that calls it", calling, calling, ""),
        ("one tasks/get poll (tasks that never end)", poll, calling, ""),
        ("inline nap(0) and the session's next run", both, both, ""),
        (
            f"a {TASK_SECONDS:g} s task, end to end (the same two runs)",
            task,
            both,
            f"{task[2]:.1f}",
        ),
    )
    for label, (cpu, statements, _), base, polls in rows:
        print(f"{label:48} {cpu * 1e6:8.0f} {cpu / base[0]:6.2f}x {statements:11.1f} {polls:>6}")
    print(
        f"the task's own cost (end to end minus the two inline runs): "
        f"{(task[0] - both[0]) * 1e6:.0f} µs CPU, {task[1] - both[1]:.1f} statements, "
        f"{task[2]:.1f} polls: {(task[0] - both[0]) / task[2] * 1e6:.0f} µs a poll"
    )
    print(f"idle polling: {poll[2]:.1f} polls per task in the {POLL_WINDOW:g} s window")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=20, help="0 skips the polling table")
    options = parser.parse_args()
    if options.calls:
        asyncio.run(main(options.calls, options.trials))
    if options.tasks:
        asyncio.run(polling(options.tasks))
