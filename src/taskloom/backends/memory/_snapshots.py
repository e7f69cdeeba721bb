"""Snapshot rows in process memory, beside a `MemoryStore`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import StaleLeaseError
from .._leases import Fence, MemoryLeases

if TYPE_CHECKING:
    from .._store import SessionStore

__all__ = ["MemorySnapshots"]


class MemorySnapshots:
    """Rows in process memory, beside a `MemoryStore`."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self._rows: dict[str, dict[int, str]] = {}

    async def read(self, session_id: str) -> list[tuple[int, str]]:
        return sorted(self._rows.get(session_id, {}).items())

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        leases = self._store.leases
        if fence is not None and isinstance(leases, MemoryLeases):
            current = leases.generation(fence.key)
            if current != fence.generation:
                raise StaleLeaseError(
                    f"lease {fence.key!r} generation {fence.generation} is stale "
                    f"(current {current})"
                )
        self._rows.setdefault(session_id, {}).setdefault(position, data)

    async def prune(self, session_id: str, before: int) -> None:
        rows = self._rows.get(session_id)
        if rows:
            for position in [p for p in rows if p < before]:
                del rows[position]

    async def delete(self, session_id: str) -> None:
        self._rows.pop(session_id, None)
