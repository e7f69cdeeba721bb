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
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import AsyncConnection

CANCEL_TIMEOUT = 1.0
"""Seconds a cancel request may take to reach the server before the connection is closed."""

SILENCE_MARGIN = 2.0
"""Seconds past `statement_timeout` before a server that never answers is given up on."""

IDLE_CHECK_AFTER = 0.5
"""Seconds a pooled connection may sit idle and still be handed out without a round trip.

A connection used this recently was talking to a live server a moment ago;
one idle longer is checked (a round trip) before it is handed out. The same
window as HikariCP's: long enough that a busy process never pays a check,
short enough that a connection left over from before a restart is checked.
Either way a connection whose socket already says the server hung up (the
server's goodbye, a reset) is found out locally, without a round trip.
"""


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

    With `probe`, it also runs `probe()` (in a task of its own) after
    `probe_after` seconds, if that comes before `limit`: when the probe
    returns an exception, the watchdog keeps it as `error` and cancels the
    task as if `limit` had passed. A connection handed out unchecked is
    probed so: a server that stopped answering is found out in about the
    time its check would have taken, not only at `limit`.
    """

    __slots__ = (
        "_cancelling",
        "_fired",
        "_handle",
        "_limit_at",
        "_loop",
        "_probe",
        "_prober",
        "_task",
        "error",
    )

    def __init__(
        self,
        limit: float | None,
        probe: Callable[[], Coroutine[Any, Any, BaseException | None]] | None = None,
        probe_after: float = 0.0,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if loop is None:
            loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None, "a watchdog guards a task"
        self._task = task
        self._loop = loop
        self._cancelling = task.cancelling()
        self._fired = 0
        self._prober: asyncio.Task[BaseException | None] | None = None
        self.error: BaseException | None = None
        """What the probe found wrong, if it did."""
        now = loop.time()
        self._limit_at = None if limit is None else now + limit
        if probe is not None and (limit is None or probe_after < limit):
            self._probe: Callable[[], Coroutine[Any, Any, BaseException | None]] | None = probe
            self._handle: asyncio.TimerHandle | None = loop.call_at(
                now + probe_after, self._start_probe
            )
        else:
            self._probe = None
            self._handle = None if limit is None else loop.call_at(now + limit, self._fire)

    def _start_probe(self) -> None:
        assert self._probe is not None
        prober: asyncio.Task[BaseException | None] = self._loop.create_task(self._probe())
        self._prober = prober
        prober.add_done_callback(self._probed)
        self._handle = (
            None if self._limit_at is None else self._loop.call_at(self._limit_at, self._fire)
        )

    def _probed(self, prober: asyncio.Task[BaseException | None]) -> None:
        if prober is not self._prober:  # stopped meanwhile
            return
        self._prober = None
        if prober.cancelled() or prober.exception() is not None:
            return
        error = prober.result()
        if error is not None and self._fired == 0:
            self.error = error
            if self._handle is not None:
                self._handle.cancel()
            self._fire()

    def _fire(self) -> None:
        self._fired += 1
        self._task.cancel()
        self._handle = self._loop.call_later(CANCEL_TIMEOUT, self._fire)

    def stop(self) -> bool:
        """Stop (idempotent); True if it fired and nobody else cancelled the task meanwhile."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        prober = self._prober
        if prober is not None:
            self._prober = None
            prober.cancel()
        fired = self._fired
        if fired:
            self._fired = 0
            for _ in range(fired):
                self._task.uncancel()
        return fired > 0 and self._task.cancelling() <= self._cancelling
