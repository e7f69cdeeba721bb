"""The session store interface: an append-only, totally ordered log per session.

A store knows entries, not rounds or providers. Positions start at 1 and
increase by one per append within a session; two appenders racing for the
same position never both win (the loser retries at the next position), so no
entry is lost or reordered.

A write may carry a `Fence` (a lease key and the generation its holder got):
the store refuses it with `StaleLeaseError` unless that generation is still
the current one for the key, checked atomically with the append.

Session ids are checked alike by every store (`check_session_id`), so an id
one backend accepts, every backend accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..entries import Entry, EntryKind
from ..errors import ConfigurationError, SessionNotFound
from ._leases import Fence, Leases

__all__ = [
    "MAX_SESSION_ID_LENGTH",
    "Entry",
    "EntryKind",
    "Fence",
    "SessionMeta",
    "SessionStore",
    "check_session_id",
    "not_found",
]

MAX_SESSION_ID_LENGTH = 255
"""The longest session id a store accepts, in characters."""


def check_session_id(session_id: str) -> str:
    """`session_id` if it is a valid session id, else `ConfigurationError`.

    A session id is a non-empty printable string (no control characters, line
    breaks, tabs or unpaired surrogates; spaces are fine) of at most
    `MAX_SESSION_ID_LENGTH` characters.
    """
    if (
        isinstance(session_id, str)
        and 0 < len(session_id) <= MAX_SESSION_ID_LENGTH
        and session_id.isprintable()
    ):
        return session_id
    raise ConfigurationError(
        f"session id must be a non-empty printable string of at most {MAX_SESSION_ID_LENGTH} "
        f"characters without control characters, not {_preview(session_id)}"
    )


def not_found(session_id: str) -> SessionNotFound:
    """The error every store raises for a session it does not have."""
    return SessionNotFound(f"no session {session_id!r}")


def _preview(value: object) -> str:
    text = ascii(value)
    return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """What a store knows about a session besides its log."""

    id: str
    agent: str = ""
    parent_id: str | None = None
    created_at: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        return {
            "id": self.id,
            "agent": self.agent,
            "parent_id": self.parent_id,
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }


@runtime_checkable
class SessionStore(Protocol):
    """Persistent sessions: metadata plus an append-only log each.

    `leases` is the coordination backend on the same database: a fenced
    append is checked against it in the append's own transaction.
    """

    @property
    def leases(self) -> Leases:
        """The leases on this store's database, checked by fenced appends."""
        ...

    async def create(self, meta: SessionMeta) -> SessionMeta:
        """Create a session; returns it timestamped.

        Raises `ConfigurationError` for an id `check_session_id` refuses and
        `ValueError` if the id exists.
        """
        ...

    async def get(self, session_id: str) -> SessionMeta:
        """The session's metadata; raises `SessionNotFound`."""
        ...

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        """Append at the next position and return it.

        Raises `SessionNotFound` for an unknown session and `StaleLeaseError`
        when `fence` is not the current generation of its key; either way
        nothing is written.
        """
        ...

    async def load(self, session_id: str, after: int | None = None) -> list[Entry]:
        """Entries in position order, only those after `after` when given.

        Raises `CorruptEntry` (naming the session and position) for an entry
        whose stored data is not a JSON object it can decode.
        """
        ...

    async def list(
        self, *, parent_id: str | None = None, agent: str | None = None, limit: int | None = None
    ) -> list[SessionMeta]:
        """Sessions, newest first, optionally filtered by parent or agent."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove a session and its log (no error if it does not exist)."""
        ...
