"""Remote A2A agents as named subagents: a task handed over the protocol.

Inline, like a `SubAgent`: the parent model calls a tool named after the
remote agent with a `task`; the remote agent sees only that task; its text
as it works reaches event subscribers tagged with its origin, and only its
final answer returns. Everything that can go wrong on the way (no agent at
the URL, a card that is not one, no answer in time, a task that failed or
was cancelled over there, an answer too long, parts that are not text)
becomes an in-band error result or a note in the answer, never an
exception out of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)

from ..delegation import DelegationTool
from ..errors import ConfigurationError
from ..events import SubagentFinished, SubagentStarted, TextDelta, origin_label
from ..tools import DEFAULT_MAX_OUTPUT_CHARS, ApprovalRule, Tool, ToolOutput, cap_output

if TYPE_CHECKING:
    from ..tools import ToolContext

__all__ = ["RemoteAgent"]

_SCHEMA = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "The complete task: the agent sees nothing else.",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}

_ENDED = {
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "was cancelled",
    TaskState.TASK_STATE_REJECTED: "rejected the task",
    TaskState.TASK_STATE_INPUT_REQUIRED: "asks for input",
    TaskState.TASK_STATE_AUTH_REQUIRED: "asks for authentication",
}


class RemoteAgent:
    """An agent served over A2A at `url`, as a subagent: `.tool()` gives a
    parent a tool named `name` that takes `task`, hands it to the remote
    agent as a new A2A task, and answers `{"answer": ..., "task_id": ...}`
    once the task completes — or an in-band error saying what went wrong.

    `timeout` bounds a whole call (a task still running then is cancelled
    over there, best effort), `connect_timeout` each connection; `token`
    is sent as `Authorization: Bearer`; the answer is capped at
    `max_answer_chars` like any tool output. `needs_approval` gates the
    delegation itself. Building one does no I/O: the card is read per call.
    """

    def __init__(
        self,
        name: str,
        url: str,
        *,
        description: str,
        token: str | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        max_answer_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        needs_approval: ApprovalRule = False,
    ) -> None:
        if not description:
            raise ConfigurationError(
                f"remote agent {name!r} needs a description: the parent model reads it"
            )
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"remote agent {name!r}: {url!r} is not an http(s) URL")
        if timeout <= 0 or connect_timeout <= 0:
            raise ConfigurationError(f"remote agent {name!r}: timeouts must be positive")
        self.name = name
        self.url = url
        self.description = description
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_answer_chars = max_answer_chars
        self.needs_approval = needs_approval
        self._token = token
        self._tool: DelegationTool | None = None

    def __repr__(self) -> str:
        # Never the token.
        return f"RemoteAgent({self.name!r}, {self.url!r})"

    def tool(self) -> Tool:
        """The delegation tool for a parent agent (built once)."""
        if self._tool is None:
            self._tool = DelegationTool(
                self.name,
                self.description,
                _SCHEMA,
                self._delegate,
                needs_approval=self.needs_approval,
            )
        return self._tool

    async def _delegate(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        task = str(arguments.get("task", "")).strip()
        if not task:
            return self._error("'task' is empty; describe the complete task for the agent")
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        timeouts = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        async with httpx.AsyncClient(headers=headers, timeout=timeouts) as http:
            try:
                client = await asyncio.wait_for(
                    create_client(self.url, ClientConfig(httpx_client=http, streaming=True)),
                    self.connect_timeout + 5,
                )
            except Exception as exc:
                return self._error(f"cannot read its agent card at {self.url}: {_why(exc)}")
            async with client:
                return await self._run(client, task, ctx)

    async def _run(self, client: Client, task: str, ctx: ToolContext) -> ToolOutput:
        watch = _Watch(self.name, ctx)
        request = SendMessageRequest(
            message=Message(
                message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=task)]
            )
        )
        try:
            async with asyncio.timeout(self.timeout):
                async for response in client.send_message(request):
                    watch.see(response, task)
        except TimeoutError:
            await _cancel(client, watch.task_id)
            watch.finish("failed", "no answer in time")
            return self._error(f"no answer within {self.timeout:g} s; the task was cancelled")
        except Exception as exc:
            watch.finish("failed", _why(exc))
            return self._error(f"the call failed: {_why(exc)}")
        except asyncio.CancelledError:
            # The parent's run was cancelled: do not leave the remote task running.
            await asyncio.shield(_cancel(client, watch.task_id))
            raise
        if not watch.task_id:
            return self._error("it answered with a message, not a task it worked on")
        try:
            # The stream tells changes; the task as the agent holds it is the whole.
            async with asyncio.timeout(self.connect_timeout + 5):
                final = await client.get_task(GetTaskRequest(id=watch.task_id))
        except Exception as exc:
            watch.finish("failed", _why(exc))
            return self._error(f"cannot read task {watch.task_id} back: {_why(exc)}")
        state = final.status.state
        said = _text(final.status.message.parts) if final.status.HasField("message") else ""
        if state != TaskState.TASK_STATE_COMPLETED:
            what = _ENDED.get(state, f"stopped in state {TaskState.Name(state)}")
            watch.finish("stopped" if state == TaskState.TASK_STATE_CANCELED else "failed", said)
            return self._error(f"task {final.id} {what}" + (f": {said}" if said else ""))
        answer = _text(part for artifact in final.artifacts for part in artifact.parts)
        if not answer.strip():
            answer = said
        answer = cap_output(answer, self.max_answer_chars)
        watch.finish("done", answer)
        return ToolOutput(json.dumps({"answer": answer, "task_id": final.id}, ensure_ascii=False))

    def _error(self, text: str) -> ToolOutput:
        return ToolOutput(f"remote agent {self.name!r} ({self.url}): {text}", is_error=True)


class _Watch:
    """The task as the stream tells it, and the events a child's would give."""

    def __init__(self, name: str, ctx: ToolContext) -> None:
        self.name = name
        self.ctx = ctx
        self.task_id = ""
        self.origin = ""

    def see(self, response: StreamResponse, task: str) -> None:
        if response.HasField("task"):
            if not self.task_id:
                self._started(response.task.id, task)
        elif response.HasField("status_update"):
            update = response.status_update
            if not self.task_id:
                self._started(update.task_id, task)
            if update.status.state == TaskState.TASK_STATE_WORKING and update.status.HasField(
                "message"
            ):
                text = _text(update.status.message.parts)
                if text:
                    self.ctx.emit(TextDelta(origin=self.origin, session_id=self.task_id, text=text))

    def _started(self, task_id: str, task: str) -> None:
        self.task_id = task_id
        self.origin = origin_label(self.name, task_id, self.ctx.origin)
        self.ctx.emit(
            SubagentStarted(
                origin=self.ctx.origin,
                session_id=self.ctx.session_id,
                child_session_id=task_id,
                name=self.name,
                task=task,
                mode="remote",
            )
        )

    def finish(self, status: str, text: str) -> None:
        if not self.task_id:
            return
        self.ctx.emit(
            SubagentFinished(
                origin=self.ctx.origin,
                session_id=self.ctx.session_id,
                child_session_id=self.task_id,
                name=self.name,
                status=status,
                summary=" ".join(text.split())[:120],
            )
        )


def _text(parts: Iterable[Part]) -> str:
    """The parts as text: data as JSON, and a file named by what it is, so
    nothing the agent sent disappears without a word."""
    pieces: list[str] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            pieces.append(json.dumps(_plain(part.data), ensure_ascii=False))
        else:
            name = part.filename or (part.url if kind == "url" else "unnamed")
            media = part.media_type or "unknown type"
            size = f", {len(part.raw)} bytes" if kind == "raw" else ""
            pieces.append(f"[a file part not shown: {name} ({media}{size})]")
    return "\n".join(pieces)


def _plain(value: Any) -> Any:
    """A protobuf `Value` as plain JSON data (whole numbers as integers)."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {k: _plain(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_plain(v) for v in value.list_value.values]
    if kind == "number_value":
        number = float(value.number_value)
        return int(number) if number.is_integer() else number
    if kind in ("string_value", "bool_value"):
        return getattr(value, kind)
    return None


async def _cancel(client: Client, task_id: str) -> None:
    if not task_id:
        return
    # Best effort: the remote agent may be gone, which is why we are here.
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            await client.cancel_task(CancelTaskRequest(id=task_id))


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"
