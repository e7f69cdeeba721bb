"""Questions work of a session asks a person (an MCP server's elicitation), read
from the session's log: `InputRequest` and `InputAnswer` entries keyed by an
`input_id` derived from the activity and the asker's key, so every process
records the same id; the first answer in the log is the answer."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .. import entries as log_entries
from ..entries import Entry
from ..results import PendingInput

if TYPE_CHECKING:
    from ..entries import InputAnswer, InputRequest


def input_id_for(activity_id: str, key: str) -> str:
    """The session-wide id of the question `key` of activity `activity_id`."""
    digest = hashlib.sha256(f"{activity_id}\0{key}".encode()).hexdigest()[:12]
    return f"input-{digest}"


def read_inputs(
    entries: Iterable[Entry],
) -> tuple[dict[str, InputRequest], dict[str, InputAnswer]]:
    """The questions of a log and their answers (the first for each id)."""
    asked: dict[str, InputRequest] = {}
    answered: dict[str, InputAnswer] = {}
    for entry in entries:
        if entry.kind == log_entries.InputRequest.KIND and isinstance(
            request := entry.payload, log_entries.InputRequest
        ):
            asked.setdefault(request.input_id, request)
        elif entry.kind == log_entries.InputAnswer.KIND and isinstance(
            answer := entry.payload, log_entries.InputAnswer
        ):
            answered.setdefault(answer.input_id, answer)
    return asked, answered


def pending_input(request: InputRequest) -> PendingInput:
    """The question as a person sees it."""
    params = request.request.get("params") or {}
    schema = params.get("requestedSchema")
    return PendingInput(
        request.input_id,
        str(params.get("message", "")),
        dict(schema) if isinstance(schema, Mapping) else None,
        str(params["url"]) if params.get("url") else None,
        request.source,
        request.activity_id,
        request.requested_at,
    )


def ended_activities(entries: Iterable[Entry]) -> set[str]:
    """The activities of a log that ended (nobody waits for their answers)."""
    return {
        e.payload.activity_id
        for e in entries
        if e.kind == log_entries.MCPTaskEnded.KIND
        and isinstance(e.payload, log_entries.MCPTaskEnded)
    }


def pending_inputs(entries: Iterable[Entry]) -> list[PendingInput]:
    """The questions of a log nobody answered, oldest first (those of
    activities that ended left out: nobody waits for their answers)."""
    entries = list(entries)
    asked, answered = read_inputs(entries)
    ended = ended_activities(entries)
    return [
        pending_input(r)
        for i, r in asked.items()
        if i not in answered and r.activity_id not in ended
    ]
