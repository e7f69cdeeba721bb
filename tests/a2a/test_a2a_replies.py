"""Replies to a parked A2A task, in one process: only a clear yes, a no or a
structured decision decides; anything else is answered with the question."""

from __future__ import annotations

import pytest
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from a2a_support import client_for, served, user_message
from google.protobuf import struct_pb2
from served_agents import payer

from taskloom import Runtime
from taskloom.a2a import approves

pytest.importorskip("a2a")


def _reply(task: Task, text: str = "", data: dict[str, object] | None = None) -> SendMessageRequest:
    part = Part(text=text)
    if data is not None:
        value = struct_pb2.Value()
        value.struct_value.update(data)
        part = Part(data=value)
    message = Message(
        message_id=f"m-{abs(hash((text, repr(data)))):x}",
        role=Role.ROLE_USER,
        parts=[part],
        task_id=task.id,
        context_id=task.context_id,
    )
    return SendMessageRequest(message=message)


def test_only_a_whole_yes_approves() -> None:
    assert [approves(r) for r in ("yes", "Approved.", "OK", "go ahead", "yes but half")] == [
        True,
        True,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("reply", "approved"),
    [
        ({"approve": True}, True),
        ({"approve": False, "note": "not today"}, False),
    ],
    ids=["data-approve-all", "data-deny-all"],
)
async def test_doubtful_replies_ask_again_and_a_data_part_decides(
    reply: dict[str, object], approved: bool
) -> None:
    agent = payer()
    async with (
        Runtime(agents=[agent]) as runtime,
        served(agent, runtime) as url,
        client_for(url) as client,
    ):

        async def send(request: SendMessageRequest) -> Task:
            responses = [r async for r in client.send_message(request)]
            return [r.task for r in responses if r.HasField("task")][-1]

        parked = await send(user_message("pay"))
        for doubtful in ("go ahead", "yes but only half", "maybe later"):
            asked = await send(_reply(parked, doubtful))
            assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, doubtful
            assert "decides nothing" in asked.status.message.parts[0].text
        session = await runtime.open_session(parked.id, agent)
        assert len(await session.pending()) == 1  # nothing was decided
        done = await send(_reply(parked, data=reply))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    answer = done.artifacts[0].parts[0].text
    assert ("paid 600" in answer) is approved
    assert approved or "not today" in answer
