"""Bounded waits on a PostgreSQL connection, whatever the server or the network does.

A statement can wait on a server that will never answer: the network
stalled, or the host vanished without a reset. The server's own
`statement_timeout` cannot help (it never saw the statement), and psycopg's
handling of a cancelled task waits up to ten seconds for the server to
acknowledge. `connection_class()` bounds that cancellation; `Watchdog`
bounds the whole use of a connection on the client side.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import AsyncConnection

CANCEL_TIMEOUT = 1.0
"""Seconds a cancel request may take to reach the server before the connection is closed."""

SILENCE_MARGIN = 2.0
"""Seconds past `statement_timeout` before a server that never answers is given up on."""


@functools.cache
def connection_class() -> type[AsyncConnection[Any]]:
    """The connection class for taskloom's pools: cancelling never outwaits `CANCEL_TIMEOUT`."""
    from psycopg import AsyncConnection

    class _Connection(AsyncConnection[Any]):
        """A connection whose cancellation cannot outwait a server that does not answer.

        When the task using it is cancelled mid-statement, psycopg sends the
        server a cancel request and waits for the statement to end, for up
        to 5 + 5 seconds, whatever the caller's own timeout. Here the cancel
        request gets `CANCEL_TIMEOUT`; if it cannot get through in that
        time the server is unreachable anyway, so the connection is closed,
        which ends psycopg's wait at once and keeps the pool from reusing it.
        """

        async def cancel_safe(self, *, timeout: float = 30.0) -> None:
            timeout = min(timeout, CANCEL_TIMEOUT)
            try:
                # psycopg's own timeout covers libpq 17's cancel; the outer
                # one also the blocking cancel older libpq runs in a thread.
                async with asyncio.timeout(timeout):
                    await super().cancel_safe(timeout=timeout)
            except BaseException:
                self.pgconn.finish()
                raise

    return _Connection


class Watchdog:
    """Cancels the current task after `limit` seconds, and again every
    `CANCEL_TIMEOUT` seconds until `stop()`.

    Unlike `asyncio.timeout`, it does not cancel once only: the first
    cancel may be spent on an await that does not end the guarded block,
    after which a cleanup (a ROLLBACK over the silent connection) would wait
    forever. `stop()` withdraws every cancel it made, so the caller's own
    timeouts and cancellations are accounted as if it had never run.
    """

    def __init__(self, limit: float | None) -> None:
        task = asyncio.current_task()
        assert task is not None, "a watchdog guards a task"
        self._task = task
        self._loop = asyncio.get_running_loop()
        self._cancelling = task.cancelling()
        self._fired = 0
        self._handle = None if limit is None else self._loop.call_later(limit, self._fire)

    def _fire(self) -> None:
        self._fired += 1
        self._task.cancel()
        self._handle = self._loop.call_later(CANCEL_TIMEOUT, self._fire)

    def stop(self) -> bool:
        """Stop (idempotent); True if it fired and nobody else cancelled the task meanwhile."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        fired, self._fired = self._fired, 0
        for _ in range(fired):
            self._task.uncancel()
        return fired > 0 and self._task.cancelling() <= self._cancelling
