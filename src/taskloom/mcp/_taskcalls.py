"""Tool calls that run as MCP tasks, followed in the background of their session.

A call whose server runs it as a task and that does not end within the
server's `task_after` seconds answers the model at once ("started ...");
the task is followed work (`taskloom.background.Follows`, mode `mcp_task`:
its record, lease, notice and take-over are every followed work's), and its
result reaches the model as a notice at a later round boundary, once. This
module keeps what is MCP's: polling, cancelling, and questions.

A task that needs input (`input_required`) waits for a person: each question
(2026-07-28: the `inputRequests` of `tasks/get`; 2025-11-25: the
`elicitation/create` requests the server sends while the client waits on
`tasks/result`) is written to the session's log as an `InputRequest`, which
`Session.pending_input()` lists; the `InputAnswer` a person gives from any
process (`Session.answer`, `taskloom answer`, the console) is sent by
whoever polls the task (`tasks/update`, or as the answer to the server's
request). Sending is driven by the log, so a poller taken up after a crash
sends what the dead one did not; the task's end closes its questions
(`MCPTaskEnded`). A server gets `MAX_QUESTIONS` questions per task and
`MAX_ENTRIES_PER_POLL` per answer, and must answer about the task it was
asked about; otherwise the task fails with a message saying so.

A stop of the run that started a task, and a delete of its session, cancel
it on the server (`tasks/cancel`); closing the runtime only stops polling
here (the task goes on, and the next run takes it up).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types

from .._redact import redact, redact_value
from ..backends import SessionMeta
from ..background import (
    MAX_QUESTIONS,
    MAX_TEXT_BYTES,
    BackgroundService,
    Follows,
    RunStart,
    bounded_text,
)
from ..entries import Entry, InputRequest
from ..errors import FollowRefused
from ..log import input_id_for, read_inputs
from ..runtime import Runtime
from ..tools import ToolContext, ToolError, ToolOutput
from ._connection import Connection
from ._results import to_output
from ._taskfollow import (
    ANSWER_POLL,
    REQUEST_TIMEOUT,
    TaskFollow,
    Waiting,
    clamp_poll,
    duration,
    progress,
    same_task,
    sleep_or_wake,
    task_output,
)
from ._tasks import TaskState

if TYPE_CHECKING:
    from ._server import MCPServer

__all__ = ["KIND", "TaskCalls"]

logger = logging.getLogger("taskloom.mcp")

KIND = "mcp_task"
"""The mode (and activity kind) of a tool call running as an MCP task."""

CANCEL_GRACE = 5.0
"""Seconds `close()` gives the `tasks/cancel`s of calls cut off while they
waited inline."""


class TaskCalls:
    """The MCP tasks of one runtime's sessions (`TaskCalls.of(runtime)`)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.service = BackgroundService.of(runtime)
        self.follows = Follows.of(runtime)
        self.servers: dict[str, MCPServer] = {}
        """Servers this runtime has listed tools of, by key: whom a task taken
        up again is polled on."""
        self._cancels: set[asyncio.Task[None]] = set()
        """`tasks/cancel`s sent for calls cut off while they waited inline."""
        self.waiting: dict[tuple[str, str], Waiting] = {}
        """Followed tasks by (server key, task id): whose questions a server's
        request is (2025-11-25)."""
        self.service.on_run_start(self.resume)
        self.follows.register(KIND, "mcp", self._followed)

    @classmethod
    def of(cls, runtime: Runtime) -> TaskCalls:
        """The runtime's instance (made on first use)."""
        return runtime.service(cls, cls)

    def know(self, server: MCPServer) -> None:
        """Remember `server`, so tasks started on it can be polled from here."""
        self.servers.setdefault(server.key, server)

    # ------------------------------------------------------------ calling

    async def call(
        self,
        server: MCPServer,
        connection: Connection,
        remote: str,
        arguments: dict[str, Any],
        ctx: ToolContext,
        wait: float,
        report: Callable[[float, float | None, str | None], Awaitable[None]],
    ) -> ToolOutput:
        """Call `remote` as a task; its result if it ends within `wait`
        seconds, else followed work the model is told about."""
        self.know(server)
        started = await connection.start_task(
            remote, arguments, ttl=server.task_ttl, timeout=server.timeout
        )
        if isinstance(started, types.CallToolResult):
            return to_output(started)
        state = started
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        said = state.message
        task_id = state.task_id
        try:
            while not state.ended and loop.time() < deadline:
                if ctx.stop.is_set:
                    await self.cancel_quietly(connection, state.task_id)
                    reason = f" ({ctx.stop.reason})" if ctx.stop.reason else ""
                    raise ToolError(f"cancelled: the run was asked to stop{reason}")
                pause = min(clamp_poll(state.poll), max(0.0, deadline - loop.time()))
                await _sleep_or_stop(pause, ctx)
                if loop.time() >= deadline and not ctx.stop.is_set:
                    break
                state = same_task(
                    await connection.get_task(state.task_id, timeout=server.timeout), task_id
                )
                if state.message and state.message != said:
                    said = state.message
                    ctx.progress(
                        redact(bounded_text(state.message), server.secrets),
                        task_id=state.task_id,
                        status=state.status,
                    )
                if state.status == "input_required":
                    break  # a person answers: that is background work
        except FollowRefused as exc:
            self._cancel_later(connection, task_id)
            raise ToolError(f"{remote!r} (MCP task {task_id}): {exc}") from None
        except asyncio.CancelledError:
            # Cut off while waited for here (the run's deadline, or the run
            # itself cancelled): the task is in no log, so nobody would ever
            # poll it again. It is cancelled on the server, not left running;
            # in the background, so that the cut is not delayed by it.
            self._cancel_later(connection, task_id)
            raise
        if state.ended:
            return task_output(server, remote, state)
        return await self._background(server, connection, remote, state, ctx)

    async def _background(
        self,
        server: MCPServer,
        connection: Connection,
        remote: str,
        state: TaskState,
        ctx: ToolContext,
    ) -> ToolOutput:
        record = {
            "server": server.key,
            "tool": remote,
            "task_id": state.task_id,
            "created_at": state.created_at or time.time(),
            "ttl": state.ttl,
            "poll": state.poll,
            "call_id": ctx.call_id,
        }
        follow = TaskFollow(self, server, connection, ctx.emit)
        # The task is in the log (the child's record) before it is followed:
        # a crash in between leaves a task the next run takes up.
        aid = await self.follows.begin(
            ctx,
            follow,
            mode=KIND,
            name=remote,
            task=f"on MCP server {server.name} (task {state.task_id})",
            record=record,
            child_id=f"{KIND}-{uuid.uuid4().hex[:12]}",
        )
        ttl = f"; the server keeps it {duration(state.ttl)}" if state.ttl else ""
        message = bounded_text(state.message) if state.message else ""
        return ToolOutput(
            f"started {aid}: {remote!r} runs on MCP server {server.name!r} as task "
            f"{state.task_id} ({state.status}{': ' + message if message else ''}"
            f"{ttl}). Its result arrives as a background notice when it ends."
        )

    async def resume(self, start: RunStart) -> None:
        """Follow again the session's MCP tasks that no live process follows
        (called at the first boundary of every run)."""
        await self.follows.resume(start, KIND, self._followed)

    def _followed(self, meta: SessionMeta, record: Mapping[str, Any] | None) -> TaskFollow | None:
        server = self.servers.get(str((record or {}).get("server", "")))
        if server is None:
            return None  # not among this runtime's servers: left for one that has it
        from ._server import MCPConnections

        connection = MCPConnections.of(self.runtime).connection(server)
        return TaskFollow(self, server, connection, None)

    # ------------------------------------------------------------ questions

    async def question(
        self,
        waiting: Waiting,
        key: str,
        request: dict[str, Any],
        emit: Callable[[Any], None] | None,
    ) -> dict[str, Any] | None:
        """Log question `key` (once); its answer as the server takes it, once
        the log has one."""
        session_id = waiting.session_id
        input_id = input_id_for(waiting.activity_id, key)
        asked, answered = read_inputs(await self.runtime.store.load(session_id))
        if input_id not in asked:
            if len(json.dumps(request, default=str)) > MAX_TEXT_BYTES:
                raise FollowRefused(
                    f"the MCP server asked a question of more than {MAX_TEXT_BYTES} bytes"
                )
            if sum(r.activity_id == waiting.activity_id for r in asked.values()) >= MAX_QUESTIONS:
                raise FollowRefused(
                    f"the MCP server asked more than {MAX_QUESTIONS} questions;"
                    " the task was given up"
                )
            server = waiting.server
            # What the server asks is stored and shown: without what it was sent.
            request = redact_value(request, server.secrets)
            question = InputRequest(
                input_id,
                waiting.activity_id,
                key,
                request,
                f"MCP server {server.name!r}, tool {waiting.tool!r}, task {waiting.task_id}",
                time.time(),
            )
            await self.runtime.store.append(session_id, Entry.of(question))
            message = str((request.get("params") or {}).get("message", ""))
            logger.info("MCP task %s asks a person (%s): %s", waiting.task_id, input_id, message)
            progress(
                emit,
                waiting,
                f"asks a person ({input_id}): {message}",
                {"status": "input_required", "input_id": input_id},
            )
        waiting.asked = True
        answer = answered.get(input_id)
        if answer is None:
            return None
        result: dict[str, Any] = {"action": answer.action}
        if answer.content is not None:
            result["content"] = answer.content
        return result

    def asker(self, server_key: str) -> Callable[[str, dict[str, Any]], Awaitable[Any]]:
        async def ask(task_id: str, request: dict[str, Any]) -> Any:
            waiting = self.waiting.get((server_key, task_id))
            if waiting is None:
                return types.ErrorData(
                    code=types.INVALID_REQUEST,
                    message=f"taskloom polls no task {task_id} of this server",
                )
            return await self._asked(waiting, request)

        return ask

    async def _asked(self, waiting: Waiting, request: dict[str, Any]) -> Any:
        """A 2025-11-25 server's question: logged, and answered once a person
        did. Its key is a digest of the question, so the same question sent
        again (after a crash of this process) is the same; asked again after
        this process answered it, it is a new one."""
        digest = hashlib.sha256(
            json.dumps(request, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()[:16]
        key, n = digest, 0
        while input_id_for(waiting.activity_id, key) in waiting.delivered:
            n += 1
            key = f"{digest}-{n}"
        input_id = input_id_for(waiting.activity_id, key)
        while True:
            if self.waiting.get((waiting.server.key, waiting.task_id)) is not waiting:
                # Nobody polls the task here any more: the next poller asks again.
                return types.ErrorData(code=types.INTERNAL_ERROR, message="no longer polled")
            try:
                answer = await self.question(waiting, key, request, None)
            except FollowRefused as exc:
                # The follower fails the task; the server is told no.
                waiting.refused = waiting.refused or exc
                waiting.wake.set()
                return types.ErrorData(code=types.INVALID_REQUEST, message=str(exc))
            if answer is not None:
                waiting.delivered.add(input_id)
                return types.ElicitResult.model_validate(answer)
            waiting.wake.clear()
            await sleep_or_wake(ANSWER_POLL, waiting.wake)

    # ------------------------------------------------------------ cancelling

    def _cancel_later(self, connection: Connection, task_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self.cancel_quietly(connection, task_id))
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def cancel_quietly(self, connection: Connection, task_id: str) -> None:
        try:
            await asyncio.shield(connection.cancel_task(task_id, timeout=REQUEST_TIMEOUT))
        except Exception as exc:
            logger.info("cancelling MCP task %s failed: %s", task_id, exc)

    async def close(self) -> None:
        """Let the `tasks/cancel`s of cut-off calls go out before the
        connections close, within a bound (a server that does not answer is
        not waited for). Followed tasks go on; the next run takes them up."""
        if self._cancels:
            await asyncio.wait(set(self._cancels), timeout=CANCEL_GRACE)


async def _sleep_or_stop(seconds: float, ctx: ToolContext) -> None:
    if seconds <= 0:
        return
    stopped = asyncio.ensure_future(ctx.stop.wait())
    try:
        await asyncio.wait({stopped}, timeout=seconds)
    finally:
        stopped.cancel()
