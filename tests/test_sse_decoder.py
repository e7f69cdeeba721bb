"""Server-sent events, as every streaming adapter reads them from a body.

Read through the OpenAI chat adapter from bodies written out byte for byte:
events end at blank lines and their data lines join, line ends, comments
and a missing space are tolerated, and a body that ends without its last
blank line still ends its event, unless that event has no data.
"""

from __future__ import annotations

import json

import pytest

from taskloom.errors import TransportError
from taskloom.messages import Message
from taskloom.models import ModelRequest, ModelResponse, OpenAIChatModel
from taskloom.testing.transport import RecordingTransport


def chunk(text: str, finish: str | None = None) -> str:
    """A `chat.completion.chunk` carrying `text`, as JSON."""
    delta = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return json.dumps({"id": "chatcmpl-s", "model": "m", "choices": [delta]})


async def read(body: str) -> ModelResponse:
    """The response a streamed request gets from a server answering `body`."""
    server = RecordingTransport(default=RecordingTransport.sse(body))
    model = OpenAIChatModel(
        "m", api_key="k", base_url="http://127.0.0.1:9/v1", http_client=server.client(), stream=True
    )
    return await model.request(ModelRequest(messages=[Message.user("hi")]))


async def test_events_end_at_blank_lines_and_their_data_lines_join() -> None:
    first, second = chunk("Hel").split(", ", 1)  # JSON allows the newline between them
    body = (
        f"event: delta\ndata: {first},\ndata: {second}\n\ndata: {chunk('lo')}\n\ndata: [DONE]\n\n"
    )
    assert (await read(body)).text == "Hello"


async def test_crlf_line_ends_comments_and_a_missing_space_are_tolerated() -> None:
    body = f": keep-alive\r\nevent:delta\r\ndata:{chunk('x')}\r\n\r\n: ping\r\ndata:[DONE]\r\n\r\n"
    assert (await read(body)).text == "x"


async def test_an_event_cut_by_the_end_of_the_body_is_kept_if_it_has_data() -> None:
    assert (await read(f"data: {chunk('last')}\n\ndata: [DONE]")).text == "last"
    # A name without data is no event: the adapter would not read it as one.
    assert (await read(f"data: {chunk('done', 'stop')}\n\nevent: lonely")).text == "done"
    # Without its [DONE] (nor a finish reason) the answer is cut, and says so.
    with pytest.raises(TransportError, match="ended before"):
        await read(f"data: {chunk('cut')}\n\n")
