"""What the stop and cancel tests share: the stores they run on, a model that
takes its time, and checks that a stopped run's log is whole.

    from stop_support import runtime_fixture, store_fixture  # noqa: F401
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from barriers import GENEROUS, set_within
from pg import PG_DSN, open_durable, requires_postgres
from taskloom import Message, RunResult, Runtime
from taskloom.backends import SessionStore
from taskloom.entries import Entry
from taskloom.events import Event, ModelRequestStarted
from taskloom.models import FunctionModel, ModelRequest

__all__ = [
    "BOUND",
    "assert_ends_stopped",
    "assert_replayable",
    "on_request",
    "runtime_fixture",
    "slow_model",
    "stopped_in",
    "store_fixture",
]

BOUND = 2.0
"""Seconds within which a cancelled run returns (the promise under test)."""


@pytest.fixture(
    name="store",
    params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)],
)
def store_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> str | SessionStore:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return open_durable(f"sqlite:///{tmp_path / 'taskloom.db'}", "-")
    return open_durable(PG_DSN, request.getfixturevalue("pg_schema"))


@pytest.fixture(name="runtime")
async def runtime_fixture(store: str | SessionStore) -> AsyncIterator[Runtime]:
    async with Runtime(store=store) as rt:
        yield rt


def slow_model(asked: asyncio.Event, seconds: float, *answers: Any) -> FunctionModel:
    """A model whose first answer takes `seconds`; then `answers` in turn."""
    script = list(answers)

    async def answer(request: ModelRequest) -> Any:
        answer = script.pop(0)  # taken even if the request is cut off
        if not asked.is_set():
            asked.set()
            await asyncio.sleep(seconds)
        return answer

    return FunctionModel(answer)


async def stopped_in(
    run: Awaitable[RunResult], started: asyncio.Event, stop: Callable[[], None]
) -> tuple[RunResult, float]:
    """Start `run`, call `stop()` 0.5 s after `started` is set; the result and
    the seconds from the stop to the run's return."""
    task = asyncio.ensure_future(run)
    assert await set_within(started), "the model or tool never started"
    await asyncio.sleep(0.5)
    at = time.monotonic()
    stop()
    async with asyncio.timeout(GENEROUS * 4):
        result = await task
    took = time.monotonic() - at
    print(f"returned {took:.3f}s after the stop, {result.status.value}")
    return result, took


def on_request(asked: asyncio.Event) -> Callable[[Event], None]:
    """An `emit` that sets `asked` once a model request started."""

    def emit(event: Event) -> None:
        if isinstance(event, ModelRequestStarted):
            asked.set()

    return emit


def kinds(entries: list[Entry]) -> list[str]:
    return [e.kind for e in entries]


def assert_ends_stopped(entries: list[Entry], cancelled: bool) -> None:
    """The log's last run ended STOPPED, once, and says whether it was cancelled."""
    finished = [e for e in entries if e.kind == "run_finished"]
    assert finished and finished[-1] is entries[-1], kinds(entries)
    assert finished[-1].data["status"] == "stopped"
    error = finished[-1].data["error"]
    assert (error is not None and error.startswith("cancelled")) is cancelled, error
    assert kinds(entries).count("run_started") == len(finished)


def assert_replayable(messages: list[Message]) -> None:
    """Every tool call has exactly one result, in call order, right after its turn."""
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            answer = messages[i + 1]
            assert answer.role == "tool", f"turn {i} has no results: {messages[i + 1 :]}"
            assert [r.tool_call_id for r in answer.results] == [c.id for c in m.tool_calls]
