"""Snapshot rows in process memory, beside a `MemoryStore`."""

from __future__ import annotations

from .._leases import Fence, MemoryLeases, check_fence

__all__ = ["MemorySnapshots"]


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
