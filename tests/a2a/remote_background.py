"""A parent that hands tasks to a remote agent in the background, and what its log says."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from taskloom import Agent, Runtime
from taskloom.a2a import RemoteAgent
from taskloom.entries import Entry, MessageEntry, SubagentDispatched
from taskloom.events import Event, WorkFinished
from taskloom.messages import ToolResult
from taskloom.models import FunctionModel, ModelRequest, reply

ASKED = re.compile(r"asks for input \(task_id (\S+)\)")


def heard(request: ModelRequest) -> str:
    """Everything the parent's model was told, as one text."""
    return "\n".join(m.text for m in request.messages if m.role == "user")


def parent_model(answer: str = "Paris") -> FunctionModel:
    """A parent that delegates its user's text after `delegate:`, answers a
    question with `answer`, and otherwise says what it heard last."""

    def respond(request: ModelRequest) -> Any:
        last = request.messages[-1]
        said = last.text
        if last.role == "user" and said.startswith("delegate: "):
            return reply(tool_calls=[("remote", {"task": said.removeprefix("delegate: ")})])
        asked = ASKED.findall(said)
        if asked and "[background]" in said:
            return reply(tool_calls=[("remote", {"task": answer, "task_id": asked[-1]})])
        results = [b for b in last.blocks if isinstance(b, ToolResult)]
        if results:
            return reply("started")
        return reply("heard: " + said)

    return FunctionModel(respond)


def remote_agent(url: str, **options: Any) -> RemoteAgent:
    """The remote agent at `url` in the background (polled every 0.05 s unless
    `poll_interval` says otherwise: None is the agent's own default)."""
    options.setdefault("poll_interval", 0.05)
    if options["poll_interval"] is None:
        del options["poll_interval"]
    return RemoteAgent("remote", url, description="An agent elsewhere.", background=True, **options)


def parent(url: str, model: FunctionModel | None = None, **options: Any) -> Agent:
    return Agent("parent", model or parent_model(), tools=[remote_agent(url, **options).tool()])


class Finished:
    """`WorkFinished` events of a runtime's background work, to wait for."""

    def __init__(self, runtime: Runtime) -> None:
        self.seen: list[WorkFinished] = []
        self._changed = asyncio.Event()
        runtime.background.emit = self._on

    def _on(self, event: Event) -> None:
        if isinstance(event, WorkFinished):
            self.seen.append(event)
            self._changed.set()

    async def count(self, n: int, timeout: float = 30) -> list[WorkFinished]:
        async with asyncio.timeout(timeout):
            while len(self.seen) < n:
                self._changed.clear()
                await self._changed.wait()
        return self.seen


def receipts(model: FunctionModel) -> list[dict[str, Any]]:
    """The receipts the remote tool answered with, in order."""
    found = []
    for request in model.requests:
        for block in request.messages[-1].blocks:
            if (
                isinstance(block, ToolResult)
                and not block.is_error
                and '"started"' in block.content
            ):
                receipt = json.loads(block.content)
                if receipt not in found:
                    found.append(receipt)
    return found


def deliveries(entries: list[Entry], child_id: str) -> list[str]:
    """The texts of the log's messages that carried the child's result."""
    out = []
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, MessageEntry) and f"{child_id}:end" in payload.delivered_ids:
            out.append(payload.delivered_text or "")
    return out


def remote_task_id(entries: list[Entry]) -> str | None:
    """The remote task id a child's log keeps, if any yet."""
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, SubagentDispatched):
            return str(payload.spec["task_id"])
    return None


async def recorded_task_id(runtime: Runtime, child_id: str, timeout: float = 30) -> str:
    """The remote task id, once the child's log keeps it."""
    async with asyncio.timeout(timeout):
        while (found := remote_task_id(await runtime.store.load(child_id))) is None:
            await asyncio.sleep(0.02)
    return found
