"""Serving an agent in-process on a loopback port, and the a2a-sdk's client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types import Message, Part, Role, SendMessageRequest

from taskloom import Agent, Runtime
from taskloom.a2a import serve_agent


@contextlib.asynccontextmanager
async def served(
    agent: Agent, runtime: Runtime, token: str | None = None, **options: Any
) -> AsyncIterator[str]:
    """`agent` served on a free loopback port while inside (`options` go to
    `serve_agent`); yields its URL."""
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(
        serve_agent(
            agent,
            runtime,
            host="127.0.0.1",
            port=0,
            token=token,
            on_ready=ready.set_result,
            **options,
        )
    )
    try:
        done, _ = await asyncio.wait({server, ready}, timeout=30, return_when="FIRST_COMPLETED")
        if ready not in done:
            if server.done():
                server.result()  # raises why the server could not start
            raise TimeoutError("the A2A server did not start")
        yield ready.result()
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


@contextlib.asynccontextmanager
async def client_for(
    url: str, *, token: str | None = None, streaming: bool = False
) -> AsyncIterator[Client]:
    """The a2a-sdk's own client for the agent at `url`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        client = await create_client(url, ClientConfig(httpx_client=http, streaming=streaming))
        async with client:
            yield client


def user_message(text: str, *, task_id: str = "", context_id: str = "") -> SendMessageRequest:
    """A user's text message, optionally continuing a task."""
    message = Message(
        message_id=f"m-{abs(hash((text, task_id))):x}",
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )
    return SendMessageRequest(message=message)
