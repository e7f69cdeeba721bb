"""The session lease a run holds: one writer per session, fenced appends."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from .._run_controls import let_go, wait_until
from ..backends import Lease, Leases, acquire_or_take_over, session_lease_key
from ..backends.memory import MemoryLeases
from ..errors import SessionBusy

if TYPE_CHECKING:
    from ._journal import SessionJournal

logger = logging.getLogger("taskloom")

T = TypeVar("T")

LEASE_TTL = 30.0
"""Seconds a session lease lasts without renewal (renewed every third of it)."""

RELEASE_WAIT = 1.0
"""Seconds a run's end waits for its lease release; a release not done by
then is not withdrawn but lands on its own, and meanwhile the same process's
next run of the session takes the lease over."""

_ended: dict[str, str] = {}
"""Lease key -> the holder name of a hold of this process that is over but
whose release has not landed (yet): the next acquisition here takes it over."""

_ENDED_MAX = 4096  # releases that failed for sessions never run again must not pile up


def _end(lease: Lease) -> None:
    if len(_ended) >= _ENDED_MAX:
        del _ended[next(iter(_ended))]  # the oldest: its lease lapses on its own
    _ended[lease.key] = lease.holder


def _releases_in_place(leases: Leases) -> bool:
    """Whether `leases.release` is the in-process one: a dict update that
    neither waits nor fails (a subclass's or a replaced one may do either)."""
    return type(leases) is MemoryLeases and "release" not in vars(leases)


async def _acquire(leases: Leases, session_id: str, wait: float | None, ttl: float) -> Lease:
    """The lease of session `session_id`, for `ttl` seconds; `wait` as `Session.hold`'s."""
    key = session_lease_key(session_id)
    loop = asyncio.get_running_loop()
    # Waiting is settled on the first refusal: most acquisitions succeed at once.
    give_up: float | None = None
    delay = 0.02
    while True:
        lease = await acquire_or_take_over(leases, key, ttl, ended=_ended.get(key))
        if lease is not None:
            _ended.pop(key, None)  # released, lapsed or taken over: nothing to take over
            return lease
        if give_up is None:
            # `wait=True` said "as long as it takes" before waits were seconds; it still does.
            patience = 0.0 if wait is None else math.inf if wait is True else float(wait)
            give_up = loop.time() + patience
        if loop.time() >= give_up:
            current = await leases.current(key)
            if current is None:
                continue  # released meanwhile: try again at once
            raise SessionBusy(session_id, current.holder)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


class HeldLease:
    """A session lease this process holds (`Session.hold`), renewed on a timer
    while held; `on_lost` and `on_renewed` hook into its beat."""

    __slots__ = (
        "_beat",
        "_leases",
        "_lost",
        "_renewed",
        "_timer",
        "fence",
        "given_up",
        "lease",
        "session_id",
        "ttl",
    )

    def __init__(self, leases: Leases, session_id: str, lease: Lease, ttl: float) -> None:
        self._leases = leases
        self.session_id = session_id
        self.lease = lease
        # What every append of the holder carries; renewals keep the generation.
        self.fence = lease.fence
        self.ttl = ttl
        self._lost: list[Callable[[], None]] = []
        self._renewed: list[Callable[[], Awaitable[object]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._beat: asyncio.Task[None] | None = None
        self.given_up = False
        """Whether `give_up_with` gave the lease up (its hold then releases nothing)."""
        self._schedule()

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` if a renewal finds the lease taken over; returns the undo."""
        self._lost.append(callback)
        return lambda: self._lost.remove(callback) if callback in self._lost else None

    def on_renewed(self, callback: Callable[[], Awaitable[object]]) -> None:
        """Await `callback()` after every renewal: keeps something else alive
        on the lease's beat (a failure there is logged, not fatal)."""
        self._renewed.append(callback)

    def _schedule(self) -> None:
        # A timer, not a task: most runs end long before their first renewal.
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.ttl / 3, self._fire)

    def _fire(self) -> None:
        self._beat = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        leases = self._leases
        try:
            renewed = await leases.renew(self.lease, self.ttl)
        except Exception:
            logger.warning(
                "renewing the lease of session %s failed", self.session_id, exc_info=True
            )
            self._schedule()  # the lease may still be ours; try again on the next beat
            return
        if renewed is None:
            await self._log_loss(leases)
            for callback in list(self._lost):
                callback()
            return
        self.lease = renewed
        for keep_alive in self._renewed:
            try:
                await keep_alive()
            except Exception:
                logger.warning("keep-alive of session %s failed", self.session_id, exc_info=True)
        self._schedule()

    async def _log_loss(self, leases: Leases) -> None:
        """Say how the lease was lost: it lapsed before this renewal, or another
        writer holds it now (only the store can tell which)."""
        try:
            current = await leases.current(self.lease.key)
        except Exception:
            current = None
        if current is not None and current.generation != self.lease.generation:
            logger.warning(
                "session %s was taken over by another writer (lease generation %d, now %d)",
                self.session_id,
                self.lease.generation,
                current.generation,
            )
        else:
            logger.warning(
                "the lease of session %s lapsed before it could be renewed (it expired "
                "after %g s without renewal); its run stops",
                self.session_id,
                self.ttl,
            )

    def stop_renewing(self) -> None:
        """Stop renewing the lease, leaving it held (whoever gave it releases it)."""
        if self._timer is not None:
            self._timer.cancel()
        if self._beat is not None and not self._beat.done():
            self._beat.cancel()

    async def give_up_with(self, write: Callable[[Leases, Lease], Awaitable[bool]]) -> bool:
        """Stop renewing, then let `write(leases, lease)` give the lease up in
        a write of its own (the lease's release and something else, in one
        statement): True, and the hold releases nothing more, when `write`
        says it did (True); False when it could not, having written nothing
        (the hold then releases the lease as usual, and so it does when
        `write` raises)."""
        beat = self._beat
        self.stop_renewing()
        if beat is not None:
            # A renewal under way lands first: the write's release then
            # matches the lease as renewed (the same generation).
            await asyncio.wait([beat])
        if not await write(self._leases, self.lease):
            return False
        self.given_up = True
        return True

    async def release(self, by: float | None = None) -> None:
        """Stop renewing and give the lease up, waiting at most `RELEASE_WAIT`
        seconds for the store, and when `by` (a loop time) is given, not past
        it: what is not done then finishes on its own."""
        beat = self._beat
        self.stop_renewing()
        if beat is None and _releases_in_place(self._leases):
            # A dict update that can neither wait nor fail: nothing to bound,
            # and nothing left to land later.
            await self._leases.release(self.lease)
            return
        if by is None or by - asyncio.get_running_loop().time() > 2 * RELEASE_WAIT:
            # Time enough for the release's own wait and for the store to wind
            # down a renewal cancelled mid-call (a second at most on the built-in stores).
            await self._release(beat)
            return
        # A renewal cancelled mid-statement, and the release after it, may
        # each wait on a silent store; the run's caller does not.
        release = asyncio.ensure_future(self._release(beat))
        try:
            await wait_until(release, by)
        finally:
            if not release.done():
                let_go(release)

    async def _release(self, beat: asyncio.Task[None] | None) -> None:
        if beat is not None:
            await asyncio.wait([beat])
        lease = self.lease
        # The hold is over now. A release stuck behind a busy store must
        # neither hold up the run that ended nor lock the session until the
        # lease lapses: it is left to land, and meanwhile this process's next
        # run of the session takes the lease over (a new generation: nothing
        # of this hold writes after that, its late release included).
        _end(lease)
        # Awaited here first, so a store that answers at once frees the
        # session before the run's end returns (no hop through another task).
        if _releases_in_place(self._leases):
            # Never waits: no timer to arm and cancel.
            await self._send_release(lease)
            return
        try:
            async with asyncio.timeout(RELEASE_WAIT):
                await self._send_release(lease)
        except TimeoutError:
            # Withdrawn by the timeout: sent again, to land on its own.
            let_go(asyncio.ensure_future(self._send_release(lease)))

    async def _send_release(self, lease: Lease) -> None:
        try:
            await self._leases.release(lease)
        except Exception as exc:
            # The store's errors name no credentials (hosts and ports only).
            logger.warning(
                "releasing the lease of session %s failed (%s: %s); it stays held until it "
                "lapses (%g s) or this process runs the session again",
                self.session_id,
                type(exc).__name__,
                exc,
                self.ttl,
            )
            return
        if _ended.get(lease.key) == lease.holder:
            del _ended[lease.key]


class SessionHold:
    """`Session.hold()`: the session's lease for an `async with` block, its
    journal's appends fenced while it is held (re-entrant: an inner hold
    shares the outer lease, which the outer one releases)."""

    __slots__ = ("_given", "_held", "_journal", "_leases", "_ttl", "_wait", "release_by")

    def __init__(
        self,
        journal: SessionJournal,
        leases: Leases,
        wait: float | None,
        ttl: float,
        given: Lease | None = None,
    ) -> None:
        self._journal = journal
        self._leases = leases
        self._wait = wait
        self._ttl = ttl
        self._given = given
        self._held: HeldLease | None = None
        self.release_by: float | None = None
        """Loop time past which the release, if this hold took the lease, does
        not hold its caller up (a run with a deadline returns by then)."""

    async def __aenter__(self) -> HeldLease:
        journal = self._journal
        outer = journal.held
        if outer is not None:
            return outer  # an inner hold: the outer one releases
        lease = self._given or await _acquire(self._leases, journal.id, self._wait, self._ttl)
        held = self._held = HeldLease(self._leases, journal.id, lease, self._ttl)
        journal.fence_with(held)
        return held

    async def __aexit__(self, *exc: object) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._journal.fence_with(None)
            if self._given is None and not held.given_up:
                await held.release(self.release_by)
            else:
                held.stop_renewing()  # its giver releases it
