"""A remote A2A agent (built on the a2a-sdk's own server) as a subagent."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from sdk_agent import HUGE, serving

from taskloom import Agent, Runtime
from taskloom.a2a import RemoteAgent
from taskloom.errors import ConfigurationError
from taskloom.events import Event, SubagentFinished, SubagentStarted, TextDelta
from taskloom.messages import ToolResult
from taskloom.models import FunctionModel, ModelRequest, reply

pytest.importorskip("a2a")


def _delegating(task: str) -> FunctionModel:
    """A parent that hands `task` to the tool `remote`, then repeats its result."""

    def answer(request: ModelRequest) -> Any:
        results = [b for b in request.messages[-1].blocks if isinstance(b, ToolResult)]
        if not results:
            return reply(tool_calls=[("remote", {"task": task})])
        return reply(("ERROR " if results[0].is_error else "OK ") + results[0].content)

    return FunctionModel(answer)


async def _delegate(url: str, task: str, **options: Any) -> tuple[str, list[Event], Agent]:
    remote = RemoteAgent("remote", url, description="An agent elsewhere.", **options)
    parent = Agent("parent", _delegating(task), tools=[remote.tool()])
    events: list[Event] = []
    async with Runtime(agents=[parent]) as runtime:
        session = await runtime.create_session(parent)
        result = await session.run("go", emit=events.append)
    return result.text, events, parent


async def test_the_remote_answer_returns_like_a_childs_with_origin_tagged_events() -> None:
    async with serving() as (url, _):
        text, events, _ = await _delegate(url, "echo bonjour")
    assert text.startswith("OK ")
    result = json.loads(text[3:])
    assert result["answer"] == "bonjour"
    started = [e for e in events if isinstance(e, SubagentStarted)]
    finished = [e for e in events if isinstance(e, SubagentFinished)]
    assert [(e.name, e.mode, e.child_session_id) for e in started] == [
        ("remote", "remote", result["task_id"])
    ]
    assert [(e.status, e.summary) for e in finished] == [("done", "bonjour")]
    said = [e for e in events if isinstance(e, TextDelta) and e.origin]
    assert [(e.origin, e.text) for e in said] == [(f"remote#{result['task_id'][:8]}", "thinking")]


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("fail", "failed: the disk is full"),
        ("cancel", "was cancelled: cancelled by its operator"),
    ],
)
async def test_a_task_that_does_not_complete_is_an_error_result(task: str, expected: str) -> None:
    async with serving() as (url, _):
        text, events, _ = await _delegate(url, task)
    assert text.startswith("ERROR remote agent 'remote'")
    assert expected in text
    finished = [e.status for e in events if isinstance(e, SubagentFinished)]
    assert finished == ["stopped" if task == "cancel" else "failed"]


async def test_a_question_comes_back_in_band_and_the_answer_continues_the_task() -> None:
    def answer(request: ModelRequest) -> Any:
        results = [b for b in request.messages[-1].blocks if isinstance(b, ToolResult)]
        if not results:
            return reply(tool_calls=[("remote", {"task": "ask"})])
        said = json.loads(results[0].content)
        if "question" in said:
            return reply(tool_calls=[("remote", {"task": "Paris", "task_id": said["task_id"]})])
        return reply(f"{said['answer']} ({said['task_id']})")

    async with serving() as (url, executor):
        remote = RemoteAgent("remote", url, description="An agent elsewhere.")
        parent_model = FunctionModel(answer)
        parent = Agent("parent", parent_model, tools=[remote.tool()])
        async with Runtime() as runtime:
            session = await runtime.create_session(parent)
            result = await session.run("go")
        started = list(executor.started)
    question = parent_model.requests[1].messages[-1].results[0]
    assert not question.is_error
    assert json.loads(question.content) == {"question": "which city?", "task_id": started[0]}
    # One remote task: the answer went on with it rather than starting another.
    assert result.text == f"weather in Paris ({started[0]})"
    assert len(started) == 1


async def test_an_answer_to_a_task_that_asks_nothing_is_an_error_result() -> None:
    async with serving() as (url, _):
        text, _, _ = await _delegate(url, "echo hi")
        task_id = json.loads(text[3:])["task_id"]
        remote = RemoteAgent("remote", url, description="An agent elsewhere.")
        parent_model = FunctionModel(
            lambda request: (
                reply(tool_calls=[("remote", {"task": "x", "task_id": task_id})])
                if len(request.messages) == 1
                else reply(request.messages[-1].results[0].content)
            )
        )
        parent = Agent("parent", parent_model, tools=[remote.tool()])
        async with Runtime() as runtime:
            result = await (await runtime.create_session(parent)).run("go")
    assert parent_model.requests[1].messages[-1].results[0].is_error
    assert f"task {task_id} asks nothing to answer: it completed" in result.text


async def test_a_hanging_agent_times_out_and_its_task_is_cancelled() -> None:
    async with serving() as (url, executor):
        text, _, _ = await _delegate(url, "hang", timeout=1.0)
        cancelled = list(executor.cancelled)
    assert text.startswith("ERROR ") and "no answer within 1 s" in text
    assert len(cancelled) == 1


async def test_a_huge_answer_is_capped_like_any_tool_output() -> None:
    async with serving() as (url, _):
        text, _, _ = await _delegate(url, "huge", max_answer_chars=1000)
    answer = json.loads(text[3:])["answer"]
    assert len(answer) < 1200 < HUGE
    assert "output truncated" in answer


async def test_parts_that_are_not_text_are_named_not_dropped() -> None:
    async with serving() as (url, _):
        text, _, _ = await _delegate(url, "file")
    answer = json.loads(text[3:])["answer"]
    assert answer.splitlines() == [
        "see the chart",
        "[a file part not shown: chart.png (image/png, 8 bytes)]",
        '{"rows": 3}',
    ]


async def test_an_unreachable_agent_is_an_error_result() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        # Bound, never listening: connections are refused.
        text, events, _ = await _delegate(url, "echo hi", connect_timeout=2)
    assert text.startswith("ERROR ") and "cannot read its agent card" in text
    assert not [e for e in events if isinstance(e, SubagentStarted)]


async def test_a_malformed_card_is_an_error_result() -> None:
    async with serving(broken_card=True) as (url, _):
        text, _, _ = await _delegate(url, "echo hi")
    assert text.startswith("ERROR ") and "cannot read its agent card" in text


def test_a_remote_agent_needs_a_description_and_an_http_url() -> None:
    with pytest.raises(ConfigurationError, match="description"):
        RemoteAgent("r", "http://127.0.0.1:1/", description="")
    with pytest.raises(ConfigurationError, match="not an http"):
        RemoteAgent("r", "ftp://example/", description="d")
    assert "s3cret" not in repr(RemoteAgent("r", "http://x/", description="d", token="s3cret"))


async def test_cancelling_the_parents_run_cancels_the_remote_task() -> None:
    async with serving() as (url, executor):
        remote = RemoteAgent("remote", url, description="An agent elsewhere.")
        parent = Agent("parent", _delegating("hang"), tools=[remote.tool()])
        started: asyncio.Queue[str] = asyncio.Queue()

        def emit(event: Event) -> None:
            if isinstance(event, SubagentStarted):
                started.put_nowait(event.child_session_id)

        async with Runtime(agents=[parent]) as runtime:
            session = await runtime.create_session(parent)
            run = asyncio.create_task(session.run("go", emit=emit))
            task_id = await asyncio.wait_for(started.get(), 30)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
        assert executor.cancelled == [task_id]
