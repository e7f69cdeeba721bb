"""`taskloom mcp serve` answering MCP tasks, driven by the official SDK's own
client (its session's `send_request`: the SDK has no task helpers): the
2025-11-25 spelling (`params.task`, `tasks/get`, `tasks/result`,
`tasks/cancel`) and the 2026-07-28 extension (`resultType: "task"`, the
result inline in `tasks/get`), and a restarted server answering for a task
an earlier process started."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal

import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from test_mcp_tasks_crash import ENV, Served

from taskloom import Agent, Runtime
from taskloom.backends import open_backend
from taskloom.models import FunctionModel

pytestmark = pytest.mark.slow


class TaskId(types.RequestParams):
    task_id: str


class Get(types.Request[TaskId, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskId
    name_param: ClassVar[str | None] = "taskId"


class Fetch(types.Request[TaskId, Literal["tasks/result"]]):
    method: Literal["tasks/result"] = "tasks/result"
    params: TaskId


class Cancel(types.Request[TaskId, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskId
    name_param: ClassVar[str | None] = "taskId"


class Anything(types.Result):
    model_config = types.Result.model_config | {"extra": "allow"}


class Created(types.Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


async def _never(claim: Created, ctx: ClaimContext) -> types.CallToolResult:
    raise AssertionError("the test takes the task as it is")


class Tasks(ClientExtension):
    identifier = "io.modelcontextprotocol/tasks"

    def claims(self) -> tuple[ResultClaim[Any], ...]:
        return (ResultClaim(result_type="task", model=Created, resolve=_never),)


async def _until(client: Client, task_id: str, status: str) -> dict[str, Any]:
    for _ in range(200):
        got = await client.session.send_request(Get(params=TaskId(task_id=task_id)), Anything)
        data = got.model_dump(by_alias=True)
        if data["status"] == status:
            return data
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} never became {status}: {data}")


async def test_the_2025_11_25_spelling_get_result_and_a_restart(tmp_path: Path) -> None:
    served = Served(tmp_path)
    served.start()
    try:
        async with Client(served.url, mode="legacy") as client:
            tools = await client.list_tools()
            assert tools.tools[0].execution is not None
            assert tools.tools[0].execution.task_support == "optional"
            assert client.server_capabilities.tasks is not None
            raw = await client.session._dispatcher.send_raw_request(  # the SDK checks the shape
                "tools/call",
                {"name": "gated", "arguments": {"task": "open it"}, "task": {"ttl": 60000}},
                {"headers": {"mcp-protocol-version": client.protocol_version}},
            )
            task_id = raw["task"]["taskId"]
            assert raw["task"]["status"] == "working"
            working = await _until(client, task_id, "working")
            assert working["pollInterval"] > 0
            # The kill below must cut off the tool call itself: wait for it to have started.
            for _ in range(200):
                got = await client.session.send_request(
                    Get(params=TaskId(task_id=task_id)), Anything
                )
                if "waiting for the gate" in str(got.model_dump(by_alias=True)):
                    break
                await asyncio.sleep(0.05)
        # Restarted before the task ended: the new process answers for it
        # and runs it on from the session's log, where the tool call the
        # restart cut off is answered as interrupted (never run twice).
        served.kill()
        served.start()
        async with Client(served.url, mode="legacy") as client:
            await _until(client, task_id, "completed")
            result = await client.session.send_request(
                Fetch(params=TaskId(task_id=task_id)), types.CallToolResult
            )
            assert not result.is_error
            text = result.content[0].text  # type: ignore[union-attr]
            assert text.startswith("report: interrupted")
            with pytest.raises(MCPError) as unknown:
                await client.session.send_request(Get(params=TaskId(task_id="nope")), Anything)
            assert unknown.value.code == types.INVALID_PARAMS
    finally:
        served.stop()


async def test_the_2026_07_28_extension_and_cancel(tmp_path: Path) -> None:
    served = Served(tmp_path)
    served.start()
    try:
        async with Client(served.url, extensions=[Tasks()]) as client:
            assert client.protocol_version == "2026-07-28"
            extensions = client.server_capabilities.extensions or {}
            assert "io.modelcontextprotocol/tasks" in extensions
            await client.list_tools()
            made = await client.session.call_tool("gated", {"task": "open it"}, allow_claimed=True)
            assert isinstance(made, Created)
            first = await _until(client, made.task_id, "working")
            assert "result" not in first
            await client.session.send_request(Cancel(params=TaskId(task_id=made.task_id)), Anything)
            await _until(client, made.task_id, "cancelled")

            second = await client.session.call_tool(
                "gated", {"task": "open it"}, allow_claimed=True
            )
            assert isinstance(second, Created)
            served.gate.write_text("for the second")
            done = await _until(client, second.task_id, "completed")
            assert "for the second" in done["result"]["content"][0]["text"]
        # A client that does not declare the extension is answered inline.
        async with Client(served.url) as plain:
            answer = await plain.call_tool("gated", {"task": "open it"})
            assert "for the second" in answer.content[0].text  # type: ignore[union-attr]
    finally:
        served.stop()


async def test_deleting_a_session_cancels_its_task_on_the_server(tmp_path: Path) -> None:
    from tasks_support import client_agent, mcp_tasks

    from taskloom import Runtime
    from taskloom.background import BackgroundService

    served = Served(tmp_path)
    served.start()
    try:
        async with Runtime() as runtime:
            session = await runtime.create_session(client_agent(served.url))
            await session.run("Open the gate, please.")
            started = await mcp_tasks(runtime, session.id)
            assert len(started) == 1
            await BackgroundService.of(runtime).listeners.delete(session.id)
        async with Client(served.url, extensions=[Tasks()]) as client:
            await _until(client, started[0].task_id, "cancelled")
    finally:
        served.stop()


def _approve_from_the_cli(store: str, session_id: str, call_id: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "taskloom", "approve", session_id, call_id, "--store", store],
        capture_output=True,
        text=True,
        env={**ENV, "COLUMNS": "200"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _pending_of(store: str, session_id: str) -> list[Any]:
    """The served run's parked calls, read from its store by code in this
    process (not the server's)."""
    async with Runtime(store=open_backend(store).store) as runtime:
        meta = await runtime.store.get(session_id)
        session = await runtime.open_session(
            session_id, Agent(meta.agent or "x", FunctionModel(lambda r: "unused"))
        )
        return list(await session.pending())


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
async def test_a_served_run_parked_for_approval_is_input_required_until_approved(
    tmp_path: Path, revision: str
) -> None:
    served = Served(tmp_path, agent="guarded")
    served.start()
    try:
        modern = revision == "2026-07-28"
        opened = (
            Client(served.url, extensions=[Tasks()])
            if modern
            else Client(served.url, mode="legacy")
        )
        async with opened as client:
            assert client.protocol_version == revision
            await client.list_tools()
            if modern:
                made = await client.session.call_tool(
                    "guarded", {"task": "the moon"}, allow_claimed=True
                )
                assert isinstance(made, Created)
                task_id = made.task_id
            else:
                raw = await client.session._dispatcher.send_raw_request(
                    "tools/call",
                    {"name": "guarded", "arguments": {"task": "the moon"}, "task": {}},
                    {"headers": {"mcp-protocol-version": client.protocol_version}},
                )
                task_id = raw["task"]["taskId"]
            waiting = await _until(client, task_id, "input_required")
            assert "launch" in waiting["statusMessage"]
            # It stays so while nobody decided.
            await asyncio.sleep(1.0)
            still = await client.session.send_request(Get(params=TaskId(task_id=task_id)), Anything)
            assert still.model_dump(by_alias=True)["status"] == "input_required"

            # Another process (this test's, then the CLI) decides it, from the
            # served session's log: the task id is the session id.
            [call] = await _pending_of(served.store, task_id)
            assert call.name == "launch" and call.arguments == {"target": "the moon"}
            said = await asyncio.to_thread(_approve_from_the_cli, served.store, task_id, call.id)
            assert f"approved {call.id}" in said

            done = await _until(client, task_id, "completed")
            if modern:
                text = done["result"]["content"][0]["text"]
            else:
                result = await client.session.send_request(
                    Fetch(params=TaskId(task_id=task_id)), types.CallToolResult
                )
                assert not result.is_error
                text = result.content[0].text  # type: ignore[union-attr]
            assert text == "report: launched at the moon"
    finally:
        served.stop()


class Answers(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class Update(types.Request[Answers, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: Answers
    name_param: ClassVar[str | None] = "taskId"


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "denied"])
async def test_a_parked_call_is_an_input_request_the_client_answers(
    tmp_path: Path, approve: bool
) -> None:
    served = Served(tmp_path, agent="guarded")
    served.start()
    try:
        async with Client(served.url, extensions=[Tasks()]) as client:
            await client.list_tools()
            made = await client.session.call_tool(
                "guarded", {"task": "the moon"}, allow_claimed=True
            )
            assert isinstance(made, Created)
            waiting = await _until(client, made.task_id, "input_required")
            [(call_id, asked)] = waiting["inputRequests"].items()
            assert asked["method"] == "elicitation/create"
            assert 'launch({"target": "the moon"})' in asked["params"]["message"]
            assert asked["params"]["requestedSchema"]["required"] == ["approve"]
            # An answer to something it did not ask changes nothing.
            await client.session.send_request(
                Update(params=Answers(task_id=made.task_id, input_responses={"nope": {}})),
                Anything,
            )
            answer = {"action": "accept", "content": {"approve": approve, "note": "go"}}
            await client.session.send_request(
                Update(params=Answers(task_id=made.task_id, input_responses={call_id: answer})),
                Anything,
            )
            done = await _until(client, made.task_id, "completed")
            text = done["result"]["content"][0]["text"]
            if approve:
                assert text == "report: launched at the moon"
            else:
                assert text == (
                    "report: The user denied this tool call; it was not run. Note from the user: go"
                )
        # The decision is in the served session's log, bound to the call.
        async with Runtime(store=open_backend(served.store).store) as runtime:
            entries = await runtime.store.load(made.task_id)
        decisions = [e.data for e in entries if e.kind == "approval_decision"]
        assert [(d["call_id"], d["approved"], d.get("note")) for d in decisions] == [
            (call_id, approve, "go")
        ]
    finally:
        served.stop()
