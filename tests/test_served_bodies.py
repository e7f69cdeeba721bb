"""Every HTTP endpoint taskloom serves bounds request bodies as they stream.

`taskloom a2a serve`, `taskloom mcp serve --http` and `taskloom serve` (the
console, acting through `--app`) run as real processes on loopback, on
SQLite and PostgreSQL. Each is sent 100 MiB three ways: declared by
Content-Length, streamed chunked (no length at all), and streamed past the
small Content-Length it declared. Each answers in its protocol's own terms
(A2A: a JSON-RPC "invalid request", as the a2a-sdk answers; MCP: 413 with a
JSON-RPC error; the console: 413), its peak resident memory grows by a few
MiB at most (printed), nothing reaches its store, and it serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from console_server import TOKEN, serving
from console_sessions import parked_session
from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from served_processes import ServedProcess, peak_rss_mib
from taskloom import Runtime

pytestmark = pytest.mark.slow

BIG = 100 * 2**20
CHUNK = 64 * 1024
GROWTH_MIB = 32  # before the bound, A2A grew by ~485 MiB and the console by ~200 MiB


async def _stream(prefix: bytes, suffix: bytes) -> AsyncIterator[bytes]:
    yield prefix
    for _ in range(BIG // CHUNK):
        yield b"a" * CHUNK
    yield suffix


async def declared(url: str, prefix: bytes, suffix: bytes, headers: dict[str, str]) -> Any:
    """POST 100 MiB with its Content-Length."""
    async with httpx2.AsyncClient(timeout=120) as http:
        return await http.post(url, content=prefix + b"a" * BIG + suffix, headers=headers)


async def chunked(url: str, prefix: bytes, suffix: bytes, headers: dict[str, str]) -> Any:
    """POST 100 MiB chunked: no length is declared."""
    async with httpx2.AsyncClient(timeout=120) as http:
        return await http.post(url, content=_stream(prefix, suffix), headers=headers)


async def lying(url: str, headers: dict[str, str]) -> None:
    """Declare a 1 KiB body, then send 100 MiB of junk (until the server
    hangs up). The declared KiB is no valid request of any of the servers."""
    found = re.match(r"http://([^/:]+):(\d+)(/.*)", url)
    assert found
    host, port, path = found.group(1), int(found.group(2)), found.group(3)
    reader, writer = await asyncio.open_connection(host, port)
    head = [f"POST {path} HTTP/1.1", f"host: {host}:{port}", "content-length: 1024"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n{").encode())
        for _ in range(BIG // CHUNK):
            writer.write(b"a" * CHUNK)
            await writer.drain()
        await asyncio.wait_for(reader.read(), 30)
    except ConnectionError:
        pass  # the server hung up on what follows the declared body: its right
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _oversized(
    pid: int,
    url: str,
    prefix: bytes,
    suffix: bytes,
    headers: dict[str, str],
    refused: Callable[[Any], None],
) -> None:
    """Send the three 100 MiB bodies; each is refused, and the server's peak
    resident memory stays where it was."""
    before = peak_rss_mib(pid)
    refused(await declared(url, prefix, suffix, headers))
    after_declared = peak_rss_mib(pid)
    refused(await chunked(url, prefix, suffix, headers))
    after_chunked = peak_rss_mib(pid)
    await lying(url, headers)
    after = peak_rss_mib(pid)
    print(
        f"peak RSS of the server: {before:.0f} MiB before, {after_declared:.0f} after "
        f"100 MiB declared, {after_chunked:.0f} after 100 MiB chunked, {after:.0f} after "
        "100 MiB past a 1 KiB Content-Length"
    )
    assert after - before < GROWTH_MIB


def _jsonrpc_refusal(status: int) -> Callable[[Any], None]:
    def check(response: Any) -> None:
        assert response.status_code == status, response.text[:200]
        error = response.json()["error"]
        assert error["code"] == -32600
        assert "too large" in error["message"].lower()
        assert "1048576 bytes" in error["message"]

    return check


async def _stored(url: str, schema: str) -> list[Any]:
    async with Runtime(store=open_durable(url, schema)) as runtime:
        return await runtime.store.list()


async def test_a2a_serve_refuses_100_mib(tmp_path: Path, store_url: tuple[str, str]) -> None:
    url, schema = store_url
    server = ServedProcess("a2a", url, schema, tmp_path)
    try:
        served = server.start()
        assert server.process is not None
        # A message that runs (and parks, storing its text) if it gets through.
        prefix = (
            b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'
            b'{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"pay '
        )
        headers = {"content-type": "application/json", "a2a-version": "1.0"}
        await _oversized(
            server.process.pid, served, prefix, b'"}]}}}', headers, _jsonrpc_refusal(200)
        )
        async with httpx2.AsyncClient() as http:
            card = await http.get(served + ".well-known/agent-card.json")
        assert card.status_code == 200
    finally:
        server.stop()
    assert await _stored(url, schema) == []


async def test_mcp_serve_refuses_100_mib(tmp_path: Path, store_url: tuple[str, str]) -> None:
    from mcp.client import Client

    url, schema = store_url
    server = ServedProcess("mcp", url, schema, tmp_path)
    try:
        served = server.start()
        assert server.process is not None
        prefix = (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
            b'"params":{"name":"clerk","arguments":{"task":"pay '
        )
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        await _oversized(
            server.process.pid, served, prefix, b'"}}}', headers, _jsonrpc_refusal(413)
        )
        async with Client(served) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["clerk"]
    finally:
        server.stop()
    assert await _stored(url, schema) == []


async def test_the_console_refuses_100_mib(tmp_path: Path, store_url: tuple[str, str]) -> None:
    url, schema = store_url
    session_id = await parked_session(open_durable(url, schema))
    async with Runtime(store=open_durable(url, schema)) as runtime:
        entries = len(await runtime.store.load(session_id))
    env = {"PGOPTIONS": f"-c search_path={schema}"} if schema != "-" else {}
    with serving(url, "--app", "console_sessions:make_runtime", env=env) as served:
        async with httpx2.AsyncClient(base_url=served.url, timeout=30) as http:
            assert (await http.get(f"/?token={TOKEN}")).status_code == 303  # signed in
            page = (await http.get(f"/sessions/{session_id}")).text
            found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
            assert found, page[:500]
            cookie = "; ".join(f"{k}={v}" for k, v in http.cookies.items())

        def refused(response: Any) -> None:
            assert response.status_code == 413, response.text[:200]

        # A steering message that is appended to the log if it gets through.
        headers = {"content-type": "application/x-www-form-urlencoded", "cookie": cookie}
        prefix = f"csrf={found.group(1)}&text=".encode()
        target = f"{served.url}/sessions/{session_id}/steer"
        await _oversized(served.process.pid, target, prefix, b"", headers, refused)
        async with httpx2.AsyncClient(timeout=30) as http:
            page_again = await http.get(f"{served.url}/sessions/{session_id}", headers=headers)
        assert page_again.status_code == 200
    async with Runtime(store=open_durable(url, schema)) as runtime:
        assert len(await runtime.store.load(session_id)) == entries


@pytest.mark.parametrize("kind", ["a2a", "mcp", "console"])
async def test_max_body_sets_the_bound(tmp_path: Path, kind: str) -> None:
    """`--max-body 2048`: a body of 3,000 bytes is refused, one of 1,000 is not."""
    store = f"sqlite:///{tmp_path / 'taskloom.db'}"
    statuses: list[int] = []
    if kind == "console":
        session_id = await parked_session(store)
        with serving(store, "--max-body", "2048") as served:
            async with httpx2.AsyncClient(base_url=served.url, timeout=30) as http:
                assert (await http.get(f"/?token={TOKEN}")).status_code == 303  # signed in
                for size in (3000, 1000):
                    answer = await http.post(f"/sessions/{session_id}/steer", content=b"x" * size)
                    statuses.append(answer.status_code)
        # Refused, then past the bound to the console's own refusal (read-only).
        assert statuses == [413, 403]
        return
    server = ServedProcess(kind, store, "-", tmp_path, args=["--max-body", "2048"])
    try:
        served = server.start()
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        async with httpx2.AsyncClient(timeout=30) as http:
            for size in (3000, 1000):
                body = b'{"jsonrpc":"2.0","id":1,"method":"nothing","params":{"pad":"'
                body += b"x" * (size - len(body) - 4) + b'"}}'
                answer = await http.post(served, content=body, headers=headers)
                statuses.append(answer.status_code)
                error = answer.json()["error"]
                assert ("2048 bytes" in error["message"]) is (size > 2048), error
    finally:
        server.stop()
    print(kind, statuses)
