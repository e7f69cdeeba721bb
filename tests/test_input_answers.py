"""Questions work of a session asks a person (`InputRequest` entries):
`Session.pending_input()` lists them, `Session.answer()` checks an answer
against what was asked and writes it once."""

from __future__ import annotations

import pytest

from taskloom import Agent, Runtime, UsageError
from taskloom.entries import Entry, InputAnswer, InputRequest, MCPTaskEnded
from taskloom.errors import AnswerConflict
from taskloom.log import input_id_for
from taskloom.models import FunctionModel, reply

FORM = {
    "method": "elicitation/create",
    "params": {
        "message": "How many?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "count": {"type": "integer"},
                "colour": {"type": "string", "enum": ["red", "blue"]},
                "urgent": {"type": "boolean"},
            },
            "required": ["count"],
        },
    },
}
VISIT = {
    "method": "elicitation/create",
    "params": {"mode": "url", "message": "Sign in", "url": "https://example.test/in"},
}


async def _asked(runtime: Runtime, *requests: tuple[str, dict[str, object]]):  # type: ignore[no-untyped-def]
    session = await runtime.create_session(Agent("a", FunctionModel(lambda r: reply("ok"))))
    for activity, request in requests:
        question = InputRequest(input_id_for(activity, "k"), activity, "k", request, "src", 1.0)
        await runtime.store.append(session.id, Entry.of(question))
    return session


async def test_an_answer_is_checked_written_once_and_leaves_the_pending_list() -> None:
    async with Runtime() as runtime:
        session = await _asked(runtime, ("act-1", FORM), ("act-2", VISIT))
        form, visit = await session.pending_input()
        assert (form.message, form.source, form.url) == ("How many?", "src", None)
        assert form.schema is not None and form.schema["required"] == ["count"]
        assert (visit.url, visit.schema) == ("https://example.test/in", None)

        for wrong, why in [
            ({}, "needs 'count'"),
            ({"count": "three"}, "takes integer values"),
            ({"count": True}, "takes integer values"),
            ({"count": 3, "colour": "green"}, "one of red, blue"),
            ({"count": 3, "size": 1}, "asks for no 'size'"),
        ]:
            with pytest.raises(UsageError, match=why):
                await session.answer(form.id, wrong)
        with pytest.raises(UsageError, match="carries no content"):
            await session.answer(form.id, {"count": 3}, action="decline")
        with pytest.raises(UsageError, match="not for content"):
            await session.answer(visit.id, {"done": True})
        with pytest.raises(UsageError, match="one of accept, decline, cancel"):
            await session.answer(form.id, {"count": 3}, action="maybe")
        with pytest.raises(UsageError, match="asked no question"):
            await session.answer("input-nope", {"count": 3})

        await session.answer(form.id, {"count": 3, "urgent": False})
        await session.answer(form.id, {"count": 3, "urgent": False})
        with pytest.raises(AnswerConflict):
            await session.answer(form.id, {"count": 4})
        assert [q.id for q in await session.pending_input()] == [visit.id]
        await session.answer(visit.id)
        assert await session.pending_input() == []
        answers = [
            e.payload for e in await runtime.store.load(session.id) if e.kind == InputAnswer.KIND
        ]
    assert answers == [
        InputAnswer(form.id, "accept", {"count": 3, "urgent": False}),
        InputAnswer(visit.id, "accept", None),
    ]


async def test_a_question_of_work_that_ended_is_no_longer_pending() -> None:
    async with Runtime() as runtime:
        session = await _asked(runtime, ("act-1", FORM))
        [question] = await session.pending_input()
        await runtime.store.append(session.id, Entry.of(MCPTaskEnded("act-1", "failed", "gone")))
        assert await session.pending_input() == []
        with pytest.raises(UsageError, match="nobody waits"):
            await session.answer(question.id, {"count": 1})
