"""RecordingTransport: the shared fake HTTP server of the model adapter tests."""

from __future__ import annotations

import httpx2
import pytest

from taskloom.errors import ModelScriptExhausted, TransportError
from taskloom.messages import Message
from taskloom.models import AnthropicModel, ModelRequest, OpenAIChatModel
from taskloom.testing.transport import CannedResponse, RecordingTransport

COMPLETION = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}


def ask(text: str = "hello") -> ModelRequest:
    return ModelRequest(messages=[Message.user(text)])


async def test_the_documented_example_runs() -> None:
    transport = RecordingTransport(RecordingTransport.json(COMPLETION))
    model = OpenAIChatModel(
        "gpt-4.1-mini", api_key="k", http_client=transport.client(), stream=False
    )
    response = await model.request(ask())
    assert response.text == "hi"
    assert transport.requests[0].body["model"] == "gpt-4.1-mini"


async def test_each_request_is_recorded_and_takes_the_next_answer_in_order() -> None:
    transport = RecordingTransport(
        RecordingTransport.json({"n": 1}, status=201, headers={"X-Reply": "one"}),
        RecordingTransport.sse("data: two\n\n"),
    )
    async with transport.client() as client:
        first = await client.post("http://h/a?q=1", json={"a": 1}, headers={"X-Team": "blue"})
        second = await client.put("http://h/b", content=b"not json")
    assert (first.status_code, first.json(), first.headers["x-reply"]) == (201, {"n": 1}, "one")
    assert first.headers["content-type"] == "application/json"
    assert (second.text, second.headers["content-type"]) == ("data: two\n\n", "text/event-stream")
    one, two = transport.requests
    assert (one.method, one.url, one.body, one.headers["x-team"]) == (
        "POST",
        "http://h/a?q=1",
        {"a": 1},
        "blue",
    )
    assert (two.method, two.body, two.content) == ("PUT", None, b"not json")
    assert transport.body(0) == {"a": 1} and transport.pending == 0


async def test_past_the_script_the_default_answers_every_request_afresh() -> None:
    transport = RecordingTransport(
        RecordingTransport.json({"first": True}), default=RecordingTransport.sse("data: x\n\n")
    )
    async with transport.client() as client:
        texts = [(await client.get("http://h/")).text for _ in range(3)]
    assert texts == ['{"first": true}', "data: x\n\n", "data: x\n\n"]


async def test_a_request_past_the_script_fails_loudly() -> None:
    transport = RecordingTransport(RecordingTransport.json(COMPLETION))
    model = OpenAIChatModel(
        "gpt-4.1-mini", api_key="k", http_client=transport.client(), stream=False
    )
    await model.request(ask())
    with pytest.raises(ModelScriptExhausted, match="no answer left for request #2"):
        await model.request(ask())
    assert len(transport.requests) == 2  # the unanswered request is recorded too
    transport.add(RecordingTransport.json(COMPLETION))
    assert (await model.request(ask())).text == "hi"


async def test_a_function_answers_from_the_request_and_may_fail_it() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    def echo(request: httpx2.Request) -> httpx2.Response:
        return CannedResponse(content=request.url.path.encode()).to_response(request)

    transport = RecordingTransport(echo, refuse)
    async with transport.client() as client:
        assert (await client.get("http://h/path")).text == "/path"
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", http_client=transport.client())
    with pytest.raises(TransportError):
        await model.request(ask())


def test_a_sync_client_works_too() -> None:
    transport = RecordingTransport(default=RecordingTransport.json({"ok": True}))
    with httpx2.Client(transport=transport) as client:
        assert client.post("http://h/", json={"q": 1}).json() == {"ok": True}
    assert transport.requests[0].body == {"q": 1}
