"""One LISTEN connection per queue, shared by every `Session.wait` of the process.

The status trigger NOTIFYs `taskloom_jobs` with the job's lock; the listener
wakes the waiters of that lock, which then look at the jobs table again.
A waiter registers before it looks, and the connection listens before
anyone registers: a job that ends in between still wakes it. When the
connection drops, every waiter is woken to look again, and the listener
reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

from ._schema import JOBS_CHANNEL

__all__ = ["JobListener"]

logger = logging.getLogger("taskloom.distributed")


class JobListener:
    """Wakes waiters by job lock (see the module docstring)."""

    def __init__(self, url: str, schema: str | None, connect_kwargs: dict[str, Any]) -> None:
        self._url = url
        self._schema = schema or ""
        self._kwargs = connect_kwargs
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listening: asyncio.Event | None = None

    async def start(self) -> None:
        """Listen (once); returns when the LISTEN is in effect."""
        if self._task is None or self._task.done():
            self._listening = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._listen(self._listening))
        assert self._listening is not None
        listening = asyncio.ensure_future(self._listening.wait())
        await asyncio.wait([listening, self._task], return_when=asyncio.FIRST_COMPLETED)
        if not listening.done():
            listening.cancel()
            self._task.result()  # raises why it could not listen

    @contextlib.contextmanager
    def waiting(self, lock: str) -> Iterator[asyncio.Event]:
        """An event set whenever a job holding `lock` changes status."""
        event = asyncio.Event()
        self._waiters.setdefault(lock, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(lock, set())
            waiters.discard(event)
            if not waiters:
                self._waiters.pop(lock, None)

    async def _listen(self, listening: asyncio.Event) -> None:
        import psycopg

        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, **self._kwargs
                )
                async with conn:
                    await conn.execute(f"LISTEN {JOBS_CHANNEL}")
                    listening.set()
                    async for note in conn.notifies():
                        self._wake(note.payload)
            except psycopg.OperationalError:
                if not listening.is_set():
                    raise
                logger.warning("the queue's LISTEN connection dropped; reconnecting")
            for waiters in self._waiters.values():
                for event in waiters:
                    event.set()
            await asyncio.sleep(0.5)

    def _wake(self, payload: str) -> None:
        try:
            what = json.loads(payload)
        except ValueError:
            return
        if what.get("schema") != self._schema:
            return
        for event in self._waiters.get(what.get("lock"), ()):
            event.set()

    async def close(self) -> None:
        """Stop listening."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
