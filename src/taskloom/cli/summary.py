"""Where a stored session stands, read from its log and lease alone (no agent,
no code loaded): what `taskloom sessions list` and `--json` print."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..backends import SessionMeta, holder_is_gone, session_lease_key
from ..entries import Entry, MessageEntry, RunFinishedEntry, RunStartedEntry, SubagentDispatched
from ..errors import SessionNotFound
from ..events import origin_label
from ..log import SessionLog
from ..results import PendingCall
from ..runtime import Runtime

__all__ = ["SessionSummary", "summarize", "to_json"]


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One stored session: metadata, status, last prompt and the calls waiting for a decision."""

    meta: SessionMeta
    status: str
    last_prompt: str | None
    pending: tuple[PendingCall, ...]
    log: SessionLog
    interrupted_at: float | None = None
    """When an interrupted run last wrote to its log; None unless "interrupted"."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (what `--json` prints)."""
        meta = self.meta
        return {
            "id": meta.id,
            "agent": meta.agent,
            "parent_id": meta.parent_id,
            "created_at": _iso(meta.created_at),
            "status": self.status,
            "interrupted_at": _iso(self.interrupted_at),
            "last_prompt": self.last_prompt,
            "pending": [
                {"id": c.id, "name": c.name, "arguments": c.arguments, "reason": c.reason}
                for c in self.pending
            ],
        }


async def summarize(runtime: Runtime, meta: SessionMeta) -> SessionSummary:
    """The summary of session `meta`, from its log and its lease."""
    log = SessionLog.folded(await runtime.store.load(meta.id))
    pending = tuple(log.undecided_calls())
    for child_id in dict.fromkeys(log.held_calls().values()):
        # Its turn is parked on a child's escalated calls: they are what it waits on.
        try:
            child = SessionLog.folded(await runtime.store.load(child_id))
        except SessionNotFound:
            continue
        name = log.escalated[child_id].name
        pending += tuple(child.undecided_calls(child_id, origin_label(name, child_id)))
    status, open_run = _run_status(log.entries)
    since: float | None = None
    if open_run:
        # A run that started and never finished: running while its writer
        # holds the lease, else cut off (Ctrl-C, a crash) and resumable.
        held = await runtime.store.leases.current(session_lease_key(meta.id))
        if held is None or holder_is_gone(held.holder):
            # A killed holder's lease outlives it until it lapses: a holder
            # known dead has left the run as much as a lapsed lease has.
            status, since = "interrupted", log.entries[-1].created_at
        else:
            status = "running"
    elif status == "awaiting_approval" and not pending:
        status = "decided, awaiting resume"
    prompt = _last_prompt(log.entries)
    return SessionSummary(meta, status.replace("_", " "), prompt, pending, log, since)


def _iso(when: float | None) -> str | None:
    return None if when is None else datetime.fromtimestamp(when).astimezone().isoformat()


def _run_status(entries: Sequence[Entry]) -> tuple[str, bool]:
    status, open_run, runs = "new", False, 0
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, RunStartedEntry):
            open_run, runs = True, runs + 1
        elif isinstance(payload, RunFinishedEntry):
            open_run = False
            status = payload.status.value
        elif isinstance(payload, SubagentDispatched) and runs == 0:
            status = "queued"
    return status, open_run


def _last_prompt(entries: Sequence[Entry]) -> str | None:
    """The user turn that started the last run that had one."""
    prompt: str | None = None
    after_start = False
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, RunStartedEntry):
            after_start = True
        elif after_start and isinstance(payload, MessageEntry):
            after_start = False
            message = payload.message
            if message.role == "user" and not payload.folds and message.text:
                prompt = message.text
    return prompt


def to_json(value: Any) -> str:
    """JSON for scripts: indented, ASCII-only (a log's control characters and
    bidirectional marks arrive escaped)."""
    return json.dumps(value, indent=2, ensure_ascii=True, default=str)
