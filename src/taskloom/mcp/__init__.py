"""Tools from Model Context Protocol servers, and agents served as MCP tools.

    from taskloom.mcp import MCPServer
    agent = Agent(tools=[MCPServer.stdio("mcp-server-time", prefix="time"), my_tool])

`MCPServer` is a toolset built on the official `mcp` SDK (the `mcp` extra);
`serve_agent` (and `taskloom mcp serve module:agent`) exposes an agent as an
MCP server with one task-capable tool. Tools a server runs as MCP tasks
become durable background work (docs/concepts/mcp-tasks.md). `TasksClient`,
`start_task`, `get_task`, `cancel_task` and `update_task` are the task
requests the SDK's client lacks (docs/howto/mcp-task-client.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._lifecycle import MCPLimits
    from ._serve import agent_server, serve_agent
    from ._server import MCPConnections, MCPServer, TaskMode
    from ._tasks import TasksClient, TaskState, cancel_task, get_task, start_task, update_task

__all__ = [
    "MCPConnections",
    "MCPLimits",
    "MCPServer",
    "TaskMode",
    "TaskState",
    "TasksClient",
    "agent_server",
    "cancel_task",
    "get_task",
    "serve_agent",
    "start_task",
    "update_task",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "MCPConnections": "._server",
        "MCPLimits": "._lifecycle",
        "MCPServer": "._server",
        "TaskMode": "._server",
        "TaskState": "._tasks",
        "TasksClient": "._tasks",
        "agent_server": "._serve",
        "cancel_task": "._tasks",
        "get_task": "._tasks",
        "serve_agent": "._serve",
        "start_task": "._tasks",
        "update_task": "._tasks",
    },
)
