"""Step 4 of a round: asking the model, under the retry policy and the deadline.

A failed attempt leaves nothing behind (nothing is committed until a whole
response arrived), so a retryable error is tried again as a whole. Every
attempt counts in `model_requests`; every retry in `transport_retries`, emits
`RetryAttempt`, is logged (the `taskloom` logger) and told to the watch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from ..events import Event, ModelRequestStarted, RetryAttempt, TextDelta, ThinkingDelta
from ..models import Model, ModelRequest, ModelResponse, ResponseCompleted
from ..results import RunStatus
from ._options import RunControls, RunOptions
from ._port import NO_WATCH, ModelCallWatch, RunWatch
from ._result import EndRun

__all__ = ["ask_model"]

logger = logging.getLogger("taskloom")


class _Counters(Protocol):
    model_requests: int
    transport_retries: int
    rounds: int
    round_base: int
    run_id: str


async def ask_model(
    model: Model,
    request: ModelRequest,
    *,
    opts: RunOptions,
    controls: RunControls,
    counters: _Counters,
    emit: Callable[[Event], None] | None,
    origin: str,
    session_id: str,
    watch: RunWatch = NO_WATCH,
) -> ModelResponse:
    """The model's response, or `EndRun` (DEADLINE, BUDGET_EXHAUSTED); errors
    the policy will not retry propagate."""
    with watch.model_call(model, request, streamed=emit is not None) as call:
        response = await _with_retries(
            model, request, opts, controls, counters, emit, origin, session_id, call
        )
        call.responded(response)
        return response


async def _with_retries(
    model: Model,
    request: ModelRequest,
    opts: RunOptions,
    controls: RunControls,
    counters: _Counters,
    emit: Callable[[Event], None] | None,
    origin: str,
    session_id: str,
    call: ModelCallWatch,
) -> ModelResponse:
    policy = opts.retry
    retries = 0
    while True:
        if (
            opts.max_model_requests is not None
            and counters.model_requests >= opts.max_model_requests
        ):
            raise EndRun(RunStatus.BUDGET_EXHAUSTED, "max_model_requests reached while retrying")
        counters.model_requests += 1
        if emit is not None:
            emit(
                ModelRequestStarted(
                    run_id=counters.run_id,
                    round=counters.round_base + counters.rounds + 1,
                    model=model.name,
                    attempt=retries + 1,
                    origin=origin,
                    session_id=session_id,
                )
            )
        try:
            # Nobody listens: the whole response, no per-delta events at all.
            attempt = (
                model.request(request)
                if emit is None
                else _streamed(model, request, emit, origin, session_id)
            )
            if controls.deadline_at is None:
                return await attempt
            async with asyncio.timeout_at(controls.deadline_at):
                return await attempt
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
                session_id,
                model.name,
                exc,
                retries,
                delay,
            )
            call.retrying(retries, delay, exc)
            if emit is not None:
                emit(
                    RetryAttempt(
                        attempt=retries,
                        delay=delay,
                        error=str(exc),
                        status=getattr(exc, "status", None),
                        origin=origin,
                        session_id=session_id,
                    )
                )
            remaining = controls.remaining
            if remaining is not None and remaining <= delay:
                raise EndRun(RunStatus.DEADLINE) from None
            await asyncio.sleep(delay)


async def _streamed(
    model: Model,
    request: ModelRequest,
    emit: Callable[[Event], None],
    origin: str,
    session_id: str,
) -> ModelResponse:
    response: ModelResponse | None = None
    async for ev in model.stream(request):
        if isinstance(ev, ResponseCompleted):
            response = ev.response
        elif isinstance(ev, TextDelta):
            emit(TextDelta(text=ev.text, origin=origin, session_id=session_id))
        elif isinstance(ev, ThinkingDelta):
            emit(ThinkingDelta(text=ev.text, origin=origin, session_id=session_id))
    if response is None:
        raise RuntimeError(f"model {model.name!r} stream ended without a response")
    return response
