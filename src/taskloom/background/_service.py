"""The runtime's background service: registry, inbox, lifecycle, and the work it runs.

`start` runs work in a task under a lease: registered before it starts,
renewed while it runs, finished with a notice in the session's inbox, which
the session's runs deliver at their next round boundary (acknowledged once
the model's answer is persisted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from .._ids import uuid4_hex
from .._redact import redact
from ..backends import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    NoticeInbox,
    NoticeStatus,
    SessionStore,
    backend_of,
)
from ..backends.memory import MemoryActivityRegistry, MemoryNoticeInbox
from ..errors import BackgroundCapReached
from ._lifecycle import Lifecycle, Listeners
from ._notices import RunNotices, RunStartHook

if TYPE_CHECKING:
    from ..events import Event
    from ..tools import Tool, ToolContext

logger = logging.getLogger("taskloom")

T = TypeVar("T")

WorkResult = str | tuple[str, str]
"""What work returns: its text, or `(status, text)` with a `NoticeStatus`."""

Work = Callable[[], Awaitable[WorkResult]]


class Detached(Exception):
    """Raised by work that goes on elsewhere (the runtime closes while it
    follows remote work): its registration is dropped, no notice is written."""


class WorkFailed(Exception):
    """Raised by work that failed and said how: its notice's text is the message as
    is (no type name), and nothing more of it is logged."""


DecisionHook: TypeAlias = "Callable[[str, Mapping[str, Tool]], Awaitable[None]]"
"""Awaited with a session's id and the deciding session's tools once every
call of its parked turn is decided (`BackgroundService.on_decided`)."""


def redacted(result: WorkResult, secrets: tuple[str, ...]) -> WorkResult:
    """`result` with `secrets` (credentials the work sent) redacted from its text."""
    if not secrets:
        return result
    if isinstance(result, tuple):
        return result[0], redact(result[1], secrets)
    return redact(result, secrets)


def end_notice(activity: BackgroundActivity, status: str, text: str) -> BackgroundNotice:
    """The one notice that ends `activity` (its id is derived from the activity's)."""
    return BackgroundNotice(
        f"{activity.id}:end",
        activity.id,
        activity.kind,
        text,
        status,
        time.time(),
        {"description": activity.description},
    )


class BackgroundHost(Protocol):
    """What background work reaches of the runtime it serves (a `taskloom.Runtime`)."""

    @property
    def store(self) -> SessionStore: ...

    @property
    def background(self) -> BackgroundService: ...

    def service(self, kind: type[T], make: Callable[[BackgroundHost], T]) -> T: ...

    def on_notice(self, session_id: str) -> None: ...

    def watch(self, session_id: str, wake: Callable[[], None]) -> Callable[[], None]: ...


class BackgroundService:
    """Background work of one runtime (see the module docstring).

    `lease` is how long a registration lives without renewal; work renews
    it every `lease / 3` seconds while it runs.
    """

    def __init__(
        self,
        registry: ActivityRegistry,
        inbox: NoticeInbox,
        *,
        lease: float = 30.0,
        runtime: BackgroundHost | None = None,
    ) -> None:
        self.registry = registry
        self.inbox = inbox
        self.lease = lease
        self._runtime = runtime
        self.lifecycle = Lifecycle(registry, inbox, self._on_finished, lease=lease)
        self.listeners = Listeners(registry, inbox)
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._activities: dict[tuple[str, str], BackgroundActivity] = {}
        # Work whose notice `deliver` pushed (and whose registration it removed).
        self._delivered: set[tuple[str, str]] = set()
        self._runs: dict[str, RunNotices] = {}
        self._run_hooks: list[RunStartHook] = []
        self._decision_hooks: list[DecisionHook] = []
        # Work a hook leaves running (a background child taken up again).
        self._hooked: set[asyncio.Task[Any]] = set()
        self.closing = False
        self.emit: Callable[[Event], None] | None = None

    @classmethod
    def for_store(
        cls, store: object, *, runtime: BackgroundHost | None = None
    ) -> BackgroundService:
        """The service on the backend `store` belongs to (close it before the store),
        else a registry and inbox in process memory."""
        backend = backend_of(store)
        registry = backend.registry if backend is not None else None
        inbox = backend.inbox if backend is not None else None
        return cls(
            registry if registry is not None else MemoryActivityRegistry(),
            inbox if inbox is not None else MemoryNoticeInbox(),
            runtime=runtime,
        )

    def run_notices(
        self,
        session_id: str,
        run_id: str,
        tools: Collection[str] = (),
        *,
        offered: Mapping[str, Tool] | None = None,
    ) -> RunNotices:
        """Notice delivery for one run; reminders stay within `tools` (its tool names);
        `offered` tools that `ResumesWork` take their work up at its first boundary."""
        notices = RunNotices(
            self.registry,
            self.inbox,
            session_id,
            tools,
            hooks=self._run_hooks,
            offered=offered,
            runtime=self._runtime,
            run_id=run_id,
        )
        self._runs[run_id] = notices
        return notices

    def on_run_start(self, hook: RunStartHook) -> RunStartHook:
        """Await `hook(start)` (a `RunStart`) at the first round boundary of
        every run of this runtime, before the run reads its inbox: how work
        that outlives its process is taken up again. A hook must leave alone
        work a live holder runs and return soon (see `keep`); one that raises
        is logged and skipped. Returns the hook."""
        self._run_hooks.append(hook)
        return hook

    def keep(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run `work`, which outlives the call that started it, in a task `close` cancels."""
        task = asyncio.get_running_loop().create_task(work)
        self._hooked.add(task)
        task.add_done_callback(self._hooked.discard)
        return task

    def on_decided(self, hook: DecisionHook) -> DecisionHook:
        """Await `hook(session_id, offered)` each time every call of a session's
        parked turn is decided through this runtime (`decided`). Returns the hook."""
        self._decision_hooks.append(hook)
        return hook

    async def decided(self, session_id: str, offered: Mapping[str, Tool] | None = None) -> None:
        """Every call of the session's parked turn is now decided: every `on_decided`
        hook runs; the first that raised is raised after the last."""
        failed: BaseException | None = None
        for hook in list(self._decision_hooks):
            try:
                await hook(session_id, offered or {})
            except Exception as exc:
                logger.exception("a decision hook failed for session %s", session_id)
                failed = failed or exc
        if failed is not None:
            raise failed

    def notices_for(self, run_id: str) -> RunNotices | None:
        """The notices of a run in progress in this process (to `mark_seen` what a tool showed)."""
        return self._runs.get(run_id)

    def task_for(self, session_id: str, activity_id: str) -> asyncio.Task[None] | None:
        """The task running a piece of work in this process, if any."""
        return self._tasks.get((session_id, activity_id))

    def run_ended(self, run_id: str) -> None:
        """Forget a run's notices (called by the loop when the run ends)."""
        self._runs.pop(run_id, None)

    async def ack(self, session_id: str, ids: Sequence[str]) -> None:
        """Acknowledge notices the model has seen, once what carried them is persisted."""
        if ids:
            await self.inbox.ack(session_id, list(ids))

    @classmethod
    def of(cls, runtime: BackgroundHost) -> BackgroundService:
        """The background service of `runtime` (its `background`)."""
        return runtime.background

    async def start(
        self,
        ctx: ToolContext,
        kind: str,
        description: str,
        work: Work,
        *,
        lease: float | None = None,
        kind_cap: int | None = None,
        activity_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Run `work` in the background of the calling tool's session; the activity id,
        at once. Its result becomes a notice (the run is reminded of it before it
        ends). `BackgroundCapReached` when the kind is at its cap."""
        return await self.spawn(
            ctx.session_id,
            kind,
            description,
            work,
            run_id=ctx.run_id,
            lease=lease,
            kind_cap=kind_cap,
            activity_id=activity_id,
            metadata=metadata,
        )

    async def spawn(
        self,
        session_id: str,
        kind: str,
        description: str,
        work: Work,
        *,
        run_id: str | None = None,
        lease: float | None = None,
        kind_cap: int | None = None,
        activity_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """`start` without a tool context: for hosts and workers."""
        aid = activity_id or f"{kind}-{uuid4_hex()[:12]}"
        activity = BackgroundActivity(aid, kind, description, time.time(), run_id, metadata or {})
        term = lease if lease is not None else self.lease

        def launch() -> None:
            task = asyncio.get_running_loop().create_task(
                self._supervise(session_id, activity, work, term)
            )
            key = (session_id, aid)
            self._tasks[key] = task
            self._activities[key] = activity

            def forget(_: object) -> None:
                self._tasks.pop(key, None)
                self._activities.pop(key, None)
                self._delivered.discard(key)

            task.add_done_callback(forget)

        if not await self.lifecycle.begin(
            session_id, activity, launch, lease=term, kind_cap=kind_cap
        ):
            raise BackgroundCapReached(kind, kind_cap)
        if run_id is not None and run_id in self._runs:
            self._runs[run_id].mark_started(aid)
        return aid

    async def _supervise(
        self, session_id: str, activity: BackgroundActivity, work: Work, lease: float
    ) -> None:
        heartbeat = asyncio.get_running_loop().create_task(
            self._heartbeat(session_id, activity.id, lease)
        )
        status, text = NoticeStatus.DONE, ""
        try:
            out = await work()
            status, text = out if isinstance(out, tuple) else (NoticeStatus.DONE, out)
        except Detached:
            heartbeat.cancel()
            with contextlib.suppress(Exception):
                await self.lifecycle.discard(session_id, activity.id)
            return
        except asyncio.CancelledError:
            status, text = NoticeStatus.STOPPED, "stopped before it finished"
        except WorkFailed as exc:
            status, text = NoticeStatus.FAILED, str(exc)
        except Exception as exc:
            status, text = NoticeStatus.FAILED, f"{type(exc).__name__}: {exc}"
            logger.warning(
                "background %s %s of session %s failed",
                activity.kind,
                activity.id,
                session_id,
                exc_info=True,
            )
        finally:
            heartbeat.cancel()
        if (session_id, activity.id) in self._delivered:
            return  # its notice is in, and its registration gone (`deliver`)
        notice = end_notice(activity, status, text)
        # Retry a failing push a few times: until it succeeds the activity
        # stays registered (its lease lapses on its own if we give up).
        for attempt in range(5):
            try:
                await self.lifecycle.finish(session_id, notice)
                return
            except Exception:
                await asyncio.sleep(0.05 * 2**attempt)
        logger.error(
            "the end of background %s %s of session %s could not be recorded; "
            "its registration lapses with its lease",
            activity.kind,
            activity.id,
            session_id,
        )

    async def _heartbeat(self, session_id: str, activity_id: str, lease: float) -> None:
        while True:
            await asyncio.sleep(lease / 3)
            try:
                await self.lifecycle.alive(session_id, activity_id, lease=lease)
            except Exception:
                pass  # the next beat tries again; the lease covers two misses

    async def deliver(
        self, session_id: str, activity_id: str, result: WorkResult | BackgroundNotice
    ) -> bool:
        """Push the result of work running here now, before it returns (the notice it
        would write, or the one given: it lands once however often pushed). True
        if this push was the first; `KeyError` for work not run here."""
        key = (session_id, activity_id)
        if isinstance(result, BackgroundNotice):
            notice = result
        else:
            status, text = result if isinstance(result, tuple) else (NoticeStatus.DONE, result)
            notice = end_notice(self._activities[key], status, text)
        if key not in self._activities:
            raise KeyError(key)
        first = await self.lifecycle.finish(session_id, notice)
        self._delivered.add(key)
        return first

    async def stop(self, session_id: str, activity_id: str) -> bool:
        """Stop work this process runs; its notice says it was stopped. False if not ours."""
        key = (session_id, activity_id)
        task = self._tasks.get(key)
        if task is None:
            return False
        await self._cancel(key, task)
        return True

    async def _cancel(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        activity = self._activities.get(key)
        task.cancel()
        # Wait for the work to unwind. Only the task's own cancellation is
        # expected here; the caller's own cancellation still propagates.
        await asyncio.wait([task])
        if task.cancelled() and activity is not None:
            # Cancelled before its first step: `_supervise` never ran, so no
            # one else will write the notice that ends the activity.
            notice = end_notice(activity, NoticeStatus.STOPPED, "stopped before it started")
            try:
                await self.lifecycle.finish(key[0], notice)
            except Exception:
                pass  # its registration lapses with its lease

    def running_here(self, session_id: str) -> list[str]:
        """Ids of the session's work that runs in this process."""
        return [aid for (sid, aid) in self._tasks if sid == session_id]

    def running(self, session_id: str) -> list[asyncio.Task[None]]:
        """The tasks of the session's work that runs in this process."""
        return [task for (sid, _), task in self._tasks.items() if sid == session_id]

    async def forget(self, session_id: str) -> None:
        """Drop the session's activities and notices (its session is being deleted)."""
        await self.registry.clear(session_id)
        await self.inbox.clear(session_id)

    async def _on_finished(self, event: Event) -> None:
        if self.emit is not None:
            self.emit(event)
        if self._runtime is not None:
            self._runtime.on_notice(event.session_id)

    def kept(self) -> list[asyncio.Task[Any]]:
        """The tasks `keep` runs now (of every session of this runtime)."""
        return list(self._hooked)

    async def wait_kept(self) -> None:
        """Wait until the work `keep` started has ended."""
        while self._hooked:
            await asyncio.gather(*list(self._hooked), return_exceptions=True)

    async def close(self) -> None:
        """Stop all work this process runs and release the backends; `keep`'s work is
        cancelled with `closing` set, so background children are left, not ended."""
        self.closing = True
        for task in list(self._hooked):
            task.cancel()
        await asyncio.gather(*self._hooked, return_exceptions=True)
        await asyncio.gather(*(self._cancel(key, task) for key, task in list(self._tasks.items())))
        for backend in (self.registry, self.inbox):
            close = getattr(backend, "close", None)
            if close is not None:
                await close()
