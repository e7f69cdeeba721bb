"""taskloom against a real OpenAI-compatible server: llama-cpp-python's, with SmolLM2-135M.

The server is not ours, so it fails as real servers do: its chat template
reads `message.content` (a tool-call-only turn without it is a 500, or an
empty stream), it ignores `max_completion_tokens`, it streams no usage, and
a prompt over its window gets an empty 200 stream. Every request is at
temperature 0 with a fixed seed, so the official `openai` SDK, sent the very
same bodies, is an oracle for what taskloom reads back.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from llama_server import MODEL_NAME, N_CTX, LiveServer, start_server

from taskloom import Agent, ModelSettings, RunOptions, RunStatus, tool
from taskloom.errors import ContextWindowExceeded, ProviderError, TransportError
from taskloom.events import TextDelta
from taskloom.loop import RoundAdjustment, RoundBoundary, RoundContext, RoundDecision
from taskloom.messages import Message
from taskloom.models import ModelRequest, OpenAIChatModel, RetryPolicy
from taskloom.results import ToolSpec

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]

SEED = 42
FORCE_ADD = {"type": "function", "function": {"name": "add"}}
FAST_RETRY = RetryPolicy(max_retries=2, initial_delay=0.05, max_delay=0.05)
QUESTION = "What is 2 plus 3?"
# About 27,000 characters: some 6,000 tokens, well over the 4,096 window.
OVERLONG = "The quick brown fox jumps over the lazy dog. " * 600
ADD_SPEC = ToolSpec(
    "add",
    "Add two integers and return the sum.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)


def chat_model(
    server: LiveServer,
    *,
    stream: bool,
    max_tokens: int | None = 48,
    force_add: bool = False,
    **options: Any,
) -> OpenAIChatModel:
    """`openai:<model>@<url>`, as a user would point taskloom at the server."""
    extra: dict[str, Any] = {"seed": SEED}
    if force_add:
        extra["tool_choice"] = FORCE_ADD
    settings = ModelSettings(temperature=0, max_tokens=max_tokens, extra=extra)
    return OpenAIChatModel(
        MODEL_NAME, base_url=server.base_url, stream=stream, settings=settings, **options
    )


def adder(calls: list[tuple[int, int]]) -> Any:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers and return the sum."""
        calls.append((a, b))
        return a + b

    return add


class ForceToolThenAnswer:
    """Forces the tool on the first request (the run's model), then switches to
    `answer`, a model with the same spec that lets the model reply in text."""

    def __init__(self, answer: OpenAIChatModel) -> None:
        self.answer = answer

    async def on_round(self, ctx: RoundContext) -> RoundDecision:
        if ctx.boundary is RoundBoundary.TOOL_RESULTS_COMMITTED:
            return RoundDecision.proceed(RoundAdjustment(model=self.answer))
        return RoundDecision.proceed()


# --- a tool-using agent, to completion ----------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_a_two_round_agent_run_with_a_forced_tool_completes(
    llama_server: LiveServer, stream: bool
) -> None:
    forced = chat_model(llama_server, stream=stream, force_add=True)
    answer = chat_model(llama_server, stream=stream)
    # Two instances with one spec: the strategy's switch must still take
    # effect, or the second request forces the tool again and the run never
    # ends in text.
    assert forced.spec == answer.spec and forced is not answer
    calls: list[tuple[int, int]] = []
    agent = Agent("calc", forced, instructions="You add numbers.", tools=[adder(calls)])
    options = RunOptions(strategy=ForceToolThenAnswer(answer), max_rounds=4, retry=FAST_RETRY)
    result = await agent.run(QUESTION, options=options)
    assert result.status is RunStatus.COMPLETED, result.error
    assert (result.rounds, result.tool_calls, result.transport_retries) == (2, 1, 0)
    assert len(calls) == 1 and all(isinstance(n, int) for n in calls[0])
    assert result.text.strip()


# --- settings that must reach the server --------------------------------------------------------


