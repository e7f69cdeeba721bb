"""Serving an agent over A2A: every A2A task is a taskloom session.

The task id is the session id, so a task outlives the server process: any
process with the same store answers `tasks/get` for it, derived from the
session's log. `message/send` and `message/stream` run the session (text as
it is written goes out as `working` status updates, the answer as the
`answer` artifact); an approval parks the task in `input-required`, and the
client's reply decides every parked call (a reply starting with "approve" or
"yes" approves, anything else denies with the reply as the note) and resumes
the run; `tasks/cancel` stops it. With a bearer token, every call but the
agent card's must carry it; the token is the host's and never reaches a
session.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import socket
import uuid
from collections.abc import Callable
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import TaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import __version__
from ..agent import Agent
from ..entries import RunFinishedEntry, RunStartedEntry, StopRequest
from ..errors import ConfigurationError, SessionNotFound
from ..events import TextDelta
from ..loop import RunStream
from ..results import RunResult, RunStatus
from ..runtime import Runtime, Session

__all__ = [
    "ANSWER",
    "CONTEXT_KEY",
    "SessionTaskStore",
    "a2a_app",
    "agent_card",
    "approves",
    "serve_agent",
    "task_of",
]

CONTEXT_KEY = "a2a_context_id"
"""The session metadata key holding the A2A context id of the task it is."""

ANSWER = "answer"
"""The id of the artifact that carries a completed task's answer."""

_CARD_PATH = "/.well-known/agent-card.json"
_SETTLED = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
}


def agent_card(agent: Agent, url: str) -> AgentCard:
    """The A2A agent card of `agent` served at `url`: its name, description,
    one skill (the agent itself), text in and out, streaming."""
    description = agent.description or f"The agent {agent.name!r}: give it a task."
    return AgentCard(
        name=agent.name,
        description=description,
        version=__version__,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id=agent.name, name=agent.name, description=description, tags=["agent"])
        ],
    )


