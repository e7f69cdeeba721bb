"""Remote A2A tasks followed in the background of a parent's session.

Each background call is a child session of the parent in the parent's
store (mode `remote`, linked from the parent's log like a background
child), kept only for what must outlive a process:

- `SubagentStartedEntry` when a follower starts;
- `SubagentDispatched` with the remote task's id (and context id), written
  as soon as the remote server gives it, before anything else happens;
- `SubagentResult`, the one terminal entry, written after the result is in
  the parent's inbox.

Whoever follows the task holds the child session's lease (as a child's
runner does), so the child reads `running` to the console tools while it
is followed and one process follows it at a time. The follow itself is
background work of the parent's session (`BackgroundService`): registered,
reminded of, and ended by a notice whose id is the child's, so however many
followers a crash leads to, the result lands once. A follower that finds the
result already delivered (by a process that died before writing the
terminal entry) delivers nothing new.

What is resumed, and when: at the first round boundary of every run of the
parent whose tools include the background `RemoteAgent` (same name, same
URL), each such child without a terminal entry whose lease no live process
holds is followed again from its task id (`ResumesWork`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends import Lease, holder_is_gone, holder_name
from ..background import BackgroundService, NoticeStatus, WorkResult
from ..entries import (
    Entry,
    Payload,
    SubagentDispatched,
    SubagentLink,
    SubagentResult,
    SubagentStartedEntry,
)
from ..errors import StaleLeaseError
from ..runtime import Runtime, session_lease_key
from ..stores import SessionMeta
from ..tools import ToolOutput
from ._remote import Outcome, RemoteAgent, Unreachable, Watch, cancel_task

if TYPE_CHECKING:
    from ..tools import ToolContext

__all__ = ["KIND", "resume_following", "start_following"]

logger = logging.getLogger("taskloom")

KIND = "remote_agent"
"""The activity kind of a remote task followed in the background."""

MODE = "remote"
"""The `mode` of a remote task's child session (its metadata and its link)."""

LEASE = 30.0
"""Seconds a follower's hold on a child lasts without renewal (renewed every
third of it); a dead holder on this machine is taken over at once."""

_deletes_watched: weakref.WeakKeyDictionary[BackgroundService, set[str]] = (
    weakref.WeakKeyDictionary()
)
"""Per background service: the URLs of the remote agents whose delete hook
it has (one hook per agent, per runtime)."""


async def start_following(
    remote: RemoteAgent, runtime: Runtime, ctx: ToolContext, task: str, task_id: str
) -> ToolOutput:
    """Hand `task` to the remote agent in the background of the caller's
    session on `runtime` (or answer the question of `task_id`); a receipt at once."""
    service = runtime.background
    _watch_deletes(remote, runtime)
    child_id = uuid.uuid4().hex
    started_at = time.time()
    await runtime.store.create(
        SessionMeta(
            child_id,
            remote.name,
            ctx.session_id,
            started_at,
            {
                "name": remote.name,
                "role": "remote",
                "mode": MODE,
                "task": _summary(task, 500),
                "parent_call_id": ctx.call_id,
                "url": remote.url,
                "started_at": started_at,
            },
        )
    )
    link = SubagentLink(
        child_id,
        remote.name,
        "remote",
        remote.name,
        task,
        MODE,
        ctx.call_id,
        {
            "kind": "delegation",
            "agent_id": child_id,
            "role": "remote",
            "status": "running",
            "task_summary": _summary(task),
        },
        {"parent": ctx.session_id, "child": child_id},
    )
    await ctx.record(Entry.of(link, ctx.run_id))
    # A child no one knew a moment ago: its lease is free.
    lease = await runtime.store.leases.acquire(session_lease_key(child_id), holder_name(), LEASE)
    if lease is None:
        return remote.error(f"the new child session {child_id} is held by another process")
    follower = _Follower(remote, runtime, ctx.session_id, child_id, lease, started_at)

    async def work() -> WorkResult:
        return await follower.run(task=task, task_id=task_id)

    try:
        await service.start(
            ctx,
            KIND,
            f"{remote.name}: {_summary(task, 80)}",
            work,
            activity_id=child_id,
            metadata={"name": remote.name, "url": remote.url},
        )
    except BaseException:
        await _release(runtime, lease)
        raise
    # Stopping the run that started it stops the follow, which cancels the
    # remote task; a run that ends otherwise leaves it running.
    follower.until_done(ctx.stop.on_set(follower.stop_soon))
    receipt = {
        "id": child_id,
        "name": remote.name,
        "status": "started",
        "note": "The remote agent works in the background; its answer arrives as a"
        " notice at a later round.",
    }
    return ToolOutput(json.dumps(receipt))


