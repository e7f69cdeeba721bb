"""Step 4 of a round: asking the model, under the retry policy, the deadline
and the budgets.

A failed attempt leaves nothing behind (nothing is committed until a whole
response arrived), so a retryable error is tried again as a whole. Every
attempt counts in `model_requests`; every retry in `transport_retries`, emits
`RetryAttempt`, is logged (the `taskloom` logger) and told to the watch.
"""

from __future__ import annotations

import asyncio
import logging

from .._redact import StreamRedaction
from .._run_controls import Aborted, CancelScope
from ..events import ModelRequestStarted, RetryAttempt, TextDelta, ThinkingDelta
from ..models import Model, ModelRequest, ModelResponse, ResponseCompleted
from ..results import RunStatus
from ._port import ModelCallWatch
from ._result import EndRun
from ._scope import RunScope, RunState
from ._tree_budget import BudgetSpent, InputBound, TreeBudget, within_range

__all__ = ["ModelAsker"]

logger = logging.getLogger("taskloom")


class ModelAsker:
    """Asks models for one run: its retry policy, deadline and budgets apply,
    and usage counts in the run's (and, with a tree budget, in the tree's)."""

    __slots__ = ("_bound", "_run")

    def __init__(self, run: RunState) -> None:
        self._run = run
        # What the tree budget charges a request in advance (made for one).
        self._bound: InputBound | None = None

    @property
    def scope(self) -> RunScope:
        """The run the requests are made for."""
        return self._run.scope

    @property
    def remaining(self) -> float | None:
        """Seconds until the run's deadline (None without one; negative once passed)."""
        return self._run.controls.remaining

    async def ask(self, model: Model, request: ModelRequest) -> ModelResponse:
        """The model's response, or `EndRun` (DEADLINE, BUDGET_EXHAUSTED, and
        STOPPED when the run is cancelled meanwhile: the request is aborted);
        errors the policy will not retry propagate."""
        controls = self._run.controls
        tree: TreeBudget | None = controls.tree
        if tree is not None:
            return await self._charged(tree, model, request)
        scope, stop = self._run.scope, controls.stop
        # `_watched`, inlined: one coroutine less on every round's path.
        with scope.watch.model_call(model, request, streamed=scope.emit is not None) as call:
            try:
                with CancelScope(stop):
                    response = await self._with_retries(model, request, call)
            except Aborted:
                raise EndRun(RunStatus.STOPPED, stop.cancel_reason) from None
            call.responded(response)
        controls.meter.add(response.usage)
        return response

    async def _charged(
        self, tree: TreeBudget, model: Model, request: ModelRequest
    ) -> ModelResponse:
        controls = self._run.controls
        bound = self._bound
        if bound is None:
            bound = self._bound = InputBound()
        try:
            request, charge = await tree.reserve(
                model.name, request, bound.of(request), model.provider
            )
        except BudgetSpent as spent:
            raise EndRun(RunStatus.BUDGET_EXHAUSTED, str(spent)) from None
        try:
            response = await self._watched(model, request)
        except BaseException:
            # Failed requests are taken as unbilled; a process that dies
            # here leaves the worst case charged, which is never too little.
            await tree.settle(charge, None)
            raise
        controls.meter.add(response.usage)
        bound.reported(response.usage)
        await tree.settle(charge, response.usage)
        return response

    async def _watched(self, model: Model, request: ModelRequest) -> ModelResponse:
        scope = self._run.scope
        stop = self._run.controls.stop
        with scope.watch.model_call(model, request, streamed=scope.emit is not None) as call:
            try:
                # The request and its retries, not the store work around them,
                # are what a cancel aborts.
                with CancelScope(stop):
                    response = await self._with_retries(model, request, call)
            except Aborted:
                raise EndRun(RunStatus.STOPPED, stop.cancel_reason) from None
            call.responded(response)
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
                    ModelRequestStarted(
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
                    RetryAttempt,
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
