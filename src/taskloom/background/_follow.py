"""Work that answers later and lives elsewhere (an MCP task, an A2A task, a
background child, each kind a `Followed`), followed durably by one mechanism.

Its one durable record is a child session of its session: `SubagentLink` in
the parent's log (`mode` names the kind), `SubagentStartedEntry`, what the
kind needs after a crash (in the child's metadata, or a `SubagentDispatched`
entry once known), and one terminal `SubagentResult` once the result is in
the parent's inbox. The follower holds the child's lease, so one process
follows it at a time; the follow is background work of the parent's session
ended by one notice whose id derives from the child's, so the result lands
once. At the first round boundary of any run of the session, each child
without a terminal entry is followed again (`Follows.resume`), at once when
its holder is a dead process of this machine, else once its lease lapsed.
What a remote party can make a follower write is bounded (`MAX_QUESTIONS`,
`MAX_ENTRIES_PER_POLL`, `MAX_TEXT_BYTES`; past them, `FollowRefused`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .. import entries as log_entries
from .._ids import uuid4_hex
from .._redact import redact
from ..backends import (
    BackgroundNotice,
    Lease,
    NoticeStatus,
    SessionMeta,
    acquire_or_take_over,
    session_lease_key,
)
from ..entries import Entry, Payload
from ..errors import FollowRefused, SessionBusy, StaleLeaseError
from ._notices import RunStart
from ._service import BackgroundHost, BackgroundService, Detached, WorkFailed, WorkResult, redacted

if TYPE_CHECKING:
    from ..tools import ToolContext

logger = logging.getLogger("taskloom")

FOLLOW_LEASE = 30.0
"""Seconds a follower's hold on its child session lasts unrenewed (renewed
every third of it)."""

CHILDREN_LOOKED_AT = 1000
"""How many of a session's newest child sessions a run start looks at for
work to take up."""

MAX_QUESTIONS = 20
"""Questions one piece of followed work may ask a person in all; one more fails it."""

MAX_ENTRIES_PER_POLL = 8
"""Questions one answer of a remote party may carry; more fail the work."""

MAX_TEXT_BYTES = 64 * 1024
"""Bytes kept of one text a remote party gives (a status message, a question)."""


def bounded_text(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    """`text` cut to `limit` bytes of UTF-8 (the cut said at its end)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    kept = data[:limit].decode(errors="ignore")
    return f"{kept}\n[... cut: {len(data) - limit} more bytes]"


class Followed(Protocol):
    """The kind-specific part of following one piece of work: how it is
    followed to its end, and cancelled."""

    async def follow(self, job: FollowJob) -> WorkResult | BackgroundNotice:
        """Follow the work to its end; its result (text, or `(status, text)`),
        or the whole notice when the work wrote its own terminal entry.
        `job.record` is None for work this call starts, else what an earlier
        follower kept. Cancelled: cancel the work over there (unless
        `job.detaching`). `Detached` for work that ends nothing yet. The
        follower's `secrets` attribute is redacted from its result."""
        ...

    async def cancel(self, record: Mapping[str, Any]) -> None:
        """Cancel, from its record, work nobody follows here (a session delete)."""
        ...


MakeFollowed = Callable[[SessionMeta, "Mapping[str, Any] | None"], "Followed | None"]
"""The follower of a child session of one kind, from its metadata and record
(None: this runtime cannot follow it, e.g. a server it does not know)."""


