"""Agents served over A2A, driven by the a2a-sdk's own client over loopback."""

from __future__ import annotations

import httpx
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, StreamResponse, Task, TaskState
from a2a_support import client_for, served, user_message
from served_agents import echo, payer, waiter

from taskloom import Runtime
from taskloom.backends import session_lease_key

pytest.importorskip("a2a")


async def _final_task(responses: list[StreamResponse]) -> Task:
    tasks = [r.task for r in responses if r.HasField("task")]
    assert tasks, responses
    return tasks[-1]


async def test_the_card_names_the_agent_and_where_it_is_served() -> None:
    agent = echo()
    async with (
        Runtime(agents=[agent]) as runtime,
        served(agent, runtime) as url,
        httpx.AsyncClient() as http,
    ):
        card = (await http.get(url + ".well-known/agent-card.json")).json()
    assert card["name"] == "echo"
    assert card["description"] == "Echoes what it is told."
    assert card["supportedInterfaces"][0]["url"] == url
    assert [s["name"] for s in card["skills"]] == ["echo"]
    assert card["capabilities"]["streaming"] is True


async def test_send_runs_a_session_and_get_reads_it_back() -> None:
    agent = echo()
    async with (
        Runtime(agents=[agent]) as runtime,
        served(agent, runtime) as url,
        client_for(url) as client,
    ):
        responses = [r async for r in client.send_message(user_message("hello"))]
        task = await _final_task(responses)
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert [p.text for a in task.artifacts for p in a.parts] == ["you said: hello"]
        got = await client.get_task(GetTaskRequest(id=task.id))
        session = await runtime.open_session(task.id, agent)
        assert session.journal.log.finished_result(session.id) is not None
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in got.artifacts for p in a.parts] == ["you said: hello"]


async def test_a_failed_run_is_a_failed_task_saying_why() -> None:
    agent = echo()
    async with (
        Runtime(agents=[agent]) as runtime,
        served(agent, runtime) as url,
        client_for(url) as client,
    ):
        responses = [r async for r in client.send_message(user_message("fail"))]
    task = await _final_task(responses)
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "the model is down" in task.status.message.parts[0].text


async def test_stream_sends_the_text_then_the_answer_and_the_end() -> None:
    agent = echo()
    async with (
        Runtime(agents=[agent]) as runtime,
        served(agent, runtime) as url,
        client_for(url, streaming=True) as client,
    ):
        responses = [r async for r in client.send_message(user_message("hi"))]
    said = "".join(
        p.text
        for r in responses
        if r.HasField("status_update")
        and r.status_update.status.state == TaskState.TASK_STATE_WORKING
        for p in r.status_update.status.message.parts
    )
    assert said == "you said: hi"
    artifacts = [r.artifact_update.artifact for r in responses if r.HasField("artifact_update")]
    assert [p.text for a in artifacts for p in a.parts] == ["you said: hi"]
    last = [r.status_update for r in responses if r.HasField("status_update")][-1]
    assert last.status.state == TaskState.TASK_STATE_COMPLETED


async def test_an_approval_parks_the_task_and_the_reply_resumes_it() -> None:
    agent = payer()
    async with (
        Runtime(agents=[agent]) as runtime,
        served(agent, runtime) as url,
        client_for(url) as client,
    ):
        first = await _final_task(
            [r async for r in client.send_message(user_message("pay the rent"))]
        )
        assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert 'pay({"amount": 600})' in first.status.message.parts[0].text
        reply = user_message("approve", task_id=first.id, context_id=first.context_id)
        second = await _final_task([r async for r in client.send_message(reply)])
    assert second.id == first.id
    assert second.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in second.artifacts for p in a.parts] == ["done: paid 600"]


async def test_a_reply_that_does_not_approve_denies_with_the_reply_as_reason() -> None:
    agent = payer()
    async with (
        Runtime(agents=[agent]) as runtime,
        served(agent, runtime) as url,
        client_for(url) as client,
    ):
        first = await _final_task([r async for r in client.send_message(user_message("pay"))])
        reply = user_message("no, too much", task_id=first.id, context_id=first.context_id)
        second = await _final_task([r async for r in client.send_message(reply)])
    assert second.status.state == TaskState.TASK_STATE_COMPLETED
    answer = second.artifacts[0].parts[0].text
    assert answer.startswith("done: ") and "no, too much" in answer and "paid" not in answer


async def test_cancel_stops_the_run() -> None:
    agent = waiter()
    async with Runtime(agents=[agent]) as runtime, served(agent, runtime) as url:
        async with client_for(url, streaming=True) as client, client_for(url) as other:
            stream = client.send_message(user_message("wait"))
            task_id = ""
            async for response in stream:
                if response.HasField("status_update"):
                    update = response.status_update
                    if update.status.state == TaskState.TASK_STATE_WORKING:
                        task_id = update.task_id
                        break
            assert task_id
            cancelled = await other.cancel_task(CancelTaskRequest(id=task_id))
            await stream.aclose()
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            got = await other.get_task(GetTaskRequest(id=task_id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
        # The cancelled run gave the session up.
        assert await runtime.store.leases.current(session_lease_key(task_id)) is None


async def test_a_bearer_token_guards_every_call_but_the_card() -> None:
    agent = echo()
    async with Runtime(agents=[agent]) as runtime, served(agent, runtime, token="s3cret") as url:
        async with httpx.AsyncClient() as http:
            assert (await http.get(url + ".well-known/agent-card.json")).status_code == 200
            refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "x"})
            assert refused.status_code == 401
        async with client_for(url, token="s3cret") as client:
            task = await _final_task([r async for r in client.send_message(user_message("hi"))])
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        entries = await (await runtime.open_session(task.id, agent)).entries()
    assert "s3cret" not in repr(entries)


async def test_a_session_not_begun_over_a2a_is_no_task() -> None:
    agent = echo()
    async with (
        Runtime(agents=[agent]) as runtime,
        served(agent, runtime) as url,
        client_for(url) as client,
    ):
        private = await runtime.create_session(agent)
        await private.run("my own business")
        with pytest.raises(Exception, match=r"(?i)not found"):
            await client.get_task(GetTaskRequest(id=private.id))
