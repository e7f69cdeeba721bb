"""Snapshots of a session's fold: a cache beside the log, never the truth.

A snapshot row covers the log up to its `position` and holds opaque JSON
text that its writer (the session, through the log's fold) knows how to
read; the store only keeps rows, in position order, per session. Readers
verify each row (its checksum and the position it says it covers, see
`taskloom.log.read_snapshot`) and replay the log instead of using a row
they cannot trust, so a row may be stale, foreign or damaged without harm:
a store must hand back the text it holds, even text that is not what was
written, rather than fail the read. Rows go with their session: SQL rows by
foreign key, memory rows by `delete`.

A write may carry the session lease's `Fence`: it is refused (nothing
written) unless the generation is current, so only the session's one writer
adds rows. Two writers never corrupt each other: the first row written at a
position stays.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._leases import Fence


@runtime_checkable
class SnapshotStore(Protocol):
    """Snapshot rows per session (see the module docstring)."""

    async def read(self, session_id: str) -> list[tuple[int, str]]:
        """Every row of the session as `(position, data)`, in position order
        (empty for an unknown session)."""
        ...

    async def write(
        self, session_id: str, position: int, data: str, *, fence: Fence | None = None
    ) -> None:
        """Add a row at `position` unless one is there; raises `StaleLeaseError`
        (writing nothing) when `fence` is not current."""
        ...

    async def prune(self, session_id: str, before: int) -> None:
        """Remove the session's rows at positions below `before`."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove every row of the session."""
        ...
