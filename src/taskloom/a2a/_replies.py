"""Replies to a served A2A task parked for approval: what decides, and what is asked.

A reply decides the waiting calls only when it says so without doubt (a data
part, or a text whose first word is a clear yes or no); anything else
decides nothing, and the task asks again: a reply is never guessed into a denial.
"""

from __future__ import annotations

import json
import string
from typing import Any

from a2a.types import Message
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from ..runtime import ServedTask

__all__ = [
    "APPROVAL_HOWTO",
    "Decision",
    "approves",
    "decisions_in",
    "message_text",
    "question",
    "reading",
]

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
