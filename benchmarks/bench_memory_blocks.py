"""What memory blocks add to a run, printed as a table.

    python benchmarks/bench_memory_blocks.py

CPU per run of one round (a text answer) of an agent with a `Memory` of
three blocks against the same agent without memory, and CPU per tool round
of `memory_append` against a plain tool that returns at once; each on the
memory backend and on SQLite (a file in a temporary folder), the baseline
measured in the same process, taking turns.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from taskloom import Agent, RunOptions, Runtime, tool
from taskloom.backends import Backend, MemoryBackend, SQLiteBackend
from taskloom.memory import Block, Memory
from taskloom.models import FunctionModel, ModelRequest, reply

USER = ("user", "u1")
RUNS = 200
TURNS = 5


def memory() -> Memory:
    return Memory(
        [
            Block("human", "What you know of the user", limit=4000),
            Block("persona", "Who you are", initial="A careful assistant. " * 20),
            Block("project", "The project's decisions", limit=4000),
        ],
        USER,
    )


@tool
async def note(text: str) -> str:
    """Take a note."""
    return "noted"


def tool_model(name: str, args: Callable[[int], dict[str, Any]]) -> FunctionModel:
    count = {"n": 0}

    def answer(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "tool":
            return reply("ok")
        count["n"] += 1
        return reply(tool_calls=[(name, args(count["n"]))])

    return FunctionModel(answer)


async def cpu_per_run(backend: Backend, agent: Agent, runs: int = RUNS) -> float:
    """Milliseconds of CPU per run, each run in a fresh session."""
    runtime = Runtime(backend)
    options = RunOptions()
    start = time.process_time()
    for _ in range(runs):
        session = await runtime.create_session(agent)
        await session.run("hello", options=options)
    return (time.process_time() - start) / runs * 1e3


async def table(name: str, make: Callable[[], Backend]) -> list[str]:
    backend = make()
    assert backend.memory is not None
    await backend.memory.put(USER, "block:human", "Ada. Likes green tea. " * 40)
    await backend.memory.put(USER, "block:project", "Ship on Tuesdays. " * 40)
    plain = Agent("plain", FunctionModel(lambda r: reply("hi")), "Be helpful.")
    remembering = plain.replace(memory=memory())
    plain_tool = Agent("t", tool_model("note", lambda n: {"text": "x"}), tools=[note])
    appending = Agent(
        "m",
        tool_model("memory_append", lambda n: {"block": "human", "text": f"line {n}"}),
        memory=Memory([Block("human", limit=30_000)], ("user", "bench")),
    )
    rows: dict[str, list[float]] = {k: [] for k in ("plain", "blocks", "tool", "append")}
    for _ in range(TURNS):
        rows["plain"].append(await cpu_per_run(backend, plain))
        rows["blocks"].append(await cpu_per_run(backend, remembering))
        rows["tool"].append(await cpu_per_run(backend, plain_tool, 50))
        rows["append"].append(await cpu_per_run(backend, appending, 50))
    await backend.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    return [
        f"| {name} | one-round run | {med['plain']:.2f} | {med['blocks']:.2f} "
        f"| {med['blocks'] / med['plain']:.2f}× |",
        f"| {name} | tool round | {med['tool']:.2f} | {med['append']:.2f} "
        f"| {med['append'] / med['tool']:.2f}× |",
    ]


async def main() -> None:
    folder = tempfile.mkdtemp()
    print("| backend | what | without memory (ms CPU) | with memory (ms CPU) | ratio |")
    print("|---|---|---|---|---|")
    for line in await table("memory", MemoryBackend):
        print(line)
    for line in await table("sqlite", lambda: SQLiteBackend(f"{folder}/bench.db")):
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
