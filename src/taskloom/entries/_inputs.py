"""Input for a person: what a session's work (an MCP task) asks, the answer,
and the end of the task that asked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .._codec import stored
from ._base import EntryKind, Payload


@stored(absent={"text": ""})
@dataclass(frozen=True, slots=True)
class MCPTaskEnded(Payload):
    """In the session's log: an MCP task that asked a person something ended
    (`status` is a `NoticeStatus`, `text` what its notice carries), so its
    questions are no longer open. Its record is its child session's log."""

    KIND: ClassVar[str] = EntryKind.MCP_TASK_ENDED
    activity_id: str
    status: str
    text: str


@stored(absent={"activity_id": "", "key": "", "request": {}})
@dataclass(frozen=True, slots=True)
class InputRequest(Payload):
    """Work of the session (an MCP task, named by its `activity_id`) asks a
    person for input: `request` is what was asked, as the protocol spells it
    (an MCP `elicitation/create` request: `method` and `params`), `key` the
    asker's name for it (unique within the activity), and `input_id` the
    session-wide id a person answers by. The session's `pending_input()`
    lists it until an `InputAnswer` for `input_id` is in the log."""

    KIND: ClassVar[str] = EntryKind.INPUT_REQUEST
    input_id: str
    activity_id: str
    key: str
    request: dict[str, Any]
    source: str = ""
    requested_at: float = 0.0


@stored(absent={"action": "accept"})
@dataclass(frozen=True, slots=True)
class InputAnswer(Payload):
    """A person's answer to the `InputRequest` `input_id`: `action` is
    "accept" (with `content`), "decline" or "cancel", as MCP elicitation
    answers. Write-once: the first answer in the log is the answer."""

    KIND: ClassVar[str] = EntryKind.INPUT_ANSWER
    input_id: str
    action: str
    content: dict[str, Any] | None = None
