"""Tool calls that run as MCP tasks, as background work of their session.

A call whose server runs it as a task and that does not end within the
server's `task_after` seconds turns into a background activity: the tool
answers the model at once ("started ..."), and the task's result reaches it
as a notice at a later round boundary, through the session's inbox,
acknowledged once the message that carried it is stored — the same
delivery background commands have, with the same reminders while it runs.

What makes it last: before the activity is registered, the task is written
to the session's log (`MCPTaskStarted`: the server's key, the tool, the task
id). The poller of this process renews the activity's lease (the background
service's `lease`, 30 seconds by default) while it polls;
when the process dies the lease lapses, and the first run of the session in
any process that has the server among its tools takes polling up again
(`BackgroundService.on_run_start`). Once the task ended its outcome is
written to the log (`MCPTaskEnded`) before its notice is pushed: a process
that dies in between leaves the outcome for the next run to push, and the
notice id — derived from the task — makes every push after the first a
no-op, so the result arrives once.

A task whose server needs input (`input_required`) waits for a person:
each question the server asks (2026-07-28: the `inputRequests` of
`tasks/get`; 2025-11-25: the `elicitation/create` requests it sends while the
client waits on `tasks/result`) is written to the log as an `InputRequest`,
which `Session.pending_input()` lists. A person answers from any process
(`Session.answer`, `taskloom answer`, the console): the `InputAnswer` goes
to the log, and whoever polls the task sends it to the server
(`tasks/update`, or as the answer to the server's request) and polls on.
Sending is driven by the log — a question the server still asks and the log
has an answer for is answered — so a poller taken up after a crash sends
what the dead one did not.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types

from ..background import (
    BackgroundActivity,
    BackgroundNotice,
    BackgroundService,
    NoticeStatus,
    RunStart,
)
from ..entries import Entry, InputAnswer, InputRequest, MCPTaskEnded, MCPTaskStarted
from ..events import ToolProgress
from ..log import input_id_for
from ..runtime import Runtime
from ..tools import ToolContext, ToolError, ToolOutput
from ._connection import Connection, TaskRefused
from ._results import to_output
from ._tasks import TaskState

if TYPE_CHECKING:
    from ._server import MCPServer

__all__ = ["KIND", "TaskCalls", "activity_id_for"]

logger = logging.getLogger("taskloom.mcp")

KIND = "mcp_task"
"""The activity kind of a tool call running as an MCP task."""

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

_KINDS = (MCPTaskStarted.KIND, MCPTaskEnded.KIND, InputRequest.KIND, InputAnswer.KIND)


def activity_id_for(server_key: str, task_id: str) -> str:
    """The background activity (and notice) id of a task: the same in every
    process, so a task taken up again is the same activity."""
    digest = hashlib.sha256(f"{server_key}\0{task_id}".encode()).hexdigest()[:12]
    return f"{KIND}-{digest}"


@dataclass
class _Known:
    """What this process has read of one session's MCP tasks."""

    scanned: int = 0
    started: dict[str, MCPTaskStarted] = field(default_factory=dict)
    ended: dict[str, MCPTaskEnded] = field(default_factory=dict)
    pushed: set[str] = field(default_factory=set)
    asked: dict[str, InputRequest] = field(default_factory=dict)
    answered: dict[str, InputAnswer] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _Waiting:
    """What one poller knows of its task's questions."""

    session_id: str
    record: MCPTaskStarted
    server: MCPServer
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: set[str] = field(default_factory=set)
    """Keys answered to the server by this poller (2026-07-28)."""
    delivered: set[str] = field(default_factory=set)
    """Input ids answered to the server by this process (2025-11-25)."""
    fetch: asyncio.Task[types.CallToolResult] | None = None
    """The open `tasks/result` (2025-11-25) the server sends its questions on."""


