"""A remote agent's answer longer than the cap reaches the parent's model cut,
and the whole of it is kept in the remote call's child session, where the
parent reads it page by page with `read_agent`: inline and in the
background, against a real A2A server, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from remote_background import deliveries, parent
from sdk_agent import BIG, serving, serving_process
from test_a2a_background_crash import _start_parent

from pg import open_durable
from taskloom import Agent, RunOptions, Runtime
from taskloom.a2a import RemoteAgent
from taskloom.delegation import DEFAULT_MAX_ANSWER_CHARS, child_status, console_tools, kept_answer
from taskloom.entries import MessageEntry
from taskloom.messages import Message
from taskloom.models import FunctionModel, ModelRequest, reply

pytest.importorskip("a2a")
pytestmark = pytest.mark.slow

CAP = DEFAULT_MAX_ANSWER_CHARS
SLACK = 1_000
"""What a request holds besides the cut text: the task, the pointer, JSON."""

POINTER = re.compile(
    r"\n\s*\[\.\.\. output truncated: \d+ more characters; read them with "
    r"read_agent\(agent='(?P<agent>[0-9a-f]+)', offset=(?P<offset>\d+)\) \.\.\.\]"
)


def _chars(message: Message) -> int:
    return len(message.text) + sum(len(r.content) for r in message.results)


class Reader:
    """The parent: hands `big` to the remote agent, then reads the answer it
    is told to its end with `read_agent`, and says "done". `pieces` holds
    what it read, `sizes` the size of each request, `first` the index of
    the request that first held the answer."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.sizes: list[int] = []
        self.first: int | None = None

    def __call__(self, request: ModelRequest) -> Any:
        messages = list(request.messages)
        self.sizes.append(sum(_chars(m) for m in messages))
        if not any(m.role == "assistant" for m in messages):
            return reply(tool_calls=[("remote", {"task": "big"})])
        since = len(messages)
        while since and messages[since - 1].role != "assistant":
            since -= 1
        said = [(m.text, *(r.content for r in m.results)) for m in messages[since:]]
        fresh = "\n".join(part for parts in said for part in parts if part)
        piece = self._piece(fresh)
        if piece is None:
            return reply("waiting")
        pointer = POINTER.search(piece)
        self.pieces.append(piece[: pointer.start()] if pointer else piece)
        if pointer is None:
            return reply("done")
        args = {"agent": pointer["agent"], "offset": int(pointer["offset"])}
        return reply(tool_calls=[("read_agent", args)])

    def _piece(self, fresh: str) -> str | None:
        if fresh.startswith("agent ") and " characters " in fresh:
            return fresh.split("\n", 1)[1]  # a page, after its heading
        if fresh.startswith("{") and '"answer"' in fresh:
            self.first = len(self.sizes) - 1
            return str(json.loads(fresh)["answer"])  # inline
        if "answered:\n" in fresh:
            self.first = len(self.sizes) - 1
            return fresh.split("answered:\n", 1)[1].lstrip(" ")  # the notice, indented
        return None


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
async def test_a_remote_agents_2mb_answer_is_cut_and_read_whole_in_pages(
    store_url: tuple[str, str], background: bool
) -> None:
    reader = Reader()
    async with serving() as (url, _):
        remote = RemoteAgent(
            "remote",
            url,
            description="An agent elsewhere.",
            background=background,
            poll_interval=0.05,
        )
        agent = Agent("lead", FunctionModel(reader), tools=[remote.tool(), *console_tools()])
        async with Runtime(store=open_durable(*store_url)) as runtime:
            session = await runtime.create_session(agent)
            result = await session.run("go", options=RunOptions(max_rounds=None))
            async with asyncio.timeout(30):
                while result.text != "done":
                    await asyncio.sleep(0.05)
                    result = await session.run("news?", options=RunOptions(max_rounds=None))
    assert reader.first is not None
    assert reader.sizes[reader.first] <= CAP + SLACK, reader.sizes[reader.first]
    assert max(reader.sizes[: reader.first]) < SLACK
    assert "".join(reader.pieces) == BIG


TRIALS = 6


@pytest.mark.slow
async def test_a_follower_killed_around_keeping_a_cut_answer_delivers_it_once_kept_once(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    """The follower keeps the whole answer in the child's log, then delivers
    the cut notice, then writes the child's end: SIGKILLed as the answer is
    kept (before, between or after those writes), the session's next run in
    another process delivers the notice once, and the log keeps the answer
    once, whole, where the notice says to read it."""
    counts: list[tuple[int, int]] = []
    landed: list[str] = []
    with serving_process() as (url, _):
        for trial in range(TRIALS):
            gate = tmp_path / f"gate-{trial}"
            session_id = f"parent-{trial}"
            # Killed just before the notice is delivered, just before the
            # child's end is written, or at the first sight of the kept answer.
            where = ("deliver", "end", "")[trial % 3]
            marker = tmp_path / f"held-{trial}"
            hold = f"{where}:{marker}" if where else ""
            proc, child = _start_parent(store_url, session_id, url, f"gate {gate} big", hold=hold)
            try:
                async with Runtime(store=open_durable(*store_url)) as watching:
                    gate.touch()
                    async with asyncio.timeout(30):
                        while not (
                            marker.exists()
                            if where
                            else kept_answer(await watching.store.load(child)) is not None
                        ):
                            await asyncio.sleep(0.005)
            finally:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            async with Runtime(store=open_durable(*store_url)) as runtime:
                # Where the kill landed: the answer kept only, or its notice
                # in too, or the child ended as well.
                ended = await child_status(runtime, child)
                noticed = await runtime.background.inbox.pending(session_id)
                landed.append("ended" if ended.is_terminal else "noticed" if noticed else "kept")
                session = await runtime.open_session(session_id, parent(url))
                await session.run("anything?")  # follows the remote task again, if unended
                async with asyncio.timeout(60):
                    while not (await child_status(runtime, child)).is_terminal:
                        await asyncio.sleep(0.05)
                await session.run("news?")
                await session.run("again?")
                delivered = deliveries(await session.entries(), child)
                logged = await runtime.store.load(child)
            kept = [e for e in logged if isinstance(e.payload, MessageEntry)]
            counts.append((len(delivered), len(kept)))
            assert kept_answer(logged) == BIG
            pointer = f"read them with read_agent(agent={child!r}, offset={CAP})"
            assert all(BIG[:CAP] in text and pointer in text for text in delivered)
    print(f"killed when: {landed}; (deliveries, kept answers) per trial: {counts}")
    assert counts == [(1, 1)] * TRIALS
