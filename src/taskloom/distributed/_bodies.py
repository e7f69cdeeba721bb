"""What a worker does with each kind of job (`JobBodies`).

A `taskloom.run` job brings its session up to date from the log alone: a
parked turn all decided is resumed; waiting steering, a run cut off, or a
job asking for a run anyway (`RunDemand.ALWAYS`) runs the session; waiting
deferred items and notices wake it, at most `Runtime.max_wakeups` runs in a
row; else there is nothing to do. So jobs of one session may be queued,
redelivered or coalesced: each does what the log still needs, no more.

A job opens what is recent. A worker keeps the last `SESSIONS_KEPT`
sessions it ran folded, so a session's next job there reads only the
entries written since (by anyone: the log is the truth, the kept fold a
cache of it). A session's first job in a worker opens it from its latest
snapshot and the entries after it; the runs write a snapshot every
`Runtime.snapshot_every` entries (500 by default), so that tail stays short
whoever ran the session before. What no snapshot saves is decoding the
messages a model request sends, the whole transcript unless compacted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from .._run_controls import StopSignal
from ..background import BackgroundService
from ..delegation import ChildSpec, ChildWorker
from ..entries import Entry, MessageEntry, RunFinishedEntry, RunStartedEntry, Steer
from ..errors import ConfigurationError, SessionBusy, StaleLeaseError
from ..results import RunStatus
from ..runtime import RunDemand, Runtime, Session
from ._engine import Busy, Drained, JobEngine, JobRef, Lost, Malformed, options_from_json

DRAIN_REASON = "the worker is shutting down"


def job_field(args: dict[str, Any], name: str, kind: type, job: str) -> Any:
    """`args[name]` if it is a `kind` (a bool is no int), else `Malformed`."""
    value = args.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise Malformed(
            f"malformed {job} job: {name!r} must be a {kind.__name__}, got {value!r}"[:300]
        )
    return value


def wakeups_in_a_row(entries: Iterable[Entry]) -> int:
    """Runs started since the last user turn (input given to a run, or steering
    folded in), counted over a session's whole log."""
    steers: set[int] = set()
    count = 0
    for entry in entries:
        payload = entry.payload
        if isinstance(payload, Steer):
            steers.add(entry.position)
        elif isinstance(payload, MessageEntry) and payload.message.role == "user":
            if not payload.folds or steers.intersection(payload.folds):
                count = 0
        elif isinstance(payload, RunStartedEntry) and not payload.resume:
            count += 1
    return count


def recent_wakeups(entries: Sequence[Entry], base: int, cap: int) -> int | None:
    """`wakeups_in_a_row` read back from the end of `entries` (a log's entries
    after position `base`), stopping at the last user turn or at `cap` runs;
    None when the entries held cannot tell (the turn, or a steer it folds,
    lies at or before `base`)."""
    steers = {e.position for e in entries if isinstance(e.payload, Steer)}
    count = 0
    for entry in reversed(entries):
        payload = entry.payload
        if isinstance(payload, MessageEntry) and payload.message.role == "user":
            if not payload.folds or steers.intersection(payload.folds):
                return count
            if min(payload.folds) <= base:
                return None
        elif isinstance(payload, RunStartedEntry) and not payload.resume:
            count += 1
            if count >= cap:
                return count
    return count if base == 0 else None


SESSIONS_KEPT = 32
"""Sessions a worker keeps folded between their jobs (least recently run out first)."""


E = TypeVar("E", bound=JobEngine)


