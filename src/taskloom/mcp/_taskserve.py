"""A served agent's calls as MCP tasks (the server side of `_tasks`).

A client that asks for a task (`params.task` on 2025-11-25, the tasks
extension in the request's capabilities on 2026-07-28) gets one at once: a
fresh session of the serving runtime, whose id is the task id, running the
agent in the background. Run to task is `taskloom.runtime.ServedRuns` (as
for `taskloom a2a serve`): every answer is read from the session's log, so
a server restarted on the same store answers for an earlier process's tasks
and runs on what a restart cut off.

Statuses: `working`; `completed` once the run ended (a run that did not
complete is a completed task with an `isError` result, as inline);
`cancelled` after `tasks/cancel` (within 2 s, for good); `input_required`
while the run waits for a person to approve a call (decided anywhere, the
run resumes by itself). On 2026-07-28 each waiting call is also one of the
task's `inputRequests` (an `elicitation/create` asking `approve` and an
optional `note`), which the client's person decides with `tasks/update`.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..agent import Agent
from ..events import Event, ToolProgress
from ..results import PendingCall, RunResult
from ..runtime import Runtime, ServedRuns, ServedState, ServedTask
from ._tasks import TASKS_EXTENSION, TaskIdParams, UpdateParams

__all__ = ["POLL_MS", "ServedTasks"]

POLL_MS = 500
"""The polling interval suggested to clients, in milliseconds."""

MARK = "mcp_task"
"""The session metadata key that makes a session a task of this server."""

_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat().replace("+00:00", "Z")


class ServedTasks:
    """The tasks of one served agent (see the module docstring); `answer`
    builds the tool's result from a finished run's `RunResult`."""

    def __init__(
        self,
        agent: Agent,
        runtime: Runtime,
        tool: str,
        answer: Callable[[RunResult], types.CallToolResult],
    ) -> None:
        self.tool = tool
        self.answer = answer
        self._said: dict[str, str] = {}
        self.runs = ServedRuns(
            runtime,
            agent,
            lambda meta: (meta.metadata or {}).get(MARK) == tool,
            on_event=self._heard,
        )

    def install(self, server: Server[Any]) -> None:
        """Serve tasks on `server`: advertise them, answer task calls with a
        task, and serve the `tasks/*` requests."""
        server.extensions[TASKS_EXTENSION] = {}
        server.middleware.append(self._middleware)
        server.add_request_handler("tasks/get", TaskIdParams, self._get)
        server.add_request_handler("tasks/result", TaskIdParams, self._result)
        server.add_request_handler("tasks/cancel", TaskIdParams, self._cancel)
        server.add_request_handler("tasks/update", UpdateParams, self._update)

    # ------------------------------------------------------------ the wire

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
        view = await self.view(await self.runs.create(task, metadata={MARK: self.tool}))
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return {"resultType": "task", **_wire(view, True)}
        return {"task": _wire(view, False)}

    def _wants_task(self, ctx: ServerRequestContext[Any, Any]) -> bool:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            meta: dict[str, Any] = dict(ctx.meta or {})
            capabilities = meta.get(_CAPABILITIES_KEY)
            if isinstance(capabilities, types.ClientCapabilities):
                extensions = capabilities.extensions or {}
            elif isinstance(capabilities, dict):
                extensions = capabilities.get("extensions") or {}
            else:
                extensions = {}
            return TASKS_EXTENSION in extensions
        return isinstance((ctx.params or {}).get("task"), dict)

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        view = await self.view(params.task_id)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            out = _wire(view, True)
            if view["status"] == "completed":
                out["result"] = view["result"].model_dump(
                    by_alias=True, mode="json", exclude_none=True
                )
            if view["status"] == "input_required":
                out["inputRequests"] = view["input_requests"]
            return out
        return _wire(view, False)

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        # 2025-11-25: blocks until the task ends, then gives its result.
        while True:
            view = await self.view(params.task_id)
            if view["status"] in ("completed", "cancelled"):
                break
            await asyncio.sleep(POLL_MS / 1000)
        if view["status"] == "cancelled":
            raise MCPError(code=types.INVALID_PARAMS, message="the task was cancelled")
        result: types.CallToolResult = view["result"]
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        await self._read(params.task_id)
        await self.runs.cancel(params.task_id, "cancelled by the MCP client")
        view = await self.view(params.task_id)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return {}
        return _wire(view, False)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> Any:
        # An answer to one of the task's inputRequests decides that parked
        # call; anything else (an unknown key, a `cancel`) leaves it waiting.
        responses = params.input_responses or {}
        decisions = {k: d for k, r in responses.items() if (d := _decision(r)) is not None}
        if decisions:
            await self.runs.decide(await self._read(params.task_id), decisions)
        await self.view(params.task_id)
        return {}

    # ------------------------------------------------------------ tasks

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

    async def view(self, task_id: str) -> dict[str, Any]:
        """The task as its session's log tells it (see `ServedRuns.read`)."""
        task = await self._read(task_id)
        view: dict[str, Any] = {
            "task_id": task_id,
            "created_at": _iso(task.created_at),
            "updated_at": _iso(task.updated_at),
            "message": self._said.get(task_id),
        }
        match task.state:
            case ServedState.WORKING:
                return {**view, "status": "working"}
            case ServedState.INPUT_REQUIRED:
                asked = [f"{c.name} ({c.id})" for c in task.waiting]
                asked += [f"{q.message!r} ({q.id})" for q in task.questions]
                return {
                    **view,
                    "status": "input_required",
                    "message": f"session {task_id} waits for a person to approve: "
                    + ", ".join(asked),
                    "input_requests": {c.id: _approval_request(c) for c in task.waiting},
                }
            case ServedState.CANCELLED:
                why = task.result.error if task.result is not None else None
                return {**view, "status": "cancelled", "message": why or "cancelled"}
        if task.result is None:
            # Cut off before its run wrote its input: nothing is left to run.
            why = "the server stopped before the task's run began; send the request again"
            return {**view, "status": "failed", "message": why}
        return {**view, "status": "completed", "result": self.answer(task.result)}

    async def close(self) -> None:
        """Stop the runs of this process (their tasks go on after a restart)."""
        await self.runs.close()


def _wire(view: dict[str, Any], modern: bool) -> dict[str, Any]:
    """The task as `tasks/get` answers it in the revision's spelling."""
    out: dict[str, Any] = {
        "taskId": view["task_id"],
        "status": view.get("status", "working"),
        "createdAt": view["created_at"],
        "lastUpdatedAt": view["updated_at"],
        "ttlMs" if modern else "ttl": None,
        "pollIntervalMs" if modern else "pollInterval": POLL_MS,
    }
    if view.get("message"):
        out["statusMessage"] = view["message"]
    return out


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
