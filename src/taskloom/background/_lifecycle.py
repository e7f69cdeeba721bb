"""The safe orders for starting, keeping, finishing and deleting background work.

No transaction spans registry and inbox (except a finish on a store that
writes both in one statement, `push_removing`, with a lease given up too,
`push_removing_releasing`), so every method here writes
them in the one order where a crash between two writes leaves, at worst,
something that expires or is retried: never unknown work or a lost result.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, TypeAlias

from .._lazy import LazyModule
from ..backends import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    Lease,
    Leases,
    NoticeInbox,
)

if TYPE_CHECKING:
    from .. import events
    from ..events import WorkFinished
else:
    # Imported once work finishes: a plain run makes no event.
    events = LazyModule("taskloom.events")

Emit: TypeAlias = "Callable[[WorkFinished], object]"
"""Where `Lifecycle.finish` sends `WorkFinished`; may return an awaitable."""

Reopen: TypeAlias = Callable[[], Awaitable[None]]
"""Undoes what one delete hook closed, when a later hook refuses the delete."""

StopHook: TypeAlias = Callable[[str], Awaitable[None]]
"""Called with the session id when the session stops."""

DeleteHook: TypeAlias = Callable[[str], Awaitable[Reopen | None]]
"""Called with the session id before it is deleted; returns how to reopen, if anything."""


async def _maybe_await(value: object) -> None:
    if inspect.isawaitable(value):
        await value


class Lifecycle:
    """Starts, keeps alive, finishes and discards background activities.

    `emit` receives `WorkFinished` (sync or async). `lease` is the default
    lease in seconds, `kind_caps` the default cap per kind. `keep_alive(session)`
    is awaited after every successful renewal (a session with live work is
    not idle).
    """

    def __init__(
        self,
        registry: ActivityRegistry,
        inbox: NoticeInbox,
        emit: Emit | None = None,
        *,
        lease: float = 60.0,
        kind_caps: Mapping[str, int] | None = None,
        keep_alive: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.registry = registry
        self.inbox = inbox
        self._emit = emit
        self._lease = lease
        self._kind_caps = dict(kind_caps or {})
        self._keep_alive = keep_alive

    async def begin(
        self,
        session: str,
        activity: BackgroundActivity,
        start: Callable[[], object],
        *,
        lease: float | None = None,
        kind_cap: int | None = None,
    ) -> bool:
        """Register the activity, then call `start()` (awaited if it returns an awaitable).

        False, without calling `start`, when the kind is at its cap (`kind_cap`,
        else `kind_caps[activity.kind]`). If `start` raises, the registration is
        removed. `activity.id` must be new to the session (a live id is the same
        activity re-registered).
        """
        cap = kind_cap if kind_cap is not None else self._kind_caps.get(activity.kind)
        # Register first: work that is running but not registered is invisible
        # to status and to reminders, and nothing would ever clean it up. The
        # other failure — registered but never started — only lasts one lease.
        if not await self.registry.add(session, activity, self._lease_for(lease), cap):
            return False
        try:
            await _maybe_await(start())
        except BaseException:
            # Cancellation included: a start that did not complete must not
            # look running. If it got far enough to run anyway, its `finish`
            # still delivers: the inbox does not need the registration.
            await self.registry.remove(session, activity.id)
            raise
        return True

    async def alive(self, session: str, activity_id: str, *, lease: float | None = None) -> bool:
        """Renew the activity's lease (and keep the session alive); False if it
        lapsed. A lapsed registration is not revived (its slot under the cap may
        be someone else's), though the work may still `finish`."""
        if not await self.registry.renew(session, activity_id, self._lease_for(lease)):
            return False
        # Renew first: the session is kept alive only on behalf of work that
        # is provably still registered, never for work that already vanished.
        if self._keep_alive is not None:
            await self._keep_alive(session)
        return True

    async def finish(self, session: str, notice: BackgroundNotice) -> bool:
        """Deliver the activity's result and unregister it; True if this call wrote the notice.

        `WorkFinished` is emitted only by the first push of the notice id, so
        racing or repeated finishes announce once. If the push raises, the
        registration stays (calling `finish` again is the retry); an exception
        from `emit` propagates after the registration is removed. An inbox
        that can push and unregister in one statement (`push_removing`, the
        PostgreSQL one beside its own registry) writes both at once, then
        announces.
        """
        # A store that can write both at once (one statement, atomic) does:
        # no window at all, and one round trip fewer.
        together = getattr(self.inbox, "push_removing", None)
        if together is not None:
            wrote = await together(session, notice, self.registry)
            if wrote is not None:
                if wrote and self._emit is not None:
                    await _maybe_await(self._emit(self._finished(session, notice)))
                return bool(wrote)
        # Push first: in the other order there is a window where neither the
        # registry nor the inbox knows the item, and a crash there loses the
        # result. In this order a crash leaves it both finished and still
        # registered — the registration lapses with its lease, and readers
        # treat an activity with a notice as finished.
        first = await self.inbox.push(session, notice)
        try:
            # The push's answer is the one place that knows, across tasks and
            # processes, who delivered the result: only that caller announces.
            if first and self._emit is not None:
                await _maybe_await(self._emit(self._finished(session, notice)))
        finally:
            # Also on a repeated finish: removal is idempotent, and it is what
            # completes a finish that crashed after its push.
            await self.registry.remove(session, notice.activity_id)
        return first

    async def finish_releasing(
        self, session: str, notice: BackgroundNotice, leases: Leases, lease: Lease
    ) -> bool | None:
        """`finish`, with `leases.release(lease)` written in the same statement
        (all or nothing) where the inbox can (`push_removing_releasing`, the
        PostgreSQL one beside its own registry and leases): True if this call
        wrote the notice, announced as `finish` does. None, with nothing
        written, where it cannot: the caller then releases and finishes apart.
        """
        together = getattr(self.inbox, "push_removing_releasing", None)
        if together is None:
            return None
        wrote = await together(session, notice, self.registry, leases, lease)
        if wrote is None:
            return None
        if wrote and self._emit is not None:
            await _maybe_await(self._emit(self._finished(session, notice)))
        return bool(wrote)

    @staticmethod
    def _finished(session: str, notice: BackgroundNotice) -> WorkFinished:
        return events.WorkFinished(
            session_id=session,
            activity_id=notice.activity_id,
            kind=notice.kind,
            text=notice.text,
        )

    async def discard(self, session: str, activity_id: str) -> None:
        """Unregister the activity without a notice (its result is not wanted)."""
        await self.registry.remove(session, activity_id)

    def _lease_for(self, lease: float | None) -> float:
        return self._lease if lease is None else lease


class Listeners:
    """Session lifecycle hooks, and the delete that honours them.

    `on_stop(hook)` and `on_delete(hook)` register async hooks (decorators
    too). A delete hook closes what it owns for the session and may return a
    `Reopen`: if a later hook refuses the delete by raising (`DeleteRefused`
    says why), the reopens of the hooks that ran are awaited, newest first.
    """

    def __init__(self, registry: ActivityRegistry, inbox: NoticeInbox) -> None:
        self.registry = registry
        self.inbox = inbox
        self._stop_hooks: list[StopHook] = []
        self._delete_hooks: list[DeleteHook] = []

    def on_stop(self, hook: StopHook) -> StopHook:
        """Run `hook(session)` on every `stop`; returns the hook."""
        self._stop_hooks.append(hook)
        return hook

    def on_delete(self, hook: DeleteHook) -> DeleteHook:
        """Run `hook(session)` on every `delete`, in registration order; returns the hook."""
        self._delete_hooks.append(hook)
        return hook

    async def stop(self, session: str) -> None:
        """Run every stop hook, even when one fails; then raise what failed (several
        as an `ExceptionGroup`)."""
        errors: list[Exception] = []
        for hook in list(self._stop_hooks):
            try:
                await hook(session)
            except Exception as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"{len(errors)} stop hooks of session {session!r} failed", errors)

    async def delete(self, session: str) -> None:
        """Run every delete hook, then clear the session's registry and inbox. If a
        hook or the clearing raises, the hooks that ran are reopened and nothing
        more is cleared, so the delete can simply be tried again."""
        reopens: list[Reopen] = []
        try:
            for hook in list(self._delete_hooks):
                reopen = await hook(session)
                if reopen is not None:
                    reopens.append(reopen)
            # Cleared only after every hook agreed: a hook may refuse because
            # of work still running, and that work must stay visible then.
            # The registry goes before the inbox so that a failure in between
            # leaves undelivered results rather than forgetting them.
            await self.registry.clear(session)
            await self.inbox.clear(session)
        except BaseException as refusal:
            for reopen in reversed(reopens):
                try:
                    await reopen()
                except Exception as exc:
                    refusal.add_note(f"reopening after the refused delete failed too: {exc!r}")
            raise
