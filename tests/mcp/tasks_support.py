"""The client side of the MCP task tests: an agent that calls the served
`gated` agent (`served_agents.gated`) as an MCP task and says what it heard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taskloom import Agent, Runtime
from taskloom.entries import SubagentResult
from taskloom.mcp import MCPServer
from taskloom.models import FunctionModel, ModelRequest, reply

REPORT = "the gate opened"


def news(request: ModelRequest) -> str:
    """What reached the model since it last spoke."""
    tail: list[str] = []
    for message in reversed(request.messages):
        if message.role == "assistant":
            break
        tail.append(message.text)
    return "\n".join(reversed(tail))


def _assistant(request: ModelRequest) -> Any:
    if len(request.messages) == 1:
        return reply(tool_calls=[("gated", {"task": "open it"})])
    heard = news(request)
    if REPORT in heard:
        return reply("The gate is open.")
    return reply("Still waiting for the gate.")


def client_agent(url: str) -> Agent:
    """The agent, with the served agent at `url` as its one MCP tool."""
    server = MCPServer.http(url, name="gated", tasks="always", approval="never")
    return Agent("keeper", FunctionModel(_assistant), tools=[server])


@dataclass(frozen=True)
class TaskRecord:
    """What the store keeps of one MCP task a session followed: its child
    session, the server's task id, and its end (status None while open)."""

    child_id: str
    task_id: str
    status: str | None
    text: str


async def mcp_tasks(runtime: Runtime, session_id: str) -> list[TaskRecord]:
    """The session's MCP tasks, from their records (child sessions of mode `mcp_task`)."""
    found: list[TaskRecord] = []
    for meta in await runtime.store.list(parent_id=session_id):
        if meta.metadata.get("mode") != "mcp_task":
            continue
        entries = [e.payload for e in await runtime.store.load(meta.id)]
        spec = meta.metadata["record"]
        ends = [p for p in entries if isinstance(p, SubagentResult)]
        assert len(ends) <= 1, ends
        end = ends[0] if ends else None
        text = "" if end is None else str(end.report if end.status == "done" else end.error)
        found.append(
            TaskRecord(meta.id, str(spec["task_id"]), None if end is None else end.status, text)
        )
    return found
