"""MCP tasks that need input from a person (`input_required`): the question
is parked in the session's log (`Session.pending_input()`), answered from
code or from `taskloom answer` in another process, sent to the server, and
the task goes on; its result reaches the model once, as before.

The 2025-11-25 spelling against the npm reference server (its
`simulate-research-query` asks which reading of an ambiguous topic is
meant, over the stream of `tasks/result`); the 2026-07-28 extension
(`inputRequests` in `tasks/get`, answered with `tasks/update`) against a
server built on the official SDK (`asking_server.py`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from input_app import GREETING, greeter, news, open_test_store
from mcp_support import HERE
from npm_servers import everything_entry

import taskloom
from conftest import SEEN_GROUPS
from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, PendingInput, Runtime, Session, UsageError
from taskloom.entries import InputAnswer, InputRequest, MCPTaskEnded
from taskloom.errors import AnswerConflict
from taskloom.events import WorkFinished
from taskloom.mcp import MCPServer
from taskloom.models import FunctionModel, ModelRequest, reply

pytestmark = pytest.mark.slow

SOURCES = str(Path(taskloom.__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SOURCES, str(HERE)])}


class Asking:
    """`asking_server.py` over HTTP; `updates()` are the `tasks/update`s it got."""

    def __init__(self, folder: Path, mode: str = "") -> None:
        self.marker = folder / "updates.jsonl"
        self.process = subprocess.Popen(
            [sys.executable, "asking_server.py", str(self.marker), mode],
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
            env=ENV,
            start_new_session=True,
        )
        SEEN_GROUPS.add(self.process.pid)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("READY "), line
        self.url = line.split()[1]

    def updates(self) -> list[dict[str, object]]:
        if not self.marker.exists():
            return []
        return [json.loads(line) for line in self.marker.read_text().splitlines()]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(15)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def asking(tmp_path: Path) -> Iterator[Asking]:
    server = Asking(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def _start_child(url: str, store: str, schema: str, session_id: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "input_child.py", url, store, schema, session_id],
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
        env=ENV,
        start_new_session=True,
    )
    SEEN_GROUPS.add(child.pid)
    return child


def _answer_from_the_cli(url: str, schema: str, session_id: str, input_id: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "taskloom",
            "answer",
            session_id,
            input_id,
            "--app",
            "input_app:make_runtime",
            "--set",
            "name=Ada",
        ],
        capture_output=True,
        text=True,
        cwd=HERE,
        env={**ENV, "INPUT_STORE": url, "INPUT_SCHEMA": schema, "COLUMNS": "200"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _news(request: ModelRequest) -> str:
    tail: list[str] = []
    for message in reversed(request.messages):
        if message.role == "assistant":
            break
        tail.append(message.text)
    return "\n".join(tail)


async def _question(session: Session, timeout: float = 30) -> PendingInput:
    async with asyncio.timeout(timeout):
        while True:
            waiting = await session.pending_input()
            if waiting:
                assert len(waiting) == 1, waiting
                return waiting[0]
            await asyncio.sleep(0.1)


async def test_a_2025_11_25_question_is_parked_answered_from_code_and_the_task_goes_on() -> None:
    entry = everything_entry()
    node = shutil.which("node")
    assert node is not None
    server = MCPServer.stdio(
        node, [str(entry), "stdio"], name="everything", approval="never", task_after=0.5
    )

    def assistant(request: ModelRequest):  # type: ignore[no-untyped-def]
        if len(request.messages) == 1:
            return reply(
                tool_calls=[("simulate-research-query", {"topic": "python", "ambiguous": True})]
            )
        if "Research Report: python" in _news(request):
            return reply("The report is in.")
        return reply("Waiting for the report.")

    model = FunctionModel(assistant)
    async with Runtime() as runtime:
        finished = asyncio.Event()
        runtime.background.emit = lambda e: finished.set() if isinstance(e, WorkFinished) else None
        session = await runtime.create_session(Agent("scholar", model, tools=[server]))
        first = await session.run("Research python.")
        assert first.text == "Waiting for the report."

        question = await _question(session)
        assert "multiple interpretations" in question.message
        assert question.schema is not None
        choices = question.schema["properties"]["interpretation"]["oneOf"]
        assert "snake" in [c["const"] for c in choices]
        assert "everything" in question.source and "simulate-research-query" in question.source
        # The answer is checked against what the server asked for.
        with pytest.raises(UsageError, match="one of"):
            await session.answer(question.id, {"interpretation": "lizard"})
        with pytest.raises(UsageError, match="needs 'interpretation'"):
            await session.answer(question.id, {})
        await session.answer(question.id, {"interpretation": "snake"})
        await session.answer(question.id, {"interpretation": "snake"})  # the same: a no-op
        with pytest.raises(AnswerConflict):
            await session.answer(question.id, action="decline")
        assert await session.pending_input() == []

        await asyncio.wait_for(finished.wait(), 60)
        second = await session.run("Anything new?")
        third = await session.run("And now?")
        log = [e.payload for e in await runtime.store.load(session.id)]

    assert second.text == "The report is in."
    assert third.text == "Waiting for the report."
    carrying = [r for r in model.requests if "Research Report: python" in _news(r)]
    assert len(carrying) == 1
    # The server used the person's answer.
    assert "Research Report: python (snake)" in _news(carrying[0])
    assert [type(p) for p in log if isinstance(p, InputRequest | InputAnswer)] == [
        InputRequest,
        InputAnswer,
    ]
    assert [p.status for p in log if isinstance(p, MCPTaskEnded)] == ["done"]


async def test_a_2026_07_28_question_answered_from_the_cli_in_another_process(
    asking: Asking, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    agent = greeter(asking.url)
    model = agent.model
    assert isinstance(model, FunctionModel)
    async with Runtime(store=open_test_store(url, schema)) as runtime:
        finished = asyncio.Event()
        runtime.background.emit = lambda e: finished.set() if isinstance(e, WorkFinished) else None
        session = await runtime.create_session(agent)
        first = await session.run("Greet someone, please.")
        assert first.text == "Waiting for the greeting."
        question = await _question(session)
        assert question.message == "Whom shall I greet?"
        assert question.schema is not None and question.schema["required"] == ["name"]
        # Nothing is sent to the server before a person answered.
        await asyncio.sleep(0.5)
        assert asking.updates() == []

        said = await asyncio.to_thread(_answer_from_the_cli, url, schema, session.id, question.id)
        assert f"answered {question.id}: accept" in said
        assert "Whom shall I greet?" in said

        await asyncio.wait_for(finished.wait(), 30)
        second = await session.run("Anything new?")
        third = await session.run("And now?")
        assert await session.pending_input() == []

    assert second.text == "Greeted."
    assert third.text == "Waiting for the greeting."
    carrying = [r for r in model.requests if GREETING in news(r)]
    assert len(carrying) == 1
    assert "hello, Ada" in news(carrying[0])
    # Sent once: the live poller read the other process's answer from the log.
    assert [u["responses"] for u in asking.updates()] == [
        {"who": {"action": "accept", "content": {"name": "Ada"}}}
    ]


async def test_a_question_outlives_a_sigkilled_client_and_the_next_run_sends_its_answer(
    asking: Asking, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    session_id = uuid.uuid4().hex
    child = _start_child(asking.url, url, schema, session_id)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("ASKED "), line
        input_id = line.split()[1]
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(15)
        if child.stdout is not None:
            child.stdout.close()

    # The client is dead; the question is in the log, and a person answers it.
    said = await asyncio.to_thread(_answer_from_the_cli, url, schema, session_id, input_id)
    assert f"answered {input_id}: accept" in said
    await asyncio.sleep(0.5)
    assert asking.updates() == []  # nobody polls the task to send it

    agent = greeter(asking.url)
    model = agent.model
    assert isinstance(model, FunctionModel)
    async with Runtime(store=open_test_store(url, schema)) as runtime:
        runtime.background.lease = 1.0
        finished = asyncio.Event()
        runtime.background.emit = lambda e: finished.set() if isinstance(e, WorkFinished) else None
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
        log = [e.payload for e in await runtime.store.load(session_id)]

    carrying = [r for r in model.requests if GREETING in news(r)]
    assert len(carrying) == 1, [news(r) for r in carrying]
    assert "hello, Ada" in news(carrying[0])
    assert last.text == "Waiting for the greeting."
    updates = asking.updates()
    assert [u["responses"] for u in updates] == [
        {"who": {"action": "accept", "content": {"name": "Ada"}}}
    ]
    assert [type(p) for p in log if isinstance(p, InputRequest | InputAnswer)] == [
        InputRequest,
        InputAnswer,
    ]
    assert [p.status for p in log if isinstance(p, MCPTaskEnded)] == ["done"]