async def resume_following(
    remote: RemoteAgent, runtime: Runtime, session_id: str, run_id: str
) -> None:
    """Follow again, under run `run_id`, the session's remote tasks of this
    agent that have no result yet and that no live process follows."""
    service = BackgroundService.of(runtime)
    _watch_deletes(remote, runtime)
    for meta in await _open_children(remote, runtime, session_id):
        if service.task_for(session_id, meta.id) is not None:
            continue  # followed here already
        if _ended(await runtime.store.load(meta.id)):
            continue
        lease = await _take(runtime, meta.id)
        if lease is None:
            continue  # a live process follows it
        try:
            # Read again under the hold: the follower before may have ended
            # it just before it let go.
            entries = await runtime.store.load(meta.id)
            if _ended(entries):
                await _release(runtime, lease)
                continue
            record = _record(entries)
            started_at = float(meta.metadata.get("started_at") or meta.created_at)
            follower = _Follower(remote, runtime, session_id, meta.id, lease, started_at)

            async def work(follower: _Follower = follower, record: Any = record) -> WorkResult:
                return await follower.run(record=record or {})

            logger.info(
                "following remote task %s of session %s again (child %s)",
                (record or {}).get("task_id", "?"),
                session_id,
                meta.id,
            )
            await service.spawn(
                session_id,
                KIND,
                f"{remote.name}: {_summary(str(meta.metadata.get('task', '')), 80)}",
                work,
                run_id=run_id,
                activity_id=meta.id,
                metadata={"name": remote.name, "url": remote.url},
            )
        except BaseException:
            await _release(runtime, lease)
            raise


