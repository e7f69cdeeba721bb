"""Tool calls that run as MCP tasks, followed in the background of their session.

A call whose server runs it as a task and that does not end within the
server's `task_after` seconds turns into followed work
(`taskloom.background.Follows`): the tool answers the model at once
("started ..."), and the task's result reaches it as a notice at a later
round boundary, acknowledged once the message that carried it is stored,
with the reminders every background activity has.

What makes it last is the record every followed piece of work has: a child
session of the caller's (mode `mcp_task`) whose log keeps the server's key,
the tool and the task id (`SubagentDispatched`) and, once the task ended,
its outcome (`SubagentResult`, written after the notice is pushed: the
notice id is the child's, so the result lands once). The process that polls
holds the child's lease; at the first boundary of the session's next run, in
any process that has the server among its tools, the task is polled again:
at once when its poller died on this machine, after its lease otherwise.
This module keeps only what is MCP's: polling, cancelling, and questions.

A task whose server needs input (`input_required`) waits for a person:
each question the server asks (2026-07-28: the `inputRequests` of
`tasks/get`; 2025-11-25: the `elicitation/create` requests it sends while the
client waits on `tasks/result`) is written to the session's log as an
`InputRequest`, which `Session.pending_input()` lists. A person answers from
any process (`Session.answer`, `taskloom answer`, the console): the
`InputAnswer` goes to the log, and whoever polls the task sends it to the
server (`tasks/update`, or as the answer to the server's request) and polls
on. Sending is driven by the log, so a poller taken up after a crash sends
what the dead one did not. Once such a task ended, `MCPTaskEnded` in the
session's log closes its questions. A server gets `MAX_QUESTIONS` questions
per task, `MAX_ENTRIES_PER_POLL` per answer, and must answer about the task
it was asked about; otherwise the task fails with a message saying so.

A stop of the run that started a task, and a delete of its session, cancel
it on the server (`tasks/cancel`); closing the runtime only stops polling
here (the task goes on, and the next run takes it up).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types

from ..backends import SessionMeta
from ..background import (
    MAX_ENTRIES_PER_POLL,
    MAX_TEXT_BYTES,
    BackgroundService,
    FollowJob,
    FollowRefused,
    Follows,
    NoticeStatus,
    RunStart,
    WorkResult,
    bounded_text,
)
from ..entries import Entry, InputAnswer, InputRequest, MCPTaskEnded
from ..events import ToolProgress
from ..log import input_id_for
from ..runtime import Runtime
from ..tools import ToolContext, ToolError, ToolOutput
from ._connection import Connection, TaskRefused
from ._results import to_output
from ._tasks import TaskState

if TYPE_CHECKING:
    from ._server import MCPServer

__all__ = ["KIND", "TaskCalls"]

logger = logging.getLogger("taskloom.mcp")

KIND = "mcp_task"
"""The mode (and activity kind) of a tool call running as an MCP task."""

DEFAULT_POLL = 1.0
"""Seconds between polls when the server suggests none."""

MIN_POLL = 0.05
MAX_POLL = 60.0

REQUEST_TIMEOUT = 30.0
"""Seconds one `tasks/get` or `tasks/cancel` may take."""

CANCEL_GRACE = 5.0
"""Seconds `close()` gives the `tasks/cancel`s of calls cut off while they
waited inline."""

ANSWER_POLL = 0.5
"""Seconds between looks at the log for a person's answer (an answer given in
this process wakes the poller at once)."""


@dataclass
class _Known:
    """What this process has read of one session's questions."""

    scanned: int = 0
    asked: dict[str, InputRequest] = field(default_factory=dict)
    answered: dict[str, InputAnswer] = field(default_factory=dict)


