"""A minimal agent on the a2a-sdk's own server (no taskloom in it): what
it does depends on the task's first word.

Run as a program (`python sdk_agent.py`), it serves on a free loopback port,
prints `URL <url>` and serves until it is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.struct_pb2 import Struct, Value
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

HUGE = 300_000
BIG = "".join(f"{i:07d}," for i in range(250_000))
"""2,000,000 characters, none of them like another's neighbours (`big` answers them)."""
STRANGER = "a stranger's answer"
SEEN_AUTHORIZATION: list[str] = []
"""The Authorization header of each request the server took (`quote` echoes the last)."""


class EchoExecutor(AgentExecutor):
    """`echo X` answers X; `fail`, `cancel`, `ask` end the task that way
    (`ask` asks "which city?", and the reply to it answers "weather in
    <reply>"); `hang` never answers; `gate PATH X` answers X once the file
    PATH exists (BIG for `big`); `huge` answers HUGE characters, `big`
    BIG; `file` answers text with a file and data part; `stranger` streams the end of another task (with a
    STRANGER answer: see `Stranger`) and never answers about its own; `quote`
    fails quoting the Authorization header it was sent."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.started: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        current = context.current_task
        if current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            updater = TaskUpdater(event_queue, task_id, context_id)
            await updater.update_status(TaskState.TASK_STATE_WORKING)
            answer = f"weather in {context.get_user_input()}"
            await updater.add_artifact([Part(text=answer)], name="answer")
            await updater.complete()
            return
        self.started.append(task_id)
        await event_queue.enqueue_event(
            Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
            )
        )
        updater = TaskUpdater(event_queue, task_id, context_id)
        word, _, rest = context.get_user_input().partition(" ")

        def say(text: str) -> Message:
            return Message(
                message_id=f"{task_id}-{len(text)}",
                role=Role.ROLE_AGENT,
                parts=[Part(text=text)],
                task_id=task_id,
                context_id=context_id,
            )

        await updater.update_status(TaskState.TASK_STATE_WORKING, message=say("thinking"))
        if word == "echo":
            await updater.add_artifact([Part(text=rest)], name="answer")
            await updater.complete()
        elif word == "fail":
            await updater.failed(say("the disk is full"))
        elif word == "quote":
            # A careless server: its failure quotes the credentials it was sent.
            seen = SEEN_AUTHORIZATION[-1] if SEEN_AUTHORIZATION else "nothing"
            await updater.failed(say(f"refused the credentials: Authorization: {seen}"))
        elif word == "cancel":
            await updater.cancel(say("cancelled by its operator"))
        elif word == "ask":
            await updater.requires_input(say("which city?"))
        elif word == "hang":
            await asyncio.Event().wait()
        elif word == "stranger":
            # The SDK refuses events about another task: `Stranger` rewrites
            # this one on its way out.
            await updater.update_status(TaskState.TASK_STATE_WORKING, message=say(STRANGER))
            await asyncio.Event().wait()
        elif word == "gate":
            path, _, answer = rest.partition(" ")
            while not Path(path).exists():  # noqa: ASYNC240 (a test's gate, a cheap stat)
                await asyncio.sleep(0.02)
            answer = BIG if answer == "big" else answer
            await updater.add_artifact([Part(text=answer)], name="answer")
            await updater.complete()
        elif word == "huge":
            await updater.add_artifact([Part(text="x" * HUGE)], name="answer")
            await updater.complete()
        elif word == "big":
            await updater.add_artifact([Part(text=BIG)], name="answer")
            await updater.complete()
        elif word == "file":
            parts = [
                Part(text="see the chart"),
                Part(raw=b"\x89PNG....", filename="chart.png", media_type="image/png"),
                Part(data=Value(struct_value=Struct(fields={"rows": Value(number_value=3)}))),
            ]
            await updater.add_artifact(parts, name="answer")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.append(context.task_id or "")
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class Stranger:
    """ASGI middleware that makes the server lie: a streamed status update
    that says STRANGER is sent as the completion of another task
    (`someone-else`), which the SDK itself would never send."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if b"authorization" in headers:
                SEEN_AUTHORIZATION.append(headers[b"authorization"].decode())

        async def lying(message: dict[str, Any]) -> None:
            body = message.get("body", b"")
            if message["type"] == "http.response.body" and STRANGER.encode() in body:
                message = {**message, "body": _lie(body)}
            await send(message)

        await self.app(scope, receive, lying if scope["type"] == "http" else send)


def _lie(body: bytes) -> bytes:
    lines = []
    for line in body.decode().split("\n"):
        if line.startswith("data: ") and STRANGER in line:
            event = json.loads(line.removeprefix("data: "))
            update = event["result"]["statusUpdate"]
            update["taskId"] = "someone-else"
            update["status"]["state"] = "TASK_STATE_COMPLETED"
            line = "data: " + json.dumps(event)
        lines.append(line)
    return "\n".join(lines).encode()


def card(url: str) -> AgentCard:
    return AgentCard(
        name="sdk-echo",
        description="An echo built on the a2a-sdk.",
        version="1",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )


@contextlib.asynccontextmanager
async def serving(
    app_for: object = None, *, broken_card: bool = False
) -> AsyncIterator[tuple[str, EchoExecutor]]:
    """The SDK agent (or a server whose card is not JSON) on a free loopback
    port while inside; yields its URL and executor."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    executor = EchoExecutor()
    if broken_card:

        async def garbage(request: object) -> PlainTextResponse:
            return PlainTextResponse("<html>not a card</html>")

        app = Starlette(routes=[Route("/.well-known/agent-card.json", garbage)])
    else:
        agent_card = card(url)
        handler = DefaultRequestHandler(executor, InMemoryTaskStore(), agent_card)
        app = Stranger(
            Starlette(
                routes=[
                    *create_agent_card_routes(agent_card),
                    *create_jsonrpc_routes(handler, rpc_url="/"),
                ]
            )
        )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serve = asyncio.create_task(server.serve([sock]))
    try:
        while not server.started:
            if serve.done():
                serve.result()
            await asyncio.sleep(0.01)
        yield url, executor
    finally:
        server.should_exit = True
        serve.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serve
        sock.close()


@contextlib.contextmanager
def serving_process() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The SDK agent in a process of its own on a free loopback port while
    inside; yields its URL and the process, which it SIGKILLs (by pid) after."""
    proc = subprocess.Popen(
        [sys.executable, __file__], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("URL "), f"the SDK agent did not start: {line!r}"
        yield line.split()[1], proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


async def _serve_forever() -> None:
    async with serving() as (url, _):
        sys.stdout.write(f"URL {url}\n")
        sys.stdout.flush()
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve_forever())
