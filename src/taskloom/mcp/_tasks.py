"""MCP Tasks on the wire, both revisions, for the client.

2025-11-25: the server declares `capabilities.tasks.requests.tools.call`
and each tool its `execution.taskSupport`; a call with `params.task` gets
`{"task": {...}}`; `tasks/get` gives the status, `tasks/result` the result.
2026-07-28 (the tasks extension): the client declares the extension, the
server decides per call (`{"resultType": "task", ...}`), and `tasks/get`
carries the result inline. The SDK does not dispatch `tasks/*`: the task
answer is claimed through a `ClientExtension`, requests go by `send_request`.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import mcp_types as types
from mcp.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import SerializeAsAny

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The identifier of the tasks extension (2026-07-28)."""

TERMINAL = frozenset({"completed", "failed", "cancelled"})
"""Task statuses after which nothing changes."""

RELATED_TASK = "io.modelcontextprotocol/related-task"
"""The `_meta` key by which a 2025-11-25 server names the task a request of
its belongs to."""


class _Task(types.Result):  # a 2026-07-28 task
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class ClaimedTask(_Task):
    """A 2026-07-28 `CreateTaskResult`: a task in place of a tool result."""

    result_type: Literal["task"] = "task"
    status: str = "working"


class _DetailedTask(_Task):
    """A 2026-07-28 `tasks/get` answer: the task, its outcome or questions inline."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any] | None = None


class _TaskRequest(
    types.Request[TaskIdParams, Literal["tasks/get", "tasks/cancel", "tasks/update"]]
):
    params: SerializeAsAny[TaskIdParams]  # an `UpdateParams` whole
    # 2026-07-28 over HTTP: `Mcp-Name` carries the task id, for routing.
    name_param: ClassVar[str | None] = "taskId"


class _TaskResult(types.Request[TaskIdParams, Literal["tasks/result"]]):
    method: Literal["tasks/result"] = "tasks/result"
    params: TaskIdParams


class _Ack(types.Result):
    """Any answer (the acknowledgement of `tasks/cancel`, which differs by revision)."""


@dataclass(frozen=True, slots=True)
class TaskState:
    """What a server said of a task, in either revision's spelling: `poll` and
    `ttl` in seconds (None: not said, or unlimited), `created_at` a Unix
    time; `result` once it completed, `error` once it failed;
    `input_requests` what a 2026-07-28 server asks while `input_required`
    (key: `{"method": ..., "params": ...}`, answered with `update_task`)."""

    task_id: str
    status: str
    message: str | None = None
    poll: float | None = None
    ttl: float | None = None
    created_at: float | None = None
    result: types.CallToolResult | None = None
    error: str | None = None
    input_requests: dict[str, Any] | None = None

    @property
    def ended(self) -> bool:
        """Whether the task reached a terminal status."""
        return self.status in TERMINAL


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else max(0.0, ms / 1000)


def _instant(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _error_text(error: dict[str, Any] | None) -> str:
    if not error:
        return "the task failed without saying why"
    message = error.get("message") or "no message"
    code = error.get("code")
    return f"{message} (JSON-RPC error {code})" if code is not None else str(message)


def _modern(client: Client) -> bool:
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS


def _state(task: _Task | types.Task) -> TaskState:
    """A task in either revision's spelling (both in milliseconds)."""
    if isinstance(task, _Task):
        poll, ttl = task.poll_interval_ms, task.ttl_ms
    else:
        poll, ttl = task.poll_interval, task.ttl
    return TaskState(
        task.task_id,
        task.status,
        task.status_message,
        _seconds(poll),
        _seconds(ttl),
        _instant(task.created_at),
    )


async def _resolve_inline(claim: ClaimedTask, ctx: ClaimContext) -> types.CallToolResult:
    """A task the server made of an inline call: waited for here."""
    import anyio

    state = _state(claim)
    while True:
        state = await _get(ctx.session, state.task_id, modern=True)
        if state.ended:
            return _final(state)
        await anyio.sleep(state.poll if state.poll is not None else 1.0)


def _final(state: TaskState) -> types.CallToolResult:
    if state.result is not None:
        return state.result
    if state.status == "cancelled":
        text = "the server cancelled the task" + (f": {state.message}" if state.message else "")
    else:
        text = state.error or state.message or "the task failed"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class TasksClient(ClientExtension):
    """The client side of the 2026-07-28 tasks extension, for
    `mcp.client.Client(..., extensions=[TasksClient()])`: a server may then
    answer a tool call with a task, which `client.call_tool` waits for while
    `start_task` returns the task itself."""

    identifier = TASKS_EXTENSION

    def claims(self) -> tuple[ResultClaim[Any], ...]:
        return (ResultClaim(result_type="task", model=ClaimedTask, resolve=_resolve_inline),)


def task_capable(client: Client, tool: types.Tool) -> bool:
    """Whether calls of `tool` may run as tasks on this connection."""
    capabilities = client.server_capabilities
    if _modern(client):
        return TASKS_EXTENSION in (capabilities.extensions or {})
    tasks = capabilities.tasks
    tools = tasks.requests.tools if tasks is not None and tasks.requests is not None else None
    if tools is None or tools.call is None:
        return False
    support = tool.execution.task_support if tool.execution is not None else None
    return support in ("optional", "required")


