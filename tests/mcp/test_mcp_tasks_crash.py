"""MCP tasks outlive the process that started them: a client SIGKILLed while
its task runs on the server, and a new process whose next run of the session
takes polling up; the result reaches the model once (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_support import HERE
from tasks_support import REPORT, client_agent, mcp_tasks, news

import taskloom
from conftest import SEEN_GROUPS
from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Runtime
from taskloom.events import WorkFinished
from taskloom.models import FunctionModel

pytestmark = pytest.mark.slow

SOURCES = str(Path(taskloom.__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SOURCES, str(HERE)])}


class Served:
    """`taskloom mcp serve served_agents:AGENT` over HTTP (`gated` unless
    named), on its own SQLite store (`store`)."""

    def __init__(self, folder: Path, agent: str = "gated") -> None:
        self.folder = folder
        self.agent = agent
        self.store = f"sqlite:///{folder / 'served.db'}"
        self.gate = folder / "gate"
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, port: int = 0) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "taskloom",
                "mcp",
                "serve",
                f"served_agents:{self.agent}",
                "--http",
                f"127.0.0.1:{port}",
                "--store",
                self.store,
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
            env={**ENV, "TASKLOOM_TEST_GATE": str(self.gate)},
            start_new_session=True,
        )
        SEEN_GROUPS.add(self.process.pid)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert f"serving agent '{self.agent}' over MCP at" in line, line
        self.url = line.split()[-1]

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


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _start_child(
    url: str, store: str, schema: str, session_id: str, lease: str = "1.0"
) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "tasks_child.py", url, store, schema, session_id, lease],
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
        env=ENV,
        start_new_session=True,
    )
    SEEN_GROUPS.add(child.pid)
    return child


async def test_a_task_outlives_a_sigkilled_client_and_its_result_arrives_once(
    served: Served, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    session_id = uuid.uuid4().hex
    child = _start_child(served.url, url, schema, session_id)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("READY Still waiting for the gate."), line
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(15)
        if child.stdout is not None:
            child.stdout.close()

    # The task goes on on the server; the gate lets it finish now.
    served.gate.write_text("by the test")
    agent = client_agent(served.url)
    model = agent.model
    assert isinstance(model, FunctionModel)
    async with Runtime(store=open_durable(url, schema)) as runtime:
        runtime.background.lease = 1.0
        finished = asyncio.Event()
        runtime.background.emit = lambda e: finished.set() if isinstance(e, WorkFinished) else None
        # Recorded, not ended.
        assert [t.status for t in await mcp_tasks(runtime, session_id)] == [None]
        session = await runtime.open_session(session_id, agent)
        # The dead child's registration lapses with its lease; until then
        # nobody takes the task up (it might still be polled).
        await asyncio.sleep(1.5)
        for _ in range(40):
            await session.run("Any news?")
            if finished.is_set():
                break
            await asyncio.sleep(0.25)
        await asyncio.wait_for(finished.wait(), 30)
        await session.run("And now?")
        last = await session.run("Anything else?")
        tasks = await mcp_tasks(runtime, session_id)
        pending = await runtime.background.inbox.pending(session_id)

    carrying = [r for r in model.requests if REPORT in news(r)]
    assert len(carrying) == 1, [news(r) for r in carrying]
    assert "by the test" in news(carrying[0])
    assert last.text == "Still waiting for the gate."
    assert pending == []
    assert [t.status for t in tasks] == ["done"]
