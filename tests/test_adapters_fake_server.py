"""The four wire adapters against the fake server: streaming, tool calls,
usage, every fault the server can script, and connection reuse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

import taskloom.models
from taskloom.errors import (
    AuthenticationError,
    ProviderError,
    ProviderOverloaded,
    RateLimitError,
    TransportError,
)
from taskloom.events import TextDelta
from taskloom.messages import Message, Usage
from taskloom.models import ModelRequest, ResponseCompleted, RetryPolicy
from taskloom.results import ToolSpec
from taskloom.testing.fake_server import FakeServer

CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
TOOL_ARGS = {"city": "Paris", "days": [1, 2], "note": "a longer string to split"}


@pytest.fixture
async def client() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=10) as c:
        yield c


# --- the wire adapters against the server ---------------------------------------------------

ADAPTERS = ["openai_chat", "openai_responses", "anthropic", "gemini"]
_CLASSES = {
    "openai_chat": "OpenAIChatModel",
    "openai_responses": "OpenAIResponsesModel",
    "anthropic": "AnthropicModel",
    "gemini": "GeminiModel",
}


def base_url_for(kind: str, server: FakeServer) -> str:
    if kind == "anthropic":
        return server.anthropic_base_url
    return server.gemini_base_url if kind == "gemini" else server.base_url


def streamed(kind: str, sent: Any) -> bool:
    """Whether a recorded request asked for a stream (Gemini says so in its path)."""
    if kind == "gemini":
        return ":streamGenerateContent" in sent.path
    return sent.body.get("stream", False) is True


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def keyed_server() -> AsyncIterator[FakeServer]:
    async with FakeServer(api_key="test") as s:
        yield s


def make_model(
    kind: str,
    server: FakeServer,
    client: httpx2.AsyncClient,
    *,
    stream: bool = True,
    api_key: str = "test",
) -> Any:
    base_url = base_url_for(kind, server)
    model = getattr(taskloom.models, _CLASSES[kind])
    return model(
        "fake-model", api_key=api_key, base_url=base_url, http_client=client, stream=stream
    )


def hello() -> ModelRequest:
    return ModelRequest(messages=[Message.user("hi")])


async def test_adapter_streams_text_deltas_in_order(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str
) -> None:
    model = make_model(adapter, keyed_server, client)
    pieces = ["Hel", "lo", ", wor", "ld!"]
    keyed_server.script(FakeServer.reply(pieces, usage=Usage(input_tokens=12, output_tokens=4)))
    events = [event async for event in model.stream(hello())]
    assert [e.text for e in events if isinstance(e, TextDelta)] == pieces
    assert isinstance(events[-1], ResponseCompleted)
    response = events[-1].response
    assert response.message.text == "Hello, world!"
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 4)
    (sent,) = keyed_server.requests
    assert streamed(adapter, sent)
    if adapter == "gemini":
        assert sent.path == "/v1beta/models/fake-model:streamGenerateContent?alt=sse"
    else:
        assert sent.body["model"] == "fake-model"
    if adapter == "anthropic":
        assert sent.path == MESSAGES and sent.headers.get("anthropic-version")
    elif adapter != "gemini":
        assert sent.path == (CHAT if adapter == "openai_chat" else RESPONSES)


@pytest.mark.parametrize("stream", [True, False])
async def test_adapter_tool_calls_with_arguments(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str, stream: bool
) -> None:
    model = make_model(adapter, keyed_server, client, stream=stream)
    keyed_server.script(
        FakeServer.reply(
            tool_calls=[("weather", TOOL_ARGS, "call_w"), ("clock", {}, "call_c")],
            usage=Usage(input_tokens=40, output_tokens=20),
        )
    )
    spec = ToolSpec("weather", "Weather for a city.", {"type": "object", "properties": {}})
    response = await model.request(ModelRequest(messages=[Message.user("hi")], tools=[spec]))
    calls = response.message.tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_w", "weather", TOOL_ARGS),
        ("call_c", "clock", {}),
    ]
    assert response.stop_reason == "tool_use"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40, 20)
    assert streamed(adapter, keyed_server.requests[0]) is stream


async def test_adapter_non_streamed_text(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str
) -> None:
    model = make_model(adapter, keyed_server, client, stream=False)
    keyed_server.script(
        FakeServer.reply("Plain answer.", usage=Usage(input_tokens=3, output_tokens=2))
    )
    response = await model.request(hello())
    assert response.message.text == "Plain answer." and response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 2)


@pytest.mark.parametrize("stream", [True, False])
async def test_adapter_usage_with_cache_comes_back_unchanged(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str, stream: bool
) -> None:
    model = make_model(adapter, keyed_server, client, stream=stream)
    # OpenAI and Gemini report no cache writes; Anthropic no reasoning tokens apart.
    written, reasoning = (6, 0) if adapter == "anthropic" else (0, 3)
    usage = Usage(
        50, 9, cache_read_tokens=20, cache_write_tokens=written, reasoning_tokens=reasoning
    )
    keyed_server.script(FakeServer.reply("cached", usage=usage))
    got = (await model.request(hello())).usage
    assert (got.input_tokens, got.output_tokens) == (50, 9)
    assert (got.cache_read_tokens, got.cache_write_tokens) == (20, written)
    assert got.reasoning_tokens == reasoning


@pytest.mark.parametrize("stream", [True, False])
async def test_adapter_rate_limit(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str, stream: bool
) -> None:
    model = make_model(adapter, keyed_server, client, stream=stream)
    keyed_server.script(FakeServer.rate_limit(retry_after=7))
    with pytest.raises(RateLimitError) as caught:
        await model.request(hello())
    assert caught.value.retry_after == 7 and caught.value.retryable and caught.value.status == 429
    policy = RetryPolicy()
    assert policy.should_retry(caught.value, 0)
    assert policy.delay(1, caught.value) == 7  # the server's hint beats the backoff


@pytest.mark.parametrize("stream", [True, False])
async def test_adapter_server_error_is_retryable(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str, stream: bool
) -> None:
    model = make_model(adapter, keyed_server, client, stream=stream)
    keyed_server.script(FakeServer.error(500))
    with pytest.raises(ProviderError) as caught:
        await model.request(hello())
    assert caught.value.status == 500 and caught.value.retryable


@pytest.mark.parametrize("stream", [True, False])
async def test_adapter_bad_key_is_not_retryable(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str, stream: bool
) -> None:
    model = make_model(adapter, keyed_server, client, stream=stream, api_key="wrong")
    with pytest.raises(AuthenticationError) as caught:
        await model.request(hello())
    assert caught.value.status == 401 and not caught.value.retryable
    assert not RetryPolicy().should_retry(caught.value, 0)


@pytest.mark.parametrize("fault", ["drop", "truncate"])
async def test_adapter_cut_stream_is_a_transport_error(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str, fault: str
) -> None:
    model = make_model(adapter, keyed_server, client)
    make_fault = FakeServer.drop if fault == "drop" else FakeServer.truncate
    keyed_server.script(make_fault(4, FakeServer.reply(["a", "b", "c", "d", "e", "f"])))
    seen = []
    with pytest.raises(TransportError) as caught:
        async for event in model.stream(hello()):
            seen.append(event)
    assert caught.value.retryable
    assert not any(isinstance(e, ResponseCompleted) for e in seen)


async def test_adapter_connection_dropped_before_answer(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str
) -> None:
    model = make_model(adapter, keyed_server, client, stream=False)
    keyed_server.script(FakeServer.drop())
    with pytest.raises(TransportError):
        await model.request(hello())


@pytest.mark.parametrize("stream", [True, False])
async def test_adapter_malformed_json_is_retryable(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str, stream: bool
) -> None:
    model = make_model(adapter, keyed_server, client, stream=stream)
    keyed_server.script(FakeServer.malformed(after_events=3))
    with pytest.raises(ProviderError) as caught:
        await model.request(hello())
    assert caught.value.retryable


async def test_anthropic_overloaded(keyed_server: FakeServer, client: httpx2.AsyncClient) -> None:
    model = make_model("anthropic", keyed_server, client)
    keyed_server.script(FakeServer.overloaded(), FakeServer.stream_error(after_events=3))
    for _ in range(2):  # as a 529 status, then as an error event inside a 200 stream
        with pytest.raises(ProviderOverloaded) as caught:
            await model.request(hello())
        assert caught.value.retryable


async def test_adapter_error_event_in_stream(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str
) -> None:
    model = make_model(adapter, keyed_server, client)
    keyed_server.script(
        FakeServer.stream_error(3, error_type="server_error", message="The server had an error.")
    )
    with pytest.raises(ProviderError) as caught:
        await model.request(hello())
    assert "The server had an error." in str(caught.value)


async def test_adapter_with_retry_policy_recovers(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str
) -> None:
    model = make_model(adapter, keyed_server, client)
    keyed_server.script(
        FakeServer.rate_limit(retry_after=0),
        FakeServer.error(503),
        FakeServer.drop(after_events=2),
        FakeServer.malformed(after_events=1),
        FakeServer.reply("finally"),
    )
    policy = RetryPolicy(max_retries=4, initial_delay=0.001, max_delay=0.01)
    retries = 0
    while True:
        try:
            response = await model.request(hello())
            break
        except ProviderError as error:
            assert policy.should_retry(error, retries), error
            retries += 1
            await asyncio.sleep(policy.delay(retries, error))
    assert response.message.text == "finally" and retries == 4
    assert len(keyed_server.requests) == 5


async def test_adapter_read_timeout_is_a_transport_error(
    keyed_server: FakeServer, adapter: str
) -> None:
    async with httpx2.AsyncClient(timeout=0.3) as client:
        model = make_model(adapter, keyed_server, client)
        keyed_server.script(FakeServer.hang(), FakeServer.reply(["a", "b"], chunk_delay=0.01))
        with pytest.raises(TransportError) as caught:
            await model.request(hello())
        assert caught.value.retryable
        assert (await model.request(hello())).message.text == "ab"  # slow, but within the timeout


# Adapters that stop reading at the final event leave the end of the chunked
# body unread, so httpx2 closes the connection instead of pooling it.
KNOWN_TO_CLOSE_STREAMS: dict[str, str] = {}


async def test_adapter_streams_reuse_the_connection(
    keyed_server: FakeServer,
    client: httpx2.AsyncClient,
    adapter: str,
    request: pytest.FixtureRequest,
) -> None:
    if adapter in KNOWN_TO_CLOSE_STREAMS:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_TO_CLOSE_STREAMS[adapter]))
    model = make_model(adapter, keyed_server, client)
    for _ in range(3):
        await model.request(hello())
    assert keyed_server.connections == 1


async def test_adapter_non_streamed_requests_reuse_the_connection(
    keyed_server: FakeServer, client: httpx2.AsyncClient, adapter: str
) -> None:
    model = make_model(adapter, keyed_server, client, stream=False)
    for _ in range(3):
        await model.request(hello())
    assert keyed_server.connections == 1
