"""The read model of a session: its log folded (`SessionLog`, read-only to
its readers), snapshots of the fold, transcripts, and the questions a
session's work asked a person.

Every reader of a session's log reads it through here: the loop, the
runtime's `Session`, the `taskloom` command, the console and the console
tools, so the pending calls, the result of the latest run and the
conversation mean one thing wherever they are shown. It sits below the loop
and knows nothing of runs in progress, stores or runtimes: what it reads is
entries.
"""

from __future__ import annotations

from ._fold import SessionLog, fold_text
from ._inputs import ended_activities, input_id_for, pending_input, pending_inputs, read_inputs
from ._snapshot import SNAPSHOT_VERSION, Snapshot, encode_snapshot, read_snapshot
from ._transcript import conversation, entry_messages, transcript
from ._turn import INTERRUPTED, NOT_STARTED, denial_text, with_unique_call_ids
from ._view import SUMMARY_HEADING, message_chars, summary_chars, summary_message

__all__ = [
    "INTERRUPTED",
    "NOT_STARTED",
    "SNAPSHOT_VERSION",
    "SUMMARY_HEADING",
    "SessionLog",
    "Snapshot",
    "conversation",
    "denial_text",
    "encode_snapshot",
    "ended_activities",
    "entry_messages",
    "fold_text",
    "input_id_for",
    "message_chars",
    "pending_input",
    "pending_inputs",
    "read_inputs",
    "read_snapshot",
    "summary_chars",
    "summary_message",
    "transcript",
    "with_unique_call_ids",
]
