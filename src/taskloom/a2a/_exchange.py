"""Handing a task to a remote agent and following it to its end (its stream
listened to while the task is read beside it, tried again while the server
does not answer), the task as it ended read into an `Outcome`; what the task
says as its stream tells it (`Watch`: the events a child's would give)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from a2a.client import A2AClientError
from a2a.client.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError

from .._redact import redact
from ..events import Event, SubagentFinished, SubagentStarted, TextDelta, origin_label

if TYPE_CHECKING:
    from ._remote import RemoteAgent

logger = logging.getLogger("taskloom")

_ENDED = {
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "was cancelled",
    TaskState.TASK_STATE_REJECTED: "rejected the task",
    TaskState.TASK_STATE_INPUT_REQUIRED: "asks for input",
    TaskState.TASK_STATE_AUTH_REQUIRED: "asks for authentication",
}
"""The states a followed task ends in, as the parent's model is told them."""

_FIRST_RETRY, _LAST_RETRY = 0.25, 10.0
"""Seconds between tries while a server does not answer, doubling."""


class Outcome(NamedTuple):
    """How one exchange with the remote agent ended."""

    kind: Literal["answer", "question", "failed", "stopped"]
    text: str
    task_id: str = ""


class Watch:
    """The task as the stream tells it, and the events a child's would give
    (to `emit`, if any), `secrets` redacted from the remote agent's words."""

    def __init__(
        self,
        name: str,
        emit: Callable[[Event], None] | None,
        origin: str,
        session_id: str,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.secrets = secrets
        self._emit = emit
        self._origin = origin
        self._session_id = session_id
        self.task_id = ""
        self.origin = ""
        self.foreign = ""
        """The id of another task an event was about (a protocol error)."""

    def see(self, response: StreamResponse, task: str) -> str:
        """Take in one streamed response; the context id it names. An event
        about another task is not taken in (`foreign` names it)."""
        about = _task_of(response)
        if self.task_id and about and about != self.task_id:
            self.foreign = self.foreign or about
            return ""
        if response.HasField("task"):
            if not self.task_id:
                self.started(response.task.id, task)
            return str(response.task.context_id)
        if response.HasField("status_update"):
            update = response.status_update
            if not self.task_id:
                self.started(update.task_id, task)
            if update.status.state == TaskState.TASK_STATE_WORKING and update.status.HasField(
                "message"
            ):
                text = redact(text_of(update.status.message.parts), self.secrets)
                if text:
                    self._send(TextDelta(origin=self.origin, session_id=self.task_id, text=text))
            return str(update.context_id)
        return ""

    def started(self, task_id: str, task: str) -> None:
        """The task is known by its id now."""
        self.task_id = task_id
        self.origin = origin_label(self.name, task_id, self._origin)
        self._send(
            SubagentStarted(
                origin=self._origin,
                session_id=self._session_id,
                child_session_id=task_id,
                name=self.name,
                task=task,
                mode="remote",
            )
        )

    def finish(self, outcome: Outcome) -> None:
        """Say how the task ended (nothing if it never started)."""
        if not self.task_id:
            return
        status = {"answer": "done", "question": "done"}.get(outcome.kind, outcome.kind)
        self._send(
            SubagentFinished(
                origin=self._origin,
                session_id=self._session_id,
                child_session_id=self.task_id,
                name=self.name,
                status=status,
                summary=" ".join(redact(outcome.text, self.secrets).split())[:120],
            )
        )

    def _send(self, event: Event) -> None:
        if self._emit is not None:
            self._emit(event)


def _task_of(response: StreamResponse) -> str:  # "" when it names none
    if response.HasField("task"):
        return str(response.task.id)
    if response.HasField("status_update"):
        return str(response.status_update.task_id)
    if response.HasField("artifact_update"):
        return str(response.artifact_update.task_id)
    return ""


def foreign_answer(task_id: str, other: str) -> Outcome:
    """An answer about task `other` while following `task_id`: a protocol error."""
    return Outcome(
        "failed",
        f"protocol error: the remote agent answered about task {other!r} when"
        f" following task {task_id!r}; its answer was not taken",
        task_id,
    )


def text_of(parts: Iterable[Part]) -> str:
    """The parts as text: data as JSON, a file named by what it is."""
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


async def answer_question(
    remote: RemoteAgent,
    client: Client,
    watch: Watch,
    task_id: str,
    answer: str,
    record: Callable[[str, str], Awaitable[None]] | None,
) -> Outcome:
    """Answer the question task `task_id` asked, and follow it on."""
    try:
        current = await _get(remote, client, task_id)
    except Exception as exc:
        return Outcome("failed", f"cannot read task {task_id}: {why(exc)}", task_id)
    if current.id != task_id:
        return foreign_answer(task_id, current.id)
    state = current.status.state
    if state != TaskState.TASK_STATE_INPUT_REQUIRED:
        what = _ENDED.get(state, f"in state {TaskState.Name(state)}")
        return Outcome("failed", f"task {task_id} asks nothing to answer: it {what}", task_id)
    watch.started(task_id, answer)
    if record is not None:
        await record(task_id, current.context_id)
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=answer)],
        task_id=task_id,
        context_id=current.context_id,
    )
    # Until the agent takes the answer in, the task's state is not its end.
    return await hand_over(
        remote, client, watch, answer, None, message=message, stale=current.status
    )


