"""A replay from a session's log notices a changed agent: each run records the
instructions and tool schemas it offered (written out once per change), and
a replay whose agent offers others fails naming the tool and the field."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pg import open_durable, pg_schema, requires_postgres  # noqa: F401 (fixture)
from taskloom import Agent, RunStatus, Runtime, Tool, ToolEffect, tool
from taskloom.entries import Entry, EntryKind, RunStartedEntry
from taskloom.errors import ReplayMismatch
from taskloom.models import RecordingModel, ReplayModel, ScriptedModel, reply
from taskloom.tools import ToolHost

INSTRUCTIONS = "You search the shelf.\nAnswer in one line."


@tool(effect=ToolEffect.READ_ONLY)
def search(query: str) -> str:
    """Search the shelf."""
    return f"found {query}"


@tool(effect=ToolEffect.READ_ONLY)
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


@tool(name="search", effect=ToolEffect.READ_ONLY)
def search_with_limit(query: str, limit: int = 10) -> str:
    """Search the shelf."""
    return f"found {query}"


@tool(name="search", effect=ToolEffect.READ_ONLY)
def search_by_number(query: int) -> str:
    """Search the shelf."""
    return f"found {query}"


@tool(effect=ToolEffect.READ_ONLY)
def extra() -> str:
    """One more tool."""
    return "extra"


def script() -> list[Any]:
    return [
        reply("searching", tool_calls=[("search", {"query": "milk"})]),
        reply("looking up", tool_calls=[("lookup", {"key": "milk"})]),
        reply("milk is on the shelf"),
    ]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)])
def make_runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Runtime]:
    if request.param == "memory":
        made: list[Runtime] = []  # one runtime: its memory store is the session's

        def memory(**options: Any) -> Runtime:
            if not made:
                made.append(Runtime(**options))
            return made[0]

        return memory
    if request.param == "sqlite":
        url, schema = f"sqlite:///{tmp_path / 'replay.db'}", "-"
    else:
        from pg import PG_DSN

        url, schema = PG_DSN, request.getfixturevalue("pg_schema")
    return lambda **options: Runtime(store=open_durable(url, schema), **options)


async def recorded(make_runtime: Callable[..., Runtime]) -> list[Entry]:
    async with make_runtime() as runtime:
        agent = Agent("shelf", ScriptedModel(script()), INSTRUCTIONS, tools=[search, lookup])
        session = await runtime.create_session(agent)
        assert (await session.run("where is the milk?")).status is RunStatus.COMPLETED
        return await session.entries()


async def replay(entries: list[Entry], tools: Sequence[Tool], instructions: str) -> Any:
    model = ReplayModel.from_entries(entries)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("shelf", model, instructions, tools=tools))
        result = await session.run("where is the milk?")
    model.check_done()
    return result


async def test_an_unchanged_agent_replays(make_runtime: Callable[..., Runtime]) -> None:
    entries = await recorded(make_runtime)
    result = await replay(entries, [search, lookup], INSTRUCTIONS)
    assert result.status is RunStatus.COMPLETED and result.text == "milk is on the shelf"


@pytest.mark.parametrize(
    ("tools", "said"),
    [
        ([search_with_limit, lookup], "tool 'search': parameter 'limit' added"),
        (
            [search_by_number, lookup],
            "tool 'search': parameter 'query': type changed from \"string\" to \"integer\"",
        ),
        ([search], "tool 'lookup' removed"),
        ([search, lookup, extra], "tool 'extra' added"),
    ],
    ids=["parameter-added", "type-changed", "tool-removed", "tool-added"],
)
async def test_a_changed_tool_fails_the_replay_naming_tool_and_field(
    make_runtime: Callable[..., Runtime], tools: list[Tool], said: str
) -> None:
    entries = await recorded(make_runtime)
    with pytest.raises(ReplayMismatch) as caught:
        await replay(entries, tools, INSTRUCTIONS)
    message = str(caught.value)
    assert message.startswith("the agent differs from the recorded one:\n- " + said + "\n")
    assert "instructions" not in message.split("the run asked")[0]


async def test_changed_instructions_fail_the_replay_with_a_diff(
    make_runtime: Callable[..., Runtime],
) -> None:
    entries = await recorded(make_runtime)
    with pytest.raises(ReplayMismatch) as caught:
        await replay(entries, [search, lookup], "You search the shelf.\nAnswer in two lines.")
    message = str(caught.value)
    head = message.split("the run asked")[0]
    assert "tool " not in head
    assert (
        "- instructions changed:\n--- recorded instructions\n+++ instructions of this run\n" in head
    )
    assert "\n-Answer in one line.\n+Answer in two lines.\n" in head


async def test_the_schemas_are_written_once_per_change(
    make_runtime: Callable[..., Runtime],
) -> None:
    model = ScriptedModel(script() + script())
    async with make_runtime(snapshot_every=2) as runtime:
        agent = Agent("shelf", model, INSTRUCTIONS, tools=[search, lookup])
        session = await runtime.create_session(agent)
        await session.run("where is the milk?")
        session_id = session.id
    # Reopened (from a snapshot on a durable store): a third round-trip run.
    async with make_runtime(snapshot_every=2) as runtime:
        session = await runtime.open_session(session_id, agent)
        # Where the store keeps snapshots, the fold starts from one.
        assert runtime.snapshots is None or session.journal.log.base > 0
        await session.run("and the bread?")
        changed = Agent("shelf", ScriptedModel(script()), INSTRUCTIONS, tools=[search_with_limit])
        session = await runtime.open_session(session_id, changed)
        await session.run("and the eggs?")
        entries = await session.entries()
        # The fold (and so every snapshot row) keeps the digest, not the schemas.
        state = session.journal.log.snapshot_state()
        assert state["last_run_started"]["data"]["offered"].keys() == {"digest"}
    starts = [e.payload for e in entries if e.kind == EntryKind.RUN_STARTED]
    assert all(isinstance(s, RunStartedEntry) and s.offered for s in starts)
    offered = [s.offered for s in starts if isinstance(s, RunStartedEntry) and s.offered]
    digests = [o["digest"] for o in offered]
    assert len(starts) == 3 and digests[0] == digests[1] != digests[2]
    # Six rounds in two runs of one agent: its schemas once; the change once more.
    assert ["tools" in o for o in offered] == [True, False, True]
    assert [t["name"] for t in offered[0]["tools"]] == ["search", "lookup"]
    assert offered[0]["instructions"] == INSTRUCTIONS
    # No entry of its own: the schemas ride in the start entry, once.
    assert json.dumps([e.data for e in entries]).count("Look a key up.") == 1


async def test_a_log_without_the_record_replays_as_before(
    make_runtime: Callable[..., Runtime],
) -> None:
    entries = await recorded(make_runtime)
    old = [
        Entry(e.kind, {k: v for k, v in e.data.items() if k != "offered"}, e.run_id, e.position)
        for e in entries
    ]
    # Nothing recorded to compare with: the changed tool is not noticed.
    result = await replay(old, [search_with_limit, lookup], "Other instructions.")
    assert result.status is RunStatus.COMPLETED


class Shelf:
    """A toolset: its tools are offered (and recorded) as the agent's own are."""

    name = "shelf"

    async def current_tools(self, host: ToolHost) -> Sequence[Tool]:
        return (lookup,)


