"""A provider answer nested too deeply for Python's JSON parser is a provider
error, not a RecursionError escaping the model.

Its error body, its success body and its stream events each get the typed
answer the adapters give any malformed JSON.
"""

from __future__ import annotations

import httpx2
import pytest

from taskloom.errors import ProviderError, RateLimitError
from taskloom.messages import Message
from taskloom.models import ModelRequest, resolve_model

DEEP = ("[" * 100_000 + "]" * 100_000).encode()


def _model(answer: httpx2.Response, *, stream: bool) -> object:
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda request: answer))
    return resolve_model(
        "openai:gpt-4o@http://127.0.0.1:9/v1", http_client=client, stream=stream, api_key="k"
    )


async def _ask(model: object) -> object:
    request = ModelRequest(messages=(Message.user("hi"),))
    return await model.request(request)  # type: ignore[attr-defined]


async def test_an_error_body_nested_too_deeply_keeps_its_status() -> None:
    model = _model(httpx2.Response(429, content=DEEP), stream=False)
    with pytest.raises(RateLimitError):
        await _ask(model)


async def test_a_success_body_nested_too_deeply_is_a_retryable_provider_error() -> None:
    model = _model(httpx2.Response(200, content=DEEP), stream=False)
    with pytest.raises(ProviderError, match="malformed JSON") as caught:
        await _ask(model)
    assert caught.value.retryable


async def test_a_stream_event_nested_too_deeply_is_a_retryable_provider_error() -> None:
    body = b"data: " + DEEP + b"\n\n"
    answer = httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
    model = _model(answer, stream=True)
    with pytest.raises(ProviderError, match="malformed JSON") as caught:
        await _ask(model)
    assert caught.value.retryable
