"""The open turn: what the log says of the latest assistant turn's calls
(parked, reopened in a fork, cut off by a crash) and of the latest run's
result; `OpenTurn`, a base of `SessionLog`, only reads the fold's registers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from .._output_type import OutputType
from ..entries import RunFinishedEntry, RunStartedEntry
from ..errors import CorruptEntry
from ..messages import Message, ToolCall, ToolResult, Usage
from ..results import PendingCall, RunResult, RunStatus
from ._registers import FoldRegisters


class HasOutput(Protocol):
    """What reading a run's result back needs of its agent (a `taskloom.Agent`)."""

    @property
    def output(self) -> OutputType | None:
        """The output type (None: the answer's text)."""
        ...


INTERRUPTED = "interrupted; it may have run — check before retrying"

NOT_STARTED = (
    "not run: the process running this turn stopped before this call started; "
    "call it again if it is still needed"
)

if TYPE_CHECKING:
    from ..entries import ApprovalDecision, RequestedCall
"""The result of a call cut off before it started: a call of a turn run in
steps that no step record names (see `CallsStarted.step`)."""


def denial_text(note: str | None) -> str:
    """The error result a denied call gets."""
    base = "The user denied this tool call; it was not run."
    return f"{base} Note from the user: {note}" if note else base


class OpenTurn(FoldRegisters):
    """The queries on the latest turn and run that `SessionLog` offers."""

    __slots__ = ()

    def open_calls(self) -> list[ToolCall]:
        """Calls of the last assistant turn that have no result yet."""
        messages = self.messages
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if m.role == "assistant":
                calls = m.tool_calls
                if not calls:
                    return []
                answered = {r.tool_call_id for later in messages[i + 1 :] for r in later.results}
                return [c for c in calls if c.id not in answered]
        return []

    def held_calls(self) -> dict[str, str]:
        """The current turn's calls waiting on a child parked on escalated calls, to its id."""
        turn = self._turn
        return {
            e.call_id: child_id
            for child_id, e in self._escalated.items()
            if e.call_id is not None and e.turn == turn
        }

    def parked(self) -> list[ToolCall]:
        """The open calls of a turn awaiting decisions: some call has an approval
        request (or is held) and none but a held call has started running."""
        open_calls = self.open_calls()
        turn = self._turn
        held = self.held_calls()
        if not any((turn, c.id) in self._requests or c.id in held for c in open_calls):
            return []
        if any((turn, c.id) in self._started and c.id not in held for c in open_calls):
            return []
        return open_calls

    def reopened(self) -> list[ToolCall]:
        """The open calls of a turn parked where this fork links to its origin, with
        nothing asked or started since: the next run takes it up like a resume."""
        turn = self._turn
        if not turn or turn != self._reopened:
            return []
        open_calls = self.open_calls()
        keys = [(turn, c.id) for c in open_calls]
        if any(k in self._requests or k in self._started for k in keys):
            return []
        return open_calls

    def pending_calls(self, session_id: str = "", origin: str = "") -> list[PendingCall]:
        """The parked turn's calls that have an approval request, as `PendingCall`s,
        decided or not (`session_id` and `origin` name the child whose log this is)."""
        return [
            PendingCall(c.id, c.name, c.arguments, r.reason, session_id, origin)
            for c in self.parked()
            if (r := self.request(c.id)) is not None
        ]

    def undecided_calls(self, session_id: str = "", origin: str = "") -> list[PendingCall]:
        """`pending_calls` no decision was recorded for yet."""
        return [c for c in self.pending_calls(session_id, origin) if self.decision(c.id) is None]

    def finished_result(self, session_id: str, agent: HasOutput | None = None) -> RunResult | None:
        """The `RunResult` of the latest finished run, read from the log (None
        before any): what the run returned, in any process. With `agent`, a
        completed run's `output` is what the run returned too (its text, or
        the recorded JSON validated as the output type); without, the JSON
        as recorded. Older runs report zero for counts they did not record."""
        entry = self._last_finished
        if entry is None:
            return None
        payload = entry.payload
        if not isinstance(payload, RunFinishedEntry):
            raise CorruptEntry(f"entry {entry.position} is not a run's end")
        status = payload.status
        completed = status is RunStatus.COMPLETED
        text = payload.text if payload.text is not None else self.last_assistant_text()
        output = payload.output
        if completed and agent is not None:
            if agent.output is None:
                output = text
            elif output is not None:
                try:
                    output = agent.output.validate(output)
                except ValueError:
                    pass  # the output type changed since: the data as recorded
        return RunResult(
            status=status,
            text=text,
            output=output if completed else None,
            usage=payload.usage,
            pending=tuple(self.pending_calls()) if status is RunStatus.AWAITING_APPROVAL else (),
            session_id=session_id,
            run_id=entry.run_id or "",
            rounds=payload.rounds,
            model_requests=payload.model_requests,
            tool_calls=payload.tool_calls,
            transport_retries=payload.transport_retries,
            error=payload.error,
            own_usage=payload.own_usage if payload.own_usage is not None else Usage(),
            empty_answer=completed and self.last_answer_is_empty(),
            budget_left=payload.budget_left,
        )

    def run_traceparent(self) -> str | None:
        """The trace context the latest run recorded (None if it was not traced)."""
        started = self._last_run_started
        if started is None:
            return None
        return RunStartedEntry.from_data(started.data).traceparent

    def request(self, call_id: str) -> RequestedCall | None:
        """The approval request of `call_id` in the current turn, if any."""
        return self._requests.get((self._turn, call_id))

    def decision(self, call_id: str) -> ApprovalDecision | None:
        """The decision on `call_id` in the current turn, if any."""
        return self._decisions.get((self._turn, call_id))

    def cut_off(self) -> list[ToolCall]:
        """The open calls of a turn neither parked nor `reopened`: cut off by a crash."""
        open_calls = self.open_calls()
        return [] if not open_calls or self.parked() or self.reopened() else open_calls

    def retryable(self, call: ToolCall, limit: int) -> bool:
        """Whether cut-off `call` may run again: not denied, and started again
        fewer than `limit` times (the caller knows whether its tool allows it)."""
        decision = self.decision(call.id)
        if decision is not None and not decision.approved:
            return False
        started = self._started.get((self._turn, call.id), 0)
        # An approved call's first run is recorded too (it unparks the turn):
        # that one is no retry, so it gets as many as an ungated call.
        return started - (decision is not None) < limit

    @property
    def in_steps(self) -> bool:
        """Whether the current turn's calls were run in steps (`CallsStarted.step`)."""
        return self._stepped_turn == self._turn != 0

    def never_started(self, call: ToolCall) -> bool:
        """Whether `call` of the current turn is known never to have started: its
        turn was run in steps and no step record names it."""
        return self.in_steps and call.id not in self._stepped

    def cut_off_result(self, call: ToolCall) -> ToolResult:
        """The result a cut-off call gets when it does not run again: its denial,
        `NOT_STARTED`, or `INTERRUPTED`."""
        decision = self.decision(call.id)
        if decision is not None and not decision.approved:
            return ToolResult(call.id, denial_text(decision.note), True, call.name)
        if self.never_started(call):
            return ToolResult(call.id, NOT_STARTED, True, call.name)
        return ToolResult(call.id, INTERRUPTED, True, call.name)

    def cut_off_results(self) -> Message | None:
        """Results for every cut-off call (see `cut_off_result`), or None."""
        calls = self.cut_off()
        return Message.tool_results([self.cut_off_result(c) for c in calls]) if calls else None

    def last_assistant_text(self) -> str:
        """The text of the latest assistant message ("" if none)."""
        message = self._turn_message
        return message.text if message is not None else ""

    def last_answer_is_empty(self) -> bool:
        """Whether the latest assistant message has no text and no tool calls."""
        message = self._turn_message
        return message is not None and not message.text and not message.tool_calls


