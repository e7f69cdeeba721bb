"""Serving an agent over A2A: every A2A task is a taskloom session.

The task id is the session id, read from the log through
`taskloom.runtime.ServedRuns`, so any process on the store answers for it.
`message/send` and `message/stream` run the session (text as `working`
updates, the answer as the `answer` artifact); an approval parks the task
in `input-required`, and a reply decides the parked calls only when it says
so without doubt (a data part, or a clear yes or no), else the question is
asked again. `tasks/cancel` cancels the run within 2 s. A bearer token
guards every call but the card's; a body past `max_body` is refused.
"""

from __future__ import annotations

import asyncio
import copy
import json
import string
import uuid
from collections.abc import AsyncGenerator, Callable
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
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from starlette.applications import Starlette

from .. import __version__
from .._serving import MAX_JSONRPC_BODY, guard, jsonrpc_error, listen, serve_on
from ..agent import Agent
from ..events import TextDelta
from ..results import RunResult
from ..runtime import Runtime, ServedRuns, ServedState, ServedTask

CONTEXT_KEY = "a2a_context_id"
"""The session metadata key holding the A2A context id of the task it is."""

ANSWER = "answer"
"""The id of the artifact that carries a completed task's answer."""

_CARD_PATH = "/.well-known/agent-card.json"
_LOOK = 0.5  # seconds between reads of a task run by another process
_SETTLED = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
}


APPROVAL_HOWTO = (
    "Reply 'yes' (just that) to run them or 'no' to deny them (what follows 'no' is the "
    'reason given), or send a data part {"decisions": {"<call id>": {"approve": true, '
    '"note": "..."}}} to decide each call, or {"approve": false, "note": "..."} for all.'
)
"""How a client decides a parked task's calls (the agent card says it too)."""

_YES = frozenset({"yes", "y", "approve", "approved", "ok", "okay", "allow", "accept"})
_NO = frozenset({"no", "n", "deny", "denied", "reject", "rejected", "decline", "declined"})


def reading(reply: str) -> bool | None:
    """How a client's text reply to `input-required` decides the parked calls:
    True when the whole reply is a yes ("yes", "Approve.", "OK"), False when
    its first word is a no ("no, too much": the rest is the reason), None
    otherwise ("go ahead", "yes but only half"): nothing is decided."""
    words = [w.strip(string.punctuation).lower() for w in reply.split()]
    words = [w for w in words if w]
    if len(words) == 1 and words[0] in _YES:
        return True
    if words and words[0] in _NO:
        return False
    return None


def approves(reply: str) -> bool:
    """Whether a client's reply to `input-required` approves the parked calls
    (see `reading`: only a clear yes does)."""
    return reading(reply) is True


Decision = tuple[bool, str | None]


def decisions_in(message: Message | None) -> tuple[dict[str, Decision], Decision | None]:
    """What a reply decides: per call id, and for every waiting call. A data
    part `{"decisions": {call_id: {"approve": bool, "note": str}}}` (or
    `{call_id: bool}`) decides the calls it names, `{"approve": bool, "note":
    str}` every waiting call, and so does a text `reading` reads as a yes
    or a no (the reply being the note)."""
    each: dict[str, Decision] = {}
    every: Decision | None = None
    if message is None:
        return each, every
    for part in message.parts:
        data = MessageToDict(part.data) if part.HasField("data") else None
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("approve"), bool):
            every = (data["approve"], _note(data))
        given = data.get("decisions")
        for call_id, decision in (given if isinstance(given, dict) else {}).items():
            if isinstance(decision, bool):
                each[str(call_id)] = (decision, None)
            elif isinstance(decision, dict) and isinstance(decision.get("approve"), bool):
                each[str(call_id)] = (decision["approve"], _note(decision))
    text = " ".join(p.text for p in message.parts if p.text).strip()
    said = reading(text) if not each and every is None and text else None
    if said is not None:
        every = (said, text)
    return each, every


def message_text(message: Message | None) -> str:
    """A client's message as the agent reads it: its text, and its data as JSON."""
    if message is None:
        return ""
    pieces = [p.text for p in message.parts if p.text]
    pieces += [
        json.dumps(MessageToDict(p.data), ensure_ascii=False)
        for p in message.parts
        if p.HasField("data")
    ]
    return "\n".join(pieces)


def _note(data: dict[str, Any]) -> str | None:
    note = data.get("note")
    return note if isinstance(note, str) else None