async def test_max_tokens_is_honoured_streamed_and_not(llama_server: LiveServer) -> None:
    request = ModelRequest([Message.user("Write a long story about a dragon who learns to fly.")])
    whole = await chat_model(llama_server, stream=False, max_tokens=5).request(request)
    streamed = await chat_model(llama_server, stream=True, max_tokens=5).request(request)
    # The server's own count: exactly the limit (4,081 tokens came back when
    # the limit went out as max_completion_tokens, which it ignores).
    assert whole.usage.output_tokens == 5 and not whole.usage.estimated
    for response in (whole, streamed):
        assert response.stop_reason == "max_tokens"
    assert streamed.text == whole.text


# --- usage ----------------------------------------------------------------------------------------


async def test_streamed_usage_is_estimated_near_the_servers_count(
    llama_server: LiveServer,
) -> None:
    prompt = (
        "Here is a list of things found in a kitchen: "
        + ", ".join(["a kettle", "a pan", "a spoon", "a knife", "a plate", "a cup"] * 12)
        + ". Name three of them."
    )
    request = ModelRequest([Message.user(prompt)])
    whole = await chat_model(llama_server, stream=False).request(request)
    model = chat_model(llama_server, stream=True)
    assert model.build_body(request)["stream_options"] == {"include_usage": True}
    streamed = await model.request(request)
    assert streamed.text == whole.text
    reported, estimated = whole.usage, streamed.usage
    assert not reported.estimated and estimated.estimated and estimated.requests == 1
    print(f"usage reported {reported} / estimated {estimated}")
    # About four characters a token: within a factor of two of the server's count.
    assert reported.input_tokens / 2 <= estimated.input_tokens <= reported.input_tokens * 2
    assert reported.output_tokens / 2 <= estimated.output_tokens <= reported.output_tokens * 2


async def test_a_token_budget_counts_the_estimate_of_a_streamed_run(
    llama_server: LiveServer,
) -> None:
    calls: list[tuple[int, int]] = []
    agent = Agent(
        "calc", chat_model(llama_server, stream=True, force_add=True), tools=[adder(calls)]
    )
    result = await agent.run(QUESTION, options=RunOptions(token_budget=10, max_rounds=4))
    assert result.status is RunStatus.BUDGET_EXHAUSTED
    assert result.usage.estimated and result.usage.total_tokens > 10
    assert result.model_requests == 1


# --- a prompt over the window ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_a_prompt_over_the_window_is_context_window_exceeded_at_once(
    llama_server: LiveServer, stream: bool
) -> None:
    sent: list[httpx2.Request] = []

    async def record(request: httpx2.Request) -> None:
        sent.append(request)

    async with httpx2.AsyncClient(event_hooks={"request": [record]}, timeout=120) as client:
        model = OpenAIChatModel(
            MODEL_NAME,
            base_url=llama_server.base_url,
            stream=stream,
            http_client=client,
            settings=ModelSettings(temperature=0, max_tokens=16, context_window=N_CTX),
        )
        with pytest.raises(ContextWindowExceeded) as caught:
            await Agent("a", model).run(OVERLONG, options=RunOptions(retry=FAST_RETRY))
    assert len(sent) == 1, "the overflow was retried"
    error = caught.value
    print(f"stream={stream}: {error}")
    assert not error.retryable
    if stream:
        # An empty 200 stream: the sizes come from the estimate and the window.
        assert f"context window of {N_CTX} tokens" in error.message
        assert f"from {len(OVERLONG)} characters" in error.message
    else:
        # The server's own 400 names both sizes.
        assert error.status == 400 and str(N_CTX) in error.message


# --- the server dies mid-answer ------------------------------------------------------------------


@pytest.mark.slow
async def test_a_server_killed_mid_stream_is_a_transport_error_without_a_hang(
    llama_build: Path, tmp_path: Path
) -> None:
    server = start_server(llama_build, tmp_path / "server.log")
    try:
        model = chat_model(server, stream=True, max_tokens=2000)
        request = ModelRequest([Message.user("Write a very long story about a dragon.")])
        deltas = 0
        async with asyncio.timeout(60):
            with pytest.raises(TransportError) as caught:
                async for event in model.stream(request):
                    if isinstance(event, TextDelta):
                        deltas += 1
                        if deltas == 1:
                            # The answer is streaming (proven by a delta): kill it now.
                            os.kill(server.pid, signal.SIGKILL)
        assert deltas >= 1 and caught.value.retryable
        assert server.process.wait(timeout=10) == -signal.SIGKILL
        print(f"killed after {deltas} deltas: {caught.value}")
        # Against the dead server a run fails, after its retries, with the same error.
        async with asyncio.timeout(60):
            with pytest.raises(TransportError):
                await Agent("a", model).run("hi", options=RunOptions(retry=FAST_RETRY))
    finally:
        server.stop()


