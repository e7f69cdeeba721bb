"""`taskloom mcp serve --http` guarded as `taskloom a2a serve` is: a bearer
token from an environment variable, every request refused (401) without
it, required beyond loopback; and a request body past the bound answered
with a JSON-RPC error the official client reads. Real servers on loopback,
driven by the official `mcp` client."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_support import HERE
from test_mcp_tasks_crash import ENV
from test_mcp_tasks_serve import Answers, Anything, Created, Get, TaskId, Tasks, Update

from conftest import SEEN_GROUPS
from taskloom import Agent, Runtime
from taskloom.backends import open_backend
from taskloom.errors import ConfigurationError
from taskloom.mcp import serve_agent
from taskloom.models import ScriptedModel

pytestmark = pytest.mark.slow

TOKEN = "mcp-s3cret"
SERVE = [sys.executable, "-m", "taskloom", "mcp", "serve", "served_agents:guarded"]


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*SERVE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE,
        env={**ENV, **(env or {})},
        start_new_session=True,
    )
    SEEN_GROUPS.add(process.pid)
    return process


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`taskloom mcp serve served_agents:guarded` on loopback with a token
    (from `$MCP_TEST_TOKEN`, named by `--token-env`); yields (URL, store)."""
    store = f"sqlite:///{tmp_path / 'served.db'}"
    process = _serve(
        *("--http", "127.0.0.1:0", "--store", store, "--token-env", "MCP_TEST_TOKEN"),
        env={"MCP_TEST_TOKEN": TOKEN},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "serving agent 'guarded' over MCP at" in line, line
        yield line.split()[-1], store
    finally:
        process.terminate()
        process.wait(15)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _client(url: str, token: str | None, sent: list[Any] | None = None) -> Client:
    """The official client, sending `token` as a bearer token (when given);
    every request it makes is appended to `sent`."""

    async def record(request: Any) -> None:
        if sent is not None:
            sent.append(request)

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"request": [record]})
    return Client(streamable_http_client(url, http_client=http), extensions=[Tasks()])


async def _status(client: Client, task_id: str) -> dict[str, Any]:
    got = await client.session.send_request(Get(params=TaskId(task_id=task_id)), Anything)
    return got.model_dump(by_alias=True)


async def _decisions(store: str, task_id: str) -> list[dict[str, Any]]:
    async with Runtime(store=open_backend(store).store) as runtime:
        entries = await runtime.store.load(task_id)
    return [e.data for e in entries if e.kind == "approval_decision"]


async def test_the_official_client_needs_the_token(guarded: tuple[str, str]) -> None:
    url, _ = guarded
    for token in (None, "wrong"):
        with pytest.raises(Exception) as refused:
            async with _client(url, token) as client:
                await client.list_tools()
        print(f"the official client with token {token!r}: {refused.value!r}")
    async with httpx2.AsyncClient(timeout=30) as http:
        answer = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in answer.json()["error"]["message"]
    async with _client(url, TOKEN) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["guarded"]


async def test_a_replayed_approval_without_the_token_decides_nothing(
    guarded: tuple[str, str],
) -> None:
    url, store = guarded
    sent: list[Any] = []
    async with _client(url, TOKEN, sent) as client:
        made = await client.session.call_tool("guarded", {"task": "mars"}, allow_claimed=True)
        assert isinstance(made, Created)
        for _ in range(200):
            waiting = await _status(client, made.task_id)
            if waiting["status"] == "input_required":
                break
            await asyncio.sleep(0.05)
        [call_id] = waiting["inputRequests"]
        # An approval of something else, to learn the shape the client sends.
        answer = {"action": "accept", "content": {"approve": True}}
        del sent[:]
        update = Update(params=Answers(task_id=made.task_id, input_responses={"nope": answer}))
        await client.session.send_request(update, Anything)
        [shape] = [r for r in sent if b"tasks/update" in r.content]
        # The same request, now approving the parked call, without the token.
        body = shape.content.replace(b'"nope"', f'"{call_id}"'.encode())
        headers = {
            k: v for k, v in shape.headers.items() if k not in ("authorization", "content-length")
        }
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = await http.post(url, content=body, headers=headers)
            assert refused.status_code == 401
            await asyncio.sleep(0.5)
            assert (await _status(client, made.task_id))["status"] == "input_required"
            # With the token the very same request decides the call.
            headers["authorization"] = f"Bearer {TOKEN}"
            taken = await http.post(url, content=body, headers=headers)
            assert taken.status_code == 200, taken.text
    assert [d["call_id"] for d in await _decisions(store, made.task_id)] == [call_id]


async def test_an_oversized_call_is_a_jsonrpc_error_the_official_client_reads(
    guarded: tuple[str, str],
) -> None:
    url, store = guarded
    async with _client(url, TOKEN) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("guarded", {"task": "x" * (2 * 2**20)})
        assert refused.value.code == -32600
        assert "too large: the limit is 1048576 bytes" in str(refused.value)
        # The session goes on.
        assert [t.name for t in (await client.list_tools()).tools] == ["guarded"]
    async with Runtime(store=open_backend(store).store) as runtime:
        assert await runtime.store.list() == []


def test_serving_beyond_loopback_without_a_token_is_refused() -> None:
    env = {k: v for k, v in ENV.items() if k != "TASKLOOM_MCP_TOKEN"}
    process = subprocess.run(
        [*SERVE, "--http", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=env,
        timeout=60,
    )
    print(process.stderr)
    assert process.returncode == 2
    assert "serving on 0.0.0.0 reaches other machines: it needs a bearer token" in process.stderr
    assert "TASKLOOM_MCP_TOKEN" in process.stderr
    assert process.stdout == ""


async def test_serve_agent_beyond_loopback_needs_a_token() -> None:
    # Any agent: the address is refused before it is served.
    agent = Agent("guarded", ScriptedModel([]))

    with pytest.raises(ConfigurationError, match="needs a bearer token"):
        await serve_agent(agent, http=("0.0.0.0", 0))
