"""Remote A2A agents as named subagents: a task handed over the protocol.

Inline by default, like a `SubAgent`: the parent model calls a tool named
after the remote agent with a `task`; the remote agent sees only that task;
its text as it works reaches event subscribers tagged with its origin, and
only its final answer returns. In the background (`background=True`), like
a background child: the call answers at once, and the answer arrives as a
notice at a later round boundary (see `_follow`).

A remote agent that asks for input (`input-required`) asks the parent's
model: its question comes back in band with the task's id, and the model
answers by calling the tool again with that `task_id` and its answer as
`task`, which continues the same remote task. Everything else that can go
wrong (no agent at the URL, a card that is not one, no answer in time, a
task that failed or was cancelled over there, a server that stays
unreachable while its task is followed, an answer too long, parts that are
not text) becomes an in-band error result or a note in the answer, never an
exception out of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import httpx
import pydantic
from a2a.client import A2AClientError, ClientConfig, create_client
from a2a.client.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError

from .._redact import credentials, redact, safe_url
from ..delegation import DEFAULT_MAX_ANSWER_CHARS, DelegationTool, check_answer_cap
from ..errors import ConfigurationError
from ..events import Event, SubagentFinished, SubagentStarted, TextDelta, origin_label
from ..tools import ApprovalRule, Tool, ToolOutput

if TYPE_CHECKING:
    from ..background import RunStart
    from ..runtime import Runtime
    from ..tools import ToolContext

__all__ = ["RemoteAgent"]

logger = logging.getLogger("taskloom")


class _Arguments(pydantic.BaseModel, extra="forbid"):
    """A remote agent tool's arguments: a task, or the answer to a question
    its task asked."""

    task: str = pydantic.Field(
        description=(
            "The complete task: the agent sees nothing else. When you answer a"
            " question the agent asked, your answer."
        )
    )
    task_id: str = pydantic.Field(
        "",
        description=(
            "Only to answer a question the agent asked: the task_id its question"
            " came with. The agent then goes on with that same task."
        ),
    )


_ENDED = {
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "was cancelled",
    TaskState.TASK_STATE_REJECTED: "rejected the task",
    TaskState.TASK_STATE_INPUT_REQUIRED: "asks for input",
    TaskState.TASK_STATE_AUTH_REQUIRED: "asks for authentication",
}
"""The states a followed task ends in, as the parent's model is told them."""

_FIRST_RETRY = 0.25
_LAST_RETRY = 10.0
"""Seconds between tries while a followed task's server does not answer:
doubling from the first to the last."""


class Outcome(NamedTuple):
    """How one exchange with the remote agent ended."""

    kind: Literal["answer", "question", "failed", "stopped"]
    text: str
    task_id: str = ""


class Unreachable(Exception):
    """The agent card could not be read (nothing was sent)."""