async def hand_over(
    remote: RemoteAgent,
    client: Client,
    watch: Watch,
    task: str,
    record: Callable[[str, str], Awaitable[None]] | None,
    *,
    message: Message | None = None,
    stale: TaskStatus | None = None,
) -> Outcome:
    """Hand `task` over (as a new task, unless `message` says otherwise), and
    follow it to its end."""
    if message is None:
        message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=task)])
    stream = client.send_message(SendMessageRequest(message=message))
    try:
        while not watch.task_id:
            try:
                response = await anext(stream)
            except StopAsyncIteration:
                return Outcome("failed", "it answered with a message, not a task it worked on")
            except Exception as exc:
                return Outcome("failed", f"the call failed: {why(exc)}")
            context_id = watch.see(response, task)
            if watch.foreign:
                return foreign_answer(watch.task_id, watch.foreign)
            if record is not None and watch.task_id:
                # Kept first: from here on, a crash leaves a task to follow again.
                await record(watch.task_id, context_id)
        return await listen_and_poll(remote, client, watch, stream, task, stale)
    finally:
        await _close(stream)


async def listen_and_poll(
    remote: RemoteAgent,
    client: Client,
    watch: Watch,
    stream: AsyncIterator[StreamResponse],
    task: str,
    stale: TaskStatus | None = None,
) -> Outcome:
    """Listen to `stream` (closed at the end) while reading the task (every
    `poll_interval` seconds, at once when the stream ended) until it ends,
    moved past any `stale` status; an answer about another task is a protocol
    error."""
    ended = asyncio.Event()
    listening = asyncio.get_running_loop().create_task(_listen(stream, watch, task, ended))
    try:
        task_id = watch.task_id
        tries = Tries(remote.unreachable_for)
        while True:
            if watch.foreign:
                return foreign_answer(watch.task_id, watch.foreign)
            try:
                found = await _get(remote, client, task_id)
            except Exception as exc:
                if answered(exc) or not await tries.again():
                    return Outcome(
                        "failed", f"cannot read task {task_id}: {why(exc)}{tries.said()}", task_id
                    )
                continue
            tries.reset()
            if found.id != task_id:
                return foreign_answer(task_id, found.id)
            if found.status.state in _ENDED and found.status != stale:
                return _outcome(found)
            if ended.is_set():
                await asyncio.sleep(remote.poll_interval)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), remote.poll_interval)
    finally:
        listening.cancel()
        await asyncio.wait([listening])
        await _close(stream)


async def _listen(
    stream: AsyncIterator[StreamResponse], watch: Watch, task: str, ended: asyncio.Event
) -> None:
    """The rest of the stream, to `watch`; sets `ended` when it ends."""
    try:
        async for response in stream:
            watch.see(response, task)
            if watch.foreign:
                break  # a server that streams another task's events is not believed
    except Exception as exc:
        # The stream broke, not the task: reading the task goes on.
        logger.info("the stream of remote task %s broke: %s", watch.task_id, why(exc))
    finally:
        ended.set()


async def _get(remote: RemoteAgent, client: Client, task_id: str) -> Task:
    async with asyncio.timeout(remote.connect_timeout + 5):
        return await client.get_task(GetTaskRequest(id=task_id))


def _outcome(final: Task) -> Outcome:
    state = final.status.state
    said = text_of(final.status.message.parts) if final.status.HasField("message") else ""
    if state == TaskState.TASK_STATE_COMPLETED:
        answer = text_of(part for artifact in final.artifacts for part in artifact.parts)
        return Outcome("answer", answer if answer.strip() else said, final.id)
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        return Outcome("question", said or "(it asks for input without saying what)", final.id)
    what = _ENDED.get(state, f"stopped in state {TaskState.Name(state)}")
    kind: Literal["failed", "stopped"] = (
        "stopped" if state == TaskState.TASK_STATE_CANCELED else "failed"
    )
    return Outcome(kind, f"task {final.id} {what}" + (f": {said}" if said else ""), final.id)


class Tries:
    """Tries again, after longer and longer pauses, for `patience` seconds in
    a row (0: never)."""

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self._since: float | None = None
        self._pause = _FIRST_RETRY

    async def again(self) -> bool:
        """Whether to try again (after a pause, taken here)."""
        now = asyncio.get_running_loop().time()
        if self._since is None:
            self._since = now
        left = self._since + self.patience - now
        if left <= 0:
            return False
        await asyncio.sleep(min(self._pause, left))
        self._pause = min(self._pause * 2, _LAST_RETRY)
        return True

    def reset(self) -> None:
        """An answer came: the next failure starts a new count."""
        self._since = None
        self._pause = _FIRST_RETRY

    def said(self) -> str:
        """What the error adds about the tries, if there were any."""
        if not self.patience:
            return ""
        return f" (it did not answer for {self.patience:g} s)"


async def _close(stream: AsyncIterator[StreamResponse]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()


async def cancel_task(client: Client, task_id: str) -> None:
    """Ask the agent to cancel the task; best effort, never raises."""
    if not task_id:
        return
    # The remote agent may be gone, which may be why we are here.
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            await client.cancel_task(CancelTaskRequest(id=task_id))


def answered(exc: BaseException) -> bool:
    """Whether the agent's server itself answered with this error (a task it
    does not know, say): trying again would get the same answer."""
    return isinstance(exc, A2AError) and not isinstance(exc, A2AClientError)


def why(exc: BaseException) -> str:
    """The exception in one bounded line."""
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"
