"""A run's `ModelRequest.memo`: adapters encode each message once, and the
bodies are exactly what they would be without it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from taskloom.messages import Message, ToolCall, ToolResult
from taskloom.models import ModelRequest, OpenAIChatModel
from taskloom.results import ToolSpec

SPEC = ToolSpec(
    "add",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
)


def conversation(turns: int, *, empty_ids: bool = False) -> list[Message]:
    messages = [Message.user("start")]
    for i in range(turns):
        call_id = "" if empty_ids and i % 2 else f"call_{i}"
        messages.append(
            Message.assistant(tool_calls=[ToolCall(id=call_id, name="add", arguments={"a": i})])
        )
        messages.append(Message.tool_results([ToolResult(call_id, str(i), False, "add")]))
    messages.append(Message.assistant("done"))
    return messages


def model(base_url: str = "https://api.openai.com/v1") -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4.1-mini", api_key="k", base_url=base_url)


def bodies(m: OpenAIChatModel, messages: list[Message], memo: dict[Any, Any] | None) -> list[Any]:
    """The body of each request of a growing conversation, as a run sends them."""
    tools = (SPEC,)
    return [
        m.build_body(
            ModelRequest(messages=tuple(messages[:n]), system="Be brief.", tools=tools, memo=memo)
        )
        for n in range(1, len(messages) + 1)
    ]


def test_bodies_with_a_memo_are_the_bodies_without_one() -> None:
    for empty_ids in (False, True):
        messages = conversation(6, empty_ids=empty_ids)
        memo: dict[Any, Any] = {}
        assert bodies(model(), messages, memo) == bodies(model(), messages, None)
        # A message is kept unless a call or result id in it is empty: the
        # wire id of those depends on where the message stands.
        for message in messages:
            placeless = all(
                b.id if isinstance(b, ToolCall) else b.tool_call_id
                for b in message.blocks
                if isinstance(b, ToolCall | ToolResult)
            )
            assert (("openai-chat", id(message)) in memo) is placeless


def test_a_kept_encoding_is_reused_not_rebuilt() -> None:
    messages = conversation(2)
    memo: dict[Any, Any] = {}
    m = model()
    tools = (SPEC,)  # a run passes the same tuple while its tools are unchanged
    first = m.build_body(ModelRequest(messages=tuple(messages), tools=tools, memo=memo))
    second = m.build_body(ModelRequest(messages=tuple(messages), tools=tools, memo=memo))
    assert second == first
    assert all(a is b for a, b in zip(first["messages"], second["messages"], strict=True))
    assert second["tools"] is first["tools"]
    # Another tuple of specs is encoded anew.
    other = replace(SPEC, description="Adds.")
    third = m.build_body(ModelRequest(messages=tuple(messages), tools=(other,), memo=memo))
    assert third["tools"][0]["function"]["description"] == "Adds."


def test_servers_that_differ_in_tool_turn_content_do_not_share_an_encoding() -> None:
    # OpenAI's own host sends a tool-call-only turn without content; other
    # hosts send "content": "" (quirks): one memo, both right.
    messages = conversation(1)
    memo: dict[Any, Any] = {}
    home, compatible = model(), model("http://127.0.0.1:9/v1")
    for m in (home, compatible, home):
        assert m.build_body(ModelRequest(messages=tuple(messages), memo=memo)) == m.build_body(
            ModelRequest(messages=tuple(messages))
        )
    turn = compatible.build_body(ModelRequest(messages=tuple(messages), memo=memo))["messages"][1]
    assert turn["content"] == ""
    assert (
        "content"
        not in home.build_body(ModelRequest(messages=tuple(messages), memo=memo))["messages"][1]
    )


def test_responses_bodies_with_a_memo_are_the_bodies_without_one() -> None:
    from taskloom.models import OpenAIResponsesModel

    m = OpenAIResponsesModel("gpt-4.1-mini", api_key="k")
    messages = conversation(4)
    memo: dict[Any, Any] = {}
    with_memo = [
        m.build_body(ModelRequest(messages=tuple(messages[:n]), memo=memo))
        for n in range(1, len(messages) + 1)
    ]
    without = [
        m.build_body(ModelRequest(messages=tuple(messages[:n])))
        for n in range(1, len(messages) + 1)
    ]
    assert with_memo == without
    assert {
        id(message)
        for kind, message_id in memo
        if kind == "openai-responses"
        for message in messages
        if id(message) == message_id
    } == {id(m) for m in messages}


def test_a_run_that_changes_wire_format_shares_its_memo_safely() -> None:
    # A strategy may move a run from Chat Completions to Responses: each
    # format keeps its own encodings in the run's one memo.
    from taskloom.models import OpenAIResponsesModel

    chat, responses = model(), OpenAIResponsesModel("gpt-4.1-mini", api_key="k")
    messages = tuple(conversation(2))
    memo: dict[Any, Any] = {}
    for m in (chat, responses, chat, responses):
        assert m.build_body(ModelRequest(messages=messages, memo=memo)) == m.build_body(
            ModelRequest(messages=messages)
        )


def test_gemini_bodies_with_a_memo_are_the_bodies_without_one() -> None:
    from taskloom.models import GeminiModel

    own = Message("assistant", (ToolCall("c9", "add", {"a": 9}),), "google", "gemini-2.5-flash")
    for empty_names in (False, True):
        messages = conversation(4)
        if empty_names:
            # A result without its tool's name takes it from its call, found by id.
            messages[2] = Message.tool_results([ToolResult("call_0", "0")])
        messages += [own, Message.tool_results([ToolResult("c9", "9", False, "add")])]
        memo: dict[Any, Any] = {}
        for name in ("gemini-2.5-flash", "gemini-3-pro-preview"):
            m = GeminiModel(name, api_key="k-gemini-test")
            with_memo = gemini_bodies(m, messages, memo)
            assert with_memo == gemini_bodies(m, messages, None)
        assert (("gemini", "google", "gemini-2.5-flash", id(messages[2])) in memo) is not (
            empty_names
        )
        assert with_memo[-1]["contents"][2]["parts"][0]["functionResponse"]["name"] == "add"


def gemini_bodies(m: Any, messages: list[Message], memo: dict[Any, Any] | None) -> list[Any]:
    return [
        m.build_body(ModelRequest(messages=tuple(messages[:n]), tools=(SPEC,), memo=memo))
        for n in range(1, len(messages) + 1)
    ]


def sent(
    options: dict[str, Any],
    requests: list[ModelRequest],
    client_headers: dict[str, str] | None = None,
) -> list[tuple[list[Any], bytes]]:
    """Each request as it reached the server (headers in order, body bytes),
    sent by a Chat Completions model made with `options` (its client's own
    headers `client_headers`), then each body as httpx2's `json=` sends it."""
    import asyncio
    import json

    import httpx2

    seen: list[tuple[list[Any], bytes]] = []
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append((list(request.headers.raw), request.content))
        if json.loads(request.content).get("stream"):
            chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
            body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
            return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json=answer)

    async def main() -> None:
        transport = httpx2.MockTransport(handler)
        async with httpx2.AsyncClient(transport=transport, headers=client_headers) as client:
            m = OpenAIChatModel("gpt-4.1-mini", http_client=client, **options)
            for request in requests:
                await m.request(request)
            if client_headers is not None:
                headers = {"Authorization": f"Bearer {options['api_key']}"}
                for request in requests:
                    await client.post(m.url, json=m.build_body(request), headers=headers)

    asyncio.run(main())
    return seen


