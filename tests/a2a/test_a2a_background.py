"""A remote A2A agent (built on the a2a-sdk's own server) as a background subagent."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from a2a_support import client_for, user_message
from remote_background import (
    Finished,
    deliveries,
    heard,
    parent,
    parent_model,
    receipts,
    recorded_task_id,
)
from sdk_agent import HUGE, STRANGER, serving, serving_process

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from store_backends import Backend, backend  # noqa: F401 (fixture)
from taskloom import RunOptions, RunStatus, Runtime
from taskloom.backends import SessionMeta
from taskloom.delegation import ChildStatus, child_status
from taskloom.entries import Entry, SubagentDispatched, SubagentLink, SubagentStartedEntry
from taskloom.models import FunctionModel, reply

pytest.importorskip("a2a")


async def test_the_call_returns_at_once_and_the_answer_arrives_once(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with serving() as (url, executor):
        model = parent_model()
        agent = parent(url, model)
        async with Runtime(store=backend.open()) as runtime:
            finished = Finished(runtime)
            session = await runtime.create_session(agent)
            first = await session.run(f"delegate: gate {gate} bonjour")
            [receipt] = receipts(model)
            child = receipt["id"]
            # The run ended while the remote task runs; it was reminded of it first.
            assert first.status is RunStatus.COMPLETED and receipt["status"] == "started"
            assert any("is still running" in heard(r) for r in model.requests)
            # The remote task's id is kept as soon as the server gave it.
            assert await recorded_task_id(runtime, child) == executor.started[0]
            assert await child_status(runtime, child) is ChildStatus.RUNNING

            gate.touch()
            await finished.count(1)
            second = await session.run("news?")
            assert "remote agent 'remote' (task " in second.text
            assert second.text.endswith("answered:\n  bonjour")
            await session.run("anything else?")
            entries = await session.entries()
            assert len(deliveries(entries, child)) == 1
            assert await runtime.background.inbox.pending(session.id) == []
            assert await child_status(runtime, child) is ChildStatus.DONE
            links = [e.payload for e in entries if isinstance(e.payload, SubagentLink)]
            assert [(link.child_session_id, link.mode) for link in links] == [(child, "remote")]
    assert len(executor.started) == 1


async def test_a_question_arrives_as_a_notice_and_the_answer_goes_on_with_the_task() -> None:
    async with serving() as (url, executor):
        model = parent_model(answer="Oslo")
        async with Runtime() as runtime:
            finished = Finished(runtime)
            session = await runtime.create_session(parent(url, model))
            await session.run("delegate: ask")
            await finished.count(1)
            # The question is delivered; the model answers it with the task's id.
            await session.run("news?")
            assert len(receipts(model)) == 2
            await finished.count(2)
            answered = await session.run("and now?")
    [first, second] = receipts(model)
    question = next(r for r in model.requests if "asks for input" in heard(r))
    assert f"asks for input (task_id {executor.started[0]}): which city?" in heard(question)
    assert "weather in Oslo" in answered.text
    # The answer went on with the task it answered: no second remote task.
    assert executor.started == [executor.started[0]]
    assert first["id"] != second["id"]


@pytest.mark.parametrize(
    ("task", "expected", "status"),
    [
        ("fail", "failed: the disk is full", "failed"),
        ("cancel", "was cancelled: cancelled by its operator", "stopped"),
    ],
)
async def test_a_task_that_fails_over_there_is_an_error_delivered_once(
    task: str, expected: str, status: str
) -> None:
    async with serving() as (url, _):
        model = parent_model()
        async with Runtime() as runtime:
            finished = Finished(runtime)
            session = await runtime.create_session(parent(url, model))
            await session.run(f"delegate: {task}")
            await finished.count(1)
            told = await session.run("news?")
            await session.run("again?")
            entries = await session.entries()
    child = receipts(model)[0]["id"]
    [delivered] = deliveries(entries, child)
    assert f"remote_agent {child} {'was stopped' if status == 'stopped' else 'failed'}" in delivered
    assert expected in told.text


async def test_a_huge_answer_is_capped_and_file_parts_are_named() -> None:
    async with serving() as (url, _):
        for task, check in (
            ("huge", lambda text: "output truncated" in text and len(text) < 2000 < HUGE),
            (
                "file",
                lambda text: (
                    "[a file part not shown: chart.png (image/png, 8 bytes)]" in text
                    and '{"rows": 3}' in text
                ),
            ),
        ):
            model = parent_model()
            async with Runtime() as runtime:
                finished = Finished(runtime)
                session = await runtime.create_session(parent(url, model, max_answer_chars=1000))
                await session.run(f"delegate: {task}")
                [event] = await finished.count(1)
            assert check(event.text), event.text[:300]


async def test_a_server_gone_while_its_task_is_followed_is_an_error_after_a_bounded_time() -> None:
    model = parent_model()
    async with Runtime() as runtime:
        finished = Finished(runtime)
        with serving_process() as (url, server):
            session = await runtime.create_session(parent(url, model, unreachable_for=1.0))
            await session.run("delegate: hang")
            task_id = await recorded_task_id(runtime, receipts(model)[0]["id"])
            os.kill(server.pid, signal.SIGKILL)
            # The server is gone: the follow tries again for a second, then says so.
            [event] = await finished.count(1)
    assert f"cannot read task {task_id}" in event.text
    assert "(it did not answer for 1 s)" in event.text


async def test_stopping_the_run_cancels_the_remote_task() -> None:
    async with serving() as (url, executor):
        options = RunOptions()
        async with Runtime() as runtime:
            finished = Finished(runtime)

            async def respond(request: object) -> object:
                messages = request.messages  # type: ignore[attr-defined]
                if len(messages) == 1:
                    return reply(tool_calls=[("remote", {"task": "hang"})])
                receipt = json.loads(messages[-1].results[0].content)
                await recorded_task_id(runtime, receipt["id"])
                options.stop.set("the user stopped it")
                return reply("stopping")

            session = await runtime.create_session(parent(url, FunctionModel(respond)))
            result = await session.run("go", options=options)
            [event] = await finished.count(1)
        assert result.status is RunStatus.STOPPED
        assert executor.cancelled == executor.started != []
    assert "stopped before it finished; the remote task was cancelled" in event.text


async def test_deleting_the_session_cancels_the_remote_task() -> None:
    async with serving() as (url, executor):
        model = parent_model()
        async with Runtime() as runtime:
            session = await runtime.create_session(parent(url, model))
            await session.run("delegate: hang")
            await recorded_task_id(runtime, receipts(model)[0]["id"])
            await runtime.background.listeners.delete(session.id)
            assert runtime.background.running(session.id) == []
        assert executor.cancelled == executor.started != []


async def test_a_task_followed_by_a_live_process_is_not_followed_twice(tmp_path: Path) -> None:
    gate, store = tmp_path / "gate", f"sqlite:///{tmp_path / 'agents.db'}"
    async with serving() as (url, executor):
        model = parent_model()
        async with Runtime(store=store) as first, Runtime(store=store) as second:
            finished = Finished(first)
            session = await first.create_session(parent(url, model))
            await session.run(f"delegate: gate {gate} bonjour")
            child = receipts(model)[0]["id"]
            await recorded_task_id(first, child)
            # Another runtime (as another process would) runs the session: the
            # follower's hold is live, so it is not followed a second time.
            elsewhere = await second.open_session(session.id, parent(url, parent_model()))
            await elsewhere.run("anything?")
            assert second.background.task_for(session.id, child) is None
            gate.touch()
            await finished.count(1)
            told = await elsewhere.run("news?")
            entries = await elsewhere.entries()
    assert told.text.endswith("answered:\n  bonjour")
    assert len(deliveries(entries, child)) == 1
    assert len(executor.started) == 1


async def _orphan(runtime: Runtime, parent_id: str, url: str, task_id: str | None) -> str:
    """A child of `parent_id` as a follower that died would leave it."""
    child = f"orphan-{task_id or 'none'}"
    meta = {"name": "remote", "mode": "remote", "url": url, "task": "t", "started_at": time.time()}
    await runtime.store.create(SessionMeta(child, "remote", parent_id, time.time(), meta))
    await runtime.store.append(child, Entry.of(SubagentStartedEntry("remote")))
    if task_id is not None:
        spec = {"task_id": task_id, "context_id": "", "url": url}
        await runtime.store.append(child, Entry.of(SubagentDispatched(spec)))
    return child


async def test_a_task_nobody_follows_is_followed_again_by_the_next_run(tmp_path: Path) -> None:
    async with serving() as (url, _):
        async with client_for(url) as client:
            responses = [r async for r in client.send_message(user_message("echo again"))]
        task_id = next(r.task.id for r in responses if r.HasField("task"))
        async with Runtime(store=f"sqlite:///{tmp_path / 'agents.db'}") as runtime:
            finished = Finished(runtime)
            session = await runtime.create_session(parent(url))
            child = await _orphan(runtime, session.id, url, task_id)
            lost = await _orphan(runtime, session.id, url, None)
            await session.run("anything?")
            await finished.count(2)
            told = await session.run("news?")
            await session.run("again?")
            entries = await session.entries()
            statuses = [await child_status(runtime, c) for c in (child, lost)]
    [[answered], [cut_off]] = [deliveries(entries, c) for c in (child, lost)]
    assert f"remote agent 'remote' (task {task_id}) answered:\n  again" in answered
    assert "cut off before the remote agent gave its task an id" in cut_off
    assert "again" in told.text
    assert statuses == [ChildStatus.DONE, ChildStatus.FAILED]


@pytest.mark.slow
async def test_a_stream_event_about_another_task_is_a_protocol_error(
    store_url: tuple[str, str],
) -> None:
    with serving_process() as (url, _):
        model = parent_model()
        async with Runtime(store=open_durable(*store_url)) as runtime:
            finished = Finished(runtime)
            session = await runtime.create_session(parent(url, model))
            await session.run("delegate: stranger")
            [event] = await finished.count(1)
            told = await session.run("news?")
            entries = await session.entries()
            child = receipts(model)[0]["id"]
            status = await child_status(runtime, child)
    [delivered] = deliveries(entries, child)
    assert "protocol error" in event.text and "'someone-else'" in event.text
    assert STRANGER not in delivered and STRANGER not in told.text
    assert status is ChildStatus.FAILED
