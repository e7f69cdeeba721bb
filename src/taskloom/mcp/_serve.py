"""Serving an agent over MCP: one tool, named after the agent, that runs it.

The tool takes `{"task": "..."}` and answers with the agent's final text (and
`structuredContent` with an `output_type`), in a fresh session of the
runtime, tool progress sent as MCP progress; a run that does not complete is
an `isError` result. A client that asks for a task gets one at once, its id
the session's (`taskloom.runtime.ServedRuns`, as for A2A); a call waiting
for approval is also one of the task's `inputRequests` (2026-07-28). Over
HTTP a body past `max_body` bytes is answered 413, and with a bearer token
every request needs it (else 401).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import re
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from .._serving import MAX_JSONRPC_BODY, guard, jsonrpc_error, listen, serve_on
from ..agent import Agent
from ..errors import ConfigurationError
from ..events import Event, ToolProgress
from ..results import PendingCall, RunResult, RunStatus
from ..runtime import Runtime, ServedRuns, ServedState, ServedTask
from ._tasks import TASKS_EXTENSION, TaskIdParams, UpdateParams

_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the agent should do."}},
    "required": ["task"],
    "additionalProperties": False,
}


def agent_server(agent: Agent, runtime: Runtime, *, tasks: bool = True) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) offering `agent` as one
    tool, each call a fresh session of `runtime`; with `tasks`, task-capable
    (the task id is the session's, so a restarted server answers for it)."""
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
    served = ServedTasks(server, agent, runtime, lambda result: _answer(result, wrapped))
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
        dump = getattr(result.output, "model_dump", None)
        value = dump(mode="json") if callable(dump) else result.output
        structured = {"result": value} if wrapped else value
    text = result.text if structured is None else json.dumps(structured, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


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
    port)`, at `http://host:port/mcp` (port 0: the OS picks); `on_ready` gets
    where, once it accepts calls. Over HTTP, with `token` every request needs
    `Authorization: Bearer <token>` (a host beyond loopback needs one), and a
    body past `max_body` bytes is answered 413. The runtime (default: an
    in-memory one) is closed at the end."""
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


POLL_MS = 500
"""The polling interval suggested to clients, in milliseconds."""

MARK = "mcp_task"
"""The session metadata key that makes a session a task of this server."""

_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat().replace("+00:00", "Z")


class ServedTasks:
    """The tasks of one served agent on `server` (see the module docstring),
    which it serves: advertised, task calls answered with a task, the
    `tasks/*` requests; `answer` builds the tool's result from a finished
    run's `RunResult`."""

    def __init__(
        self,
        server: Server[Any],
        agent: Agent,
        runtime: Runtime,
        answer: Callable[[RunResult], types.CallToolResult],
    ) -> None:
        self.tool = tool = server.name
        self.answer = answer
        self._said: dict[str, str] = {}
        self.runs = ServedRuns(
            runtime,
            agent,
            lambda meta: (meta.metadata or {}).get(MARK) == tool,
            on_event=self._heard,
        )
        server.extensions[TASKS_EXTENSION] = {}
        server.middleware.append(self._middleware)
        server.add_request_handler("tasks/get", TaskIdParams, self._get)
        server.add_request_handler("tasks/result", TaskIdParams, self._result)
        server.add_request_handler("tasks/cancel", TaskIdParams, self._cancel)
        server.add_request_handler("tasks/update", UpdateParams, self._update)

    async def _middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if ctx.method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict):
                capabilities = dict(result.get("capabilities") or {})
                capabilities["tasks"] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
                result = {**result, "capabilities": capabilities}
            return result
        if ctx.method != "tools/call" or not self._wants_task(ctx):
            return await call_next(ctx)
        params = dict(ctx.params or {})
        if params.get("name") != self.tool:
            return await call_next(ctx)  # the handler says the tool is unknown
        task = (params.get("arguments") or {}).get("task")
        if not isinstance(task, str) or not task.strip():
            return await call_next(ctx)  # answered inline with what is wrong
        task_id = await self.runs.create(task, metadata={MARK: self.tool})
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return {"resultType": "task", **await self.view(task_id, True)}
        return {"task": await self.view(task_id, False)}

    def _wants_task(self, ctx: ServerRequestContext[Any, Any]) -> bool:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            capabilities = dict(ctx.meta or {}).get(_CAPABILITIES_KEY)
            if isinstance(capabilities, types.ClientCapabilities):
                return TASKS_EXTENSION in (capabilities.extensions or {})
            return isinstance(capabilities, dict) and TASKS_EXTENSION in (
                capabilities.get("extensions") or {}
            )
        return isinstance((ctx.params or {}).get("task"), dict)

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        return await self.view(params.task_id, modern, inline=modern)

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        # 2025-11-25: blocks until the task ends, then gives its result.
        while True:
            view = await self.view(params.task_id, True, inline=True)
            if view["status"] in ("completed", "cancelled"):
                break
            await asyncio.sleep(POLL_MS / 1000)
        if view["status"] == "cancelled":
            raise MCPError(code=types.INVALID_PARAMS, message="the task was cancelled")
        return view["result"]

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        await self._read(params.task_id)
        await self.runs.cancel(params.task_id, "cancelled by the MCP client")
        view = await self.view(params.task_id, False)
        return {} if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else view

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> Any:
        # An answer to one of the task's inputRequests decides that parked
        # call; anything else (an unknown key, a `cancel`) leaves it waiting.
        responses = params.input_responses or {}
        decisions = {k: d for k, r in responses.items() if (d := _decision(r)) is not None}
        if decisions:
            await self.runs.decide(await self._read(params.task_id), decisions)
        await self.view(params.task_id, False)
        return {}

    def _heard(self, task_id: str, event: Event) -> None:
        if isinstance(event, ToolProgress):
            origin = f"[{event.origin}] " if event.origin else ""
            self._said[task_id] = origin + event.message

    async def _read(self, task_id: str) -> ServedTask:
        found = await self.runs.read(task_id)
        if found is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"Failed to retrieve task: Task not found ({task_id})",
            )
        return found

    async def view(self, task_id: str, modern: bool, *, inline: bool = False) -> dict[str, Any]:
        """The task as its session's log tells it (see `ServedRuns.read`), as
        `tasks/get` answers it in the revision's spelling; with `inline`, its
        `result` (dumped) or `inputRequests` too (2026-07-28)."""
        task = await self._read(task_id)
        message = self._said.get(task_id)
        extra: dict[str, Any] = {}
        match task.state:
            case ServedState.WORKING:
                status = "working"
            case ServedState.INPUT_REQUIRED:
                status = "input_required"
                asked = [f"{c.name} ({c.id})" for c in task.waiting]
                asked += [f"{q.message!r} ({q.id})" for q in task.questions]
                message = f"session {task_id} waits for a person to approve: " + ", ".join(asked)
                extra["inputRequests"] = {c.id: _approval_request(c) for c in task.waiting}
            case ServedState.CANCELLED:
                why = task.result.error if task.result is not None else None
                status, message = "cancelled", why or "cancelled"
            case _ if task.result is None:
                # Cut off before its run wrote its input: nothing is left to run.
                status = "failed"
                message = "the server stopped before the task's run began; send the request again"
            case _:
                status = "completed"
                answer = self.answer(task.result)
                extra["result"] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        out: dict[str, Any] = {
            "taskId": task_id,
            "status": status,
            "createdAt": _iso(task.created_at),
            "lastUpdatedAt": _iso(task.updated_at),
            "ttlMs" if modern else "ttl": None,
            "pollIntervalMs" if modern else "pollInterval": POLL_MS,
        }
        if message:
            out["statusMessage"] = message
        return {**out, **extra} if inline else out

    async def close(self) -> None:
        """Stop the runs of this process (their tasks go on after a restart)."""
        await self.runs.close()


_APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve this call"},
        "note": {"type": "string", "title": "A note for the agent (optional)"},
    },
    "required": ["approve"],
}


def _approval_request(call: PendingCall) -> dict[str, Any]:
    """A parked call as the elicitation a client's person answers."""
    arguments = json.dumps(dict(call.arguments), ensure_ascii=False, sort_keys=True)
    return {
        "method": "elicitation/create",
        "params": {
            "message": f"Approve the call {call.name}({arguments})?",
            "requestedSchema": _APPROVAL_SCHEMA,
        },
    }


def _decision(response: object) -> tuple[bool, str | None] | None:
    """(approved, note) from an elicitation answer; None to leave the call waiting."""
    if not isinstance(response, dict):
        return None
    action = response.get("action")
    raw = response.get("content")
    content: dict[str, Any] = raw if isinstance(raw, dict) else {}
    note = content.get("note") if isinstance(content.get("note"), str) else None
    if action == "decline":
        return False, note or "declined by the client's person"
    if action != "accept" or not isinstance(content.get("approve"), bool):
        return None
    return content["approve"], note
