"""Serving an agent over MCP: one tool, named after the agent, that runs it.

The tool takes `{"task": "..."}` and answers with the agent's final text (and
`structuredContent` with an output schema, declared as its `outputSchema`).
Every call runs in a fresh session of the given runtime; tool progress
reaches the caller as MCP progress notifications; a run that does not
complete is an `isError` result saying how it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from .. import __version__
from .._serving import MAX_JSONRPC_BODY, guard, jsonrpc_error, listen, serve_on
from ..agent import Agent
from ..errors import ConfigurationError
from ..events import Event, ToolProgress
from ..results import RunResult, RunStatus
from ..runtime import Runtime

if TYPE_CHECKING:
    from ._taskserve import ServedTasks

__all__ = ["agent_server", "serve_agent"]

_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the agent should do."}},
    "required": ["task"],
    "additionalProperties": False,
}


def agent_server(agent: Agent, runtime: Runtime, *, tasks: bool = True) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) offering `agent` as one
    tool; calls run in fresh sessions of `runtime`. With `tasks` the tool is
    task-capable: a client that asks for a task gets its id (the session's)
    at once and polls it, also from a server restarted on the same store."""
    return _agent_server(agent, runtime, tasks)[0]


def _agent_server(
    agent: Agent, runtime: Runtime, tasks: bool
) -> tuple[Server[Any], ServedTasks | None]:
    """The server, and its `ServedTasks` (None without tasks)."""
    name = agent.name
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", name):
        raise ConfigurationError(
            f"agent {name!r} cannot be an MCP tool name (letters, digits, '_', '-', '.')"
        )
    output_schema, wrapped = _output_schema(agent)
    tool = types.Tool(
        name=name,
        description=agent.description or f"Give the agent {name!r} a task; it answers when done.",
        input_schema=_TASK_SCHEMA,
        output_schema=output_schema,
        execution=types.ToolExecution(task_support="optional") if tasks else None,
    )

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name != name:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        task = (params.arguments or {}).get("task")
        if not isinstance(task, str) or not task.strip():
            return _error('give the agent a task: {"task": "..."}')
        session = await runtime.create_session(agent)
        progress: asyncio.Queue[ToolProgress | None] = asyncio.Queue()

        def emit(event: Event) -> None:
            if isinstance(event, ToolProgress):
                progress.put_nowait(event)

        forwarder = asyncio.ensure_future(_forward(progress, ctx))
        try:
            result = await session.run(task, emit=emit)
        except Exception as exc:
            # The run recorded its failure in its session; the caller gets it in band.
            return _error(f"the agent's run failed: {type(exc).__name__}: {exc}")
        finally:
            # Progress goes out before the answer; a cancelled call drops it.
            progress.put_nowait(None)
            with contextlib.suppress(Exception):
                await forwarder
        return _answer(result, wrapped)

    server = Server(name, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)
    if not tasks:
        return server, None
    from ._taskserve import ServedTasks

    served = ServedTasks(agent, runtime, name, lambda result: _answer(result, wrapped))
    served.install(server)
    runtime.service(ServedTasks, lambda _: served)
    return server, served


async def _forward(
    progress: asyncio.Queue[ToolProgress | None], ctx: ServerRequestContext[Any]
) -> None:
    sent = 0
    while (event := await progress.get()) is not None:
        sent += 1
        origin = f"[{event.origin}] " if event.origin else ""
        await ctx.session.report_progress(sent, None, origin + event.message)


def _output_schema(agent: Agent) -> tuple[dict[str, Any] | None, bool]:
    """The tool's outputSchema, and whether the output is wrapped in
    `{"result": ...}` (MCP structured content is always an object)."""
    if agent.output is None:
        return None, False
    schema = agent.output.json_schema
    if schema.get("type") == "object":
        return dict(schema), False
    return {"type": "object", "properties": {"result": dict(schema)}, "required": ["result"]}, True


def _answer(result: RunResult, wrapped: bool) -> types.CallToolResult:
    if result.status is not RunStatus.COMPLETED:
        why = f": {result.error}" if result.error else ""
        waiting = ""
        if result.status is RunStatus.AWAITING_APPROVAL:
            waiting = f" (session {result.session_id} waits for a decision)"
        return _error(f"the agent's run ended {result.status.value}{why}{waiting}")
    structured: Any = None
    if result.output is not None and not isinstance(result.output, str):
        value = _jsonable(result.output)
        structured = {"result": value} if wrapped else value
    text = result.text if structured is None else json.dumps(structured, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


async def serve_agent(
    agent: Agent,
    runtime: Runtime | None = None,
    *,
    http: tuple[str, int] | None = None,
    token: str | None = None,
    max_body: int = MAX_JSONRPC_BODY,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve `agent` over MCP until cancelled: on stdio or, with `http=(host,
    port)`, over streamable HTTP at `http://host:port/mcp` (port 0: the OS
    picks). `on_ready` gets where it serves once it accepts calls. The
    runtime (default: an in-memory one) is closed at the end.

    Over HTTP, with `token` every request needs `Authorization: Bearer
    <token>` (else 401), and a host beyond loopback needs one; a body past
    `max_body` bytes (default 1 MiB) is answered 413, nothing of it run.
    """
    runtime = runtime if runtime is not None else Runtime(agents=[agent])
    server, served = _agent_server(agent, runtime, True)
    assert served is not None
    async with contextlib.AsyncExitStack() as stack:
        if http is not None:
            sock, base = listen(*http, token)
            stack.enter_context(sock)
            # The SDK's own bound is set to ours, which answers first, in JSON-RPC.
            app = server.streamable_http_app(host=http[0], max_request_body_size=max_body)
            too_large = jsonrpc_error(413, f"request body too large: the limit is {max_body} bytes")
            guard(app, token=token, max_body=max_body, too_large=too_large)
        await stack.enter_async_context(runtime)
        # Tasks a restart cut off run on now, not at a client's first read.
        await served.runs.start()
        if http is not None:
            await serve_on(app, sock, base + "/mcp", on_ready, lifespan="on")
            return
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            if on_ready is not None:
                on_ready("stdio")
            await server.run(read, write, server.create_initialization_options())