class JobBodies(Generic[E]):
    """The job bodies of one worker process, running with its `runtime`, its
    jobs delivered by `engine` (procrastinate's or Temporal's: what differs
    between them is the `JobEngine` seam, the bodies are the same)."""

    def __init__(self, engine: E, runtime: Runtime) -> None:
        self.runtime = runtime
        self.engine = engine
        self.draining = False
        self._stops: set[StopSignal] = set()
        # Sessions as their last job here left them: the next job of one
        # folds only what was written since, where opening it afresh decodes
        # its whole history (the snapshot's messages included) once more.
        self._kept: OrderedDict[str, Session] = OrderedDict()

    def drain(self) -> None:
        """Stop every run in flight at its next boundary; their jobs go back in the queue."""
        self.draining = True
        for stop in list(self._stops):
            stop.set(DRAIN_REASON)

    @contextmanager
    def _running(self, stop: StopSignal) -> Iterator[None]:
        self._stops.add(stop)
        self.engine.watch(stop)
        if self.draining:
            stop.set(DRAIN_REASON)
        try:
            yield
        finally:
            self._stops.discard(stop)

    async def run_session(self, job: JobRef, args: dict[str, Any]) -> str:
        """Bring the session up to date (see the module docstring); what was done."""
        session_id = job_field(args, "session_id", str, "run")
        demand = RunDemand(job_field(args, "explicit", bool, "run"))
        try:
            options = options_from_json(args.get("options"))
        except ValueError as exc:
            raise Malformed(f"malformed run job: {exc}") from None
        rt = self.runtime
        meta = await rt.store.get(session_id)
        try:
            agent = rt.agent_named(meta.agent)
        except ConfigurationError as exc:
            # In the log, where whoever waits on the session looks; the job
            # fails for good: retrying on this worker would not cure it.
            failure = RunFinishedEntry(RunStatus.FAILED, f"ConfigurationError: {exc}")
            await rt.store.append(session_id, Entry.of(failure, f"job-{job.id}"))
            raise
        session = self._kept.pop(session_id, None)
        if session is None or session.agent is not agent:
            session = Session(rt, session_id, agent)
        stop = options.stop
        with self._running(stop):
            try:
                async with session.hold():
                    await session.journal.sync()
                    plan = await self._plan(session, job, demand)
                    if plan is None:
                        self._keep(session)
                        if session.journal.log.parked():
                            # Still waiting for decisions (plan: a turn all
                            # decided resumes).
                            return RunStatus.AWAITING_APPROVAL.value
                        return "nothing to do"
                    if self.draining:
                        raise Drained(f"session {session_id}: not started, the worker is stopping")
                    await self.engine.mark(job, session, drained=False)
                    raw_trace = args.get("traceparent")
                    with rt.observer.continue_trace(
                        raw_trace if isinstance(raw_trace, str) else None
                    ):
                        if plan == "resume":
                            result = await session.resume(options=options)
                        else:
                            result = await session.run(None, options=options)
                    if result.status is RunStatus.STOPPED and stop.reason == DRAIN_REASON:
                        await self.engine.mark(job, session, drained=True)
                        raise Drained(f"session {session_id}: stopped to shut down; queued again")
            except SessionBusy as exc:
                self._keep(session)
                raise Busy(str(exc), job.attempts) from None
            except StaleLeaseError as exc:
                raise Lost(f"session {session_id} was taken over: {exc}") from None
        self._keep(session)
        return result.status.value

    def _keep(self, session: Session) -> None:
        """Keep `session` for its next job here (a job that failed otherwise
        leaves nothing: the next one opens the session afresh)."""
        kept = self._kept
        kept[session.id] = session
        while len(kept) > SESSIONS_KEPT:
            kept.popitem(last=False)

    async def _plan(self, session: Session, job: JobRef, demand: RunDemand) -> str | None:
        log = session.journal.log
        parked = log.parked()
        if parked:
            waiting = [c for c in parked if log.request(c.id) and not log.decision(c.id)]
            return None if waiting else "resume"
        # A job's first attempt has no mark: marks are written by attempts
        # that started a run, and a job runs again only as a later attempt.
        mark = await self.engine.marked(job, session) if job.attempts else None
        if demand is RunDemand.ALWAYS and mark is None:
            return "run"
        if mark is not None and mark[1]:
            return "run"  # this job was drained mid-run: go on with it
        if any(isinstance(e.payload, Steer) for e in log.pending):
            return "run"
        if log.run_open or log.open_calls():
            return "run"
        waiting_news = bool(log.pending) or bool(
            await BackgroundService.of(self.runtime).inbox.pending(session.id)
        )
        # News alone (a notice, a deferred item) runs the session only where
        # the host asked for wake-ups: a redelivered job whose run already
        # ended must not become one.
        if waiting_news and self.runtime.wake_on_notice:
            cap = self.runtime.max_wakeups
            wakeups = recent_wakeups(log.entries, log.base, cap)
            if wakeups is None:
                # Restored from a snapshot past the last user turn: the
                # older entries are only in the store.
                wakeups = wakeups_in_a_row(await session.entries())
            if wakeups < cap:
                return "run"
        return None

    async def run_child(self, job: JobRef, args: dict[str, Any]) -> str:
        """Run a background child with the fenced `ChildWorker`; its status."""
        raw = job_field(args, "spec", dict, "child")
        try:
            spec = ChildSpec.from_dict(raw)
        except TypeError as exc:
            raise Malformed(f"malformed child job: {exc}") from None
        for name in ("child_session_id", "parent_session_id", "name", "task"):
            if not isinstance(getattr(spec, name), str):
                raise Malformed(f"malformed child job: spec.{name} must be a string")
        status = await ChildWorker(self.runtime, worker_id=f"job-{job.id}").run(spec)
        if status is None:
            raise Busy(f"child {spec.child_session_id} is held by another worker", job.attempts)
        if self.runtime.wake_on_notice:
            # Also after a redelivery, whose report (already pushed) wakes no one.
            await self.engine.wake(spec.parent_session_id)
        return status.value
