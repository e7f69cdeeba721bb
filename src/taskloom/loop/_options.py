"""Run options (budgets, deadline, stop signal, strategy, retry policy) and
how they bind to one run's controls."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._run_controls import RunControls, StopSignal, UsageMeter
from ..errors import ConfigurationError
from ..models import RetryPolicy
from ._tree_budget import Budget

if TYPE_CHECKING:
    from ._strategy import RoundStrategy

DEFAULT_MAX_ROUNDS = 50
"""Model rounds a run may take unless its `RunOptions` say otherwise: a
model that never stops calling tools (delegating again every round, say)
ends BUDGET_EXHAUSTED with "max_rounds (50) reached" instead of running up
a bill. `RunOptions(max_rounds=None)` lifts the bound."""


_DEFAULT_RETRY = RetryPolicy()


@dataclass(slots=True)
class RunOptions:
    """Limits and controls of one run.

    `max_rounds` (model rounds; `DEFAULT_MAX_ROUNDS`, 50, unless given: None
    lifts it), `max_model_requests` (retries included), `max_tool_calls`,
    `token_budget` (input+output, children included) end the run with
    BUDGET_EXHAUSTED at a boundary, its `error` naming the limit reached; `deadline` (seconds from the
    start, or an absolute `datetime`) ends it with DEADLINE, cutting a model
    request or tool batch in flight; `stop` ends it gracefully with STOPPED
    (`stop.cancel()`: at once, aborting the model request and tools in flight).
    `strategy` decides at every round boundary; `retry` is the transport
    retry policy. `budget` (a `Budget`) sets ceilings on tokens and dollars
    for this run and every run under it, in any process (a child's own
    `budget` is ignored: its tree's applies); a run that goes on with one
    cut off by a crash or parked for approval charges that run's tree on,
    with that tree's budget, given this one or not. `memory` (a
    `taskloom.memory.Memory`) is the long-term memory this run reads and
    edits, over its agent's (`Agent(memory=...)`): how a host picks the
    user's namespace per run. None means no limit
    (for `max_rounds` too, given explicitly). A child's options (`child()`,
    `for_child()`) share its parent run's deadline, usage meter and tree budget.
    """

    max_rounds: int | None = DEFAULT_MAX_ROUNDS
    max_model_requests: int | None = None
    max_tool_calls: int | None = None
    token_budget: int | None = None
    deadline: float | datetime | None = None
    stop: StopSignal = field(default_factory=StopSignal)
    strategy: RoundStrategy | None = None
    # One shared default: a policy is a frozen value, and building one per
    # run cost more than the rest of these options together.
    retry: RetryPolicy = _DEFAULT_RETRY
    budget: Budget | None = None
    # A taskloom.memory.Memory (the loop knows it by its duck type only).
    memory: Any = None
    # Set by `for_child` only: the controls of the run this one is a child of.
    _parent: RunControls | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Checked here, a wrong option fails where it was written, not rounds
        # into a run (a string budget would fail at its first comparison).
        for name, least in _COUNTS:
            _check_count(name, getattr(self, name), least)
        _check_deadline(self.deadline)
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise _invalid("budget", self.budget, "a taskloom.Budget")
        if self.memory is not None and not callable(getattr(self.memory, "for_child", None)):
            raise _invalid("memory", self.memory, "a taskloom.memory.Memory or None")
        if not isinstance(self.stop, StopSignal):
            raise _invalid("stop", self.stop, "a taskloom.StopSignal")
        strategy = self.strategy
        if strategy is not None and not callable(getattr(strategy, "on_round", None)):
            raise _invalid("strategy", strategy, "a RoundStrategy (an object with on_round)")
        retry = self.retry
        if retry is not _DEFAULT_RETRY and not (
            callable(getattr(retry, "should_retry", None))
            and callable(getattr(retry, "delay", None))
        ):
            raise _invalid("retry", retry, "a taskloom.models.RetryPolicy")

    @property
    def is_child(self) -> bool:
        """Whether these are a child run's options (`child()`, `for_child()`)."""
        return self._parent is not None

    def bind(self) -> RunControls:
        """The controls of one run of these options: the absolute deadline
        (the earlier of its own and its parent's) and a fresh usage meter
        forwarding to the parent's."""
        parent = self._parent
        deadline_at = parent.deadline_at if parent is not None else None
        if self.deadline is not None:
            own = _monotonic_deadline(self.deadline)
            deadline_at = own if deadline_at is None else min(own, deadline_at)
        return RunControls(
            stop=self.stop,
            deadline_at=deadline_at,
            meter=UsageMeter(parent.meter if parent is not None else None),
            token_budget=self.token_budget,
            retry=self.retry,
            tree=parent.tree if parent is not None else None,
            memory=self.memory,
        )

    @property
    def parent_memory(self) -> Any:
        """The memory of the run these are a child's options of (None for a
        root run's, or a parent without memory): what the child may be given."""
        return None if self._parent is None else self._parent.memory

    def child(
        self,
        *,
        max_rounds: int | None = DEFAULT_MAX_ROUNDS,
        max_model_requests: int | None = None,
        max_tool_calls: int | None = None,
        strategy: RoundStrategy | None = None,
        deadline: float | datetime | None = None,
    ) -> RunOptions:
        """Options for a child run: the parent's stop signal (as a parent of
        the child's own), deadline (or its own `deadline`, if sooner) and
        token budget; its own round, request and tool-call budgets. (A child
        of a running run shares its usage meter too: see `for_child`.)"""
        return RunOptions.for_child(
            self.bind(),
            max_rounds=max_rounds,
            max_model_requests=max_model_requests,
            max_tool_calls=max_tool_calls,
            strategy=strategy,
            deadline=deadline,
        )

    @classmethod
    def for_child(
        cls,
        parent: RunControls,
        *,
        max_rounds: int | None = DEFAULT_MAX_ROUNDS,
        max_model_requests: int | None = None,
        max_tool_calls: int | None = None,
        strategy: RoundStrategy | None = None,
        deadline: float | datetime | None = None,
    ) -> RunOptions:
        """Options for a child of the run whose controls are `parent`: its stop
        signal (stopping it stops the child), deadline (or the child's own
        `deadline`, if sooner), usage meter, token and tree budgets, and its
        retry policy."""
        retry = parent.retry if isinstance(parent.retry, RetryPolicy) else _DEFAULT_RETRY
        options = cls(
            max_rounds=max_rounds,
            max_model_requests=max_model_requests,
            max_tool_calls=max_tool_calls,
            token_budget=parent.token_budget,
            deadline=deadline,
            stop=StopSignal(parent=parent.stop),
            strategy=strategy,
            retry=retry,
        )
        options._parent = parent
        return options


_COUNTS = (
    ("max_rounds", 1),
    ("max_model_requests", 1),
    ("max_tool_calls", 0),
    ("token_budget", 1),
)


def _invalid(name: str, value: object, valid: str) -> ConfigurationError:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    got = "" if number else f", not a {type(value).__name__}"
    return ConfigurationError(f"RunOptions({name}={value!r}): {name} must be {valid}{got}")


def _check_count(name: str, value: object, least: int) -> None:
    if value is None:
        return
    valid = f"an int of at least {least}, or None for no limit"
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _invalid(name, value, valid)


def _check_deadline(value: object) -> None:
    if value is None or isinstance(value, datetime):
        return
    valid = "seconds from the start (an int or float, 0 or more), a datetime, or None"
    # `not value >= 0`: NaN fails it too.
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise _invalid("deadline", value, valid)


def _monotonic_deadline(deadline: float | datetime) -> float:
    if isinstance(deadline, datetime):
        when = deadline if deadline.tzinfo else deadline.replace(tzinfo=UTC)
        return time.monotonic() + (when - datetime.now(UTC)).total_seconds()
    return time.monotonic() + float(deadline)
