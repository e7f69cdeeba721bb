"""Step 4 of a round: the request, built from the log's view (compacted first
when it grew too long, and once more when the provider still finds it too
long), and asking the model under the retry policy, the deadline and the
budgets.

A failed attempt leaves nothing behind (nothing is committed until a whole
response arrived), so a retryable error is tried again as a whole. Every
attempt counts in `model_requests`; every retry in `transport_retries`, emits
`RetryAttempt`, is logged (the `taskloom` logger) and told to the watch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .._deltas import TextDelta, ThinkingDelta
from .._lazy import LazyModule
from .._redact import StreamRedaction
from .._run_controls import Aborted, CancelScope
from ..errors import ContextWindowExceeded
from ..messages import Message
from ..models import Model, ModelRequest, ModelResponse, ResponseCompleted
from ..results import RunStatus
from ._port import Delivery, ModelCallWatch
from ._result import EndRun
from ._scope import RunState
from ._tree_budget import BudgetSpent, InputBound, TreeBudget, within_range

if TYPE_CHECKING:
    from .. import events
    from ._compact import Compactor
else:
    # Imported once something subscribes: a plain run makes no event.
    events = LazyModule("taskloom.events")

logger = logging.getLogger("taskloom")


class ModelAsker:
    """Asks models for one run: its retry policy, deadline and budgets apply,
    and usage counts in the run's (and, with a tree budget, in the tree's)."""

    __slots__ = ("_bound", "_run")

    def __init__(self, run: RunState) -> None:
        self._run = run
        # What the tree budget charges a request in advance (made for one).
        self._bound: InputBound | None = None

    async def ask(self, model: Model, request: ModelRequest) -> ModelResponse:
        """The model's response, or `EndRun` (DEADLINE, BUDGET_EXHAUSTED, and
        STOPPED when the run is cancelled meanwhile: the request is aborted);
        errors the policy will not retry propagate."""
        controls = self._run.controls
        tree: TreeBudget | None = controls.tree
        bound = self._bound
        charge = None
        if tree is not None:
            if bound is None:
                bound = self._bound = InputBound()
            try:
                request, charge = await tree.reserve(
                    model.name, request, bound.of(request), model.provider
                )
            except BudgetSpent as spent:
                raise EndRun(RunStatus.BUDGET_EXHAUSTED, str(spent)) from None
        scope, stop = self._run.scope, controls.stop
        try:
            with scope.watch.model_call(model, request, streamed=scope.emit is not None) as call:
                try:
                    # The request and its retries, not the store work around
                    # them, are what a cancel aborts.
                    with CancelScope(stop):
                        response = await self._with_retries(model, request, call)
                except Aborted:
                    raise EndRun(RunStatus.STOPPED, stop.cancel_reason) from None
                call.responded(response)
        except BaseException:
            if tree is not None and charge is not None:
                # Failed requests are taken as unbilled; a process that dies
                # here leaves the worst case charged, which is never too little.
                await tree.settle(charge, None)
            raise
        controls.meter.add(response.usage)
        if tree is not None and charge is not None and bound is not None:
            bound.reported(response.usage)
            await tree.settle(charge, response.usage)
        return response

    async def _with_retries(
        self, model: Model, request: ModelRequest, call: ModelCallWatch
    ) -> ModelResponse:
        run = self._run
        scope, counters, controls, opts = run.scope, run.counters, run.controls, run.opts
        emit = scope.emit
        limit = opts.max_model_requests
        policy = opts.retry
        retries = 0
        while True:
            if limit is not None and counters.model_requests >= limit:
                raise EndRun(
                    RunStatus.BUDGET_EXHAUSTED, "max_model_requests reached while retrying"
                )
            counters.model_requests += 1
            if emit is not None:
                emit(
                    events.ModelRequestStarted(
                        run_id=scope.run_id,
                        round=counters.round + 1,
                        model=model.name,
                        attempt=retries + 1,
                        origin=scope.origin,
                        session_id=scope.session_id,
                    )
                )
            try:
                # Nobody listens: the whole response, no per-delta events at all.
                attempt = model.request(request) if emit is None else self._streamed(model, request)
                if controls.deadline_at is None:
                    response = await attempt
                else:
                    async with asyncio.timeout_at(controls.deadline_at):
                        response = await attempt
                # Where every response's usage enters accounting, whatever made it.
                return within_range(response, model.name, scope.session_id)
            except TimeoutError:
                raise EndRun(RunStatus.DEADLINE) from None
            except Exception as exc:
                if not policy.should_retry(exc, retries):
                    raise
                retries += 1
                counters.transport_retries += 1
                delay = policy.delay(retries, exc)
                logger.info(
                    "session %s: model %s failed (%s); retry %d in %.2fs",
                    scope.session_id,
                    model.name,
                    exc,
                    retries,
                    delay,
                )
                call.retrying(retries, delay, exc)
                scope.event(
                    "RetryAttempt",
                    attempt=retries,
                    delay=delay,
                    error=str(exc),
                    status=getattr(exc, "status", None),
                )
                remaining = controls.remaining
                if remaining is not None and remaining <= delay:
                    raise EndRun(RunStatus.DEADLINE) from None
                await asyncio.sleep(delay)

    async def _streamed(self, model: Model, request: ModelRequest) -> ModelResponse:
        scope = self._run.scope
        emit = scope.emit
        assert emit is not None
        origin, session_id = scope.origin, scope.session_id
        response: ModelResponse | None = None
        # What a server echoes of the model's credentials is shown redacted,
        # as the stored answer is.
        secrets = tuple(getattr(model, "credentials", ()))
        said: dict[type[TextDelta | ThinkingDelta], StreamRedaction] = {
            TextDelta: StreamRedaction(secrets),
            ThinkingDelta: StreamRedaction(secrets),
        }

        def show(kind: type[TextDelta | ThinkingDelta], text: str) -> None:
            if text:
                emit(kind(text=text, origin=origin, session_id=session_id))

        async for ev in model.stream(request):
            if isinstance(ev, ResponseCompleted):
                response = ev.response
            elif isinstance(ev, TextDelta | ThinkingDelta):
                show(type(ev), said[type(ev)].feed(ev.text))
        for kind, held in said.items():
            show(kind, held.end())
        if response is None:
            raise RuntimeError(f"model {model.name!r} stream ended without a response")
        return response


class Requests:
    """The requests of one run's rounds (step 4 of a round)."""

    __slots__ = ("_asker", "_run", "compactor", "memo")

    def __init__(self, run: RunState) -> None:
        self._run = run
        asker = self._asker = ModelAsker(run)
        policy = run.agent.compaction
        # An agent without a compaction policy sends the whole view, and has nothing to decide.
        if policy is None:
            self.compactor: Compactor | None = None
        else:
            from ._compact import Compactor  # only an agent with a policy loads it

            self.compactor = Compactor(policy, run, asker)
        # Adapters keep their wire encoding of this run's messages here.
        self.memo: dict[Any, Any] = {}

    def build(self, model: Model, delivery: Delivery | None) -> ModelRequest:
        """The request to `model` for the next round, with `delivery`'s notices last."""
        # A view, not a copy: copying the history made every round cost in
        # proportion to the session's length.
        run = self._run
        messages = run.log.view(Message.user(delivery.text) if delivery is not None else None)
        agent = run.agent
        specs = run.ports.tools.tool_specs
        output_schema, output_tool = run.output.ask(model)
        return ModelRequest(
            messages=messages,
            system=agent.instructions,
            tools=(*specs, *output_tool) if output_tool else specs,
            settings=run.ports.models.settings,
            output_schema=output_schema,
            output_name="output" if agent.output is None else agent.output.name,
            memo=self.memo,
        )

    def ask(self, delivery: Delivery | None) -> Awaitable[ModelResponse]:
        """The model's answer to the next round's request (compacting the view
        first if it grew too long), awaited."""
        compactor = self.compactor
        if compactor is None:
            model = self._run.ports.models.model
            return self._asker.ask(model, self.build(model, delivery))
        return self._ask_compacting(compactor, delivery)

    async def _ask_compacting(
        self, compactor: Compactor, delivery: Delivery | None
    ) -> ModelResponse:
        models = self._run.ports.models
        extra = delivery.text if delivery is not None else ""
        await compactor.before_request(extra)
        for attempt in (1, 2):
            chars = compactor.request_chars(extra)
            model = models.model
            try:
                response = await self._asker.ask(model, self.build(model, delivery))
            except ContextWindowExceeded as exc:
                # The provider counted what we estimated: compact once, retry once.
                if attempt == 2 or not await compactor.compact_to_fit():
                    raise EndRun(RunStatus.FAILED, _overflow_error(compactor, exc)) from None
                continue
            u = response.usage
            compactor.estimate.observe(
                chars, u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
            )
            return response
        raise AssertionError("unreachable")


def _overflow_error(compactor: Compactor, exc: ContextWindowExceeded) -> str:
    window = compactor.window()
    size = compactor.tokens()
    limit = f"the model's window of {window} tokens" if window else "the model's window"
    return (
        f"the request (about {size} tokens) does not fit {limit}, even after compacting "
        f"({exc}); lower Compaction(keep_recent=...), shorten tool outputs "
        "(max_output_chars), or use a model with a larger window"
    )
