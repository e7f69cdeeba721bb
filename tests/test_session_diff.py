"""Diffing two sessions round by round, in the library and with `taskloom sessions diff`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from taskloom import Agent, Runtime, ToolEffect, Usage, tool
from taskloom.cli import main
from taskloom.models import ScriptedModel, reply
from taskloom.runtime import diff_sessions, rounds_of


@tool(effect=ToolEffect.READ_ONLY)
def convert(amount: float, unit: str) -> str:
    """Convert an amount."""
    return f"{amount} {unit}"


def script(unit: str, final: str = "done") -> ScriptedModel:
    return ScriptedModel(
        [
            reply(
                "looking",
                tool_calls=[("convert", {"amount": 1.0, "unit": "m"})],
                usage=Usage(10, 2),
            ),
            reply(tool_calls=[("convert", {"amount": 2.0, "unit": unit})], usage=Usage(12, 3)),
            reply(final, usage=Usage(14, 4)),
        ]
    )


async def two_runs(store: str, second_unit: str = "ft", final: str = "done") -> tuple[str, str]:
    async with Runtime(store=store) as runtime:
        ids = []
        for unit in ("km", second_unit):
            session = await runtime.create_session(
                Agent("a", script(unit, final if unit != "km" else "done"), tools=[convert])
            )
            await session.run("convert things")
            ids.append(session.id)
        return ids[0], ids[1]


async def test_one_changed_argument_is_named_with_its_round() -> None:
    async with Runtime() as runtime:
        a = await runtime.create_session(Agent("a", script("km"), tools=[convert]))
        b = await runtime.create_session(Agent("a", script("ft"), tools=[convert]))
        await a.run("convert things")
        await b.run("convert things")
        found = diff_sessions(await a.entries(), await b.entries(), a_id=a.id, b_id=b.id)
    first = found.first()
    assert first is not None
    assert (first.round, first.aspect, first.path) == (
        2,
        "tool_calls",
        "tool_calls[0].arguments.unit",
    )
    assert (first.a, first.b) == ("km", "ft")
    results = found.first("results")
    assert results is not None
    assert (results.round, results.path, results.a, results.b) == (
        2,
        "results[0].content",
        "2.0 km",
        "2.0 ft",
    )
    assert found.first("message") is None and found.first("usage") is None
    assert "tool calls first differ at round 2: tool_calls[0].arguments.unit" in found.render()


async def test_identical_runs_have_no_difference_and_usage_is_compared() -> None:
    async with Runtime() as runtime:
        a = await runtime.create_session(Agent("a", script("km"), tools=[convert]))
        b = await runtime.create_session(Agent("a", script("km"), tools=[convert]))
        await a.run("convert things")
        await b.run("convert things")
        same = diff_sessions(await a.entries(), await b.entries())
        assert same.identical
        assert [r.usage for r in rounds_of(await a.entries())] == [
            Usage(10, 2, requests=1).to_dict(),
            Usage(12, 3, requests=1).to_dict(),
            Usage(14, 4, requests=1).to_dict(),
        ]
        cheaper = ScriptedModel(
            [
                reply(
                    "looking",
                    tool_calls=[("convert", {"amount": 1.0, "unit": "m"})],
                    usage=Usage(10, 2),
                ),
                reply(tool_calls=[("convert", {"amount": 2.0, "unit": "km"})], usage=Usage(9, 3)),
                reply("done", usage=Usage(14, 4)),
                reply("and more"),
            ]
        )
        c = await runtime.create_session(Agent("a", cheaper, tools=[convert]))
        await c.run("convert things")
        await c.run("again")
        found = diff_sessions(await a.entries(), await c.entries())
    usage = found.first("usage")
    assert usage is not None and (usage.round, usage.path, usage.a, usage.b) == (
        2,
        "usage.input_tokens",
        12,
        9,
    )
    extra = found.first("rounds")
    assert extra is not None and extra.round == 4 and extra.a is None
    assert extra.b == {"message": "and more", "tool_calls": []}


def test_the_cli_names_the_argument_and_its_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'diff.db'}"
    a, b = asyncio.run(two_runs(store))
    assert main(["sessions", "diff", a, b, "--store", store]) == 1
    out = capsys.readouterr().out
    assert "tool calls first differ at round 2: tool_calls[0].arguments.unit" in out
    assert '"km" -> "ft"' in out
    assert main(["sessions", "diff", a, b, "--json", "--store", store]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["first"]["tool_calls"] == {
        "round": 2,
        "aspect": "tool_calls",
        "path": "tool_calls[0].arguments.unit",
        "a": "km",
        "b": "ft",
    }
    assert data["rounds"] == {"a": 3, "b": 3}
    assert main(["sessions", "diff", a, a, "--store", store]) == 0
    assert "identical in every round" in capsys.readouterr().out
