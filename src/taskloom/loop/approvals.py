"""Approvals: parked turns, write-once decisions, and resuming.

A decision is a register bound to one call: its id and a hash of its exact
arguments. The first decision in the log wins; the same decision again is a
no-op; a conflicting one raises `ApprovalConflict`. Because the log is totally
ordered, two processes deciding at once agree on which came first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ApprovalsMissing
from ..messages import ToolCall, ToolResult
from .result import arguments_digest

if TYPE_CHECKING:
    from ..runtime import Session

__all__ = ["resolve_parked_turn"]


def denial_text(note: str | None) -> str:
    """The error result a denied call gets."""
    base = "The user denied this tool call; it was not run."
    return f"{base} Note from the user: {note}" if note else base


def resolve_parked_turn(session: Session, parked: list[ToolCall]) -> dict[str, ToolResult]:
    """The ready results of a parked turn (denials); every other call runs.

    Raises `ApprovalsMissing` (before anything runs) when a gated call has no
    decision, or its decision was made for other arguments than the call has.
    """
    log = session.log
    missing: list[str] = []
    decided: dict[str, ToolResult] = {}
    for call in parked:
        if call.id not in log.requests:
            continue
        decision = log.decisions.get(call.id)
        if decision is None or decision.get("hash") != arguments_digest(call.arguments):
            missing.append(call.id)
            continue
        if not decision.get("approved"):
            decided[call.id] = ToolResult(
                call.id, denial_text(decision.get("note")), True, call.name
            )
    if missing:
        raise ApprovalsMissing(missing)
    return decided
