"""The session log, folded into what its readers need: a cache, never the truth.

`SessionLog` applies entries in position order and keeps the model's view of
the conversation (messages), the steering and deferred items not yet folded
into a turn, the persisted model settings, and the approval registers. Any
process can rebuild it from the store and reach the same state.

A *turn* is the position of an assistant message entry: approval requests,
decisions and started-call records name the turn they belong to, so a call id
a provider reuses in a later turn never meets an earlier turn's decision.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from itertools import chain, islice
from typing import Any, Protocol, overload

from .._offered import without_schemas
from .._output_type import OutputType
from ..entries import (
    ApprovalDecision,
    ApprovalEscalated,
    ApprovalRequests,
    CallsStarted,
    CompactionEntry,
    DeferredEntry,
    Entry,
    EntryKind,
    MessageEntry,
    ModelChange,
    RequestedCall,
    RunFinishedEntry,
    RunStartedEntry,
    Steer,
)
from ..errors import CorruptEntry
from ..messages import Message, TextBlock, ToolCall, ToolResult, Usage
from ..models import ReasoningOptions
from ..results import PendingCall, RunResult, RunStatus

__all__ = [
    "INTERRUPTED",
    "NOT_STARTED",
    "SUMMARY_HEADING",
    "HasOutput",
    "MessageView",
    "message_chars",
    "summary_chars",
    "summary_message",
    "SessionLog",
    "denial_text",
    "fold_text",
    "interrupted_results",
    "with_unique_call_ids",
]


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
"""The result of a call cut off before it started: a call of a turn run in
steps that no step record names (see `CallsStarted.step`)."""

Key = tuple[int, str]
"""(turn, call id): what approval requests, decisions and start records bind to."""


def fold_text(entries: Iterable[Entry]) -> str:
    """The user-turn text for steering and deferred items, in arrival order."""
    parts = []
    for e in entries:
        payload = e.payload
        if isinstance(payload, Steer):
            parts.append(payload.text)
        elif isinstance(payload, DeferredEntry):
            parts.append(payload.item.render())
    return "\n\n".join(parts)


def denial_text(note: str | None) -> str:
    """The error result a denied call gets."""
    base = "The user denied this tool call; it was not run."
    return f"{base} Note from the user: {note}" if note else base


class SessionLog:
    """The state derived from one session's entries (see module docstring)."""

    __slots__ = (
        "_assistant_turns",
        "_base",
        "_before_view",
        "_call_ids",
        "_compaction",
        "_decisions",
        "_entries",
        "_escalated",
        "_folded",
        "_last_finished",
        "_last_run_started",
        "_messages",
        "_model_position",
        "_model_spec",
        "_pending",
        "_position",
        "_positions",
        "_reasoning",
        "_reasoning_set",
        "_reopened",
        "_requests",
        "_sizes",
        "_snapshot_at",
        "_started",
        "_stepped",
        "_stepped_turn",
        "_stop_position",
        "_total",
        "_turn",
        "_turn_message",
        "_undecoded",
        "_view_start",
    )

    def __init__(self) -> None:
        self._position = 0
        # Restored from a snapshot, the log holds only the entries after
        # `base` (the whole log is in the store); 0 after a full replay.
        self._base = 0
        self._entries: list[Entry] = []
        self._messages: list[Message] = []
        # A restored log's older message entries: per snapshot row, the JSON
        # text of a list of [position, data], parsed on first use of
        # `messages`: opening a session must not pay for its history.
        self._undecoded: list[str] | None = None
        # The position the latest snapshot of this log covers (0: none).
        self._snapshot_at = 0
        self._last_run_started: Entry | None = None
        self._last_finished: Entry | None = None
        self._pending: list[Entry] = []
        self._model_spec: str | None = None
        self._model_position = 0
        self._reasoning: ReasoningOptions | None = None
        self._reasoning_set = False
        self._requests: dict[Key, RequestedCall] = {}
        self._decisions: dict[Key, ApprovalDecision] = {}
        # How many times each call was durably started after its turn was
        # committed (a parked turn's resume, an idempotent call's retry).
        self._started: dict[Key, int] = {}
        # The calls of turn `_stepped_turn` (0: none) named by step records:
        # of a turn run in steps, any other call never started.
        self._stepped_turn = 0
        self._stepped: set[str] = set()
        # Children that escalated approvals to this session, by child id (latest).
        self._escalated: dict[str, ApprovalEscalated] = {}
        # The turn a fork link found parked for approval (0: none).
        self._reopened = 0
        self._call_ids: set[str] = set()
        self._turn = 0
        self._turn_message: Message | None = None
        # Assistant messages so far: one per round of every run of the session.
        self._assistant_turns = 0
        self._folded: set[int] = set()
        self._stop_position = 0
        # The log position of each message (a delivered notice shares its
        # assistant entry's), and what the request view starts from.
        self._positions: list[int] = []
        self._compaction: CompactionEntry | None = None
        self._view_start = 0
        # Sizes in characters, measured only when asked (`view_chars`).
        self._sizes: list[int] = []
        self._total = 0
        self._before_view = 0

    # ------------------------------------------------------------ what it holds

    @property
    def position(self) -> int:
        """The position of the last entry folded in (0: none)."""
        return self._position

    @property
    def base(self) -> int:
        """0 after a full replay; restored from a snapshot, the position the
        snapshot covers (the entries up to it are only in the store)."""
        return self._base

    @property
    def entries(self) -> Sequence[Entry]:
        """The entries folded in, from `base` on, in order."""
        return self._entries

    @property
    def snapshot_at(self) -> int:
        """The position the latest snapshot of this log covers (0: none)."""
        return self._snapshot_at

    @property
    def pending(self) -> Sequence[Entry]:
        """Steering and deferred entries no user turn has folded in yet, in arrival order."""
        return self._pending

    @property
    def model_spec(self) -> str | None:
        """The model the session chose last (a spec), or None: its agent's."""
        return self._model_spec

    @property
    def model_position(self) -> int:
        """The position of the entry that chose `model_spec` (0: none)."""
        return self._model_position

    @property
    def reasoning(self) -> ReasoningOptions | None:
        """The reasoning options the session chose last (see `reasoning_set`)."""
        return self._reasoning

    @property
    def reasoning_set(self) -> bool:
        """Whether the session chose its reasoning options (else its agent's apply)."""
        return self._reasoning_set

    @property
    def requests(self) -> Mapping[Key, RequestedCall]:
        """Approval requests by (turn, call id)."""
        return self._requests

    @property
    def decisions(self) -> Mapping[Key, ApprovalDecision]:
        """Approval decisions by (turn, call id): the first recorded for each."""
        return self._decisions

    @property
    def started(self) -> Mapping[Key, int]:
        """How many times each call was durably started after its turn was
        committed (a parked turn's resume, an idempotent call's retry)."""
        return self._started

    @property
    def escalated(self) -> Mapping[str, ApprovalEscalated]:
        """Children that escalated approvals to this session, by child id (the latest)."""
        return self._escalated

    @property
    def call_ids(self) -> AbstractSet[str]:
        """Every tool call id the session's assistant messages used."""
        return self._call_ids

    @property
    def turn(self) -> int:
        """The position of the latest assistant message (0: none yet)."""
        return self._turn

    @property
    def turn_message(self) -> Message | None:
        """The latest assistant message."""
        return self._turn_message

    @property
    def assistant_turns(self) -> int:
        """Assistant messages so far: one per round of every run of the session."""
        return self._assistant_turns

    @property
    def stop_position(self) -> int:
        """The position of the latest stop request (0: none)."""
        return self._stop_position

    @property
    def last_run_started(self) -> Entry | None:
        """The latest run's start entry."""
        return self._last_run_started

    @property
    def last_finished(self) -> Entry | None:
        """The latest run's end entry."""
        return self._last_finished

    @property
    def run_open(self) -> bool:
        """Whether the latest run started and has no end yet: it runs still,
        or its writer died (or was cancelled) mid-run."""
        started, finished = self._last_run_started, self._last_finished
        return started is not None and (finished is None or finished.position < started.position)

    def unended_answer(self) -> MessageEntry | None:
        """The final answer of the latest run when that run has no end and the
        answer is the log's last message (an assistant message with no tool
        calls, written by that run, after which nothing but entries that need
        no model came: model changes, steering, deferred items, stop
        requests); else None. Its `delivered_ids` are the notices it carried
        (empty when a snapshot holds the entry and not the log).

        Such a run was cut off (its process killed, its task cancelled)
        between its answer and its end, where the loop only decides whether
        the run completes: running it on must decide that again, not ask the
        model once more."""
        started, message = self._last_run_started, self._turn_message
        if started is None or message is None or message.tool_calls or not self.run_open:
            return None
        turn = self._turn
        if turn < started.position or self._positions[-1] != turn:
            return None  # an earlier run's answer, or a message followed it
        for entry in reversed(self._entries):
            if entry.position == turn:
                payload = MessageEntry.from_data(entry.data)
                return replace(payload, message=message)
            if entry.position < turn:
                break
        return MessageEntry(message)

    @property
    def positions(self) -> Sequence[int]:
        """The log position of each message (a delivered notice shares its
        assistant entry's)."""
        return self._positions

    @property
    def compaction(self) -> CompactionEntry | None:
        """The latest compaction."""
        return self._compaction

    @property
    def view_start(self) -> int:
        """The index of the first message the request view holds after `compaction`."""
        return self._view_start

    # ------------------------------------------------------------ folding

    @classmethod
    def folded(cls, entries: Iterable[Entry]) -> SessionLog:
        """A log with `entries` folded in, in order (another session's, say,
        to read its parked turn or its status)."""
        log = cls()
        for entry in entries:
            log.apply(entry)
        return log

    def apply(self, entry: Entry, message: Message | None = None, position: int = 0) -> None:
        """Fold one entry in (entries arrive in position order; repeats are ignored).

        `message` may pass the already-built Message of a message entry, to
        skip decoding what this process just encoded; `position` places an
        entry this process just appended (the store confirmed it).
        """
        if position:
            entry = entry.placed(position)
        elif entry.position <= self._position:
            return
        try:
            self._apply(entry, message)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptEntry(
                f"entry {entry.position} ({entry.kind}) does not have its kind's shape: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def _apply(self, entry: Entry, message: Message | None) -> None:
        self._position = entry.position
        self._entries.append(entry)
        kind = entry.kind
        if kind == EntryKind.MESSAGE:
            if message is None:
                payload = MessageEntry.from_data(entry.data)
                message = payload.message
                delivered, folds = payload.delivered_text, payload.folds
            else:
                raw = entry.data.get("delivered")
                delivered = str(raw["text"]) if raw else None
                folds = tuple(entry.data.get("folds") or ())
            self._apply_message(entry.position, message, delivered, folds)
        elif kind in (EntryKind.STEER, EntryKind.DEFERRED):
            if entry.position not in self._folded:
                self._pending.append(entry)
        elif kind == EntryKind.MODEL_CHANGE:
            change = ModelChange.from_data(entry.data)
            if change.model_changed:
                self._model_spec = change.model
                self._model_position = entry.position
            if change.reasoning_changed:
                raw_reasoning = change.reasoning
                self._reasoning = (
                    ReasoningOptions.from_dict(raw_reasoning) if raw_reasoning else None
                )
                self._reasoning_set = True
        elif kind == EntryKind.STOP_REQUEST:
            self._stop_position = entry.position
        elif kind == EntryKind.RUN_STARTED:
            data = without_schemas(entry.data)
            self._last_run_started = entry if data is entry.data else replace(entry, data=data)
        elif kind == EntryKind.RUN_FINISHED:
            self._last_finished = entry
        elif kind == EntryKind.APPROVAL_REQUEST:
            requests = ApprovalRequests.from_data(entry.data)
            # 0.1 logs name no turn: their requests followed the turn at once.
            turn = requests.turn or self._turn
            for call in requests.calls:
                self._requests.setdefault((turn, call.call_id), call)
        elif kind == EntryKind.APPROVAL_DECISION:
            decision = ApprovalDecision.from_data(entry.data)
            turn = decision.turn or self._turn_requesting(decision.call_id)
            # First decision wins: later ones are either repeats or conflicts
            # that their writer detects and reports.
            self._decisions.setdefault((turn, decision.call_id), decision)
        elif kind == EntryKind.CALLS_STARTED:
            started = CallsStarted.from_data(entry.data)
            if started.step:
                if started.turn != self._stepped_turn:
                    self._stepped_turn, self._stepped = started.turn, set()
                self._stepped.update(started.call_ids)
                return
            for c in started.call_ids:
                key = (started.turn, c)
                self._started[key] = self._started.get(key, 0) + 1
            for child_id, e in list(self._escalated.items()):
                if e.call_id in started.call_ids and e.turn == started.turn:
                    # The call that waited on the child runs again (the
                    # parent's resume): it holds the turn no longer.
                    self._escalated[child_id] = replace(e, call_id=None, turn=None)
        elif kind == EntryKind.APPROVAL_ESCALATED:
            escalated = ApprovalEscalated.from_data(entry.data)
            self._escalated[escalated.child_session_id] = escalated
        elif kind == EntryKind.FORK_LINK:
            self._fork_link()
        elif kind == EntryKind.COMPACTION:
            compaction = CompactionEntry.from_data(entry.data)
            self._compaction = compaction
            self._view_start = bisect.bisect_right(self._positions, compaction.up_to)
            self._before_view = -1  # measured on the next `view_chars`

    def _apply_message(
        self, position: int, message: Message, delivered: str | None, folds: tuple[int, ...]
    ) -> None:
        if delivered:
            # Notices ride on the assistant entry that answered them, so the
            # pair is persisted atomically (see RunNotices).
            self._messages.append(Message.user(delivered))
            self._positions.append(position)
        if folds:
            self._folded.update(folds)
            self._pending = [e for e in self._pending if e.position not in self._folded]
        self._messages.append(message)
        self._positions.append(position)
        if message.role == "assistant":
            self._turn = position
            self._turn_message = message
            self._assistant_turns += 1
            for call in message.tool_calls:
                self._call_ids.add(call.id)

    @property
    def messages(self) -> Sequence[Message]:
        """The conversation so far, every message the log holds, in order."""
        if self._undecoded is not None:
            self._decode()
        return self._messages

    def _decode(self) -> None:
        undecoded, self._undecoded = self._undecoded, None
        decoded: list[Message] = []
        rows = (json.loads(text) for text in undecoded or ())
        for _, data in chain.from_iterable(rows):
            payload = MessageEntry.from_data(data)
            if payload.delivered_text:
                decoded.append(Message.user(payload.delivered_text))
            decoded.append(payload.message)
        # A new list, never an insertion into the old one: views handed out
        # before keep reading the list and bounds they were made with.
        self._messages = decoded + self._messages

    def _fork_link(self) -> None:
        # The origin's approvals stay with it: what it asked, what was decided
        # for a turn still parked and what its children escalated are not the
        # fork's to decide. Nothing is written in their place: the fork's
        # first run takes the turn up (`reopened`). A call that waited on a
        # child's escalation is cut off in the fork: its child is the
        # origin's, never written through the fork.
        self._escalated = {}
        if self.parked():
            turn = self._reopened = self._turn
            self._requests = {k: v for k, v in self._requests.items() if k[0] != turn}
            self._decisions = {k: v for k, v in self._decisions.items() if k[0] != turn}

    def _turn_requesting(self, call_id: str) -> int:
        turns = [turn for turn, cid in self._requests if cid == call_id]
        return max(turns) if turns else self._turn

    # ------------------------------------------------------------ snapshots

    def snapshot_due(self, every: int) -> bool:
        """Whether `every` entries or more were folded in since the latest snapshot."""
        return self._position - self._snapshot_at >= every

    def snapshotted(self, position: int) -> None:
        """A snapshot of this log up to `position` was written."""
        self._snapshot_at = position

    def snapshot_state(self) -> dict[str, Any]:
        """The fold's small state as JSON values (everything but the entries
        and messages): what a snapshot row keeps, for `restore`."""
        reasoning = self._reasoning
        turn_message = self._turn_message
        compaction = self._compaction
        return {
            "pending": [e.to_dict() for e in self._pending],
            "model_spec": self._model_spec,
            "model_position": self._model_position,
            "reasoning": reasoning.to_dict() if reasoning is not None else None,
            "reasoning_set": self._reasoning_set,
            "requests": [
                [turn, ApprovalRequests(turn, (call,)).to_data()]
                for (turn, _), call in self._requests.items()
            ],
            "decisions": [[turn, d.to_data()] for (turn, _), d in self._decisions.items()],
            "started": sorted([turn, call_id, n] for (turn, call_id), n in self._started.items()),
            "stepped": [self._stepped_turn, sorted(self._stepped)],
            "escalated": [e.to_data() for e in self._escalated.values()],
            "reopened": self._reopened,
            "turn": self._turn,
            "turn_message": turn_message.to_dict() if turn_message is not None else None,
            "assistant_turns": self._assistant_turns,
            "folded": sorted(self._folded),
            "stop_position": self._stop_position,
            "compaction": compaction.to_data() if compaction is not None else None,
            "last_run_started": _entry_dict(self._last_run_started),
            "last_finished": _entry_dict(self._last_finished),
        }

    def messages_since(self, position: int) -> list[Message]:
        """The messages of the entries after `position`, without decoding a
        restored log's older ones (they sit at the end of its list whether or
        not the rest is decoded)."""
        count = len(self._positions) - bisect.bisect_right(self._positions, position)
        messages = self._messages
        return messages[len(messages) - count :] if count else []

    def restore(
        self,
        position: int,
        state: Mapping[str, Any],
        messages: list[str],
        positions: list[int],
        call_ids: list[str],
    ) -> None:
        """Start this log, still empty, from a snapshot up to `position`: its
        `state` (see `snapshot_state`), its message entries still encoded
        (`messages`: per row, the JSON text of a list of [position, data];
        decoded when first read), their `positions` and tool call ids.

        Raises `ValueError` (or another error of a malformed value), leaving
        the log as it was, when the state does not have the shape
        `snapshot_state` gives.
        """
        st = state
        pending = [Entry.from_dict(e) for e in st["pending"]]
        model_spec = st["model_spec"]
        model_position = int(st["model_position"])
        raw_reasoning = st["reasoning"]
        reasoning = ReasoningOptions.from_dict(raw_reasoning) if raw_reasoning else None
        reasoning_set = bool(st["reasoning_set"])
        requests: dict[Key, RequestedCall] = {}
        for turn, data in st["requests"]:
            call = ApprovalRequests.from_data(data).calls[0]
            requests[(int(turn), call.call_id)] = call
        decisions: dict[Key, ApprovalDecision] = {}
        for turn, data in st["decisions"]:
            decision = ApprovalDecision.from_data(data)
            decisions[(int(turn), decision.call_id)] = decision
        started = {(int(turn), str(call_id)): int(n) for turn, call_id, n in st["started"]}
        # Snapshots written before step records have none.
        stepped_turn, stepped = st.get("stepped") or (0, ())
        stepped_turn, stepped = int(stepped_turn), {str(c) for c in stepped}
        escalated = {
            str(e["child_session_id"]): ApprovalEscalated.from_data(e) for e in st["escalated"]
        }
        # Snapshots written before fork links have none.
        reopened = int(st.get("reopened") or 0)
        turn = int(st["turn"])
        raw_message = st["turn_message"]
        turn_message = Message.from_dict(raw_message) if raw_message else None
        assistant_turns = int(st["assistant_turns"])
        folded = {int(p) for p in st["folded"]}
        stop_position = int(st["stop_position"])
        raw_compaction = st["compaction"]
        compaction = (
            CompactionEntry.from_data(raw_compaction) if raw_compaction is not None else None
        )
        raw_started = st["last_run_started"]
        last_run_started = Entry.from_dict(raw_started) if raw_started else None
        raw_finished = st["last_finished"]
        last_finished = Entry.from_dict(raw_finished) if raw_finished else None
        # Every value read: only now does the log change, all at once.
        self._position = self._base = self._snapshot_at = position
        self._undecoded = messages
        self._positions = positions
        self._call_ids = set(call_ids)
        self._pending = pending
        self._model_spec, self._model_position = model_spec, model_position
        self._reasoning, self._reasoning_set = reasoning, reasoning_set
        self._requests, self._decisions, self._started = requests, decisions, started
        self._stepped_turn, self._stepped = stepped_turn, stepped
        self._escalated, self._reopened = escalated, reopened
        self._turn, self._turn_message = turn, turn_message
        self._assistant_turns = assistant_turns
        self._folded = folded
        self._stop_position = stop_position
        self._last_run_started, self._last_finished = last_run_started, last_finished
        if compaction is not None:
            self._compaction = compaction
            self._view_start = bisect.bisect_right(positions, compaction.up_to)
            self._before_view = -1

    # ------------------------------------------------------------ the request view

    def view(self, extra: Message | None = None) -> MessageView:
        """The messages the next request is built from: all of them, or after a
        compaction its summary (if it has any text) followed by the messages
        it did not replace;
        then `extra` when given. A read-only view, not a copy: it stays what
        it is now while the log grows."""
        compaction = self._compaction
        if self._undecoded is not None:
            self._decode()
        messages = self._messages
        if compaction is None:
            return MessageView(messages, 0, len(messages), None, extra)
        head = summary_message(compaction.summary) if compaction.summary else None
        return MessageView(messages, self._view_start, len(messages), head, extra)

    def view_chars(self) -> int:
        """Characters of the view's messages (measured incrementally)."""
        sizes = self._sizes
        for m in self.messages[len(sizes) :]:
            size = message_chars(m)
            sizes.append(size)
            self._total += size
        if self._compaction is None:
            return self._total
        if self._before_view < 0:
            self._before_view = sum(sizes[: self._view_start])
        return summary_chars(self._compaction.summary) + self._total - self._before_view

    # ------------------------------------------------------------ the open turn

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
        """The current turn's calls that wait on a child parked on escalated
        calls (an inline escalation), each with the child's id."""
        turn = self._turn
        return {
            e.call_id: child_id
            for child_id, e in self._escalated.items()
            if e.call_id is not None and e.turn == turn
        }

    def parked(self) -> list[ToolCall]:
        """The open calls of a turn awaiting decisions: some call has an approval
        request (or waits on a child that escalated its calls: `held_calls`)
        and none has started running, except a held call: its child escalated
        since it last started, and running it again only takes that child up."""
        open_calls = self.open_calls()
        turn = self._turn
        held = self.held_calls()
        if not any((turn, c.id) in self._requests or c.id in held for c in open_calls):
            return []
        if any((turn, c.id) in self._started and c.id not in held for c in open_calls):
            return []
        return open_calls

    def reopened(self) -> list[ToolCall]:
        """The open calls of a turn that was parked for approval where this
        session (a fork) links to its origin, while nothing of it was asked
        about or started since: nothing is pending, and the next run takes
        the turn up as a resume takes up a parked one (its gated calls are
        asked about again, the others run). Empty for any other turn."""
        turn = self._turn
        if not turn or turn != self._reopened:
            return []
        open_calls = self.open_calls()
        keys = [(turn, c.id) for c in open_calls]
        if any(k in self._requests or k in self._started for k in keys):
            return []
        return open_calls

    def pending_calls(self, session_id: str = "", origin: str = "") -> list[PendingCall]:
        """The calls of the parked turn that have an approval request, as
        `PendingCall`s (with the request's reason), decided or not.
        `session_id` and `origin` name the child whose log this is, for calls
        it escalated."""
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
        before any run finished): what the run itself returned, for a run of
        any process. With `agent`, a completed run's `output` is what the run
        returned too: the answer's text for a text agent, the recorded JSON
        data validated as the output type otherwise; without, the JSON data
        as recorded (None for a text answer). Runs recorded before
        `own_usage`, `tool_calls` and `transport_retries` were written
        report zero for them."""
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
        """The trace context the latest run recorded (the run that parked the
        current turn, when one is parked); None if it was not traced."""
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
        """The open calls of a turn that is neither parked nor `reopened`: calls
        cut off by a crash or a cancellation."""
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
        """Whether the current turn's calls were run in steps, each recorded
        before it started (see `CallsStarted.step`)."""
        return self._stepped_turn == self._turn != 0

    def never_started(self, call: ToolCall) -> bool:
        """Whether `call` of the current turn is known never to have started: its
        turn was run in steps and no step record names it."""
        return self.in_steps and call.id not in self._stepped

    def cut_off_result(self, call: ToolCall) -> ToolResult:
        """The result a cut-off call gets when it does not run again: a denied
        call its denial; a call that never started `NOT_STARTED`; any other
        "interrupted; it may have run"."""
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


class MessageView(Sequence[Message]):
    """A read-only window on a log's messages: `head`, then `messages[start:stop]`,
    then `tail` (each end optional).

    Building one copies nothing, so a request costs the same at round 5,000
    as at round 1. It is immutable in effect because the list it reads is
    only ever appended to (a log that must rebuild its list makes a new one),
    so the window bounded at `stop` never changes. Compares equal to any
    sequence of the same messages in the same order, like a tuple would.
    """

    __slots__ = ("_head", "_messages", "_start", "_stop", "_tail")

    def __init__(
        self,
        messages: list[Message],
        start: int,
        stop: int,
        head: Message | None = None,
        tail: Message | None = None,
    ) -> None:
        self._messages = messages
        self._start = start
        self._stop = stop
        self._head = head
        self._tail = tail

    def __len__(self) -> int:
        return self._stop - self._start + (self._head is not None) + (self._tail is not None)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...

    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("message index out of range")
        if self._head is not None:
            if i == 0:
                return self._head
            i -= 1
        i += self._start
        if i < self._stop:
            return self._messages[i]
        assert self._tail is not None
        return self._tail

    def __iter__(self) -> Iterator[Message]:
        if self._head is not None:
            yield self._head
        yield from islice(self._messages, self._start, self._stop)
        if self._tail is not None:
            yield self._tail

    def __reversed__(self) -> Iterator[Message]:
        if self._tail is not None:
            yield self._tail
        messages = self._messages
        for i in range(self._stop - 1, self._start - 1, -1):
            yield messages[i]
        if self._head is not None:
            yield self._head

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"MessageView({list(self)!r})"


SUMMARY_HEADING = "[Summary of the earlier conversation, written when it was compacted]"


def summary_message(summary: str) -> Message:
    """The user turn that stands for the compacted part of the conversation."""
    return Message.user(f"{SUMMARY_HEADING}\n{summary}")


def summary_chars(summary: str) -> int:
    """The characters a compaction's summary puts before the model (none
    when it is empty: the view then has no summary turn)."""
    return len(SUMMARY_HEADING) + 1 + len(summary) if summary else 0


def message_chars(message: Message) -> int:
    """The characters a message puts before the model (text, calls, results)."""
    total = 0
    for block in message.blocks:
        if isinstance(block, TextBlock):
            total += len(block.text)
        elif isinstance(block, ToolResult):
            total += len(block.content)
        elif isinstance(block, ToolCall):
            raw = block.raw_arguments
            total += len(block.name) + len(raw if raw is not None else json.dumps(block.arguments))
    return total


def interrupted_results(calls: Iterable[ToolCall]) -> Message:
    """Error results for calls that were cut off by a crash or a cancellation."""
    return Message.tool_results(
        ToolResult(c.id, INTERRUPTED, is_error=True, tool_name=c.name) for c in calls
    )


_MAX_CALL_ID = 40  # the shortest limit among the providers' tool call ids


def with_unique_call_ids(message: Message, seen: AbstractSet[str]) -> Message:
    """`message` with every tool call id unused in the session (`seen`) and
    within the turn.

    Some OpenAI-compatible servers number calls per turn (`call_0` every
    turn); a reused id would pair a result or a decision with the wrong
    call. A clashing id gets a suffix (or a short hash when that would be
    too long); the rewritten id is what the log, the results and every
    later request use, so replays stay consistent.
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


def _entry_dict(entry: Entry | None) -> dict[str, Any] | None:
    return entry.to_dict() if entry is not None else None


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
