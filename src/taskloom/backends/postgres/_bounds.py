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


class Watchdogs:
    """The client-side bounds on every use of one database's connections.

    `watch()` gives each use a `Watchdog`, which cancels the use's task
    `limit` seconds after it began, and again every `CANCEL_TIMEOUT` seconds
    until `stop()`. Unlike `asyncio.timeout`, it does not cancel once only:
    the first cancel may be spent on an await that does not end the guarded
    block, after which a cleanup (a ROLLBACK over the silent connection)
    would wait forever.

    `watch(subject)` also runs `probe(subject)` (in a task of its own)
    `probe_after` seconds after the use began, if that comes before `limit`:
    when the probe returns an exception, the watchdog keeps it as `error`
    and cancels the task as if `limit` had passed. A connection handed out
    unchecked is probed so: a server that stopped answering is found out in
    about the time its check would have taken, not only at `limit`.

    Every use waits the same `limit`, so the uses' deadlines come in the
    order they began: one timer, set for the oldest, serves them all, and
    a use costs a dictionary entry rather than a timer of its own.
    """

    __slots__ = (
        "_deadlines",
        "_limit",
        "_limit_timer",
        "_loop",
        "_probe",
        "_probe_after",
        "_probe_timer",
        "_probes",
    )

    def __init__(
        self,
        limit: float | None,
        loop: asyncio.AbstractEventLoop,
        probe: Callable[[Any], Coroutine[Any, Any, BaseException | None]] | None = None,
        probe_after: float | None = None,
    ) -> None:
        self._limit = limit
        self._loop = loop
        if probe_after is not None and limit is not None and probe_after >= limit:
            probe = None  # the limit comes first anyway
        self._probe = probe
        self._probe_after = probe_after or 0.0
        # Watchdog -> when it is due, oldest first (dicts keep insertion order).
        self._deadlines: dict[Watchdog, float] = {}
        self._probes: dict[Watchdog, float] = {}
        self._limit_timer: asyncio.TimerHandle | None = None
        self._probe_timer: asyncio.TimerHandle | None = None

    def watch(self, subject: Any = None) -> Watchdog:
        """A watchdog over the current task's use, probing `subject` if it is not None."""
        loop = self._loop
        task = asyncio.current_task(loop)
        assert task is not None, "a watchdog guards a task"
        dog = Watchdog(self, task, subject)
        now = loop.time()
        if self._limit is not None:
            self._deadlines[dog] = now + self._limit
            if self._limit_timer is None:
                self._limit_timer = loop.call_at(now + self._limit, self._expire)
        if subject is not None and self._probe is not None:
            self._probes[dog] = now + self._probe_after
            if self._probe_timer is None:
                self._probe_timer = loop.call_at(now + self._probe_after, self._probe_due)
        return dog

    def _next_due(self, due: dict[Watchdog, float]) -> tuple[Watchdog | None, float]:
        """The oldest watchdog of `due` whose time has come (removed), or None and when next."""
        now = self._loop.time()
        for dog, at in due.items():
            if at > now:
                return None, at
            del due[dog]
            return dog, at
        return None, 0.0

    def _expire(self) -> None:
        self._limit_timer = None
        while True:
            dog, at = self._next_due(self._deadlines)
            if dog is None:
                break
            self._probes.pop(dog, None)
            dog._fire()
        if self._deadlines:
            self._limit_timer = self._loop.call_at(at, self._expire)

    def _probe_due(self) -> None:
        self._probe_timer = None
        assert self._probe is not None
        while True:
            dog, at = self._next_due(self._probes)
            if dog is None:
                break
            dog._start_probe(self._probe(dog.subject))
        if self._probes:
            self._probe_timer = self._loop.call_at(at, self._probe_due)

    def _forget(self, dog: Watchdog) -> None:
        self._deadlines.pop(dog, None)
        self._probes.pop(dog, None)


class Watchdog:
    """The bound on one use of a connection (see `Watchdogs`), until `stop()`.

    `stop()` withdraws every cancel it made, so the caller's own timeouts
    and cancellations are accounted as if it had never run.
    """

    __slots__ = (
        "_cancelling",
        "_fired",
        "_handle",
        "_owner",
        "_prober",
        "_task",
        "error",
        "subject",
    )

    def __init__(self, owner: Watchdogs, task: asyncio.Task[Any], subject: Any) -> None:
        self._owner = owner
        self._task = task
        self._cancelling = task.cancelling()
        self._fired = 0
        self._handle: asyncio.TimerHandle | None = None
        self._prober: asyncio.Task[BaseException | None] | None = None
        self.subject = subject
        """What the probe looks at (a connection), or None."""
        self.error: BaseException | None = None
        """What the probe found wrong, if it did."""

    def _start_probe(self, probe: Coroutine[Any, Any, BaseException | None]) -> None:
        prober: asyncio.Task[BaseException | None] = self._owner._loop.create_task(probe)
        self._prober = prober
        prober.add_done_callback(self._probed)

    def _probed(self, prober: asyncio.Task[BaseException | None]) -> None:
        if prober is not self._prober:  # stopped meanwhile
            return
        self._prober = None
        if prober.cancelled() or prober.exception() is not None:
            return
        error = prober.result()
        if error is not None and self._fired == 0:
            self.error = error
            self._owner._forget(self)
            self._fire()

    def _fire(self) -> None:
        self._fired += 1
        self._task.cancel()
        self._handle = self._owner._loop.call_later(CANCEL_TIMEOUT, self._fire)

    def stop(self) -> bool:
        """Stop (idempotent); True if it fired and nobody else cancelled the task meanwhile."""
        owner = self._owner
        owner._deadlines.pop(self, None)
        if self.subject is not None:
            owner._probes.pop(self, None)
            prober = self._prober
            if prober is not None:
                self._prober = None
                prober.cancel()
        fired = self._fired
        if not fired:
            return False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._fired = 0
        for _ in range(fired):
            self._task.uncancel()
        return self._task.cancelling() <= self._cancelling
