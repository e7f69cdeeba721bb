"""An MCP server for the input tests, on the official SDK's low-level
`Server`: one tool, `greet`, that a client declaring the tasks extension
(2026-07-28) gets as a task which asks for the person's name
(`input_required`, with an `elicitation/create` in `inputRequests`) and,
once `tasks/update` answered it, completes with a greeting.

    python asking_server.py MARKER [MODE]   # prints "READY <url>", serves over HTTP

Every `tasks/update` it receives is written to MARKER as a JSON line. Its
tasks live in this process: it outlives the clients that poll it.

MODE makes it hostile: `liar` answers `tasks/get` about another task (one
that completed, with a stranger's result); `pester` stays `input_required`
and asks a new question on every poll; `quote` quotes the Authorization
header the call came with in its status, its question and its result.
"""

from __future__ import annotations

import asyncio
import json
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
QUESTION = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Whom shall I greet?",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string", "title": "Name"}},
            "required": ["name"],
        },
    },
}

marker = Path(sys.argv[1])
MODE = sys.argv[2] if len(sys.argv) > 2 else ""
STRANGER = "a stranger's result"
tasks: dict[str, dict[str, Any]] = {}


class TaskId(types.RequestParams):
    task_id: str


class Update(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any] = {}


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _view(task_id: str) -> dict[str, Any]:
    task = tasks[task_id]
    out: dict[str, Any] = {
        "taskId": task_id,
        "createdAt": _iso(task["created"]),
        "lastUpdatedAt": _iso(time.time()),
        "ttlMs": None,
        "pollIntervalMs": 200,
    }
    answer = task.get("answer")
    said = f" (you sent Authorization: {task.get('auth')})" if MODE == "quote" else ""
    if answer is None:
        if time.time() - task["created"] < 0.3:
            return {**out, "status": "working", "statusMessage": "looking around"}
        if MODE == "liar":
            result = {"content": [{"type": "text", "text": STRANGER}], "isError": False}
            return {**out, "taskId": "someone-else", "status": "completed", "result": result}
        if MODE == "pester":
            task["asked"] = task.get("asked", 0) + 1
            n = task["asked"]
            asked = {**QUESTION["params"], "message": f"question {n}: whom shall I greet?"}
            return {
                **out,
                "pollIntervalMs": 50,
                "status": "input_required",
                "inputRequests": {f"q{n}": {**QUESTION, "params": asked}},
            }
        asked = {**QUESTION, "params": {**QUESTION["params"], "message": f"Whom?{said}"}}
        return {
            **out,
            "status": "input_required",
            "statusMessage": f"waiting for a name{said}",
            "inputRequests": {"who": asked if said else QUESTION},
        }
    if answer.get("action") == "accept":
        text = f"hello, {answer['content']['name']}{said}"
    else:
        text = f"nobody to greet ({answer.get('action')})"
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    return {**out, "status": "completed", "result": result}


async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
    if ctx.method != "tools/call" or (ctx.params or {}).get("name") != "greet":
        return await call_next(ctx)
    capabilities = (ctx.meta or {}).get("io.modelcontextprotocol/clientCapabilities")
    if isinstance(capabilities, types.ClientCapabilities):
        declared = EXTENSION in (capabilities.extensions or {})
    else:
        declared = EXTENSION in ((capabilities or {}).get("extensions") or {})
    if not declared:
        return await call_next(ctx)
    task_id = uuid.uuid4().hex
    headers = getattr(ctx.request, "headers", None) or {}
    tasks[task_id] = {"created": time.time(), "auth": headers.get("authorization")}
    return {"resultType": "task", **_view(task_id)}


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    tool = types.Tool(name="greet", description="Greets someone.", input_schema={"type": "object"})
    return types.ListToolsResult(tools=[tool])


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    text = "greet runs only as a task"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def get(ctx: ServerRequestContext[Any, Any], params: TaskId) -> Any:
    return _view(params.task_id)


async def update(ctx: ServerRequestContext[Any, Any], params: Update) -> Any:
    line = json.dumps({"task": params.task_id, "responses": params.input_responses}) + "\n"
    await asyncio.to_thread(_note, line)
    task = tasks.get(params.task_id)
    # Only an outstanding question is answered; anything else is ignored.
    if task is not None and task.get("answer") is None and "who" in params.input_responses:
        task["answer"] = params.input_responses["who"]
    return {}


def _note(line: str) -> None:
    with marker.open("a") as f:
        f.write(line)


async def cancel(ctx: ServerRequestContext[Any, Any], params: TaskId) -> Any:
    return {}


def main() -> None:
    import uvicorn

    server = Server("asking", on_list_tools=list_tools, on_call_tool=call_tool)
    server.extensions[EXTENSION] = {}
    server.middleware.append(middleware)
    server.add_request_handler("tasks/get", TaskId, get)
    server.add_request_handler("tasks/update", Update, update)
    server.add_request_handler("tasks/cancel", TaskId, cancel)
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
