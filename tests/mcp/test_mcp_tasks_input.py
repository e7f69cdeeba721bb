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
import shutil

import pytest
from npm_servers import everything_entry

from taskloom import Agent, AnswerConflict, PendingInput, Runtime, Session, UsageError, WorkFinished
from taskloom.entries import InputAnswer, InputRequest, MCPTaskEnded
from taskloom.mcp import MCPServer
from taskloom.models import FunctionModel, ModelRequest, reply

pytestmark = pytest.mark.slow


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
