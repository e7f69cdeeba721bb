"""The client side of the MCP task tests: an agent that calls the served
`gated` agent (`served_agents.gated`) as an MCP task and says what it heard."""

from __future__ import annotations

from typing import Any

from taskloom import Agent
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
