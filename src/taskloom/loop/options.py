"""Run options: budgets, deadline, stop signal, strategy and retry policy."""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..messages import Usage
from ..models.retry import RetryPolicy

if TYPE_CHECKING:
    from .strategy import RoundStrategy

__all__ = ["RunOptions", "StopSignal", "UsageMeter"]


class StopSignal:
    """A graceful stop: once set, a run ends at its next round boundary with
    status STOPPED, its transcript kept.

    A child's signal (`StopSignal(parent=...)`, made by `RunOptions.child()`)
    is set when it or any ancestor is set, so stopping a parent reaches every
    child while stopping a child leaves the parent running.
    """

    __slots__ = ("__weakref__", "_children", "_event", "_parent", "_set", "reason")

    def __init__(self, parent: StopSignal | None = None) -> None:
        self._set = False
        self.reason: str | None = None
        self._parent = parent
        self._event: asyncio.Event | None = None
        self._children: weakref.WeakSet[StopSignal] = weakref.WeakSet()
        if parent is not None:
            parent._children.add(self)

    def set(self, reason: str | None = None) -> None:
        """Ask the run (and its children) to stop at the next boundary."""
        if not self._set:
            self._set = True
            self.reason = reason
        self._wake()

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()
        for child in list(self._children):
            child._wake()

    @property
    def is_set(self) -> bool:
        """True when this signal or an ancestor was set."""
        node: StopSignal | None = self
        while node is not None:
            if node._set:
                return True
            node = node._parent
        return False

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
        return f"StopSignal(is_set={self.is_set})"


class UsageMeter:
    """Usage of one run, forwarded to the parent run's meter as it accrues,
    so a parent's usage and token budget include its children's."""

    __slots__ = ("_parent", "total")

    def __init__(self, parent: UsageMeter | None = None) -> None:
        self.total = Usage()
        self._parent = parent

    def add(self, usage: Usage) -> None:
        """Add usage to this run and every run above it."""
        node: UsageMeter | None = self
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
class RunOptions:
    """Limits and controls of one run.

    `max_rounds` (model rounds), `max_model_requests` (retries included),
    `max_tool_calls`, `token_budget` (input+output, children included) end
    the run with BUDGET_EXHAUSTED at a boundary; `deadline` (seconds from the
    start, or an absolute `datetime`) ends it with DEADLINE, cutting a model
    request or tool batch in flight; `stop` ends it gracefully with STOPPED.
    `strategy` decides at every round boundary; `retry` is the transport
    retry policy. None means no limit.
    """

    max_rounds: int | None = None
    max_model_requests: int | None = None
    max_tool_calls: int | None = None
    token_budget: int | None = None
    deadline: float | datetime | None = None
    stop: StopSignal = field(default_factory=StopSignal)
    strategy: RoundStrategy | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Set on the per-run copy made by `bind()`; read by `child()`.
    _deadline_at: float | None = field(default=None, repr=False)
    _meter: UsageMeter | None = field(default=None, repr=False)
    _parent_meter: UsageMeter | None = field(default=None, repr=False)

    def bind(self) -> RunOptions:
        """The per-run copy: absolute deadline, a fresh usage meter."""
        deadline_at = self._deadline_at
        if deadline_at is None and self.deadline is not None:
            deadline_at = _monotonic_deadline(self.deadline)
        return replace(self, _deadline_at=deadline_at, _meter=UsageMeter(self._parent_meter))

    def child(
        self,
        *,
        max_rounds: int | None = None,
        max_model_requests: int | None = None,
        max_tool_calls: int | None = None,
        strategy: RoundStrategy | None = None,
    ) -> RunOptions:
        """Options for a child run: the parent's stop signal (as a parent of
        the child's own), deadline and token counter; its own round, request
        and tool-call budgets."""
        deadline_at = self._deadline_at
        if deadline_at is None and self.deadline is not None:
            deadline_at = _monotonic_deadline(self.deadline)
        return RunOptions(
            max_rounds=max_rounds,
            max_model_requests=max_model_requests,
            max_tool_calls=max_tool_calls,
            token_budget=self.token_budget,
            deadline=None,
            stop=StopSignal(parent=self.stop),
            strategy=strategy,
            retry=self.retry,
            _deadline_at=deadline_at,
            _parent_meter=self._meter if self._meter is not None else self._parent_meter,
        )

    @property
    def remaining(self) -> float | None:
        """Seconds until the deadline (None without one); negative once passed."""
        if self._deadline_at is None:
            return None
        return self._deadline_at - time.monotonic()


def _monotonic_deadline(deadline: float | datetime) -> float:
    if isinstance(deadline, datetime):
        when = deadline if deadline.tzinfo else deadline.replace(tzinfo=UTC)
        return time.monotonic() + (when - datetime.now(UTC)).total_seconds()
    return time.monotonic() + float(deadline)
