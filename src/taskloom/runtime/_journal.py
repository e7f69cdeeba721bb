"""A session's journal: its log as this process has folded it (a cache of
the store), and the one way entries are written while a lease is held."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..backends import Fence
from ..entries import Entry, Payload
from ..errors import CorruptEntry, StaleLeaseError, StoreError
from ..log import SessionLog, encode_snapshot, read_snapshot
from ..messages import Message

if TYPE_CHECKING:
    from ._runtime import Runtime
    from ._session_lease import HeldLease

logger = logging.getLogger("taskloom")


_GIVES: dict[tuple[type, str], bool] = {}


def _gives(kind: type, method: str) -> bool:
    """Whether stores of `kind` append through `method` (`append_then_pending`,
    `append_all`) as they do through `append`: the class that gives `append`
    gives it too. A store that wraps another, or overrides `append`, keeps
    its appends its own."""
    known = _GIVES.get((kind, method))
    if known is None:
        known = False
        for klass in kind.__mro__:
            names = vars(klass)
            if "append" in names or method in names:
                known = "append" in names and method in names
                break
        _GIVES[(kind, method)] = known
    return known


def _ends_with_answer(kind: type) -> bool:
    """Whether stores of `kind` append through `append_ending` (see `_gives`)."""
    return _gives(kind, "append_ending")


def _lists_running(kind: type) -> bool:
    """Whether stores of `kind` append through `append_all_listing` (see `_gives`)."""
    return _gives(kind, "append_all_listing")


def _reads_inbox(kind: type) -> bool:
    """Whether stores of `kind` append through `append_then_pending` (see `_gives`)."""
    return _gives(kind, "append_then_pending")


class SessionJournal:
    """The log of session `id` as this process has folded it, kept up to date
    by `sync` and by its own appends.

    While a lease is held through it (`Session.hold`, every run), its
    appends carry the lease's fencing token: the store refuses them with
    `StaleLeaseError` once another writer took the session over. With
    `new`, its first read looks for no snapshot (a session just created,
    or one known to be short) and folds every entry.

    An entry may be staged (`stage`): it is written with the journal's next
    append, in the same call to the store where the store can (`append_all`),
    so entries with nothing to wait for between them cost one round trip.
    """

    __slots__ = (
        "_follow",
        "_held",
        "_inbox_read",
        "_log",
        "_restorable",
        "_running",
        "_runtime",
        "_staged",
        "_unused_rows",
        "_whole",
        "id",
    )

    def __init__(self, runtime: Runtime, session_id: str, *, new: bool = False) -> None:
        self.id = session_id
        self._runtime = runtime
        self._log = SessionLog()
        # The first sync of an existing session starts from its snapshot; a
        # session just created has none to look for.
        self._restorable = not new
        # Snapshot rows were found at open and not used (damaged, or of
        # another log): the next snapshot replaces them all.
        self._unused_rows = False
        self._held: HeldLease | None = None
        # (position, monotonic time) of an own append known to follow every
        # entry before it; see sync(fresh=).
        self._whole: tuple[int, float] | None = None
        # (position, monotonic time, notices, activities or None) of the
        # inbox read with an own append; see take_inbox().
        self._inbox_read: tuple[int, float, list[Any], list[Any] | None] | None = None
        # The activities read with the notices take_inbox() last handed out.
        self._running: list[Any] | None = None
        # Entries staged for the next append (see `stage`), placed after the log.
        self._staged: list[Entry] = []
        # (kind, make, dropped) of `follow`: once, an entry written after one
        # of that kind.
        self._follow: (
            tuple[str, Callable[[Any], Payload | None], Callable[[], object] | None] | None
        ) = None

    @property
    def log(self) -> SessionLog:
        """The session's log as folded so far (call `sync` to see others' entries)."""
        return self._log

    @property
    def held(self) -> HeldLease | None:
        """The session's lease, while this journal's appends are fenced by it."""
        return self._held

    def fence_with(self, held: HeldLease | None) -> None:
        """Fence this journal's appends with `held` from now on (None: no more,
        the lease being given up)."""
        self._held = held
        if held is not None:
            # The last holder may have written since this journal last looked.
            self._whole = None
        else:
            # Staged under the lease given up: never to be written unfenced.
            self._staged.clear()

    async def sync(self, *, fresh: float = 0.0) -> None:
        """Fold in entries other tasks or processes appended since our last look.

        With `fresh` (seconds), the read is skipped when this journal's own
        append of the log's last entry landed where expected (nobody wrote
        in between) less than `fresh` seconds ago. Raises `CorruptEntry`
        naming the session and position of an entry that cannot be read.
        """
        if fresh and self._whole is not None:
            position, at = self._whole
            if position == self._log.position and time.monotonic() - at < fresh:
                return
        if self._staged:
            # Written before the read: the log then holds them where they landed.
            await self._append_placed(self._staged.pop(), None)
        read_at = time.monotonic()
        restored = False
        if self._restorable:
            self._restorable = False
            restored = self._log.position == 0 and await self._restore()
        if not restored:
            self._fold(await self._runtime.store.load(self.id, after=self._log.position))
        self._whole = (self._log.position, read_at)

    async def entries(self) -> list[Entry]:
        """Every entry of the session's log, in order."""
        await self.sync()
        log = self._log
        if log.base:
            # Restored from a snapshot: the older entries are only in the store.
            return await self._runtime.store.load(self.id)
        return list(log.entries)

    def append(self, entry: Entry, message: Message | None = None) -> Coroutine[Any, Any, int]:
        """Append `entry` and fold it in; returns its position (see the class
        docstring for the fence). `message`: the entry's already-built message."""
        expected = self._log.position + 1 + len(self._staged)
        if entry.position != expected or not entry.created_at:
            entry = Entry(
                entry.kind, entry.data, entry.run_id, expected, entry.created_at or time.time()
            )
        # The append itself, awaited by the caller: no coroutine of its own
        # in between on a run's every append.
        return self._append_placed(entry, message)

    def record(
        self,
        payload: Payload,
        run_id: str | None = None,
        message: Message | None = None,
        *,
        read_inbox: bool = False,
        list_running: bool = False,
    ) -> Coroutine[Any, Any, int]:
        """Append a typed entry (see `append`; `message`: the payload's message).
        With `read_inbox`, the session's pending notices are read with the
        append, in the same call to the store when it can (`take_inbox`);
        with `list_running` too, the session's registered activities in that
        same statement, where the store can (`take_running`)."""
        position = self._log.position + 1 + len(self._staged)
        entry = Entry(payload.KIND, payload.to_data(), run_id, position, time.time())
        then = self._followed(payload)
        if then is not None:
            return self._record_followed(entry, then)
        return self._append_placed(entry, message, read_inbox, list_running)

    def _followed(self, payload: Payload) -> Payload | None:
        """What `follow` writes after `payload` (firing it), or None."""
        follow = self._follow
        if follow is None or follow[0] != payload.KIND:
            return None
        self._follow = None
        return follow[1](payload)

    def follow(
        self,
        kind: str,
        make: Callable[[Any], Payload | None],
        dropped: Callable[[], object] | None = None,
    ) -> None:
        """Once: when an entry of `kind` is next recorded, the entry storing
        `make(payload)` (None: none) is written right after it, in the same
        write (see `stage`); `record` still returns the first one's position.
        Made for a write that then did not include it (`record_ending`
        returning False), `dropped()` is called and the follow stands again.
        `unfollow` withdraws it if it has not fired."""
        self._follow = (kind, make, dropped)

    async def record_ending(
        self,
        payload: Payload,
        run_id: str | None,
        message: Message | None,
        ending: Callable[[], Payload | None],
    ) -> bool:
        """`record(payload, run_id, message, read_inbox=True)` of a run's final
        answer, with the run's end written in the same statement where the
        store can: `ending()` (None: not this time) and what `follow` writes
        after it land with the answer only if the inbox has no pending notice
        and nothing landed in the log since this journal's last look. True
        when they did (the run has ended); False when the answer landed
        alone (then the run goes on as after `record`). Cancelled while the
        statement is out, it waits for the answer first, so the log says
        whether the run ended."""
        runtime = self._runtime
        store = runtime.store
        end = None
        if not self._staged and _ends_with_answer(type(store)):
            end = ending()
        if end is None:
            await self.record(payload, run_id, message, read_inbox=True)
            return False
        position = self._log.position + 1
        now = time.time()
        entries = [
            Entry(payload.KIND, payload.to_data(), run_id, position, now),
            Entry(end.KIND, end.to_data(), run_id, position + 1, now),
        ]
        follow = self._follow
        then = self._followed(end)
        if then is not None:
            entries.append(Entry(then.KIND, then.to_data(), None, position + 2, now))
        # Made for this write: if its rows do not land, it stands again.
        fired = follow if follow is not None and self._follow is None else None
        held = self._held
        at = time.monotonic()
        write = asyncio.ensure_future(
            store.append_ending(  # type: ignore[attr-defined]
                self.id,
                entries,
                keep=1,
                fence=held.fence if held is not None else None,
                inbox=runtime.background.inbox,
            )
        )
        try:
            written = await asyncio.shield(write)
        except asyncio.CancelledError:
            # A second cancel stops this wait (or the read below), not the write.
            await asyncio.wait({write})
            if not write.cancelled() and write.exception() is None:
                written = write.result()
                if written is None:
                    self._rearm(fired)  # nothing was written
                elif not self._fold_ending(written, entries, message, fired, at):
                    # Placed after another's entry (alone): read, so the log
                    # says the run goes on, and its caller ends it.
                    await self.sync()
            raise
        if written is None:
            # The store cannot: the answer alone, as `record` writes it.
            self._rearm(fired)
            await self.record(payload, run_id, message, read_inbox=True)
            return False
        if not self._fold_ending(written, entries, message, fired, at):
            # Someone appended in between: read the gap (the answer included).
            await self.sync()
        every = runtime.snapshot_every
        if held is not None and every and self._log.snapshot_due(every):
            await self._snapshot(held.fence)
        return bool(written[2])

    def _rearm(self, fired: Any) -> None:
        if fired is not None:
            self._follow = fired
            if fired[2] is not None:
                fired[2]()

    def _fold_ending(
        self,
        written: tuple[int, list[Any], bool],
        entries: list[Entry],
        message: Message | None,
        fired: Any,
        at: float,
    ) -> bool:
        """Fold in what `record_ending`'s write placed; False when it landed
        elsewhere than placed (the log must then be read)."""
        first, pending, ended = written
        if not ended:
            del entries[1:]
            self._rearm(fired)
        last = first + len(entries) - 1
        self._inbox_read = (last, at, pending, None)
        if first != entries[0].position:
            return False
        log = self._log
        log.apply(entries[0], message)
        for placed in entries[1:]:
            log.apply(placed)
        self._whole = (last, time.monotonic())
        return True

    def unfollow(self) -> None:
        """Withdraw a `follow` that has not fired."""
        self._follow = None

    async def _record_followed(self, entry: Entry, then: Payload) -> int:
        self._staged.append(entry)
        position = self._log.position + 1 + len(self._staged)
        after = Entry(then.KIND, then.to_data(), None, position, time.time())
        return await self._append_placed(after, None) - 1

    def stage(self, payload: Payload, run_id: str | None = None) -> None:
        """Stage a typed entry, to be written (fenced as `append`) with this
        journal's next append or before its next read of the store (`sync`
        not skipped, `entries`), all in one call to the store where it can
        (`append_all`); else one after the other, in order. Not in `log`
        until written. Dropped if the lease is given up first (`fence_with`
        None): for an entry nothing waits on, whose write may wait for the
        next one (a start entry written with what the run does first)."""
        position = self._log.position + 1 + len(self._staged)
        self._staged.append(Entry(payload.KIND, payload.to_data(), run_id, position, time.time()))

    def take_inbox(self, fresh: float) -> list[Any] | None:
        """The session's pending notices as read with this journal's last
        append (`record(..., read_inbox=True)`), if that append is still the
        log's last entry and was made less than `fresh` seconds ago; else
        None (read the inbox now). Handed out once."""
        read = self._inbox_read
        self._running = None
        if read is None:
            return None
        self._inbox_read = None
        position, at, pending, running = read
        if position != self._log.position or time.monotonic() - at >= fresh:
            return None
        self._running = running
        return pending

    def take_running(self) -> list[Any] | None:
        """The session's registered activities read in the statement whose
        notices the last `take_inbox` handed out, if it listed them
        (`record(..., list_running=True)`); else None (list them now).
        Handed out once."""
        running, self._running = self._running, None
        return running

    async def _append_placed(
        self,
        entry: Entry,
        message: Message | None,
        read_inbox: bool = False,
        list_running: bool = False,
    ) -> int:
        # The entry is placed where it will most likely land, so neither the
        # store nor the log has to copy it again; a store that puts it
        # elsewhere says so by the position it returns.
        held = self._held
        fence = held.fence if held is not None else None
        runtime = self._runtime
        store = runtime.store
        position: int
        staged = self._staged
        if staged and not _gives(type(store), "append_all"):
            # One after the other, in order: the store appends one at a time.
            earlier = list(staged)
            staged.clear()
            for placed in earlier:
                await self._append_placed(placed, None)
        log = self._log
        if staged:
            entries = [*staged, entry]
            staged.clear()
            at = time.monotonic()
            running: list[Any] | None = None
            if read_inbox and list_running and _lists_running(type(store)):
                # The first boundary's look at what runs, in the same statement.
                background = runtime.background
                first, pending, running = await store.append_all_listing(  # type: ignore[attr-defined]
                    self.id,
                    entries,
                    fence=fence,
                    inbox=background.inbox,
                    registry=background.registry,
                )
            else:
                inbox = runtime.background.inbox if read_inbox else None
                first, pending = await store.append_all(  # type: ignore[attr-defined]
                    self.id, entries, fence=fence, inbox=inbox
                )
            position = first + len(entries) - 1
            if read_inbox:
                self._inbox_read = (position, at, pending or [], running)
            if first == entries[0].position:
                for placed in entries[:-1]:
                    log.apply(placed)
        elif read_inbox and _reads_inbox(type(store)):
            # One call to the store, one round trip on a server: the results
            # committed and the next boundary's inbox read with them.
            at = time.monotonic()
            position, pending = await store.append_then_pending(  # type: ignore[attr-defined]
                self.id, entry, runtime.background.inbox, fence=fence
            )
            self._inbox_read = (position, at, pending, None)
        else:
            position = await store.append(self.id, entry, fence=fence)
        if position == entry.position:
            log.apply(entry, message)
            # The log is whole up to here: the store put this entry right
            # after the last one this journal knew.
            self._whole = (position, time.monotonic())
        else:
            # Someone else appended in between: read the gap (ours included).
            await self.sync()
        every = runtime.snapshot_every
        if fence is not None and every and log.snapshot_due(every):
            await self._snapshot(fence)
        return position

    def _fold(self, entries: list[Entry]) -> None:
        for entry in entries:
            try:
                self._log.apply(entry)
            except CorruptEntry as exc:
                raise CorruptEntry(f"session {self.id!r}: {exc}") from None

    async def _restore(self) -> bool:
        """Start the log from the session's snapshot and the entries after it;
        False (nothing done) when there is no usable snapshot."""
        runtime = self._runtime
        snapshots = runtime.snapshots
        if snapshots is None:
            return False
        rows = await snapshots.read(self.id)
        snapshot = read_snapshot(rows, session_id=self.id)
        self._unused_rows = bool(rows)
        if snapshot is None:
            return False
        # From the snapshot's last entry on: it proves the log is the one the
        # snapshot was made from.
        entries = await runtime.store.load(self.id, after=snapshot.position - 1)
        if not entries or not snapshot.matches(entries[0]):
            logger.warning(
                "session %s: snapshot at %d does not end at the log's entry there; "
                "replaying the log in full",
                self.id,
                snapshot.position,
            )
            return False
        try:
            snapshot.restore_into(self._log)
        except (KeyError, TypeError, ValueError, AttributeError, CorruptEntry):
            logger.warning("session %s: ignoring an unreadable snapshot", self.id)
            return False
        self._unused_rows = False
        self._fold(entries[1:])
        return True

    async def _snapshot(self, fence: Fence) -> None:
        """Write a snapshot row of the log as it is now (the lease holder only)."""
        snapshots = self._runtime.snapshots
        if snapshots is None:
            return
        log = self._log
        position, since = log.position, log.snapshot_at
        data = encode_snapshot(log, session_id=self.id)
        try:
            if since == 0 and self._unused_rows:
                # Rows this journal could not use may sit anywhere, even past
                # the log's end: the fresh chain replaces them all.
                await snapshots.delete(self.id)
            await snapshots.write(self.id, position, data, fence=fence)
            if since == 0:
                # A chain starting afresh: the rows before it are dead weight.
                await snapshots.prune(self.id, position)
            self._unused_rows = False
        except (StoreError, StaleLeaseError) as exc:
            # A cache: the log stays correct without it; the next one retries
            # (and a writer that lost the lease learns it at its next append).
            logger.warning("session %s: could not write a snapshot: %s", self.id, exc)
            return
        log.snapshotted(position)
