"""Write-once decisions and answers: decisions on parked calls (read in a
child's log too, when it escalated them; `resume_decided` goes on once
nothing is left to decide) and answers to questions a session's work asked
(see `taskloom.log.pending_inputs`), checked before they are written."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..backends import SessionStore
from ..errors import AnswerConflict, ApprovalConflict, SessionBusy, SessionNotFound, UsageError
from ..log import SessionLog
from ..results import PendingInput, RunResult

if TYPE_CHECKING:
    from ..entries import ApprovalDecision, InputAnswer, RequestedCall
    from ..events import Event
    from ._session import Session


async def resume_decided(
    session: Session[Any, Any],
    *,
    emit: Callable[[Event], None] | None = None,
    wait: float | None = None,
) -> RunResult[Any] | None:
    """Resume `session`'s parked run if nothing is left to decide: neither its
    own calls nor those of the children its turn waits on (an inline
    escalation); None when nothing was due or another run holds the session
    (after `wait`, as `Session.run`'s). The log is read under the session's
    lease, so however many processes ask at once, the run goes on once: a
    later asker finds it gone on. How a decision, a served task and the
    console go on with a decided run."""
    store = session.runtime.store
    try:
        async with session.hold(wait=wait):
            await session.journal.sync()
            log = session.journal.log
            if not log.parked() or log.undecided_calls():
                return None
            for child_id in log.held_calls().values():
                if (await folded(store, child_id)).undecided_calls():
                    return None
            return await session.resume(emit=emit)
    except SessionBusy:
        return None


async def folded(store: SessionStore, session_id: str) -> SessionLog:
    """Another session's log, folded (to read or decide its parked turn); an
    empty log for a session deleted meanwhile (a deleted child's calls are
    simply not pending)."""
    try:
        return SessionLog.folded(await store.load(session_id))
    except SessionNotFound:
        return SessionLog.folded([])


def requested(
    log: SessionLog, call_id: str
) -> tuple[RequestedCall, ApprovalDecision | None] | None:
    """The approval request of `call_id` in whichever turn of `log` asked it,
    with its decision if one was taken (call ids are unique in a session): a
    call decided and run since is told apart from one never asked about."""
    for (turn, asked), request in log.requests.items():
        if asked == call_id:
            return request, log.decisions.get((turn, call_id))
    return None


def check_same(existing: ApprovalDecision, approved: bool, call_id: str) -> None:
    """The same decision again is a no-op; the opposite raises `ApprovalConflict`."""
    if existing.approved != approved:
        first = "approved" if existing.approved else "denied"
        raise ApprovalConflict(f"call {call_id!r} was already {first}")


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
