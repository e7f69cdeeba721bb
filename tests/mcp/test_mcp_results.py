"""MCP tools in runs, against the fixture server over streamable HTTP (uvicorn
on loopback): progress, results of every content kind, errors, annotations,
approvals, a tool list that changes, a call that hangs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_support import HttpFixture, fixture_stdio, results, start_http_fixture, wait_for_text

from conftest import SEEN_GROUPS, Started
from taskloom import Agent, RunOptions, RunStatus, Runtime, ToolEffect, tool
from taskloom.errors import ConfigurationError
from taskloom.events import Event, ToolCallFinished, ToolProgress
from taskloom.loop import RoundBoundary, RoundContext, RoundDecision
from taskloom.mcp import MCPConnections, MCPServer
from taskloom.models import ScriptedModel, reply


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpFixture]:
    """One fixture server for the tests that leave its tool list alone."""
    server = start_http_fixture(tmp_path_factory.mktemp("shared") / "marker.txt")
    SEEN_GROUPS.add(server.process.pid)
    try:
        yield server
    finally:
        server.stop()


async def run_script(server: MCPServer, *turns: Any, tools: list[Any] | None = None) -> Any:
    """Run the scripted turns (then "done") in a fresh runtime; returns
    (result, tool results, events, model)."""
    model = ScriptedModel([*turns, reply("done")])
    events: list[Event] = []
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model, tools=[server, *(tools or [])]))
        result = await session.run("go", emit=events.append)
        found = results(await session.transcript())
    return result, found, events, model


async def test_progress_reaches_the_run_as_events_before_the_call_finishes(
    shared: HttpFixture,
) -> None:
    result, found, events, _ = await run_script(
        shared.server(), reply(tool_calls=[("slow", {"steps": 3}, "c1")])
    )
    assert result.status is RunStatus.COMPLETED
    seen = [e for e in events if isinstance(e, ToolProgress | ToolCallFinished)]
    assert [getattr(e, "message", "finished") for e in seen] == [
        "step 1",
        "step 2",
        "step 3",
        "finished",
    ]
    first = seen[0]
    assert isinstance(first, ToolProgress)
    assert first.call_id == "c1" and first.data == {"progress": 1.0, "total": 3.0}
    assert found == [("slow", False, '{"result":"3 steps done"}')]


async def test_results_of_every_content_kind(shared: HttpFixture) -> None:
    calls = [
        ("forecast", {"city": "Oslo"}),
        ("picture", {}),
        ("documents", {}),
        ("fail", {"reason": "no disk"}),
    ]
    result, found, _, _ = await run_script(shared.server(), reply(tool_calls=calls))
    assert result.status is RunStatus.COMPLETED  # an isError result does not end the run
    forecast, picture, documents, failed = found
    # structuredContent is the answer, as JSON (the text block beside it repeats it)
    assert json.loads(forecast[2]) == {"city": "Oslo", "celsius": 4} and not forecast[1]
    # tool results carry text: an image is a line naming its type and size
    assert picture[2] == "[image: image/png, 66 bytes]\na single pixel"
    assert documents[2] == (
        "[resource file:///notes.txt]\nthe notes\n"
        "[resource link big.csv: file:///big.csv, text/csv]\ntwo documents"
    )
    assert failed[1] is True and "could not: no disk" in failed[2]


async def test_output_is_capped_like_any_tool_output(shared: HttpFixture) -> None:
    server = shared.server(max_output_chars=1000)
    _, found, _, _ = await run_script(server, reply(tool_calls=[("shout", {"size": 50_000})]))
    text = found[0][2]
    assert len(text) < 1100 and "output truncated" in text


async def test_arguments_are_checked_before_the_server_is_asked(shared: HttpFixture) -> None:
    server = shared.server(approval="never")
    _, found, _, _ = await run_script(
        server, reply(tool_calls=[("delete_thing", {"name": 7}), ("delete_thing", {})])
    )
    assert [f[1] for f in found] == [True, True]
    assert "arguments.name: expected string" in found[0][2]
    assert "missing required property 'name'" in found[1][2]
    assert "deleted" not in wait_for_text(shared.marker, "deleted", timeout=0.2)


async def test_annotations_decide_effect_and_approval(shared: HttpFixture) -> None:
    async with Runtime() as runtime:
        by_policy = {}
        for policy in ("destructive", "always", "never"):
            server = shared.server(approval=policy, prefix=policy[:3])
            tools = {t.remote_name: t for t in await MCPConnections.of(runtime).tools_for(server)}  # type: ignore[attr-defined]
            by_policy[policy] = {n: t.is_gated for n, t in tools.items()}
            effects = {n: t.effect for n, t in tools.items()}
        predicate = shared.server(
            approval=lambda name, args: name == "add_thing" and args.get("name") == "gold"
        )
        gated = {t.name: t for t in await MCPConnections.of(runtime).tools_for(predicate)}
    assert effects["look"] is ToolEffect.READ_ONLY
    assert effects["delete_thing"] is effects["add_thing"] is ToolEffect.WRITE
    assert effects["unannotated"] is ToolEffect.WRITE
    destructive = by_policy["destructive"]
    assert destructive["delete_thing"] and not destructive["look"]
    assert not destructive["add_thing"]  # destructiveHint: false
    assert destructive["unannotated"]  # the MCP spec's default: destructive
    assert all(by_policy["always"].values()) and not any(by_policy["never"].values())
    assert gated["add_thing"].requires_approval({"name": "gold"})
    assert not gated["add_thing"].requires_approval({"name": "tin"})
    assert not gated["delete_thing"].requires_approval({"name": "gold"})


async def test_a_destructive_call_parks_and_runs_only_once_approved(
    shared: HttpFixture,
) -> None:
    model = ScriptedModel(
        [reply(tool_calls=[("look", {"name": "a"}), ("delete_thing", {"name": "b"}, "d1")]), "ok"]
    )
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model, tools=[shared.server()]))
        parked = await session.run("go")
        assert parked.status is RunStatus.AWAITING_APPROVAL
        assert [p.id for p in parked.pending] == ["d1"]
        assert "deleted" not in wait_for_text(shared.marker, "deleted", timeout=0.2)
        await session.approve("d1")
        resumed = await session.resume()
        found = results(await session.transcript())
    assert resumed.status is RunStatus.COMPLETED
    assert found == [
        ("look", False, '{"result":"looked at a"}'),
        ("delete_thing", False, '{"result":"deleted b"}'),
    ]
    assert "deleted b" in wait_for_text(shared.marker, "deleted b")


async def test_a_changed_tool_list_is_offered_from_the_next_round_never_mid_round(
    http_fixture: HttpFixture,
) -> None:
    server = http_fixture.server()

    class AfterTheAnnouncement:
        """Holds the boundary after the first tool round until the server's
        announcement arrived (it travels apart from the call's result)."""

        def __init__(self, runtime: Runtime) -> None:
            self.runtime = runtime

        async def on_round(self, ctx: RoundContext) -> RoundDecision:
            if ctx.boundary is RoundBoundary.TOOL_RESULTS_COMMITTED and ctx.rounds_completed == 1:
                connection = MCPConnections.of(self.runtime).connection(server)
                async with asyncio.timeout(10):
                    await connection.announced()
            return RoundDecision.proceed()

    model = ScriptedModel(
        [
            reply(tool_calls=[("grow", {}), ("grown", {})]),
            reply(tool_calls=[("grown", {})]),
            "done",
        ]
    )
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model, tools=[server]))
        options = RunOptions(strategy=AfterTheAnnouncement(runtime))
        assert (await session.run("go", options=options)).status is RunStatus.COMPLETED
        found = results(await session.transcript())
    offered = [{t.name for t in request.tools} for request in model.requests]
    assert "grown" not in offered[0] and "grown" in offered[1]
    # In the round that grew the list, the model was not offered `grown`.
    assert found[1][1] is True and "Unknown tool 'grown'" in found[1][2]
    assert found[2] == ("grown", False, '{"result":"I am new"}')