_MAX_CALL_ID = 40  # the shortest limit among the providers' tool call ids


def with_unique_call_ids(message: Message, seen: AbstractSet[str]) -> Message:
    """`message` with every tool call id unused in the session (`seen`) and
    within the turn: some servers number calls per turn (`call_0` every
    turn), and a reused id would pair a result or decision with the wrong
    call. A clashing id gets a suffix (or a short hash); the log keeps the
    rewritten id, so replays stay consistent.
    """
    calls = message.tool_calls
    if not calls:
        return message
    ids = [c.id for c in calls]
    if len(set(ids)) == len(ids) and seen.isdisjoint(ids):
        return message
    taken = set(seen)
    blocks = []
    for block in message.blocks:
        if isinstance(block, ToolCall):
            new_id = block.id
            if new_id in taken:
                new_id = _fresh_id(block.id, taken)
                block = replace(block, id=new_id)
            taken.add(new_id)
        blocks.append(block)
    return replace(message, blocks=tuple(blocks))


def _fresh_id(base: str, taken: set[str]) -> str:
    n = 2
    while True:
        candidate = f"{base}_{n}"
        if len(candidate) > _MAX_CALL_ID:
            digest = hashlib.sha256(f"{base}\0{n}".encode()).hexdigest()[:24]
            candidate = f"call_{digest}"
        if candidate not in taken:
            return candidate
        n += 1
