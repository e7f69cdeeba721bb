"""The runs in progress in this process, by session: what cancelling a
session (`Runtime.cancel_runs`, deleting it) reaches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .._run_controls import StopSignal

CANCEL_WAIT = 2.0
"""Seconds `LiveRuns.cancel` waits for the runs it cancelled to end. A run
ends within moments of its cancel (it aborts what it waits on); only a tool
that suppresses its own cancellation keeps it longer."""


class LiveRuns:
    """The stop signals of the runs in progress in this process, by session id."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: dict[str, dict[StopSignal, _Run]] = {}

    def started(self, session_id: str, stop: StopSignal) -> Callable[[], None]:
        """Count a run of `session_id`, stopped by `stop`, in progress until the
        returned callable is called."""
        run = _Run(self._runs, session_id, stop)
        self._runs.setdefault(session_id, {})[stop] = run
        return run.ended

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._runs

    async def cancel(self, session_id: str, reason: str | None, wait: float = CANCEL_WAIT) -> int:
        """Cancel the session's runs (`StopSignal.cancel`) and wait until they
        ended, at most `wait` seconds; how many were cancelled."""
        runs = list(self._runs.get(session_id, {}).values())
        ended = [run.waiter() for run in runs]
        for run in runs:
            run.stop.cancel(reason)
        if runs:
            await asyncio.wait(ended, timeout=wait)
        return len(runs)


class _Run:
    """One run in progress."""

    __slots__ = ("_key", "_runs", "_waiter", "stop")

    def __init__(self, runs: dict[str, dict[StopSignal, _Run]], key: str, stop: StopSignal) -> None:
        self._runs = runs
        self._key = key
        self.stop = stop
        # Made only for a cancel that waits: most runs end unwatched.
        self._waiter: asyncio.Future[None] | None = None

    def waiter(self) -> asyncio.Future[None]:
        """Done once the run ended."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def ended(self) -> None:
        """The run ended: it is no longer counted."""
        runs = self._runs.get(self._key)
        if runs is not None and runs.get(self.stop) is self:
            del runs[self.stop]
            if not runs:
                del self._runs[self._key]
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
