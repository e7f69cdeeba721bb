"""A child asks its parent (`SubAgent(ask_parent=True)`): inline, its
question comes back as the delegation's result and the parent's reply lets
it go on; in the background, the question arrives as a notice and the answer
goes back through the child's inbox. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Agent, Runtime
from taskloom.delegation import SubAgent
from taskloom.entries import MessageEntry
from taskloom.models import FunctionModel, ModelRequest, reply


def child(request: ModelRequest) -> Any:
    """Ask which city, then answer for it."""
    said = [r.content for m in request.messages for r in m.results]
    if not said:
        return reply(tool_calls=[("ask_parent", {"question": "Which city?"})])
    return reply(f"Sunny, as asked ({said[-1]}).")


def parent(request: ModelRequest) -> Any:
    """Delegate; answer a question with the same tool; report the answer."""
    texts = [m.text for m in request.messages if m.role == "user"]
    results = [r.content for m in request.messages for r in m.results]
    asked = [t for t in texts if " asks: " in t]
    replied = any("reply" in c.arguments for m in request.messages for c in m.tool_calls)
    if asked and not replied:
        child_id = asked[-1].split("child='", 1)[1].split("'", 1)[0]
        return reply(tool_calls=[("weather", {"child": child_id, "reply": "Oslo"})])
    if "finished. Its report" in "\n".join(texts):
        return reply("done: " + texts[-1].rsplit("Its report:", 1)[1].strip())
    if not results:
        return reply(tool_calls=[("weather", {"task": "What is the weather?"})])
    last = json.loads(results[-1]) if results[-1].startswith("{") else {}
    if "question" in last and not replied:
        return reply(tool_calls=[("weather", {"child": last["child"], "reply": "Oslo"})])
    if "answer" in last:
        return reply("done: " + last["answer"])
    return reply("waiting")


async def test_an_inline_child_asks_and_the_parent_answers(
    store_url: tuple[str, str],
) -> None:
    helper = SubAgent("weather", "Knows the weather.", FunctionModel(child), ask_parent=True)
    model = FunctionModel(parent)
    async with Runtime(store=open_durable(*store_url)) as runtime:
        session = await runtime.create_session(Agent("lead", model, tools=[helper.tool()]))
        result = await session.run("Weather?")
        assert result.text == "done: Sunny, as asked (Your parent answers: Oslo)."
        results = [json.loads(r.content) for m in await session.transcript() for r in m.results]
        assert results[0]["question"] == "Which city?"  # in band, as the call's result
        # Shown in band, so never delivered again as a notice; nothing left over.
        assert await runtime.background.inbox.pending(session.id) == []
        assert await runtime.background.registry.list(session.id) == []
        assert await runtime.background.inbox.pending(results[0]["child"]) == []


async def test_a_background_child_asks_through_the_inbox(store_url: tuple[str, str]) -> None:
    gate = asyncio.Event()

    async def slow_child(request: ModelRequest) -> Any:
        await gate.wait()
        return child(request)

    helper = SubAgent(
        "weather",
        "Knows the weather.",
        FunctionModel(slow_child),
        ask_parent=True,
        background_after=0.05,
    )
    model = FunctionModel(parent)
    async with Runtime(store=open_durable(*store_url)) as runtime:
        session = await runtime.create_session(Agent("lead", model, tools=[helper.tool()]))
        first = await session.run("Weather?")
        assert first.text == "waiting"  # handed to the background
        gate.set()
        async with asyncio.timeout(20):
            while not await runtime.background.inbox.pending(session.id):
                await asyncio.sleep(0.02)
        # The question arrives as a notice; the parent answers it, and the
        # child's report comes back as a notice in turn.
        await session.run("Any news?")
        async with asyncio.timeout(20):
            while not await runtime.background.inbox.pending(session.id):
                await asyncio.sleep(0.02)
        final = await session.run("And now?")
        assert final.text == "done: Sunny, as asked (Your parent answers: Oslo)."
        delivered = [
            i
            for e in await session.entries()
            if isinstance(e.payload, MessageEntry)
            for i in e.payload.delivered_ids
        ]
        print(f"delivered notices: {delivered}")
        assert len(delivered) == len(set(delivered)) == 2  # the question, the report: once each


async def test_two_questions_at_once_each_get_their_own_answer() -> None:
    def two_asks(request: ModelRequest) -> Any:
        said = [r.content for m in request.messages for r in m.results]
        if not said:
            return reply(
                tool_calls=[
                    ("ask_parent", {"question": "Which city?"}),
                    ("ask_parent", {"question": "Which day?"}),
                ]
            )
        return reply(" | ".join(said))

    def answering(request: ModelRequest) -> Any:
        results = [r.content for m in request.messages for r in m.results]
        if not results:
            return reply(tool_calls=[("weather", {"task": "What is the weather?"})])
        last = json.loads(results[-1]) if results[-1].startswith("{") else {}
        if "question" in last:
            answer = "Oslo" if last["question"] == "Which city?" else "Monday"
            call = {"child": last["child"], "question": last["question_id"], "reply": answer}
            return reply(tool_calls=[("weather", call)])
        return reply("done: " + results[-1])

    helper = SubAgent("weather", "Knows.", FunctionModel(two_asks), ask_parent=True, ask_timeout=30)
    async with Runtime() as runtime:
        session = await runtime.create_session(
            Agent("lead", FunctionModel(answering), tools=[helper.tool()])
        )
        result = await session.run("Weather?")
    answers = json.loads(result.text.removeprefix("done: "))["answer"]
    assert answers == "Your parent answers: Oslo | Your parent answers: Monday"


async def test_a_reply_to_a_question_given_up_on_is_refused() -> None:
    def impatient(request: ModelRequest) -> Any:
        said = [r.content for m in request.messages for r in m.results]
        if not said:
            return reply(tool_calls=[("ask_parent", {"question": "Which city?"})])
        return reply(said[-1])

    asked: dict[str, Any] = {}

    def late(request: ModelRequest) -> Any:
        results = [r.content for m in request.messages for r in m.results]
        if not results:
            return reply(tool_calls=[("weather", {"task": "What is the weather?"})])
        told = any("now answer" in m.text for m in request.messages if m.role == "user")
        replied = any("reply" in c.arguments for m in request.messages for c in m.tool_calls)
        if told and not replied:
            call = {"child": asked["child"], "question": asked["question_id"], "reply": "Oslo"}
            return reply(tool_calls=[("weather", call)])
        last = json.loads(results[-1]) if results[-1].startswith("{") else {}
        if "question" in last and not told:
            asked.update(last)
            return reply("thinking it over")
        return reply("done")

    helper = SubAgent(
        "weather", "Knows.", FunctionModel(impatient), ask_parent=True, ask_timeout=0.2
    )
    model = FunctionModel(late)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("lead", model, tools=[helper.tool()]))
        await session.run("Weather?")
        assert asked["question"] == "Which city?"
        await runtime.background.wait_kept()  # the child gave up waiting, and ended
        # Given up on: withdrawn from the parent's inbox (only the child's report is left).
        pending = await runtime.background.inbox.pending(session.id)
        assert [n.kind for n in pending] == ["subagent"]
        await session.run("now answer the question")
        refused = [r for m in model.requests[-1].messages for r in m.results][-1]
        assert refused.is_error and "no longer waits on question" in refused.content


async def test_the_call_answering_a_question_is_not_given_that_question_again() -> None:
    # The child reads its answer at its next look at its inbox: until then
    # its question is still open, but the call that answered it must wait on
    # the child, not show the parent the same question a second time.
    gates = [asyncio.Event(), asyncio.Event()]

    async def slow_child(request: ModelRequest) -> Any:
        await gates[any(m.results for m in request.messages)].wait()
        return child(request)

    helper = SubAgent(
        "weather", "Knows.", FunctionModel(slow_child), ask_parent=True, background_after=0.05
    )
    model = FunctionModel(parent)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("lead", model, tools=[helper.tool()]))
        assert (await session.run("Weather?")).text == "waiting"
        gates[0].set()
        async with asyncio.timeout(20):
            while not await runtime.background.inbox.pending(session.id):
                await asyncio.sleep(0.02)
        await session.run("Any news?")  # the question's notice; the parent answers it
        [*_, answering] = [r.content for m in await session.transcript() for r in m.results]
        assert json.loads(answering).get("status") == "running", answering
        gates[1].set()
