"""Approvals are bound to the turn, not just the call id.

Some OpenAI-compatible servers number tool calls per response, so the id
`call_0` comes back in every turn. An approval given in turn 1 must not
approve turn 2's `call_0` (with other arguments, or even the same ones);
turn 2 parks again, can be denied or approved on its own, and the session
never wedges.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (fixture)
from taskloom import Agent, RunStatus, Runtime, Session, tool
from taskloom.backends import open_backend
from taskloom.errors import ApprovalsMissing
from taskloom.models import FunctionModel, ModelRequest, Reply, reply

paid: list[int] = []


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay `amount` (needs approval)."""
    paid.append(amount)
    return f"paid {amount}"


def call_zero_model() -> FunctionModel:
    """Answers "pay N" with a gated `pay` call whose id is always `call_0`;
    answers a tool result with `ok: ...` or `error: ...`."""

    def answer(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "tool":
            result = last.results[0]
            return reply(f"{'error' if result.is_error else 'ok'}: {result.content}")
        return reply(tool_calls=[("pay", {"amount": int(last.text.split()[-1])}, "call_0")])

    return FunctionModel(answer, name="call-zero")


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    paid.clear()
    yield
    paid.clear()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=requires_postgres)])
async def runtime(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Runtime]:
    if request.param == "memory":
        rt = Runtime()
    elif request.param == "sqlite":
        rt = Runtime(store=open_backend(f"sqlite:///{tmp_path / 'binding.db'}").store)
    else:
        rt = Runtime(store=open_backend(PG_DSN, schema=request.getfixturevalue("pg_schema")).store)
    yield rt
    await rt.close()


async def first_turn_paid(runtime: Runtime) -> tuple[Session, FunctionModel]:
    """Turn 1: `call_0` pay 1 parks, is approved, and runs."""
    model = call_zero_model()
    session = await runtime.create_session(Agent("payer", model, tools=[pay]))
    parked = await session.run("pay 1")
    assert parked.status is RunStatus.AWAITING_APPROVAL
    assert [(p.id, p.arguments) for p in parked.pending] == [("call_0", {"amount": 1})]
    await session.approve("call_0")
    done = await session.resume()
    assert (done.status, done.text, paid) == (RunStatus.COMPLETED, "ok: paid 1", [1])
    return session, model


async def parks_again(session: Session, amount: int) -> str:
    """Turn 2 asks for `call_0` pay `amount`: it parks; returns the pending id."""
    parked = await session.run(f"pay {amount}")
    assert parked.status is RunStatus.AWAITING_APPROVAL, "turn 1's approval let turn 2 through"
    assert [(p.name, p.arguments) for p in parked.pending] == [("pay", {"amount": amount})]
    assert paid == [1]
    try:
        await session.resume()
    except ApprovalsMissing:
        pass
    else:
        pytest.fail(f"resume() ran turn 2's call on turn 1's approval (paid {paid})")
    assert paid == [1]
    return parked.pending[0].id


async def not_wedged(session: Session) -> None:
    """A further turn with `call_0` parks, is approved, and runs."""
    parked = await session.run("pay 7")
    assert parked.status is RunStatus.AWAITING_APPROVAL
    await session.approve(parked.pending[0].id)
    assert (await session.resume()).status is RunStatus.COMPLETED
    assert paid[-1] == 7


@pytest.mark.parametrize("amount", [999, 1], ids=["new-arguments", "same-arguments"])
async def test_a_reused_call_id_parks_again_and_can_be_denied(
    runtime: Runtime, amount: int
) -> None:
    session, model = await first_turn_paid(runtime)
    call_id = await parks_again(session, amount)
    await session.deny(call_id, note="not again")  # its own decision: no ApprovalConflict
    result = await session.resume()
    assert result.status is RunStatus.COMPLETED and paid == [1]
    assert result.text.startswith("error:") and "not again" in result.text
    denial = model.requests[-1].messages[-1].results[0]
    assert denial.is_error and "denied" in denial.content
    await not_wedged(session)
    assert paid == [1, 7]


@pytest.mark.parametrize("amount", [999, 1], ids=["new-arguments", "same-arguments"])
async def test_a_reused_call_id_can_be_approved_again(runtime: Runtime, amount: int) -> None:
    session, _ = await first_turn_paid(runtime)
    call_id = await parks_again(session, amount)
    await session.approve(call_id)
    result = await session.resume()
    assert (result.status, result.text) == (RunStatus.COMPLETED, f"ok: paid {amount}")
    assert paid == [1, amount]
    await not_wedged(session)