# --- the official SDK as an oracle ---------------------------------------------------------------


@pytest.fixture
async def sdk(llama_server: LiveServer) -> Any:
    client = openai.AsyncOpenAI(base_url=llama_server.base_url, api_key="unused", max_retries=0)
    yield client
    await client.close()


ORACLE_REQUESTS = {
    "text": (ModelRequest([Message.user("Say hello to Ada in one sentence.")]), False),
    "tool": (ModelRequest([Message.user(QUESTION)], tools=[ADD_SPEC]), True),
}


@pytest.mark.parametrize("case", sorted(ORACLE_REQUESTS))
@pytest.mark.parametrize("stream", [True, False])
async def test_the_openai_sdk_reads_the_same_answer_from_the_same_body(
    llama_server: LiveServer, sdk: Any, case: str, stream: bool
) -> None:
    request, force = ORACLE_REQUESTS[case]
    model = chat_model(llama_server, stream=stream, force_add=force)
    body = model.build_body(request)
    ours = await model.request(request)
    if stream:
        # The SDK parses each chunk; the pieces are put together here. This
        # server repeats a call's name in every chunk (the SDK's own
        # accumulator would concatenate them), so a name is taken once.
        text, pieces, finish = "", {}, None
        async for chunk in await sdk.chat.completions.create(**body):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or ():
                    name, args = pieces.get(call.index, ("", ""))
                    function = call.function
                    pieces[call.index] = (
                        name or (function and function.name) or "",
                        args + ((function and function.arguments) or ""),
                    )
                finish = choice.finish_reason or finish
        theirs_calls = [(name, json.loads(args)) for name, args in pieces.values()]
    else:
        completion = await sdk.chat.completions.create(**body)
        message, finish = completion.choices[0].message, completion.choices[0].finish_reason
        text = message.content or ""
        theirs_calls = [
            (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()
        ]
        assert (ours.usage.input_tokens, ours.usage.output_tokens) == (
            completion.usage.prompt_tokens,
            completion.usage.completion_tokens,
        )
    assert ours.text == text
    assert [(c.name, c.arguments) for c in ours.message.tool_calls] == theirs_calls
    assert bool(theirs_calls) is force
    expected_stop = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
    assert ours.stop_reason == expected_stop.get(str(finish), ours.stop_reason)


async def test_the_openai_sdk_sees_the_same_errors(llama_server: LiveServer, sdk: Any) -> None:
    cases = {
        "overflow": ModelRequest([Message.user(OVERLONG)]),
        "unknown tool": ModelRequest(
            [Message.user(QUESTION)],
            tools=[ADD_SPEC],
            settings=ModelSettings(
                extra={"tool_choice": {"type": "function", "function": {"name": "nope"}}}
            ),
        ),
    }
    for name, request in cases.items():
        model = chat_model(llama_server, stream=False)
        body = model.build_body(request)
        with pytest.raises(ProviderError) as ours:
            await model.request(request)
        with pytest.raises(openai.APIStatusError) as theirs:
            await sdk.chat.completions.create(**body)
        print(f"{name}: ours {ours.value!r} / sdk {theirs.value.status_code}")
        assert ours.value.status == theirs.value.status_code, name
        body_error = theirs.value.body
        if isinstance(body_error, dict) and "message" in body_error:
            assert ours.value.message == body_error["message"], name
    # Streamed, the overflow is an empty 200 stream: the SDK reads no chunk at
    # all, where taskloom (given the window) names the overflow.
    body = chat_model(llama_server, stream=True).build_body(cases["overflow"])
    chunks = [chunk async for chunk in await sdk.chat.completions.create(**body)]
    assert chunks == []
