"""What a child says reaches its parent's model capped: a 2 MB answer or
question of an inline child, a spawned worker or a background child (its
notice) shows the parent at most `max_answer_chars` characters of it and how
to read on, and the parent reads the whole of it with `read_agent`, page by
page, from the child's log. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, ConfigurationError, RunOptions, RunStatus, Runtime
from taskloom.delegation import (
    DEFAULT_MAX_ANSWER_CHARS,
    Spawner,
    SubAgent,
    TaskDispatcher,
    console_tools,
)
from taskloom.messages import Message
from taskloom.models import FunctionModel, ModelRequest, reply

HUGE = "".join(f"{i:07d}," for i in range(250_000))
"""2,000,000 characters with no newline, none of them like another's neighbours."""

CAP = DEFAULT_MAX_ANSWER_CHARS
SLACK = 1_000
"""What a request holds besides the capped text: the task, the pointer, JSON."""

POINTER = re.compile(
    r"\n\s*\[\.\.\. output truncated: \d+ more characters; read them with "
    r"read_agent\(agent='(?P<agent>[0-9a-f]+)'(?:, question='(?P<question>[^']*)')?, "
    r"offset=(?P<offset>\d+)\) \.\.\.\]"
)
ASKED = re.compile(r"child='(?P<child>[0-9a-f]+)', question='(?P<question>[^']*)'")


def _chars(message: Message) -> int:
    return len(message.text) + sum(len(r.content) for r in message.results)


class Reader:
    """The parent: delegates with `call`, reads every cut text to its end
    with `read_agent`, answers a question with `tool(child=, reply=)`, and
    ends "done" once an answer was read whole. `texts` holds each text it
    read, put together from its pieces; `sizes` the size of each request."""

    def __init__(self, tool: str, call: dict[str, Any]) -> None:
        self.tool = tool
        self.call = call
        self.texts: list[list[str]] = []
        self.sizes: list[int] = []
        self.question: tuple[str, str] | None = None

    def read(self) -> list[str]:
        return ["".join(pieces) for pieces in self.texts]

    def __call__(self, request: ModelRequest) -> Any:
        messages = list(request.messages)
        self.sizes.append(sum(_chars(m) for m in messages))
        last = messages[-1]
        if last.role == "tool":
            [result] = last.results
            fresh = result.content
        else:
            since = len(messages)
            while since and messages[since - 1].role != "assistant":
                since -= 1
            fresh = "\n".join(m.text for m in messages[since:])
        piece = self._piece(fresh)
        if piece is None:
            if last.role == "user" and not any(m.role == "assistant" for m in messages):
                return reply(tool_calls=[(self.tool, self.call)])
            return reply("waiting")
        pointer = POINTER.search(piece)
        self.texts[-1].append(piece[: pointer.start()] if pointer else piece)
        if pointer is not None:
            args: dict[str, Any] = {"agent": pointer["agent"], "offset": int(pointer["offset"])}
            if pointer["question"]:
                args["question"] = pointer["question"]
            return reply(tool_calls=[("read_agent", args)])
        if self.question is not None:
            child, question = self.question
            self.question = None
            answer = {"child": child, "question": question, "reply": "Oslo"}
            return reply(tool_calls=[(self.tool, answer)])
        return reply("done")

    def _piece(self, fresh: str) -> str | None:
        """The part of `fresh` that is a child's text, starting a new text
        unless it is a page `read_agent` gave."""
        if fresh.startswith("agent ") and " characters " in fresh:
            return fresh.split("\n", 1)[1]  # a page: after its heading line
        if fresh.startswith("{"):
            body = json.loads(fresh)
            if "question" in body:
                self.question = (body["child"], body["question_id"])
                self.texts.append([])
                return str(body["question"])
            if "answer" in body:
                self.texts.append([])
                return str(body["answer"])
            return None  # a receipt: the child goes on in the background
        if "Its report:\n" in fresh:
            self.texts.append([])
            return fresh.split("Its report:\n", 1)[1].lstrip(" ")
        if " asks: " in fresh:
            asked = ASKED.search(fresh)
            assert asked is not None, fresh[-500:]
            self.question = (asked["child"], asked["question"])
            self.texts.append([])
            return fresh.split(" asks: ", 1)[1].split("\n  Answer it with", 1)[0]
        return None


def huge_answer(request: ModelRequest) -> Any:
    return reply(HUGE)


def asks_then_answers(request: ModelRequest) -> Any:
    """Ask a 2 MB question; once answered, answer 2 MB."""
    if not any(m.results for m in request.messages):
        return reply(tool_calls=[("ask_parent", {"question": HUGE})])
    return reply(HUGE[::-1])


UNBOUNDED = RunOptions(max_rounds=None)
"""Reading 2 MB 40,000 characters at a time takes the parent 50 rounds."""


def assert_capped_then_read(reader: Reader, first: int, *wanted: str) -> None:
    # The request right after the child spoke holds at most the cap of it.
    assert reader.sizes[first] <= CAP + SLACK, reader.sizes[first]
    assert reader.sizes[first - 1] < SLACK  # and nothing of it before
    assert reader.read() == list(wanted)