class FollowJob:
    """What a `Followed` is given: the work's child session, its record so
    far, and how to write to its log under the follower's hold."""

    def __init__(
        self,
        follows: Follows,
        session_id: str,
        child_id: str,
        lease: Lease,
        record: Mapping[str, Any] | None = None,
    ) -> None:
        self.runtime = follows.runtime
        self.session_id = session_id
        self.child_id = child_id
        self.record = record
        self._follows = follows
        self.lease: Lease | None = lease
        self.why = ""
        """Why the follow was stopped, when it was (`Follows.stop`)."""

    @property
    def detaching(self) -> bool:
        """Whether the runtime's close cuts the follow off (the work goes on
        over there and the next run takes it up), rather than a stop."""
        return self._follows.closing

    async def keep(self, record: Mapping[str, Any]) -> None:
        """Keep what a later follower needs to go on (`SubagentDispatched`)."""
        self.record = dict(record)
        await self.append(log_entries.SubagentDispatched(dict(record)))

    async def append(self, payload: Payload) -> None:
        """Write to the child's log under this follower's hold; nothing once
        the hold is lost."""
        if self.lease is None:
            return
        try:
            await self.runtime.store.append(
                self.child_id, Entry.of(payload), fence=self.lease.fence
            )
        except StaleLeaseError:
            self.lease = None

    async def keep_lease(self) -> None:
        """Renew the hold every third of `FOLLOW_LEASE` until it is lost (the
        follow goes on, writing nothing more: its result is the same)."""
        leases = self.runtime.store.leases
        while self.lease is not None:
            await asyncio.sleep(FOLLOW_LEASE / 3)
            try:
                renewed = await leases.renew(self.lease, FOLLOW_LEASE)
            except Exception:
                continue  # the lease covers two misses; the next beat tries again
            if renewed is None:
                logger.warning("the follow of %s was taken over", self.child_id)
                self.lease = None
                return
            self.lease = renewed

    async def release(self) -> None:
        """Give the hold up (harmless if it fails: the lease lapses on its own)."""
        lease, self.lease = self.lease, None
        if lease is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self.runtime.store.leases.release(lease)


