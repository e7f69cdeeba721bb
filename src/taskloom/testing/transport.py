"""A fake HTTP transport for testing model adapters without a network.

`RecordingTransport` goes in the httpx2 client an adapter takes as
`http_client=`: it records each request the adapter sends and answers from a
queue of canned responses (JSON, server-sent events, any status and headers),
so a test checks what went on the wire and feeds any reply::

    from taskloom.models import ModelRequest, OpenAIChatModel
    from taskloom.messages import Message
    from taskloom.testing.transport import RecordingTransport

    completion = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    transport = RecordingTransport(RecordingTransport.json(completion))
    model = OpenAIChatModel(
        "gpt-4.1-mini", api_key="k", http_client=transport.client(), stream=False
    )
    response = await model.request(ModelRequest(messages=[Message.user("hello")]))
    assert response.text == "hi"
    assert transport.requests[0].body["model"] == "gpt-4.1-mini"

For timeouts, dropped connections and retry timing, `taskloom.testing.fake_server.FakeServer` serves on loopback.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import httpx2

from ..errors import ModelScriptExhausted

__all__ = ["Answer", "CannedResponse", "RecordingTransport", "SentRequest"]


@dataclass(frozen=True, slots=True)
class SentRequest:
    """A request the client sent: `headers` with lower-cased names, `body` the
    parsed JSON (None when the body is empty or not JSON), `content` its bytes."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: Any
    content: bytes


@dataclass(frozen=True, slots=True)
class CannedResponse:
    """A response to answer with, as many times as wanted (each gets a fresh `httpx2.Response`)."""

    status: int = 200
    content: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    def to_response(self, request: httpx2.Request) -> httpx2.Response:
        """The response to `request`."""
        return httpx2.Response(
            self.status, content=self.content, headers=dict(self.headers), request=request
        )


Answer: TypeAlias = CannedResponse | httpx2.Response | Callable[[httpx2.Request], httpx2.Response]
"""What answers one request: a `CannedResponse`; an `httpx2.Response` served
as it is (its body can be read once, so it answers one request); or a
function of the request (it may raise, e.g. `httpx2.ConnectError`)."""


class RecordingTransport(httpx2.AsyncBaseTransport, httpx2.BaseTransport):
    """An httpx2 transport (async and sync) that records every request and answers
    from a script: each request takes the next answer (given here or queued
    with `add`), then `default`; with neither, `ModelScriptExhausted`."""

    def __init__(self, *answers: Answer, default: Answer | None = None) -> None:
        self.requests: list[SentRequest] = []
        self.default = default
        self._answers: deque[Answer] = deque(answers)

    @staticmethod
    def json(
        body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> CannedResponse:
        """A JSON response (`content-type: application/json`)."""
        return CannedResponse(
            status,
            json.dumps(body).encode(),
            {"content-type": "application/json", **(headers or {})},
        )

    @staticmethod
    def sse(
        text: str | bytes, *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> CannedResponse:
        """A server-sent event stream with the body given as is (`text/event-stream`)."""
        content = text.encode() if isinstance(text, str) else text
        return CannedResponse(
            status, content, {"content-type": "text/event-stream", **(headers or {})}
        )

    def add(self, *answers: Answer) -> None:
        """Queue more answers after the ones not used yet."""
        self._answers.extend(answers)

    @property
    def pending(self) -> int:
        """How many queued answers no request has taken yet (`default` not counted)."""
        return len(self._answers)

    def body(self, index: int = -1) -> Any:
        """The parsed JSON body of the `index`-th request (the last by default)."""
        return self.requests[index].body

    def client(self, **options: Any) -> httpx2.AsyncClient:
        """An async client sending through this transport (`options` go to the client)."""
        return httpx2.AsyncClient(transport=self, **options)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        return self._answer(request)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        return self._answer(request)

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        content = request.content
        try:
            body = json.loads(content) if content else None
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.requests.append(SentRequest(request.method, str(request.url), headers, body, content))
        if self._answers:
            answer = self._answers.popleft()
        elif self.default is not None:
            answer = self.default
        else:
            raise ModelScriptExhausted(
                f"RecordingTransport: no answer left for request #{len(self.requests)} "
                f"({request.method} {request.url}); queue more with add() or give a default"
            )
        if isinstance(answer, CannedResponse):
            return answer.to_response(request)
        if isinstance(answer, httpx2.Response):
            return answer
        return answer(request)
