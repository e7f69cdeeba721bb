"""An MCP server for the task tests and the MCP benchmark, on the official
SDK's low-level `Server`: one tool, `nap`, that sleeps `seconds` and
answers `woke: <label>`. A client declaring the tasks extension
(2026-07-28) gets a call with `seconds > 0` as a task that completes once
that many seconds passed (`seconds < 0`: never); every other call is
answered inline, after the sleep.

    python napping_server.py MARKER            # prints "READY <url>", serves over HTTP
    python napping_server.py MARKER --stdio    # serves over stdio

What it sees goes to MARKER as JSON lines: `{"event": "serving", "pid": ...}`
once, then `start`, `get` and `cancel` with the task id and label (the test
counts polls and sees cancels there). Its tasks live in this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import Server

EXTENSION = "io.modelcontextprotocol/tasks"
POLL_MS = int(os.environ.get("NAPPING_POLL_MS", "100"))
"""The poll interval the server suggests."""

marker = Path(sys.argv[1])
tasks: dict[str, dict[str, Any]] = {}


class TaskId(types.RequestParams):
    task_id: str


def _note(event: str, **fields: Any) -> None:
    with marker.open("a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _text(text: str, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _view(task_id: str) -> dict[str, Any]:
    task = tasks[task_id]
    out: dict[str, Any] = {
        "taskId": task_id,
        "createdAt": _iso(task["created"]),
        "lastUpdatedAt": _iso(time.time()),
        "ttlMs": None,
        "pollIntervalMs": POLL_MS,
    }
    if task.get("cancelled"):
        return {**out, "status": "cancelled", "statusMessage": "cancelled by the client"}
    seconds = task["seconds"]
    if seconds < 0 or time.monotonic() - task["started"] < seconds:
        return {**out, "status": "working", "statusMessage": f"napping ({task['label']})"}
    return {**out, "status": "completed", "result": _text(f"woke: {task['label']}")}


async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
    params = ctx.params or {}
    if ctx.method != "tools/call" or params.get("name") != "nap":
        return await call_next(ctx)
    capabilities = (ctx.meta or {}).get("io.modelcontextprotocol/clientCapabilities")
    if isinstance(capabilities, types.ClientCapabilities):
        declared = EXTENSION in (capabilities.extensions or {})
    else:
        declared = EXTENSION in ((capabilities or {}).get("extensions") or {})
    arguments = params.get("arguments") or {}
    seconds = float(arguments.get("seconds", 0))
    if not declared or seconds == 0:
        return await call_next(ctx)
    task_id = uuid.uuid4().hex
    label = str(arguments.get("label", ""))
    tasks[task_id] = {
        "created": time.time(),
        "started": time.monotonic(),
        "seconds": seconds,
        "label": label,
    }
    _note("start", task=task_id, label=label)
    return {"resultType": "task", **_view(task_id)}


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    schema = {
        "type": "object",
        "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
        "required": ["seconds", "label"],
    }
    tool = types.Tool(name="nap", description="Sleeps, then says so.", input_schema=schema)
    return types.ListToolsResult(tools=[tool])


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    arguments = params.arguments or {}
    seconds = float(arguments.get("seconds", 0))
    if seconds > 0:
        await asyncio.sleep(seconds)
    text = f"woke: {arguments.get('label', '')}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def get(ctx: ServerRequestContext[Any, Any], params: TaskId) -> Any:
    if params.task_id not in tasks:
        from mcp.shared.exceptions import MCPError

        raise MCPError(types.INVALID_PARAMS, f"no task {params.task_id}")
    view = _view(params.task_id)
    _note("get", task=params.task_id, label=tasks[params.task_id]["label"], status=view["status"])
    return view


async def cancel(ctx: ServerRequestContext[Any, Any], params: TaskId) -> Any:
    task = tasks.get(params.task_id)
    if task is not None and _view(params.task_id)["status"] == "working":
        task["cancelled"] = True
    status = _view(params.task_id)["status"] if task is not None else None
    _note("cancel", task=params.task_id, label=task["label"] if task else None, status=status)
    return {}


def _server() -> Server[Any]:
    server = Server("napping", on_list_tools=list_tools, on_call_tool=call_tool)
    server.extensions[EXTENSION] = {}
    server.middleware.append(middleware)
    server.add_request_handler("tasks/get", TaskId, get)
    server.add_request_handler("tasks/cancel", TaskId, cancel)
    return server


async def _stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    server = _server()
    _note("serving", pid=os.getpid())
    if "--stdio" in sys.argv:
        asyncio.run(_stdio(server))
        return
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"READY http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