def a2a_app(agent: Agent, runtime: Runtime, *, url: str, token: str | None = None) -> Starlette:
    """An ASGI app serving `agent` over A2A (JSON-RPC at its root, the card at
    `/.well-known/agent-card.json`), each task a session of `runtime`. `url`
    is where clients reach the app (the card names it); with `token`, every
    call but the card's needs `Authorization: Bearer <token>`."""
    card = agent_card(agent, url)
    handler = DefaultRequestHandler(
        agent_executor=_SessionExecutor(agent, runtime),
        task_store=SessionTaskStore(agent, runtime),
        agent_card=card,
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    app = Starlette(routes=routes)
    if token is not None:
        if not token:
            raise ConfigurationError("the A2A bearer token is empty")
        app.add_middleware(_BearerGuard, token=token)
    return app


class _BearerGuard:
    """Refuses (401) every request but the agent card's without the token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].endswith(_CARD_PATH):
            given = Request(scope).headers.get("authorization", "").encode()
            # Constant time, so the token cannot be guessed byte by byte.
            if not hmac.compare_digest(given, self.expected):
                response: Response = JSONResponse(
                    {"error": "unauthorized"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class SessionTaskStore(TaskStore):
    """A2A tasks read from taskloom sessions: a task settled (or parked) is
    derived from its session's log; a task in flight in this process is
    the latest state the protocol handler saved, a cache the log replaces
    once the task settles."""

    def __init__(self, agent: Agent, runtime: Runtime) -> None:
        self.agent = agent
        self.runtime = runtime
        self._live: dict[str, Task] = {}

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Keep the handler's view of a task in flight; drop it once settled."""
        if task.status.state in _SETTLED:
            self._live.pop(task.id, None)
        else:
            copy = Task()
            copy.CopyFrom(task)
            self._live[task.id] = copy

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task in flight here, else the one derived from the session's log."""
        live = self._live.get(task_id)
        if live is not None:
            copy = Task()
            copy.CopyFrom(live)
            return copy
        try:
            meta = await self.runtime.store.get(task_id)
        except SessionNotFound:
            return None
        # Only sessions begun as A2A tasks of this agent are tasks: the store
        # may hold the host's other sessions, which are not the client's to read.
        if meta.agent != self.agent.name or CONTEXT_KEY not in meta.metadata:
            return None
        session = await self.runtime.open_session(task_id, self.agent)
        return await task_of(session, str(meta.metadata.get(CONTEXT_KEY, "")))

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The tasks in flight in this process (the store keeps sessions, not a task index)."""
        tasks = list(self._live.values())
        return ListTasksResponse(tasks=tasks, total_size=len(tasks), page_size=len(tasks))

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget the cached state; the session stays in the store."""
        self._live.pop(task_id, None)


async def task_of(session: Session[Any, Any], context_id: str) -> Task:
    """The A2A task that `session` is, from its log: a run in flight is
    `working`, or `canceled` once a stop was asked for it (a cancelled run
    writes no end of its own)."""
    started = finished = stopped = -1
    for at, entry in enumerate(await session.entries()):
        if isinstance(entry.payload, RunStartedEntry):
            started = at
        elif isinstance(entry.payload, RunFinishedEntry):
            finished = at
        elif isinstance(entry.payload, StopRequest):
            stopped = at
    result = session.journal.log.finished_result(session.id, session.agent)
    task = Task(id=session.id, context_id=context_id)
    if result is None or started > finished:
        state = TaskState.TASK_STATE_CANCELED if stopped > started else TaskState.TASK_STATE_WORKING
        task.status.CopyFrom(TaskStatus(state=state))
        return task
    state, note = _state(result)
    status = TaskStatus(state=state)
    if note:
        status.message.CopyFrom(_agent_message(note, session.id, context_id))
    task.status.CopyFrom(status)
    if result.status is RunStatus.COMPLETED:
        task.artifacts.append(Artifact(artifact_id=ANSWER, name=ANSWER, parts=[_answer(result)]))
    return task


def _state(result: RunResult) -> tuple[TaskState, str]:
    """The task state a run's end is, and what to tell the client about it."""
    why = f": {result.error}" if result.error else ""
    match result.status:
        case RunStatus.COMPLETED:
            return TaskState.TASK_STATE_COMPLETED, ""
        case RunStatus.AWAITING_APPROVAL:
            calls = "; ".join(
                f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in result.pending
            )
            return (
                TaskState.TASK_STATE_INPUT_REQUIRED,
                f"approval needed for: {calls}. Reply 'approve' to run them, "
                "anything else to deny them (your reply is the reason given).",
            )
        case RunStatus.STOPPED:
            return TaskState.TASK_STATE_CANCELED, f"the run stopped{why}"
        case _:
            return TaskState.TASK_STATE_FAILED, f"the run ended {result.status.value}{why}"


def _answer(result: RunResult) -> Part:
    output = result.output
    if output is not None and not isinstance(output, str):
        dump = getattr(output, "model_dump", None)
        value = dump(mode="json") if callable(dump) else output
        return Part(text=json.dumps(value, ensure_ascii=False), media_type="application/json")
    return Part(text=result.text)


def _agent_message(text: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_AGENT,
        task_id=task_id,
        context_id=context_id,
        parts=[Part(text=text)],
    )


def approves(reply: str) -> bool:
    """Whether a client's reply to `input-required` approves the parked calls."""
    word = reply.strip().lower()
    return word.startswith(("approve", "yes"))


class _SessionExecutor(AgentExecutor):
    """Runs the session an A2A task is, publishing its events on the task."""

    def __init__(self, agent: Agent, runtime: Runtime) -> None:
        self.agent = agent
        self.runtime = runtime

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        text = context.get_user_input()
        if context.current_task is None:
            first = Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
            )
            if context.message is not None:
                first.history.append(context.message)
            # The task before the session: the handler reads the store to see
            # whether the task is new, and a session would already be one.
            await event_queue.enqueue_event(first)
            session = await self.runtime.create_session(
                self.agent, session_id=task_id, metadata={CONTEXT_KEY: context_id}
            )
            stream = session.stream(text)
        else:
            session = await self.runtime.open_session(task_id, self.agent)
            pending = await session.pending()
            if pending:
                for call in pending:
                    if approves(text):
                        await session.approve(call.id, note=text)
                    else:
                        await session.deny(call.id, note=text)
                stream = RunStream(lambda emit: session.resume(emit=emit))
            else:
                stream = session.stream(text)
        await updater.start_work()
        try:
            async for event in stream:
                # Only the agent's own words: a child's text stays inside its tool.
                if isinstance(event, TextDelta) and not event.origin and event.text:
                    await updater.update_status(
                        TaskState.TASK_STATE_WORKING,
                        message=_agent_message(event.text, task_id, context_id),
                    )
        except Exception as exc:
            # The run recorded its failure in its session; the client gets it in band.
            why = f"the agent's run failed: {type(exc).__name__}: {exc}"
            await updater.failed(_agent_message(why, task_id, context_id))
            return
        result = stream.result
        assert result is not None
        state, note = _state(result)
        if state is TaskState.TASK_STATE_COMPLETED:
            await updater.add_artifact([_answer(result)], artifact_id=ANSWER, name=ANSWER)
        message = _agent_message(note, task_id, context_id) if note else None
        await updater.update_status(state, message=message)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        # The handler has cancelled a run in this process; a run elsewhere
        # (a worker on the same store) stops at its next boundary.
        with contextlib.suppress(SessionNotFound):
            session = await self.runtime.open_session(task_id, self.agent)
            await session.request_stop("cancelled over A2A")
        updater = TaskUpdater(event_queue, task_id, context.context_id or "")
        await updater.cancel()


async def serve_agent(
    agent: Agent,
    runtime: Runtime | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve `agent` over A2A at `http://host:port/` until cancelled (port 0:
    one the OS picks). `on_ready` gets the URL once it accepts calls. The
    runtime (default: an in-memory one) is closed at the end."""
    import uvicorn

    runtime = runtime if runtime is not None else Runtime(agents=[agent])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    app = a2a_app(agent, runtime, url=url, token=token)

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready(url)

    async with runtime:
        with sock:
            config = uvicorn.Config(app, log_level="warning", lifespan="off")
            await Announcing(config).serve([sock])
