"""An agent run that uses MCP tools and plain tools in one turn: read-only
calls overlap (MCP ones included), a write call runs alone, and results come
back in the model's call order."""

from __future__ import annotations

import asyncio

from mcp_support import HttpFixture, results

from taskloom import Agent, RunStatus, Runtime, ToolEffect, tool
from taskloom.events import Event, ToolCallFinished, ToolCallStarted
from taskloom.models import ScriptedModel, reply


async def test_read_only_mcp_calls_overlap_with_plain_ones_and_results_keep_call_order(
    http_fixture: HttpFixture,
) -> None:
    both_mcp_calls_started = asyncio.Event()
    mcp_started: set[str] = set()
    order: list[tuple[str, str]] = []

    def emit(event: Event) -> None:
        if isinstance(event, ToolCallStarted):
            order.append(("started", event.call_id))
            if event.name == "meet":
                mcp_started.add(event.call_id)
                if len(mcp_started) == 2:
                    both_mcp_calls_started.set()
        elif isinstance(event, ToolCallFinished):
            order.append(("finished", event.call_id))

    @tool(effect=ToolEffect.READ_ONLY)
    async def check_notes() -> str:
        """A plain read-only tool: it answers once both MCP calls are under way."""
        try:
            async with asyncio.timeout(20):
                await both_mcp_calls_started.wait()
        except TimeoutError:
            return "alone"
        return "together"

    @tool
    def write_note(text: str) -> str:
        """A plain write tool (runs alone)."""
        return f"wrote {text}"

    calls = [
        ("meet", {"label": "a", "group": "overlap", "size": 2}, "mcp-a"),
        ("check_notes", {}, "plain-r"),
        ("meet", {"label": "b", "group": "overlap", "size": 2}, "mcp-b"),
        ("write_note", {"text": "x"}, "plain-w"),
    ]
    model = ScriptedModel([reply(tool_calls=calls), "done"])
    agent = Agent("mixed", model, tools=[http_fixture.server(), check_notes, write_note])
    async with Runtime() as runtime:
        session = await runtime.create_session(agent)
        result = await session.run("go", emit=emit)
        found = results(await session.transcript())
    assert result.status is RunStatus.COMPLETED
    # Each MCP call passed the server's barrier only because the other was
    # there at the same time; the plain one answered while both were running.
    assert found == [
        ("meet", False, '{"result":"a: met 2"}'),
        ("check_notes", False, "together"),
        ("meet", False, '{"result":"b: met 2"}'),
        ("write_note", False, "wrote x"),
    ]
    first_finish = next(i for i, (what, _) in enumerate(order) if what == "finished")
    assert {c for what, c in order[:first_finish] if what == "started"} == {
        "mcp-a",
        "plain-r",
        "mcp-b",
    }
    # The write call started after every read-only call had finished.
    assert order[-2:] == [("started", "plain-w"), ("finished", "plain-w")]