def question(served: ServedTask) -> str:
    """What a parked task asks its client (and how to answer)."""
    asked: list[str] = []
    if served.waiting:
        calls = "; ".join(
            f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in served.waiting
        )
        ids = ", ".join(c.id for c in served.waiting)
        asked.append(f"approval needed for: {calls}. {APPROVAL_HOWTO} (call ids: {ids})")
    for waiting in served.questions:
        asked.append(
            f"the task's work asks: {waiting.message} (answer {waiting.id} with "
            "`taskloom answer` or the console)."
        )
    return " ".join(asked)


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
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=agent.name,
                name=agent.name,
                description=f"{description} A call that needs approval parks the task in "
                f"input-required, naming the calls. {APPROVAL_HOWTO}",
                tags=["agent"],
            )
        ],
    )


def a2a_app(
    agent: Agent,
    runtime: Runtime,
    *,
    url: str,
    token: str | None = None,
    max_body: int = MAX_JSONRPC_BODY,
) -> Starlette:
    """An ASGI app serving `agent` over A2A at `url` (JSON-RPC at its root, the
    card at `/.well-known/agent-card.json`), each task a session of `runtime`;
    with `token`, every call but the card's needs `Authorization: Bearer
    <token>`; a body past `max_body` bytes is answered with a JSON-RPC error."""
    card = agent_card(agent, url)
    store = SessionTaskStore(agent, runtime)
    handler = _Handler(store.runs, _SessionExecutor(store.runs), store, card)
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    app = Starlette(routes=routes)
    # Status 200, as the a2a-sdk answers a body its server found too large,
    # so its client raises the error's own type and message.
    too_large = jsonrpc_error(200, f"Payload too large: the limit is {max_body} bytes")
    guard(app, token=token, max_body=max_body, too_large=too_large, open_paths=[_CARD_PATH])
    app.state.served_runs = store.runs
    # The runtime's close stops the runs of this process.
    runtime.service(SessionTaskStore, lambda _: store)
    return app


class SessionTaskStore(TaskStore):
    """A2A tasks read from taskloom sessions through `runs` (a `ServedRuns`),
    or while a run is in flight here, the latest state the handler saved."""

    def __init__(self, agent: Agent, runtime: Runtime) -> None:
        # Sessions of the agent begun as A2A tasks, not the store's others.
        self.runs = ServedRuns(
            runtime, agent, lambda meta: meta.agent == agent.name and CONTEXT_KEY in meta.metadata
        )
        self._live: dict[str, Task] = {}

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Keep the handler's view of a task in flight; drop it once settled
        (a cancelled one is cancelled here too: it may run elsewhere)."""
        if task.status.state == TaskState.TASK_STATE_CANCELED:
            await self.runs.cancel(task.id, "cancelled over A2A")
        if task.status.state in _SETTLED:
            self._live.pop(task.id, None)
        else:
            self._live[task.id] = copy.deepcopy(task)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task in flight here, else the one derived from the session's log."""
        live = self._live.get(task_id)
        if live is not None and self.runs.running(task_id):
            return copy.deepcopy(live)
        found = await self.runs.read(task_id)
        if found is None:
            return live  # the handler's new task, before its session exists
        return _task(found)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The tasks in flight in this process (the store keeps sessions, not a task index)."""
        tasks = list(self._live.values())
        return ListTasksResponse(tasks=tasks, total_size=len(tasks), page_size=len(tasks))

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget the cached state; the session stays in the store."""
        self._live.pop(task_id, None)

    async def close(self) -> None:
        """Stop the runs of this process (their tasks go on after a restart)."""
        await self.runs.close()


def _task(served: ServedTask) -> Task:
    context_id = str(served.meta.metadata.get(CONTEXT_KEY, ""))
    task = Task(id=served.id, context_id=context_id)
    state, note = _state(served)
    task.status.state = state
    if note:
        task.status.message.CopyFrom(_agent_message(note, served.id, context_id))
    if served.state is ServedState.COMPLETED and served.result is not None:
        task.artifacts.append(
            Artifact(artifact_id=ANSWER, name=ANSWER, parts=[_answer(served.result)])
        )
    return task


def _state(served: ServedTask) -> tuple[TaskState, str]:
    """The A2A state of a served task, and what to tell the client about it."""
    result = served.result
    why = f": {result.error}" if result is not None and result.error else ""
    match served.state:
        case ServedState.WORKING:
            return TaskState.TASK_STATE_WORKING, ""
        case ServedState.COMPLETED:
            return TaskState.TASK_STATE_COMPLETED, ""
        case ServedState.INPUT_REQUIRED:
            return TaskState.TASK_STATE_INPUT_REQUIRED, question(served)
        case ServedState.CANCELLED:
            return TaskState.TASK_STATE_CANCELED, f"the run stopped{why}" if why else ""
    status = result.status.value if result is not None else "before it began"
    return TaskState.TASK_STATE_FAILED, f"the run ended {status}{why}"


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


