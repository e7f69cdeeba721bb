"""Tree budgets against usage a provider should never report, and ceilings
nobody should give.

A child whose provider reports negative usage (scripted, or over the real
OpenAI Chat wire from the fake server) must not give the tree budget it
never charged; one reporting 2^70 tokens must spend the tree and stop it,
charged, on every ledger (the SQLite and PostgreSQL columns are 64-bit);
nan, infinite, negative, zero and absurd ceilings and prices are refused
when the `Budget` is made.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pg import PG_DSN, open_durable, requires_postgres
from taskloom import (
    Agent,
    Budget,
    ConfigurationError,
    Price,
    RunOptions,
    RunResult,
    RunStatus,
    Runtime,
    Usage,
)
from taskloom.delegation import SubAgent
from taskloom.models import (
    FunctionModel,
    Model,
    ModelRequest,
    OpenAIChatModel,
    ScriptedModel,
    reply,
)
from taskloom.testing.fake_server import FakeServer

CEILING = 5_000
HELPERS = 6
SECRET_KEY = "sk-test-never-in-a-log-7f3a"


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)])
async def runtime(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Runtime]:
    """A runtime on each ledger taskloom ships."""
    if request.param == "memory":
        made = Runtime()
    elif request.param == "sqlite":
        made = Runtime(store=open_durable(f"sqlite:///{tmp_path / 'b.db'}", "-"))
    else:
        made = Runtime(store=open_durable(PG_DSN, request.getfixturevalue("pg_schema")))
    async with made:
        yield made


def honest_model(output: int) -> FunctionModel:
    """Reports a token per four characters of its input and `output` tokens
    (or its `max_tokens`, if fewer)."""

    def answer(request: ModelRequest) -> Any:
        chars = sum(len(json.dumps(m.to_dict())) for m in request.messages)
        cap = request.settings.max_tokens
        return reply("helped", usage=Usage(chars // 4, output if cap is None else min(output, cap)))

    return FunctionModel(answer, name="m")


def one_child_a_round(first: str, then: str, count: int) -> ScriptedModel:
    """A root that calls `first` once, then `then` `count` times, a child a round."""
    calls = [reply(tool_calls=[(first, {"task": "start"}, "c0")], usage=Usage(100, 20))]
    calls += [
        reply(tool_calls=[(then, {"task": f"part {i}"}, f"c{i + 1}")], usage=Usage(100, 20))
        for i in range(count)
    ]
    return ScriptedModel([*calls, reply("done", usage=Usage(100, 20))], name="m")


async def run_tree(runtime: Runtime, rogue: Model, helper: Model, budget: Budget) -> RunResult:
    tools = [
        SubAgent("rogue", "Answers.", rogue).tool(),
        SubAgent("helper", "Helps.", helper).tool(),
    ]
    root = one_child_a_round("rogue", "helper", HELPERS)
    session = await runtime.create_session(Agent("root", root, tools=tools, settings=None))
    return await session.run("go", options=RunOptions(budget=budget))


def out_of_range_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "usage out of range" in r.getMessage()]


@pytest.mark.parametrize("wire", ["scripted", "openai-chat"])
async def test_negative_usage_from_a_child_does_not_lift_the_tree_ceiling(
    runtime: Runtime, wire: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="taskloom")
    negative = Usage(-1_000_000, 20)
    helper = honest_model(800)
    budget = Budget(tokens=CEILING, max_output_tokens=800)
    if wire == "scripted":
        result = await run_tree(
            runtime, ScriptedModel([reply("rogue answer", usage=negative)]), helper, budget
        )
    else:
        async with FakeServer(api_key=SECRET_KEY) as server:
            server.script(FakeServer.reply("rogue answer", usage=negative))
            rogue = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key=SECRET_KEY)
            result = await run_tree(runtime, rogue, helper, budget)
            assert len(server.requests) == 1
    spent = result.usage.total_tokens
    helped = len(helper.requests)
    print(
        f"{wire}: {spent} tokens spent under {CEILING}, {helped} of {HELPERS} helpers asked, "
        f"left {result.budget_left}, status {result.status.value}"
    )
    assert result.usage.input_tokens >= 0  # the report counted as 0, not -1,000,000
    assert 0 <= spent <= CEILING
    assert result.budget_left is not None and result.budget_left.tokens == CEILING - spent
    assert helped < HELPERS  # the ceiling stopped the honest children as it should
    warnings = out_of_range_warnings(caplog)
    assert len(warnings) == 1, warnings  # once for the one response
    assert "-1000000" in warnings[0] and "input_tokens" in warnings[0]
    assert not [r for r in caplog.records if SECRET_KEY in r.getMessage()]


@pytest.mark.parametrize("ceiling", ["tokens", "usd"])
async def test_an_absurd_usage_spends_the_tree_and_stops_it(
    runtime: Runtime, ceiling: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="taskloom")
    rogue = ScriptedModel([reply("rogue answer", usage=Usage(2**70, 20))], name="m")
    helper = honest_model(100)
    if ceiling == "tokens":
        budget = Budget(tokens=CEILING, max_output_tokens=800)
    else:
        budget = Budget(usd=1.0, prices={"m": Price(1.0, 2.0)}, max_output_tokens=800)
    result = await run_tree(runtime, rogue, helper, budget)
    left = result.budget_left
    print(
        f"{ceiling}: status {result.status.value}, {len(helper.requests)} helpers asked, "
        f"left {left}, error {result.error!r}"
    )
    # The tree stopped at the root's next request: no other child ran.
    assert result.status is RunStatus.BUDGET_EXHAUSTED, result.error
    assert "budget is spent" in (result.error or "")
    assert helper.requests == []
    assert left is not None
    if ceiling == "tokens":
        assert left.tokens is not None and left.tokens < 0  # charged, past the ceiling
    else:
        assert left.usd is not None and left.usd < 0
    assert len(out_of_range_warnings(caplog)) == 1


def test_nan_infinite_negative_zero_and_absurd_ceilings_are_refused() -> None:
    refused: list[dict[str, Any]] = [
        {"usd": float("nan")},
        {"usd": float("inf")},
        {"usd": float("-inf")},
        {"usd": -1.0},
        {"usd": 0},
        {"usd": 1e30},
        {"usd": True},
        {"tokens": 0},
        {"tokens": -5},
        {"tokens": 2**70},
        {"tokens": float("inf")},
        {"tokens": float("nan")},
        {"tokens": 1.5},
        {"tokens": True},
        {"tokens": 10, "max_output_tokens": 2**70},
        {"tokens": 10, "max_output_tokens": 0},
    ]
    for kwargs in refused:
        field = next(k for k in ("max_output_tokens", "usd", "tokens") if k in kwargs)
        with pytest.raises(ConfigurationError, match=rf"Budget\({field}=") as caught:
            Budget(**kwargs)
        print(f"Budget(**{kwargs}): {caught.value}")
    for price in (float("nan"), float("inf"), -1.0, 1e30, "1"):
        with pytest.raises(ConfigurationError, match=r"Price\(input=") as caught:
            Price(price, 1.0)  # type: ignore[arg-type]
        print(f"Price({price!r}, 1.0): {caught.value}")
    with pytest.raises(ConfigurationError, match=r"Price\(cached_input="):
        Price(1.0, 1.0, float("nan"))
    # What is sane still is, at the edges.
    assert Budget(usd=1_000_000, tokens=10**15).nano_usd == 10**15
    assert Price(0, 1_000_000, 0).output == 1_000_000
