"""Racing several "spawn" processes against one backend, for the contract suites."""

from __future__ import annotations

import asyncio
import faulthandler
import multiprocessing
import queue
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

PROCESS_TIMEOUT = 60.0

Work = Callable[[Any, str, Any, Callable[[], Awaitable[None]]], Awaitable[list[Any]]]
"""`work(made, session, payload, ready)`: runs in a process on what `factory()` made,
awaits `ready()` once set up, and returns its outcomes."""


def race(
    work: Work,
    factory: Callable[[], object],
    session: str,
    payloads: Sequence[object],
    timeout: float = PROCESS_TIMEOUT,
) -> list[list[Any]]:
    """Run `work` with `payloads[i]` in process i, all starting together; the
    outcomes per process. Blocking; `factory` and `payloads` must be picklable."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(payloads))
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_process_main,
            args=(work, factory, session, payload, barrier, results, index, timeout),
            daemon=True,
        )
        for index, payload in enumerate(payloads)
    ]
    for proc in procs:
        proc.start()
    try:
        return _collect(procs, results, timeout)
    finally:
        for proc in procs:
            # Reported processes are exiting; after a failure the others
            # were released by the broken barrier. Anything left is stuck.
            proc.join(timeout=10.0)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _collect(procs: Sequence[Any], results: Any, timeout: float) -> list[list[Any]]:
    outcomes: dict[int, list[Any]] = {}
    deadline = time.monotonic() + timeout
    while len(outcomes) < len(procs):
        missing = [i for i in range(len(procs)) if i not in outcomes]
        # A process that died without reporting (one that could not even
        # import the backend, say) fails the test now, not at the deadline;
        # the longer wait lets a report it sent just before exiting arrive.
        exited = {i: procs[i].exitcode for i in missing if procs[i].exitcode is not None}
        try:
            index, outcome, error = results.get(timeout=2.0 if exited else 0.1)
        except queue.Empty:
            if exited:
                raise AssertionError(
                    f"process(es) exited without reporting, exit codes {exited}"
                    " (their stderr above says why)"
                ) from None
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"process(es) {missing} did not report within {timeout:.0f} s"
                    " (their stacks are dumped to stderr)"
                ) from None
            continue
        if error is not None:
            raise AssertionError(f"process {index} failed:\n{error}")
        outcomes[index] = outcome
    return [outcomes[i] for i in range(len(procs))]


def _process_main(
    work: Work,
    factory: Callable[[], object],
    session: str,
    payload: object,
    barrier: Any,
    results: Any,
    index: int,
    timeout: float,
) -> None:
    async def main() -> list[Any]:
        made = factory()

        async def ready() -> None:
            # Everyone connects first and starts together, so the operations
            # under test really overlap instead of queueing behind start-up.
            await asyncio.to_thread(barrier.wait, timeout)

        try:
            return await work(made, session, payload, ready)
        finally:
            close = getattr(made, "close", None)
            if close is not None:
                await close()

    # A process stuck past the deadline shows where, instead of just timing out.
    faulthandler.dump_traceback_later(max(timeout - 5.0, 1.0))
    try:
        results.put((index, asyncio.run(main()), None))
    except BaseException:
        barrier.abort()
        results.put((index, None, traceback.format_exc()))
    finally:
        faulthandler.cancel_dump_traceback_later()
