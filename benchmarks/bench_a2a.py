"""What calling a remote A2A agent costs the caller, inline and followed in the background.

A taskloom agent served over A2A (`serve_agent`, a scripted model answering
at once) runs in another process on loopback; this process is the caller.
Per unit, this process's CPU and wall time:

- inline: one run whose model calls the remote agent's tool once (the call
  waits for the answer), then answers;
- background: the same call with `RemoteAgent(background=True)`: the run
  that starts it, the follow until the remote task ends, and the session's
  next run, which delivers the answer as a notice;
- baseline: the same two runs with a local tool answering as much text.

Usage:

    python benchmarks/bench_a2a.py [--runs 30] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from taskloom import Agent, Runtime, tool
from taskloom.events import Event, WorkFinished
from taskloom.messages import ToolResult
from taskloom.models import FunctionModel, ModelRequest, reply


def serve(port_file: str) -> None:
    """The remote agent's process: answers every task at once."""
    from taskloom.a2a import serve_agent

    agent = Agent("remote", FunctionModel(lambda request: reply("pong")), instructions="Answer.")

    async def main() -> None:
        async with Runtime() as runtime:
            await serve_agent(
                agent,
                runtime,
                host="127.0.0.1",
                port=0,
                on_ready=lambda url: Path(port_file).write_text(url),
            )

    asyncio.run(main())


def caller_model(tool_name: str) -> FunctionModel:
    def respond(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "user" and last.text.startswith("go"):
            return reply(tool_calls=[(tool_name, {"task": "ping"})])
        if any(isinstance(b, ToolResult) for b in last.blocks):
            return reply("called")
        return reply("heard")

    return FunctionModel(respond)


@tool(effect="read_only")
async def local(task: str) -> str:
    """Answer at once."""
    return "pong"


async def measure(url: str, kind: str, runs: int) -> tuple[float, float]:
    """(CPU µs, wall ms) per unit of `kind`."""
    from taskloom.a2a import RemoteAgent

    with tempfile.TemporaryDirectory() as tmp:
        async with Runtime(store=f"sqlite:///{tmp}/caller.db") as runtime:
            finished = asyncio.Event()

            def on(event: Event) -> None:
                if isinstance(event, WorkFinished):
                    finished.set()

            runtime.background.emit = on
            if kind == "local":
                agent = Agent("caller", caller_model("local"), tools=[local])
            else:
                remote = RemoteAgent(
                    "remote",
                    url,
                    description="An agent elsewhere.",
                    background=kind == "background",
                    poll_interval=0.02,
                )
                agent = Agent("caller", caller_model("remote"), tools=[remote.tool()])
            cpu = wall = 0.0
            for i in range(runs + 3):
                session = await runtime.create_session(agent)
                finished.clear()
                started, used = time.perf_counter(), time.process_time()
                await session.run("go")
                if kind == "background":
                    await asyncio.wait_for(finished.wait(), 30)
                await session.run("news?")
                if i >= 3:  # the first runs warm connections and caches
                    wall += time.perf_counter() - started
                    cpu += time.process_time() - used
    return cpu / runs * 1e6, wall / runs * 1e3


async def main(url: str, runs: int, trials: int) -> None:
    rows: dict[str, list[tuple[float, float]]] = {"local": [], "inline": [], "background": []}
    for _ in range(trials):
        for kind in rows:
            rows[kind].append(await measure(url, kind, runs))
    base = statistics.median(c for c, _ in rows["local"])
    print(
        f"\nA2A calls: {runs} sessions x {trials} trials, SQLite store; per session "
        "(a run that calls, then the next run), CPU of this process (medians)"
    )
    print(f"{'':<52}{'CPU µs':>9}{'ratio':>8}{'wall ms':>9}")
    names = {
        "local": "a local tool (baseline)",
        "inline": "remote agent, inline",
        "background": "remote agent, background (followed, then delivered)",
    }
    for kind, samples in rows.items():
        cpu = statistics.median(c for c, _ in samples)
        wall = statistics.median(w for _, w in samples)
        print(f"{names[kind]:<52}{cpu:>9.0f}{cpu / base:>7.2f}x{wall:>9.1f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--trials", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "url"
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port_file)],
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(600):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.05)
            asyncio.run(main(port_file.read_text(), options.runs, options.trials))
        finally:
            server.terminate()
            server.wait(10)
