"""The console's session page names the session's Temporal workflow when its
runtime queues on Temporal (over plain HTTP; no server is asked)."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("temporalio")
import httpx2

from taskloom import Agent, Runtime
from taskloom.console import Console
from taskloom.distributed import TemporalQueue
from taskloom.entries import Entry, SubagentDispatched
from taskloom.models import ScriptedModel


async def page_of(console: Console, session_id: str) -> str:
    transport = httpx2.ASGITransport(app=console)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
        signed = await client.get(f"/?token={console.token}", follow_redirects=True)
        assert signed.status_code == 200
        answer = await client.get(f"/sessions/{session_id}")
        assert answer.status_code == 200
        return html.unescape(answer.text)


async def test_the_session_page_shows_the_temporal_workflow_id(tmp_path: Path) -> None:
    # An address nothing listens on: the page must not need the server.
    queue = TemporalQueue("127.0.0.1:1", task_queue="agents")
    runtime = Runtime(store=f"sqlite:///{tmp_path / 'console.db'}", queue=queue)
    try:
        session = await runtime.create_session(Agent("bot", ScriptedModel([])))
        child = await runtime.create_session(Agent("helper", ScriptedModel([])))
        spec = {"child_session_id": child.id, "name": "helper"}
        await runtime.store.append(child.id, Entry.of(SubagentDispatched(spec)))
        console = Console(runtime)
        shown = await page_of(console, session.id)
        assert "Temporal workflow" in shown
        assert f'<code class="workflow-id">taskloom-session-{session.id}</code>' in shown
        shown = await page_of(console, child.id)
        assert f'<code class="workflow-id">taskloom-child-{child.id}</code>' in shown
        # A fork of the child keeps its entries but runs as a session of its own.
        fork = await child.fork()
        shown = await page_of(console, fork.id)
        assert f'<code class="workflow-id">taskloom-session-{fork.id}</code>' in shown
        await console.close()
    finally:
        await runtime.close()


async def test_a_console_without_temporal_shows_no_workflow(tmp_path: Path) -> None:
    console = Console.reading(f"sqlite:///{tmp_path / 'console.db'}")
    try:
        session = await console.runtime.create_session(Agent("bot", ScriptedModel([])))
        shown = await page_of(console, session.id)
        assert "Temporal workflow" not in shown and "workflow-id" not in shown
        await console.close()
    finally:
        await console.runtime.close()
