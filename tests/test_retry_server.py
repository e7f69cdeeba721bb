"""The transport retry policy against a real (fake) server on loopback."""

from __future__ import annotations

import time
from typing import Any

import pytest

from taskloom import Agent, AuthenticationError, RetryPolicy, RunOptions, Runtime, ToolEffect, tool
from taskloom.events import RetryAttempt
from taskloom.models import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel
from taskloom.testing.fake_server import FakeServer

FAST = RetryPolicy(max_retries=4, initial_delay=0.01, max_delay=0.05, max_retry_after=0.2)


@tool(effect=ToolEffect.READ_ONLY)
def clock() -> str:
    """The time."""
    return "noon"


def adapter(kind: str, server: FakeServer) -> Any:
    if kind == "chat":
        return OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")
    if kind == "responses":
        return OpenAIResponsesModel("gpt-5-mini", base_url=server.base_url, api_key="test")
    if kind == "gemini":
        return GeminiModel("gemini-2.5-flash", base_url=server.gemini_base_url, api_key="test")
    return AnthropicModel("claude-sonnet-4-5", base_url=server.anthropic_base_url, api_key="test")


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic", "gemini"])
async def test_faults_while_opening_or_mid_stream_are_retried_as_a_whole(kind: str) -> None:
    async with FakeServer() as server:
        server.script(
            FakeServer.reply(tool_calls=[("clock", {})]),
            FakeServer.rate_limit(retry_after=0.1),
            FakeServer.error(500),
            FakeServer.drop(after_events=2, reply=FakeServer.reply("never seen")),
            FakeServer.malformed(after_events=1, reply=FakeServer.reply("never seen either")),
            FakeServer.reply("It is noon."),
        )
        session = await Runtime().create_session(Agent("a", adapter(kind, server), tools=[clock]))
        retries: list[RetryAttempt] = []
        result = await session.run(
            "time?",
            options=RunOptions(retry=FAST),
            emit=lambda e: retries.append(e) if isinstance(e, RetryAttempt) else None,
        )
        assert result.text == "It is noon."
        assert (result.model_requests, result.transport_retries, result.rounds) == (6, 4, 2)
        assert [r.attempt for r in retries] == [1, 2, 3, 4]
        assert retries[0].status == 429 and retries[0].delay >= 0.1  # Retry-After honoured
        assert retries[1].status == 500
        # Every wait is the policy's: Retry-After capped, backoff bounded.
        assert all(r.delay <= FAST.max_retry_after for r in retries[:1])
        assert all(r.delay <= FAST.max_delay for r in retries[1:])
        # nothing of the failed attempts reached the transcript
        texts = [m.text for m in await session.transcript()]
        assert "never seen" not in " ".join(texts)
        assert len(server.requests) == 6


async def test_authentication_errors_are_not_retried() -> None:
    async with FakeServer() as server:
        server.script(FakeServer.error(401))
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")
        with pytest.raises(AuthenticationError):
            await Agent("a", model).run("hi", options=RunOptions(retry=FAST))
        assert len(server.requests) == 1


async def test_retries_stop_at_the_deadline() -> None:
    async with FakeServer() as server:
        server.script(*[FakeServer.rate_limit(retry_after=5)] * 3)
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")
        policy = RetryPolicy(max_retries=5, max_retry_after=5)
        started = time.monotonic()
        result = await Agent("a", model).run("hi", options=RunOptions(retry=policy, deadline=0.5))
        assert result.status.value == "deadline"
        # A generous bound: the deadline cut the 5 s Retry-After wait short.
        assert time.monotonic() - started < 4


async def test_a_hung_server_is_cut_by_the_deadline() -> None:
    async with FakeServer() as server:
        server.script(FakeServer.hang())
        model = AnthropicModel(
            "claude-sonnet-4-5", base_url=server.anthropic_base_url, api_key="test"
        )
        started = time.monotonic()
        result = await Agent("a", model).run("hi", options=RunOptions(deadline=0.3))
        assert result.status.value == "deadline"
        assert time.monotonic() - started < 4  # generous: without the deadline it never ends


def test_run_sync_twice_with_a_real_adapter() -> None:
    # Each asyncio.run is a new event loop: pooled connections must not leak across.
    with FakeServer.in_thread() as server:
        server.script(FakeServer.reply("one"), FakeServer.reply("two"))
        agent = Agent(
            "a", OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="test")
        )
        assert agent.run_sync("first").text == "one"
        assert agent.run_sync("second").text == "two"
