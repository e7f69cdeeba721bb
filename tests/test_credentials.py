"""Credentials the host configured never reach a log, a recording or a
printout: not when a server or a command echoes them, not inside a URL."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cli_process import taskloom_cli
from credentials_support import everything_stored, sessions_show
from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, Runtime
from taskloom.a2a import RemoteAgent
from taskloom.background import background_tools
from taskloom.events import TextDelta
from taskloom.mcp import MCPServer
from taskloom.models import FunctionModel, ModelRequest, OpenAIChatModel, ScriptedModel, reply
from taskloom.testing.fake_server import FakeServer
from taskloom.testing.recordings import recorded_model

KEY = "sk-reflected-0a9b8c7d6e5f"
HEADER_TOKEN = "hdr-tok-41c3e5a7b9"
PASSWORD = "pw-url-6d4b2f0e8c"


# ---------------------------------------------------------------- the helper


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://me:pw@llm.example/v1", "https://llm.example/v1"),
        ("http://h:1/mcp?token=abc&page=2", "http://h:1/mcp?token=[redacted]&page=2"),
        (
            "https://u@h/p?api_key=k1&access_token=k2&X-Amz-Signature=k3&sig=k4#frag",
            "https://h/p?api_key=[redacted]&access_token=[redacted]"
            "&X-Amz-Signature=[redacted]&sig=[redacted]#frag",
        ),
        ("https://h/p?monkey=1&keyboard=2&q=token", "https://h/p?monkey=1&keyboard=2&q=token"),
        ("https://h/user@example/p", "https://h/user@example/p"),
        ("https://h/p?pwd=secret1&sessionid=s2", "https://h/p?pwd=[redacted]&sessionid=[redacted]"),
    ],
)
def test_a_url_is_shown_without_user_info_and_credential_query_values(url: str, shown: str) -> None:
    assert RemoteAgent("r", url, description="d").public_url == shown
    server = MCPServer.http(url, name="m")
    assert server.key == f"m|{shown}" and shown in repr(server)


async def test_a_key_split_across_streamed_deltas_is_shown_redacted_at_every_cut() -> None:
    """A server that streams back the key it was sent, cut into three deltas
    at every place: the deltas a run emits show, put together, exactly the
    answer it stores (the key redacted), and none of them holds the key."""
    text = f"a {KEY}, {KEY[:-1]} and {KEY} end"
    cuts = [(first, min(first + 5, len(text))) for first in range(len(text) + 1)]
    async with FakeServer() as server:
        server.script(*(FakeServer.reply([text[:a], text[a:b], text[b:]]) for a, b in cuts))
        model = OpenAIChatModel("m", base_url=server.base_url, api_key=KEY)
        deltas: list[str] = []

        def heard(event: object) -> None:
            if isinstance(event, TextDelta):
                deltas.append(event.text)

        async with Runtime() as runtime:
            session = await runtime.create_session(Agent("a", model))
            for cut in cuts:
                deltas.clear()
                result = await session.run("hi", emit=heard)
                assert result.text == f"a [redacted], {KEY[:-1]} and [redacted] end", cut
                assert "".join(deltas) == result.text, (cut, deltas)
                assert all(KEY not in delta for delta in deltas)


def test_taskloom_run_prints_a_streamed_echo_of_the_key_redacted(tmp_path: Path) -> None:
    """A server that streams back the password of the model's URL, cut in two
    deltas: `taskloom run` prints it redacted, as the session stores it."""
    with FakeServer.in_thread() as server:
        server.script(FakeServer.reply(["you sent ", PASSWORD[:5], PASSWORD[5:], " ok"]))
        base = server.base_url.replace("http://", f"http://me:{PASSWORD}@")
        done = taskloom_cli("run", "hi", "--model", f"openai:m@{base}", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "you sent [redacted] ok" in done.stdout, done.stdout
    assert PASSWORD not in done.stdout + done.stderr


# ---------------------------------------------------------------- recordings


@asynccontextmanager
async def reflecting_server() -> AsyncIterator[str]:
    """An OpenAI-compatible server on loopback whose 200 answer quotes every
    request header it was sent; yields its base URL."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")[1:]
        headers = dict(line.split(": ", 1) for line in lines if ": " in line)
        length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), 0))
        await reader.readexactly(length)
        quoted = "; ".join(f"{k}: {v}" for k, v in headers.items())
        body = json.dumps(
            {
                "id": "c1",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"you sent {quoted}"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_recording_of_a_server_that_reflects_headers_holds_no_secret(
    tmp_path: Path,
) -> None:
    path = tmp_path / "reflected.json"
    async with reflecting_server() as base_url:

        def real() -> OpenAIChatModel:
            return OpenAIChatModel(
                "m",
                base_url=base_url,
                api_key=KEY,
                stream=False,
                headers={"X-Custom-Token": HEADER_TOKEN},
            )

        with recorded_model(path, real, record=True) as model:
            result = await Agent("a", model).run("hello")
    # The server did reflect them: they were sent.
    assert "Authorization: [redacted]" in result.text
    recording = path.read_text()
    for secret in (KEY, HEADER_TOKEN):
        assert secret not in recording
    assert "you sent" in recording and "[redacted]" in recording
    # The recording still replays.
    with recorded_model(path, real, record=False) as replay:
        again = await Agent("a", replay).run("hello")
    assert again.text == result.text


# ---------------------------------------------------------------- model specs


async def test_a_spec_with_credentials_is_used_but_stored_without_them(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    async with FakeServer() as server:
        base_url = server.base_url
        with_password = base_url.replace("http://", f"http://me:{PASSWORD}@")
        spec = f"openai:m@{with_password}"
        async with Runtime(store=open_durable(url, schema)) as runtime:
            session = await runtime.create_session(Agent("a", ScriptedModel([])))
            await session.set_model(spec)
            result = await session.run("hi")
            stored = await everything_stored(runtime.store)
        sent = server.requests[-1]
    assert result.text
    # This process kept the credentials: the request carried the user-info.
    basic = base64.b64encode(f"me:{PASSWORD}".encode()).decode()
    assert sent.headers.get("authorization") == f"Basic {basic}"
    printed = sessions_show(url, schema, session.id)
    for text in (stored, printed):
        assert PASSWORD not in text and basic not in text
    assert f"openai:m@{base_url}" in stored


# ---------------------------------------------------------------- background commands


def _echoing(command: str) -> FunctionModel:
    ids: list[str] = []

    def answer(request: ModelRequest) -> Any:
        calls = len([m for m in request.messages if m.role == "assistant"])
        if calls == 0:
            return reply(tool_calls=[("background_run", {"command": command})])
        if calls == 1:
            # The command's notice may already follow its start's result (a
            # fast command on a slow machine): look through every result.
            told = " ".join(r.content for m in request.messages for r in m.results)
            found = re.search(r"shell-[0-9a-f]{12}", told)
            assert found is not None
            ids.append(found.group())
            return reply(tool_calls=[("background_wait", {"ids": ids, "timeout": 20})])
        return reply("done")

    return FunctionModel(answer)


@pytest.mark.slow
async def test_a_command_printing_a_secret_of_its_environment_gets_it_redacted(
    store_url: tuple[str, str],
) -> None:
    url, schema = store_url
    tools = background_tools(shell=True, env={"SERVICE_TOKEN": HEADER_TOKEN, "MODE": "plain"})
    model = _echoing("echo token=$SERVICE_TOKEN mode=$MODE")
    async with Runtime(store=open_durable(url, schema)) as runtime:
        session = await runtime.create_session(Agent("a", model, tools=tools))
        await session.run("go")
        stored = await everything_stored(runtime.store)
    told = "\n".join(r.content for m in model.requests[-1].messages for r in m.results)
    assert "token=[redacted] mode=plain" in told
    printed = sessions_show(url, schema, session.id)
    for text in (stored, printed, told):
        assert HEADER_TOKEN not in text
