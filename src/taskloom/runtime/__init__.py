"""Runtime (the services a set of sessions share) and Session (a persistent conversation).

A `Session` object is a cache of its log in the store: every decision it
makes (what is pending, which model, what was approved) is derived from the
entries, so another process holding only the session id reaches the same
answers.

A session has one writer at a time. Every run, resume and wake-up holds the
session's lease (`taskloom.backends.session_lease_key`); each entry the run
appends carries the lease's fencing generation, and the store refuses a stale
one in the append's own transaction. A second caller gets `SessionBusy` (or
waits: `wait=` seconds). Decisions, steering, stop requests and deferred
items are written by anyone, without the lease. A run in progress in this
process can also be cancelled (`Runtime.cancel_runs`; deleting the session
does it): it aborts what it waits on and ends STOPPED within 2 seconds.

With `Runtime(queue=...)` runs can also be queued for worker processes
(`Session.submit`, `submit_resume`, `wait`). The runtime knows the queue only
through the small `RunQueue` port below; `taskloom.distributed.WorkQueue`
implements it.

A session's past is a place to start from: `Session.fork` (and
`fork_session`, on stores alone) copies its history up to a cut into a new
session; `diff_sessions` compares two sessions round by round.

A run served as a protocol task (MCP Tasks, A2A) is mapped by `ServedRuns`,
the one layer both servers use: the task's state read from its log, its
run launched, resumed once decided and run on after a restart, and cancel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._decisions import resume_decided
from ._fork import FORKED_FROM, fork_session
from ._run_queue import RunDemand, RunQueue
from ._runtime import BindsRuntime, Runtime, default_runtime
from ._session import Session
from ._session_parts import SessionModel, SessionTools

if TYPE_CHECKING:
    from ._diff import SessionDiff, diff_sessions, rounds_of
    from ._served import SERVED_KEY, ServedRuns, ServedState, ServedTask

__all__ = [
    "BindsRuntime",
    "FORKED_FROM",
    "RunDemand",
    "RunQueue",
    "Runtime",
    "Session",
    "SessionDiff",
    "SessionModel",
    "SessionTools",
    "SERVED_KEY",
    "ServedRuns",
    "ServedState",
    "ServedTask",
    "default_runtime",
    "diff_sessions",
    "fork_session",
    "resume_decided",
    "rounds_of",
]

# Comparing sessions is for tools and tests: `import taskloom` does not pay for it.
_LAZY = {name: "._diff" for name in ("SessionDiff", "diff_sessions", "rounds_of")}
# Only servers (`taskloom mcp serve`, `taskloom a2a serve`) serve runs as tasks.
_LAZY.update(
    {name: "._served" for name in ("SERVED_KEY", "ServedRuns", "ServedState", "ServedTask")}
)

__getattr__ = lazy_exports(__name__, _LAZY)
