"""Questions work of a session asks a person (an MCP server's elicitation
during a task), read from the session's log, and the checks an answer
passes before it is written.

A question is an `InputRequest` entry, its answer an `InputAnswer`; both
are keyed by an `input_id` derived from the activity and the asker's key,
so every process that records the same question records the same id, and
the first answer in the log is the answer."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from ..entries import Entry, InputAnswer, InputRequest, MCPTaskEnded
from ..errors import AnswerConflict, UsageError
from ..results import PendingInput

__all__ = [
    "ACTIONS",
    "check_answer",
    "ended_activities",
    "input_id_for",
    "pending",
    "pending_inputs",
    "read_inputs",
    "same_answer",
]

ACTIONS = ("accept", "decline", "cancel")
"""What a person may do with a question (MCP elicitation's actions)."""


def input_id_for(activity_id: str, key: str) -> str:
    """The session-wide id of the question `key` of activity `activity_id`."""
    digest = hashlib.sha256(f"{activity_id}\0{key}".encode()).hexdigest()[:12]
    return f"input-{digest}"


def read_inputs(
    entries: Iterable[Entry],
) -> tuple[dict[str, InputRequest], dict[str, InputAnswer]]:
    """The questions of a log and their answers (the first for each id)."""
    asked: dict[str, InputRequest] = {}
    answered: dict[str, InputAnswer] = {}
    for entry in entries:
        if entry.kind == InputRequest.KIND:
            request = entry.payload
            assert isinstance(request, InputRequest)
            asked.setdefault(request.input_id, request)
        elif entry.kind == InputAnswer.KIND:
            answer = entry.payload
            assert isinstance(answer, InputAnswer)
            answered.setdefault(answer.input_id, answer)
    return asked, answered


def pending(request: InputRequest) -> PendingInput:
    """The question as a person sees it."""
    params = request.request.get("params") or {}
    schema = params.get("requestedSchema")
    return PendingInput(
        request.input_id,
        str(params.get("message", "")),
        dict(schema) if isinstance(schema, Mapping) else None,
        str(params["url"]) if params.get("url") else None,
        request.source,
        request.activity_id,
        request.requested_at,
    )


def ended_activities(entries: Iterable[Entry]) -> set[str]:
    """The activities of a log that ended (nobody waits for their answers)."""
    return {
        e.payload.activity_id
        for e in entries
        if e.kind == MCPTaskEnded.KIND and isinstance(e.payload, MCPTaskEnded)
    }


def pending_inputs(entries: Iterable[Entry]) -> list[PendingInput]:
    """The questions of a log nobody answered, oldest first (those of
    activities that ended left out: nobody waits for their answers)."""
    entries = list(entries)
    asked, answered = read_inputs(entries)
    ended = ended_activities(entries)
    return [
        pending(r) for i, r in asked.items() if i not in answered and r.activity_id not in ended
    ]


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
}


def check_answer(
    question: PendingInput, action: str, content: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The content to record for `action`, checked against what the
    question asks; raises `UsageError` saying what is wrong."""
    if action not in ACTIONS:
        raise UsageError(f"an answer's action is one of {', '.join(ACTIONS)}, not {action!r}")
    if action != "accept" or question.schema is None:
        if content:
            raise UsageError(
                f"{action!r} carries no content"
                if action != "accept"
                else f"question {question.id} asks to visit {question.url}, not for content"
            )
        return None
    given = dict(content or {})
    properties: Mapping[str, Any] = question.schema.get("properties") or {}
    for name in question.schema.get("required") or ():
        if name not in given:
            raise UsageError(f"question {question.id} needs {name!r}")
    for name, value in given.items():
        spec = properties.get(name)
        if spec is None:
            raise UsageError(
                f"question {question.id} asks for no {name!r} "
                f"(it asks for {', '.join(map(repr, properties)) or 'nothing'})"
            )
        _check_value(question.id, name, spec, value)
    return given


def _check_value(question: str, name: str, spec: Mapping[str, Any], value: Any) -> None:
    kind = spec.get("type")
    wanted = _TYPES.get(str(kind))
    wrong = wanted is not None and (
        not isinstance(value, wanted) or (kind != "boolean" and isinstance(value, bool))
    )
    if wrong:
        raise UsageError(f"question {question}: {name!r} takes {kind} values, not {value!r}")
    allowed = [str(v) for v in spec.get("enum") or ()]
    allowed += [str(o["const"]) for o in spec.get("oneOf") or () if isinstance(o, Mapping)]
    if allowed and kind != "array" and str(value) not in allowed:
        raise UsageError(
            f"question {question}: {name!r} is one of {', '.join(allowed)}, not {value!r}"
        )


def same_answer(existing: InputAnswer, action: str, content: dict[str, Any] | None) -> None:
    """Raise `AnswerConflict` unless `existing` says what this answer says."""
    if existing.action != action or (existing.content or None) != (content or None):
        said = existing.action + (f" {existing.content}" if existing.content else "")
        raise AnswerConflict(f"input {existing.input_id} was already answered: {said}")
