from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from barriers import GENEROUS, Overlap, set_within
from taskloom import (
    Agent,
    Message,
    RateLimitError,
    RetryPolicy,
    RunOptions,
    RunStatus,
    Runtime,
    ToolCall,
    ToolContext,
    ToolEffect,
    Usage,
    tool,
)
from taskloom.errors import AuthenticationError, ModelScriptExhausted
from taskloom.events import RetryAttempt, ToolCallFinished, ToolCallStarted
from taskloom.log import INTERRUPTED
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply

FAST = RetryPolicy(max_retries=3, initial_delay=0.001, max_delay=0.002)


@tool(effect=ToolEffect.READ_ONLY)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def results_of(request: ModelRequest) -> list[tuple[str, str, bool]]:
    return [(r.tool_call_id, r.content, r.is_error) for r in request.messages[-1].results]


async def test_a_tool_round_then_a_final_answer() -> None:
    model = ScriptedModel([reply(tool_calls=[("add", {"a": 1, "b": 2})]), reply("3")])
    result = await Agent("main", model, "Be terse.", [add]).run("what is 1+2?")
    assert result.status is RunStatus.COMPLETED and result.ok
    assert result.text == "3"
    assert (result.rounds, result.model_requests, result.tool_calls) == (2, 2, 1)
    first, second = model.requests
    assert first.system == "Be terse." and [t.name for t in first.tools] == ["add"]
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]
    assert results_of(second) == [("call_1", "3", False)]


async def test_usage_is_summed_over_the_run() -> None:
    model = ScriptedModel(
        [
            reply(tool_calls=[("add", {"a": 1, "b": 1})], usage=Usage(10, 5, cache_read_tokens=2)),
            reply("2", usage=Usage(20, 1, reasoning_tokens=3)),
        ]
    )
    result = await Agent(model=model, tools=[add]).run("x")
    assert result.usage == Usage(30, 6, cache_read_tokens=2, reasoning_tokens=3, requests=2)


async def test_bad_calls_get_error_results_and_the_loop_continues() -> None:
    ran: list[int] = []

    @tool
    def record(n: int) -> str:
        """Record n."""
        ran.append(n)
        return "ok"

    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    ("missing_tool", {}),
                    ToolCall("c2", "record", {}, raw_arguments="{not json"),
                    ("record", {"n": "seven"}),
                    ("record", {"n": 7}),
                ]
            ),
            reply("fine"),
        ]
    )
    result = await Agent(model=model, tools=[record]).run("go")
    assert result.status is RunStatus.COMPLETED
    got = results_of(model.requests[1])
    assert [r[0] for r in got] == [
        "call_1",
        "c2",
        "call_2",
        "call_3",
    ]  # one result per call, in order
    assert got[0][2] and "Unknown tool 'missing_tool'" in got[0][1] and "record" in got[0][1]
    assert got[1][2] and "not a valid JSON object" in got[1][1] and '"n"' in got[1][1]
    assert got[2][2] and "n: Input should be a valid integer" in got[2][1]
    assert got[3] == ("call_3", "ok", False)
    assert ran == [7]


async def test_read_only_calls_run_concurrently_and_commit_in_call_order() -> None:
    overlap = Overlap(3)
    finished_events = {label: asyncio.Event() for label in ("slow", "fast", "mid")}

    @tool(effect=ToolEffect.READ_ONLY)
    async def staged(label: str, after: str | None = None) -> str:
        """Answer once every call has started, and once `after` has finished."""
        async with overlap.inside(label):
            if after is not None:
                await set_within(finished_events[after])
        return label

    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    ("staged", {"label": "slow", "after": "mid"}),
                    ("staged", {"label": "fast"}),
                    ("staged", {"label": "mid", "after": "fast"}),
                ]
            ),
            reply("done"),
        ]
    )
    finished: list[str] = []

    def on_event(event: Any) -> None:
        if isinstance(event, ToolCallFinished):
            finished.append(event.content)
            finished_events[event.content].set()

    session = await Runtime().create_session(Agent(model=model, tools=[staged]))
    await session.run("go", emit=on_event)
    assert overlap.overlapped, overlap.log  # all three were running before any ended
    assert finished == ["fast", "mid", "slow"]  # events as each call finished
    assert [r[1] for r in results_of(model.requests[1])] == ["slow", "fast", "mid"]  # call order


