"""The registers of a session's fold: the state `SessionLog` holds and the
properties that read it (`SessionLog` folds into it; `OpenTurn` and
`SnapshotState` read and restore it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from itertools import chain
from typing import TYPE_CHECKING

from ..entries import Entry, MessageEntry
from ..messages import Message
from ..models import ReasoningOptions

if TYPE_CHECKING:
    from ..entries import ApprovalDecision, ApprovalEscalated, CompactionEntry, RequestedCall

Key = tuple[int, str]
"""(turn, call id): what approval requests, decisions and start records bind to."""


class FoldRegisters:
    """The state of one session's fold and its read-only properties."""

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
        self._base = 0
        self._entries: list[Entry] = []
        self._messages: list[Message] = []
        # A restored log's older message entries: per snapshot row, the JSON
        # text of a list of [position, data], parsed on first use of
        # `messages`: opening a session must not pay for its history.
        self._undecoded: list[str] | None = None
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
        self._started: dict[Key, int] = {}
        # The calls of turn `_stepped_turn` (0: none) named by step records:
        # of a turn run in steps, any other call never started.
        self._stepped_turn = 0
        self._stepped: set[str] = set()
        self._escalated: dict[str, ApprovalEscalated] = {}
        # The turn a fork link found parked for approval (0: none).
        self._reopened = 0
        self._call_ids: set[str] = set()
        self._turn = 0
        self._turn_message: Message | None = None
        self._assistant_turns = 0
        self._folded: set[int] = set()
        self._stop_position = 0
        self._positions: list[int] = []
        self._compaction: CompactionEntry | None = None
        self._view_start = 0
        # Sizes in characters, measured only when asked (`view_chars`).
        self._sizes: list[int] = []
        self._total = 0
        self._before_view = 0

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
        """Whether the latest run started and has no end yet (runs, or its writer died)."""
        started, finished = self._last_run_started, self._last_finished
        return started is not None and (finished is None or finished.position < started.position)

    def unended_answer(self) -> MessageEntry | None:
        """The final answer of the latest run when that run has no end and the
        answer (no tool calls, written by that run) is the log's last message;
        else None. Such a run was cut off between its answer and its end:
        running it on decides again whether it completes, without asking the
        model once more. Its `delivered_ids` are empty when a snapshot holds
        the entry and not the log."""
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
        """The log position of each message (a delivered notice shares its entry's)."""
        return self._positions

    @property
    def compaction(self) -> CompactionEntry | None:
        """The latest compaction."""
        return self._compaction

    @property
    def view_start(self) -> int:
        """The index of the first message the request view holds after `compaction`."""
        return self._view_start

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
