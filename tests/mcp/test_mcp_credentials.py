"""An MCP server that echoes the credentials it was sent gets none of them
stored or printed: not the headers, not the URL's user-info or token."""

from __future__ import annotations

import asyncio
import base64
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from input_app import greeter
from mcp_support import HERE, results, start_http_fixture

from conftest import SEEN_GROUPS
from credentials_support import everything_stored, sessions_show
from pg import open_durable
from taskloom import Agent, Runtime
from taskloom.errors import ConfigurationError
from taskloom.events import WorkFinished
from taskloom.mcp import MCPServer
from taskloom.models import ScriptedModel, reply

pytestmark = pytest.mark.slow

BEARER = "htok-5c1d9e0a7b"
API_KEY = "xkey-81f0e2d4c6"
QUERY_TOKEN = "qtok-3a7e9b1f55"
PASSWORD = "pw-9d2c4e6a8b"


def _calling(server: MCPServer) -> Agent:
    turns = [reply(tool_calls=[("quote_credentials", {})]), reply("done")]
    return Agent("a", ScriptedModel(turns), tools=[server])


async def test_a_server_quoting_its_credentials_gets_none_stored_or_shown(
    tmp_path: Path, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    fixture = start_http_fixture(tmp_path / "marker.txt")
    SEEN_GROUPS.add(fixture.process.pid)
    with_headers = MCPServer.http(
        f"{fixture.url}?token={QUERY_TOKEN}",
        name="fixture",
        headers={"Authorization": f"Bearer {BEARER}", "X-API-Key": API_KEY},
    )
    with_userinfo = MCPServer.http(fixture.url.replace("://", f"://me:{PASSWORD}@"), name="fixture")
    basic = base64.b64encode(f"me:{PASSWORD}".encode()).decode()
    try:
        async with Runtime(store=open_durable(url, schema)) as runtime:
            first = await runtime.create_session(_calling(with_headers))
            await first.run("go")
            second = await runtime.create_session(_calling(with_userinfo))
            await second.run("go")
            answers = [results(await s.transcript())[0] for s in (first, second)]
            stored = await everything_stored(runtime.store)
    finally:
        fixture.stop()
    # The server did quote them: the credentials were sent.
    assert answers[0][1] and answers[0][2].count("[redacted]") == 2, answers[0]
    assert answers[1][1] and "Basic [redacted]" in answers[1][2], answers[1]
    printed = sessions_show(url, schema, first.id) + sessions_show(url, schema, second.id)
    shown = [repr(with_headers), repr(with_userinfo), with_headers.key, with_userinfo.key]
    for secret in (BEARER, API_KEY, QUERY_TOKEN, PASSWORD, basic):
        assert secret not in stored
        assert secret not in printed
        assert all(secret not in text for text in shown)
    assert "access denied for Authorization: [redacted] and x-api-key [redacted]" in printed


@pytest.fixture
def quoting(tmp_path: Path) -> Iterator[str]:
    """The asking server in its `quote` mode, over HTTP; yields its URL."""
    process = subprocess.Popen(
        [sys.executable, "asking_server.py", str(tmp_path / "updates.jsonl"), "quote"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
        start_new_session=True,
    )
    SEEN_GROUPS.add(process.pid)
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        process.terminate()
        process.wait(15)
        process.stdout.close()


async def test_an_mcp_task_quoting_its_credentials_gets_none_stored_or_shown(
    quoting: str, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    agent = greeter(f"{quoting}?token={QUERY_TOKEN}", headers={"Authorization": f"Bearer {BEARER}"})
    async with Runtime(store=open_durable(url, schema)) as runtime:
        finished = asyncio.Event()
        runtime.background.emit = lambda e: finished.set() if isinstance(e, WorkFinished) else None
        session = await runtime.create_session(agent)
        await session.run("Greet someone, please.")
        async with asyncio.timeout(30):
            while not (asked := await session.pending_input()):
                await asyncio.sleep(0.05)
        await session.answer(asked[0].id, {"name": "Ada"})
        await asyncio.wait_for(finished.wait(), 30)
        told = await session.run("Anything new?")
        stored = await everything_stored(runtime.store)
    # The server quoted what it was sent, in its question and its result.
    assert asked[0].message == "Whom? (you sent Authorization: [redacted])"
    assert told.text == "Greeted."
    assert "hello, Ada (you sent Authorization: [redacted])" in stored
    assert "?token=[redacted]" in stored  # the task's record names the server
    printed = sessions_show(url, schema, session.id)
    for secret in (BEARER, QUERY_TOKEN):
        assert secret not in stored and secret not in printed


async def test_a_stdio_server_printing_its_credentials_gets_none_stored_shown_or_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stdio server that prints its environment to stderr and exits before
    its handshake: the error that quotes its stderr, and the DEBUG log of
    each line, have its credential-named variables redacted."""
    secret = "envtok-4c8e1a7f93"
    crash = (
        "import os, sys; print('started with API_TOKEN=' + os.environ['API_TOKEN'],"
        " file=sys.stderr); sys.exit(3)"
    )
    server = MCPServer.stdio(
        sys.executable, ["-c", crash], env={"API_TOKEN": secret}, name="printing"
    )
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "sessions.db"
    async with Runtime(f"sqlite:///{db}") as runtime:
        session = await runtime.create_session(_calling(server))
        with pytest.raises(ConfigurationError) as caught:
            await session.run("go")
        stored = await everything_stored(runtime.store)
    message = str(caught.value)
    assert "started with API_TOKEN=[redacted]" in message, message
    assert "started with API_TOKEN=[redacted]" in caplog.text  # the stderr line, logged
    for text in (message, caplog.text, stored):
        assert secret not in text