async def test_an_inline_childs_huge_answer_is_capped_and_read_in_pages(
    store_url: tuple[str, str],
) -> None:
    helper = SubAgent("weather", "Knows the weather.", FunctionModel(huge_answer))
    reader = Reader("weather", {"task": "What is the weather?"})
    agent = Agent("lead", FunctionModel(reader), tools=[helper.tool(), *console_tools()])
    async with Runtime(store=open_durable(*store_url)) as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("Weather?", options=UNBOUNDED)
    assert result.status is RunStatus.COMPLETED and result.text == "done", result.error
    assert_capped_then_read(reader, 1, HUGE)


async def test_an_inline_childs_huge_question_is_capped_and_read_in_pages(
    store_url: tuple[str, str],
) -> None:
    helper = SubAgent(
        "weather", "Knows the weather.", FunctionModel(asks_then_answers), ask_parent=True
    )
    reader = Reader("weather", {"task": "What is the weather?"})
    agent = Agent("lead", FunctionModel(reader), tools=[helper.tool(), *console_tools()])
    async with Runtime(store=open_durable(*store_url)) as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("Weather?", options=UNBOUNDED)
    assert result.status is RunStatus.COMPLETED and result.text == "done", result.error
    # The question, then (once answered) the answer: each capped, each read whole.
    assert_capped_then_read(reader, 1, HUGE, HUGE[::-1])


async def test_a_background_childs_huge_question_and_answer_reach_the_parent_capped(
    store_url: tuple[str, str],
) -> None:
    gates = [asyncio.Event(), asyncio.Event()]

    async def slow(request: ModelRequest) -> Any:
        # Asks once the first gate opens, answers once the second does: each
        # long after its call answered "still running".
        await gates[any(m.results for m in request.messages)].wait()
        return asks_then_answers(request)

    helper = SubAgent(
        "weather", "Knows the weather.", FunctionModel(slow), ask_parent=True, background_after=0.05
    )
    reader = Reader("weather", {"task": "What is the weather?"})
    agent = Agent("lead", FunctionModel(reader), tools=[helper.tool(), *console_tools()])
    async with Runtime(store=open_durable(*store_url)) as runtime:
        session = await runtime.create_session(agent)
        assert (await session.run("Weather?")).text == "waiting"
        for gate, ask in zip(gates, ("Any news?", "And now?"), strict=True):
            gate.set()
            # The question's notice, then the report's: each at a later run.
            async with asyncio.timeout(30):
                while not await runtime.background.inbox.pending(session.id):
                    await asyncio.sleep(0.02)
            first = len(reader.sizes)
            result = await session.run(ask, options=UNBOUNDED)
            assert result.status is RunStatus.COMPLETED, result.error
            # The notice holds at most the cap of the child's text.
            assert reader.sizes[first] - reader.sizes[first - 1] <= CAP + SLACK
    assert reader.read() == [HUGE, HUGE[::-1]]


async def test_a_spawned_workers_huge_answer_is_capped_inline_and_in_the_background() -> None:
    spawner = Spawner(FunctionModel(huge_answer, name="worker"), dispatcher=TaskDispatcher())
    for mode in ("inline", "background"):
        reader = Reader("spawn_agent", {"name": "w", "task": "Say a lot.", "mode": mode})
        agent = Agent("lead", FunctionModel(reader), tools=[spawner.tool(), *console_tools()])
        async with Runtime() as runtime:
            session = await runtime.create_session(agent)
            result = await session.run("Go.", options=UNBOUNDED)
            if result.text == "waiting":  # the receipt; the report comes later
                async with asyncio.timeout(30):
                    while not await runtime.background.inbox.pending(session.id):
                        await asyncio.sleep(0.02)
                result = await session.run("News?", options=UNBOUNDED)
        assert result.text == "done", (mode, result.error)
        # No request holds more than the cap of the worker's text beyond the one before.
        growth = [b - a for a, b in zip(reader.sizes, reader.sizes[1:], strict=False)]
        assert reader.sizes[0] < SLACK and max(growth) <= CAP + SLACK, mode
        assert reader.read() == [HUGE], mode


async def test_the_cap_and_the_page_are_the_hosts_to_set() -> None:
    long = HUGE[:200_000]
    helper = SubAgent(
        "weather", "Knows.", FunctionModel(lambda r: reply(long)), max_answer_chars=1_000
    )
    reader = Reader("weather", {"task": "What is the weather?"})
    tools = [helper.tool(), *console_tools(page_chars=5_000)]
    session = await Runtime().create_session(Agent("lead", FunctionModel(reader), tools=tools))
    result = await session.run("Weather?", options=UNBOUNDED)
    assert result.text == "done"
    assert reader.sizes[1] <= 1_000 + SLACK  # the delegation's cap
    growth = [b - a for a, b in zip(reader.sizes[1:], reader.sizes[2:], strict=False)]
    assert max(growth) <= 5_000 + SLACK  # each page read on
    assert reader.read() == [long]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigurationError, match="max_answer_chars"):
            SubAgent("w", "Knows.", FunctionModel(huge_answer), max_answer_chars=bad)
        with pytest.raises(ConfigurationError, match="max_answer_chars"):
            Spawner(FunctionModel(huge_answer), max_answer_chars=bad)
        with pytest.raises(ConfigurationError, match="page_chars"):
            console_tools(page_chars=bad)