class _Follower:
    """Follows one remote task to its end, for one background activity."""

    def __init__(
        self,
        remote: RemoteAgent,
        runtime: Runtime,
        session_id: str,
        child_id: str,
        lease: Lease,
        started_at: float,
    ) -> None:
        self.remote = remote
        self.runtime = runtime
        self.service = BackgroundService.of(runtime)
        self.session_id = session_id
        self.child_id = child_id
        self.lease: Lease | None = lease
        self.started_at = started_at
        self._undo: list[Callable[[], None]] = []
        self._stopping: asyncio.Future[bool] | None = None

    def until_done(self, undo: Callable[[], None]) -> None:
        """Call `undo()` when the follow ends."""
        self._undo.append(undo)

    def stop_soon(self) -> None:
        """Stop the follow (and so cancel the remote task), from a callback."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(
                self.service.stop(self.session_id, self.child_id)
            )

    async def run(
        self, *, task: str = "", task_id: str = "", record: dict[str, Any] | None = None
    ) -> WorkResult:
        """The work: follow to the end, deliver, then mark the child ended.

        `record` resumes a follow from what a follower before kept ({} when
        it kept no task id: then there is nothing to follow).
        """
        keeper = asyncio.get_running_loop().create_task(self._keep_lease())
        try:
            watch = Watch(self.remote.name, self.service.emit, "", self.session_id)
            try:
                if record is None:
                    await self._append(SubagentStartedEntry(self.remote.name))
                outcome = await self._follow(watch, task, task_id, record)
            except asyncio.CancelledError:
                # Stopped: by the run that started it, a delete or the runtime's
                # close. The remote task was cancelled on the way out; what is
                # left is to say so, which needs this task un-cancelled.
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                outcome = Outcome(
                    "stopped",
                    "stopped before it finished; the remote task was cancelled",
                    watch.task_id,
                )
            watch.finish(outcome)
            result = self._result(outcome)
            # Into the parent's inbox first, then the terminal entry: a crash
            # in between leaves a child someone follows again, whose result
            # (same notice id) lands once.
            try:
                await self.service.deliver(self.session_id, self.child_id, result)
            except Exception:
                # The service pushes the same notice again once this returns;
                # without the terminal entry, a crash before that follows again.
                logger.warning(
                    "delivering remote task follow %s failed", self.child_id, exc_info=True
                )
                return result
            await self._append(_terminal(outcome))
            return result
        finally:
            keeper.cancel()
            for undo in self._undo:
                undo()
            if self.lease is not None:
                await _release(self.runtime, self.lease)

    async def _follow(
        self, watch: Watch, task: str, task_id: str, record: dict[str, Any] | None
    ) -> Outcome:
        left = self.started_at + self.remote.timeout - time.time()
        if record is not None and not record.get("task_id"):
            return Outcome(
                "failed",
                "the call was cut off before the remote agent gave its task an id;"
                " whether the task started there is unknown",
            )
        try:
            async with self.remote.client(patient=record is not None) as client:
                if record is not None:
                    return await self.remote.exchange(
                        client, watch, left, follow=str(record["task_id"])
                    )
                return await self.remote.exchange(
                    client, watch, left, task, task_id, record=self._keep_task_id
                )
        except Unreachable as exc:
            return Outcome("failed", str(exc), watch.task_id)

    async def _keep_task_id(self, task_id: str, context_id: str) -> None:
        await self._append(
            SubagentDispatched(
                {"task_id": task_id, "context_id": context_id, "url": self.remote.url}
            )
        )

    def _result(self, outcome: Outcome) -> WorkResult:
        name, task_id = self.remote.name, outcome.task_id
        if outcome.kind == "answer":
            return NoticeStatus.DONE, (
                f"remote agent {name!r} (task {task_id}) answered:\n{outcome.text}"
            )
        if outcome.kind == "question":
            return NoticeStatus.DONE, (
                f"remote agent {name!r} asks for input (task_id {task_id}): {outcome.text}\n"
                f"To answer, call {name} again with task_id {json.dumps(task_id)}"
                " and your answer as task; the same task then goes on."
            )
        status = NoticeStatus.STOPPED if outcome.kind == "stopped" else NoticeStatus.FAILED
        return status, f"{self.remote.describe()}: {outcome.text}"

    async def _append(self, payload: Payload) -> None:
        """Write to the child's log under our hold; nothing once it is lost
        (the process that took the child over writes its own)."""
        if self.lease is None:
            return
        try:
            await self.runtime.store.append(
                self.child_id, Entry.of(payload), fence=self.lease.fence
            )
        except StaleLeaseError:
            self.lease = None

    async def _keep_lease(self) -> None:
        leases = self.runtime.store.leases
        while self.lease is not None:
            await asyncio.sleep(LEASE / 3)
            try:
                renewed = await leases.renew(self.lease, LEASE)
            except Exception:
                continue  # the lease covers two misses; the next beat tries again
            if renewed is None:
                # Taken over (we stalled past the lease): the follow goes on,
                # since its result is the same whoever delivers it first.
                logger.warning("remote task follow %s was taken over", self.child_id)
                self.lease = None
                return
            self.lease = renewed


def _terminal(outcome: Outcome) -> SubagentResult:
    status = "done" if outcome.kind in ("answer", "question") else outcome.kind
    if outcome.kind == "answer":
        return SubagentResult(status, outcome.text)
    if outcome.kind == "question":
        return SubagentResult(status, {"question": outcome.text, "task_id": outcome.task_id})
    return SubagentResult(status, None, outcome.text)


async def _open_children(
    remote: RemoteAgent, runtime: Runtime, session_id: str
) -> list[SessionMeta]:
    """The session's child sessions of this remote agent's background calls."""
    return [
        meta
        for meta in await runtime.store.list(parent_id=session_id)
        if meta.metadata.get("mode") == MODE
        and meta.metadata.get("name") == remote.name
        and meta.metadata.get("url") == remote.url
    ]


def _ended(entries: list[Entry]) -> bool:
    return any(entry.kind == SubagentResult.KIND for entry in entries)


def _record(entries: list[Entry]) -> dict[str, Any] | None:
    """What the last follower kept of the remote task (None: nothing yet)."""
    found: dict[str, Any] | None = None
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, SubagentDispatched):
            found = dict(payload.spec)
    return found


async def _take(runtime: Runtime, child_id: str) -> Lease | None:
    """The child's lease if no live process holds it (a dead holder on this
    machine is taken over at once); None otherwise."""
    leases = runtime.store.leases
    key, me = session_lease_key(child_id), holder_name()
    lease = await leases.acquire(key, me, LEASE)
    if lease is not None:
        return lease
    current = await leases.current(key)
    if current is not None and holder_is_gone(current.holder):
        return await leases.take_over(current, me, LEASE)
    return None


async def _release(runtime: Runtime, lease: Lease) -> None:
    # Harmless if it fails: the lease lapses on its own.
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            await runtime.store.leases.release(lease)


def _watch_deletes(remote: RemoteAgent, runtime: Runtime) -> None:
    """Have deleting a session cancel this agent's remote tasks in it (once per runtime)."""
    service = BackgroundService.of(runtime)
    watched = _deletes_watched.setdefault(service, set())
    key = f"{remote.name} {remote.url}"
    if key in watched:
        return
    watched.add(key)

    async def cancel_remote_tasks(session_id: str) -> None:
        # A cancelled remote task cannot be reopened: a refused delete leaves
        # it cancelled, and its notice says so.
        for meta in await _open_children(remote, runtime, session_id):
            # Followed here: stopping the follow cancels the remote task.
            if await service.stop(session_id, meta.id):
                continue
            # Followed elsewhere, or by no one since a crash: cancel it from here.
            entries = await runtime.store.load(meta.id)
            record = _record(entries)
            if _ended(entries) or not record or not record.get("task_id"):
                continue
            with contextlib.suppress(Unreachable):
                async with remote.client() as client:
                    await cancel_task(client, str(record["task_id"]))

    service.listeners.on_delete(cancel_remote_tasks)


def _summary(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
