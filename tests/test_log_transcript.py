"""`taskloom.log.transcript`: the one reading of a log's conversation that a
`Session`, `taskloom show` and the console share."""

from __future__ import annotations

from collections.abc import Sequence

from taskloom.entries import CompactionEntry, Entry, MessageEntry, Steer, SubagentLink
from taskloom.log import SUMMARY_HEADING, SessionLog, conversation, transcript
from taskloom.messages import Message


def placed(*payloads: object) -> list[Entry]:
    return [Entry.of(p).placed(i) for i, p in enumerate(payloads, 1)]  # type: ignore[arg-type]


PARENT = placed(
    MessageEntry(Message.user("pay the invoice")),
    SubagentLink("child-1", "payer", call_id="c1"),
    Steer("faster"),
    MessageEntry(Message.assistant("paid"), delivered_text="payer finished"),
    CompactionEntry("they paid", up_to=2),
)
CHILD = placed(MessageEntry(Message.user("pay 70")), MessageEntry(Message.assistant("done")))


async def load(session_id: str) -> Sequence[Entry]:
    assert session_id == "child-1"
    return CHILD


def said(messages: Sequence[Message]) -> list[tuple[str, str, str]]:
    return [(m.role, m.text, m.origin) for m in messages]


async def test_the_conversation_is_what_the_fold_holds() -> None:
    walked = [m for _, messages in conversation(PARENT) for m in messages]
    assert walked == list(SessionLog.folded(PARENT).messages)
    # The delivered notices come first, on the entry that answered them.
    assert [len(messages) for _, messages in conversation(PARENT)] == [1, 0, 0, 2, 0]
    assert said(await transcript(PARENT)) == said(walked)


async def test_children_follow_their_link_and_compactions_stand_where_made() -> None:
    messages = await transcript(PARENT, load=load, mark_compactions=True)
    assert said(messages) == [
        ("user", "pay the invoice", ""),
        ("user", "pay 70", "payer#child-1"),
        ("assistant", "done", "payer#child-1"),
        ("user", "payer finished", ""),
        ("assistant", "paid", ""),
        ("user", f"{SUMMARY_HEADING}\nthey paid", "compaction"),
    ]