@dataclass
class _Waiting:
    """What one follower knows of its task's questions."""

    job: FollowJob
    task_id: str
    tool: str
    call_id: str
    server: MCPServer
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: set[str] = field(default_factory=set)
    """Keys answered to the server by this follower (2026-07-28)."""
    delivered: set[str] = field(default_factory=set)
    """Input ids answered to the server by this process (2025-11-25)."""
    fetch: asyncio.Task[types.CallToolResult] | None = None
    """The open `tasks/result` (2025-11-25) the server sends its questions on."""
    refused: FollowRefused | None = None
    """A bound the server's questions broke (2025-11-25, where they come apart)."""

    @property
    def session_id(self) -> str:
        return self.job.session_id

    @property
    def activity_id(self) -> str:
        return self.job.child_id


class TaskCalls:
    """The MCP tasks of one runtime's sessions (`TaskCalls.of(runtime)`)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.service = BackgroundService.of(runtime)
        self.follows = Follows.of(runtime)
        self.servers: dict[str, MCPServer] = {}
        """Servers this runtime has listed tools of, by key: whom a task taken
        up again is polled on."""
        self._known: dict[str, _Known] = {}
        self._cancels: set[asyncio.Task[None]] = set()
        """`tasks/cancel`s sent for calls cut off while they waited inline."""
        self._waiting: dict[tuple[str, str], _Waiting] = {}
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
                    await self._cancel_quietly(connection, state.task_id)
                    reason = f" ({ctx.stop.reason})" if ctx.stop.reason else ""
                    raise ToolError(f"cancelled: the run was asked to stop{reason}")
                pause = min(_poll_of(state), max(0.0, deadline - loop.time()))
                await _sleep_or_stop(pause, ctx)
                if loop.time() >= deadline and not ctx.stop.is_set:
                    break
                state = _same_task(
                    await connection.get_task(state.task_id, timeout=server.timeout), task_id
                )
                if state.message and state.message != said:
                    said = state.message
                    ctx.progress(
                        bounded_text(state.message), task_id=state.task_id, status=state.status
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
            return _output(server, remote, state)
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
        follow = _TaskFollow(self, server, connection, ctx.emit)
        # The task is in the log (the child's record) before it is followed:
        # a crash in between leaves a task the next run takes up.
        aid = await self.follows.begin(
            ctx,
            follow,
            mode=KIND,
            name=remote,
            task=f"{remote} on MCP server {server.name} (task {state.task_id})",
            description=f"{remote} on MCP server {server.name} (task {state.task_id})",
            record=record,
            metadata={"server": server.key, "tool": remote, "task_id": state.task_id},
            child_id=f"{KIND}-{uuid.uuid4().hex[:12]}",
        )
        ttl = f"; the server keeps it {_duration(state.ttl)}" if state.ttl else ""
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

    def _followed(self, meta: SessionMeta, record: Mapping[str, Any] | None) -> _TaskFollow | None:
        server = self.servers.get(str((record or meta.metadata).get("server", "")))
        if server is None:
            return None  # not among this runtime's servers: left for one that has it
        from ._server import MCPConnections

        connection = MCPConnections.of(self.runtime).connection(server)
        return _TaskFollow(self, server, connection, None)

    # ------------------------------------------------------------ questions

    async def _scan(self, session_id: str) -> _Known:
        known = self._known.setdefault(session_id, _Known())
        entries = await self.runtime.store.load(session_id, after=known.scanned or None)
        for entry in entries:
            known.scanned = max(known.scanned, entry.position)
            payload = entry.payload
            if isinstance(payload, InputRequest):
                known.asked.setdefault(payload.input_id, payload)
            elif isinstance(payload, InputAnswer):
                known.answered.setdefault(payload.input_id, payload)
        return known

    async def _question(
        self,
        waiting: _Waiting,
        key: str,
        request: dict[str, Any],
        emit: Callable[[Any], None] | None,
    ) -> dict[str, Any] | None:
        """Log question `key` (once); its answer as the server takes it, once
        the log has one."""
        session_id = waiting.session_id
        input_id = input_id_for(waiting.activity_id, key)
        known = await self._scan(session_id)
        if input_id not in known.asked:
            if len(json.dumps(request, default=str)) > MAX_TEXT_BYTES:
                raise FollowRefused(
                    f"the MCP server asked a question of more than {MAX_TEXT_BYTES} bytes"
                )
            waiting.job.asked()
            server = waiting.server
            asked = InputRequest(
                input_id,
                waiting.activity_id,
                key,
                request,
                f"MCP server {server.name!r}, tool {waiting.tool!r}, task {waiting.task_id}",
                time.time(),
            )
            await self.runtime.store.append(session_id, Entry.of(asked))
            known.asked[input_id] = asked
            message = str((request.get("params") or {}).get("message", ""))
            logger.info("MCP task %s asks a person (%s): %s", waiting.task_id, input_id, message)
            _progress(
                emit,
                waiting,
                f"asks a person ({input_id}): {message}",
                {"status": "input_required", "input_id": input_id},
            )
        answer = known.answered.get(input_id)
        if answer is None:
            return None
        result: dict[str, Any] = {"action": answer.action}
        if answer.content is not None:
            result["content"] = answer.content
        return result

    def _asker(self, server_key: str) -> Callable[[str, dict[str, Any]], Awaitable[Any]]:
        async def ask(task_id: str, request: dict[str, Any]) -> Any:
            waiting = self._waiting.get((server_key, task_id))
            if waiting is None:
                return types.ErrorData(
                    code=types.INVALID_REQUEST,
                    message=f"taskloom polls no task {task_id} of this server",
                )
            return await self._asked(waiting, request)

        return ask

    async def _asked(self, waiting: _Waiting, request: dict[str, Any]) -> Any:
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
            if self._waiting.get((waiting.server.key, waiting.task_id)) is not waiting:
                # Nobody polls the task here any more: the next poller asks again.
                return types.ErrorData(code=types.INTERNAL_ERROR, message="no longer polled")
            try:
                answer = await self._question(waiting, key, request, None)
            except FollowRefused as exc:
                # The follower fails the task; the server is told no.
                waiting.refused = waiting.refused or exc
                waiting.wake.set()
                return types.ErrorData(code=types.INVALID_REQUEST, message=str(exc))
            if answer is not None:
                waiting.delivered.add(input_id)
                return types.ElicitResult.model_validate(answer)
            waiting.wake.clear()
            await _sleep_or_wake(ANSWER_POLL, waiting.wake)

    # ------------------------------------------------------------ cancelling

    def _cancel_later(self, connection: Connection, task_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._cancel_quietly(connection, task_id))
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def _cancel_quietly(self, connection: Connection, task_id: str) -> None:
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


class _TaskFollow:
    """Follows one MCP task (`taskloom.background.Followed`)."""

    def __init__(
        self,
        calls: TaskCalls,
        server: MCPServer,
        connection: Connection,
        emit: Callable[[Any], None] | None,
    ) -> None:
        self.calls = calls
        self.server = server
        self.connection = connection
        self.emit = emit

    async def cancel(self, record: Mapping[str, Any]) -> None:
        """Cancel the task on its server (`tasks/cancel`)."""
        await self.calls._cancel_quietly(self.connection, str(record["task_id"]))

    async def follow(self, job: FollowJob) -> WorkResult:
        """Poll the task to its end, passing questions and answers on."""
        record = job.record or {}
        server, connection, calls = self.server, self.connection, self.calls
        task_id, tool = str(record["task_id"]), str(record.get("tool", ""))
        created_at = float(record.get("created_at") or time.time())
        ttl_kept = record.get("ttl")
        poll = record.get("poll")
        said: str | None = None
        failures = 0
        waiting = _Waiting(job, task_id, tool, str(record.get("call_id", "")), server)
        calls._waiting[(server.key, task_id)] = waiting
        connection.asker = calls._asker(server.key)
        unwatch = calls.runtime.watch(job.session_id, waiting.wake.set)
        try:
            while True:
                if waiting.refused is not None:
                    raise waiting.refused
                try:
                    state = _same_task(
                        await connection.get_task(task_id, timeout=REQUEST_TIMEOUT), task_id
                    )
                    if state.status == "input_required" and not state.ended:
                        state = await self._input(waiting, state)
                except TaskRefused as exc:
                    # A server answers an unknown task id with an error: it
                    # forgot the task (expired, or restarted without it).
                    result: WorkResult = NoticeStatus.FAILED, _forgotten(server, tool, task_id, exc)
                    break
                except ToolError as exc:
                    failures += 1
                    if failures >= server.limits.give_up_after:
                        result = (
                            NoticeStatus.FAILED,
                            (
                                f"{tool!r} (MCP task {task_id}): gave up after "
                                f"{failures} failed polls: {exc.message}"
                            ),
                        )
                        break
                    await asyncio.sleep(server.limits.poll_pause(failures))
                    continue
                failures = 0
                if state.poll is not None:
                    poll = state.poll
                if state.message and state.message != said:
                    said = state.message
                    _progress(
                        self.emit, waiting, bounded_text(state.message), {"status": state.status}
                    )
                if state.ended:
                    result = _outcome(server, tool, state)
                    break
                ttl = state.ttl if state.ttl is not None else ttl_kept
                if ttl is not None and time.time() > created_at + float(ttl):
                    result = (
                        NoticeStatus.TIMED_OUT,
                        (
                            f"{tool!r} (MCP task {task_id}) on MCP server "
                            f"{server.name!r} expired: it was still {state.status} when its "
                            f"time to live ({_duration(float(ttl))}) ran out"
                        ),
                    )
                    break
                await _sleep_or_wake(_clamp(poll), waiting.wake)
        except FollowRefused as exc:
            await calls._cancel_quietly(connection, task_id)
            result = NoticeStatus.FAILED, f"{tool!r} (MCP task {task_id}): {exc}"
        except asyncio.CancelledError:
            if job.detaching:
                raise  # the task goes on; the next run of the session takes it up
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # ours: a stop, answered with a notice
            await calls._cancel_quietly(connection, task_id)
            why = job.why or "it was stopped"
            result = NoticeStatus.STOPPED, f"{tool!r} (MCP task {task_id}) was cancelled: {why}"
        finally:
            unwatch()
            if calls._waiting.get((server.key, task_id)) is waiting:
                del calls._waiting[(server.key, task_id)]
            if waiting.fetch is not None:
                waiting.fetch.cancel()
        known = await calls._scan(job.session_id)
        if any(r.activity_id == job.child_id for r in known.asked.values()):
            # Its questions close: nobody waits for their answers any more.
            status, text = result if isinstance(result, tuple) else (NoticeStatus.DONE, result)
            await calls.runtime.store.append(
                job.session_id, Entry.of(MCPTaskEnded(job.child_id, status, text))
            )
        return result

    async def _input(self, waiting: _Waiting, state: TaskState) -> TaskState:
        """The task waits for input: log what it asks, send what the log
        answers; the state to go on with (the task's end, when a 2025-11-25
        `tasks/result` brought it)."""
        connection, calls = self.connection, self.calls
        if state.input_requests:
            if len(state.input_requests) > MAX_ENTRIES_PER_POLL:
                raise FollowRefused(
                    f"the MCP server asked {len(state.input_requests)} questions in one"
                    f" answer (at most {MAX_ENTRIES_PER_POLL} are taken)"
                )
            responses: dict[str, Any] = {}
            for key, request in state.input_requests.items():
                if not isinstance(request, dict):
                    continue
                answer = await calls._question(waiting, str(key), request, self.emit)
                if answer is not None and key not in waiting.sent:
                    responses[str(key)] = answer
            if responses:
                await connection.update_task(waiting.task_id, responses, timeout=REQUEST_TIMEOUT)
                waiting.sent.update(responses)
            return state
        if connection.modern():
            return state  # asks nothing yet: polled on
        # 2025-11-25: the server sends its questions on the stream of an open
        # `tasks/result`, which then answers with the task's end.
        fetch = waiting.fetch
        if fetch is None or (fetch.done() and not _ended_with_result(fetch)):
            if fetch is not None and fetch.done() and not fetch.cancelled():
                logger.info(
                    "MCP task %s: tasks/result failed (%s); asking again",
                    waiting.task_id,
                    fetch.exception(),
                )
            waiting.fetch = asyncio.get_running_loop().create_task(
                connection.fetch_result(waiting.task_id)
            )
            waiting.fetch.add_done_callback(lambda _: waiting.wake.set())
            return state
        if fetch.done():
            return dataclasses.replace(state, status="completed", result=fetch.result())
        return state


def _same_task(state: TaskState, task_id: str) -> TaskState:
    """`state`, if it is about task `task_id` (`FollowRefused` otherwise: a
    server's answer about another task is never taken as this one's)."""
    if state.task_id != task_id:
        raise FollowRefused(
            f"protocol error: the MCP server answered about task {state.task_id!r}"
            f" when asked about task {task_id!r}"
        )
    return state


def _progress(
    emit: Callable[[Any], None] | None, waiting: _Waiting, message: str, data: dict[str, Any]
) -> None:
    if emit is None:
        return
    with contextlib.suppress(Exception):
        emit(
            ToolProgress(
                call_id=waiting.call_id,
                message=message,
                data={"task_id": waiting.task_id, **data},
                session_id=waiting.session_id,
            )
        )


def _clamp(poll: float | None) -> float:
    return min(MAX_POLL, max(MIN_POLL, DEFAULT_POLL if poll is None else poll))


def _poll_of(state: TaskState) -> float:
    return _clamp(state.poll)


async def _sleep_or_wake(seconds: float, wake: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), seconds)
    wake.clear()


def _ended_with_result(fetch: asyncio.Task[Any]) -> bool:
    return not fetch.cancelled() and fetch.exception() is None


async def _sleep_or_stop(seconds: float, ctx: ToolContext) -> None:
    if seconds <= 0:
        return
    stopped = asyncio.ensure_future(ctx.stop.wait())
    try:
        await asyncio.wait({stopped}, timeout=seconds)
    finally:
        stopped.cancel()


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def _outcome(server: MCPServer, tool: str, state: TaskState) -> tuple[str, str]:
    output = _output(server, tool, state)
    if state.status == "cancelled":
        return NoticeStatus.STOPPED, output.content
    if output.is_error:
        return NoticeStatus.FAILED, output.content
    return NoticeStatus.DONE, output.content


def _output(server: MCPServer, tool: str, state: TaskState) -> ToolOutput:
    if state.result is not None:
        output = to_output(state.result)
        limit = server.max_output_chars
        if limit and len(output.content) > limit:
            cut = output.content[:limit]
            output = ToolOutput(
                f"{cut}\n[... cut: {len(output.content) - limit} more characters]",
                is_error=output.is_error,
            )
        return output
    if state.status == "cancelled":
        said = f": {state.message}" if state.message else ""
        return ToolOutput(
            f"{tool!r} (MCP task {state.task_id}) was cancelled on MCP server "
            f"{server.name!r}{said}",
            is_error=True,
        )
    why = state.error or state.message or "no reason given"
    return ToolOutput(
        f"{tool!r} (MCP task {state.task_id}) failed on MCP server {server.name!r}: {why}",
        is_error=True,
    )


def _forgotten(server: MCPServer, tool: str, task_id: str, exc: TaskRefused) -> str:
    return (
        f"{tool!r} (MCP task {task_id}): MCP server {server.name!r} no longer "
        f"knows the task (it expired, or the server lost it): {exc.message}"
    )