class RemoteAgent:
    """An agent served over A2A at `url`, as a subagent: `.tool()` gives a
    parent a tool named `name` that takes `task`, hands it to the remote
    agent as a new A2A task and answers `{"answer": ..., "task_id": ...}`
    once the task completes — or an in-band error saying what went wrong.

    When the remote agent asks for input, the result is
    `{"question": ..., "task_id": ...}` (not an error): the parent's model
    answers by calling the tool again with `task_id` and its answer as
    `task`, and the same remote task goes on.

    With `background=True` the call answers at once with a receipt and the
    remote task is followed in the background of the parent's session: its
    answer (or question, or error) arrives as a notice at a later round
    boundary, exactly once, and the run is reminded of it while it runs.
    The remote task's id is kept in the parent's store as soon as the
    remote server gives it, so after a crash the session's next run in any
    process (with this agent among its tools) follows it again from there.
    Stopping the run that started it, deleting the session or closing the
    runtime cancels the remote task (best effort).

    `timeout` bounds a whole call, in the background from its start (a task
    still running then is cancelled over there, best effort),
    `connect_timeout` each connection; a followed task's server that does
    not answer is tried again, less and less often, for `unreachable_for`
    seconds before the call ends in an error; `poll_interval` is how often a
    task whose stream ended early is read (`tasks/get`). `token` is sent as
    `Authorization: Bearer`, never stored (an echo of it is stored
    `[redacted]`; the URL is shown and stored as `public_url`, without
    credentials); the answer (or question) is cut at `max_answer_chars`, as
    every delegation's, and the whole of it is kept in a child session of
    the caller's, where `read_agent(agent=..., offset=...)` reads on (the
    cut says how). `needs_approval` gates the
    delegation itself. Building one does no I/O: the card is read per call.
    """

    def __init__(
        self,
        name: str,
        url: str,
        *,
        description: str,
        token: str | None = None,
        background: bool = False,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        unreachable_for: float = 120.0,
        poll_interval: float = 2.0,
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
        needs_approval: ApprovalRule = False,
    ) -> None:
        if not description:
            raise ConfigurationError(
                f"remote agent {name!r} needs a description: the parent model reads it"
            )
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"remote agent {name!r}: {url!r} is not an http(s) URL")
        if min(timeout, connect_timeout, unreachable_for, poll_interval) <= 0:
            raise ConfigurationError(
                f"remote agent {name!r}: timeouts, unreachable_for and poll_interval must be positive"
            )
        self.name = name
        self.url = url
        self.description = description
        self.background = background
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.unreachable_for = unreachable_for
        self.poll_interval = poll_interval
        self.max_answer_chars = check_answer_cap(f"remote agent {name!r}", max_answer_chars)
        self.needs_approval = needs_approval
        self._token = token
        self.public_url = safe_url(url)
        self.secrets = credentials(
            headers={"Authorization": f"Bearer {token}"} if token else {}, urls=(url,)
        )

    def __repr__(self) -> str:
        # Never the token, nor the URL's credentials.
        return f"RemoteAgent({self.name!r}, {self.public_url!r})"

    def tool(self) -> Tool:
        """A delegation tool for a parent agent (a new one each call, kept by the agent
        given it)."""
        made: Tool
        if self.background:
            made = _BackgroundTool(self)
        else:
            made = DelegationTool(
                self.name,
                self.description,
                _Arguments,
                self._delegate,
                needs_approval=self.needs_approval,
            )
        made.secrets = self.secrets
        return made

    # ------------------------------------------------------------ a call

    async def _delegate(
        self, runtime: Runtime, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolOutput:
        task = arguments["task"].strip()
        task_id = arguments["task_id"].strip()
        if not task:
            return self.error("'task' is empty; describe the complete task for the agent")
        from ._follow import keep_whole, start_following

        if self.background:
            return await start_following(self, runtime, ctx, task, task_id)
        watch = Watch(self.name, ctx.emit, ctx.origin, ctx.session_id, self.secrets)
        try:
            async with self.client() as client:
                outcome = await self.exchange(client, watch, self.timeout, task, task_id)
        except Unreachable as exc:
            return self.error(str(exc))
        watch.finish(outcome)
        return self._tool_output(await keep_whole(self, runtime, ctx, task, outcome))

    def _tool_output(self, outcome: Outcome) -> ToolOutput:
        if outcome.kind == "answer":
            body = {"answer": outcome.text, "task_id": outcome.task_id}
        elif outcome.kind == "question":
            body = {"question": outcome.text, "task_id": outcome.task_id}
        else:
            return self.error(outcome.text)
        return ToolOutput(json.dumps(body, ensure_ascii=False))

    def error(self, text: str) -> ToolOutput:
        """An in-band error result naming this agent."""
        return ToolOutput(f"{self.describe()}: {text}", is_error=True)

    def describe(self) -> str:
        """How results name this agent: its name and URL."""
        return f"remote agent {self.name!r} ({self.public_url})"

    # ------------------------------------------------------------ the protocol

    @contextlib.asynccontextmanager
    async def client(self, *, patient: bool = False) -> AsyncIterator[Client]:
        """A client for the agent, its card read; raises `Unreachable` when
        the card cannot be had — at once, or `patient`ly after trying again
        for `unreachable_for` seconds (a task to follow is waiting there)."""
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        timeouts = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        async with httpx.AsyncClient(headers=headers, timeout=timeouts) as http:
            config = ClientConfig(httpx_client=http, streaming=True)
            tries = _Tries(self.unreachable_for if patient else 0.0)
            while True:
                try:
                    client = await asyncio.wait_for(
                        create_client(self.url, config), self.connect_timeout + 5
                    )
                    break
                except Exception as exc:
                    if not await tries.again():
                        raise Unreachable(
                            f"cannot read its agent card at {self.public_url}: {why(exc)}"
                            + tries.said()
                        ) from None
            async with client:
                yield client

    async def exchange(
        self,
        client: Client,
        watch: Watch,
        timeout: float,
        task: str = "",
        task_id: str = "",
        *,
        follow: str = "",
        record: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> Outcome:
        """Hand `task` over (a new task, or the answer to `task_id`'s question),
        or `follow` a task handed over before, to its end — within `timeout`
        seconds, after which the task is cancelled over there. `record(task
        id, context id)` is awaited as soon as the task's id is known. If the
        caller is cancelled, so is the remote task (best effort)."""
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                if follow:
                    watch.started(follow, "")
                    return await self._resubscribe(client, watch, follow)
                if task_id:
                    return await self._answer(client, watch, task_id, task, record)
                message = Message(
                    message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=task)]
                )
                return await self._send(client, watch, message, task, record)
        except TimeoutError:
            await cancel_task(client, watch.task_id)
            return Outcome(
                "failed",
                f"no answer within {self.timeout:g} s; the task was cancelled",
                watch.task_id,
            )
        except asyncio.CancelledError:
            await asyncio.shield(cancel_task(client, watch.task_id))
            raise

    async def _answer(
        self,
        client: Client,
        watch: Watch,
        task_id: str,
        answer: str,
        record: Callable[[str, str], Awaitable[None]] | None,
    ) -> Outcome:
        """Answer the question task `task_id` asked, and follow it on."""
        try:
            current = await self._get(client, task_id)
        except Exception as exc:
            return Outcome("failed", f"cannot read task {task_id}: {why(exc)}", task_id)
        if current.id != task_id:
            return _foreign(task_id, current.id)
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
        # Until the agent takes the answer in, the task reads as it did: that
        # state is not its end.
        return await self._send(client, watch, message, answer, None, stale=current.status)

    async def _send(
        self,
        client: Client,
        watch: Watch,
        message: Message,
        task: str,
        record: Callable[[str, str], Awaitable[None]] | None,
        *,
        stale: TaskStatus | None = None,
    ) -> Outcome:
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
                    return watch.refusal()
                if record is not None and watch.task_id:
                    # Kept before anything else happens: from here on, a
                    # crash leaves a task someone can follow again.
                    await record(watch.task_id, context_id)
            return await self._listen_and_poll(client, watch, stream, task, stale)
        finally:
            await _close(stream)

    async def _resubscribe(self, client: Client, watch: Watch, task_id: str) -> Outcome:
        """Follow a task handed over before: its stream (`tasks/subscribe`)
        tells at once when it ends, reading it every `poll_interval` seconds
        notices a server gone silent; a server without streams is read only."""
        stream = client.subscribe(SubscribeToTaskRequest(id=task_id))
        try:
            return await self._listen_and_poll(client, watch, stream, "")
        finally:
            await _close(stream)

    async def _listen_and_poll(
        self,
        client: Client,
        watch: Watch,
        stream: AsyncIterator[StreamResponse],
        task: str,
        stale: TaskStatus | None = None,
    ) -> Outcome:
        # The stream tells what the agent says as it works; reading the task
        # beside it is what notices a server gone silent, and the task as the
        # agent holds it is the whole answer.
        ended = asyncio.Event()
        listening = asyncio.get_running_loop().create_task(self._listen(stream, watch, task, ended))
        try:
            return await self._poll(client, watch.task_id, ended, stale, watch)
        finally:
            listening.cancel()
            await asyncio.wait([listening])

    async def _listen(
        self, stream: AsyncIterator[StreamResponse], watch: Watch, task: str, ended: asyncio.Event
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

    async def _poll(
        self,
        client: Client,
        task_id: str,
        ended: asyncio.Event | None = None,
        stale: TaskStatus | None = None,
        watch: Watch | None = None,
    ) -> Outcome:
        """Read the task until it ends, trying again while its server does not
        answer; every `poll_interval` seconds, and at once when its stream
        has `ended`. A task still in the `stale` status has not moved yet.
        An answer about another task (read, or streamed to `watch`) is a
        protocol error, never this task's end."""
        tries = _Tries(self.unreachable_for)
        while True:
            if watch is not None and watch.foreign:
                return watch.refusal()
            try:
                task = await self._get(client, task_id)
            except Exception as exc:
                if answered(exc) or not await tries.again():
                    return Outcome(
                        "failed", f"cannot read task {task_id}: {why(exc)}{tries.said()}", task_id
                    )
                continue
            tries.reset()
            if task.id != task_id:
                return _foreign(task_id, task.id)
            if task.status.state in _ENDED and task.status != stale:
                return self._outcome(task)
            if ended is None or ended.is_set():
                await asyncio.sleep(self.poll_interval)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), self.poll_interval)

    async def _get(self, client: Client, task_id: str) -> Task:
        async with asyncio.timeout(self.connect_timeout + 5):
            return await client.get_task(GetTaskRequest(id=task_id))

    def _outcome(self, final: Task) -> Outcome:
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


