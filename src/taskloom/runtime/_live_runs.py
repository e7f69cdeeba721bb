"""The runs in progress in this process, by session: what cancelling a
session (`Runtime.cancel_runs`, deleting it) reaches."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from .._control import StopSignal

__all__ = ["CANCEL_WAIT", "LiveRuns"]

CANCEL_WAIT = 2.0
"""Seconds `LiveRuns.cancel` waits for the runs it cancelled to end. A run
ends within moments of its cancel (it aborts what it waits on); only a tool
that suppresses its own cancellation keeps it longer."""


class LiveRuns:
    """The stop signals of the runs in progress in this process, by session id."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: dict[str, dict[StopSignal, asyncio.Future[None]]] = {}

    @contextlib.contextmanager
    def running(self, session_id: str, stop: StopSignal) -> Iterator[None]:
        """Count a run of `session_id`, stopped by `stop`, in progress for the block."""
        ended = asyncio.get_running_loop().create_future()
        runs = self._runs.setdefault(session_id, {})
        runs[stop] = ended
        try:
            yield
        finally:
            if runs.get(stop) is ended:
                del runs[stop]
            if not runs and self._runs.get(session_id) is runs:
                del self._runs[session_id]
            ended.set_result(None)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._runs

    async def cancel(self, session_id: str, reason: str | None, wait: float = CANCEL_WAIT) -> int:
        """Cancel the session's runs (`StopSignal.cancel`) and wait until they
        ended, at most `wait` seconds; how many were cancelled."""
        runs = dict(self._runs.get(session_id, {}))
        for stop in runs:
            stop.cancel(reason)
        if runs:
            await asyncio.wait(runs.values(), timeout=wait)
        return len(runs)