async def test_write_calls_run_alone() -> None:
    active = 0
    peak = 0

    async def occupy() -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)  # room for another call to start, if one could
        active -= 1

    @tool(effect=ToolEffect.WRITE)
    async def write(n: int) -> int:
        """Write."""
        await occupy()
        return n

    @tool(effect=ToolEffect.READ_ONLY)
    async def read(n: int) -> int:
        """Read."""
        await occupy()
        return n

    events: list[str] = []
    model = ScriptedModel(
        [
            reply(tool_calls=[("read", {"n": 1}), ("write", {"n": 2}), ("read", {"n": 3})]),
            reply("ok"),
        ]
    )
    session = await Runtime().create_session(Agent(model=model, tools=[read, write]))
    await session.run(
        "go",
        emit=lambda e: (
            events.append(f"{type(e).__name__}:{e.call_id}")
            if isinstance(e, ToolCallStarted | ToolCallFinished)
            else None
        ),
    )
    assert peak == 1
    assert events == [
        "ToolCallStarted:call_1",
        "ToolCallFinished:call_1",
        "ToolCallStarted:call_2",
        "ToolCallFinished:call_2",
        "ToolCallStarted:call_3",
        "ToolCallFinished:call_3",
    ]


async def test_scripted_model_fails_loudly_past_its_script() -> None:
    model = ScriptedModel([reply(tool_calls=[("add", {"a": 1, "b": 1})])])
    with pytest.raises(ModelScriptExhausted, match="reply #2 but only 1"):
        await Agent(model=model, tools=[add]).run("x")


async def test_function_model_sees_each_request() -> None:
    def answer(request: ModelRequest) -> Any:
        if len(request.messages) == 1:
            return reply(tool_calls=[("add", {"a": 2, "b": 3})])
        return reply(f"sum is {request.messages[-1].results[0].content}")

    result = await Agent(model=FunctionModel(answer), tools=[add]).run("x")
    assert result.text == "sum is 5"


async def test_async_function_model() -> None:
    async def answer(request: ModelRequest) -> str:
        await asyncio.sleep(0)
        return "async ok"

    assert (await Agent(model=FunctionModel(answer)).run("x")).text == "async ok"


# ---------------------------------------------------------------- retries


async def test_transport_errors_are_retried_and_counted() -> None:
    model = ScriptedModel(
        [
            reply(error=RateLimitError("slow down", status=429)),
            reply(error=RateLimitError("again", status=429)),
            reply("ok"),
        ]
    )
    retries: list[RetryAttempt] = []
    session = await Runtime().create_session(Agent(model=model))
    result = await session.run(
        "x",
        options=RunOptions(retry=FAST),
        emit=lambda e: retries.append(e) if isinstance(e, RetryAttempt) else None,
    )
    assert result.text == "ok"
    assert (result.model_requests, result.transport_retries, result.rounds) == (3, 2, 1)
    assert [r.attempt for r in retries] == [1, 2] and retries[0].status == 429
    # a failed attempt leaves nothing behind in the transcript
    assert [m.role for m in await session.transcript()] == ["user", "assistant"]


async def test_non_retryable_errors_propagate() -> None:
    model = ScriptedModel([reply(error=AuthenticationError("bad key", status=401))])
    with pytest.raises(AuthenticationError):
        await Agent(model=model).run("x", options=RunOptions(retry=FAST))
    assert len(model.requests) == 1


async def test_retries_give_up_after_the_policy_limit() -> None:
    model = ScriptedModel([reply(error=RateLimitError("x", status=429))] * 3)
    with pytest.raises(RateLimitError):
        await Agent(model=model).run(
            "x", options=RunOptions(retry=RetryPolicy(max_retries=2, initial_delay=0.001))
        )
    assert len(model.requests) == 3


def test_retry_delay_honours_retry_after_with_a_cap() -> None:
    policy = RetryPolicy(initial_delay=0.5, max_retry_after=10)
    assert 0.375 <= policy.delay(1) <= 0.5
    assert policy.delay(1, RateLimitError("x", status=429, retry_after=3)) == 3
    assert policy.delay(1, RateLimitError("x", status=429, retry_after=300)) == 10
    assert policy.delay(10) <= policy.max_delay


