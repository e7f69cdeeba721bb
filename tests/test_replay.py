"""Recording a run against a real wire (the loopback fake server) and replaying it offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from taskloom import Agent, Message, RunStatus, Runtime, ToolEffect, Usage, tool
from taskloom.errors import ReplayMismatch
from taskloom.models import OpenAIChatModel, RecordingModel, ReplayModel
from taskloom.testing.fake_server import FakeServer
from taskloom.testing.recordings import recorded_model

SECRET = "sk-very-secret-key-0123456789"


@tool(effect=ToolEffect.READ_ONLY)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(name="add", effect=ToolEffect.READ_ONLY)
def add_with_carry(a: int, b: int, carry: int = 0) -> int:
    """Add two integers."""
    return a + b + carry


def script(server: FakeServer) -> None:
    server.script(
        FakeServer.reply("let me add", tool_calls=[("add", {"a": 2, "b": 3})], usage=Usage(20, 5)),
        FakeServer.reply(tool_calls=[("add", {"a": 5, "b": 10})], usage=Usage(30, 6)),
        FakeServer.reply("2+3+10 is 15", usage=Usage(40, 7)),
    )


async def run_agent(model: Any, tools: list[Any] | None = None) -> tuple[Any, list[Message]]:
    async with Runtime() as runtime:
        session = await runtime.create_session(
            Agent("adder", model, "You add.", tools=tools if tools is not None else [add])
        )
        result = await session.run("what is 2+3, plus 10?")
        return result, await session.transcript()


async def record(path: Path) -> tuple[Any, list[Message]]:
    async with FakeServer(api_key=SECRET) as server:
        script(server)

        def real() -> OpenAIChatModel:
            return OpenAIChatModel(
                "gpt-4.1-mini",
                api_key=SECRET,
                base_url=server.base_url,
                headers={"X-Team-Token": "team-secret-token"},
            )

        with recorded_model(path, real, record=True) as model:
            ran = await run_agent(model)
        assert len(server.requests) == 3
    return ran


async def test_a_recorded_run_replays_offline_byte_identically(tmp_path: Path) -> None:
    path = tmp_path / "adds.json"
    recorded, recorded_transcript = await record(path)
    assert recorded.status is RunStatus.COMPLETED
    text = path.read_text()
    for secret in (SECRET, "team-secret-token", "127.0.0.1", "Authorization", "authorization"):
        assert secret not in text
    # The server is gone: the replay needs no network and no key.
    with recorded_model(path, lambda: pytest.fail("replay must not build the real model")) as model:
        again = RecordingModel(model)
        replayed, replayed_transcript = await run_agent(again)
    assert isinstance(model, ReplayModel) and model.used == 3
    assert replayed.text == recorded.text == "2+3+10 is 15"
    assert replayed.usage == recorded.usage
    assert replayed_transcript == recorded_transcript
    assert again.dumps() == text


async def test_a_changed_tool_schema_fails_with_a_readable_diff(tmp_path: Path) -> None:
    path = tmp_path / "adds.json"
    await record(path)
    replay = recorded_model(path, lambda: pytest.fail("no recording now"), record=False)
    with pytest.raises(ReplayMismatch) as caught, replay as model:
        await run_agent(model, tools=[add_with_carry])
    message = str(caught.value)
    assert "does not hold" in message
    assert "nearest recorded one (request 1 of 3) starts at " in message
    assert "request.tools[0].input_schema.properties.carry:" in message
    assert '+          "carry": {' in message
    assert "--- recorded request 1" in message and "+++ request of this run" in message


async def test_a_changed_tool_result_fails_at_the_next_request(tmp_path: Path) -> None:
    path = tmp_path / "adds.json"
    await record(path)

    @tool(effect=ToolEffect.READ_ONLY)
    def add(a: int, b: int) -> int:  # a bug crept in
        """Add two integers."""
        return a - b

    replay = recorded_model(path, lambda: pytest.fail("no recording now"), record=False)
    with pytest.raises(ReplayMismatch) as caught, replay as model:
        await run_agent(model, tools=[add])
    assert "(request 2 of 3) starts at request.messages[2].blocks[0].content" in str(caught.value)
    assert '-          "content": "5"' in str(caught.value)
    assert '+          "content": "-1"' in str(caught.value)


async def test_tools_can_be_answered_from_the_recording(tmp_path: Path) -> None:
    path = tmp_path / "adds.json"
    _, transcript = await record(path)
    ran: list[int] = []

    @tool(effect=ToolEffect.READ_ONLY)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        ran.append(a)
        return 0

    model = ReplayModel.load(path)
    _, replayed_transcript = await run_agent(model, tools=model.tools([add]))
    model.check_done()
    assert ran == []
    assert replayed_transcript == transcript


async def test_a_run_that_asks_less_than_recorded_fails(tmp_path: Path) -> None:
    path = tmp_path / "adds.json"
    await record(path)
    replay = recorded_model(path, lambda: pytest.fail("no recording now"), record=False)
    with pytest.raises(ReplayMismatch, match="asked 0 of the 3 recorded requests"), replay:
        pass


async def test_the_environment_variable_chooses_to_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "env.json"
    missing = recorded_model(path, lambda: pytest.fail("not recording"))
    with pytest.raises(FileNotFoundError, match="TASKLOOM_RECORD=1"), missing:
        pass
    monkeypatch.setenv("TASKLOOM_RECORD", "1")
    async with FakeServer() as server:
        server.script(FakeServer.reply("hello"))

        def real() -> OpenAIChatModel:
            return OpenAIChatModel("gpt-4.1-mini", api_key="k", base_url=server.base_url)

        with recorded_model(path, real) as model:
            assert isinstance(model, RecordingModel)
            result, _ = await run_agent(model, tools=[])
    assert result.text == "hello"
    monkeypatch.delenv("TASKLOOM_RECORD")
    with recorded_model(path, lambda: pytest.fail("replaying")) as model:
        assert isinstance(model, ReplayModel)
        assert (await run_agent(model, tools=[]))[0].text == "hello"


async def test_a_stored_session_replays_from_its_log() -> None:
    async with FakeServer() as server:
        script(server)
        live = OpenAIChatModel("gpt-4.1-mini", api_key="k", base_url=server.base_url)
        async with Runtime() as runtime:
            session = await runtime.create_session(Agent("adder", live, "You add.", tools=[add]))
            recorded = await session.run("what is 2+3, plus 10?")
            entries = await session.entries()
            transcript = await session.transcript()
    model = ReplayModel.from_entries(entries)
    replayed, replayed_transcript = await run_agent(model)
    model.check_done()
    assert replayed.text == recorded.text
    assert replayed.usage == recorded.usage
    assert replayed_transcript == transcript
    changed = ReplayModel.from_entries(entries)
    with pytest.raises(ReplayMismatch, match=r"starts at request\.messages\[0\]"):
        async with Runtime() as runtime:
            session = await runtime.create_session(Agent("adder", changed, tools=[add]))
            await session.run("what is 2+4?")
