"""The in-memory session store and its snapshot rows: the reference for the contracts."""

from __future__ import annotations

import time
from builtins import list as _list
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .._activities import BackgroundNotice, NoticeInbox
from .._leases import Clock, Fence, MemoryLeases, check_fence, system_clock
from .._store import Entry, SessionMeta, check_session_id, not_found

if TYPE_CHECKING:
    from .._backend import Backend


class MemoryStore:
    """Sessions kept in process memory; nothing survives the process.

    Entries are kept as given (their `data` is not copied), so callers must
    treat loaded entries as read-only, exactly as with a durable store.
    `backend` is the `MemoryBackend` that built it, if one did.
    """

    backend: Backend | None = None

    def __init__(self, *, clock: Clock = system_clock) -> None:
        self._meta: dict[str, SessionMeta] = {}
        self._logs: dict[str, _list[Entry]] = {}
        # Children by parent: `list(parent_id=...)` is asked after every run
        # that may have delegated, and must not scan every session.
        self._children: dict[str, dict[str, None]] = {}  # insertion-ordered sets
        self.leases = MemoryLeases(clock)

    async def create(self, meta: SessionMeta) -> SessionMeta:
        check_session_id(meta.id)
        if meta.id in self._meta:
            raise ValueError(f"session {meta.id!r} already exists")
        if not meta.created_at:
            meta = SessionMeta(meta.id, meta.agent, meta.parent_id, time.time(), meta.metadata)
        self._meta[meta.id] = meta
        self._logs[meta.id] = []
        if meta.parent_id is not None:
            self._children.setdefault(meta.parent_id, {})[meta.id] = None
        return meta

    async def get(self, session_id: str) -> SessionMeta:
        try:
            return self._meta[session_id]
        except KeyError:
            raise not_found(session_id) from None

    async def append(self, session_id: str, entry: Entry, *, fence: Fence | None = None) -> int:
        log = self._logs.get(session_id)
        if log is None:
            raise not_found(session_id)
        if fence is not None and self.leases.generation(fence.key) != fence.generation:
            check_fence(fence, self.leases.generation(fence.key))
        position = len(log) + 1
        # An entry already placed here (as a Session places its own) is kept as it is.
        log.append(
            entry if entry.position == position and entry.created_at else entry.placed(position)
        )
        return position

    async def append_then_pending(
        self, session_id: str, entry: Entry, inbox: NoticeInbox, *, fence: Fence | None = None
    ) -> tuple[int, _list[BackgroundNotice]]:
        """`append`, then `inbox.pending(session_id)`: what the durable stores
        do in one call to their database. Raises as `append` does."""
        position = await self.append(session_id, entry, fence=fence)
        return position, await inbox.pending(session_id)

    async def append_all(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        fence: Fence | None = None,
        inbox: NoticeInbox | None = None,
    ) -> tuple[int, _list[BackgroundNotice] | None]:
        """`entries` appended at consecutive positions (all or none), the
        first one's position returned; with `inbox`, then its pending notices
        (None without): what the durable stores do in one call to their
        database. Raises as `append` does, and then nothing is written."""
        if not entries:
            raise ValueError("append_all needs at least one entry")
        log = self._logs.get(session_id)
        if log is None:
            raise not_found(session_id)
        if fence is not None and self.leases.generation(fence.key) != fence.generation:
            check_fence(fence, self.leases.generation(fence.key))
        first = len(log) + 1
        for position, entry in enumerate(entries, first):
            log.append(
                entry if entry.position == position and entry.created_at else entry.placed(position)
            )
        return first, None if inbox is None else await inbox.pending(session_id)

    async def load(self, session_id: str, after: int | None = None) -> _list[Entry]:
        log = self._logs.get(session_id)
        if log is None:
            raise not_found(session_id)
        # Positions are dense from 1, so `after` is also an index.
        return log[after:] if after else _list(log)

    async def list(
        self, *, parent_id: str | None = None, agent: str | None = None, limit: int | None = None
    ) -> _list[SessionMeta]:
        if parent_id is not None:
            candidates: Iterable[SessionMeta] = [
                self._meta[c] for c in self._children.get(parent_id, ())
            ]
        else:
            candidates = self._meta.values()
        metas = [m for m in candidates if agent is None or m.agent == agent]
        metas.sort(key=lambda m: m.created_at, reverse=True)
        return metas[:limit] if limit is not None else metas

    async def delete(self, session_id: str) -> None:
        meta = self._meta.pop(session_id, None)
        self._logs.pop(session_id, None)
        if meta is not None and meta.parent_id is not None:
            siblings = self._children.get(meta.parent_id)
            if siblings is not None:
                siblings.pop(session_id, None)
                if not siblings:
                    del self._children[meta.parent_id]

    async def close(self) -> None:
        """Nothing to release; present so every store can be closed alike."""


class MemorySnapshots:
    """Rows in process memory, fenced by the `MemoryLeases` of their store."""

    def __init__(self, leases: MemoryLeases) -> None:
        self._leases = leases
        self._rows: dict[str, dict[int, str]] = {}

    async def read(self, session_id: str) -> list[tuple[int, str]]:
        return sorted(self._rows.get(session_id, {}).items())

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        if fence is not None:
            check_fence(fence, self._leases.generation(fence.key))
        self._rows.setdefault(session_id, {}).setdefault(position, data)

    async def prune(self, session_id: str, before: int) -> None:
        rows = self._rows.get(session_id)
        if rows:
            for position in [p for p in rows if p < before]:
                del rows[position]

    async def delete(self, session_id: str) -> None:
        self._rows.pop(session_id, None)
