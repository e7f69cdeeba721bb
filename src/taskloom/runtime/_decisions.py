"""Decisions on parked calls: reading them in another session's log (a
child's that escalated them), and going on once nothing is left to decide
(`resume_decided`: how a decision, a served task and the console resume a
decided run, once whoever asks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends import SessionStore
from ..entries import ApprovalDecision, RequestedCall
from ..errors import ApprovalConflict, SessionBusy, SessionNotFound
from ..events import Event
from ..log import SessionLog
from ..results import RunResult

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["check_same", "folded", "requested", "resume_decided"]


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