class Follows:
    """The followed work of one runtime (`Follows.of(runtime)`; see the module
    docstring)."""

    def __init__(self, runtime: BackgroundHost) -> None:
        self.runtime = runtime
        self.service = BackgroundService.of(runtime)
        self.closing = False
        self._here: dict[tuple[str, str], FollowJob] = {}
        self._makers: dict[str, dict[str, MakeFollowed]] = {}
        self._stopping: set[asyncio.Future[bool]] = set()
        # Child sessions seen ended: a terminal entry is for good.
        self._ended: set[str] = set()
        self.service.listeners.on_delete(self._on_delete)

    @classmethod
    def of(cls, runtime: BackgroundHost) -> Follows:
        """The runtime's one (made on first use)."""
        return runtime.service(cls, cls)

    def register(self, mode: str, key: str, make: MakeFollowed) -> None:
        """Have `make` build followers of `mode`'s children (for a session
        delete to cancel them); `key` names the maker (one per key)."""
        self._makers.setdefault(mode, {})[key] = make

    async def begin(
        self,
        ctx: ToolContext,
        followed: Followed,
        *,
        mode: str,
        kind: str = "",
        name: str,
        task: str,
        record: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        child_id: str | None = None,
    ) -> str:
        """Start following new work of the calling tool's session, `task` for
        `name`: its child session (`record` in its metadata) and link written,
        its lease taken, `followed` run in the background as an activity of
        `kind` (default `mode`). Returns the child's id, the activity's.
        Stopping the run that started it stops the follow."""
        runtime = self.runtime
        child_id = child_id or uuid4_hex()
        started_at = time.time()
        meta = {
            "name": name,
            "role": mode,
            "mode": mode,
            "task": _summary(task, 500),
            "parent_call_id": ctx.call_id,
            "started_at": started_at,
            **(metadata or {}),
        }
        if record is not None:
            meta["record"] = dict(record)
        await runtime.store.create(SessionMeta(child_id, name, ctx.session_id, started_at, meta))
        link = log_entries.SubagentLink(
            child_id,
            name,
            mode,
            name,
            task,
            mode,
            ctx.call_id,
            {
                "kind": "delegation",
                "agent_id": child_id,
                "role": mode,
                "status": "running",
                "task_summary": _summary(task),
            },
            {"parent": ctx.session_id, "child": child_id},
        )
        await ctx.record(Entry.of(link, ctx.run_id))
        # A child no one knew a moment ago: its lease is free.
        lease = await acquire_or_take_over(
            runtime.store.leases, session_lease_key(child_id), FOLLOW_LEASE
        )
        if lease is None:
            raise SessionBusy(child_id)
        job = FollowJob(self, ctx.session_id, child_id, lease, record)
        try:
            await job.append(log_entries.SubagentStartedEntry(name))
            description = _described(name, task)
            await self._spawn(job, followed, kind or mode, description, ctx.run_id, dict(meta))
        except BaseException:
            await job.release()
            raise
        key = (ctx.session_id, child_id)

        def stop_it() -> None:
            if key in self._here:
                stopping = asyncio.ensure_future(
                    self.stop(*key, "the run that started it was stopped")
                )
                self._stopping.add(stopping)
                stopping.add_done_callback(self._stopping.discard)

        undo = ctx.stop.on_set(stop_it)
        task_of = self.service.task_for(*key)
        if task_of is None:
            undo()
        else:
            task_of.add_done_callback(lambda _: undo())
        return child_id

    async def resume(
        self,
        start: RunStart,
        mode: str,
        make: MakeFollowed,
        *,
        kind: str = "",
        when: Callable[[list[Entry]], bool] | None = None,
        remind: bool = True,
    ) -> None:
        """Follow again, under the run of `start`, the session's children of
        `mode` without a terminal entry that no live process follows (the
        take-over rule), as activities of `kind` (default `mode`). `make`
        builds their followers (None: left alone), and `when` may refuse a
        child by its log. With `remind`, the run of `start` is reminded of
        the work before it ends; else the result reaches a later run."""
        if self.closing:
            return
        session_id, runtime = start.session_id, self.runtime
        for meta, entries in await self.open_children(start, (mode,)):
            if when is not None and not when(entries):
                continue
            followed = make(meta, _record(meta, entries))
            if followed is None or (session_id, meta.id) in self._here:
                continue
            leases = runtime.store.leases
            lease = await acquire_or_take_over(leases, session_lease_key(meta.id), FOLLOW_LEASE)
            if lease is None:
                continue  # a live process follows it
            job = FollowJob(self, session_id, meta.id, lease)
            try:
                # Read again under the hold: the follower before may have
                # ended it just before it let go.
                entries = await runtime.store.load(meta.id)
                if _ended(entries) or (when is not None and not when(entries)):
                    await job.release()
                    continue
                record = _record(meta, entries)
                logger.info("following %s work %s of session %s again", mode, meta.id, session_id)
                job.record = record or {}
                await self._spawn(
                    job,
                    followed,
                    kind or mode,
                    _described(meta.agent, str(meta.metadata.get("task", ""))),
                    start.run_id if remind else None,
                    dict(meta.metadata),
                )
            except BaseException:
                await job.release()
                raise

    async def open_children(
        self, start: RunStart, modes: Collection[str]
    ) -> list[tuple[SessionMeta, list[Entry]]]:
        """The session's child sessions of `modes` without a terminal entry,
        with their logs (listed once per run start)."""
        store = self.runtime.store
        if start.children is None:
            start.children = await store.list(parent_id=start.session_id, limit=CHILDREN_LOOKED_AT)
        found: list[tuple[SessionMeta, list[Entry]]] = []
        for meta in start.children:
            if meta.metadata.get("mode") not in modes or meta.id in self._ended:
                continue
            entries = await store.load(meta.id)
            if _ended(entries):
                self._ended.add(meta.id)
            else:
                found.append((meta, entries))
        return found

    async def _spawn(
        self,
        job: FollowJob,
        followed: Followed,
        kind: str,
        description: str,
        run_id: str | None,
        metadata: dict[str, Any],
    ) -> None:
        key = (job.session_id, job.child_id)
        self._here[key] = job
        try:
            await self.service.spawn(
                job.session_id,
                kind,
                description,
                functools.partial(self._run, job, followed),
                run_id=run_id,
                activity_id=job.child_id,
                metadata=metadata,
            )
        except BaseException:
            self._here.pop(key, None)
            raise

    async def _run(self, job: FollowJob, followed: Followed) -> WorkResult:
        """The work: follow to the end, deliver, then write the terminal entry."""
        keeper = asyncio.get_running_loop().create_task(job.keep_lease())
        secrets: tuple[str, ...] = getattr(followed, "secrets", ())
        try:
            try:
                result = await followed.follow(job)
            except FollowRefused as exc:
                result = NoticeStatus.FAILED, str(exc)
            except (Detached, WorkFailed):
                raise
            except Exception as exc:
                # Ended as any failed work is (a notice, no terminal entry: the
                # next run follows it again), but in words with the work's
                # credentials redacted: a remote error may quote them.
                text = redact(f"{type(exc).__name__}: {exc}", secrets)
                logger.warning("followed work %s failed: %s", job.child_id, text)
                raise WorkFailed(text) from None
            except asyncio.CancelledError:
                if (current := asyncio.current_task()) is not None:
                    current.uncancel()
                if self.closing:
                    # Cut off by the runtime's close: the work goes on over
                    # there, and the next run of the session takes it up.
                    raise Detached() from None
                # Stopped (the run that started it, a delete): the kind
                # cancelled it over there on the way out; say so.
                why = f" ({job.why})" if job.why else ""
                result = NoticeStatus.STOPPED, f"stopped before it finished{why}; it was cancelled"
            if not isinstance(result, BackgroundNotice):
                result = redacted(result, secrets)
            # Into the parent's inbox first, then the terminal entry: a crash
            # in between leaves work someone follows again, whose result
            # (same notice id) lands once.
            try:
                await self.service.deliver(job.session_id, job.child_id, result)
            except Exception:
                logger.warning("delivering followed work %s failed", job.child_id, exc_info=True)
                return _result(result)
            if isinstance(result, BackgroundNotice):
                # The child's own run wrote its terminal entry.
                return _result(result)
            status, text = result if isinstance(result, tuple) else (NoticeStatus.DONE, result)
            if status == NoticeStatus.DONE:
                await job.append(log_entries.SubagentResult("done", text))
            else:
                stopped = status == NoticeStatus.STOPPED
                await job.append(
                    log_entries.SubagentResult("stopped" if stopped else "failed", None, text)
                )
            job.lease = None  # ended for good: its lease guards nothing more, and lapses
            return result
        finally:
            keeper.cancel()
            self._here.pop((job.session_id, job.child_id), None)
            await job.release()

    async def stop(self, session_id: str, child_id: str, why: str) -> bool:
        """Stop following work followed here, cancelling it over there; its
        notice says `why`. False if it is not followed here."""
        job = self._here.get((session_id, child_id))
        if job is None:
            return False
        job.why = job.why or why
        return await self.service.stop(session_id, child_id)

    async def _on_delete(self, session_id: str) -> None:
        # Work of a session being deleted is cancelled over there: followed
        # here, by stopping its follow; else from its record.
        for meta in await self.runtime.store.list(parent_id=session_id):
            makers = self._makers.get(str(meta.metadata.get("mode", "")))
            if not makers:
                continue
            if await self.stop(session_id, meta.id, "its session was deleted"):
                continue
            entries = await self.runtime.store.load(meta.id)
            record = _record(meta, entries)
            if _ended(entries) or not record:
                continue
            for make in list(makers.values()):
                followed = make(meta, record)
                if followed is not None:
                    with contextlib.suppress(Exception):
                        await followed.cancel(record)
                    break

    async def close(self) -> None:
        """Stop following here: the work goes on over there, and the next run
        of its session takes it up."""
        self.closing = True
        tasks = [t for key in list(self._here) if (t := self.service.task_for(*key)) is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


def _result(result: WorkResult | BackgroundNotice) -> WorkResult:
    if isinstance(result, BackgroundNotice):
        return result.status, result.text
    return result


def _ended(entries: list[Entry]) -> bool:
    return any(entry.kind == log_entries.SubagentResult.KIND for entry in entries)


def _record(meta: SessionMeta, entries: list[Entry]) -> dict[str, Any] | None:
    """What the last follower kept of the work (None: nothing yet)."""
    kept = meta.metadata.get("record")
    found: dict[str, Any] | None = dict(kept) if isinstance(kept, Mapping) else None
    for entry in entries:
        if isinstance(entry.payload, log_entries.SubagentDispatched):
            found = dict(entry.payload.spec)
    return found


def _described(name: str, task: str) -> str:
    return f"{name}: {_summary(task, 80)}"


def _summary(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