# ---------------------------------------------------------------- budgets, deadline, stop


def looping_model(n: int = 50) -> ScriptedModel:
    return ScriptedModel([reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(n)])


@pytest.mark.parametrize(
    ("options", "rounds"),
    [
        (RunOptions(max_rounds=3), 3),
        (RunOptions(max_model_requests=2), 2),
    ],
)
async def test_round_and_request_budgets_end_the_run(options: RunOptions, rounds: int) -> None:
    session = await Runtime().create_session(Agent(model=looping_model(), tools=[add]))
    result = await session.run("x", options=options)
    assert result.status is RunStatus.BUDGET_EXHAUSTED
    assert result.rounds == rounds
    transcript = await session.transcript()
    assert transcript[-1].role == "tool"  # consistent: every call has its result


async def test_tool_call_budget_answers_calls_past_it_in_band() -> None:
    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    ("add", {"a": 1, "b": 1}),
                    ("add", {"a": 2, "b": 2}),
                    ("add", {"a": 3, "b": 3}),
                ]
            )
        ]
    )
    session = await Runtime().create_session(Agent(model=model, tools=[add]))
    result = await session.run("x", options=RunOptions(max_tool_calls=2))
    assert result.status is RunStatus.BUDGET_EXHAUSTED and result.tool_calls == 2
    results = (await session.transcript())[-1].results
    assert [r.is_error for r in results] == [False, False, True]
    assert "tool-call budget (2)" in results[2].content


async def test_token_budget_is_checked_at_boundaries() -> None:
    model = ScriptedModel([reply(tool_calls=[("add", {"a": 1, "b": 1})], usage=Usage(60, 50))] * 5)
    result = await Agent(model=model, tools=[add]).run("x", options=RunOptions(token_budget=200))
    assert result.status is RunStatus.BUDGET_EXHAUSTED
    assert result.rounds == 2 and result.usage.total_tokens == 220


async def test_deadline_cuts_a_slow_model_request_and_keeps_the_log_consistent() -> None:
    model = ScriptedModel([reply(tool_calls=[("add", {"a": 1, "b": 1})]), reply("late", delay=5)])
    session = await Runtime().create_session(Agent(model=model, tools=[add]))
    start = time.monotonic()
    result = await session.run("x", options=RunOptions(deadline=0.2))
    assert result.status is RunStatus.DEADLINE
    assert [m.role for m in await session.transcript()] == ["user", "assistant", "tool"]
    # A generous bound: the 0.2 s deadline cut the request, which would take 5 s.
    assert time.monotonic() - start < 4


async def test_deadline_during_tools_gives_every_call_a_result() -> None:
    @tool(effect=ToolEffect.READ_ONLY)
    async def wait(s: float) -> str:
        """Wait."""
        await asyncio.sleep(s)
        return "waited"

    model = ScriptedModel([reply(tool_calls=[("wait", {"s": 0.01}), ("wait", {"s": 10})])])
    session = await Runtime().create_session(Agent(model=model, tools=[wait]))
    result = await session.run("x", options=RunOptions(deadline=0.3))
    assert result.status is RunStatus.DEADLINE
    results = (await session.transcript())[-1].results
    assert results[0].content == "waited"
    assert results[1].is_error and "deadline" in results[1].content


async def test_graceful_stop_ends_at_the_next_boundary() -> None:
    options = RunOptions()

    @tool
    def stopper(ctx: ToolContext) -> str:
        """Ask the run to stop."""
        ctx.stop.set()
        return "stopping"

    model = ScriptedModel([reply(tool_calls=[("stopper", {})]), reply("never asked")])
    session = await Runtime().create_session(Agent(model=model, tools=[stopper]))
    result = await session.run("x", options=options)
    assert result.status is RunStatus.STOPPED
    assert len(model.requests) == 1
    assert (await session.transcript())[-1].results[0].content == "stopping"


