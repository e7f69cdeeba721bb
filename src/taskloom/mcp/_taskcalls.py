"""Tool calls that run as MCP tasks, followed in the background of their session.

A call whose task outlasts `task_after` answers at once; the task is followed
work (mode `mcp_task`), its result a notice at a later round. Its questions
(2026-07-28: `inputRequests`; 2025-11-25: `elicitation/create` requests
sent during `tasks/result`) are logged as `InputRequest`s, and whoever polls
the task sends the answers the log holds, also after a crash; the task's end
closes them (`MCPTaskEnded`). A stop of its run, or a delete of its session,
cancels it on the server; closing the runtime only stops polling here.
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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types

from .._redact import redact, redact_value
from ..backends import NoticeStatus, SessionMeta
from ..background import (
    MAX_ENTRIES_PER_POLL,
    MAX_QUESTIONS,
    MAX_TEXT_BYTES,
    BackgroundService,
    FollowJob,
    Follows,
    WorkResult,
    bounded_text,
)
from ..entries import Entry, InputRequest, MCPTaskEnded
from ..errors import FollowRefused
from ..events import ToolProgress
from ..log import input_id_for, read_inputs
from ..runtime import Runtime
from ..tools import ToolContext, ToolError, ToolOutput
from ._connection import Connection, TaskRefused, stopped
from ._tasks import TaskState, cancel_task, start_task, update_task
from ._tool import to_output

if TYPE_CHECKING:
    from ._server import MCPServer

logger = logging.getLogger("taskloom.mcp")

KIND = "mcp_task"
"""The mode (and activity kind) of a tool call running as an MCP task."""

CANCEL_GRACE = 5.0
"""Seconds `close()` gives the `tasks/cancel`s of calls cut off while they
waited inline."""

DEFAULT_POLL, MIN_POLL, MAX_POLL = 1.0, 0.05, 60.0
"""Seconds between polls when the server suggests none, and the bounds of
what it may suggest."""

REQUEST_TIMEOUT = 30.0
"""Seconds one `tasks/get` or `tasks/cancel` may take."""

ANSWER_POLL = 0.5
"""Seconds between looks at the log for a person's answer (an answer given in
this process wakes the poller at once)."""


class TaskCalls:
    """The MCP tasks of one runtime's sessions (`TaskCalls.of(runtime)`)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.follows = Follows.of(runtime)
        self.servers: dict[str, MCPServer] = {}  # by key: whom a task taken up is polled on
        self._cancels: set[asyncio.Task[None]] = set()  # of calls cut off inline
        # By (server key, task id): whose questions a server's request is (2025-11-25).
        self.following: dict[tuple[str, str], TaskFollow] = {}
        # At the first boundary of every run: the session's MCP tasks no live
        # process follows are followed again.
        BackgroundService.of(runtime).on_run_start(
            lambda start: self.follows.resume(start, KIND, self._followed)
        )
        self.follows.register(KIND, "mcp", self._followed)

    @classmethod
    def of(cls, runtime: Runtime) -> TaskCalls:
        """The runtime's instance (made on first use)."""
        return runtime.service(cls, cls)

    def know(self, server: MCPServer) -> None:
        """Remember `server`: tasks started on it are polled from here."""
        self.servers.setdefault(server.key, server)

    async def call(
        self,
        server: MCPServer,
        connection: Connection,
        remote: str,
        arguments: dict[str, Any],
        ctx: ToolContext,
        wait: float,
    ) -> ToolOutput:
        """Call `remote` as a task; its result if it ends within `wait`
        seconds, else followed work the model is told about."""
        self.know(server)
        started = await connection.request(
            remote,
            server.timeout,
            lambda c: start_task(c, remote, arguments, ttl=server.task_ttl, timeout=server.timeout),
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
                    raise ToolError(stopped(ctx.stop))
                pause = min(clamp_poll(state.poll), max(0.0, deadline - loop.time()))
                if pause > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(ctx.stop.wait(), pause)
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
            # poll it again. It is cancelled on the server, in the
            # background, so that the cut is not delayed by it.
            self._cancel_later(connection, task_id)
            raise
        if state.ended:
            return task_output(server, remote, state)
        record = {
            "server": server.key,
            "tool": remote,
            "task_id": state.task_id,
            "created_at": state.created_at or time.time(),
            "ttl": state.ttl,
            "poll": state.poll,
            "call_id": ctx.call_id,
        }
        # The task is in the log (the child's record) before it is followed:
        # a crash in between leaves a task the next run takes up.
        aid = await self.follows.begin(
            ctx,
            TaskFollow(self, server, connection, ctx.emit),
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

    def _followed(self, meta: SessionMeta, record: Mapping[str, Any] | None) -> TaskFollow | None:
        server = self.servers.get(str((record or {}).get("server", "")))
        if server is None:
            return None  # not among this runtime's servers: left for one that has it
        from ._server import MCPConnections

        connection = MCPConnections.of(self.runtime).connection(server)
        return TaskFollow(self, server, connection, None)

    async def _ask(self, server_key: str, task_id: str, request: dict[str, Any]) -> Any:
        follow = self.following.get((server_key, task_id))
        if follow is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"taskloom polls no task {task_id} of this server",
            )
        return await follow.asked(request)

    def _cancel_later(self, connection: Connection, task_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self.cancel_quietly(connection, task_id))
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def cancel_quietly(self, connection: Connection, task_id: str) -> None:
        try:
            await asyncio.shield(
                connection.request(
                    f"task {task_id}",
                    REQUEST_TIMEOUT,
                    lambda c: cancel_task(c, task_id, timeout=REQUEST_TIMEOUT),
                )
            )
        except Exception as exc:
            logger.info("cancelling MCP task %s failed: %s", task_id, exc)

    async def close(self) -> None:
        """Let the `tasks/cancel`s of cut-off calls go out, within a bound,
        before the connections close (followed tasks go on)."""
        if self._cancels:
            await asyncio.wait(set(self._cancels), timeout=CANCEL_GRACE)


class TaskFollow:
    """Follows one MCP task (`taskloom.background.Followed`), and holds what
    it knows of the task's questions while it does."""

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
        self.secrets = server.secrets
        self.job: FollowJob | None = None
        self.task_id = self.tool = self.call_id = ""
        self.wake = asyncio.Event()
        self.sent: set[str] = set()  # keys answered by this follower (2026-07-28)
        self.delivered: set[str] = set()  # input ids answered by this process (2025-11-25)
        # The open `tasks/result` (2025-11-25) the server sends its questions on.
        self.fetch: asyncio.Task[types.CallToolResult] | None = None
        self.asked_person = False  # its end then closes its questions
        self.refused: FollowRefused | None = None  # a bound its questions broke (2025-11-25)

    async def cancel(self, record: Mapping[str, Any]) -> None:
        """Cancel the task on its server (`tasks/cancel`)."""
        await self.calls.cancel_quietly(self.connection, str(record["task_id"]))

    async def follow(self, job: FollowJob) -> WorkResult:
        """Poll the task to its end, passing questions and answers on."""
        record = job.record or {}
        if not record.get("task_id"):
            return NoticeStatus.FAILED, (
                "the call was cut off before its MCP task was recorded; whether it"
                " runs on the server is unknown"
            )
        server, connection, calls = self.server, self.connection, self.calls
        self.job = job
        task_id = self.task_id = str(record["task_id"])
        tool = self.tool = str(record.get("tool", ""))
        self.call_id = str(record.get("call_id", ""))
        created_at = float(record.get("created_at") or time.time())
        ttl_kept, poll = record.get("ttl"), record.get("poll")
        said: str | None = None
        failures = 0
        key = (server.key, task_id)
        calls.following[key] = self
        connection.asker = lambda task, request: calls._ask(server.key, task, request)
        unwatch = calls.runtime.watch(job.session_id, self.wake.set)
        try:
            while True:
                if self.refused is not None:
                    raise self.refused
                try:
                    state = same_task(
                        await connection.get_task(task_id, timeout=REQUEST_TIMEOUT), task_id
                    )
                    if state.status == "input_required" and not state.ended:
                        state = await self._input(state)
                except TaskRefused as exc:
                    # A server answers an unknown task id with an error: it
                    # forgot the task (expired, or restarted without it).
                    result: WorkResult = (
                        NoticeStatus.FAILED,
                        f"{tool!r} (MCP task {task_id}): MCP server {server.name!r} no longer "
                        f"knows the task (it expired, or the server lost it): {exc.message}",
                    )
                    break
                except ToolError as exc:
                    failures += 1
                    if failures >= server.limits.give_up_after:
                        result = (
                            NoticeStatus.FAILED,
                            f"{tool!r} (MCP task {task_id}): gave up after "
                            f"{failures} failed polls: {exc.message}",
                        )
                        break
                    pauses = server.limits.poll_backoff
                    await asyncio.sleep(pauses[min(failures - 1, len(pauses) - 1)])
                    continue
                failures = 0
                if state.poll is not None:
                    poll = state.poll
                if state.message and state.message != said:
                    said = state.message
                    self._progress(bounded_text(state.message), {"status": state.status})
                if state.ended:
                    output = task_output(server, tool, state)
                    status = NoticeStatus.FAILED if output.is_error else NoticeStatus.DONE
                    if state.status == "cancelled":
                        status = NoticeStatus.STOPPED
                    result = status, output.content
                    break
                ttl = state.ttl if state.ttl is not None else ttl_kept
                if ttl is not None and time.time() > created_at + float(ttl):
                    result = (
                        NoticeStatus.TIMED_OUT,
                        f"{tool!r} (MCP task {task_id}) on MCP server "
                        f"{server.name!r} expired: it was still {state.status} when its "
                        f"time to live ({duration(float(ttl))}) ran out",
                    )
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), clamp_poll(poll))
                self.wake.clear()
        except FollowRefused as exc:
            await calls.cancel_quietly(connection, task_id)
            result = NoticeStatus.FAILED, f"{tool!r} (MCP task {task_id}): {exc}"
        except asyncio.CancelledError:
            if job.detaching:
                raise  # the task goes on; the next run of the session takes it up
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # ours: a stop, answered with a notice
            await calls.cancel_quietly(connection, task_id)
            why = job.why or "it was stopped"
            result = NoticeStatus.STOPPED, f"{tool!r} (MCP task {task_id}) was cancelled: {why}"
        finally:
            unwatch()
            if calls.following.get(key) is self:
                del calls.following[key]
            if self.fetch is not None:
                self.fetch.cancel()
        if self.asked_person:
            # Its questions close: nobody waits for their answers any more.
            status, text = result if isinstance(result, tuple) else (NoticeStatus.DONE, result)
            await calls.runtime.store.append(
                job.session_id,
                Entry.of(MCPTaskEnded(job.child_id, status, redact(text, self.secrets))),
            )
        return result

    async def _input(self, state: TaskState) -> TaskState:
        """Log what the waiting task asks and send what the log answers; the
        state to go on with (its end, when a 2025-11-25 `tasks/result` came)."""
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
                answer = await self.question(str(key), request, say=True)
                if answer is not None and key not in self.sent:
                    responses[str(key)] = answer
            if responses:
                await self.connection.request(
                    f"task {self.task_id}",
                    REQUEST_TIMEOUT,
                    lambda c: update_task(c, self.task_id, responses, timeout=REQUEST_TIMEOUT),
                )
                self.sent.update(responses)
            return state
        if self.connection.modern():
            return state  # asks nothing yet: polled on
        # 2025-11-25: the server sends its questions on the stream of an open
        # `tasks/result`, which then answers with the task's end.
        fetch = self.fetch
        if fetch is not None and fetch.done():
            if not fetch.cancelled() and fetch.exception() is None:
                return dataclasses.replace(state, status="completed", result=fetch.result())
            if not fetch.cancelled():
                logger.info(
                    "MCP task %s: tasks/result failed (%s); asking again",
                    self.task_id,
                    fetch.exception(),
                )
        if fetch is None or fetch.done():
            self.fetch = asyncio.get_running_loop().create_task(
                self.connection.fetch_result(self.task_id)
            )
            self.fetch.add_done_callback(lambda _: self.wake.set())
        return state

    async def question(
        self, key: str, request: dict[str, Any], *, say: bool
    ) -> dict[str, Any] | None:
        """Log question `key` (once; with `say`, as progress too); its answer
        as the server takes it, once the log has one."""
        assert self.job is not None
        session_id, activity_id = self.job.session_id, self.job.child_id
        store = self.calls.runtime.store
        input_id = input_id_for(activity_id, key)
        asked, answered = read_inputs(await store.load(session_id))
        if input_id not in asked:
            if len(json.dumps(request, default=str)) > MAX_TEXT_BYTES:
                raise FollowRefused(
                    f"the MCP server asked a question of more than {MAX_TEXT_BYTES} bytes"
                )
            if sum(r.activity_id == activity_id for r in asked.values()) >= MAX_QUESTIONS:
                raise FollowRefused(
                    f"the MCP server asked more than {MAX_QUESTIONS} questions;"
                    " the task was given up"
                )
            # What the server asks is stored and shown: without what it was sent.
            request = redact_value(request, self.secrets)
            question = InputRequest(
                input_id,
                activity_id,
                key,
                request,
                f"MCP server {self.server.name!r}, tool {self.tool!r}, task {self.task_id}",
                time.time(),
            )
            await store.append(session_id, Entry.of(question))
            message = str((request.get("params") or {}).get("message", ""))
            logger.info("MCP task %s asks a person (%s): %s", self.task_id, input_id, message)
            if say:
                self._progress(
                    f"asks a person ({input_id}): {message}",
                    {"status": "input_required", "input_id": input_id},
                )
        self.asked_person = True
        answer = answered.get(input_id)
        if answer is None:
            return None
        result: dict[str, Any] = {"action": answer.action}
        if answer.content is not None:
            result["content"] = answer.content
        return result

    async def asked(self, request: dict[str, Any]) -> Any:
        """A 2025-11-25 server's question: logged, and answered once a person
        did. Keyed by its digest: sent again after a crash it is the same one,
        after this process answered it a new one."""
        assert self.job is not None
        digest = hashlib.sha256(
            json.dumps(request, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()[:16]
        key, n = digest, 0
        while input_id_for(self.job.child_id, key) in self.delivered:
            n += 1
            key = f"{digest}-{n}"
        while True:
            if self.calls.following.get((self.server.key, self.task_id)) is not self:
                # Nobody polls the task here any more: the next poller asks again.
                return types.ErrorData(code=types.INTERNAL_ERROR, message="no longer polled")
            try:
                answer = await self.question(key, request, say=False)
            except FollowRefused as exc:
                # The follower fails the task; the server is told no.
                self.refused = self.refused or exc
                self.wake.set()
                return types.ErrorData(code=types.INVALID_REQUEST, message=str(exc))
            if answer is not None:
                self.delivered.add(input_id_for(self.job.child_id, key))
                return types.ElicitResult.model_validate(answer)
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), ANSWER_POLL)
            self.wake.clear()

    def _progress(self, message: str, data: dict[str, Any]) -> None:
        if self.emit is None or self.job is None:
            return
        with contextlib.suppress(Exception):
            self.emit(
                ToolProgress(
                    call_id=self.call_id,
                    message=redact(message, self.secrets),
                    data={"task_id": self.task_id, **data},
                    session_id=self.job.session_id,
                )
            )


def same_task(state: TaskState, task_id: str) -> TaskState:
    """`state`, if it is about task `task_id` (`FollowRefused` otherwise: a
    server's answer about another task is never taken as this one's)."""
    if state.task_id != task_id:
        raise FollowRefused(
            f"protocol error: the MCP server answered about task {state.task_id!r}"
            f" when asked about task {task_id!r}"
        )
    return state


def clamp_poll(poll: float | None) -> float:
    return min(MAX_POLL, max(MIN_POLL, DEFAULT_POLL if poll is None else poll))


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def task_output(server: MCPServer, tool: str, state: TaskState) -> ToolOutput:
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
