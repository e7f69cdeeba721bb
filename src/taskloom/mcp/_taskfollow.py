"""Following one MCP task to its end (`taskloom.background.Followed`): polling,
questions passed on to a person and answers back, and the task's outcome
(see `_taskcalls`, which starts tasks and takes them up again)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types

from .._redact import redact
from ..backends import NoticeStatus
from ..background import MAX_ENTRIES_PER_POLL, FollowJob, WorkResult, bounded_text
from ..entries import Entry, MCPTaskEnded
from ..errors import FollowRefused
from ..events import ToolProgress
from ..tools import ToolError, ToolOutput
from ._connection import Connection, TaskRefused
from ._results import to_output
from ._tasks import TaskState

if TYPE_CHECKING:
    from ._server import MCPServer
    from ._taskcalls import TaskCalls

__all__ = [
    "ANSWER_POLL",
    "REQUEST_TIMEOUT",
    "TaskFollow",
    "Waiting",
    "clamp_poll",
    "duration",
    "progress",
    "same_task",
    "sleep_or_wake",
    "task_output",
]

logger = logging.getLogger("taskloom.mcp")

DEFAULT_POLL = 1.0
"""Seconds between polls when the server suggests none."""

MIN_POLL = 0.05
MAX_POLL = 60.0

REQUEST_TIMEOUT = 30.0
"""Seconds one `tasks/get` or `tasks/cancel` may take."""

ANSWER_POLL = 0.5
"""Seconds between looks at the log for a person's answer (an answer given in
this process wakes the poller at once)."""


@dataclass
class Waiting:
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
    asked: bool = False
    """Whether the task asked a person something (its end then closes the questions)."""
    refused: FollowRefused | None = None
    """A bound the server's questions broke (2025-11-25, where they come apart)."""

    @property
    def session_id(self) -> str:
        return self.job.session_id

    @property
    def activity_id(self) -> str:
        return self.job.child_id


class TaskFollow:
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
        self.secrets = server.secrets

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
        task_id, tool = str(record["task_id"]), str(record.get("tool", ""))
        created_at = float(record.get("created_at") or time.time())
        ttl_kept = record.get("ttl")
        poll = record.get("poll")
        said: str | None = None
        failures = 0
        waiting = Waiting(job, task_id, tool, str(record.get("call_id", "")), server)
        calls.waiting[(server.key, task_id)] = waiting
        connection.asker = calls.asker(server.key)
        unwatch = calls.runtime.watch(job.session_id, waiting.wake.set)
        try:
            while True:
                if waiting.refused is not None:
                    raise waiting.refused
                try:
                    state = same_task(
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
                    progress(
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
                            f"time to live ({duration(float(ttl))}) ran out"
                        ),
                    )
                    break
                await sleep_or_wake(clamp_poll(poll), waiting.wake)
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
            if calls.waiting.get((server.key, task_id)) is waiting:
                del calls.waiting[(server.key, task_id)]
            if waiting.fetch is not None:
                waiting.fetch.cancel()
        if waiting.asked:
            # Its questions close: nobody waits for their answers any more.
            status, text = result if isinstance(result, tuple) else (NoticeStatus.DONE, result)
            await calls.runtime.store.append(
                job.session_id,
                Entry.of(MCPTaskEnded(job.child_id, status, redact(text, self.secrets))),
            )
        return result

    async def _input(self, waiting: Waiting, state: TaskState) -> TaskState:
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
                answer = await calls.question(waiting, str(key), request, self.emit)
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


def same_task(state: TaskState, task_id: str) -> TaskState:
    """`state`, if it is about task `task_id` (`FollowRefused` otherwise: a
    server's answer about another task is never taken as this one's)."""
    if state.task_id != task_id:
        raise FollowRefused(
            f"protocol error: the MCP server answered about task {state.task_id!r}"
            f" when asked about task {task_id!r}"
        )
    return state


def progress(
    emit: Callable[[Any], None] | None, waiting: Waiting, message: str, data: dict[str, Any]
) -> None:
    if emit is None:
        return
    with contextlib.suppress(Exception):
        emit(
            ToolProgress(
                call_id=waiting.call_id,
                message=redact(message, waiting.server.secrets),
                data={"task_id": waiting.task_id, **data},
                session_id=waiting.session_id,
            )
        )


def clamp_poll(poll: float | None) -> float:
    return min(MAX_POLL, max(MIN_POLL, DEFAULT_POLL if poll is None else poll))


async def sleep_or_wake(seconds: float, wake: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), seconds)
    wake.clear()


def _ended_with_result(fetch: asyncio.Task[Any]) -> bool:
    return not fetch.cancelled() and fetch.exception() is None


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def _outcome(server: MCPServer, tool: str, state: TaskState) -> tuple[str, str]:
    output = task_output(server, tool, state)
    if state.status == "cancelled":
        return NoticeStatus.STOPPED, output.content
    if output.is_error:
        return NoticeStatus.FAILED, output.content
    return NoticeStatus.DONE, output.content


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


def _forgotten(server: MCPServer, tool: str, task_id: str, exc: TaskRefused) -> str:
    return (
        f"{tool!r} (MCP task {task_id}): MCP server {server.name!r} no longer "
        f"knows the task (it expired, or the server lost it): {exc.message}"
    )
