"""A tree's ceiling across a crash, and across approvals and escalations.

A process running a tree (a root and an inline child) under
`Budget(tokens=N)` is SIGKILLed in the root's model request, on SQLite and
on PostgreSQL; a new process goes on with the session, given the same
`Budget`. It charges the crashed tree: what the tree has left goes on from
what was spent before the crash (the request cut off stays charged at its
worst case), never from a fresh N, and a tree spent before the crash stops
the run at its first request. A background child taken up after the crash
charges the same tree as the root that goes on. A run resumed after
approval, and a child resumed once its escalated call is decided, charge
their tree on too (in process).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import (
    Agent,
    Budget,
    ModelRequest,
    RunOptions,
    RunStatus,
    Runtime,
    Usage,
    tool,
)
from taskloom.delegation import ChildStatus, Spawner, SubAgent, TaskDispatcher, child_status
from taskloom.entries import EntryKind, RunStartedEntry, SubagentLink
from taskloom.models import FunctionModel, reply
from taskloom.results import BudgetLeft
from test_crash import Child, open_runtime

HELPER_USAGE = Usage(300, 200)
LEAD_USAGE = Usage(100, 20)


def tree_agent(lead: FunctionModel) -> Agent:
    """crash_child.py's `tree_agent`: root `lead`, whose tool `helper`
    answers "part done" inline."""
    helper_model = FunctionModel(lambda r: reply("part done", usage=HELPER_USAGE), name="small")
    helper = SubAgent("helper", "Helps with one part.", model=helper_model)
    return Agent("lead", lead, tools=[helper.tool()])


def background_tree_agent(lead: FunctionModel, child: FunctionModel) -> Agent:
    """crash_child.py's `background_tree_agent`: root `lead`, whose
    `spawn_agent` runs `child` in the background."""
    return Agent("lead", lead, tools=[Spawner(child, dispatcher=TaskDispatcher())])


def resuming_lead(request: ModelRequest) -> Any:
    """Hands a second part to the helper, then answers."""
    if request.messages[-1].role == "tool" and "c2" not in {
        c.id for m in request.messages for c in m.tool_calls
    }:
        return reply(tool_calls=[("helper", {"task": "part two"}, "c2")], usage=LEAD_USAGE)
    return reply("All parts done.", usage=LEAD_USAGE)


async def crash_a_tree(
    runtime: Runtime, store_url: tuple[str, str], tmp_path: Path, tokens: int, max_output: int
) -> tuple[str, BudgetLeft]:
    """A tree under Budget(tokens, max_output) killed in its root's second
    request; the root's id and what its tree had left then."""
    lead = FunctionModel(resuming_lead, name="small")
    session = await runtime.create_session(tree_agent(lead))
    effects = tmp_path / "effects.txt"
    effects.touch()
    child = Child(f"tree-{tokens}-{max_output}", *store_url, session.id, effects)
    try:
        child.wait_for("during-model")
    finally:
        child.kill()
    entries = await runtime.store.load(session.id)
    [started] = [e for e in entries if e.kind == EntryKind.RUN_STARTED]
    # The crashed root run's tree, as the ledger has it.
    left = await runtime.budgets.left(f"tree-{started.run_id}")
    assert left is not None and left.tokens is not None
    return session.id, left