class TaskCalls:
    """The MCP tasks of one runtime's sessions (`TaskCalls.of(runtime)`)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.service = BackgroundService.of(runtime)
        self.servers: dict[str, MCPServer] = {}
        """Servers this runtime has listed tools of, by key: whom a task taken
        up again is polled on."""
        self._pollers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._why: dict[tuple[str, str], str] = {}
        self._known: dict[str, _Known] = {}
        self._closing = False
        self._cancels: set[asyncio.Task[None]] = set()
        """`tasks/cancel`s sent for calls cut off while they waited inline."""
        self._waiting: dict[tuple[str, str], _Waiting] = {}
        """Polled tasks by (server key, task id): whose questions a server's
        request is (2025-11-25)."""
        self.service.on_run_start(self.resume)
        self.service.listeners.on_delete(self._on_delete)

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
        seconds, else a background activity the model is told about."""
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
                state = await connection.get_task(state.task_id, timeout=server.timeout)
                if state.message and state.message != said:
                    said = state.message
                    ctx.progress(state.message, task_id=state.task_id, status=state.status)
                if state.status == "input_required":
                    break  # a person answers: that is background work
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
        aid = activity_id_for(server.key, state.task_id)
        record = MCPTaskStarted(
            aid,
            server.key,
            remote,
            state.task_id,
            state.created_at or time.time(),
            state.ttl,
            state.poll,
            ctx.call_id,
        )
        # Logged before it is registered: a crash in between leaves a task
        # the next run takes up, never one nobody knows of.
        await ctx.record(Entry.of(record))
        emit = ctx.emit
        await self._begin(ctx.session_id, record, server, connection, emit, ctx.run_id)
        key = (ctx.session_id, aid)

        def stop_it() -> None:
            self.stop(key, "the run that started it was stopped")

        undo = ctx.stop.on_set(stop_it)
        poller = self._pollers.get(key)
        if poller is not None:
            poller.add_done_callback(lambda _: undo())
        else:
            undo()
        ttl = f"; the server keeps it {_duration(state.ttl)}" if state.ttl else ""
        return ToolOutput(
            f"started {aid}: {remote!r} runs on MCP server {server.name!r} as task "
            f"{state.task_id} ({state.status}{': ' + state.message if state.message else ''}"
            f"{ttl}). Its result arrives as a background notice when it ends."
        )

    async def _begin(
        self,
        session_id: str,
        record: MCPTaskStarted,
        server: MCPServer,
        connection: Connection,
        emit: Callable[[Any], None] | None,
        run_id: str | None,
    ) -> None:
        activity = BackgroundActivity(
            record.activity_id,
            KIND,
            f"{record.tool} on MCP server {server.name} (task {record.task_id})",
            record.created_at,
            run_id,
            {"server": record.server, "tool": record.tool, "task_id": record.task_id},
        )
        key = (session_id, record.activity_id)

        def launch() -> None:
            task = asyncio.get_running_loop().create_task(
                self._poll(session_id, record, server, connection, emit)
            )
            self._pollers[key] = task

            def forget(_: object) -> None:
                if self._pollers.get(key) is task:
                    del self._pollers[key]
                self._why.pop(key, None)

            task.add_done_callback(forget)

        await self.service.lifecycle.begin(session_id, activity, launch, lease=self.service.lease)
        if run_id is not None:
            notices = self.service.notices_for(run_id)
            if notices is not None:
                notices.mark_started(record.activity_id)

    # ------------------------------------------------------------ polling

    async def _poll(
        self,
        session_id: str,
        record: MCPTaskStarted,
        server: MCPServer,
        connection: Connection,
        emit: Callable[[Any], None] | None,
    ) -> None:
        key = (session_id, record.activity_id)
        heartbeat = asyncio.get_running_loop().create_task(self._heartbeat(session_id, record))
        poll = record.poll
        said: str | None = None
        failures = 0
        waiting = _Waiting(session_id, record, server)
        self._waiting[(server.key, record.task_id)] = waiting
        connection.asker = self._asker(server.key)
        unwatch = self.runtime.watch(session_id, waiting.wake.set)
        try:
            while True:
                try:
                    state = await connection.get_task(record.task_id, timeout=REQUEST_TIMEOUT)
                    if state.status == "input_required" and not state.ended:
                        state = await self._input(connection, waiting, state, emit)
                except TaskRefused as exc:
                    # A server answers an unknown task id with an error: it
                    # forgot the task (expired, or restarted without it).
                    status, text = NoticeStatus.FAILED, _forgotten(server, record, exc)
                    break
                except ToolError as exc:
                    failures += 1
                    if failures >= server.limits.give_up_after:
                        status = NoticeStatus.FAILED
                        text = (
                            f"{record.tool!r} (MCP task {record.task_id}): gave up after "
                            f"{failures} failed polls: {exc.message}"
                        )
                        break
                    await asyncio.sleep(server.limits.poll_pause(failures))
                    continue
                failures = 0
                if state.poll is not None:
                    poll = state.poll
                if state.message and state.message != said:
                    said = state.message
                    if emit is not None:
                        with contextlib.suppress(Exception):
                            emit(
                                ToolProgress(
                                    call_id=record.call_id,
                                    message=state.message,
                                    data={"task_id": record.task_id, "status": state.status},
                                    session_id=session_id,
                                )
                            )
                if state.ended:
                    status, text = _outcome(server, record.tool, state)
                    break
                ttl = state.ttl if state.ttl is not None else record.ttl
                if ttl is not None and time.time() > record.created_at + ttl:
                    status = NoticeStatus.TIMED_OUT
                    text = (
                        f"{record.tool!r} (MCP task {record.task_id}) on MCP server "
                        f"{server.name!r} expired: it was still {state.status} when its "
                        f"time to live ({_duration(ttl)}) ran out"
                    )
                    break
                await _sleep_or_wake(_clamp(poll), waiting.wake)
        except asyncio.CancelledError:
            why = self._why.get(key)
            if why is None:
                # Detached (the runtime closes): the task goes on; the next
                # run of the session takes it up.
                heartbeat.cancel()
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.service.lifecycle.discard(session_id, key[1]))
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # ours: a stop, answered with a notice below
            await self._cancel_quietly(connection, record.task_id)
            status, text = (
                NoticeStatus.STOPPED,
                (f"{record.tool!r} (MCP task {record.task_id}) was cancelled: {why}"),
            )
        finally:
            heartbeat.cancel()
            unwatch()
            if self._waiting.get((server.key, record.task_id)) is waiting:
                del self._waiting[(server.key, record.task_id)]
            if waiting.fetch is not None:
                waiting.fetch.cancel()
        await asyncio.shield(self._end(session_id, record, status, text))

    # ------------------------------------------------------------ input

    async def _input(
        self,
        connection: Connection,
        waiting: _Waiting,
        state: TaskState,
        emit: Callable[[Any], None] | None,
    ) -> TaskState:
        """The task waits for input: log what it asks, send what the log
        answers; the state to go on with (the task's end, when a 2025-11-25
        `tasks/result` brought it)."""
        record = waiting.record
        if state.input_requests:
            responses: dict[str, Any] = {}
            for key, request in state.input_requests.items():
                if not isinstance(request, dict):
                    continue
                answer = await self._question(waiting, str(key), request, emit)
                if answer is not None and key not in waiting.sent:
                    responses[str(key)] = answer
            if responses:
                await connection.update_task(record.task_id, responses, timeout=REQUEST_TIMEOUT)
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
                    record.task_id,
                    fetch.exception(),
                )
            waiting.fetch = asyncio.get_running_loop().create_task(
                connection.fetch_result(record.task_id)
            )
            waiting.fetch.add_done_callback(lambda _: waiting.wake.set())
            return state
        if fetch.done():
            return dataclasses.replace(state, status="completed", result=fetch.result())
        return state

    async def _question(
        self,
        waiting: _Waiting,
        key: str,
        request: dict[str, Any],
        emit: Callable[[Any], None] | None,
    ) -> dict[str, Any] | None:
        """Log question `key` (once); its answer as the server takes it, once
        the log has one."""
        session_id, record = waiting.session_id, waiting.record
        input_id = input_id_for(record.activity_id, key)
        known = await self._scan(session_id)
        if input_id not in known.asked:
            server = waiting.server
            asked = InputRequest(
                input_id,
                record.activity_id,
                key,
                request,
                f"MCP server {server.name!r}, tool {record.tool!r}, task {record.task_id}",
                time.time(),
            )
            await self.runtime.store.append(session_id, Entry.of(asked))
            known.asked[input_id] = asked
            message = str((request.get("params") or {}).get("message", ""))
            logger.info("MCP task %s asks a person (%s): %s", record.task_id, input_id, message)
            if emit is not None:
                with contextlib.suppress(Exception):
                    emit(
                        ToolProgress(
                            call_id=record.call_id,
                            message=f"asks a person ({input_id}): {message}",
                            data={
                                "task_id": record.task_id,
                                "status": "input_required",
                                "input_id": input_id,
                            },
                            session_id=session_id,
                        )
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
        while input_id_for(waiting.record.activity_id, key) in waiting.delivered:
            n += 1
            key = f"{digest}-{n}"
        input_id = input_id_for(waiting.record.activity_id, key)
        while True:
            if self._waiting.get((waiting.server.key, waiting.record.task_id)) is not waiting:
                # Nobody polls the task here any more: the next poller asks again.
                return types.ErrorData(code=types.INTERNAL_ERROR, message="no longer polled")
            answer = await self._question(waiting, key, request, None)
            if answer is not None:
                waiting.delivered.add(input_id)
                return types.ElicitResult.model_validate(answer)
            waiting.wake.clear()
            await _sleep_or_wake(ANSWER_POLL, waiting.wake)

    async def _heartbeat(self, session_id: str, record: MCPTaskStarted) -> None:
        while True:
            await asyncio.sleep(self.service.lease / 3)
            with contextlib.suppress(Exception):
                await self.service.lifecycle.alive(
                    session_id, record.activity_id, lease=self.service.lease
                )

    async def _end(self, session_id: str, record: MCPTaskStarted, status: str, text: str) -> None:
        ended = MCPTaskEnded(record.activity_id, status, text)
        # The outcome goes to the log first: a crash before the push below
        # leaves it for the next run to push (`resume`).
        for attempt in range(5):
            try:
                await self.runtime.store.append(session_id, Entry.of(ended))
                break
            except Exception:
                await asyncio.sleep(0.05 * 2**attempt)
        known = self._known.get(session_id)
        if known is not None:
            known.ended[record.activity_id] = ended
        await self._push(session_id, record, ended)

    async def _push(self, session_id: str, record: MCPTaskStarted, ended: MCPTaskEnded) -> None:
        notice = BackgroundNotice(
            f"{record.activity_id}:end",
            record.activity_id,
            KIND,
            ended.text,
            ended.status,
            time.time(),
            {"task_id": record.task_id, "tool": record.tool, "server": record.server},
        )
        for attempt in range(5):
            try:
                await self.service.lifecycle.finish(session_id, notice)
                known = self._known.get(session_id)
                if known is not None:
                    known.pushed.add(record.activity_id)
                return
            except Exception:
                await asyncio.sleep(0.05 * 2**attempt)
        logger.error(
            "the end of MCP task %s of session %s could not be delivered; the next run retries",
            record.task_id,
            session_id,
        )

    def _cancel_later(self, connection: Connection, task_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._cancel_quietly(connection, task_id))
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def _cancel_quietly(self, connection: Connection, task_id: str) -> None:
        try:
            await asyncio.shield(connection.cancel_task(task_id, timeout=REQUEST_TIMEOUT))
        except Exception as exc:
            logger.info("cancelling MCP task %s failed: %s", task_id, exc)

    # ------------------------------------------------------------ taking up again

    async def _scan(self, session_id: str) -> _Known:
        known = self._known.setdefault(session_id, _Known())
        entries = await self.runtime.store.load(session_id, after=known.scanned or None)
        for entry in entries:
            known.scanned = max(known.scanned, entry.position)
            if entry.kind not in _KINDS:
                continue
            payload = entry.payload
            if isinstance(payload, MCPTaskStarted):
                known.started[payload.activity_id] = payload
            elif isinstance(payload, MCPTaskEnded):
                known.ended.setdefault(payload.activity_id, payload)
            elif isinstance(payload, InputRequest):
                known.asked.setdefault(payload.input_id, payload)
            elif isinstance(payload, InputAnswer):
                known.answered.setdefault(payload.input_id, payload)
        return known

    async def resume(self, start: RunStart) -> None:
        """Take up the session's MCP tasks that no live process polls (their
        poller died with its process), and deliver outcomes that were logged
        but not pushed. Called at the first boundary of every run."""
        session_id = start.session_id
        if self._closing:
            return
        known = self._known.get(session_id) or _Known()
        self._known.setdefault(session_id, known)
        async with known.lock:
            await self._scan(session_id)
            open_ids = [
                aid
                for aid in known.started
                if aid not in known.ended and (session_id, aid) not in self._pollers
            ]
            unpushed = [aid for aid in known.ended if aid not in known.pushed]
            for aid in unpushed:
                ended = known.ended[aid]
                record = known.started.get(aid)
                if record is not None:
                    await self._push(session_id, record, ended)
                else:
                    known.pushed.add(aid)
            if not open_ids:
                return
            live = {a.id for a in await start.live()}
            for aid in open_ids:
                if aid in live:
                    continue  # another process polls it
                record = known.started[aid]
                server = self.servers.get(record.server)
                if server is None:
                    logger.debug(
                        "MCP task %s of session %s: its server %r is not among this runtime's",
                        record.task_id,
                        session_id,
                        record.server,
                    )
                    continue
                from ._server import MCPConnections

                connection = MCPConnections.of(self.runtime).connection(server)
                logger.info(
                    "taking up MCP task %s (%s) of session %s again",
                    record.task_id,
                    record.tool,
                    session_id,
                )
                await self._begin(session_id, record, server, connection, None, None)

    # ------------------------------------------------------------ stopping

    def stop(self, key: tuple[str, str], why: str) -> bool:
        """Cancel a task this process polls, on the server too; its notice
        says it was cancelled. False if it is not polled here."""
        poller = self._pollers.get(key)
        if poller is None or poller.done():
            return False
        self._why.setdefault(key, why)
        poller.cancel()
        return True

    async def _on_delete(self, session_id: str) -> None:
        # Tasks of a session being deleted are cancelled on their servers:
        # those polled here by stopping their pollers, the others directly.
        pollers = [(key, task) for key, task in self._pollers.items() if key[0] == session_id]
        for key, _ in pollers:
            self.stop(key, "its session was deleted")
        if pollers:
            await asyncio.wait([task for _, task in pollers], timeout=REQUEST_TIMEOUT)
        known = await self._scan(session_id)
        from ._server import MCPConnections

        for aid, record in known.started.items():
            if aid in known.ended or any(key[1] == aid for key, _ in pollers):
                continue
            server = self.servers.get(record.server)
            if server is not None:
                connection = MCPConnections.of(self.runtime).connection(server)
                await self._cancel_quietly(connection, record.task_id)
        self._known.pop(session_id, None)

    async def close(self) -> None:
        """Stop polling here; the tasks go on, and the next run takes them up."""
        self._closing = True
        pollers = list(self._pollers.values())
        for task in pollers:
            task.cancel()
        if pollers:
            await asyncio.gather(*pollers, return_exceptions=True)
        if self._cancels:
            # Cancels of cut-off calls go out before the connections close,
            # within a bound: a server that does not answer is not waited for.
            await asyncio.wait(set(self._cancels), timeout=CANCEL_GRACE)


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


def _forgotten(server: MCPServer, record: MCPTaskStarted, exc: TaskRefused) -> str:
    return (
        f"{record.tool!r} (MCP task {record.task_id}): MCP server {server.name!r} no longer "
        f"knows the task (it expired, or the server lost it): {exc.message}"
    )
