"""Sync tools run on daemon threads: concurrently when allowed, and never
holding `run_sync` past its deadline."""

from __future__ import annotations

import threading
import time

import pytest

from taskloom import Agent, RunOptions, RunStatus, ToolEffect, tool
from taskloom.models import ScriptedModel, reply


def test_run_sync_returns_at_the_deadline_leaving_the_tool_thread_behind() -> None:
    release = threading.Event()
    entered = threading.Event()
    finished = threading.Event()

    @tool
    def block() -> str:
        """Block until released (or 30 s)."""
        entered.set()
        release.wait(30)
        finished.set()
        return "released"

    agent = Agent(
        "a", ScriptedModel([reply(tool_calls=[("block", {})]), reply("never")]), tools=[block]
    )
    try:
        start = time.monotonic()
        result = agent.run_sync("go", options=RunOptions(deadline=1))
        elapsed = time.monotonic() - start
        assert entered.is_set()
        assert result.status is RunStatus.DEADLINE
        assert elapsed < 5, f"run_sync took {elapsed:.1f}s with deadline=1"
        # Python cannot kill a thread: the abandoned tool is still running.
        assert not finished.is_set()
    finally:
        release.set()
    assert finished.wait(10), "the abandoned tool thread did not end once released"


def test_sync_tools_still_see_their_context_variables() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    @tool
    def read() -> str:
        """Read the context variable."""
        return var.get()

    async def main() -> str:
        var.set("from the caller")
        return (await read.call({}, None)).content  # type: ignore[arg-type]

    import asyncio

    assert asyncio.run(main()) == "from the caller"


async def test_sync_tools_of_one_turn_run_on_threads_at_once() -> None:
    # Passes only if all four calls are in their threads at the same time.
    barrier = threading.Barrier(4, timeout=10)
    names: set[str] = set()

    @tool(effect=ToolEffect.READ_ONLY)
    def meet(n: int) -> int:
        """Wait for the others."""
        names.add(threading.current_thread().name)
        assert threading.current_thread().daemon
        barrier.wait()
        return n

    for _ in range(3):  # threads a turn left idle serve the next one
        names.clear()
        model = ScriptedModel(
            [reply(tool_calls=[("meet", {"n": n}) for n in range(4)]), reply("ok")]
        )
        result = await Agent("a", model, tools=[meet]).run("go")
        assert result.status is RunStatus.COMPLETED
        contents = [r.content for r in model.requests[1].messages[-1].results]
        assert contents == ["0", "1", "2", "3"]
        assert len(names) == 4


@tool
def _hello() -> str:
    """Say hello from a thread."""
    return "hello"


def _call_hello() -> str:
    import asyncio

    async def call() -> str:
        return (await asyncio.wait_for(_hello.call({}, None), 10)).content  # type: ignore[arg-type]

    return asyncio.run(call())


def test_a_forked_child_starts_its_own_tool_threads() -> None:
    import multiprocessing

    # The parent's pool has threads (and idle bookkeeping) before the fork.
    assert _call_hello() == "hello"
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_call_hello) == "hello"


async def test_a_blocking_false_tool_runs_inline_on_the_event_loop_thread() -> None:
    loop_thread = threading.get_ident()
    seen: dict[str, int] = {}

    @tool(blocking=False)
    def inline(n: int) -> int:
        """Record the thread."""
        seen["inline"] = threading.get_ident()
        return n + 1

    @tool
    def threaded(n: int) -> int:
        """Record the thread."""
        seen["threaded"] = threading.get_ident()
        return n + 1

    model = ScriptedModel(
        [reply(tool_calls=[("inline", {"n": 1}), ("threaded", {"n": 2})]), reply("ok")]
    )
    result = await Agent("a", model, tools=[inline, threaded]).run("go")
    assert result.status is RunStatus.COMPLETED
    assert seen["inline"] == loop_thread
    assert seen["threaded"] != loop_thread
    assert inline.blocking is False and threaded.blocking is True


async def test_an_inline_generator_tool_streams_its_progress() -> None:
    loop_thread = threading.get_ident()
    threads: set[int] = set()

    @tool(blocking=False)
    def count(n: int):  # type: ignore[no-untyped-def]
        """Count to n."""
        for i in range(1, n + 1):
            threads.add(threading.get_ident())
            yield f"at {i}"

    model = ScriptedModel([reply(tool_calls=[("count", {"n": 3})]), reply("ok")])
    from taskloom.events import ToolCallFinished, ToolProgress

    progress, finished = [], []
    async for event in Agent("a", model, tools=[count]).stream("go"):
        if isinstance(event, ToolProgress):
            progress.append(event.message)
        elif isinstance(event, ToolCallFinished):
            finished.append(event.content)
    assert progress == ["at 1", "at 2", "at 3"]
    assert finished == ["at 3"]
    assert threads == {loop_thread}


async def test_an_inline_tool_that_holds_the_loop_is_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool(blocking=False)
    def slow() -> str:
        """Hold the loop (wrongly marked blocking=False) past the 0.1 s allowed."""
        time.sleep(0.15)
        return "done"

    @tool(blocking=False)
    def quick() -> str:
        """Return at once."""
        return "done"

    calls = [("slow", {}), ("quick", {}), ("slow", {})]
    model = ScriptedModel([reply(tool_calls=calls), reply("ok")])
    with caplog.at_level("WARNING", logger="taskloom"):
        result = await Agent("a", model, tools=[slow, quick]).run("go")
    assert result.status is RunStatus.COMPLETED
    warnings = [r.getMessage() for r in caplog.records if r.name == "taskloom"]
    assert len(warnings) == 1, warnings
    assert "'slow'" in warnings[0] and "blocking=False" in warnings[0]


async def test_blocking_false_is_the_only_thing_that_moves_a_sync_tool_off_its_thread() -> None:
    # A blocking tool (the default) never stalls another run: while it waits
    # on a thread, a second run on the same loop goes to its end.
    release = threading.Event()
    entered = threading.Event()

    @tool
    def wait() -> str:
        """Block until released."""
        entered.set()
        release.wait(10)
        return "released"

    import asyncio

    slow = asyncio.ensure_future(
        Agent(
            "a", ScriptedModel([reply(tool_calls=[("wait", {})]), reply("ok")]), tools=[wait]
        ).run("go")
    )
    assert await asyncio.to_thread(entered.wait, 10)
    other = await Agent("b", ScriptedModel([reply("fine")])).run("go")
    assert other.status is RunStatus.COMPLETED and not slow.done()
    release.set()
    assert (await slow).status is RunStatus.COMPLETED
