"""`SSEDecoder`: server-sent events from lines, as every streaming adapter reads them."""

from __future__ import annotations

from taskloom.models._http import SSE, SSEDecoder


def decode(text: str) -> list[SSE]:
    decoder = SSEDecoder()
    events = [e for line in text.split("\n") if (e := decoder.line(line)) is not None]
    last = decoder.end(at_eof=True)
    return [*events, *([last] if last is not None else [])]


def test_events_end_at_blank_lines_with_their_names_and_joined_data() -> None:
    text = 'event: delta\ndata: {"a":\ndata: 1}\n\ndata: [DONE]\n\n'
    assert decode(text) == [SSE("delta", '{"a":\n1}'), SSE("message", "[DONE]")]


def test_crlf_line_ends_comments_and_a_missing_space_are_tolerated() -> None:
    text = ": keep-alive\r\nevent:ping\r\ndata:x\r\n\r\n"
    assert decode(text) == [SSE("ping", "x")]


def test_an_event_cut_by_the_end_of_the_body_is_kept_if_it_has_data() -> None:
    assert decode("data: last") == [SSE("message", "last")]
    assert decode("event: lonely") == []
    # A named event without data, completed by a blank line, is an event.
    assert decode("event: ping\n\n") == [SSE("ping", "")]
