"""Approvals: gating a turn, write-once decisions, and resuming a parked turn.

A decision is a register bound to one call of one turn: the turn's log
position, the call id and a hash of the exact arguments. The first decision
in the log wins; the same decision again is a no-op; a conflicting one
raises `ApprovalConflict`. Because the log is totally ordered, two processes
deciding at once agree on which came first.

A turn's approval requests are written as one entry, so a crash can never
leave one gated call requested and another not; and a gated call that has no
request (a log written otherwise) is asked about, never run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import entries as log_entries
from ..errors import ApprovalsMissing
from ..log import SessionLog, denial_text
from ..messages import ToolCall, ToolResult
from ..results import arguments_digest
from ..tools import Tool

if TYPE_CHECKING:
    from ..entries import ApprovalRequests


@dataclass(frozen=True, slots=True)
class Gate:
    """A call that must wait for a human decision, and why when the tool's
    rule could not say (its predicate raised)."""

    call: ToolCall
    reason: str | None = None


def approval_gate(call: ToolCall, tools: Mapping[str, Tool]) -> Gate | None:
    """The gate the call must pass before it runs, or None when it may run.

    A predicate sees the validated arguments (defaults filled, types
    coerced); arguments that fail validation need no decision, since the
    call never runs (it answers with the validation error).
    """
    tool = tools.get(call.name)
    if tool is None or not tool.is_gated or call.raw_arguments is not None:
        return None
    try:
        gated = tool.requires_approval(call.arguments)
    except Exception as exc:
        # A predicate that cannot judge the arguments errs on the side of
        # asking, and the human is told why.
        return Gate(call, f"its needs_approval check raised {type(exc).__name__}: {exc}")
    return Gate(call) if gated else None


def gated_calls(calls: Sequence[ToolCall], tools: Mapping[str, Tool]) -> list[Gate]:
    """The calls of a turn that need approval, each with its gate."""
    return [g for c in calls if (g := approval_gate(c, tools)) is not None]


def requests_for(turn: int, gates: Sequence[Gate]) -> ApprovalRequests:
    """The one entry that asks for decisions on the gated calls of `turn`."""
    return log_entries.ApprovalRequests(
        turn,
        tuple(
            log_entries.RequestedCall(
                g.call.id,
                g.call.name,
                g.call.arguments,
                arguments_digest(g.call.arguments),
                g.reason,
            )
            for g in gates
        ),
    )


@dataclass(frozen=True, slots=True)
class ParkedTurn:
    """What resuming a parked turn does: `decided` results (denials), the calls
    to `run`, and gated calls that were never asked about (`unasked`)."""

    decided: dict[str, ToolResult]
    run: list[ToolCall]
    unasked: list[Gate]


def resolve_parked_turn(
    log: SessionLog, parked: Sequence[ToolCall], tools: Mapping[str, Tool]
) -> ParkedTurn:
    """Sort a parked turn's calls into denied, to run, and still to ask about.

    Raises `ApprovalsMissing` (before anything runs) when a requested call
    has no decision, or its decision was made for other arguments than the
    call has.
    """
    missing: list[str] = []
    unasked: list[Gate] = []
    decided: dict[str, ToolResult] = {}
    for call in parked:
        request = log.request(call.id)
        if request is None:
            gate = approval_gate(call, tools)
            if gate is not None:
                unasked.append(gate)
            continue
        decision = log.decision(call.id)
        if decision is None or decision.hash != arguments_digest(call.arguments):
            missing.append(call.id)
            continue
        if not decision.approved:
            decided[call.id] = ToolResult(call.id, denial_text(decision.note), True, call.name)
    if missing:
        raise ApprovalsMissing(missing)
    run = [c for c in parked if c.id not in decided]
    return ParkedTurn(decided, run, unasked)
