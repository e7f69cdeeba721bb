"""Work that answers later, as the round loop delivers it."""

from __future__ import annotations

import asyncio
from typing import Any

from barriers import Tally, set_within
from store_signals import SignalingStore
from taskloom import Agent, RunOptions, RunStatus, Runtime, Tool, ToolContext, tool
from taskloom.backends import session_lease_key
from taskloom.events import NoticeDelivered, WorkFinished
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply


def job_tool(finish: asyncio.Event) -> Tool:
    """`start_job`, whose jobs answer once the test sets `finish` (never, if it does not)."""

    @tool
    async def start_job(seconds: float, ctx: ToolContext) -> str:
        """Start a job that answers later."""

        async def work() -> str:
            await finish.wait()
            return f"job result after {seconds}s"

        job = await ctx.start_background("job", f"compute for {seconds}s", work)
        return f"started {job}"

    return start_job


def user_texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.role == "user"]


async def test_a_finished_job_reaches_the_model_at_the_next_boundary() -> None:
    finish, notice_written = asyncio.Event(), asyncio.Event()
    start_job = job_tool(finish)

    @tool
    async def pause() -> str:
        """Let the job finish."""
        finish.set()
        await set_within(notice_written)
        return "paused"

    model = ScriptedModel(
        [
            reply(tool_calls=[("start_job", {"seconds": 0.05})]),
            reply(tool_calls=[("pause", {})]),
            reply("the job said hello"),
        ]
    )
    runtime = Runtime()
    session = await runtime.create_session(Agent("a", model, tools=[start_job, pause]))
    runtime.watch(session.id, notice_written.set)
    events: list[Any] = []
    result = await session.run("go", emit=events.append)
    assert result.status is RunStatus.COMPLETED
    third = model.requests[2]
    notice = third.messages[-1]
    assert (
        notice.role == "user" and "job" in notice.text and "job result after 0.05s" in notice.text
    )
    assert "finished" in notice.text
    assert not any(
        "job result" in t for t in user_texts(model.requests[1])
    )  # not before it finished
    assert any(isinstance(e, NoticeDelivered) for e in events)
    assert await runtime.background.inbox.pending(session.id) == []  # acknowledged


async def test_the_model_is_reminded_before_it_finishes() -> None:
    seen: list[list[str]] = []
    finish, notice_written = asyncio.Event(), asyncio.Event()

    async def answer(request: ModelRequest) -> Any:
        seen.append(user_texts(request))
        if len(seen) == 1:
            return reply(tool_calls=[("start_job", {"seconds": 0.3})])
        if len(seen) == 2:
            return reply("all done, I think")
        if len(seen) == 3:
            # The model decides to wait, and the job finishes meanwhile.
            finish.set()
            await set_within(notice_written)
            return reply("waiting for it")
        return reply("final with the job result")

    runtime = Runtime()
    agent = Agent("a", FunctionModel(answer), tools=[job_tool(finish)])
    session = await runtime.create_session(agent)
    runtime.watch(session.id, notice_written.set)
    result = await session.run("go")
    assert result.text == "final with the job result"
    assert "still running" in seen[2][-1]  # one reminder for the item this run started
    assert "job result after 0.3s" in seen[3][-1]
    assert sum("still running" in t for r in seen for t in r[-1:]) == 1


async def test_the_first_boundary_says_what_is_still_running() -> None:
    model = ScriptedModel(
        [reply(tool_calls=[("start_job", {"seconds": 5})]), reply("ok"), reply("later run")]
    )
    runtime = Runtime()
    never = asyncio.Event()
    session = await runtime.create_session(Agent("a", model, tools=[job_tool(never)]))
    await session.run("go", options=RunOptions(max_rounds=2))
    await session.run("status?")
    assert "still running" in model.requests[-1].messages[-1].text
    await runtime.close()


async def test_wake_on_notice_starts_a_follow_up_run() -> None:
    done = asyncio.Event()
    answers: list[str] = []

    def answer(request: ModelRequest) -> Any:
        last = request.messages[-1].text
        answers.append(last)
        if len(answers) == 1:
            return reply(tool_calls=[("start_job", {"seconds": 0.05})])
        if "job result" in last:
            done.set()
            return reply("reacted to the job")
        return reply("waiting")

    finish = asyncio.Event()
    store = SignalingStore()
    runtime = Runtime(store=store, wake_on_notice=True)
    agent = Agent("a", FunctionModel(answer), tools=[job_tool(finish)])
    session = await runtime.create_session(agent)
    events: list[Any] = []
    runtime.background.emit = events.append
    first = await session.run("go", options=RunOptions(max_rounds=2))
    assert first.status is RunStatus.BUDGET_EXHAUSTED  # idle before the job finished
    finish.set()
    await store.runs_finished.reached(2)  # the follow-up run, started by nobody but the notice
    assert done.is_set()
    assert any(isinstance(e, WorkFinished) for e in events)
    transcript = await session.transcript()
    assert transcript[-1].text == "reacted to the job"
    await runtime.close()