class _Handler(DefaultRequestHandler):
    """The SDK's handler, refusing with an error a decision sent to a task
    that waits for none (never answered with the task's end as if taken)."""

    def __init__(
        self, runs: ServedRuns, executor: AgentExecutor, store: TaskStore, card: AgentCard
    ) -> None:
        super().__init__(agent_executor=executor, task_store=store, agent_card=card)
        self.runs = runs

    async def _refuse_stray(self, message: Message) -> None:
        if not message.task_id:
            return
        each, every = decisions_in(message)
        if not each and every is None:
            return
        found = await self.runs.read(message.task_id)
        if found is not None and found.state is ServedState.WORKING:
            raise InvalidParamsError(
                message=f"task {found.id} is working: nothing waits for a decision"
            )

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        await self._refuse_stray(params.message)
        answer: Message | Task = await super().on_message_send(params, context)
        return answer

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        await self._refuse_stray(params.message)
        async for event in super().on_message_send_stream(params, context):
            yield event


class _SessionExecutor(AgentExecutor):
    """Runs the session an A2A task is, publishing its events on the task."""

    def __init__(self, runs: ServedRuns) -> None:
        self.runs = runs

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            first = Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
            )
            if context.message is not None:
                first.history.append(context.message)
            # The task before the session: the handler reads the store to see
            # whether the task is new.
            await event_queue.enqueue_event(first)
            text = message_text(context.message) or "(an empty message)"
            await self.runs.create(text, task_id=task_id, metadata={CONTEXT_KEY: context_id})
        elif not await self._reply(task_id, context, updater):
            return
        # Followed at once: its events start with the next step of the loop.
        events = self.runs.follow(task_id)
        await updater.start_work()
        while True:
            async for event in events:
                # Only the agent's own words: a child's text stays inside its tool.
                if isinstance(event, TextDelta) and not event.origin and event.text:
                    await updater.update_status(
                        TaskState.TASK_STATE_WORKING,
                        message=_agent_message(event.text, task_id, context_id),
                    )
            found = await self.runs.read(task_id)
            if found is None or found.state is not ServedState.WORKING:
                break
            # Run by another process (or about to be run here): read it on.
            await asyncio.sleep(_LOOK)
            events = self.runs.follow(task_id)
        if found is None:
            return
        task = _task(found)
        if found.state is ServedState.COMPLETED:
            await updater.add_artifact(
                list(task.artifacts[0].parts), artifact_id=ANSWER, name=ANSWER
            )
        message = task.status.message if task.status.HasField("message") else None
        await updater.update_status(task.status.state, message=message)

    async def _reply(self, task_id: str, context: RequestContext, updater: TaskUpdater) -> bool:
        """Take a message on an existing task; whether a run of it is to follow."""
        context_id = context.context_id or ""
        found = await self.runs.read(task_id)
        if found is None:
            return False
        if found.state is ServedState.INPUT_REQUIRED:
            each, every = decisions_in(context.message)
            decisions = {c.id: d for c in found.waiting if (d := each.get(c.id, every)) is not None}
            await self.runs.decide(found, decisions)
            found = await self.runs.read(task_id)  # runs the resume once nothing is left
            if found is not None and found.state is ServedState.INPUT_REQUIRED:
                # Not a decision, or not of every call: ask again, never guess.
                heard = "" if decisions else "That reply decides nothing. "
                message = _agent_message(heard + question(found), task_id, context_id)
                await updater.requires_input(message=message)
                return False
            return True
        text = message_text(context.message)
        if found.state is ServedState.WORKING and text:
            # A new message for the run in flight: it reads it at its next round.
            await self.runs.runtime.steer(task_id, text)
        return found.state is ServedState.WORKING

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        await self.runs.cancel(task_id, "cancelled over A2A")
        updater = TaskUpdater(event_queue, task_id, context.context_id or "")
        await updater.cancel()


async def serve_agent(
    agent: Agent,
    runtime: Runtime | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    max_body: int = MAX_JSONRPC_BODY,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve `agent` (see `a2a_app`) at `http://host:port/` until cancelled
    (port 0: the OS picks; beyond loopback with a `token`); `on_ready` gets
    the URL. The runtime (default: an in-memory one) is closed at the end."""
    runtime = runtime if runtime is not None else Runtime(agents=[agent])
    sock, base = listen(host, port, token)
    with sock:
        url = base + "/"
        app = a2a_app(agent, runtime, url=url, token=token, max_body=max_body)
        async with runtime:
            # Tasks a restart cut off run on now, not at a client's first read.
            await app.state.served_runs.start()
            await serve_on(app, sock, url, on_ready, lifespan="off")
