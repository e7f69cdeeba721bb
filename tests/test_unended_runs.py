"""A run whose log ends with its final answer and no end (its process died in
between: see test_crash_endings.py for the real kills) is ended by the next
run that brings the session up to date, without a model request, unless what
would have kept it going is there."""

from __future__ import annotations

from pydantic import BaseModel

from taskloom import Agent, RunStatus, Runtime
from taskloom.backends import BackgroundNotice
from taskloom.entries import Entry, MessageEntry, RunFinishedEntry, RunStartedEntry
from taskloom.messages import Message
from taskloom.models import ScriptedModel, reply


async def cut_off_after(runtime: Runtime, agent: Agent, answer: MessageEntry) -> str:
    """A session whose one run stored `answer` and died before its end."""
    session = await runtime.create_session(agent)
    store = runtime.store
    await store.append(session.id, Entry.of(RunStartedEntry(agent.name), "run-1"))
    await store.append(session.id, Entry.of(MessageEntry(Message.user("hi")), "run-1"))
    await store.append(session.id, Entry.of(answer, "run-1"))
    return session.id


def ends(entries: list[Entry]) -> list[tuple[RunStatus, str | None]]:
    return [(p.status, p.text) for e in entries if isinstance(p := e.payload, RunFinishedEntry)]


async def test_the_run_is_ended_with_its_answer_and_the_notices_it_carried_acknowledged() -> None:
    runtime = Runtime()
    notice = BackgroundNotice("job:end", "job", "shell", "exit 0", "done", 0.0)
    assert await runtime.background.inbox.push("unused", notice)
    agent = Agent("bot", ScriptedModel([]))
    answer = MessageEntry(Message.assistant("the answer"), "job finished", ("job:end",))
    sid = await cut_off_after(runtime, agent, answer)
    # Persisted with the answer, not yet acknowledged when the run died.
    assert await runtime.background.inbox.push(sid, notice)
    session = await runtime.open_session(sid, agent)
    result = await session.run(None)
    assert (result.status, result.text, result.model_requests) == (
        RunStatus.COMPLETED,
        "the answer",
        0,
    )
    assert await runtime.background.inbox.pending(sid) == []
    assert ends(await session.entries()) == [(RunStatus.COMPLETED, "the answer")]


class Verdict(BaseModel):
    ok: bool


async def test_a_structured_answer_is_validated_as_the_run_would_have() -> None:
    runtime = Runtime()
    agent = Agent("judge", ScriptedModel([reply('{"ok": false}')]), output_type=Verdict)
    sid = await cut_off_after(runtime, agent, MessageEntry(Message.assistant('{"ok": true}')))
    result = await (await runtime.open_session(sid, agent)).run(None)
    assert result.status is RunStatus.COMPLETED and result.output == Verdict(ok=True)
    assert result.model_requests == 0
    # One that does not validate gets its fix turn, as in the run it ended.
    model = ScriptedModel([reply('{"ok": false}')])
    agent = Agent("judge", model, output_type=Verdict)
    sid = await cut_off_after(runtime, agent, MessageEntry(Message.assistant("not json")))
    result = await (await runtime.open_session(sid, agent)).run(None)
    assert result.output == Verdict(ok=False) and len(model.requests) == 1
    assert "did not match the required output schema" in model.requests[0].messages[-1].text


async def test_steering_that_landed_after_the_answer_keeps_the_run_going() -> None:
    runtime = Runtime()
    model = ScriptedModel([reply("steered answer")])
    agent = Agent("bot", model)
    sid = await cut_off_after(runtime, agent, MessageEntry(Message.assistant("first answer")))
    await runtime.steer(sid, "also say hello")
    result = await (await runtime.open_session(sid, agent)).run(None)
    assert result.text == "steered answer" and len(model.requests) == 1
    assert model.requests[0].messages[-1].text == "also say hello"


async def test_an_ended_run_or_a_later_message_is_not_ended_again() -> None:
    runtime = Runtime()
    model = ScriptedModel([reply("asked again"), reply("after the fix")])
    agent = Agent("bot", model)
    sid = await cut_off_after(runtime, agent, MessageEntry(Message.assistant("answer")))
    store = runtime.store
    await store.append(sid, Entry.of(RunFinishedEntry(RunStatus.COMPLETED), "run-1"))
    session = await runtime.open_session(sid, agent)
    # The run ended: a run asked for whatever the log holds asks the model.
    assert (await session.run(None)).text == "asked again"
    sid = await cut_off_after(runtime, agent, MessageEntry(Message.assistant("answer")))
    await store.append(sid, Entry.of(MessageEntry(Message.user("a fix")), "run-1"))
    # A message after the answer: the run was going on, and goes on.
    assert (await (await runtime.open_session(sid, agent)).run(None)).text == "after the fix"
    assert len(model.requests) == 2