def test_a_chat_body_goes_out_byte_for_byte_as_httpx2_encodes_it() -> None:
    # The run's bodies are encoded by the adapter, the text of each message
    # sent before kept: the server gets the very bytes and headers httpx2's
    # own `json=` encoding sends, whatever the settings add.
    import json

    from taskloom.models import ModelSettings

    messages = conversation(4, empty_ids=True)
    messages.insert(1, Message.user('quote " backslash \\ tab \t nul \x00 é ✓ \U0001f600'))
    settings = ModelSettings(
        temperature=0.5, max_tokens=99, stop=("x",), extra={"seed": 7, "user": "ü", "n": None}
    )
    for stream in (False, True):
        for extra in (settings, ModelSettings()):
            memo: dict[Any, Any] = {}
            options = {"api_key": "k", "base_url": "http://h/v1", "stream": stream}
            m = OpenAIChatModel("gpt-4.1-mini", **options)
            requests = [
                ModelRequest(
                    messages=tuple(messages[:n]),
                    system="Be brief.",
                    tools=(SPEC,),
                    settings=extra,
                    memo=memo,
                )
                for n in range(1, len(messages) + 1)
            ]
            got = sent(options, requests)
            for request, (headers, content) in zip(requests, got, strict=True):
                body = m.build_body(request)
                expected = json.dumps(
                    body, ensure_ascii=False, separators=(",", ":"), allow_nan=False
                ).encode()
                assert content == expected
                names = [name for name, _ in headers]
                assert names[-3:] == [b"Authorization", b"Content-Length", b"Content-Type"]
                assert dict(headers)[b"Content-Length"] == str(len(expected)).encode()
            # The messages' text was kept, each encoded once.
            kept = memo[("json", "messages")]
            assert len(kept[0]) == len(messages) + 1  # the system prompt's and every message's


