"""What one run tells the model about background work, and when.

A `RunNotices` belongs to one run: `round_start()` before each model request
(at the first boundary a line about what still runs; at every boundary the
completions not shown yet), `before_final()` when the model wants to end
(unseen completions, and one reminder per item this run started that still
runs). It never acknowledges: the caller acks a `Delivery` once the message
that carried it is persisted, so a crash between redelivers rather than loses.
"""

from __future__ import annotations

import logging
from builtins import list as _list
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..backends import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    NoticeInbox,
    NoticeStatus,
    SessionMeta,
)
from ..loop.ports import Delivery

if TYPE_CHECKING:
    from ..tools import Tool
    from ._service import BackgroundHost

logger = logging.getLogger("taskloom")

_PREFIX = "[background]"

_ENDED = {
    NoticeStatus.DONE: "finished",
    NoticeStatus.FAILED: "failed",
    NoticeStatus.TIMED_OUT: "timed out",
    NoticeStatus.STOPPED: "was stopped",
    NoticeStatus.ASKED: "needs an answer",
}


def _label(activity: BackgroundActivity) -> str:
    return f"{activity.kind} {activity.id} ({activity.description})"


def _completion(notice: BackgroundNotice) -> str:
    verb = _ENDED.get(notice.status, f"ended ({notice.status})")
    line = f"{_PREFIX} {notice.kind} {notice.activity_id} {verb}"
    if not notice.text:
        return line
    # Continuation lines are indented so a multi-line result cannot be read as
    # the start of another notice.
    return f"{line}: " + notice.text.replace("\n", "\n  ")


WAIT_TOOL = "background_wait"
STATUS_TOOL = "background_status"


def _reminder(activity: BackgroundActivity, tools: Collection[str]) -> str:
    # Only what this agent can do: suggesting a tool it lacks invites an
    # unknown-tool call, or a model that stalls waiting for nothing.
    can = []
    if WAIT_TOOL in tools:
        can.append(f"wait for it ({WAIT_TOOL})")
    if STATUS_TOOL in tools:
        can.append(f"check its status ({STATUS_TOOL})")
    head = f"{_PREFIX} {_label(activity)} is still running."
    if not can:
        return f"{head} Its result arrives as a notice in a later turn."
    return (
        f"{head} You may {' or '.join(can)} before you finish;"
        " otherwise its result arrives in a later turn."
    )


RunStartHook = Callable[["RunStart"], Awaitable[None]]
"""Awaited at the first round boundary of every run (`BackgroundService.on_run_start`)."""


@dataclass(slots=True)
class RunStart:
    """What a run-start hook (and a tool that `ResumesWork`) is told: the
    session, the run, the run's tools by name (`offered`) and the runtime."""

    session_id: str
    run_id: str
    offered: Mapping[str, Tool]
    runtime: BackgroundHost | None
    claimed: set[str] = field(default_factory=set)
    """What hooks took care of at this run start, by a name of their kind's
    (so several tools of one kind take their work up once)."""
    children: _list[SessionMeta] | None = field(default=None, repr=False)
    """The session's child sessions, once listed (`Follows.open_children`)."""


@runtime_checkable
class ResumesWork(Protocol):
    """A tool whose background work can outlive the process that started it and
    be taken up again from another: at the first round boundary of every run
    offering it, the run awaits `resume_work(start)`, which takes up its work
    in the session that no live process follows. It must be cheap when there
    is nothing to resume and return soon; what it raises is logged only.
    """

    async def resume_work(self, start: RunStart) -> None:
        """Take up again the session's work of this tool that nobody follows."""
        ...


