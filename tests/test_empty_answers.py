"""An empty answer (no text, no tool calls) is never a silent success.

Some servers answer a prompt longer than the model's window with an empty
answer that looks finished (a router in front of llama.cpp: one empty chunk,
`finish_reason: "stop"`, `[DONE]`). On every wire, streamed or not, that
answer to a request estimated over the known window is
`ContextWindowExceeded`; any other empty final answer completes the run with
an `EmptyAnswer` event and `RunResult.empty_answer` set.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
from rich.console import Console

from taskloom import Agent, ModelSettings, RunOptions, RunStatus, Runtime
from taskloom.cli.render import EventPrinter, usage_table
from taskloom.entries import RunFinishedEntry
from taskloom.errors import ContextWindowExceeded
from taskloom.events import EmptyAnswer, Event
from taskloom.models import RetryPolicy, resolve_model
from taskloom.testing.fake_server import FakeServer

WIRES = ["openai", "openai-responses", "anthropic", "google"]
WINDOW = 4096
OVER_THE_WINDOW = "word " * 5000  # 25,000 characters: about 6,250 tokens
FAST_RETRY = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.001)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer(api_key="test") as s:
        yield s


def model_on(wire: str, server: FakeServer, **options: Any) -> Any:
    url = server.anthropic_base_url if wire == "anthropic" else server.base_url
    if wire == "google":
        url = server.gemini_base_url
    return resolve_model(f"{wire}:local-model@{url}", api_key="test", **options)


def empty() -> Any:
    # One empty text delta, then a normal end ("stop" / end_turn / completed).
    return FakeServer.reply([""])


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("wire", WIRES)
async def test_an_empty_answer_to_a_request_over_the_window_is_context_window_exceeded(
    server: FakeServer, wire: str, stream: bool
) -> None:
    server.script(empty(), empty(), empty())
    agent = Agent("a", model_on(wire, server, stream=stream))
    agent = agent.replace(settings=ModelSettings(context_window=WINDOW))
    async with Runtime() as runtime:
        session = await runtime.create_session(agent)
        with pytest.raises(ContextWindowExceeded) as caught:
            await session.run(OVER_THE_WINDOW, options=RunOptions(retry=FAST_RETRY))
        entries = await runtime.store.load(session.id)
    # Named, not retried.
    assert len(server.requests) == 1
    message = str(caught.value)
    assert f"context window of {WINDOW} tokens" in message and "about 6250 tokens" in message
    assert caught.value.retryable is False
    [finished] = [e.payload for e in entries if isinstance(e.payload, RunFinishedEntry)]
    assert finished.status is RunStatus.FAILED and "ContextWindowExceeded" in str(finished.error)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("wire", WIRES)
async def test_an_empty_final_answer_is_reported_not_silent(
    server: FakeServer, wire: str, stream: bool
) -> None:
    server.script(empty(), FakeServer.reply("Now with words."))
    agent = Agent("a", model_on(wire, server, stream=stream))
    agent = agent.replace(settings=ModelSettings(context_window=WINDOW))
    events: list[Event] = []
    async with Runtime() as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("hi", emit=events.append)
        assert result.status is RunStatus.COMPLETED and result.text == ""
        assert result.empty_answer
        [said] = [e for e in events if isinstance(e, EmptyAnswer)]
        assert (said.run_id, said.round, said.session_id) == (result.run_id, 1, session.id)
        # The session's latest result as read back from its log (what
        # `Session.wait` returns) says so too.
        assert session.journal.log.finished_result(session.id, agent) == result

        events.clear()
        second = await session.run("and now?", emit=events.append)
        assert second.ok and second.text == "Now with words." and not second.empty_answer
        assert not [e for e in events if isinstance(e, EmptyAnswer)]
        assert session.journal.log.finished_result(session.id, agent) == second


@pytest.mark.parametrize("wire", WIRES)
async def test_without_a_known_window_a_long_request_answered_empty_is_reported(
    server: FakeServer, wire: str
) -> None:
    server.script(empty())
    result = await Agent("a", model_on(wire, server)).run(OVER_THE_WINDOW)
    assert result.ok and result.empty_answer and len(server.requests) == 1


async def test_the_command_line_shows_an_empty_answer(server: FakeServer) -> None:
    server.script(empty())
    out = io.StringIO()
    console = Console(file=out, width=120)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model_on("openai", server)))
        result = await session.run("hi", emit=EventPrinter(console))
    console.print(usage_table(result))
    shown = out.getvalue()
    assert "the model answered with nothing" in shown
    assert "completed (empty answer)" in shown