@pytest.mark.slow
async def test_a_tree_resumed_after_a_crash_goes_on_from_what_it_spent(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    ceiling = 20_000
    runtime = open_runtime(*store_url)
    try:
        root_id, before = await crash_a_tree(runtime, store_url, tmp_path, ceiling, 1000)
        assert before.tokens is not None
        # The root's and the child's answers, and the request cut off at its worst case.
        spent = ceiling - before.tokens
        assert spent > LEAD_USAGE.total_tokens + HELPER_USAGE.total_tokens + 1000
        lead = FunctionModel(resuming_lead, name="small")
        session = await runtime.open_session(root_id, tree_agent(lead))
        budget = Budget(tokens=ceiling, max_output_tokens=1000)
        result = await session.run(None, options=RunOptions(budget=budget))
        assert result.status is RunStatus.COMPLETED, result.error
        assert result.text == "All parts done."
        # The resumed root's two requests and its new child's, charged on.
        assert result.usage.total_tokens == 2 * LEAD_USAGE.total_tokens + HELPER_USAGE.total_tokens
        assert result.budget_left is not None
        assert result.budget_left.tokens == before.tokens - result.usage.total_tokens
    finally:
        await runtime.close()


@pytest.mark.slow
async def test_a_tree_spent_before_a_crash_stops_after_it(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    # Requests may write up to the whole ceiling: the one cut off holds all
    # that was left.
    ceiling = 3_000
    runtime = open_runtime(*store_url)
    try:
        root_id, before = await crash_a_tree(runtime, store_url, tmp_path, ceiling, ceiling)
        assert before.tokens == 0
        lead = FunctionModel(resuming_lead, name="small")
        session = await runtime.open_session(root_id, tree_agent(lead))
        budget = Budget(tokens=ceiling, max_output_tokens=ceiling)
        result = await session.run(None, options=RunOptions(budget=budget))
        assert result.status is RunStatus.BUDGET_EXHAUSTED
        assert result.error is not None and f"0 tokens left of {ceiling}" in result.error
        assert result.model_requests == 0
    finally:
        await runtime.close()


paid: list[int] = []


@tool(needs_approval=True)
async def pay(amount: int) -> str:
    """Pay an invoice (a person approves each payment)."""
    paid.append(amount)
    return f"paid {amount}"


def payer(request: ModelRequest) -> Any:
    """Pays once, then answers with the payment's result."""
    results = [r.content for m in request.messages for r in m.results]
    if not results:
        return reply(tool_calls=[("pay", {"amount": 70})], usage=HELPER_USAGE)
    return reply(f"done: {results[-1]}", usage=HELPER_USAGE)


async def test_a_run_resumed_after_approval_charges_its_tree_on(
    store_url: tuple[str, str],
) -> None:
    ceiling = 20_000
    budget = Budget(tokens=ceiling, max_output_tokens=1000)
    async with open_runtime(*store_url) as runtime:
        session = await runtime.create_session(Agent("payer", FunctionModel(payer), tools=[pay]))
        parked = await session.run("Pay it.", options=RunOptions(budget=budget))
        assert parked.status is RunStatus.AWAITING_APPROVAL
        assert parked.budget_left == BudgetLeft(ceiling - HELPER_USAGE.total_tokens, None)
        [call] = await session.pending()
        await session.approve(call.id)
        # Given the budget again, or not at all: the parked run's tree either way.
        final = await session.resume(options=RunOptions(budget=budget))
        assert (final.status, paid[-1:]) == (RunStatus.COMPLETED, [70])
        assert final.budget_left == BudgetLeft(ceiling - 2 * HELPER_USAGE.total_tokens, None)


async def test_a_resume_without_the_budget_still_charges_the_parked_runs_tree() -> None:
    tight = Budget(tokens=HELPER_USAGE.total_tokens + 300, max_output_tokens=1000)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("payer", FunctionModel(payer), tools=[pay]))
        parked = await session.run("Pay it.", options=RunOptions(budget=tight))
        assert parked.status is RunStatus.AWAITING_APPROVAL
        [call] = await session.pending()
        await session.approve(call.id)
        final = await session.resume()
        # The payment ran; the answer after it does not fit in what the tree has left.
        assert final.status is RunStatus.BUDGET_EXHAUSTED
        assert final.error is not None and "tokens left of" in final.error


async def test_a_fork_of_a_parked_run_charges_a_tree_of_its_own() -> None:
    # The fork holds a copy of its origin's parked run, tree and all: its
    # first run opens a tree for the budget it is given, never the origin's.
    tight = Budget(tokens=HELPER_USAGE.total_tokens + 300, max_output_tokens=1000)
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("payer", FunctionModel(payer), tools=[pay]))
        parked = await session.run("Pay it.", options=RunOptions(budget=tight))
        assert parked.status is RunStatus.AWAITING_APPROVAL
        fork = await session.fork()
        roomy = Budget(tokens=20_000, max_output_tokens=1000)
        asked = await fork.run(None, options=RunOptions(budget=roomy))
        # The gated call is asked about again, in a tree with all of `roomy` left.
        assert asked.status is RunStatus.AWAITING_APPROVAL
        assert asked.budget_left == BudgetLeft(20_000, None)
        starts = [e for e in await fork.entries() if e.kind == EntryKind.RUN_STARTED]
        trees = [RunStartedEntry.from_data(e.data).tree for e in starts]
        assert trees[0] is not None and trees[1] is not None
        assert trees[1]["tree"] != trees[0]["tree"]


def escalating_lead(request: ModelRequest) -> Any:
    results = [r.content for m in request.messages for r in m.results]
    if results:
        return reply("lead done", usage=LEAD_USAGE)
    return reply(tool_calls=[("treasurer", {"task": "Pay the invoice."})], usage=LEAD_USAGE)


