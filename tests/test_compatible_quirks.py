"""Where OpenAI-compatible servers differ from OpenAI's own host, against the fake server.

What a compatible server needs (a `content` on tool-call-only turns,
`max_tokens`), what it may leave out (streamed usage: then estimated and
marked so, and counted by budgets), and how it fails (an empty 200 stream
for a prompt over the window: `ContextWindowExceeded` with the sizes, not
three retries). OpenAI's own host keeps getting what its API documents.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from taskloom import Agent, ModelSettings, RunOptions, RunStatus, tool
from taskloom.errors import ContextWindowExceeded, TransportError
from taskloom.messages import Message, ToolCall, ToolResult, Usage
from taskloom.models import ModelRequest, OpenAIChatModel, RetryPolicy, resolve_model
from taskloom.testing.fake_server import FakeServer

FAST_RETRY = RetryPolicy(max_retries=3, initial_delay=0.01, max_delay=0.01)
# The fake server, like OpenAI, streams usage only when asked for it. Told
# not to, it streams none, as servers that ignore `stream_options` do.
NO_STREAM_USAGE = {"stream_options": {"include_usage": False}}


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer(api_key="test") as s:
        yield s


def compatible(server: FakeServer, **options: Any) -> OpenAIChatModel:
    """`openai:` pointed at another host: the generic compatible server."""
    model = resolve_model(f"openai:local-model@{server.base_url}", api_key="test", **options)
    assert isinstance(model, OpenAIChatModel)
    return model


def tool_turn_history() -> ModelRequest:
    return ModelRequest(
        messages=[
            Message.user("add 2 and 3"),
            Message.assistant(tool_calls=[ToolCall("call_1", "add", {"a": 2, "b": 3})]),
            Message.tool_results([ToolResult("call_1", "5", tool_name="add")]),
        ]
    )


# --- tool-call-only assistant turns ---------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_a_two_round_run_sends_tool_call_turns_with_empty_content(
    server: FakeServer, stream: bool
) -> None:
    server.script(FakeServer.reply(tool_calls=[("add", {"a": 2, "b": 3})]), FakeServer.reply("5"))
    agent = Agent("calc", compatible(server, stream=stream), tools=[add])
    result = await agent.run("add 2 and 3")
    assert result.ok and result.text == "5"
    second = server.requests[1].body["messages"]
    (turn,) = [m for m in second if m["role"] == "assistant"]
    # llama.cpp's templates read message.content: a missing key is a 500 or
    # an empty stream there, and null is refused too.
    assert turn["content"] == ""
    assert turn["tool_calls"][0]["function"]["name"] == "add"


def test_openai_host_gets_tool_call_turns_without_content() -> None:
    model = OpenAIChatModel("gpt-4.1-mini", api_key="k")
    # As OpenAI's API reference documents its own host.
    assert (model.quirks.max_tokens_field, model.quirks.tool_turn_content) == (
        "max_completion_tokens",
        None,
    )
    (turn,) = [
        m for m in model.build_body(tool_turn_history())["messages"] if m["role"] == "assistant"
    ]
    assert "content" not in turn and turn["tool_calls"]


def test_a_turn_with_text_keeps_its_text_everywhere() -> None:
    history = ModelRequest(
        messages=[
            Message.user("hi"),
            Message.assistant("let me add", tool_calls=[ToolCall("c", "add", {"a": 1, "b": 1})]),
            Message.tool_results([ToolResult("c", "2")]),
        ]
    )
    for model in (OpenAIChatModel("m", api_key="k"), resolve_model("vllm:m", api_key="k")):
        body = model.build_body(history)  # type: ignore[attr-defined]
        (turn,) = [m for m in body["messages"] if m["role"] == "assistant"]
        assert turn["content"] == "let me add"


# --- the output limit's name ----------------------------------------------------------------


async def test_max_tokens_goes_out_as_max_tokens_to_a_server_given_by_url(
    server: FakeServer,
) -> None:
    model = compatible(server, stream=False)
    assert model.provider == "openai"
    assert (model.quirks.max_tokens_field, model.quirks.tool_turn_content) == ("max_tokens", "")
    await model.request(ModelRequest([Message.user("hi")], settings=ModelSettings(max_tokens=5)))
    body = server.requests[0].body
    assert body["max_tokens"] == 5 and "max_completion_tokens" not in body


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("openai:gpt-4.1-mini", "max_completion_tokens"),
        ("openai:gpt-4.1-mini@https://api.openai.com/v1/", "max_completion_tokens"),
        ("openai:gpt-4.1-mini@https://proxy.example.com/v1", "max_tokens"),
        ("ollama:qwen3", "max_tokens"),
        ("groq:llama-3.3-70b-versatile", "max_tokens"),
        ("llamacpp:any@http://10.1.2.3:8080/v1", "max_tokens"),
    ],
)
def test_the_output_limit_is_named_by_the_host(spec: str, field: str) -> None:
    model = resolve_model(spec, api_key="k")
    body = model.build_body(
        ModelRequest([Message.user("hi")], settings=ModelSettings(max_tokens=7))
    )  # type: ignore[attr-defined]
    assert body[field] == 7
    assert {"max_tokens", "max_completion_tokens"} - {field} & body.keys() == set()


# --- streamed usage ---------------------------------------------------------------------------


async def test_streamed_usage_is_asked_for_and_taken_as_reported(server: FakeServer) -> None:
    server.script(FakeServer.reply("fine", usage=Usage(input_tokens=21, output_tokens=3)))
    response = await compatible(server).request(ModelRequest([Message.user("hi")]))
    assert server.requests[0].body["stream_options"] == {"include_usage": True}
    assert response.usage == Usage(input_tokens=21, output_tokens=3, requests=1)
    assert not response.usage.estimated


async def test_a_stream_without_usage_gets_an_estimate_marked_as_one(server: FakeServer) -> None:
    prompt = "count these words please " * 20  # 500 characters
    answer = "one two three four five six seven eight"  # 39 characters
    server.script(FakeServer.reply(answer))
    settings = ModelSettings(extra=NO_STREAM_USAGE)
    response = await compatible(server).request(
        ModelRequest([Message.user(prompt)], system="Be brief.", settings=settings)
    )
    assert response.text == answer
    usage = response.usage
    assert usage.estimated and usage.requests == 1
    # About four characters a token, rounded up.
    assert (usage.input_tokens, usage.output_tokens) == (-(-509 // 4), -(-39 // 4))
    assert Usage.from_dict(usage.to_dict()) == usage


async def test_token_budgets_count_estimated_usage(server: FakeServer) -> None:
    server.script(
        FakeServer.reply(tool_calls=[("add", {"a": 2, "b": 3})]),
        FakeServer.reply("5"),
    )
    agent = Agent(
        "calc",
        compatible(server),
        tools=[add],
        settings=ModelSettings(extra=NO_STREAM_USAGE),
    )
    result = await agent.run("add 2 and 3 " * 40, options=RunOptions(token_budget=50))
    # The first request alone is estimated over the budget: the run ends
    # before asking again (with usage counted as 0 it would have completed).
    assert result.status is RunStatus.BUDGET_EXHAUSTED
    assert result.usage.estimated and result.usage.total_tokens > 50
    assert len(server.requests) == 1


def test_estimated_usage_stays_estimated_when_added_up() -> None:
    reported = Usage(10, 2, requests=1)
    estimated = Usage(40, 5, requests=1, estimated=True)
    assert not (reported + reported).estimated
    total = reported + estimated
    assert total == Usage(50, 7, requests=2, estimated=True)
    assert (Usage() + estimated).estimated and (estimated + Usage()).estimated
    assert Usage.from_dict(total.to_dict()) == total
    assert "estimated" not in reported.to_dict()


# --- an empty 200 stream ----------------------------------------------------------------------


async def test_an_empty_stream_for_a_prompt_over_the_window_is_context_window_exceeded(
    server: FakeServer,
) -> None:
    server.script(FakeServer.truncate(0))
    model = compatible(server, settings=ModelSettings(context_window=1000))
    agent = Agent("a", model)
    with pytest.raises(ContextWindowExceeded) as caught:
        await agent.run("word " * 1000, options=RunOptions(retry=FAST_RETRY))
    # One request, not four: the overflow is named, not retried.
    assert len(server.requests) == 1
    message = str(caught.value)
    assert "about 1250 tokens" in message and "5000 characters" in message
    assert "context window of 1000 tokens" in message
    assert caught.value.retryable is False


async def test_the_window_can_come_with_the_request(server: FakeServer) -> None:
    server.script(FakeServer.truncate(0))
    request = ModelRequest(
        [Message.user("word " * 1000)], settings=ModelSettings(context_window=512)
    )
    with pytest.raises(ContextWindowExceeded, match="context window of 512 tokens"):
        await compatible(server).request(request)


@pytest.mark.parametrize("window", [None, 100_000])
async def test_an_empty_stream_otherwise_stays_a_transport_error_and_is_retried(
    server: FakeServer, window: int | None
) -> None:
    server.script(FakeServer.truncate(0), FakeServer.truncate(0), FakeServer.reply("there"))
    model = compatible(server, settings=ModelSettings(context_window=window))
    with pytest.raises(TransportError):
        await model.request(ModelRequest([Message.user("hi")]))
    result = await Agent("a", model).run("hi", options=RunOptions(retry=FAST_RETRY))
    assert result.ok and result.text == "there" and result.transport_retries == 1
