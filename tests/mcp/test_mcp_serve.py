"""`taskloom mcp serve module:agent`, driven by the official SDK's client over
stdio and over streamable HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_support import HERE, run_python

import taskloom
from conftest import SEEN_GROUPS
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.slow

SOURCES = str(Path(taskloom.__file__).resolve().parents[1])


def serve_command(*args: str) -> list[str]:
    return ["-m", "taskloom", "mcp", "serve", *args]


def stdio_server(ref: str) -> StdioServerParameters:
    # The SDK's safe environment plus what the served module needs.
    return StdioServerParameters(
        command=sys.executable,
        args=serve_command(ref),
        env={"PYTHONPATH": os.pathsep.join([SOURCES, str(HERE)])},
        cwd=HERE,
    )


@pytest.fixture
def http_planner() -> Iterator[str]:
    """`taskloom mcp serve served_agents:planner --http 127.0.0.1:0`; yields its URL."""
    process = subprocess.Popen(
        [sys.executable, *serve_command("served_agents:planner", "--http", "127.0.0.1:0")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([SOURCES, str(HERE)])},
        start_new_session=True,
    )
    SEEN_GROUPS.add(process.pid)
    assert process.stdout is not None
    line = process.stdout.readline()
    try:
        assert line.startswith("taskloom: serving agent 'planner' over MCP at http://127.0.0.1:")
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(15)
        process.stdout.close()


async def test_an_agent_served_over_stdio_is_one_tool_with_structured_output() -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with Client(stdio_server("served_agents:planner")) as client:
        listed = (await client.list_tools()).tools
        result = await client.call_tool(
            "planner", {"task": "Tromsø"}, progress_callback=on_progress
        )
    [tool] = listed
    assert tool.name == "planner" and tool.description == "Plans a trip to a city."
    assert tool.input_schema["required"] == ["task"]
    assert tool.output_schema is not None and tool.output_schema["title"] == "Plan"
    assert not result.is_error
    assert result.structured_content == {"city": "Tromsø", "days": 3}
    # The child's tool progress, as MCP progress notifications, before the answer.
    assert progress == [(1.0, "reading about Tromsø"), (2.0, "summarising Tromsø")]


async def test_an_agent_served_over_http_answers_each_call_in_a_fresh_session(
    http_planner: str,
) -> None:
    async with Client(http_planner) as client:
        first = await client.call_tool("planner", {"task": "Oslo"})
        second = await client.call_tool("planner", {"task": "Bergen"})
        missing = await client.call_tool("planner", {"task": ""})
    assert first.structured_content == second.structured_content == {"city": "Tromsø", "days": 3}
    assert missing.is_error and "give the agent a task" in missing.content[0].text  # type: ignore[union-attr]


async def test_a_plain_text_agent_and_a_failed_run() -> None:
    async with Client(stdio_server("served_agents:echo")) as client:
        [tool] = (await client.list_tools()).tools
        said = await client.call_tool("echo", {"task": "hello"})
        failed = await client.call_tool("echo", {"task": "fail"})
    assert tool.output_schema is None
    assert said.content[0].text == "you said: hello" and said.structured_content is None  # type: ignore[union-attr]
    assert failed.is_error
    assert "RuntimeError: the model is down" in failed.content[0].text  # type: ignore[union-attr]


def test_serving_something_that_is_not_an_agent_says_so() -> None:
    done = run_python(*serve_command("served_agents:not_an_agent"))
    assert done.returncode == 2
    assert "is a int, not an Agent" in done.stderr
    bad = run_python(*serve_command("served_agents:planner", "--http", "nowhere"))
    assert bad.returncode == 2 and "--http takes HOST:PORT" in bad.stderr
