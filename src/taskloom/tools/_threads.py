"""The daemon threads sync tools run on: not the event loop's default
executor, which `asyncio.run` (and so `run_sync`) waits for on exit, since a
run's deadline must not wait for a tool that overran it. A sync tool cut off
keeps running in its thread until it returns: Python cannot kill a thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class _DaemonThreads:
    """A pool of daemon threads, started on demand up to `max_workers`, then reused."""

    def __init__(self, max_workers: int) -> None:
        self._max = max_workers
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._work.put((future, fn))
        with self._lock:
            # Each call claims a waiting thread, or starts one below the ceiling.
            if self._idle:
                self._idle -= 1
            elif self._threads < self._max:
                self._threads += 1
                threading.Thread(
                    target=self._worker, name=f"taskloom-tool-{self._threads}", daemon=True
                ).start()
        return future

    def _worker(self) -> None:
        while True:
            future, fn = self._work.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # handed to the awaiting task, as executors do
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn
            with self._lock:
                self._idle += 1


_sync_pool: _DaemonThreads | None = None
_sync_pool_lock = threading.Lock()


def _forget_pool_after_fork() -> None:
    # A forked child has none of the parent's threads, only their bookkeeping.
    global _sync_pool, _sync_pool_lock
    _sync_pool = None
    _sync_pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def run_in_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> asyncio.Future[Any]:
    """`fn(**kwargs)` on a daemon thread, in a copy of the caller's context (as `to_thread`)."""
    global _sync_pool
    if _sync_pool is None:
        with _sync_pool_lock:
            if _sync_pool is None:
                # The same ceiling as asyncio's default executor.
                _sync_pool = _DaemonThreads(min(32, (os.cpu_count() or 1) + 4))
    call = functools.partial(contextvars.copy_context().run, fn, **kwargs)
    return asyncio.wrap_future(_sync_pool.submit(call))