async def test_a_call_past_the_timeout_is_cancelled_on_the_server(shared: HttpFixture) -> None:
    server = shared.server(timeout=0.5)
    result, found, _, _ = await run_script(
        server,
        reply(tool_calls=[("hang", {"label": "t"})]),
        reply(tool_calls=[("look", {"name": "x"})]),
    )
    assert result.status is RunStatus.COMPLETED
    assert found[0] == (
        "hang",
        True,
        "MCP server 'fixture' did not answer 'hang' within 0.5s; the call was cancelled",
    )
    assert found[1][1] is False  # the connection is fine afterwards
    assert "hang t cancelled" in wait_for_text(shared.marker, "hang t cancelled")


async def test_stopping_the_run_cancels_the_call_on_the_server(shared: HttpFixture) -> None:
    options = RunOptions()

    def emit(event: Event) -> None:
        if isinstance(event, ToolProgress) and "hanging" in event.message:
            options.stop.set("enough")

    model = ScriptedModel([reply(tool_calls=[("hang", {"label": "s"})]), "never asked"])
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model, tools=[shared.server()]))
        result = await session.run("go", options=options, emit=emit)
        found = results(await session.transcript())
    assert result.status is RunStatus.STOPPED
    assert found == [("hang", True, "cancelled: the run was asked to stop (enough)")]
    assert "hang s cancelled" in wait_for_text(shared.marker, "hang s cancelled")


