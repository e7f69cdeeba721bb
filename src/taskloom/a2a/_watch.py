"""What a remote agent's task says: the task as its stream tells it (and the
events a child's would give), how an exchange ended, its parts as text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Literal, NamedTuple

from a2a.types import Part, StreamResponse, TaskState

from .._redact import redact
from ..events import Event, SubagentFinished, SubagentStarted, TextDelta, origin_label


class Outcome(NamedTuple):
    """How one exchange with the remote agent ended."""

    kind: Literal["answer", "question", "failed", "stopped"]
    text: str
    task_id: str = ""


class Watch:
    """The task as the stream tells it, and the events a child's would give
    (to `emit`, if any), `secrets` redacted from the remote agent's words."""

    def __init__(
        self,
        name: str,
        emit: Callable[[Event], None] | None,
        origin: str,
        session_id: str,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.secrets = secrets
        self._emit = emit
        self._origin = origin
        self._session_id = session_id
        self.task_id = ""
        self.origin = ""
        self.foreign = ""
        """The id of another task an event was about (a protocol error)."""

    def refusal(self) -> Outcome:
        """The outcome of a server that streamed another task's events."""
        return foreign_answer(self.task_id, self.foreign)

    def see(self, response: StreamResponse, task: str) -> str:
        """Take in one streamed response; the context id it names. An event
        about another task is not taken in (`foreign` names it)."""
        about = _task_of(response)
        if self.task_id and about and about != self.task_id:
            self.foreign = self.foreign or about
            return ""
        if response.HasField("task"):
            if not self.task_id:
                self.started(response.task.id, task)
            return str(response.task.context_id)
        if response.HasField("status_update"):
            update = response.status_update
            if not self.task_id:
                self.started(update.task_id, task)
            if update.status.state == TaskState.TASK_STATE_WORKING and update.status.HasField(
                "message"
            ):
                text = redact(text_of(update.status.message.parts), self.secrets)
                if text:
                    self._send(TextDelta(origin=self.origin, session_id=self.task_id, text=text))
            return str(update.context_id)
        return ""

    def started(self, task_id: str, task: str) -> None:
        """The task is known by its id now."""
        self.task_id = task_id
        self.origin = origin_label(self.name, task_id, self._origin)
        self._send(
            SubagentStarted(
                origin=self._origin,
                session_id=self._session_id,
                child_session_id=task_id,
                name=self.name,
                task=task,
                mode="remote",
            )
        )

    def finish(self, outcome: Outcome) -> None:
        """Say how the task ended (nothing if it never started)."""
        if not self.task_id:
            return
        status = {"answer": "done", "question": "done"}.get(outcome.kind, outcome.kind)
        self._send(
            SubagentFinished(
                origin=self._origin,
                session_id=self._session_id,
                child_session_id=self.task_id,
                name=self.name,
                status=status,
                summary=" ".join(redact(outcome.text, self.secrets).split())[:120],
            )
        )

    def _send(self, event: Event) -> None:
        if self._emit is not None:
            self._emit(event)


def _task_of(response: StreamResponse) -> str:
    """The id of the task a streamed response is about ("" when it names none)."""
    if response.HasField("task"):
        return str(response.task.id)
    if response.HasField("status_update"):
        return str(response.status_update.task_id)
    if response.HasField("artifact_update"):
        return str(response.artifact_update.task_id)
    return ""


def foreign_answer(task_id: str, other: str) -> Outcome:
    """An answer about task `other` while following `task_id`: a protocol error."""
    return Outcome(
        "failed",
        f"protocol error: the remote agent answered about task {other!r} when"
        f" following task {task_id!r}; its answer was not taken",
        task_id,
    )


def text_of(parts: Iterable[Part]) -> str:
    """The parts as text: data as JSON, a file named by what it is."""
    pieces: list[str] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            pieces.append(json.dumps(_plain(part.data), ensure_ascii=False))
        else:
            name = part.filename or (part.url if kind == "url" else "unnamed")
            media = part.media_type or "unknown type"
            size = f", {len(part.raw)} bytes" if kind == "raw" else ""
            pieces.append(f"[a file part not shown: {name} ({media}{size})]")
    return "\n".join(pieces)


def _plain(value: Any) -> Any:
    """A protobuf `Value` as plain JSON data (whole numbers as integers)."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {k: _plain(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_plain(v) for v in value.list_value.values]
    if kind == "number_value":
        number = float(value.number_value)
        return int(number) if number.is_integer() else number
    if kind in ("string_value", "bool_value"):
        return getattr(value, kind)
    return None