async def start_task(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    *,
    ttl: float | None = None,
    timeout: float | None = None,
) -> TaskState | types.CallToolResult:
    """Call tool `name` asking for a task (2026-07-28: the client needs
    `TasksClient`): its first `TaskState`, or the result when it answered at
    once. `ttl` (seconds) is asked for; `timeout` bounds the wait."""
    if _modern(client):
        answer = await client.session.call_tool(
            name, arguments, read_timeout_seconds=timeout, allow_claimed=True
        )
        if isinstance(answer, ClaimedTask):
            return _state(answer)
        if isinstance(answer, types.CallToolResult):
            return answer
        raise MCPError(types.INVALID_REQUEST, f"unexpected answer to a tool call: {answer!r}")
    params: dict[str, Any] = {"name": name, "arguments": arguments, "task": {}}
    if ttl is not None:
        params["task"]["ttl"] = int(ttl * 1000)
    raw = await _raw_request(client.session, "tools/call", params, timeout)
    if "task" in raw:
        return _state(types.CreateTaskResult.model_validate(raw).task)
    return types.CallToolResult.model_validate(raw)


async def get_task(client: Client, task_id: str, *, timeout: float | None = None) -> TaskState:
    """The task's state (`tasks/get`), with its result once completed; an
    unknown task id raises the server's `MCPError`."""
    return await _get(client.session, task_id, modern=_modern(client), timeout=timeout)


async def _get(
    session: ClientSession, task_id: str, *, modern: bool, timeout: float | None = None
) -> TaskState:
    request = _TaskRequest(method="tasks/get", params=TaskIdParams(task_id=task_id))
    if modern:
        got = await session.send_request(request, _DetailedTask, timeout)
        result = None
        if got.status == "completed" and got.result is not None:
            result = types.CallToolResult.model_validate(got.result)
        return dataclasses.replace(
            _state(got),
            result=result,
            error=_error_text(got.error) if got.status == "failed" else None,
            input_requests=got.input_requests,
        )
    task = _state(await session.send_request(request, types.GetTaskResult, timeout))
    if task.status not in ("completed", "failed"):
        return task
    # 2025-11-25 keeps the outcome apart: `tasks/result` gives the tool's
    # result, or the JSON-RPC error the task failed with.
    fetch = _TaskResult(params=TaskIdParams(task_id=task_id))
    try:
        result = await session.send_request(fetch, types.CallToolResult, timeout)
    except MCPError as exc:
        if task.status == "failed":
            return dataclasses.replace(task, error=f"{exc.message} (JSON-RPC error {exc.code})")
        raise
    return dataclasses.replace(task, result=result)


async def cancel_task(client: Client, task_id: str, *, timeout: float | None = None) -> None:
    """Ask the server to cancel the task (`tasks/cancel`); it may finish
    first all the same, so read it again to know."""
    await client.session.send_request(
        _TaskRequest(method="tasks/cancel", params=TaskIdParams(task_id=task_id)), _Ack, timeout
    )


async def _raw_request(
    session: ClientSession, method: str, params: dict[str, Any], timeout: float | None
) -> dict[str, Any]:
    # The SDK checks every `tools/call` answer against the revision's
    # `CallToolResult`, which a 2025-11-25 `CreateTaskResult` is not; so this
    # one request goes out below that check, stamped as the session stamps
    # every request. (Private parts of the SDK: kept to this one function.)
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)  # type: ignore[arg-type]
    if timeout is not None:
        opts["timeout"] = timeout
    raw: dict[str, Any] = await session._dispatcher.send_raw_request(
        method,
        data.get("params"),
        opts,  # type: ignore[arg-type]
    )
    return raw


async def update_task(
    client: Client, task_id: str, responses: dict[str, Any], *, timeout: float | None = None
) -> None:
    """Answer a 2026-07-28 task's `input_requests` (`tasks/update`): keys as
    the server named them, values the answers (an `ElicitResult` for an
    `elicitation/create`)."""
    params = UpdateParams(task_id=task_id, input_responses=responses)
    request = _TaskRequest(method="tasks/update", params=params)
    await client.session.send_request(request, _Ack, timeout)


async def fetch_result(client: Client, task_id: str) -> types.CallToolResult:
    """2025-11-25: wait on the task's result, which lets the server send its
    questions (`elicitation/create`, naming the task in `_meta`) meanwhile."""
    fetch = _TaskResult(params=TaskIdParams(task_id=task_id))
    return await client.session.send_request(fetch, types.CallToolResult, None)


def related_task(meta: Any) -> str | None:
    """The task a server's request names as its own (2025-11-25), if any."""
    if not isinstance(meta, dict):
        return None
    related = meta.get(RELATED_TASK)
    if isinstance(related, dict) and isinstance(related.get("taskId"), str):
        return str(related["taskId"])
    return None