async def test_wake_ups_are_limited_per_session() -> None:
    runs = 0
    finishes: list[asyncio.Event] = []  # one per job, set by the test

    @tool
    async def chain(ctx: ToolContext) -> str:
        """Start a job that finishes when the test says so."""
        finish = asyncio.Event()
        finishes.append(finish)

        async def work() -> str:
            await finish.wait()
            return "ping"

        await ctx.start_background("job", "ping", work)
        return "started"

    def answer(request: ModelRequest) -> Any:
        nonlocal runs
        last = request.messages[-1]
        if last.role == "tool" or "still running" in last.text:
            return reply("ok")
        runs += 1
        return reply(tool_calls=[("chain", {})])  # every user turn or notice starts another job

    store = SignalingStore()
    runtime = Runtime(store=store, wake_on_notice=True, max_wakeups=3)
    session = await runtime.create_session(Agent("a", FunctionModel(answer), tools=[chain]))
    lease = session_lease_key(session.id)
    runs_ended, lease_attempts = store.leases.released[lease], store.leases.attempts[lease]
    notices = Tally()
    runtime.watch(session.id, notices.add)
    await session.run("go")
    for wake_up in (1, 2, 3):
        # Each job finishes only after the run that started it ended: its notice
        # finds the session idle and wakes it; that run starts the next job.
        finishes[wake_up - 1].set()
        await runs_ended.reached(1 + wake_up)
    assert runs == 1 + 3  # the user's run, then three chained wake-ups
    tried = lease_attempts.count
    finishes[3].set()  # the last job finishes, and wakes nobody
    await notices.reached(4)
    # The wake-up decision follows the notice at once; a wake-up started then
    # would by now have tried to take the session's lease.
    await asyncio.sleep(0)
    assert lease_attempts.count == tried and session.journal.held is None and runs == 1 + 3
    assert len(await runtime.background.inbox.pending(session.id)) == 1  # the last notice waits
    await session.run("anything new?")  # a user turn delivers it and resets the chain
    assert runs == 1 + 3 + 1 and len(finishes) == 5
    finishes[4].set()  # the job the user's turn started: its notice wakes the session again
    await runs_ended.reached(1 + 3 + 1 + 1)
    assert runs == 1 + 3 + 1 + 1
    await runtime.close()


async def test_a_failing_job_says_why() -> None:
    @tool
    async def doomed(ctx: ToolContext) -> str:
        """Start a job that fails."""

        async def work() -> str:
            raise RuntimeError("disk full")

        return await ctx.start_background("job", "doomed", work)

    model = ScriptedModel(
        [reply(tool_calls=[("doomed", {})]), reply("hm"), reply("noted the failure")]
    )
    session = await Runtime().create_session(Agent("a", model, tools=[doomed]))
    await session.run("go")
    texts = [t for r in model.requests for t in user_texts(r)]
    assert any("failed" in t and "RuntimeError: disk full" in t for t in texts)


async def test_closing_the_runtime_wakes_nobody() -> None:
    started: list[int] = []

    @tool
    async def forever(ctx: ToolContext) -> str:
        """Start a job that never finishes on its own."""

        async def work() -> str:
            started.append(1)
            await asyncio.Event().wait()
            return "never"

        return await ctx.start_background("job", "forever", work)

    def answer(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "tool" or "still running" in last.text:
            return reply("ok")
        return reply(tool_calls=[("forever", {})])  # a notice would start another job

    runtime = Runtime(wake_on_notice=True)
    session = await runtime.create_session(Agent("a", FunctionModel(answer), tools=[forever]))
    await session.run("go")
    assert started == [1]
    # Closing stops the job; its "stopped" notice must not start a wake-up
    # run (whose new job nobody would ever stop).
    await runtime.close()
    for _ in range(5):
        await asyncio.sleep(0)
    assert started == [1] and session.journal.held is None
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not [t for t in pending if "_supervise" in repr(t.get_coro())]