def test_a_caller_set_content_type_keeps_httpx2_encoding_the_body() -> None:
    import json

    options = {
        "api_key": "k",
        "base_url": "http://h/v1",
        "stream": False,
        "headers": {"content-type": "application/json; charset=utf-8"},
    }
    m = OpenAIChatModel("gpt-4.1-mini", **options)
    messages = tuple(conversation(1))
    memo: dict[Any, Any] = {}
    ((headers, content),) = sent(options, [ModelRequest(messages=messages, memo=memo)])
    assert json.loads(content) == m.build_body(ModelRequest(messages=messages))
    assert [v for k, v in headers if k.lower() == b"content-type"] == [
        b"application/json; charset=utf-8"
    ]
    assert ("json", "messages") not in memo


def test_a_content_type_the_callers_client_sets_keeps_httpx2_encoding_the_body() -> None:
    # A client's own headers go under the request's: httpx2 adds a JSON
    # body's type only where the client names none, so the same request goes
    # out whoever encodes the body.
    messages = tuple(conversation(1))
    for stream in (False, True):
        options = {"api_key": "k", "base_url": "http://h/v1", "stream": stream}
        memo: dict[Any, Any] = {}
        requests = [ModelRequest(messages=messages[:n], memo=memo) for n in (1, 2)]
        client_headers = {"Content-Type": "application/json; charset=utf-8"}
        got = sent(options, requests, client_headers)
        assert got[:2] == got[2:]
        for headers, _ in got:
            assert [v for k, v in headers if k.lower() == b"content-type"] == [
                b"application/json; charset=utf-8"
            ]


def test_a_body_that_is_not_json_fails_as_before_and_the_next_one_goes_out() -> None:
    import asyncio
    import json

    import httpx2
    import pytest

    from taskloom.models import ModelSettings

    options = {"api_key": "k", "base_url": "http://h/v1", "stream": False}
    failing = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda r: httpx2.Response(500)))
    m = OpenAIChatModel("gpt-4.1-mini", http_client=failing, **options)
    messages = tuple(conversation(1))
    memo: dict[Any, Any] = {}
    metadata: dict[str, Any] = {"list": [messages[0].text], "at": object()}
    settings = ModelSettings(extra={"metadata": metadata})
    with pytest.raises(TypeError, match="not JSON serializable"):
        asyncio.run(m.request(ModelRequest(messages=messages, settings=settings, memo=memo)))
    # Nothing of the failed encoding stays behind to fail the next body, the
    # same values in it (the encoder's record of open containers is not left
    # to call them circular).
    del metadata["at"]
    ((_, content),) = sent(options, [ModelRequest(messages=messages, settings=settings, memo=memo)])
    assert json.loads(content) == m.build_body(ModelRequest(messages=messages, settings=settings))


def test_bodies_encoded_at_once_in_two_threads_do_not_see_each_others_containers() -> None:
    # Two runs on two event loops (threads) may encode bodies at the same
    # time, with values their agent's settings share. Python code inside an
    # encoding (a dict subclass's `items`, a finalizer the collector runs)
    # lets the other thread in: its encoding must not take the first one's
    # open containers for a circular reference, as httpx2's `json=` never does.
    import asyncio
    import json
    import threading

    import httpx2

    from taskloom.models import ModelSettings

    inside, leave = threading.Event(), threading.Event()

    class Metadata(dict[str, Any]):
        calls = 0

        def items(self) -> Any:
            Metadata.calls += 1
            if Metadata.calls == 1:  # the first encoding waits inside this value
                inside.set()
                leave.wait(10)
            return super().items()

    settings = ModelSettings(extra={"metadata": Metadata(team="search")})
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]
    }
    seen: list[bytes] = []
    failed: list[BaseException] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.content)
        return httpx2.Response(200, json=answer)

    def run(first: bool) -> None:
        async def main() -> None:
            async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as client:
                options: dict[str, Any] = {"api_key": "k", "base_url": "http://h/v1"}
                m = OpenAIChatModel("gpt-4.1-mini", http_client=client, stream=False, **options)
                request = ModelRequest(messages=(Message.user("hi"),), settings=settings, memo={})
                await m.request(request)

        if not first:
            inside.wait(10)
        try:
            asyncio.run(main())
        except BaseException as exc:
            failed.append(exc)
        finally:
            if not first:
                leave.set()

    threads = [threading.Thread(target=run, args=(first,)) for first in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    assert [json.loads(body)["metadata"] for body in seen] == [{"team": "search"}] * 2