async def test_a_child_resumed_after_its_escalation_charges_the_tree_on(
    store_url: tuple[str, str],
) -> None:
    ceiling = 20_000
    budget = Budget(tokens=ceiling, max_output_tokens=1000)
    treasurer = SubAgent(
        "treasurer", "Pays.", FunctionModel(payer), tools=[pay], on_approval="escalate"
    )
    agent = Agent("lead", FunctionModel(escalating_lead), tools=[treasurer.tool()])
    async with open_runtime(*store_url) as runtime:
        root = await runtime.create_session(agent)
        first = await root.run("Pay the invoice.", options=RunOptions(budget=budget))
        assert first.status is RunStatus.AWAITING_APPROVAL
        # The root's request and the child's, which parked on its call.
        spent = LEAD_USAGE.total_tokens + HELPER_USAGE.total_tokens
        assert first.budget_left == BudgetLeft(ceiling - spent, None)
        [pending] = await root.pending()
        await root.approve(pending.id)
        await runtime.background.wait_kept()
        final = await root.resume(options=RunOptions(budget=budget))
        assert (final.status, final.text) == (RunStatus.COMPLETED, "lead done")
        # The child's answer after the payment, then the root's.
        spent += HELPER_USAGE.total_tokens + LEAD_USAGE.total_tokens
        assert final.budget_left == BudgetLeft(ceiling - spent, None)


def answering_child(request: ModelRequest) -> Any:
    return reply("forty-two", usage=HELPER_USAGE)


def waiting_lead(request: ModelRequest) -> Any:
    return reply("waiting for the worker", usage=LEAD_USAGE)


@pytest.mark.slow
async def test_a_background_child_taken_up_after_a_crash_charges_the_tree_its_root_goes_on_with(
    store_url: tuple[str, str], tmp_path: Path
) -> None:
    """Root and background child killed in their model requests; the root's
    next run (a new process) takes the child up, and both charge the tree
    the crashed root opened."""
    ceiling = 20_000
    budget = Budget(tokens=ceiling, max_output_tokens=1000)
    child_model = FunctionModel(answering_child, name="deep")
    # The child is rebuilt from this runtime's registries (its spec names "deep").
    runtime = Runtime(store=open_durable(*store_url), models=[child_model])
    try:
        agent = background_tree_agent(FunctionModel(waiting_lead, name="small"), child_model)
        session = await runtime.create_session(agent)
        effects = tmp_path / "effects.txt"
        effects.touch()
        child = Child(f"tree-bg-{ceiling}-1000", *store_url, session.id, effects)
        try:
            child.wait_for("during-model")
        finally:
            child.kill()
        [started] = [e for e in await session.entries() if e.kind == EntryKind.RUN_STARTED]
        tree_id = f"tree-{started.run_id}"
        before = await runtime.budgets.left(tree_id)
        assert before is not None and before.tokens is not None
        assert ceiling - before.tokens > LEAD_USAGE.total_tokens + 2 * 1000  # two cut off
        result = await session.run(None, options=RunOptions(budget=budget))
        assert result.status is RunStatus.COMPLETED, result.error
        [link] = [e.payload for e in await session.entries() if isinstance(e.payload, SubagentLink)]
        async with asyncio.timeout(30):
            while await child_status(runtime, link.child_session_id) is not ChildStatus.DONE:
                await asyncio.sleep(0.02)
        left = await runtime.budgets.left(tree_id)
        spent = LEAD_USAGE.total_tokens + HELPER_USAGE.total_tokens  # the root's and the child's
        assert left == BudgetLeft(before.tokens - spent, None)
    finally:
        await runtime.close()


async def test_a_resume_given_another_budget_keeps_the_trees_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ceiling = 20_000
    async with Runtime() as runtime:
        session = await runtime.create_session(Agent("payer", FunctionModel(payer), tools=[pay]))
        first = RunOptions(budget=Budget(tokens=ceiling, max_output_tokens=1000))
        await session.run("Pay it.", options=first)
        [call] = await session.pending()
        await session.approve(call.id)
        bigger = RunOptions(budget=Budget(tokens=10 * ceiling, max_output_tokens=1000))
        with caplog.at_level("WARNING", logger="taskloom"):
            final = await session.resume(options=bigger)
        assert final.budget_left == BudgetLeft(ceiling - 2 * HELPER_USAGE.total_tokens, None)
        assert "keeps that tree's budget" in caplog.text
