"""The controls a run shares with its tools and children: stop signal, usage
meter, deadline and token budget (values; the loop binds them per run)."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .messages import Usage

if TYPE_CHECKING:
    from .results import BudgetLeft

_let_go: set[asyncio.Future[Any]] = set()


def let_go(task: asyncio.Future[Any]) -> None:
    """Stop waiting for `task` but keep it alive until it ends on its own.

    For cleanup that is bounded but should not hold up its caller (a
    cancelled statement's cancel request, a lease release to a silent
    store): the task is kept referenced so it is not collected mid-flight,
    and an error it ends with is logged, never lost.
    """
    _let_go.add(task)
    task.add_done_callback(_ended)


async def wait_until(task: asyncio.Future[Any], end: float) -> bool:
    """Wait for `task` until loop time `end`; True if it is done by then.

    Cancelling the waiter leaves `task` alone. Cheaper than `asyncio.wait`
    (one future and one timer), which matters on a run's path.
    """
    if task.done():
        return True
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_at(end, wake)
    task.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        task.remove_done_callback(wake)
    return task.done()


def _ended(task: asyncio.Future[Any]) -> None:
    _let_go.discard(task)
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        logging.getLogger("taskloom").warning(
            "cleanup left to finish on its own failed", exc_info=exc
        )


class StopSignal:
    """How a run is asked to end early: gracefully (`set`) or at once (`cancel`).

    `set()` is a graceful stop: the run ends at its next round boundary with
    status STOPPED, its transcript kept. A model answer already on its way
    is awaited and committed whole; the tool calls of that answer do not
    start once the stop is set (each is answered in band as not run). The
    loop does not interrupt tools already running (a tool may watch
    `ctx.stop` itself, as MCP calls do: they are cancelled on the server).

    `cancel()` is a stop that does not wait: it sets the signal as `set()`
    does and also aborts what the run is waiting on, the model request (the
    turn in flight is discarded: nothing of it is written) and the running
    tool calls (async tools are cancelled; a sync tool's thread cannot be
    killed, so it is left behind, not awaited). Calls that did not finish
    are answered in band, and the run ends STOPPED with its `error` saying
    it was cancelled, its end recorded in the log. Only code that swallows
    its own cancellation (which no tool should) can hold the run longer.

    A child's signal (`StopSignal(parent=...)`, made by `RunOptions.child()`)
    is set (or cancelled) when it or any ancestor is, so stopping or
    cancelling a parent reaches every child while stopping a child leaves
    the parent running. Use it from the event loop's thread; a sync tool,
    which runs on a thread of its own, may call `ctx.stop.set()` or
    `ctx.stop.cancel()` too (what must happen on the loop is handed to it).
    """

    __slots__ = (
        "__weakref__",
        "_callbacks",
        "_cancel_callbacks",
        "_cancelled",
        "_children",
        "_event",
        "_parent",
        "_set",
        "reason",
    )

    def __init__(self, parent: StopSignal | None = None) -> None:
        self._set = False
        self._cancelled = False
        self.reason: str | None = None
        self._parent = parent
        self._event: asyncio.Event | None = None
        self._callbacks: list[Callable[[], None]] | None = None
        self._cancel_callbacks: list[Callable[[], None]] | None = None
        # Made when a first child links up: most runs have none.
        self._children: weakref.WeakSet[StopSignal] | None = None
        if parent is not None:
            if parent._children is None:
                parent._children = weakref.WeakSet()
            parent._children.add(self)

    def set(self, reason: str | None = None) -> None:
        """Ask the run (and its children) to stop at the next boundary."""
        if not self._set:
            self._set = True
            self.reason = reason
        self._wake(False)

    def cancel(self, reason: str | None = None) -> None:
        """Stop the run (and its children) now: abort its model request and
        tool calls in flight; the run returns STOPPED within moments (see
        the class docstring). Cancelling again is harmless; cancelling after
        `set` turns the stop into a cancel (`reason`, if given, replaces the
        stop's)."""
        if not self._cancelled and (not self._set or reason is not None):
            self.reason = reason
        self._set = True
        self._cancelled = True
        self._wake(True)

    def _wake(self, cancel: bool) -> None:
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            callback()
        if cancel:
            aborts, self._cancel_callbacks = self._cancel_callbacks, None
            for abort in aborts or ():
                abort()
        # Children after their parent: a parent's abort is requested before
        # its children's, which a task running both relies on (`CancelScope`).
        for child in list(self._children or ()):
            child._wake(cancel)

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` once, when the signal (or an ancestor) is set; at
        once if it is already. Returns the undo. For work that must react
        mid-call (cancel a remote call) without a task waiting on `wait()`."""
        if self.is_set:
            callback()
            return lambda: None
        callbacks = self._callbacks
        if callbacks is None:
            callbacks = self._callbacks = []
        callbacks.append(callback)

        def undo() -> None:
            if callback in callbacks:
                callbacks.remove(callback)

        return undo

    def _marked(self, cancelled: bool) -> StopSignal | None:
        node: StopSignal | None = self
        while node is not None and not (node._cancelled if cancelled else node._set):
            node = node._parent
        return node

    @property
    def is_set(self) -> bool:
        """True when this signal or an ancestor was set (or cancelled)."""
        node: StopSignal | None = self
        while node is not None:  # walked inline: asked several times a round
            if node._set:
                return True
            node = node._parent
        return False

    @property
    def is_cancelled(self) -> bool:
        """True when this signal or an ancestor was cancelled."""
        return self._marked(True) is not None

    @property
    def cancel_reason(self) -> str | None:
        """What a cancelled run reports (`RunResult.error`): that it was
        cancelled, and why if the cancel said so; None while not cancelled."""
        node = self._marked(True)
        if node is None:
            return None
        return f"cancelled: {node.reason}" if node.reason else "cancelled"

    async def wait(self) -> None:
        """Return once the signal (or an ancestor) is set."""
        if self.is_set:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()

    def __bool__(self) -> bool:
        return self.is_set

    def __repr__(self) -> str:
        return f"StopSignal(is_set={self.is_set}, is_cancelled={self.is_cancelled})"


class Aborted(Exception):
    """A `CancelScope`'s work was cut off by its stop signal's cancel."""


class CancelScope:
    """A stretch of a run that the run's cancel aborts: `with CancelScope(stop):`.

    While inside, `stop.cancel()` cancels the task running the block, and
    that cancellation leaves the block as `Aborted`; the block is not
    entered at all (`Aborted`) when the signal is already cancelled. Like
    `asyncio.timeout`, for a cancel instead of a deadline: a cancellation of
    the task from elsewhere too (the caller's, a cancelled parent's) still
    leaves as `CancelledError`. A block the cancel came too late for ends
    normally: its caller checks `stop.is_cancelled` after.
    """

    __slots__ = ("_aborting", "_active", "_base", "_stop", "_task")

    def __init__(self, stop: StopSignal) -> None:
        self._stop = stop
        self._aborting = False
        self._active = False

    def __enter__(self) -> CancelScope:
        stop = self._stop
        if stop.is_cancelled:
            raise Aborted
        task = asyncio.current_task()
        assert task is not None, "a CancelScope is entered inside a task"
        self._task = task
        self._base = task.cancelling()
        self._active = True
        # The scope itself is the callback (no closure per block: a round
        # enters two).
        callbacks = stop._cancel_callbacks
        if callbacks is None:
            callbacks = stop._cancel_callbacks = []
        callbacks.append(self)
        return self

    def __call__(self) -> None:
        loop = self._task.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            # Cancelled from another thread (a sync tool's): the loop does it.
            loop.call_soon_threadsafe(self._cancel_task)
        elif asyncio.current_task() is self._task:
            # Cancelled from inside the block (a tool cancelling its own run):
            # the task is running, so cancel it once it waits, if still inside.
            loop.call_soon(self._cancel_task)
        else:
            self._cancel_task()

    def _cancel_task(self) -> None:
        if self._active and not self._aborting:
            self._aborting = True
            self._task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._active = False
        callbacks = self._stop._cancel_callbacks
        # None once the cancel fired; a membership test is cheaper than
        # catching the miss (this runs twice a round).
        if callbacks is not None and self in callbacks:
            callbacks.remove(self)
        if not self._aborting:
            return
        # Our cancel request is taken back whatever became of it, so the
        # task's count of requests stays the caller's own.
        if self._task.uncancel() <= self._base and exc_type is asyncio.CancelledError:
            raise Aborted


_NONE = Usage()


class UsageMeter:
    """Usage of one run, forwarded to the parent run's meter as it accrues,
    so a parent's usage and token budget include its children's. `total` is
    the run's with its children's, `own` the run's alone."""

    __slots__ = ("_parent", "own", "total")

    def __init__(self, parent: UsageMeter | None = None) -> None:
        # One object while no child has added anything: `add` then sums once.
        self.total = self.own = _NONE
        self._parent = parent

    def add(self, usage: Usage) -> None:
        """Add usage to this run and every run above it."""
        own = self.own + usage
        self.total = own if self.total is self.own else self.total + usage
        self.own = own
        node = self._parent
        while node is not None:
            node.total = node.total + usage
            node = node._parent

    @property
    def root_tokens(self) -> int:
        """Input+output tokens counted by the outermost run (the shared counter)."""
        node = self
        while node._parent is not None:
            node = node._parent
        return node.total.total_tokens


@dataclass(slots=True)
class RunControls:
    """One run's bound controls, shared with its tools and passed on to children.

    `stop` is the run's stop signal, `deadline_at` its deadline on the
    `time.monotonic()` clock (None: no deadline), `meter` its usage meter
    (forwarding to the parent's), `token_budget` the budget checked against
    the outermost meter, `retry` the run's transport retry policy (children
    inherit it), `tree` the delegation tree's `TreeBudget` every run under
    the root charges (None: no tree budget), `memory` the long-term memory the
    run reads and edits (a `taskloom.memory.Memory`; children may get it).
    """

    stop: StopSignal = field(default_factory=StopSignal)
    deadline_at: float | None = None
    meter: UsageMeter = field(default_factory=UsageMeter)
    token_budget: int | None = None
    retry: object = None
    tree: Any = None
    memory: Any = None

    @property
    def remaining(self) -> float | None:
        """Seconds until the deadline (None without one); negative once passed."""
        if self.deadline_at is None:
            return None
        return self.deadline_at - time.monotonic()


@runtime_checkable
class BudgetLedger(Protocol):
    """Ceilings and charges per delegation tree, kept in a backend's database.

    Money is kept in nano-dollars, so sums are exact integers. A charge is
    all or nothing and atomic against every other process on the database,
    so concurrent runs cannot pass a ceiling together. The built-in
    backends each have one (`Backend.budgets`).
    """

    async def open(self, tree_id: str, tokens: int | None, nano_usd: int | None) -> None:
        """Create the tree's row with these ceilings (None: none); a tree that
        exists keeps its row."""
        ...

    async def charge(self, tree_id: str, tokens: int, nano_usd: int) -> BudgetLeft | None:
        """Charge both amounts if neither ceiling would be passed, and return
        what is left; None (charging nothing) otherwise, or for an unknown tree."""
        ...

    async def refund(self, tree_id: str, tokens: int, nano_usd: int) -> None:
        """Give back part of an earlier charge; what is charged never falls below 0."""
        ...

    async def left(self, tree_id: str) -> BudgetLeft | None:
        """What the tree has left (None: no such tree)."""
        ...