async def test_a_toolsets_tools_are_recorded_and_compared() -> None:
    async with Runtime() as runtime:
        agent = Agent("shelf", ScriptedModel(script()), INSTRUCTIONS, tools=[search, Shelf()])
        session = await runtime.create_session(agent)
        await session.run("where is the milk?")
        entries = await session.entries()
    start = next(e.payload for e in entries if e.kind == EntryKind.RUN_STARTED)
    assert isinstance(start, RunStartedEntry) and start.offered is not None
    assert [t["name"] for t in start.offered["tools"]] == ["search", "lookup"]
    assert (await replay(entries, [search, Shelf()], INSTRUCTIONS)).status is RunStatus.COMPLETED
    with pytest.raises(ReplayMismatch, match="tool 'lookup' removed"):
        await replay(entries, [search], INSTRUCTIONS)


async def test_a_recording_files_replay_names_the_change_too() -> None:
    recorder = RecordingModel(ScriptedModel(script()))
    async with Runtime() as runtime:
        agent = Agent("shelf", recorder, INSTRUCTIONS, tools=[search, lookup])
        await (await runtime.create_session(agent)).run("where is the milk?")
    with pytest.raises(ReplayMismatch) as caught:
        async with Runtime() as runtime:
            replay = ReplayModel.loads(recorder.dumps())
            agent = Agent("shelf", replay, INSTRUCTIONS, tools=[search_by_number, lookup])
            await (await runtime.create_session(agent)).run("where is the milk?")
    message = str(caught.value)
    assert message.startswith(
        "the agent differs from the recorded one:\n"
        "- tool 'search': parameter 'query': type changed from \"string\" to \"integer\"\n"
        "the run asked a request the recording does not hold; its difference from the "
        "nearest recorded one (request 1 of 3) starts at request.tools[0].input_schema"
    )


async def test_a_remote_tools_secret_in_its_schema_is_not_recorded(
    make_runtime: Callable[..., Runtime],
) -> None:
    # A remote server may quote the credentials it was sent in a tool's
    # description; the tool's own `secrets` say what they are.
    token = "tok-0123456789abcdef"

    @tool(effect=ToolEffect.READ_ONLY)
    def remote(query: str) -> str:
        """Search the shelf (you sent Authorization: Bearer tok-0123456789abcdef)."""
        return "found"

    remote.secrets = (token,)
    async with make_runtime() as runtime:
        agent = Agent("shelf", ScriptedModel([reply("done")]), INSTRUCTIONS, tools=[remote])
        session = await runtime.create_session(agent)
        assert (await session.run("where is the milk?")).status is RunStatus.COMPLETED
        entries = await session.entries()
    start = next(e.payload for e in entries if e.kind == EntryKind.RUN_STARTED)
    assert isinstance(start, RunStartedEntry) and start.offered
    assert start.offered["tools"][0]["description"].endswith("Bearer [redacted]).")
    assert token not in json.dumps([e.data for e in entries])