class _BackgroundTool(DelegationTool):
    """The tool of a background `RemoteAgent`: it also resumes following the
    remote tasks of a session that nobody follows any more."""

    __slots__ = ("remote",)

    def __init__(self, remote: RemoteAgent) -> None:
        super().__init__(
            remote.name,
            remote.description,
            _Arguments,
            remote._delegate,
            needs_approval=remote.needs_approval,
        )
        self.remote = remote

    async def resume_work(self, start: RunStart) -> None:
        """Follow again the session's remote tasks of this agent that no live
        process follows (see `taskloom.background.ResumesWork`)."""
        from ._follow import resume_following

        await resume_following(self.remote, self.runtime, start)


class _Tries:
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


class Watch:
    """The task as the stream tells it, and the events a child's would give
    (to `emit`, which may be None: then no one listens), with `secrets`
    redacted from the remote agent's words."""

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

    def refusal(self) -> Outcome:
        """The outcome of a server that streamed another task's events."""
        return _foreign(self.task_id, self.foreign)

    def see(self, response: StreamResponse, task: str) -> str:
        """Take in one streamed response; returns the context id it names.
        An event about another task than the one followed is not taken in
        (`foreign` names it)."""
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


def _task_of(response: StreamResponse) -> str:
    """The id of the task a streamed response is about ("" when it names none)."""
    if response.HasField("task"):
        return str(response.task.id)
    if response.HasField("status_update"):
        return str(response.status_update.task_id)
    if response.HasField("artifact_update"):
        return str(response.artifact_update.task_id)
    return ""


def _foreign(task_id: str, other: str) -> Outcome:
    return Outcome(
        "failed",
        f"protocol error: the remote agent answered about task {other!r} when"
        f" following task {task_id!r}; its answer was not taken",
        task_id,
    )


async def _close(stream: AsyncIterator[StreamResponse]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()


def text_of(parts: Iterable[Part]) -> str:
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
