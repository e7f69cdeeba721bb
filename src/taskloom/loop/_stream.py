"""Streaming a run's events to a subscriber without slowing the run.

The run pushes events into a bounded buffer and never waits for the reader.
When a slow reader lets the buffer fill, the oldest *deltas* (text, thinking,
progress) are dropped first and counted in `dropped`; events that mark the
structure of a run (tool calls, rounds, the end) are always kept.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Generic

from .._lazy import LazyModule
from ..results import OutputT, RunResult

if TYPE_CHECKING:
    from .. import events
    from ..events import Event
else:
    # Imported once something subscribes: a plain run makes no event.
    events = LazyModule("taskloom.events")


class RunStream(Generic[OutputT]):
    """An async iterator over one run's events; `result` is set once it ends.

    Leaving the iteration early (break, or `aclose()`) cancels the run: the
    turn in flight is discarded, exactly like cancelling `Session.run`.
    """

    def __init__(
        self,
        start: Callable[[Callable[[Event], None]], Awaitable[RunResult[OutputT]]],
        *,
        buffer: int = 1024,
    ) -> None:
        self._start = start
        self._buffer: deque[Event] = deque()
        # What a full buffer drops first (the stream's events are imported by now).
        self._droppable = (events.TextDelta, events.ThinkingDelta, events.ToolProgress)
        self._limit = buffer
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[RunResult[OutputT]] | None = None
        self.dropped = 0
        self.result: RunResult[OutputT] | None = None

    def _push(self, event: Event) -> None:
        buf = self._buffer
        if len(buf) >= self._limit:
            for i, old in enumerate(buf):
                if isinstance(old, self._droppable):
                    del buf[i]
                    self.dropped += 1
                    break
            else:
                if isinstance(event, self._droppable):
                    self.dropped += 1
                    return
        buf.append(event)
        self._wakeup.set()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        if self._task is None:
            self._task = asyncio.ensure_future(self._start(self._push))
            self._task.add_done_callback(lambda _: self._wakeup.set())
        task = self._task
        try:
            while True:
                while self._buffer:
                    event = self._buffer.popleft()
                    if isinstance(event, events.RunFinished):
                        self.result = event.result
                    yield event
                if task.done():
                    if self._buffer:
                        continue
                    self.result = task.result()  # re-raises the run's exception
                    return
                self._wakeup.clear()
                if not self._buffer and not task.done():
                    await self._wakeup.wait()
        finally:
            if not task.done():
                task.cancel()
                # Wait for the run to unwind; suppress only the run's own
                # cancellation, never the caller's (which re-raises here).
                await asyncio.wait([task])
                if not task.cancelled():
                    task.exception()  # retrieved: the reader left, nobody else will

    async def collect(self) -> RunResult[OutputT]:
        """Drain the stream and return the result."""
        async for _ in self:
            pass
        assert self.result is not None
        return self.result

    def __await__(self) -> Generator[Any, None, RunResult[OutputT]]:
        return self.collect().__await__()
