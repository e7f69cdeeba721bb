"""What both engines share: how a job body ends, the seam each engine fills,
and the run options that cross a queue.

The procrastinate engine (`_queue`, `_jobs`, `_worker`) and the Temporal
engine (`_temporal*`) run the same `JobBodies`; this module, like
`_bodies`, imports neither engine's library, so that each engine's extra
is all it needs.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import UsageError
from ..loop import RunOptions
from ..loop.ports import RUN_BY
from ..models import RetryPolicy

if TYPE_CHECKING:
    from .._run_controls import StopSignal
    from ..runtime import Session

logger = logging.getLogger("taskloom.distributed")


class Busy(Exception):
    """Someone else holds the session: try again later (`attempt` sets the backoff)."""

    def __init__(self, message: str, attempt: int) -> None:
        super().__init__(message)
        self.attempt = attempt


class Drained(Exception):
    """The worker is shutting down: the run stopped at a boundary and goes back in the queue."""


class Lost(Exception):
    """Another writer took the session over while this worker ran it."""


class Malformed(Exception):
    """The job's payload is not one taskloom wrote: fail it, never retry."""


class JobRef(Protocol):
    """What a job body reads of its job, whichever engine delivered it: `id`
    names the job, `attempts` counts its attempts before this one,
    `worker_id` and `task_name` say who runs what (for logs and `RUN_BY`)."""

    @property
    def id(self) -> Any: ...

    @property
    def attempts(self) -> int: ...

    @property
    def worker_id(self) -> Any: ...

    @property
    def task_name(self) -> str: ...


Mark = tuple[int, bool]
"""Where a job's run started (a log position) and whether a drain cut it."""


class JobEngine(Protocol):
    """The seam between `JobBodies` and the engine that delivers its jobs.

    `marked`: the mark a previous attempt of `job` left (None: none), read
    only on a later attempt, with the session open and synced; the bodies
    need it only for a job asking for a run anyway (`RunDemand.ALWAYS`) or
    one a drain cut, and an engine may answer None for the others; `mark`: that
    `job`'s run starts now from the session's position, or that a drain cut
    it (`drained`), so a redelivery neither starts it again nor drops it;
    `watch`: a run of this process is about to start with `stop` (an engine
    that cancels runs from outside registers it); `wake`: wake a session
    (a child's parent, once the child reported)."""

    async def marked(self, job: Any, session: Session) -> Mark | None: ...

    async def mark(self, job: Any, session: Session, *, drained: bool) -> None: ...

    def watch(self, stop: StopSignal) -> None: ...

    async def wake(self, session_id: str) -> str: ...


async def logged(job: JobRef, body: Callable[[], Awaitable[str]]) -> str:
    """Run a job's body, whose runs record who ran them (the worker, its id in
    `taskloom queue status`, the job and the process); one log line for a job
    that did not simply succeed, saying why."""
    where = f"{socket.gethostname()}, pid {os.getpid()}"
    token = RUN_BY.set(f"worker {job.worker_id}, job {job.id} ({where})")
    try:
        return await body()
    except (Busy, Drained, Lost) as exc:
        logger.info("job %s (%s) goes back in the queue: %s", job.id, job.task_name, exc)
        raise
    except Exception as exc:
        logger.error("job %s (%s) failed: %s: %s", job.id, job.task_name, type(exc).__name__, exc)
        raise
    finally:
        RUN_BY.reset(token)


_LIMITS = ("max_rounds", "max_model_requests", "max_tool_calls", "token_budget")


def options_to_json(options: RunOptions | None) -> dict[str, Any] | None:
    """The limits of `options` as JSON; what cannot cross a queue is refused."""
    if options is None:
        return None
    if options.strategy is not None or options.is_child:
        raise UsageError(
            "a queued run takes limits only (rounds, requests, tool calls, tokens, deadline): "
            "a strategy or a parent run cannot cross to a worker"
        )
    if options.retry != RetryPolicy():
        raise UsageError("a queued run uses its worker's retry policy; leave RunOptions.retry")
    out: dict[str, Any] = {k: getattr(options, k) for k in _LIMITS}
    deadline = options.deadline
    out["deadline"] = deadline.isoformat() if isinstance(deadline, datetime) else deadline
    return out


def options_from_json(data: object) -> RunOptions:
    """The `RunOptions` `options_to_json` described (ValueError for anything else)."""
    if data is None:
        return RunOptions()
    if not isinstance(data, dict):
        raise ValueError(f"options must be an object, not {type(data).__name__}")
    limits: dict[str, Any] = {}
    for key in _LIMITS:
        value = data.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"options.{key} must be an integer")
        limits[key] = value
    raw = data.get("deadline")
    deadline: float | datetime | None
    if raw is None or (isinstance(raw, int | float) and not isinstance(raw, bool)):
        deadline = raw
    elif isinstance(raw, str):
        deadline = datetime.fromisoformat(raw)
    else:
        raise ValueError("options.deadline must be seconds or an ISO date")
    return RunOptions(deadline=deadline, **limits)
