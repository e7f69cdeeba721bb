"""The checks an answer to a question a session's work asked (see
`taskloom.log.pending_inputs`) passes before it is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..entries import InputAnswer
from ..errors import AnswerConflict, UsageError
from ..results import PendingInput

__all__ = ["ACTIONS", "check_answer", "same_answer"]

ACTIONS = ("accept", "decline", "cancel")
"""What a person may do with a question (MCP elicitation's actions)."""


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
