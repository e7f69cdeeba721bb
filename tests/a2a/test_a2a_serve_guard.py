"""The A2A server's bounds: a message past the body limit is the JSON-RPC
"invalid request" the a2a-sdk's client raises (as the SDK's own server
answers a body too large), nothing of it runs or is stored, and the server
goes on; `max_body` sets the limit; beyond loopback a token is required."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from a2a.types import GetTaskRequest, TaskState
from a2a_support import client_for, served, user_message
from served_agents import echo

from taskloom import Runtime
from taskloom.a2a import serve_agent
from taskloom.errors import ConfigurationError

pytest.importorskip("a2a")
HERE = Path(__file__).resolve().parent
SERVE = [sys.executable, "-m", "taskloom", "a2a", "serve", "served_agents:echo"]


async def _send(url: str, text: str, *, streaming: bool) -> TaskState:
    """Send `text` as a new task; its state once the answer (or stream) ended."""
    async with client_for(url, streaming=streaming) as client:
        responses = [r async for r in client.send_message(user_message(text))]
        task_id = next(r.task.id for r in responses if r.HasField("task"))
        return (await client.get_task(GetTaskRequest(id=task_id))).status.state


@pytest.mark.parametrize("streaming", [False, True], ids=["send", "stream"])
async def test_a_message_past_the_limit_is_an_invalid_request_and_runs_nothing(
    streaming: bool,
) -> None:
    agent = echo()
    async with Runtime(agents=[agent]) as runtime, served(agent, runtime) as url:
        with pytest.raises(Exception, match=r"Payload too large: the limit is 1048576 bytes"):
            await _send(url, "x" * (2 * 2**20), streaming=streaming)
        assert await runtime.store.list() == []
        # The server goes on.
        assert await _send(url, "hello", streaming=streaming) == TaskState.TASK_STATE_COMPLETED


async def test_max_body_sets_the_limit() -> None:
    agent = echo()
    async with Runtime(agents=[agent]) as runtime, served(agent, runtime, max_body=4096) as url:
        with pytest.raises(Exception, match=r"Payload too large: the limit is 4096 bytes"):
            await _send(url, "x" * 5000, streaming=False)
        assert await _send(url, "x" * 1000, streaming=False) == TaskState.TASK_STATE_COMPLETED
        assert len(await runtime.store.list()) == 1


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
async def test_a_limit_that_is_no_positive_number_of_bytes_is_refused(limit: object) -> None:
    agent = echo()
    with pytest.raises(ConfigurationError, match="positive number of bytes"):
        await serve_agent(agent, max_body=limit)  # type: ignore[arg-type]


async def test_serving_beyond_loopback_needs_a_token() -> None:
    with pytest.raises(ConfigurationError, match=r"0\.0\.0\.0 reaches other machines"):
        await serve_agent(echo(), host="0.0.0.0")


@pytest.mark.slow
def test_a2a_serve_beyond_loopback_without_a_token_is_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TASKLOOM_A2A_TOKEN"}
    done = subprocess.run(
        [*SERVE, "--http", "0.0.0.0:8000"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(HERE)},
        timeout=60,
    )
    print(done.stderr)
    assert done.returncode == 2
    assert "serving on 0.0.0.0 reaches other machines: it needs a bearer token" in done.stderr
    assert "TASKLOOM_A2A_TOKEN" in done.stderr
