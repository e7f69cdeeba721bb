"""Long MCP tasks against a real server process on loopback
(`napping_server.py`, on the official SDK): several at once while the run
does other work, a server SIGKILLed while its task is polled, a task that
never ends under a run's deadline, and a stopped run's task cancelled on
the server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import HERE
from tasks_support import mcp_tasks

from conftest import SEEN_GROUPS
from taskloom import (
    Agent,
    RunOptions,
    RunStatus,
    Runtime,
    StopSignal,
    ToolContext,
    ToolEffect,
    tool,
)
from taskloom.events import WorkFinished
from taskloom.mcp import MCPLimits, MCPServer
from taskloom.models import FunctionModel, ModelRequest, reply

pytestmark = pytest.mark.slow

SERVER = str(Path(HERE) / "napping_server.py")


class Napping:
    """`napping_server.py` over HTTP; `seen()` is what it wrote to its marker."""

    def __init__(self, folder: Path) -> None:
        self.marker = folder / "napping.jsonl"
        self.process: subprocess.Popen[str] | None = subprocess.Popen(
            [sys.executable, SERVER, str(self.marker)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
            start_new_session=True,
        )
        SEEN_GROUPS.add(self.process.pid)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("READY "), line
        self.url = line.split()[1]

    def seen(self, event: str | None = None) -> list[dict[str, Any]]:
        return _seen(self.marker, event)

    def kill(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(15)
            assert self.process.stdout is not None
            self.process.stdout.close()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(15)
            assert self.process.stdout is not None
            self.process.stdout.close()
            self.process = None


def _seen(marker: Path, event: str | None = None) -> list[dict[str, Any]]:
    if not marker.exists():
        return []
    lines = [json.loads(line) for line in marker.read_text().splitlines() if line]
    return [e for e in lines if event is None or e["event"] == event]


@pytest.fixture
def napping(tmp_path: Path) -> Iterator[Napping]:
    server = Napping(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def _news(request: ModelRequest) -> str:
    """What reached the model since it last spoke (tool results included)."""
    tail: list[str] = []
    for message in reversed(request.messages):
        if message.role == "assistant":
            break
        tail.extend([message.text, *(r.content for r in message.results)])
    return "\n".join(reversed(tail))


async def _until(check: Any, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.05)


LABELS = ("north", "east", "south")


async def test_three_tasks_run_while_the_run_works_on_and_each_result_arrives_once(
    napping: Napping,
) -> None:
    ended_when_working: list[int] = []

    @tool(effect=ToolEffect.READ_ONLY)
    async def chores(n: int, *, ctx: ToolContext) -> str:
        """Does chore n."""
        tasks = await mcp_tasks(ctx.runtime, ctx.session_id)  # type: ignore[arg-type]
        ended_when_working.append(sum(t.status is not None for t in tasks))
        return f"chore {n} done"

    def assistant(request: ModelRequest) -> Any:
        said = _news(request)
        if len(request.messages) == 1:
            naps = [("nap", {"seconds": 5, "label": label}) for label in LABELS]
            return reply(tool_calls=naps)
        if "started mcp_task-" in said:
            return reply(tool_calls=[("chores", {"n": 1})])
        if "chore 1 done" in said:
            return reply(tool_calls=[("chores", {"n": 2})])
        if "chore 2 done" in said:
            return reply(tool_calls=[("chores", {"n": 3})])
        woke = [label for label in LABELS if f"woke: {label}" in said]
        if woke:
            return reply("heard " + " ".join(woke))
        return reply("chores done; waiting for the naps")

    model = FunctionModel(assistant)
    server = MCPServer.http(napping.url, name="napping", approval="never", task_after=0.5)
    finished: list[WorkFinished] = []
    async with Runtime() as runtime:
        runtime.background.emit = lambda e: (
            finished.append(e) if isinstance(e, WorkFinished) else None
        )
        session = await runtime.create_session(Agent("sleeper", model, tools=[server, chores]))
        first = await session.run("Nap three times, and do the chores meanwhile.")
        assert first.status is RunStatus.COMPLETED
        assert first.tool_calls == 6
        # The chores were done while all three tasks still ran on the server.
        assert ended_when_working == [0, 0, 0]
        assert len(napping.seen("start")) == 3
        runs = 1
        # Each later run delivers what ended by its start; no run waits.
        while True:
            wanted = min(3, runs)
            await _until(lambda: len(finished) >= wanted)  # noqa: B023 (awaited here)
            await session.run("Any news?")
            runs += 1
            heard = "\n".join(_news(r) for r in model.requests)
            if all(f"woke: {label}" in heard for label in LABELS):
                break
            assert runs < 10
        last = await session.run("Anything else?")
        transcript = await session.transcript()
        tasks = await mcp_tasks(runtime, session.id)
        pending = await runtime.background.inbox.pending(session.id)

    assert last.text == "chores done; waiting for the naps"
    assert pending == []
    started = tasks
    ended = [t for t in tasks if t.status is not None]
    assert len(started) == 3 and len({p.task_id for p in started}) == 3
    assert sorted(p.status for p in ended) == ["done", "done", "done"]
    for label in LABELS:
        # Stored once in the session's history, and brought to the model once.
        carrying = [m for m in transcript if f"woke: {label}" in m.text and m.role == "user"]
        assert len(carrying) == 1, (label, [m.text for m in carrying])
        asked = [r for r in model.requests if f"woke: {label}" in _news(r)]
        assert len(asked) == 1, label
    # The server was polled, not called again: one task each.
    assert len(napping.seen("start")) == 3
    assert {e["label"] for e in napping.seen("get")} == set(LABELS)


def _forever_agent(server: MCPServer, *extra: Any) -> tuple[Agent[Any, Any], FunctionModel]:
    def assistant(request: ModelRequest) -> Any:
        said = _news(request)
        if len(request.messages) == 1:
            return reply(tool_calls=[("nap", {"seconds": -1, "label": "forever"})])
        if extra and "started mcp_task-" in said:
            return reply(tool_calls=[("hold", {})])
        return reply("waiting for the nap")

    model = FunctionModel(assistant)
    return Agent("sleeper", model, tools=[server, *extra]), model


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_server_killed_mid_task_is_one_clear_error(transport: str, tmp_path: Path) -> None:
    napping: Napping | None = None
    if transport == "stdio":
        marker = tmp_path / "stdio.jsonl"
        server = MCPServer.stdio(
            sys.executable,
            [SERVER, str(marker), "--stdio"],
            name="napping",
            approval="never",
            tasks="always",
        )
    else:
        napping = Napping(tmp_path)
        marker = napping.marker
        # Gone for good, the server is given up on after `give_up_after`
        # failed polls; their pauses (half a second to 30 s by default) are cut.
        server = MCPServer.http(
            napping.url,
            name="napping",
            approval="never",
            tasks="always",
            limits=MCPLimits(poll_backoff=(0.05,)),
        )
    agent, model = _forever_agent(server)
    notices: list[WorkFinished] = []
    try:
        async with Runtime() as runtime:
            runtime.background.emit = lambda e: (
                notices.append(e) if isinstance(e, WorkFinished) else None
            )
            session = await runtime.create_session(agent)
            first = await session.run("Nap.")
            assert first.text == "waiting for the nap"
            await _until(lambda: len(_seen(marker, "get")) >= 2)
            [serving] = _seen(marker, "serving")
            if napping is not None:
                napping.kill()
            else:
                os.kill(serving["pid"], signal.SIGKILL)
            await _until(lambda: bool(notices), timeout=60)
            await session.run("Any news?")
            await session.run("And now?")
            tasks = await mcp_tasks(runtime, session.id)
    finally:
        if napping is not None:
            napping.stop()

    [ended] = [t for t in tasks if t.status is not None]
    assert ended.status == "failed"
    if transport == "stdio":
        # The next poll started the server again, which knows no such task.
        assert "no longer knows the task" in ended.text, ended.text
        assert len(_seen(marker, "serving")) == 2
    else:
        assert "gave up after 8 failed polls" in ended.text, ended.text
    carrying = [r for r in model.requests if "'nap' (MCP task" in _news(r)]
    assert len(carrying) == 1
    assert ended.text in _news(carrying[0])
    assert len(notices) == 1


@tool(effect=ToolEffect.READ_ONLY)
async def hold(*, ctx: ToolContext) -> str:
    """Waits until the run stops."""
    await ctx.stop.wait()
    return "stopped holding"


@pytest.mark.parametrize("where", ["inline", "background"])
async def test_a_task_that_never_ends_under_a_deadline(napping: Napping, where: str) -> None:
    if where == "inline":
        # Waited for inside the call, which the deadline cuts.
        server = MCPServer.http(napping.url, name="napping", approval="never", task_after=3600)
        agent, _ = _forever_agent(server)
    else:
        # In the background at once; the run goes on with a call that waits.
        server = MCPServer.http(napping.url, name="napping", approval="never", tasks="always")
        agent, _ = _forever_agent(server, hold)
    runtime = Runtime()
    try:
        session = await runtime.create_session(agent)
        result = await session.run("Nap.", options=RunOptions(deadline=1.5))
        assert result.status is RunStatus.DEADLINE
        assert len(napping.seen("get")) >= 1
    finally:
        await asyncio.wait_for(runtime.close(), 15)
    polled = len(napping.seen("get"))
    await asyncio.sleep(1.0)  # ten of the server's poll intervals
    assert len(napping.seen("get")) == polled, "polled after the runtime closed"
    [start] = napping.seen("start")
    cancels = napping.seen("cancel")
    if where == "inline":
        # Nobody could ever take a task up that never reached the log: it is
        # cancelled on the server.
        assert [c["task"] for c in cancels] == [start["task"]]
    else:
        # Logged: closing only stops polling; the session's next run takes it up.
        assert cancels == []


@pytest.mark.parametrize("where", ["inline", "background"])
async def test_stopping_a_run_cancels_its_task_on_the_server(napping: Napping, where: str) -> None:
    if where == "inline":
        server = MCPServer.http(napping.url, name="napping", approval="never", task_after=3600)
        agent, _ = _forever_agent(server)
    else:
        server = MCPServer.http(napping.url, name="napping", approval="never", tasks="always")
        agent, _ = _forever_agent(server, hold)
    stop = StopSignal()
    async with Runtime() as runtime:
        finished: list[WorkFinished] = []
        runtime.background.emit = lambda e: (
            finished.append(e) if isinstance(e, WorkFinished) else None
        )
        session = await runtime.create_session(agent)
        running = asyncio.ensure_future(session.run("Nap.", options=RunOptions(stop=stop)))
        # The task runs and is polled (inline, or in the background while
        # the run holds).
        await _until(lambda: len(napping.seen("get")) >= 2)
        assert not running.done()
        stop.set("the person changed their mind")
        result = await asyncio.wait_for(running, 30)
        assert result.status is RunStatus.STOPPED
        [start] = napping.seen("start")
        await _until(lambda: bool(napping.seen("cancel")))
        if where == "background":
            await _until(lambda: bool(finished))
        tasks = await mcp_tasks(runtime, session.id)
        transcript = await session.transcript()

    # Seen by the server while the task still worked: it is cancelled there.
    assert [(c["task"], c["status"]) for c in napping.seen("cancel")] == [
        (start["task"], "cancelled")
    ]
    ended = [t for t in tasks if t.status is not None]
    if where == "background":
        assert [p.status for p in ended] == ["stopped"]
        assert "the run that started it was stopped" in ended[0].text
        assert [type(e) for e in finished] == [WorkFinished]
    else:
        assert ended == []
        [answer] = [r for m in transcript for r in m.results]
        assert answer.is_error
        assert "cancelled: the run was asked to stop" in answer.content