async def test_cancelling_the_run_cancels_the_call_on_the_server(shared: HttpFixture) -> None:
    hanging = asyncio.Event()

    def emit(event: Event) -> None:
        if isinstance(event, ToolProgress):
            hanging.set()

    model = ScriptedModel([reply(tool_calls=[("hang", {"label": "c"})])])
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model, tools=[shared.server()]))
        task = asyncio.ensure_future(session.run("go", emit=emit))
        await hanging.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert "hang c cancelled" in wait_for_text(shared.marker, "hang c cancelled")


async def test_a_name_clash_is_a_configuration_error_naming_both(shared: HttpFixture) -> None:
    @tool(effect=ToolEffect.READ_ONLY)
    def look(name: str) -> str:
        """A plain tool with the server's tool's name."""
        return name

    model = ScriptedModel([reply("never")])
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model, tools=[shared.server(), look]))
        with pytest.raises(ConfigurationError) as caught:
            await session.run("go")
        message = str(caught.value)
        assert "'look'" in message and "the agent's own tools" in message
        assert "MCPServer 'fixture'" in message
        # A prefix keeps them apart.
        prefixed = await runtime.create_session(
            Agent(
                "b",
                ScriptedModel(
                    [reply(tool_calls=[("fx_look", {"name": "n"}), ("look", {"name": "m"})]), "ok"]
                ),
                tools=[shared.server(prefix="fx"), look],
            )
        )
        await prefixed.run("go")
        found = results(await prefixed.transcript())
    assert found == [("fx_look", False, '{"result":"looked at n"}'), ("look", False, "m")]


async def test_two_servers_with_the_same_tools_clash_unless_prefixed(shared: HttpFixture) -> None:
    first = shared.server(name="one")
    second = shared.server(name="two")
    async with Runtime() as runtime:
        session = await runtime.create_session(
            Agent("a", ScriptedModel(["x"]), tools=[first, second])
        )
        with pytest.raises(ConfigurationError, match=r"MCPServer 'one'.*MCPServer 'two'"):
            await session.run("go")


async def test_sessions_of_a_runtime_share_one_connection(started: Started) -> None:
    server = fixture_stdio()

    async def one_session(runtime: Runtime) -> str:
        model = ScriptedModel([reply(tool_calls=[("whoami", {})]), "ok"])
        session = await runtime.create_session(Agent("a", model, tools=[server]))
        await session.run("go")
        return results(await session.transcript())[0][2]

    async with Runtime() as runtime:
        # Three sessions use the server for the first time at once: one start.
        pids = await asyncio.gather(*(one_session(runtime) for _ in range(3)))
        assert len(started.sample()) == 1
        connections = MCPConnections.of(runtime)
        assert connections.connection(server) is connections.connection(fixture_stdio())
    assert len(set(pids)) == 1
