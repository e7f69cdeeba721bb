"""Tree budgets: one ceiling for a root run and every run under it.

In process here (memory and SQLite; PostgreSQL in tests/distributed for
workers): charges before each request, refunds after, `max_tokens` lowered
to what is left, BUDGET_EXHAUSTED in band for a child, prices and their
errors.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from taskloom import (
    Agent,
    Budget,
    ConfigurationError,
    Price,
    RunOptions,
    RunStatus,
    Runtime,
    Usage,
)
from taskloom.backends.memory import MemoryBudgets
from taskloom.delegation import SubAgent
from taskloom.loop.ports import BudgetSpent
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply


def test_a_budget_needs_a_ceiling_and_sane_values() -> None:
    with pytest.raises(ConfigurationError, match="needs a ceiling"):
        Budget()
    with pytest.raises(ConfigurationError, match="tokens"):
        Budget(tokens=0)
    with pytest.raises(ConfigurationError, match="usd"):
        Budget(usd=-1)
    with pytest.raises(ConfigurationError, match="Price"):
        Budget(usd=1, prices={"m": (1, 2)})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="budget"):
        RunOptions(budget=100)  # type: ignore[arg-type]
    b = Budget(tokens=10, usd=1.5, prices={"m": Price(1, 2, 0.5)}, max_output_tokens=77)
    assert Budget.from_dict(b.to_dict()) == b


async def test_the_ledger_never_passes_a_ceiling_under_concurrent_charges() -> None:
    ledger = MemoryBudgets()
    await ledger.open("t", 1000, None)
    results = await asyncio.gather(*(ledger.charge("t", 300, 0) for _ in range(5)))
    assert sum(r is not None for r in results) == 3
    left = await ledger.left("t")
    assert left is not None and left.tokens == 100
    await ledger.refund("t", 250, 0)
    assert (await ledger.left("t")).tokens == 350  # type: ignore[union-attr]
    assert await ledger.charge("unknown", 1, 0) is None


def usage_model(output: int, text: str = "ok", name: str = "m") -> FunctionModel:
    """Answers `text`, reporting a token per four characters of its input (as
    a real tokenizer roughly does) and `output` tokens, or `max_tokens` if fewer."""

    def answer(request: ModelRequest) -> Any:
        chars = sum(len(json.dumps(m.to_dict())) for m in request.messages)
        cap = request.settings.max_tokens
        return reply(text, usage=Usage(chars // 4, output if cap is None else min(output, cap)))

    return FunctionModel(answer, name=name)


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
async def test_a_tree_of_children_stops_at_its_ceiling(url: str, tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path}/b.db" if url == "sqlite" else url
    child = SubAgent("helper", "Helps.", usage_model(400, "child answer"))
    calls = [("helper", {"task": f"part {i}"}, f"c{i}") for i in range(6)]
    parent_model = ScriptedModel(
        [reply(tool_calls=calls, usage=Usage(100, 50)), reply("done", usage=Usage(100, 50))]
    )
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(
            Agent("root", parent_model, tools=[child.tool()], settings=None)
        )
        budget = Budget(tokens=2000, max_output_tokens=400)
        result = await session.run("go", options=RunOptions(budget=budget))
        spent = result.usage.total_tokens
        print(f"usage reported under a 2,000-token ceiling: {spent}, status {result.status}")
        assert spent <= 2000
        # Not every child fit: some read that the budget ran out, in band.
        transcript = await session.transcript()
        results = [r for m in transcript for r in m.results]
        assert len(results) == 6
        exhausted = [r for r in results if "budget" in r.content]
        assert 0 < len(exhausted) < 6, [r.content for r in results]
        assert result.budget_left is not None
        assert result.budget_left.tokens == 2000 - spent


async def test_max_tokens_is_lowered_to_what_the_tree_has_left() -> None:
    model = usage_model(100)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model))
        result = await session.run("hi", options=RunOptions(budget=Budget(tokens=1000)))
    assert result.status is RunStatus.COMPLETED
    cap = model.requests[0].settings.max_tokens
    assert cap is not None and 256 <= cap < 1000  # the input bound took the rest
    assert result.budget_left is not None
    assert result.budget_left.tokens == 1000 - result.usage.total_tokens


async def test_a_request_that_cannot_fit_ends_the_run_budget_exhausted() -> None:
    model = usage_model(100)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model))
        result = await session.run("hi", options=RunOptions(budget=Budget(tokens=200)))
    assert result.status is RunStatus.BUDGET_EXHAUSTED
    assert "budget is spent" in (result.error or "")
    assert model.requests == []  # never sent


async def test_dollars_are_priced_per_model_and_an_unknown_price_is_an_error() -> None:
    priced = Budget(usd=0.01, prices={"m": Price(input=1.0, output=2.0)})
    model = usage_model(500)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model))
        result = await session.run("hi", options=RunOptions(budget=priced))
        assert result.status is RunStatus.COMPLETED
        assert result.budget_left is not None
        used = result.usage
        cost = (used.input_tokens * 1.0 + used.output_tokens * 2.0) / 1e6
        assert result.budget_left.usd == pytest.approx(0.01 - cost)
        unknown = await runtime.create_session(Agent("b", usage_model(10, name="nobody-knows")))
        with pytest.raises(ConfigurationError, match="no price known for model 'nobody-knows'"):
            await unknown.run("hi", options=RunOptions(budget=Budget(usd=1)))


async def test_the_price_table_prices_known_models() -> None:
    pytest.importorskip("genai_prices", reason="the prices extra is not installed")
    model = usage_model(1_000_000, name="gpt-4o")  # 1M out: $10
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("a", model))
        budget = Budget(usd=100, max_output_tokens=1_000_000)
        result = await session.run("hi", options=RunOptions(budget=budget))
    assert result.budget_left is not None
    cost = (result.usage.input_tokens * 2.5 + 1_000_000 * 10) / 1e6
    assert result.budget_left.usd == pytest.approx(100 - cost)


async def test_a_charged_request_keeps_every_field_but_its_cap() -> None:
    from dataclasses import fields

    from taskloom.loop.ports import TreeBudget
    from taskloom.messages import Message
    from taskloom.models import ModelRequest, ModelSettings
    from taskloom.results import ToolSpec

    ledger = MemoryBudgets()
    tree = TreeBudget(ledger, "t", Budget(tokens=10_000, max_output_tokens=500))
    await tree.open()
    request = ModelRequest(
        (Message.user("hi"),),
        "be brief",
        (ToolSpec("t", "a tool", {"type": "object"}),),
        ModelSettings(temperature=0.5),
        {"type": "object"},
        "answer",
        {},
    )
    charged, _ = await tree.reserve("m", request, 100)
    assert charged.settings.max_tokens == 500 and charged.settings.temperature == 0.5
    for f in fields(ModelRequest):
        if f.name != "settings":
            assert getattr(charged, f.name) is getattr(request, f.name), f.name


def test_cached_input_is_priced_once_whatever_the_provider_counts() -> None:
    price = Price(input=2.0, output=8.0, cached_input=0.5)
    # OpenAI: 10,000 input of which 9,000 cached; Anthropic: 1,000 input plus 9,000 cache reads.
    openai = Usage(10_000, 0, cache_read_tokens=9_000)
    anthropic = Usage(1_000, 0, cache_read_tokens=9_000)
    expected = (1_000 * 2.0 + 9_000 * 0.5) * 1000  # nano-dollars
    assert price.nano_usd(openai, "openai") == expected
    assert price.nano_usd(anthropic, "anthropic") == expected


async def test_a_thinking_request_keeps_room_for_its_thinking() -> None:
    from taskloom.loop.ports import TreeBudget
    from taskloom.messages import Message
    from taskloom.models import ModelRequest, ModelSettings, ReasoningOptions

    tree = TreeBudget(MemoryBudgets(), "t", Budget(tokens=100_000, max_output_tokens=4096))
    await tree.open()
    thinking = ModelSettings(reasoning=ReasoningOptions(budget_tokens=10_000))
    request = ModelRequest((Message.user("think"),), settings=thinking)
    charged, charge = await tree.reserve("m", request, 100, "anthropic")
    assert charged.settings.max_tokens == 14_096  # the answer's room plus the thinking's
    assert charge.tokens == 14_196
    # With less left than the thinking needs, the run ends instead of asking.
    small = TreeBudget(MemoryBudgets(), "s", Budget(tokens=9_000))
    await small.open()
    with pytest.raises(BudgetSpent):
        await small.reserve("m", request, 100, "anthropic")
