"""A remote A2A agent that echoes the token it was sent gets none of it
stored or printed, nor the credentials of its URL; inline and in the
background, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from remote_background import parent_model
from sdk_agent import SEEN_AUTHORIZATION, serving

from credentials_support import everything_stored, sessions_show
from pg import open_durable
from taskloom import Agent, Runtime, Session
from taskloom.a2a import RemoteAgent
from taskloom.messages import ToolResult
from taskloom.models import FunctionModel, ModelRequest, reply

pytest.importorskip("a2a")
pytestmark = pytest.mark.slow

TOKEN = "a2atok-6e1f0c9d3b"
URL_TOKEN = "urltok-2b8d5f7a1c"


def _inline_parent(remote: RemoteAgent) -> Agent:
    def answer(request: ModelRequest) -> Any:
        results = [b for b in request.messages[-1].blocks if isinstance(b, ToolResult)]
        if not results:
            return reply(tool_calls=[("remote", {"task": "quote"})])
        return reply("told: " + results[0].content)

    return Agent("parent", FunctionModel(answer), tools=[remote.tool()])


def _remote(url: str, background: bool) -> RemoteAgent:
    return RemoteAgent(
        "remote",
        url,
        description="An agent elsewhere.",
        token=TOKEN,
        background=background,
        poll_interval=0.05,
        unreachable_for=0.1,
    )


async def _told(runtime: Runtime, remote: RemoteAgent, background: bool) -> tuple[str, str]:
    """(everything the parent's model was told, the session's id)."""
    if background:
        agent = Agent("parent", parent_model(), tools=[remote.tool()])
    else:
        agent = _inline_parent(remote)
    session = await runtime.create_session(agent)
    await session.run("delegate: quote" if background else "go")
    if background:
        # Its notice reaches the run that started it, or waits for the next.
        async with asyncio.timeout(10):
            while "remote agent 'remote'" not in await _heard(session):
                if await runtime.background.inbox.pending(session.id):
                    await session.run("news?")
                await asyncio.sleep(0.02)
    return await _heard(session), session.id


async def _heard(session: Session) -> str:
    said = []
    for message in await session.transcript():
        if message.role != "assistant":
            said.append(message.text)
            said.extend(b.content for b in message.blocks if isinstance(b, ToolResult))
    return "\n".join(said)


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
async def test_a_failure_quoting_the_token_is_stored_and_shown_redacted(
    store_url: tuple[str, str], background: bool
) -> None:
    url, schema = store_url
    SEEN_AUTHORIZATION.clear()
    async with serving() as (served, _):
        quoting = _remote(served, background)
        # The SDK cannot reach an agent whose URL has a query: its error names the URL.
        with_query = _remote(f"{served}?token={URL_TOKEN}", background)
        async with Runtime(store=open_durable(url, schema)) as runtime:
            told, first = await _told(runtime, quoting, background)
            unreached, second = await _told(runtime, with_query, background)
            stored = await everything_stored(runtime.store)
    # The server was sent the token, and quoted it.
    assert SEEN_AUTHORIZATION and all(TOKEN in seen for seen in SEEN_AUTHORIZATION)
    assert "refused the credentials: Authorization: [redacted]" in told
    assert f"({served}?token=[redacted])" in unreached, (unreached, stored[-3000:])
    printed = sessions_show(url, schema, first) + sessions_show(url, schema, second)
    for text in (stored, printed, told, unreached, repr(with_query)):
        assert TOKEN not in text
        assert URL_TOKEN not in text
    if background:
        assert '"url": "' + served + '?token=[redacted]"' in stored  # the child's metadata


async def test_a_followed_task_failing_with_an_error_quoting_the_token_is_told_redacted(
    store_url: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only the failures the protocol names: any error out of a follow
    (here one quoting the header the server took) reaches the notice and
    the log with the token redacted."""
    url, schema = store_url
    SEEN_AUTHORIZATION.clear()

    async def breaking(self: RemoteAgent, *args: Any, **kwargs: Any) -> Any:
        # Its card was read, with the token: the server saw it.
        raise RuntimeError(f"remote agent 'remote' said: Authorization: {SEEN_AUTHORIZATION[-1]}")

    monkeypatch.setattr(RemoteAgent, "exchange", breaking)
    async with serving() as (served, _), Runtime(store=open_durable(url, schema)) as runtime:
        told, session_id = await _told(runtime, _remote(served, True), True)
        stored = await everything_stored(runtime.store)
    assert SEEN_AUTHORIZATION and all(TOKEN in seen for seen in SEEN_AUTHORIZATION)
    assert "RuntimeError: remote agent 'remote' said: Authorization: [redacted]" in told
    printed = sessions_show(url, schema, session_id)
    for text in (stored, printed, told):
        assert TOKEN not in text