class RunNotices:
    """Background notices for one run of `session`; reminders suggest
    `background_wait` or `background_status` only when `tools` (the run's
    tool names) have them. At the first boundary, before the inbox is read,
    `hooks` and the `offered` tools that `ResumesWork` are awaited with a
    `RunStart`: work they take up under this run is reminded of like work
    the run started. With nothing pending, `round_start` costs one
    `inbox.pending()` (and one `registry.list()` at the first boundary).
    """

    def __init__(
        self,
        registry: ActivityRegistry,
        inbox: NoticeInbox,
        session: str,
        tools: Collection[str] = (),
        *,
        hooks: Sequence[RunStartHook] = (),
        offered: Mapping[str, Tool] | None = None,
        runtime: BackgroundHost | None = None,
        run_id: str = "",
    ) -> None:
        self.registry = registry
        self._offered = offered if offered is not None else {}
        # Awaited at the first boundary: the service's hooks, then the tools'.
        self._hooks: _list[RunStartHook] = [
            *hooks,
            # getattr, not isinstance on the protocol: this runs for every run.
            *(r for t in self._offered.values() if (r := getattr(t, "resume_work", None))),
        ]
        self._runtime = runtime
        self._run_id = run_id
        self.inbox = inbox
        self.session = session
        # The names of the run's tools: reminders suggest only what they can do.
        self.tools = frozenset(tools)
        self._first_boundary = True
        # Notice ids the model has seen in this run, delivered or marked.
        self._seen: set[str] = set()
        # Ids marked seen by other means, not yet handed out by `take_seen`.
        self._marked: _list[str] = []
        # Activities this run started (dict: keeps start order) and reminded.
        self._started: dict[str, None] = {}
        self._reminded: set[str] = set()
        # Activities known to have ended: any notice about one proves it.
        self._ended: set[str] = set()

    def mark_started(self, activity_id: str) -> None:
        """Note that this run started the activity (so `before_final` reminds of it)."""
        self._started[activity_id] = None

    def mark_seen(self, *notice_ids: str) -> None:
        """Note notices the model saw another way (a tool result that waited):
        not delivered again; `take_seen` returns them for the caller to ack."""
        for notice_id in notice_ids:
            if notice_id not in self._seen:
                self._seen.add(notice_id)
                self._marked.append(notice_id)

    def take_seen(self) -> _list[str]:
        """The ids passed to `mark_seen` since the last call, in marking order."""
        taken, self._marked = self._marked, []
        return taken

    def may_remind(self) -> bool:
        """Whether `before_final` may remind of work this run started (it
        lists the registry then): some such work has not been reminded of."""
        return any(a not in self._reminded for a in self._started)

    async def round_start(
        self,
        pending: Sequence[BackgroundNotice] | None = None,
        running: Sequence[BackgroundActivity] | None = None,
    ) -> Delivery | None:
        """What to tell the model before this round's request, or None.

        `pending`: the inbox's pending notices as just read (with the append
        that ended the last round); None reads them now. `running`: the
        session's registered activities read in the same statement, which
        the first boundary uses instead of listing them; None lists them.
        At the first boundary with run-start hooks the inbox is read and
        the activities listed after them, always.
        """
        if self._first_boundary and self._hooks:
            pending = running = None
            # Before the inbox is read: a hook may finish work (push its notice).
            start = RunStart(self.session, self._run_id, self._offered, self._runtime)
            for hook in self._hooks:
                try:
                    await hook(start)
                except Exception:
                    # The run goes on: a later run takes the work up, or its
                    # registration simply lapses.
                    logger.warning(
                        "a run-start hook of session %s failed", self.session, exc_info=True
                    )
        unseen = await self._unseen(pending)
        head: _list[str] = []
        if self._first_boundary:
            # Read with the notices, when it was: one snapshot for both, as
            # when they are read one after the other with nothing between.
            listed = await self.registry.list(self.session) if running is None else running
            self._first_boundary = False
            running = [a for a in listed if a.id not in self._ended]
            if running:
                head.append(f"{_PREFIX} still running: " + "; ".join(map(_label, running)))
        return self._deliver(head, unseen)

    async def before_final(
        self, pending: Sequence[BackgroundNotice] | None = None
    ) -> Delivery | None:
        """What must reach the model before the run may complete, or None: unseen
        completions, then one reminder per item this run started that still runs.

        `pending`: the inbox's pending notices as just read (with the append
        of the final answer); None reads them now."""
        unseen = await self._unseen(pending)
        reminders: _list[str] = []
        if self.may_remind():
            live = {a.id: a for a in await self.registry.list(self.session)}
            for activity_id in self._started:
                activity = live.get(activity_id)
                if activity is None or activity_id in self._reminded or activity_id in self._ended:
                    continue
                self._reminded.add(activity_id)
                reminders.append(_reminder(activity, self.tools))
        # Completions first: they are news; reminders are about waiting.
        return self._deliver([], unseen, reminders)

    async def _unseen(
        self, read: Sequence[BackgroundNotice] | None = None
    ) -> _list[BackgroundNotice]:
        pending = await self.inbox.pending(self.session) if read is None else list(read)
        if not pending:
            return pending
        # Finish pushes before it unregisters, so an item can briefly be both
        # listed and finished; its notice settles it.
        self._ended.update(n.activity_id for n in pending)
        return [n for n in pending if n.id not in self._seen]

    def _deliver(
        self, head: _list[str], unseen: _list[BackgroundNotice], tail: _list[str] | None = None
    ) -> Delivery | None:
        lines = [*head, *(_completion(n) for n in unseen), *(tail or ())]
        if not lines:
            return None  # the usual boundary: nothing to say
        ids = tuple(n.id for n in unseen)
        self._seen.update(ids)
        return Delivery("\n".join(lines), ids)