async def test_hard_cancel_discards_the_turn_in_flight() -> None:
    asked = asyncio.Event()

    async def answer(request: ModelRequest) -> Any:
        if not asked.is_set():
            asked.set()
            await asyncio.Event().wait()  # the first request never answers
        return reply("after")

    model = FunctionModel(answer)
    session = await Runtime().create_session(Agent(model=model))
    task = asyncio.create_task(session.run("first"))
    async with asyncio.timeout(GENEROUS):
        await asked.wait()  # the turn is in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [m.role for m in await session.transcript()] == ["user"]
    result = await session.run("second")
    assert result.text == "after"


async def test_cancel_during_a_tool_leaves_calls_answered_as_interrupted() -> None:
    started = asyncio.Event()

    @tool
    async def hang() -> str:
        """Hang."""
        started.set()
        await asyncio.sleep(10)
        return "never"

    model = ScriptedModel([reply(tool_calls=[("hang", {})]), reply("recovered")])
    session = await Runtime().create_session(Agent(model=model, tools=[hang]))
    task = asyncio.create_task(session.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = await session.run("what happened?")
    assert result.text == "recovered"
    roles = [m.role for m in model.requests[1].messages]
    assert roles == ["user", "assistant", "tool", "user"]
    repaired = model.requests[1].messages[2].results[0]
    assert repaired.is_error and repaired.content == INTERRUPTED


async def test_child_options_share_stop_deadline_and_tokens() -> None:
    parent = RunOptions(max_rounds=9, token_budget=100, deadline=30).bind()
    child = RunOptions.for_child(parent, max_rounds=2)
    assert child.max_rounds == 2 and child.token_budget == 100
    run_child = child.bind()
    assert run_child.deadline_at == parent.deadline_at
    run_child.meter.add(Usage(40, 2))
    assert parent.meter.total.total_tokens == 42
    child.stop.set()
    assert not parent.stop.is_set  # stopping a child leaves the parent running
    other = RunOptions.for_child(parent)
    parent.stop.set()
    assert other.stop.is_set  # stopping the parent reaches its children


async def test_child_deadline_is_the_earlier_of_its_own_and_the_parents() -> None:
    parent = RunOptions(deadline=30).bind()
    assert parent.deadline_at is not None
    sooner = RunOptions.for_child(parent, deadline=5).bind()
    later = RunOptions.for_child(parent, deadline=300).bind()
    assert sooner.deadline_at is not None and sooner.deadline_at < parent.deadline_at
    assert later.deadline_at == parent.deadline_at


# ---------------------------------------------------------------- structured output


async def test_output_schema_validates_and_fixes() -> None:
    import pydantic

    class City(pydantic.BaseModel):
        name: str
        population: int

    model = ScriptedModel(
        [reply('{"name": "Oslo"}'), reply('```json\n{"name": "Oslo", "population": 700000}\n```')]
    )
    result = await Agent(model=model, output_type=City).run("x")
    assert result.status is RunStatus.COMPLETED
    assert result.output == City(name="Oslo", population=700000)
    assert model.requests[0].output_schema is not None
    assert "population" in model.requests[1].messages[-1].text


async def test_output_schema_fails_after_the_fixes_run_out() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    model = ScriptedModel(["nope", '{"n": "x"}'])
    result = await Agent(model=model, output_type=schema, fixes=1).run("x")
    assert result.status is RunStatus.FAILED
    assert result.error is not None and "$.n: expected integer" in result.error


# ---------------------------------------------------------------- steering and deferred items


async def test_steering_is_folded_in_at_the_next_boundary() -> None:
    session_box: list[Any] = []

    @tool
    async def work(ctx: ToolContext) -> str:
        """Work while the user steers."""
        await session_box[0].steer("actually, use metric units")
        return "worked"

    model = ScriptedModel([reply(tool_calls=[("work", {})]), reply("metric it is")])
    session = await Runtime().create_session(Agent(model=model, tools=[work]))
    session_box.append(session)
    await session.run("go")
    last = model.requests[1].messages
    assert [m.role for m in last] == ["user", "assistant", "tool", "user"]
    assert last[-1].text == "actually, use metric units"


async def test_a_steer_during_a_clean_finish_extends_the_run() -> None:
    async def answer(request: ModelRequest) -> Any:
        if len(model.requests) == 1:
            # Written while the model answers: it lands before the run decides to finish.
            await session.steer("one more thing")
        return reply(f"answer {len(request.messages)}")

    model = FunctionModel(answer)
    session = await Runtime().create_session(Agent(model=model))
    result = await session.run("hi")
    assert len(model.requests) == 2
    assert model.requests[1].messages[-1].text == "one more thing"
    assert result.rounds == 2


async def test_deferred_items_apply_at_the_next_boundary_in_push_order() -> None:
    from taskloom import DeferredItem

    @tool
    async def start_job(ctx: ToolContext) -> str:
        """Start a job that answers later."""
        handle = ctx.deferred()

        async def later() -> None:
            await handle.push(DeferredItem.context("job result: 42"))
            await handle.push("second item")

        await later()
        return "started"

    model = ScriptedModel([reply(tool_calls=[("start_job", {})]), reply("the answer is 42")])
    session = await Runtime().create_session(Agent(model=model, tools=[start_job]))
    await session.run("go")
    folded = model.requests[1].messages[-1]
    assert folded.role == "user" and folded.text == "job result: 42\n\nsecond item"


async def test_deferred_item_after_the_final_message_keeps_the_run_going() -> None:
    handles: list[Any] = []

    @tool
    async def start(ctx: ToolContext) -> str:
        """Start."""
        handles.append(ctx.deferred())
        return "started"

    async def answer(request: ModelRequest) -> Any:
        n = len(request.messages)
        if n == 1:
            return reply(tool_calls=[("start", {})])
        if n == 3:
            await handles[0].push("late result")
            return reply("done for now")
        return reply("saw: " + request.messages[-1].text)

    result = await Agent(model=FunctionModel(answer), tools=[start]).run("go")
    assert result.text == "saw: late result"


async def test_two_runs_of_one_session_cannot_overlap() -> None:
    from taskloom import TaskloomError

    asked, release = asyncio.Event(), asyncio.Event()

    async def answer(request: ModelRequest) -> Any:
        asked.set()
        await release.wait()
        return reply("a")

    session = await Runtime().create_session(Agent(model=FunctionModel(answer)))
    first = asyncio.create_task(session.run("x"))
    async with asyncio.timeout(GENEROUS):
        await asked.wait()  # the first run is in its model request
    with pytest.raises(TaskloomError, match="is busy"):
        await session.run("y")
    release.set()
    assert (await first).text == "a"


async def test_a_session_message_list_is_the_log() -> None:
    model = ScriptedModel(["one", "two"])
    runtime = Runtime()
    session = await runtime.create_session(Agent(model=model))
    await session.run("a")
    await session.run("b")
    reopened = await runtime.open_session(session.id, session.agent)
    assert [m.text for m in await reopened.transcript()] == ["a", "one", "b", "two"]
    kinds = [e.kind for e in await reopened.entries()]
    assert kinds.count("run_started") == 2 and kinds.count("run_finished") == 2
    assert isinstance((await reopened.transcript())[0], Message)


async def test_a_deferred_handle_pickles_to_its_identity() -> None:
    import pickle

    runtime = Runtime()
    session = await runtime.create_session(Agent(model=ScriptedModel(["ok", "saw it"])))
    await session.run("x")
    from taskloom import Deferred

    handle = Deferred(session.id, runtime=runtime)
    copy = pickle.loads(pickle.dumps(handle))
    assert (copy.session_id, copy.id) == (handle.session_id, handle.id)
    with pytest.raises(RuntimeError, match="bind"):
        await copy.push("late")
    await copy.bind(runtime).push("late")
    result = await session.run(None)
    assert result.text == "saw it"
    assert session.agent.model.requests[-1].messages[-1].text == "late"  # type: ignore[union-attr]


async def test_an_absolute_deadline_in_the_past_ends_the_run_at_once() -> None:
    from datetime import UTC, datetime, timedelta

    model = ScriptedModel(["never asked"])
    past = datetime.now(UTC) - timedelta(seconds=1)
    result = await Agent(model=model).run("x", options=RunOptions(deadline=past))
    assert result.status is RunStatus.DEADLINE and model.requests == []


async def test_a_stop_set_before_the_run_stops_it_before_any_request() -> None:
    options = RunOptions()
    options.stop.set()
    model = ScriptedModel(["never asked"])
    result = await Agent(model=model).run("x", options=options)
    assert result.status is RunStatus.STOPPED and model.requests == []
